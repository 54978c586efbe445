"""Names read from data: which task ids are legal, and how any such name becomes a file name.

A task id comes from a file we did not write, and it ends up in puzzle names (joined with
the augmentation separator `|||`), in reports, in submissions and in file names. Run names, subset
names and the relative paths a record lists (`contents.json`) follow the same rule
(`name_problem`, `relative_path_problem`): none leaves the folder it is joined to. Two rules:

* `task_id_problem` decides at load time (`trm_kaggle.data.arc.tasks`, the one task reader):
  1..MAX_TASK_ID characters, printable, none of `/ \\ :` or NUL, not `.` or `..`, no `|||`,
  not `<blank>` (the name of the blank puzzle identifier 0, `BLANK_NAME`).
  Kaggle's ids (8 hex digits) and every id of the ARC repositories pass.
* `safe_filename` / `file_in` turn any name into a path that stays inside its folder,
  whatever the name holds (ids of older datasets, names typed by hand): characters other
  than letters, digits, `-`, `_` and `.` are %-encoded, a leading dot is encoded, and a long
  name is cut and ends with a hash of the whole name so that distinct names stay distinct.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

SEPARATOR = "|||"  # joins a task id and its augmentation in puzzle names (upstream's convention)
#: identifiers.json's name of the blank puzzle identifier 0 and of the unused ones upstream's builder leaves below
#: its first (`trm_kaggle.data.format.BLANK_IDENTIFIER` is this one): no task or puzzle may take it (a grid puzzle
#: so named took identifier 0, and its examples trained under the blank row)
BLANK_NAME = "<blank>"
MAX_TASK_ID = 128
MAX_FILE_STEM = 120  # bytes; file systems allow 255, suffixes and temporary-file prefixes need the rest

_FORBIDDEN = set("/\\:\x00")
_PLAIN = re.compile(r"[A-Za-z0-9_\-.]")


def shown(name: str) -> str:
    """`name` for a one-line message: quoted, escaped and cut at 40 characters."""
    return repr(name[:40]) + ("..." if len(name) > 40 else "")


def name_problem(name: object) -> str | None:
    """Why `name` cannot be one plain folder or file name inside its parent (None when it can): 1..MAX_TASK_ID
    printable characters, none of `/ \\ :` or NUL, not `.` or `..`. A name given by a user or read from a file
    (a run name, a subset) that becomes a path is checked here, so that it never leaves its folder."""
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    shown_name = shown(name)
    if not 1 <= len(name) <= MAX_TASK_ID:
        return f"{shown_name} must have 1 to {MAX_TASK_ID} characters (has {len(name)})"
    if name in (".", ".."):
        return f"{shown_name} is not a name"
    bad = sorted({c for c in name if c in _FORBIDDEN or not c.isprintable()})
    if bad:
        return (f"{shown_name} holds {', '.join(repr(c) for c in bad)} (path separators and control characters are "
                "refused)")
    return None


def blank_path_problem(value: object, wanted: str = "a folder or a file",
                       otherwise: str = "`.` for the current folder") -> str | None:
    """Why `value`, a path setting (a text or a list of texts), cannot be taken, or None: an empty or blank text,
    an unset shell variable's, which the system reads as the current folder. One such value made a pipeline write
    its stage folders among the user's own, and a comparison replace the folder it stood in. Every command, config
    and notebook that takes a path asks here; the caller puts the setting's name before the words."""
    if isinstance(value, (str, bytes)) and not value.strip():
        return f"is empty: name {wanted} ({otherwise})"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (str, bytes)) and not v.strip() for v in value):
        return f"holds an empty name: name each as {wanted} ({otherwise})"
    return None


