"""Words a person reads: counts ("1 test input", "2 test inputs"), values echoed in a message (bounded), and a
console that never fails on a character it cannot show."""

from __future__ import annotations

import argparse
import logging
import math
import numbers
import os
import shlex
import sys
from typing import Callable


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one (`plural` where adding an "s" is wrong); thousands separated.
    A count that is no number (the text '3': format's "Cannot specify ','") is a TypeError naming `n`, a NaN or an
    infinity ("nan steps") a ValueError."""
    if not isinstance(n, numbers.Real):
        raise TypeError(f"n={clipped(n, 40)}: expected a number to count, got {type_name(n)}")
    if not math.isfinite(n):
        raise ValueError(f"n={n!r}: expected a finite number to count")
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def shown(name: str, limit: int = 60) -> str:
    """A name read from a file (a task id) as one line may show it: control characters escaped (an escape
    sequence would colour the terminal, a newline split a table row) and a long one cut with "...". A name that
    is no text (5: "'int' object is not subscriptable") is a TypeError naming `name`."""
    if not isinstance(name, str):
        raise TypeError(f"name={clipped(name, 40)}: expected a text to show, got {type_name(name)}")
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name[:limit + 1])
    return text if len(name) <= limit and len(text) <= limit else text[:limit - 3] + "..."


def one_line(text: str) -> str:
    """`text` as one terminal line: control characters escaped (a newline in a file's name once split an `error:`
    line in two, an escape sequence in one cleared the screen); nothing cut."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def path_word(path: str | os.PathLike) -> str:
    """`path` as a word of a command line: `./-sw` for a relative path that starts with `-`, which a command (argparse,
    sbatch) would otherwise read as an option, and the rest as they are. `Path("./-sw")` says `-sw`: the `./` it
    dropped is put back here, for a child's argument as for a printed command."""
    text = os.fspath(path)
    return "./" + text if text.startswith("-") else text


def shell_word(word: str) -> str:
    """`word` quoted as bash reads it back: `shlex.quote`, and `$'...'` with escapes (`\\n`, `\\x1b`, `\\xc2\\xa0`)
    for a word holding a character no terminal shows as itself. A newline escaped inside single quotes ('a\\nb') was
    pasted as a backslash and an n, naming another folder."""
    if all(c.isprintable() for c in word):
        return shlex.quote(word)
    return "$'" + "".join(_ANSI_C_ESCAPES.get(c) or (c if c.isprintable() else _ansi_c_code(c)) for c in word) + "'"


#: The characters `$'...'` writes with a backslash: its own quote and backslash, and the named control characters.
_ANSI_C_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b",
                   "\f": "\\f", "\v": "\\v", "\x1b": "\\E"}


def _ansi_c_code(c: str) -> str:
    """One unshown character in bash's `$'...'` form: its UTF-8 bytes as `\\xHH` each (U+00A0 is `\\xc2\\xa0`), and a
    byte a file name holds that is no UTF-8 (Python reads it as a surrogate, U+DC80 to U+DCFF) as that byte. Bash
    expands `\\uHHHH` by the locale (under LC_ALL=C `$'\\u00a0'` stays the six characters, another folder's name);
    bytes paste the same in every locale."""
    try:
        data = c.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no file name holds: its bytes as Python writes them
        data = c.encode("utf-8", "surrogatepass")
    return "".join(f"\\x{b:02x}" for b in data)


def command_line(*words: object) -> str:
    """A command a person pastes into a shell (`trm-kaggle compare DIR`, `sbatch FILE`), one line, each word quoted
    as the shell reads it back (`shell_word`): a folder named `a b$(id)` split in two and ran `id` when pasted
    unquoted. A path is given as a `Path` and written as `path_word` writes it (`sbatch -dash/r1.sbatch` was read as
    sbatch's option -d); any other word (an option, a name) as it is."""
    return " ".join(shell_word(path_word(w) if isinstance(w, os.PathLike) else str(w)) for w in words)


def escaped_echo(echo: Callable[[str], None]) -> Callable[[str], None]:
    """`echo`, given each message as one line with its control characters escaped, newlines included: a path in it
    may be a folder's name found below a kernel's inputs or a state an attached record names, and a newline there
    forged a second line of the log."""
    return lambda text: echo(one_line(text))


def clipped(value: object, limit: int = 80) -> str:
    """`repr(value)` for a one-line message, at most about `limit` characters: a value typed or read from a file
    may be megabytes long (a pasted file), or nested lists that share their items (a YAML alias bomb: bytes on
    disk, gigabytes as text), and its message stays one short line. The text is built bounded
    (`reprlib`), never whole and then cut."""
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother = 3, limit, limit
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 6
    text = short.repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def type_name(value: object) -> str:
    """`numpy.ndarray`, `dict`: the type of a wrong argument or a rule's wrong value, as its writer knows it."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def escape_what_the_console_cannot_show() -> None:
    """Standard output and error escape (`\\xe9`) what their encoding cannot encode, instead of raising: under
    LC_ALL=C or PYTHONIOENCODING=ascii a task id such as `é-tâche` must not cost a command its report or its
    exit status. Files are another matter: the package writes them as UTF-8 whatever the locale."""
    for stream in (sys.stdout, sys.stderr):
        # surrogateescape (the C locale's) fails on é as strict does
        if getattr(stream, "errors", None) in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


class OneLineFormatter(logging.Formatter):
    """A log record as one terminal line: a message quotes names read from files (a task file's path, an id, a
    folder found in a kernel's inputs), whose escape sequences would reach the terminal and whose newlines would
    forge a second line (`one_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record))


def log_one_line_each(level: int, *, force: bool = False) -> None:
    """The package's log records on stderr as `LEVEL: message`, each one escaped line (`OneLineFormatter`): how
    the CLI and the Kaggle kernels say them. `force` replaces handlers already set (a notebook run again)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(levelname)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=force)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose error line quotes what was typed escaped (`one_line`): "unrecognized arguments: --x\x1b[2J"
    reached the terminal raw, an escape sequence that cleared it or set its title. Every parser of the package's
    commands is one."""

    def error(self, message: str):
        super().error(one_line(message))
