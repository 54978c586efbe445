"""No wait outlasts a stop: a FIFO named like an older train state never hangs the rotation of old states (it
is never opened for reading), a stop signal that arrives once the state is on disk ends the run at once, and a
second signal ends it with 128 + its number (143 for SIGTERM, 130 for SIGINT), never 130 for both."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from test_train import cfg_for
from trm_kaggle import interrupts
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import train
from trm_kaggle.train.stops import StoppedAtOnce, TrainingInterrupted


def test_a_fifo_named_like_an_older_state_is_left_and_never_waited_on(sudoku4, tmp_path):
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=2"))
    fifo = ckpt.state_path(run, 1)
    os.mkfifo(fifo)
    done: list = []
    t = threading.Thread(target=lambda: done.append(train(cfg_for(sudoku4, run, "max_steps=4", "checkpoint_keep=1"))),
                         daemon=True)
    t.start()
    t.join(60)
    assert done and done[0].step == 4, "the rotation waited on the FIFO"
    assert [p.name for p in ckpt.list_states(run)] == [fifo.name, ckpt.state_path(run, 4).name]  # left, not ours


def test_a_signal_once_the_state_is_written_ends_any_wait_of_the_save(sudoku4, tmp_path, monkeypatch):
    real, entered = ckpt._written_by, []

    def stuck(path, run_id, step=None):  # the rotation meets something that waits (a slow or hung file system)
        entered.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(8)
        return real(path, run_id, step)

    monkeypatch.setattr(ckpt, "_written_by", stuck)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as stopped:
        train(cfg_for(sudoku4, run, "max_steps=3"), signals=True)
    assert time.monotonic() - entered[0] < 6  # the signal ended the sleep: it did not wait it out
    assert stopped.value.exit_status == 143 and "at step 3: train state saved" in str(stopped.value)
    monkeypatch.setattr(ckpt, "_written_by", real)
    assert ckpt.load_train_state(ckpt.state_path(run, 3))["step"] == 3


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_exits_with_its_own_number(sudoku4, tmp_path, capsys, signum):
    def twice(step, record):
        if step == 2:
            os.kill(os.getpid(), signum)
            time.sleep(interrupts.REPEAT_S + 0.1)  # the first is taken in this sleep; the second is a person's
            os.kill(os.getpid(), signum)

    with pytest.raises(StoppedAtOnce) as stopped:
        train(cfg_for(sudoku4, tmp_path / "run", "max_steps=50"), on_step=twice, signals=True)
    assert stopped.value.exit_status == 128 + signum and not isinstance(stopped.value, TrainingInterrupted)
    assert "a second time: stopped at once, without saving" in str(stopped.value)
    assert not ckpt.list_states(tmp_path / "run")


def test_a_signal_said_twice_at_once_is_one_stop_that_saves(sudoku4, tmp_path):
    """`timeout` forwards the SIGTERM its process group already got: two within REPEAT_S are one stop, which
    saves (the second had stopped the run without saving)."""
    def twice(step, record):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        train(cfg_for(sudoku4, tmp_path / "run", "max_steps=50"), on_step=twice, signals=True)
    except KeyboardInterrupt as e:  # (pytest.raises would let StoppedAtOnce, also a KeyboardInterrupt, end pytest)
        stopped = e
    assert isinstance(stopped, TrainingInterrupted), stopped
    assert stopped.exit_status == 143 and "at step 2: train state saved" in str(stopped)
    assert ckpt.load_train_state(ckpt.state_path(tmp_path / "run", 2))["step"] == 2
