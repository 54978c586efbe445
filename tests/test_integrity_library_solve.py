"""solve() and the solve package from Python: whatever ends a solve (Ctrl-C, a callback that raises) ends its worker
processes with it; a config changed around its validators, a bad `start` and arguments of the wrong kind are each
one error naming what is wrong, before anything is written; a file in the work dir's place is said as `submit` says
it; a script re-run in a starting worker exits in one line."""

import json
import multiprocessing
import os
import signal

import pytest

from conftest import SOLVE_ARCH as ARCH, small_unseen_tasks, solve_config
from trm_kaggle.config import SolveConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.solve import estimate, estimate_kernel, solve
from trm_kaggle.solve import solve_config as recipe_config


@pytest.fixture(scope="module")
def unseen(tmp_path_factory):
    return small_unseen_tasks(tmp_path_factory.mktemp("unseen"), 2, ARCH)


def _running(pid: int) -> bool:
    """Whether `pid`, a child of this process, still runs (reaped or exited: no)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:  # reaped already
        return False


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, ValueError])
def test_a_solve_ended_by_its_caller_ends_its_workers(unseen, tmp_path, interruption):
    """Ctrl-C in a notebook (KeyboardInterrupt out of a callback, as out of the wait) or an `on_poll` that raises left
    both spawned workers fine-tuning and writing in the work dir after solve() had left and released its lock, until
    the caller's process ended."""
    cfg = solve_config(unseen, tmp_path, workers=2, threads=1, finetune="all", finetune_steps=10_000)
    pids: list[int] = []

    def on_poll(outcomes):
        pids.extend(o.pid for o in outcomes)
        raise interruption("poll broke")

    try:
        if interruption is KeyboardInterrupt:
            with pytest.raises(KeyboardInterrupt):
                solve(cfg, on_poll=on_poll)
        else:
            assert "poll broke" in solve(cfg, on_poll=on_poll)["model_failed"]
        assert len(pids) == 2
        assert not [pid for pid in pids if _running(pid)]
        assert not multiprocessing.active_children()
    finally:  # the unfixed solve's workers: not left to the end of the test session
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def test_a_file_in_the_work_dirs_place_is_said_as_submit_says_it(unseen, tmp_path):
    """It was "no lock taken (File exists)", then a model failure naming FileExistsError."""
    (tmp_path / "afile").write_text("x")
    cfg = solve_config(unseen, tmp_path, work_dir=str(tmp_path / "afile"))
    with pytest.raises(TRMError, match=r"^work_dir .*afile is a file; a folder is written there$"):
        solve(cfg)
    assert not (tmp_path / "submission.json").exists()
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("changed, field", [
    (lambda c: c.model_copy(update={"time_budget": float("nan")}), "time_budget"),
    (lambda c: SolveConfig.model_construct(**{**c.model_dump(), "time_budget": float("inf")}), "time_budget"),
    (lambda c: c.model_copy(update={"num_aug": -3}), "num_aug"),
    (lambda c: c.model_copy(update={"finetune_steps": 10**9}), "finetune_steps"),
])
def test_a_config_changed_around_its_validators_is_checked(unseen, tmp_path, changed, field):
    """A NaN budget set by model_copy was 'still running at the deadline: stopped' after 0.1 s, an infinite one a
    time_t overflow, and num_aug=-3 a pydantic error inside the worker, each a report that returned."""
    with pytest.raises(TRMError, match=rf"^SolveConfig: {field}: "):
        solve(changed(solve_config(unseen, tmp_path)))
    assert not (tmp_path / "submission.json").exists()


@pytest.mark.parametrize("start, said", [(float("nan"), "start=nan: expected a finite number"),
                                         ("now", "start='now': expected a finite number"),
                                         (1e12, "start=1e[+]12: a time.monotonic[(][)] value ahead of now")])
def test_start_is_a_time_that_has_come(unseen, tmp_path, start, said):
    """start=NaN was 'Bad file descriptor' or a stop at a deadline no one set, 1e12 a time_t overflow, 'now' a
    TypeError of string concatenation."""
    with pytest.raises(ValueError, match=f"^{said}"):
        solve(solve_config(unseen, tmp_path, time_budget=300), start=start)
    assert not (tmp_path / "submission.json").exists()


@pytest.mark.parametrize("call, said", [
    (lambda cfg: solve(cfg.model_dump()), "cfg: expected a SolveConfig .*, got a dict$"),
    (lambda cfg: solve(None), "cfg: expected a SolveConfig .*, got a NoneType$"),
    (lambda cfg: solve(cfg, echo=5), "echo: expected a function [(]or None[)], got an int$"),
    (lambda cfg: solve(cfg, on_poll=3), "on_poll: expected a function [(]or None[)], got an int$"),
    (lambda cfg: recipe_config(5, challenges="c", weights="w"), "recipe: expected a recipe's name"),
    (lambda cfg: estimate_kernel({"num_aug": 2}, weights=cfg.weights), "cfg: expected a SolveConfig"),
    (lambda cfg: estimate_kernel(cfg, weights=cfg.weights, say=5), "say: expected a function"),
    (lambda cfg: estimate(ARCH.model_dump()), "arch: expected an ArchConfig .*, got a dict$"),
])
def test_an_argument_of_the_wrong_kind_is_named(unseen, tmp_path, call, said):
    """Each was an AttributeError from deep inside ('dict' object has no attribute 'challenges'), or "'int' object is
    not callable", `on_poll`'s reported as the model's failure after the fallback was written."""
    with pytest.raises(TypeError, match=f"^{said}"):
        call(solve_config(unseen, tmp_path))
    assert not (tmp_path / "submission.json").exists()


def test_a_work_dir_set_to_none_after_construction_takes_the_default(tmp_path, unseen):
    """`cfg.work_dir = None` passes assignment (the default is filled at construction) and was a TypeError of
    os.fspath; the checked config fills it, and the run goes on to its next check."""
    (tmp_path / "empty.json").write_text(json.dumps({}))
    cfg = solve_config(unseen, tmp_path, challenges=str(tmp_path / "empty.json"))
    cfg.work_dir = None
    with pytest.raises(TRMError, match="nothing to answer"):
        solve(cfg)


def test_a_script_re_run_in_a_starting_worker_exits_in_one_line(unseen, tmp_path, monkeypatch):
    """A script calling solve() with workers=2 outside `if __name__ == "__main__":` called it again in each spawned
    worker as it started: two tracebacks blaming "another submit" (the caller itself) holding the lock."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(SystemExit, match='^error: solve[(][)] was called in a worker process as it started: .*'
                                         'if __name__ == "__main__":') as e:
        solve(solve_config(unseen, tmp_path, workers=2))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "submission.json").exists()
