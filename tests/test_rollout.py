"""The one ACT rollout: full-length runs equal a plain loop over the steps; early exit stops rows and compacts."""

from __future__ import annotations

import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.model.rollout import act_rollout
from trm_kaggle.model.trm import TinyRecursiveModel

ARCH = ArchConfig(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=3,
                  puzzle_emb_len=1, forward_dtype="float32")


def halting_differs_by_row(model, batch) -> None:
    """A q head whose first-step q_halt is positive for half the rows and negative for the rest, whatever the
    initial weights' draw: random weights, then the bias that puts the median at zero (q_halt is linear in it)."""
    model.q_head.bias.zero_()
    model.q_head.weight.normal_(0.0, 10.0)
    q1 = act_rollout(model, batch, 1).q_halt.sort().values
    mid = len(q1) // 2
    model.q_head.bias[0] = -(q1[mid - 1] + q1[mid]) / 2


def model_and_batch(rows: int = 6):
    torch.manual_seed(0)
    model = TinyRecursiveModel(ARCH, 8, 5, 4).eval()
    batch = {"inputs": torch.randint(0, 5, (rows, 8), dtype=torch.int32),
             "labels": torch.randint(0, 5, (rows, 8), dtype=torch.int32),
             "puzzle_identifiers": torch.randint(0, 4, (rows,), dtype=torch.int32)}
    return model, batch


@torch.no_grad()
def test_full_length_rollout_equals_the_plain_loop():
    model, batch = model_and_batch()
    carry = model.initial_carry(batch)
    for _ in range(3):
        carry, out = model(carry, batch)
    r = act_rollout(model, batch, 3)
    assert torch.equal(r.tokens, out["logits"].argmax(-1).to(torch.uint8))
    assert torch.equal(r.q_halt, out["q_halt_logits"].float())
    assert (r.steps == 3).all() and (r.rows_forwarded, r.calls) == (6 * 3, 3)
    assert torch.equal(r.outputs["logits"], out["logits"]) and torch.equal(r.carry.steps, carry.steps)


@torch.no_grad()
def test_early_exit_stops_rows_and_forwards_only_the_rest():
    model, batch = model_and_batch()
    halting_differs_by_row(model, batch)  # from "almost never halt" to a q_halt whose sign differs by row
    full = act_rollout(model, batch, 3)
    q1 = act_rollout(model, batch, 1).q_halt
    early = act_rollout(model, batch, 3, early_exit=True)
    stopped = q1 > 0
    assert int(stopped.sum()) == 3
    assert torch.equal(early.steps[stopped], torch.ones(int(stopped.sum()), dtype=torch.int32))
    assert (early.steps[~stopped] >= 2).all()
    assert early.rows_forwarded == int(early.steps.sum())  # each row is forwarded once per step it runs
    # a row that stops after k steps gets the prediction of a k-step run
    for k in (1, 2, 3):
        rows = early.steps == k
        assert torch.equal(early.tokens[rows], (full if k == 3 else act_rollout(model, batch, k)).tokens[rows])


@torch.no_grad()
def test_masked_rollout_equals_the_compacting_one():
    """compact=False (XLA's default: fixed shapes) keeps stopped rows in the batch and freezes their
    results: the same tokens, steps and q_halt as compaction, with every row forwarded at every call."""
    model, batch = model_and_batch()
    halting_differs_by_row(model, batch)
    for early_exit in (False, True):
        compacted = act_rollout(model, batch, 3, early_exit=early_exit)
        masked = act_rollout(model, batch, 3, early_exit=early_exit, compact=False)
        assert torch.equal(masked.tokens, compacted.tokens)
        assert torch.equal(masked.steps, compacted.steps)
        # compaction runs the last rows in a smaller batch: float rounding may differ in the last bits
        assert torch.allclose(masked.q_halt, compacted.q_halt, rtol=1e-5, atol=1e-5)
        assert masked.calls == compacted.calls and masked.rows_forwarded == 6 * masked.calls
    assert 1 in act_rollout(model, batch, 3, early_exit=True, compact=False).steps.tolist()  # some rows stopped early
