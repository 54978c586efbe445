"""`rehearsal.execute`'s counts, times and choices: checked before the sandbox is built, as `build_bundle.py
--execute` checks its options."""

from __future__ import annotations

import re

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import rehearsal as R


@pytest.fixture
def no_sandbox(bundle_copy, monkeypatch):
    """A built bundle whose sandbox is never laid out: an argument that got past the checks fails at once, not
    after the venv's ~15 s."""
    def reached(*args, **kwargs):
        raise AssertionError("the sandbox was reached")

    monkeypatch.setattr(R, "prepare_sandbox", reached)
    return bundle_copy


#: (argument, value, what the one line says); the ids keep escape sequences out of the test names
BAD = {
    "timeout-nan": ("timeout", float("nan"), "timeout=nan: expected a number from 1 to 604800"),
    "timeout-negative": ("timeout", -1, "timeout=-1"),
    "timeout-zero": ("timeout", 0, "timeout=0"),
    "execution_timeout-negative": ("execution_timeout", -5, "execution_timeout=-5"),
    "workers-zero": ("workers", 0, "workers=0"),
    "device-escape": ("device", "cu\x1bda", "device='cu\\x1bda': expected one of auto, cpu, cuda, mps, xla"),
    "finetune_steps-escape": ("finetune_steps", "\x1b[2J", "finetune_steps='\\x1b[2J'"),
    "num_aug-huge": ("num_aug", 10**30,
                     "num_aug=1000000000000000000000000000000: expected a whole number from 0 to 100,000"),
    "num_aug-negative-text": ("num_aug", "-1", "num_aug='-1'"),
    "time_budget-nan": ("time_budget", float("nan"), "time_budget=nan"),
    "max_tasks-negative": ("max_tasks", -1, "max_tasks=-1"),
    "mounts-unknown": ("mounts", "2027", "mounts='2027'"),
    "kernel_env-nul": ("kernel_env", {"A": "b\x00"}, "kernel_env A='b\\x00': expected text without a NUL byte"),
    "kernel_env-number": ("kernel_env", {"A": 5}, "kernel_env A=5: expected text"),
    "kernel_env-key": ("kernel_env", {"A=B": "c"}, "kernel_env key 'A=B': expected a variable name"),
    "kernel_env-list": ("kernel_env", ["A"], "kernel_env=['A']: expected a mapping"),
}


@pytest.mark.parametrize("argument, value, said", BAD.values(), ids=BAD.keys())
def test_a_bad_argument_is_refused_before_the_sandbox(no_sandbox, argument, value, said):
    with pytest.raises(TRMError, match=re.escape(said)) as e:
        R.execute(no_sandbox, **{argument: value}, echo=lambda line: None)
    assert "\x1b" not in str(e.value) and "\n" not in str(e.value)
    assert not (no_sandbox / "sandbox").exists()


def test_the_documented_values_pass_as_the_kernel_reads_them():
    defaults = dict(max_tasks=3, time_budget=900, finetune_steps=10, num_aug=2, device="cpu", workers=None,
                    timeout=3600, execution_timeout=None, mounts="2025")
    assert R.checked_arguments(**defaults) == (3, 900, 10, 2, None, 3600, None)
    given = dict(defaults, max_tasks=0, time_budget=None, finetune_steps="auto", num_aug="12", workers=4,
                 timeout=None, execution_timeout=60, mounts="2026", device="cuda")
    assert R.checked_arguments(**given) == (None, None, "auto", 12, 4, None, 60)  # max_tasks 0: every task


@pytest.mark.parametrize("argument, value, said", [("echo", 5, "echo: expected a function"),
                                                   ("alter", 5, "alter: expected a function"),
                                                   ("out_dir", 5, "out_dir: expected the bundle's folder"),
                                                   ("challenges", 5, "challenges: expected a challenges file")])
def test_an_argument_of_the_wrong_type_is_named_before_the_sandbox(no_sandbox, argument, value, said):
    """echo=5 and alter=5 were "'int' object is not callable" (alter's after the sandbox's venv was built),
    out_dir=5 os.path's TypeError naming no argument."""
    kw = {"out_dir": no_sandbox, "echo": lambda line: None, argument: value}
    with pytest.raises(TypeError, match=re.escape(said)):
        R.execute(kw.pop("out_dir"), **kw)
    assert not (no_sandbox / "sandbox").exists()
