"""How long will the Kaggle kernel take? Measured on this device, extrapolated to the hidden test set.

The kernel's time is (fine-tuning steps x seconds per step) + (test examples x ACT steps x seconds per row-step),
where test examples = tasks x test inputs per task x (num_aug + 1). A fine-tuning step that trains every weight
costs more than one that trains the puzzle rows alone (weight gradients and the AdamATan2 step come on top of the
backward pass both need), so both are timed and each mode is priced from its schedule (`schedule.py`). The
rates are measured here with the real architecture (random weights: speed does not depend on their values) on
random ARC-shaped batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from trm_kaggle.config import ArchConfig, SolveConfig, TrainConfig
from trm_kaggle.model.losses import act_loss
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.solve.schedule import MODES, finetune_phases, steps_by_kind
from trm_kaggle.train.loop import make_optimizers

# ARC-AGI-2 evaluation: 120 tasks, 167 test inputs, 3.3 demonstration pairs per task on average
TEST_INPUTS_PER_TASK = 167 / 120
KAGGLE_LIMIT_S = 12 * 3600


@dataclass
class Estimate:
    device: str
    finetune_step_s: float  # one step training every weight ("all")
    embeddings_step_s: float  # one step training the puzzle rows alone (weights frozen)
    row_step_s: float
    finetune_steps: int
    embeddings_fraction: float
    mode: str
    inference_s: float

    def finetune_seconds(self, mode: str | None = None) -> float:
        """Fine-tuning time of `mode` (default: the estimate's) over `finetune_steps` steps."""
        frozen, weights = steps_by_kind(finetune_phases(mode or self.mode, self.embeddings_fraction,
                                                        self.finetune_steps))
        return frozen * self.embeddings_step_s + weights * self.finetune_step_s

    @property
    def finetune_s(self) -> float:
        return self.finetune_seconds()

    @property
    def total_s(self) -> float:
        return self.finetune_s + self.inference_s


def seconds_per_call(fn: Callable[[], object], device: torch.device, repeats: int = 1) -> float:
    """Wall-clock seconds of one call of `fn` on `device`: one warm-up call, then the mean of `repeats`.

    The step timer of the solver: `estimate` times training and inference steps with it, and
    `trm_kaggle.solve.solve.inference_seconds` the inference step it reserves time for.
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


_SOLVE = SolveConfig.model_fields


def estimate(arch: ArchConfig, *, tasks: int = 120, num_aug: int = _SOLVE["num_aug"].default,
             finetune_steps: int = _SOLVE["finetune_steps"].default, finetune: str = _SOLVE["finetune"].default,
             embeddings_fraction: float = _SOLVE["embeddings_fraction"].default, batch_size: int = 64,
             eval_batch_size: int = 256, device: str | torch.device = "cpu", seq_len: int = 900,
             vocab_size: int = 12, repeats: int = 2) -> Estimate:
    device = torch.device(device)
    n_ids = min(tasks * (num_aug + 1) + 1, 4096)
    model = TinyRecursiveModel(arch, seq_len, vocab_size, n_ids).to(device)

    def batch(rows: int) -> dict[str, torch.Tensor]:
        return {"inputs": torch.randint(0, vocab_size, (rows, seq_len), device=device, dtype=torch.int32),
                "labels": torch.randint(0, vocab_size, (rows, seq_len), device=device, dtype=torch.int64),
                "puzzle_identifiers": torch.randint(0, n_ids, (rows,), device=device, dtype=torch.int32)}

    train_batch = batch(batch_size)
    model.train()
    carry = model.initial_carry(train_batch)

    def train_step_timer(freeze_weights: bool) -> float:
        # the optimizers `trm-kaggle submit` builds for this kind of step (frozen: no weight gradients, no AdamATan2)
        dense, sparse = make_optimizers(TrainConfig(arch=arch, freeze_weights=freeze_weights), model)

        def train_step():
            c, out = model(carry, train_batch)
            loss, _ = act_loss(out, c.current_data["labels"], c.halted, c.steps, arch.loss_type)
            loss.backward()
            if dense is not None:
                dense.step()
                dense.zero_grad(set_to_none=True)
            if sparse is not None:
                sparse.step()

        return seconds_per_call(train_step, device, repeats)

    all_step_s = train_step_timer(False)
    # last: it sets requires_grad=False on the weights; a model without puzzle rows has nothing to train there
    emb_step_s = train_step_timer(True) if model.puzzle_emb is not None else 0.0
    rows = eval_batch_size
    eval_batch = batch(rows)
    model.eval()
    eval_carry = model.initial_carry(eval_batch)

    def eval_step():
        with torch.inference_mode():
            model(eval_carry, eval_batch)

    row_step_s = seconds_per_call(eval_step, device, repeats) / rows
    test_examples = tasks * TEST_INPUTS_PER_TASK * (num_aug + 1)
    return Estimate(str(device), all_step_s, emb_step_s, row_step_s, finetune_steps, embeddings_fraction, finetune,
                    test_examples * arch.halt_max_steps * row_step_s)


def hms(s: float) -> str:
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m{int(s % 60):02d}s"


def format_estimate(e: Estimate, tasks: int, num_aug: int) -> str:
    fits = "fits" if e.total_s < KAGGLE_LIMIT_S else "does NOT fit"
    lines = [
        f"estimate on {e.device} for {tasks} tasks, num_aug {num_aug}, {e.finetune_steps} fine-tuning steps "
        f"({e.mode}):",
        f"  fine-tuning  {hms(e.finetune_s):>12}  ({e.finetune_step_s:.3f} s per step training every weight, "
        f"{e.embeddings_step_s:.3f} s per step training the puzzle rows alone)",
        f"  inference    {hms(e.inference_s):>12}  ({e.row_step_s * 1e3:.2f} ms per example per ACT step)",
        f"  total        {hms(e.total_s):>12}  -> {fits} in Kaggle's 12 h limit ({e.total_s / KAGGLE_LIMIT_S:.0%})",
        "  every fine-tuning mode (--finetune), same steps:",
    ]
    for mode in MODES:
        total = e.finetune_seconds(mode) + e.inference_s
        lines.append(f"    {'*' if mode == e.mode else ' '} {mode:<20} fine-tuning {hms(e.finetune_seconds(mode)):>10}"
                     f"  total {hms(total):>10}  ({total / KAGGLE_LIMIT_S:.0%} of 12 h)")
    return "\n".join(lines)
