"""A run stopped inside a log interval and resumed writes the log records an unbroken run writes: the train state
keeps the sums of the interval's steps so far, and the record its stop wrote of them gives way to the resumed one."""

from __future__ import annotations

import json
import os
import signal

import pytest

from test_train import cfg_for
from trm_kaggle.train import checkpoint as ckpt, loop
from trm_kaggle.train.loop import train
from trm_kaggle.train.stops import TrainingInterrupted

#: what differs between processes whatever they compute: the clock, where a process began (and the memory: `*_gb`)
PROCESS_FIELDS = ("elapsed_s", "examples_per_s", "start_step")


def records(run) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.append({k: v for k, v in r.items() if k not in PROCESS_FIELDS and not k.endswith("_gb")})
    return out


def stop_by_signal_at(monkeypatch, step: int) -> None:
    real = loop.train_step

    def step_then_signal(state, *args, **kwargs):
        out = real(state, *args, **kwargs)
        if state.step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(loop, "train_step", step_then_signal)


@pytest.mark.parametrize("stop", ["signal", "max_steps"])
def test_a_run_resumed_inside_a_log_interval_logs_the_unbroken_runs_records(sudoku4, tmp_path, monkeypatch, stop):
    args = ("log_interval=4", "ema=True")
    train(cfg_for(sudoku4, tmp_path / "a", "max_steps=10", *args))
    run = tmp_path / "b"
    if stop == "signal":  # SIGTERM after step 6, between the records of steps 4 and 8
        with monkeypatch.context() as patched:
            stop_by_signal_at(patched, 6)
            with pytest.raises(TrainingInterrupted, match="at step 6"):
                train(cfg_for(sudoku4, run, "max_steps=10", *args), signals=True)
    else:
        train(cfg_for(sudoku4, run, "max_steps=6", *args))
    assert [r["step"] for r in records(run) if "loss" in r] == [4, 6]  # the stop logs the steps it trained
    assert ckpt.load_train_state(ckpt.list_states(run)[-1])["log_window"]["steps_logged"] == 2
    train(cfg_for(sudoku4, run, "max_steps=10", *args))
    assert records(run) == records(tmp_path / "a")  # steps 4, 8 and 10: losses, accuracies, halted rows alike


def test_a_state_saved_before_it_kept_the_log_window_still_resumes(sudoku4, tmp_path):
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=6", "log_interval=4"))
    state = ckpt.load_train_state(ckpt.state_path(run, 6))
    ckpt.save_train_state(run, 6, {k: v for k, v in state.items()
                                   if k not in ("format", "version", "step", "log_window")}, 3)
    train(cfg_for(sudoku4, run, "max_steps=8", "log_interval=4"))  # the window starts empty, as before
    assert [r["step"] for r in records(run) if "loss" in r] == [4, 6, 8]
    assert ckpt.load_train_state(ckpt.state_path(run, 8))["log_window"] == {}


def test_a_log_window_that_no_run_saves_is_refused_on_resume(sudoku4, tmp_path):
    from trm_kaggle.errors import TRMError

    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=6", "log_interval=4"))
    state = ckpt.load_train_state(ckpt.state_path(run, 6))
    state["log_window"] = {"loss": 1.0, "bogus": 2.0}
    ckpt.save_train_state(run, 6, {k: v for k, v in state.items() if k not in ("format", "version", "step")}, 3)
    with pytest.raises(TRMError, match="field 'log_window' does not fit this run: ValueError: its entry 'bogus'"):
        train(cfg_for(sudoku4, run, "max_steps=8", "log_interval=4"))


def test_a_kill_after_a_timed_save_inside_a_log_interval_resumes_to_the_unbroken_runs_records(sudoku4, tmp_path,
                                                                                               monkeypatch):
    from trm_kaggle.train.stops import Decision, StopControl

    args = ("log_interval=4", "max_steps=10")
    train(cfg_for(sudoku4, tmp_path / "a", *args))
    run = tmp_path / "b"
    real_step, real_poll = loop.train_step, StopControl.poll

    def killed_at_7(state, *a, **kw):
        if state.step == 6:
            raise SystemExit("killed")  # a kill after step 6's timed save: steps 5 and 6 are in no record
        return real_step(state, *a, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(loop, "train_step", killed_at_7)
        patched.setattr(StopControl, "poll", lambda self, step: Decision(save=True) if step == 6 else
                        real_poll(self, step))
        with pytest.raises(SystemExit):
            train(cfg_for(sudoku4, run, *args))
    assert [r["step"] for r in records(run) if "loss" in r] == [4]
    train(cfg_for(sudoku4, run, *args))
    assert records(run) == records(tmp_path / "a")
