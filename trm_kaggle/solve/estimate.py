"""How long will the Kaggle kernel take? Measured on this device, extrapolated to the hidden test set.

Every task is fine-tuned and predicted on its own, so the kernel's time is
tasks x (fine-tuning steps x seconds per step) + (test examples x ACT steps x seconds per row-step),
where test examples = tasks x test inputs per task x (num_aug + 1) (`finetune_seconds`, `inference_seconds`;
the kernel's plan, `trm_kaggle.solve.plan`, uses the same two). Both rates are measured here with the real
architecture (random weights: speed does not depend on their values) on random ARC-shaped batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.model.losses import act_loss
from trm_kaggle.model.trm import TinyRecursiveModel

# ARC-AGI-2 evaluation: 120 tasks, 167 test inputs, 3.3 demonstration pairs per task on average
TEST_INPUTS_PER_TASK = 167 / 120
KAGGLE_LIMIT_S = 12 * 3600


@dataclass
class Estimate:
    device: str
    finetune_step_s: float
    row_step_s: float
    finetune_s: float
    inference_s: float

    @property
    def total_s(self) -> float:
        return self.finetune_s + self.inference_s


def finetune_seconds(tasks: int, steps: int, step_s: float) -> float:
    """Seconds of fine-tuning `tasks` tasks for `steps` steps each."""
    return tasks * steps * step_s


def inference_seconds(examples: float, act_steps: int, row_step_s: float) -> float:
    """Seconds of predicting `examples` augmented test inputs for `act_steps` ACT steps each."""
    return examples * act_steps * row_step_s


def seconds_per_call(fn: Callable[[], object], device: torch.device, repeats: int = 1) -> float:
    """Wall-clock seconds of one call of `fn` on `device`: one warm-up call, then the mean of `repeats`.

    The step timer of the solver: `estimate` times training and inference steps with it, and so does the
    kernel's plan (`trm_kaggle.solve.plan.measure_rates`, through `estimate`).
    """
    fn()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / repeats


def estimate(arch: ArchConfig, *, tasks: int = 120, num_aug: int = 100, finetune_steps: int = 500,
             batch_size: int = 64, eval_batch_size: int = 256, device: str | torch.device = "cpu",
             seq_len: int = 900, vocab_size: int = 12, repeats: int = 2) -> Estimate:
    device = torch.device(device)
    n_ids = tasks * (num_aug + 1) + 1
    model = TinyRecursiveModel(arch, seq_len, vocab_size, min(n_ids, 4096)).to(device)

    def batch(rows: int) -> dict[str, torch.Tensor]:
        return {"inputs": torch.randint(0, vocab_size, (rows, seq_len), device=device, dtype=torch.int32),
                "labels": torch.randint(0, vocab_size, (rows, seq_len), device=device, dtype=torch.int64),
                "puzzle_identifiers": torch.randint(0, min(n_ids, 4096), (rows,), device=device, dtype=torch.int32)}

    train_batch = batch(batch_size)
    model.train()
    carry = model.initial_carry(train_batch)

    def train_step():
        c, out = model(carry, train_batch)
        loss, _ = act_loss(out, c.current_data["labels"], c.halted, c.steps, arch.loss_type)
        loss.backward()
        model.zero_grad(set_to_none=True)
        if model.puzzle_emb is not None:
            model.puzzle_emb.clear()

    step_s = seconds_per_call(train_step, device, repeats)
    rows = eval_batch_size
    eval_batch = batch(rows)
    model.eval()
    eval_carry = model.initial_carry(eval_batch)

    def eval_step():
        with torch.inference_mode():
            model(eval_carry, eval_batch)

    row_step_s = seconds_per_call(eval_step, device, repeats) / rows
    test_examples = tasks * TEST_INPUTS_PER_TASK * (num_aug + 1)
    return Estimate(str(device), step_s, row_step_s, finetune_seconds(tasks, finetune_steps, step_s),
                    inference_seconds(test_examples, arch.halt_max_steps, row_step_s))


def format_estimate(e: Estimate, tasks: int, num_aug: int, finetune_steps: int) -> str:
    def hms(s: float) -> str:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m{int(s % 60):02d}s"

    fits = "fits" if e.total_s < KAGGLE_LIMIT_S else "does NOT fit"
    return "\n".join([
        f"estimate on {e.device} for {tasks} tasks, num_aug {num_aug}, {finetune_steps} fine-tuning steps per task:",
        f"  fine-tuning  {hms(e.finetune_s):>12}  ({e.finetune_step_s:.3f} s per step)",
        f"  inference    {hms(e.inference_s):>12}  ({e.row_step_s * 1e3:.2f} ms per example per ACT step)",
        f"  total        {hms(e.total_s):>12}  -> {fits} in Kaggle's 12 h limit ({e.total_s / KAGGLE_LIMIT_S:.0%})",
    ])
