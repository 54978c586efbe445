"""How long the kernel takes: the step timer and the extrapolation built on it."""

from __future__ import annotations

import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.solve.estimate import KAGGLE_LIMIT_S, estimate, format_estimate, seconds_per_call

ARCH = ArchConfig(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                  puzzle_emb_len=1, forward_dtype="float32")


def test_step_timer_warms_up_once_then_averages():
    calls = []
    seconds = seconds_per_call(lambda: calls.append(1), torch.device("cpu"), repeats=3)
    assert len(calls) == 4 and seconds >= 0.0


def test_estimate_extrapolates_both_rates():
    e = estimate(ARCH, tasks=2, num_aug=1, finetune_steps=10, batch_size=2, eval_batch_size=4, seq_len=16,
                 vocab_size=12, repeats=1)
    assert e.finetune_step_s > 0 and e.row_step_s > 0
    assert e.finetune_s == 2 * 10 * e.finetune_step_s  # every task is fine-tuned on its own
    assert e.total_s == e.finetune_s + e.inference_s < KAGGLE_LIMIT_S
    assert "fits in Kaggle's 12 h limit" in format_estimate(e, 2, 1, 10)
    assert "10 fine-tuning steps per task" in format_estimate(e, 2, 1, 10)


def test_estimate_command_per_device(tmp_path, capsys):
    from conftest import make_export

    from trm_kaggle.cli import main

    weights = make_export(tmp_path / "w")
    assert main(["estimate", "--weights", str(weights), "--tasks", "5", "--devices", "2", "--num-aug", "1",
                 "--finetune-steps", "3", "--batch-size", "2", "--eval-batch-size", "4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "for 3 tasks, num_aug 1, 3 fine-tuning steps per task" in out and "5 tasks over 2 devices" in out
    assert main(["estimate", "--weights", str(weights), "--devices", "0"]) == 2
