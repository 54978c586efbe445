"""Clocks: budgets and deadlines are durations on the monotonic clock, and every grace period lies inside
the safety margin.

A step of the wall clock (NTP, a virtual machine resumed, `date -s`) must neither end `submit`'s budget
early (the reproducer: a +2 h step 10 s into `--time-budget 3600` cut all model work, "7209.3 s", exit 0)
nor stretch it. A worker that does not end when told (stopped with SIGSTOP, stuck) is killed inside the
safety margin: `--time-budget 45 --safety-margin 5` ends by 45 s with such a worker (it ended at 47.6 s).
Here the wall clock is faked (`time.time` jumps); the monotonic clock cannot be.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

import trm_kaggle
from trm_kaggle.config import SolveConfig
from trm_kaggle.evaluate.submission import check_submission
from trm_kaggle.kaggle import rehearsal
from trm_kaggle.solve import job as S, plan as P
from trm_kaggle.solve.workers import stop_workers

from conftest import SOLVE_ARCH as ARCH, small_unseen_tasks, solve_config



@pytest.fixture(scope="module")
def unseen(tmp_path_factory) -> tuple[Path, Path]:
    """Three small ARC-AGI-2 evaluation tasks as a challenges file, and a tiny export."""
    return small_unseen_tasks(tmp_path_factory.mktemp("clocks"), 3, ARCH)


def cfg(unseen, tmp_path, **kw) -> SolveConfig:
    return solve_config(unseen, tmp_path, **{"workers": 1, **kw})


def wall_clock_steps(monkeypatch, by: float, after_s: float = 0.0, module=time) -> None:
    """From `after_s` seconds on, `module.time()` (the wall clock) reads `by` seconds off."""
    real, start = time.time, time.monotonic()
    monkeypatch.setattr(module, "time", lambda: real() + (by if time.monotonic() - start >= after_s else 0.0))


@pytest.mark.parametrize("step", [7200.0, -7200.0])
def test_the_budget_ignores_a_wall_clock_step(monkeypatch, step):
    budget = P.Budget(100, 10)
    wall_clock_steps(monkeypatch, step)
    assert 89 < budget.left() <= 90
    assert budget.line("plan").startswith("[elapsed 0.") and ", left 1m2" in budget.line("plan")


def test_a_task_s_deadlines_ignore_a_wall_clock_step(monkeypatch):
    wall_clock_steps(monkeypatch, 7200.0)
    plan = P.make_plan(SolveConfig(challenges="c", weights="w", num_aug=1, finetune_steps=2), [(1, 2)], None, 60.0)
    finetune_by, predict_by = P.task_deadlines(SolveConfig(challenges="c", weights="w"), plan, [(1, 2)],
                                               time.monotonic() + 60.0)
    assert 59 < predict_by - time.monotonic() <= 60


@pytest.mark.slow  # timing, planning and three tasks: ~25 s on a loaded 2-core machine
def test_submit_with_a_forward_wall_clock_step_still_answers_every_task(unseen, tmp_path, monkeypatch):
    """The reproducer, shortened: `--time-budget 3600` and the wall clock 2 h ahead a moment after the start."""
    wall_clock_steps(monkeypatch, 7200.0, after_s=0.5)
    lines: list[str] = []
    report = S.solve(cfg(unseen, tmp_path, time_budget=3600.0, safety_margin=60.0), echo=lines.append)
    assert report["answered"] == report["model_tasks"] == 3, lines
    assert report["model_failed"] is None and report["elapsed_s"] < 600
    assert not any("] deadline:" in line or "time budget ran out" in line for line in lines), lines
    check_submission(tmp_path / "submission.json", unseen[0])


@pytest.mark.slow  # a budget that binds: 25 s
def test_submit_with_a_backward_wall_clock_step_keeps_its_budget(unseen, tmp_path, monkeypatch):
    """The wall clock 2 h behind a moment after the start: the budget, which fine-tuning would fill, still ends on
    time. 25 s gives the timing a 3.1 s cap, enough to time the steps and fine-tune; 16 s or less leaves it under
    `MIN_TIMING_S`, and the fixed small plan predicts with the pretrained weights."""
    from trm_kaggle.solve.step_timer import MIN_TIMING_S, timing_cap

    budget = 25.0
    assert timing_cap(budget) >= 1.5 * MIN_TIMING_S  # the timing runs, with room for a loaded machine
    wall_clock_steps(monkeypatch, -7200.0, after_s=0.5)
    t0 = time.monotonic()
    report = S.solve(cfg(unseen, tmp_path, time_budget=budget, finetune_steps=100_000, max_tasks=1))
    assert time.monotonic() - t0 < budget + 3.0 and report["valid"]
    (task,) = report["task_reports"].values()
    assert 0 < task["finetune_steps"] < 100_000  # fine-tuned, and stopped by the budget


@pytest.mark.slow  # fine-tuning that stops at its deadline: ~3 s (minutes when it does not)
def test_a_wall_clock_step_during_fine_tuning_does_not_stretch_it(unseen, tmp_path, monkeypatch):
    import trm_kaggle.train.loop as L
    from trm_kaggle.data.arc.tasks import read_challenges
    from trm_kaggle.solve.task import build_unseen_dataset, finetune

    c = cfg(unseen, tmp_path, finetune_steps=5_000, global_batch_size=4)  # far more than 3 s hold on any machine
    data = build_unseen_dataset(c, tmp_path / "u", dict(list(read_challenges(unseen[0]).items())[:1]))
    real, calls = time.time, []

    class Clock:  # the training loop's clock steps 2 h back at its 3rd reading
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def time():
            calls.append(1)
            return real() - (7200.0 if len(calls) > 2 else 0.0)

    monkeypatch.setattr(L, "time", Clock())
    t0 = time.monotonic()
    assert finetune(c, ARCH, data, tmp_path / "run", t0 + 3.0).step < 5_000
    assert time.monotonic() - t0 < 3.0 + 10.0


def test_fine_tuning_reads_the_deadline_on_the_training_loop_s_clock(unseen, tmp_path):
    """`finetune` gets a monotonic deadline and `train` compares with its own clock: a deadline that has passed
    trains no step, one far ahead trains them all (mixing the two clocks would fail one or the other)."""
    from trm_kaggle.data.arc.tasks import read_challenges
    from trm_kaggle.solve.task import build_unseen_dataset, finetune

    c = cfg(unseen, tmp_path, finetune_steps=2, global_batch_size=4)
    data = build_unseen_dataset(c, tmp_path / "u", dict(list(read_challenges(unseen[0]).items())[:1]))
    assert finetune(c, ARCH, data, tmp_path / "late", time.monotonic() - 1.0).step == 0
    assert finetune(c, ARCH, data, tmp_path / "early", time.monotonic() + 600.0).step == 2


def test_the_offline_run_s_timeout_ignores_a_wall_clock_step(tmp_path, monkeypatch):
    wall_clock_steps(monkeypatch, 7200.0)
    rc = rehearsal._run_logged(["sh", "-c", "sleep 1.5; echo done"], env=dict(os.environ), cwd=tmp_path,
                             log_path=tmp_path / "log", timeout=60, echo=lambda _: None)
    assert rc == 0 and (tmp_path / "log").read_text() == "done\n"


def test_submit_s_budget_counts_from_the_command_s_start(unseen, tmp_path, monkeypatch, capsys):
    """`submit --time-budget 45` ends by 45 s after the command started: its imports and checks are spent too."""
    from trm_kaggle.cli import main

    seen = {}

    def solve(cfg, start=None, **_):
        seen.update(start=start, called=time.monotonic())
        return {"output": cfg.output, "valid": True, "tasks": 3, "answered": 3, "predicted": 4, "elapsed_s": 1.0,
                "errors": [], "model_tasks": 3}

    monkeypatch.setattr(S, "solve", solve)
    before = time.monotonic()
    assert main(["submit", "--challenges", str(unseen[0]), "--weights", str(unseen[1]), "--output",
                 str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w"), "--time-budget", "45"]) == 0
    assert before <= seen["start"] < seen["called"]
    capsys.readouterr()


# ---------------------------------------------------------------------------
# grace periods
# ---------------------------------------------------------------------------


def _sleep(ignore_term: bool) -> None:
    # SIGTERM as a worker has it: a handler the test process holds (another test's, inherited through fork) once
    # made the workers that should end on it wait for their SIGKILL
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term else signal.SIG_DFL)
    time.sleep(300)


@pytest.mark.parametrize("ignore_term", [False, True])
def test_stopped_workers_end_by_the_kill_time(ignore_term):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_sleep, args=(ignore_term,), daemon=True) for _ in range(3)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    for p in procs:
        os.kill(p.pid, signal.SIGSTOP)  # stopped: a SIGTERM waits until it is continued
    t0 = time.monotonic()
    stop_workers(procs, kill_at=t0 + 1.0)
    took = time.monotonic() - t0
    for p in procs:
        p.join(2)
    assert not any(p.is_alive() for p in procs)
    assert took < 1.5 and (took >= 0.9 if ignore_term else took < 0.9), took  # one grace for all, not one each


def test_the_grace_lies_inside_the_safety_margin(unseen, tmp_path, monkeypatch):
    """solve's SIGTERM and SIGKILL times for its spawned workers: after the budget's end, inside the margin's
    first half (its second half merges and writes the answers)."""
    seen = {}

    def spawned(specs, emit, *, stop_at, kill_at, **_):
        seen.update(stop_at=stop_at, kill_at=kill_at, end=specs[0].deadline)
        return []

    monkeypatch.setattr(S, "run_spawned", spawned)
    for margin, budget in ((5.0, 45.0), (60.0, 3600.0), (0.0, 30.0)):
        S.solve(cfg(unseen, tmp_path, workers=2, time_budget=budget, safety_margin=margin))
        assert seen["end"] <= seen["stop_at"] <= seen["kill_at"] <= seen["end"] + margin / 2, (margin, seen)


@pytest.mark.slow  # two spawned workers and a budget of 20 s
def test_submit_with_a_stopped_worker_ends_inside_its_budget(unseen, tmp_path):
    """The reproducer, shortened: `--time-budget 20 --safety-margin 5`, one of two workers stopped (SIGSTOP).
    (Measured through the command line with `--time-budget 45 --safety-margin 5`: the process ended at 44.1 s.)"""
    stopped: list[int] = []

    def stop_one(outcomes):
        if not stopped and outcomes[1].pid:
            os.kill(outcomes[1].pid, signal.SIGSTOP)
            stopped.append(outcomes[1].pid)

    t0 = time.monotonic()
    report = S.solve(cfg(unseen, tmp_path, workers=2, time_budget=20.0, safety_margin=5.0, finetune_steps=100_000),
                     on_poll=stop_one)
    assert stopped and time.monotonic() - t0 < 20.0
    assert report["valid"] and any("worker 1" in e for e in report["errors"])
    check_submission(tmp_path / "submission.json", unseen[0])


# ---------------------------------------------------------------------------
# where the wall clock is still read
# ---------------------------------------------------------------------------


def wall_clock_readers() -> set[str]:
    """The package's modules that call time.time() (a timestamp is datetime's business; a duration or a deadline
    belongs on time.monotonic() or time.perf_counter())."""
    root = Path(trm_kaggle.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "time"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "time"):
                found.add(path.relative_to(root).as_posix())
    return found


def test_only_the_known_modules_read_the_wall_clock():
    # kaggle_training.py: the training kernel's budget counts from the notebook's start, a wall-clock time the
    # notebook records (it becomes the run's time_limit, a duration, when the session starts training).
    assert wall_clock_readers() == {"kaggle_training.py"}
