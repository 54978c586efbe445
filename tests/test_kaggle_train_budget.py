"""A training kernel that could not train is refused at build time: `--train-budget` at or below the kernel's
save margin (SAVE_MARGIN, the notebook's default) is one line, before anything is built or pushed."""

from __future__ import annotations

import re

from trm_kaggle.kaggle import bundle
from trm_kaggle.kaggle.metadata import REPO_ROOT
from trm_kaggle.kaggle.train_kernel import DEFAULT_MARGIN
from trm_kaggle.kaggle_training import DEFAULT_MARGIN as SESSION_MARGIN


def test_a_train_budget_inside_the_save_margin_is_refused_before_building(tmp_path, capsys):
    src = (REPO_ROOT / "notebooks" / "kaggle_train.py").read_text()
    # the margin the check uses is the kernel's own
    assert float(re.search(r"^SAVE_MARGIN = (\S+)", src, re.M)[1]) == DEFAULT_MARGIN == SESSION_MARGIN
    for budget, said in (("300", "leaves no time to train"), ("600", "leaves no time to train"),
                         ("600.5", "a session trains at least 60 s; give at least 660 s"),  # built, trained 0.5 s
                         ("nan", "--train-budget nan: must be from 0 to 604800")):
        rc = bundle.main([str(tmp_path / "out"), "--train-kernel", "--preset", "sudoku4-cpu", "--train-budget",
                          budget, "--no-download"])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert rc != 0 and len(err) == 1 and said in err[0], err
        assert ("SAVE_MARGIN" in err[0]) == (budget != "nan") and not (tmp_path / "out").exists()


def notebook_function(name: str, warned: list[str]):
    """The training kernel's own function `name`, as written (its source cut out and run), warning into
    `warned`; and the notebook's source."""
    import math
    import os

    src = (REPO_ROOT / "notebooks" / "kaggle_train.py").read_text()
    start = src.index(f"def {name}(")
    scope = {"math": math, "os": os, "warn": warned.append}
    exec(src[start:src.index("\n\n\n", start)], scope)
    return scope[name], src


def test_the_notebook_takes_a_save_interval_train_takes_or_its_default(tmp_path):
    """SAVE_EVERY_S past train's bound (a week) once ended the session with an error and nothing trained: the
    notebook's parameter check falls back to the default with a warning, as for any bad parameter."""
    warned: list[str] = []
    check, src = notebook_function("checked_number", warned)
    assert re.search(r'^SAVE_EVERY_S = checked_number\("SAVE_EVERY_S", SAVE_EVERY_S, 300.0, none=True, least=0.001, '
                     r"most=7 \* 24 \* 3600\)", src, re.M)
    assert check("SAVE_EVERY_S", 1e9, 300.0, none=True, least=0.001, most=7 * 24 * 3600) == 300.0
    assert warned and "SAVE_EVERY_S=1000000000.0 is not None or a number from 0.001 to 604800" in warned[0]
    assert check("SAVE_EVERY_S", 600, 300.0, none=True, least=0.001, most=7 * 24 * 3600) == 600.0


def test_a_whole_number_bound_is_said_in_its_digits():
    """`SESSION_STEPS=0` was told "from 1 to 4.61169e+18", a whole-number setting's bound as a float."""
    warned: list[str] = []
    check, src = notebook_function("checked_number", warned)
    assert "SESSION_STEPS = checked_number(\"SESSION_STEPS\", SESSION_STEPS, None, none=True, least=1, most=2**62, " \
           "whole=True)" in src
    assert check("SESSION_STEPS", 0, None, none=True, least=1, most=2**62, whole=True) is None
    assert warned == ["SESSION_STEPS=0 is not None or a whole number from 1 to 4,611,686,018,427,387,904: using None"]


def test_a_session_budget_that_is_no_number_of_seconds_is_an_error_not_no_limit(tmp_path):
    from trm_kaggle.kaggle_training import run_session

    for name, value in (("time_budget", float("nan")), ("margin", float("inf")), ("margin", -1.0)):
        report = run_session(input_root=tmp_path / "in", working=tmp_path / "w", echo=lambda line: None,
                             **{name: value})
        assert report.status == "error" and report.message.startswith(f"{name} {value!r}: a number of seconds")


def test_a_session_start_that_is_no_time_past_and_budgets_past_reason_are_errors(tmp_path):
    """`started=nan` trained with no time limit and a start to come stretched a 1000 s budget over days; a budget
    of True was 1 s, a margin of 1e300 was printed in 301 digits. Each is refused before any work."""
    import time

    from trm_kaggle.kaggle_training import run_session

    cases = ((dict(started=float("nan")), "started nan: the time the kernel started"),
             (dict(started=time.time() + 1e6), "the time the kernel started (time.time(), not later than now)"),
             (dict(time_budget=True), "time_budget True: a number of seconds from 0 to 10,000,000"),
             (dict(margin=1e300), "margin 1e+300: a number of seconds"),
             # an integer too large for a float raised OverflowError out of a call that never raises
             (dict(started=10**400), "started 1000000"), (dict(time_budget=10**400), "time_budget 1000000"),
             (dict(save_every_s=10**400), "save_every_s 1000000"), (dict(save_every_s=True), "save_every_s True"))
    for kwargs, said in cases:
        report = run_session(input_root=tmp_path / "in", working=tmp_path / "w", echo=lambda line: None, **kwargs)
        assert report.status == "error" and said in report.message and len(report.message) < 200, report.message


def test_a_path_holding_a_nul_byte_falls_back_to_its_default():
    """KAGGLE_WORKING holding a NUL byte ended the training kernel's first cell in a traceback (ValueError: embedded
    null byte; the cell caught OSError alone): such a value is no path, and takes its default with a warning."""
    warned: list[str] = []
    check, src = notebook_function("checked_text", warned)
    assert check("KAGGLE_WORKING", "/tmp/w\0x", "/kaggle/working") == "/kaggle/working"
    assert warned and "KAGGLE_WORKING='/tmp/w\\x00x' is not a non-empty text" in warned[0]
    assert check("KAGGLE_WORKING", "/tmp/w", "/kaggle/working") == "/tmp/w"
    assert "except (OSError, ValueError) as e:  # ValueError: a path the system cannot take" in src