def current_folder_problem() -> str | None:
    """Why the process's current folder cannot be used, or None: one deleted after the shell entered it ended torch's
    import in C (oneMKL cannot load its library: "Intel oneMKL FATAL ERROR"), and a relative path there in "No
    such file or directory" naming no file. Asked before any command's work."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return ("the current folder no longer exists (it was deleted or moved after this shell entered it): cd to an "
                "existing folder and run the command again")
    except OSError as e:  # a folder above it this user may not search
        return f"the current folder cannot be read ({e.strerror or e}): cd to a folder of your own and run it again"
    return None


def umask_problem() -> str | None:
    """Why the process's umask cannot be worked under, or None: one that takes the owner's own read, write or search
    permission (0777, 0700) makes every folder a command creates one it cannot enter: `train` left an empty mode-000
    run folder, and its next run blamed a file in it. Asked before any command's work."""
    mask = os.umask(0o022)  # read by setting it, and set back at once: nothing is created in between
    os.umask(mask)
    if mask & 0o700:
        return (f"the umask {mask:04o} takes the owner's own permissions from every file and folder a command makes "
                "(they could not be read back): set one that keeps them (umask 022 or 077) and run it again")
    return None


def relative_path_problem(rel: object) -> str | None:
    """Why `rel`, a relative path read from a file (`a/b.npy`, POSIX separators), could leave the folder it is
    joined to, or None: every part is a plain name (`name_problem`), so no absolute path and no `..`."""
    if not isinstance(rel, str):
        return f"must be a string, not {type(rel).__name__}"
    for part in rel.split("/"):
        problem = name_problem(part)
        if problem:
            return f"{shown(rel)}: part {problem}"
    return None


def task_id_problem(task_id: object) -> str | None:
    """Why `task_id` is not a legal task id, or None."""
    problem = name_problem(task_id)
    if problem is None and SEPARATOR in task_id:
        return f"{shown(task_id)} holds {SEPARATOR!r}, the separator of augmented puzzle names"
    if problem is None and task_id == BLANK_NAME:
        return f"{shown(task_id)} is the name of the blank puzzle identifier 0: name the task otherwise"
    return problem


def ascii_number(text: object, max_digits: int = 18) -> int | None:
    """The non-negative integer `text` spells in ASCII digits (surrounding blanks allowed), or None. A number read
    from a name, a file or the environment is checked here rather than with `str.isdigit()`, which is true for
    digits `int()` refuses ('²') and for other scripts' digits that other programs refuse ('２'); a longer text
    than `max_digits` is None too, so no caller turns thousands of digits into an int."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not 1 <= len(text) <= max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def typed_name(text: str) -> str:
    """A name typed on the command line (task ids), as the text it is in files. Where the locale's file-system
    encoding is not UTF-8 (LC_ALL=C), Python hands non-ASCII bytes of argv over as surrogate escapes ('é' arrives
    as '\\udcc3\\udca9'); names in our files are UTF-8, so the bytes are read again as UTF-8 (unchanged where
    they are not UTF-8)."""
    try:
        return os.fsencode(text).decode("utf-8")
    except UnicodeError:
        return text


def safe_filename(name: str, suffix: str = "") -> str:
    """A file name for `name` (plus `suffix`, e.g. ".png") that is one plain path component."""
    # a lone surrogate (a name decoded from bytes that are not UTF-8) is encoded as its code point's bytes
    encoded = "".join(c if _PLAIN.match(c) else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
                      for c in name)
    if not encoded or encoded[0] == "." or encoded[0] == "-":
        encoded = f"%{ord(encoded[0]):02X}{encoded[1:]}" if encoded else "%empty"  # "%e" is no escape: no other name encodes to it
    if len(encoded) > MAX_FILE_STEM:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        encoded = f"{encoded[:MAX_FILE_STEM - 17]}~{digest}"
    return encoded + suffix


def file_in(folder: str | os.PathLike, name: str, suffix: str = "") -> Path:
    """`folder / safe_filename(name, suffix)`, checked to lie directly inside `folder`."""
    folder = Path(folder)
    path = folder / safe_filename(name, suffix)
    if path.parent != folder or path.name in ("", ".", ".."):  # cannot happen after encoding; never trust it
        raise ValueError(f"{name!r} does not make a file name inside {folder}")
    return path


def place_from(path: str | os.PathLike, folder: str | os.PathLike) -> str | None:
    """Where `path` lies seen from `folder`, when both were typed alike (both absolute, or both relative to one
    directory: then the answer does not depend on which directory), else None. A record that holds paths as
    typed is compared by it: the same folders named another way (an absolute path, from inside them, moved
    together) are known again."""
    path, folder = os.fspath(path), os.fspath(folder)
    return os.path.relpath(path, folder) if os.path.isabs(path) == os.path.isabs(folder) else None
