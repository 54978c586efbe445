"""`trm_kaggle.wording`: the words a person reads, and a wrong argument to its helpers named."""

from __future__ import annotations

import math
import shlex
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
