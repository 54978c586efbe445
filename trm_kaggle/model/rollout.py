"""Inference with ACT: run one batch through its supervision steps until every row has stopped.

Like upstream's evaluation, a row runs `max_steps` steps. With `early_exit=True`
a row stops as soon as its q_halt logit is > 0, and the batch is *compacted*: the
stopped rows leave the carry and the batch, so later steps run on fewer rows
(that is where the time is saved; masking would cost as much as running them).
Each row keeps the prediction of the step at which it stopped.

On XLA (`compact=False`, its default there) shapes must not change: stopped rows stay in
the batch and their results are frozen by masks, each ACT step ends at a step boundary
(so one compiled program serves every step), and the loop ends when every row has stopped.
Same results, no time saved per step.

Every inference path runs its batches through `act_rollout`: evaluation
(`trm_kaggle.evaluate.predict`), the test-split check during training
(`trm_kaggle.train.loop.evaluate_split`) and the demonstration accuracy of the
Kaggle solver (`trm_kaggle.solve.task.demo_accuracy`). Callers choose the grad
mode and put the model in eval mode.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from trm_kaggle import xla
from trm_kaggle.model.trm import Carry


@dataclass
class Rollout:
    """What one batch's rollout produced; row i is row i of the batch given."""

    tokens: torch.Tensor  # (B, seq_len) argmax of the logits at the step the row stopped: uint8, or int16
    #                       for a vocabulary wider than a byte (see `token_dtype`)
    q_halt: torch.Tensor  # float32 (B,): q_halt logit at that step
    steps: torch.Tensor  # int32 (B,): ACT steps the row ran
    carry: Carry  # the carry after the last model call (rows still running then; all rows without early exit)
    outputs: dict[str, torch.Tensor]  # the model outputs of the last call (same rows as `carry`)
    rows_forwarded: int  # sum over model calls of the rows passed (compaction shows here)
    calls: int  # model calls


def token_dtype(model: torch.nn.Module) -> torch.dtype:
    """uint8 holds every vocabulary of ARC, Sudoku and Maze; a BPE code-repair model needs int16."""
    return torch.int16 if getattr(model, "vocab_size", 0) > 256 else torch.uint8


def act_rollout(model: torch.nn.Module, batch: dict[str, torch.Tensor], max_steps: int,
                early_exit: bool = False, compact: bool | None = None) -> Rollout:
    """Run `batch` for up to `max_steps` ACT steps (see the module docstring).

    compact: stopped rows leave the batch (default) or stay, masked (default on XLA)."""
    B, L = batch["inputs"].shape
    device = batch["inputs"].device
    if compact is None:
        compact = device.type != "xla"
    if not compact:
        return _masked_rollout(model, batch, max_steps, early_exit)
    tokens = torch.empty(B, L, dtype=token_dtype(model), device=device)
    q_out = torch.empty(B, dtype=torch.float32, device=device)
    steps_out = torch.empty(B, dtype=torch.int32, device=device)
    active = torch.arange(B, device=device)  # original row of each row still running
    carry = model.initial_carry(batch)
    rows = calls = 0
    for step in range(1, max_steps + 1):
        carry, out = model(carry, batch)
        rows += int(active.shape[0])
        calls += 1
        q = out["q_halt_logits"].float()
        last = step == max_steps
        if last:
            done = torch.ones_like(q, dtype=torch.bool)
        elif early_exit:
            done = q > 0
        else:
            done = None
        if done is not None:
            all_done = last or bool(done.all())
            idx = active if all_done else active[done]
            logits = out["logits"] if all_done else out["logits"][done]
            tokens[idx] = logits.argmax(-1).to(tokens.dtype)
            q_out[idx] = q if all_done else q[done]
            steps_out[idx] = step
            if all_done:
                break
            keep = ~done
            if not bool(keep.all()):
                # compact: the stopped rows leave the carry and the batch
                active = active[keep]
                batch = {k: v[keep] for k, v in batch.items()}
                carry = replace(carry, z_H=carry.z_H[keep], z_L=carry.z_L[keep], steps=carry.steps[keep],
                                halted=carry.halted[keep],
                                current_data={k: v[keep] for k, v in carry.current_data.items()})
        # rows still running continue from their state: never let the model restart them
        # (a model built with early_exit=True marks q_halt > 0 rows halted itself)
        carry = replace(carry, halted=torch.zeros_like(carry.halted))
    return Rollout(tokens, q_out, steps_out, carry, out, rows, calls)


def _masked_rollout(model: torch.nn.Module, batch: dict[str, torch.Tensor], max_steps: int,
                    early_exit: bool) -> Rollout:
    """act_rollout with fixed shapes: a stopped row keeps running, but its results are frozen."""
    B, L = batch["inputs"].shape
    xla_device = batch["inputs"].device.type == "xla"
    carry = model.initial_carry(batch)
    tokens = torch.zeros(B, L, dtype=token_dtype(model), device=carry.steps.device)
    q_out = torch.zeros(B, dtype=torch.float32, device=carry.steps.device)
    steps_out = torch.zeros(B, dtype=torch.int32, device=carry.steps.device)
    stopped = torch.zeros(B, dtype=torch.bool, device=carry.steps.device)
    calls = 0
    for step in range(1, max_steps + 1):
        carry, out = model(carry, batch)
        calls += 1
        q = out["q_halt_logits"].float()
        last = step == max_steps
        new = ~stopped if last else (q > 0) & ~stopped if early_exit else None
        if new is not None:
            tokens = torch.where(new.view(-1, 1), out["logits"].argmax(-1).to(tokens.dtype), tokens)
            q_out = torch.where(new, q, q_out)
            steps_out = torch.where(new, carry.steps, steps_out)  # the model's step count: equal to `step` here
            stopped = stopped | new
        all_stopped = stopped.all() if early_exit and not last else None
        if xla_device:
            xla.step_boundary()  # one program per ACT step (the first differs: it starts from the initial carry)
        if last or (all_stopped is not None and bool(all_stopped)):
            break
        # rows continue from their state: never let the model restart them
        carry = replace(carry, halted=torch.zeros_like(carry.halted))
    return Rollout(tokens, q_out, steps_out, carry, out, B * calls, calls)
