"""`submit`'s fallback against the clock, and the one rule for what it wrote.

* A budget that reading a large challenges file and writing the fallback already used up is refused in one
  line right after the fallback (no second pass over the file, no model), and the first write never checks the
  demonstration pairs (the slowest part of a large file; later writes report malformed tasks).
* A solutions file given as `--challenges` (`{id: [grid, ...]}`: no task has a test input) is refused by
  `submit` before it writes anything, with the rule and the words of `validate-submission`, which
  `validate_submission` (what submit checks its own output with) applies too.
"""

from __future__ import annotations

import json
import time

import pytest

import trm_kaggle.evaluate.submission as S
import trm_kaggle.solve.job as J
from trm_kaggle.cli import main
from trm_kaggle.evaluate.submission import check_submission, validate_submission

from conftest import make_export

TASK = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[2, 1], [4, 3]]}]}


def submit(tmp_path, challenges, *extra, finetune_steps="1"):
    return ["submit", "--challenges", str(challenges), "--weights", str(tmp_path / "exp"), "--output",
            str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "work"), "--num-aug", "1", "--finetune-steps",
            finetune_steps, "--device", "cpu", "--workers", "1", "--no-progress", *extra]


def test_a_budget_the_file_uses_up_is_refused_in_one_line_after_the_fallback(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.json").write_text(json.dumps({f"task{i}": TASK for i in range(3)}))
    make_export(tmp_path / "exp")
    read = J.read_challenges

    def slow_read(*a, **kw):  # a file so large that reading it takes longer than the budget
        time.sleep(2.5)
        return read(*a, **kw)

    monkeypatch.setattr(J, "read_challenges", slow_read)
    monkeypatch.setattr(S, "_task_problem", lambda *a: pytest.fail("the first write checks no demonstration"))
    monkeypatch.setattr(J, "run_in_process", lambda *a, **kw: pytest.fail("no model after the budget is gone"))
    t0 = time.monotonic()
    rc = main(submit(tmp_path, tmp_path / "c.json", "--time-budget", "12", "--safety-margin", "0.5"))
    err = capsys.readouterr().err
    assert rc == 3 and time.monotonic() - t0 < 25
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "the time budget (12 s, 0.5 s of it the safety margin) is too small for" in lines[0]
    assert "reading its 3 tasks and writing the fallback took" in lines[0], err
    check_submission(tmp_path / "s.json", tmp_path / "c.json")  # the valid fallback stands


def test_a_budget_that_leaves_a_worker_no_time_to_plan_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """9 s with a 1 s margin: 8 s left, under the 10 s a worker needs (MIN_PLAN_S); once exit 0 with no line, no
    task having reached the model."""
    (tmp_path / "c.json").write_text(json.dumps({"t1": TASK}))
    make_export(tmp_path / "exp")
    monkeypatch.setattr(J, "run_in_process", lambda *a, **kw: pytest.fail("no worker when none could plan"))
    rc = main(submit(tmp_path, tmp_path / "c.json", "--time-budget", "9", "--safety-margin", "1"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 3 and len(lines) == 1 and "less than the 10 s a worker needs to time its device and plan" in lines[0]
    # the settings alone leave too little, whatever the file: the line says so, not that reading took the time
    assert "the time budget (9 s) leaves 8 s after its safety margin (1 s)" in lines[0] and "reading" not in lines[0]
    # the advice names the command's own options (the kernel names its parameters: see the next test)
    assert "(give a larger time budget: --time-budget; or a smaller --safety-margin)" in lines[0]
    check_submission(tmp_path / "s.json", tmp_path / "c.json")
    rc = main(submit(tmp_path, tmp_path / "c.json", "--time-budget", "0.001"))  # under the default 60 s margin
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 3 and "leaves 0 s after its safety margin (60 s)" in lines[0] and "--safety-margin" in lines[0]


@pytest.mark.parametrize("setting", ["SAVE_TIME_BUDGET", "TIME_BUDGET"])
def test_a_budget_too_small_is_blamed_on_the_setting_it_came_from(tmp_path, monkeypatch, setting):
    """A Save Version run's SAVE_TIME_BUDGET=65 was refused with "give a larger time budget: --time-budget, the
    kernel's TIME_BUDGET; or a smaller --safety-margin": a parameter the user had left alone, and an option the
    kernel does not have. The caller names the setting; the margin, none of its settings, is not advised."""
    from trm_kaggle.config import SolveConfig

    (tmp_path / "c.json").write_text(json.dumps({"t1": TASK}))
    make_export(tmp_path / "exp")
    monkeypatch.setattr(J, "run_in_process", lambda *a, **kw: pytest.fail("no worker when none could plan"))
    said = []
    report = J.solve(SolveConfig(challenges=str(tmp_path / "c.json"), weights=str(tmp_path / "exp"),
                                 output=str(tmp_path / "s.json"), time_budget=65, progress=False),
                     echo=said.append, budget_setting=setting)
    why = report["model_failed"]
    assert why.endswith(f"(give a larger time budget: {setting})") and "leaves 5 s after its safety margin" in why
    assert "--time-budget" not in why and "--safety-margin" not in why
    assert any(why in line for line in said), said
    check_submission(tmp_path / "s.json", tmp_path / "c.json")


def test_a_step_no_deadline_check_reaches_is_stopped_inside_the_margin(tmp_path, monkeypatch, capsys):
    """The one in-process worker stuck in a single long step (a very deep recursion times one step for minutes)
    is stopped a quarter into the safety margin, as a spawned worker is by SIGTERM: submit ends by its budget,
    and the merge after it leaves the valid fallback."""
    import trm_kaggle.solve.worker as W

    (tmp_path / "c.json").write_text(json.dumps({"t1": TASK}))
    make_export(tmp_path / "exp")

    def endless_step(*a, **kw):  # Python between short calls, as torch's ops are: the alarm gets in
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(W, "run_units", endless_step)
    t0 = time.monotonic()
    rc = main(submit(tmp_path, tmp_path / "c.json", "--time-budget", "13", "--safety-margin", "2"))
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert took < 13, (took, err)
    assert rc == 3 and "still running at the deadline: stopped" in err, err
    check_submission(tmp_path / "s.json", tmp_path / "c.json")


def test_the_in_process_alarm_never_cuts_a_merge_and_is_put_back(tmp_path):
    import signal

    from trm_kaggle.solve.workers import DeadlineReached, _alarm

    merged = []

    def slow_merge():
        time.sleep(0.3)  # the alarm rings in here: held until the merge is whole
        merged.append(True)

    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(DeadlineReached):
        with _alarm(time.monotonic() + 0.1) as shielded:
            shielded(slow_merge)
    assert merged == [True]
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with _alarm(None) as shielded:  # no deadline: nothing armed
        shielded(slow_merge)
    assert signal.getsignal(signal.SIGALRM) is before


def test_a_solutions_file_as_challenges_is_refused_by_one_rule(tmp_path, capsys):
    solutions = tmp_path / "solutions.json"
    solutions.write_text(json.dumps({"dd6b8c4b": [[[1, 2]]], "0934a4d8": [[[3]]]}))
    make_export(tmp_path / "exp")
    rc = main(submit(tmp_path, solutions))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and not (tmp_path / "s.json").exists()
    words = "none of its 2 tasks has a test input (a solutions file, {task id: [grid, ...]}, given as the challenges?)"
    assert words in err[0], err
    # the same rule in validate-submission and in what submit checks its output with
    (tmp_path / "sub.json").write_text(json.dumps({"dd6b8c4b": [], "0934a4d8": []}))
    assert main(["validate-submission", str(tmp_path / "sub.json"), "--challenges", str(solutions)]) != 0
    assert words in capsys.readouterr().err
    problems = validate_submission(tmp_path / "sub.json", solutions)
    assert len(problems) == 1 and words in problems[0]


@pytest.mark.parametrize("task", [5, True], ids=["an integer", "true"])
def test_challenges_whose_only_task_is_a_number_are_refused_by_the_same_rule(tmp_path, capsys, task):
    """`{"x": 5}` as --challenges: the task was read as a count of five test inputs, so submit wrote `{"x": []}`,
    called it INVALID and exited 1; `{"x": 5.5}` was refused up front. Now each is one line, nothing written."""
    (tmp_path / "c.json").write_text(json.dumps({"x": task}))
    make_export(tmp_path / "exp")
    rc = main(submit(tmp_path, tmp_path / "c.json"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "none of its 1 task has a test input" in err[0], err
    assert not (tmp_path / "s.json").exists()


def test_a_refused_task_id_reaches_the_console_escaped(tmp_path, capsys, caplog):
    """An id holding an escape sequence, BEL or a newline was printed raw in the closing lines (the screen
    cleared, a line split) while the reason beside it showed it escaped."""
    import logging

    caplog.set_level(logging.INFO)  # the phase lines of a run without progress go to the log
    (tmp_path / "c.json").write_text(json.dumps({"ok": TASK, "\x1b[2Jx": TASK, "a\x07b": TASK, "n\nl": TASK}))
    make_export(tmp_path / "exp")
    rc = main(submit(tmp_path, tmp_path / "c.json", "--time-budget", "60", "--safety-margin", "5",
                     finetune_steps="0"))  # no fine-tuning
    err = capsys.readouterr().err + caplog.text
    assert rc == 0 and not any(c in err for c in "\x1b\x07"), err
    assert "fallback: task \\x1b[2Jx keeps the fallback answer" in err and "task a\\x07b:" in err, err
    assert "task n\\nl keeps" in err, err
