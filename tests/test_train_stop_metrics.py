"""A stop by SIGINT or SIGTERM logs the metrics of its last, unfinished logging interval, as a deadline stop
does: the steps trained since the last record are in metrics.jsonl, each once."""

from __future__ import annotations

import json
import os
import signal

import pytest

from test_train import cfg_for
from trm_kaggle.train import loop
from trm_kaggle.train.loop import train
from trm_kaggle.train.stops import TrainingInterrupted


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_between_log_intervals_logs_the_last_one(sudoku4, tmp_path, monkeypatch, signum):
    real = loop.train_step

    def step_then_signal(state, *args, **kwargs):
        out = real(state, *args, **kwargs)
        if state.step == 6:  # mid-interval: log_interval=4 logs at 4 and 8
            os.kill(os.getpid(), signum)
        return out

    monkeypatch.setattr(loop, "train_step", step_then_signal)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted, match="at step 6"):
        train(cfg_for(sudoku4, run, "max_steps=50", "log_interval=4"), signals=True)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [4, 6]
    assert records[-1]["halted_examples"] >= 0 and records[-1]["loss"] > 0
