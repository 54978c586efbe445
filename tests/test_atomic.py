"""`atomic_directory`: the output put in place whole, and two commands finishing one output at once."""

from __future__ import annotations

import subprocess
import sys

import trm_kaggle.atomic as A

# another command writing `sys.argv[1]`, which held nothing when it started
OTHER = """
import sys
import trm_kaggle.atomic as A
from trm_kaggle.errors import TRMError
try:
    with A.atomic_directory(sys.argv[1], kind="export", found=A.Found(None)) as tmp:
        (tmp / "x").write_text("theirs")
    print("done")
except TRMError as e:
    print(e)
"""


def test_two_outputs_finishing_at_once_one_is_refused_and_the_first_stands(tmp_path, monkeypatch):
    """Both commands passed the check of what stood at the output, then each put its own in place in turn: both
    said done, the first silently replaced. The check and the swap are one step now: the second is refused."""
    target, real, other = tmp_path / "out", A._identity, []

    def identity(path):
        value = real(path)
        if not other and any(tmp_path.glob(f"out{A.PARTIAL_MARK}*/x")):  # this one's check before its swap has
            # passed: the other command finishes meanwhile (blocked until this one has swapped, were they one step)
            other.append(subprocess.Popen([sys.executable, "-c", OTHER, str(target)], stdout=subprocess.PIPE,
                                          text=True))
            try:
                other[0].wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        return value

    monkeypatch.setattr(A, "_identity", identity)
    with A.atomic_directory(target, kind="export", found=A.found_at(target)) as tmp:
        (tmp / "x").write_text("mine")
    said = other[0].communicate(timeout=60)[0].strip()
    assert said == (f"{target}: another command wrote this export while this one was built; that one stands and "
                    "this one is discarded (run the command again to replace it)")
    assert (target / "x").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
