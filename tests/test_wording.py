"""`trm_kaggle.wording`: the words a person reads, and a wrong argument to its helpers named."""

from __future__ import annotations

import math
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from trm_kaggle.wording import command_line, count, shown


def test_counts_and_names_read_as_meant():
    assert count(1, "step") == "1 step" and count(1234, "step") == "1,234 steps"
    assert count(2, "trajectory", "trajectories") == "2 trajectories"
    assert shown("ab\x1b[31mc") == "ab\\x1b[31mc" and shown("x" * 100, 10) == "xxxxxxx..."


@pytest.mark.parametrize("call, kind, said", [
    (lambda: shown(5), TypeError, "name=5: expected a text to show, got int"),
    (lambda: count("3", "step"), TypeError, "n='3': expected a number to count, got str"),
    (lambda: count(math.nan, "step"), ValueError, "n=nan: expected a finite number to count"),
    (lambda: count(math.inf, "step"), ValueError, "n=inf: expected a finite number to count"),
])
def test_a_wrong_argument_is_named(call, kind, said):
    """shown(5) was "'int' object is not subscriptable", count('3', ...) format's "Cannot specify ','", and
    count(nan, ...) said "nan steps"."""
    with pytest.raises(kind) as e:
        call()
    assert str(e.value) == said


def test_a_command_line_pastes_as_the_words_it_names():
    """A folder named `a b$(id)` split in two and ran `id` when its command was pasted; a newline in a name is
    escaped so the command stays one line."""
    words = ["trm-kaggle", "compare", Path("sw/a b$(id)"), "it's"]
    line = command_line(*words)
    assert shlex.split(line) == [str(w) for w in words]
    assert command_line("sbatch", "jobs/x.sbatch") == "sbatch jobs/x.sbatch"  # plain words stay plain
    assert "\n" not in command_line("ls", "a\nb")


def pasted(line: str, locale: str = "C.UTF-8") -> list[str]:
    """The words bash gives a command when `line` is pasted into it (in a UTF-8 locale unless told)."""
    return [os.fsdecode(w) for w in pasted_bytes(line, locale)]


def pasted_bytes(line: str, locale: str) -> list[bytes]:
    """The bytes of each word bash gives a command when `line` is pasted into it under `LC_ALL=locale`."""
    run = subprocess.run(["bash", "-c", "printf '%s\\0' " + line], capture_output=True, check=True,
                         env={**os.environ, "LC_ALL": locale})
    return run.stdout.split(b"\0")[:-1]


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_a_printed_command_pastes_as_the_same_bytes_in_every_locale(locale):
    """`$'z\\u00a0'` (a no-break space, which no terminal shows as itself) pasted under LC_ALL=C gave bash the six
    characters `\\u00A0`: another folder's name. Printable letters (ü) stay as they are."""
    word = "./-p \x1b[2Jz\xa0ü\u2028\U000e0001bad\udcff"
    line = command_line("trm-kaggle", "compare", Path(word))
    assert line.isprintable() and "ü" in line and "\\u" not in line and "\\U" not in line
    assert pasted_bytes(line, locale) == [b"trm-kaggle", b"compare", os.fsencode(word)]


@pytest.mark.parametrize("word", ["sw\nnl", "a\tb\rc", "it's \\ \x1b[2J\x07", "\xa0nb\u2028x", "é-tâche",
                                  "bad\udcff", "\U000e0001tag", "$(id) `id` \"q\" !x"])
def test_a_word_with_a_character_no_terminal_shows_pastes_as_itself_on_one_line(word):
    """`sw\\nnl` was printed `'sw\\nnl'`: pasted, bash read a backslash and an n, another folder's name."""
    line = command_line("trm-kaggle", "compare", Path(word), word)
    assert line.isprintable() and pasted(line) == ["trm-kaggle", "compare", word, word]


def test_a_path_starting_with_a_dash_is_no_option():
    """`sbatch -dash/r1.sbatch` (from `--out ./-dash`: a Path drops the `./`) was read as sbatch's option -d."""
    from trm_kaggle.wording import path_word

    line = command_line("sbatch", Path("./-dash") / "r1.sbatch", "--export", Path("-"), Path("/-abs"), "-o")
    assert pasted(line) == ["sbatch", "./-dash/r1.sbatch", "--export", "./-", "/-abs", "-o"]
    assert path_word(Path("-sw") / "a") == "./-sw/a" and path_word("runs/-x") == "runs/-x"
