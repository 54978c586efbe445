"""ACT rollouts: full-length runs equal a plain loop over the steps; early exit stops rows and compacts; continuous
batching (a fixed batch refilled from a queue) gives the compacting rollout's predictions row for row."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from trm_kaggle.config import ArchConfig
from trm_kaggle.model.rollout import ContinuousRollout, act_rollout, balanced_slots
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
    r = act_rollout(model, batch, 3, keep_logits=True)
    assert torch.equal(r.tokens, out["logits"].argmax(-1).to(torch.uint8))
    assert torch.equal(r.logits, out["logits"].float()) and act_rollout(model, batch, 3).logits is None
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
    kept = act_rollout(model, batch, 3, early_exit=True, keep_logits=True).logits
    for k in (1, 2, 3):
        rows = early.steps == k
        k_steps = act_rollout(model, batch, k, keep_logits=True)
        assert torch.equal(early.tokens[rows], (full if k == 3 else k_steps).tokens[rows])
        assert torch.allclose(kept[rows], k_steps.logits[rows], rtol=1e-5, atol=1e-5)  # the logits of that step


@torch.no_grad()
def test_masked_rollout_equals_the_compacting_one():
    """compact=False (XLA's default: fixed shapes) keeps stopped rows in the batch and freezes their
    results: the same tokens, steps and q_halt as compaction, with every row forwarded at every call."""
    model, batch = model_and_batch()
    halting_differs_by_row(model, batch)
    for early_exit in (False, True):
        compacted = act_rollout(model, batch, 3, early_exit=early_exit, keep_logits=True)
        masked = act_rollout(model, batch, 3, early_exit=early_exit, compact=False, keep_logits=True)
        assert torch.equal(masked.tokens, compacted.tokens)
        assert torch.allclose(masked.logits, compacted.logits, rtol=1e-5, atol=1e-5)
        assert torch.equal(masked.steps, compacted.steps)
        # compaction runs the last rows in a smaller batch: float rounding may differ in the last bits
        assert torch.allclose(masked.q_halt, compacted.q_halt, rtol=1e-5, atol=1e-5)
        assert masked.calls == compacted.calls and masked.rows_forwarded == 6 * masked.calls
    assert 1 in act_rollout(model, batch, 3, early_exit=True, compact=False).steps.tolist()  # some rows stopped early


def chunks(batch, sizes):
    """The batch as a stream of chunks of these sizes (a loader's batches need not match the slots)."""
    at = 0
    for n in sizes:
        yield {k: v[at:at + n] for k, v in batch.items()}
        at += n


def collect(groups):
    """The Finished groups of a continuous rollout in the source's order: (ids, tokens, q_halt, steps, data)."""
    ids = np.concatenate([g.ids for g in groups])
    order = torch.from_numpy(np.argsort(ids))
    if groups[0].logits is not None:  # kept: the tokens are their argmax
        assert all(torch.equal(g.tokens, g.logits.argmax(-1).to(g.tokens.dtype)) for g in groups)
    return (np.sort(ids), torch.cat([g.tokens for g in groups])[order], torch.cat([g.q_halt for g in groups])[order],
            torch.cat([g.steps for g in groups])[order],
            {k: torch.cat([g.data[k] for g in groups])[order] for k in groups[0].data})


@torch.no_grad()
@pytest.mark.parametrize("early_exit", [False, True])
def test_continuous_batching_equals_the_compacting_rollout_row_for_row(early_exit):
    """Any number of slots (dividing the 13 examples or not, more than them), fed by chunks of other sizes,
    shrinking at the end or not: each example's tokens and steps are those of the one-batch rollout, its q_halt
    too up to the last bits (BLAS picks other kernels for other batch sizes: q_halt ~ 40 here differed by 1e-4
    with 1 or 2 slots)."""
    model, batch = model_and_batch(13)
    halting_differs_by_row(model, batch)
    ref = act_rollout(model, batch, 3, early_exit=early_exit, keep_logits=True)
    if early_exit:
        assert 1 in ref.steps.tolist() and 3 in ref.steps.tolist()  # rows stop at different steps
    for slots in (1, 2, 4, 5, 13, 20):
        for shrink in (False, True):
            r = ContinuousRollout(model, slots, 3, early_exit, shrink_at_end=shrink, keep_logits=slots == 4)
            groups = list(r.run(chunks(batch, [3, 7, 3])))
            ids, tokens, q_halt, steps, data = collect(groups)
            if slots == 4:  # each example's logits at the step it stopped
                order = torch.from_numpy(np.argsort(np.concatenate([g.ids for g in groups])))
                logits = torch.cat([g.logits for g in groups])[order]
                assert torch.allclose(logits, ref.logits, rtol=1e-5, atol=1e-5), shrink
            assert ids.tolist() == list(range(13))
            assert torch.equal(tokens, ref.tokens), (slots, shrink)
            assert torch.equal(steps, ref.steps), (slots, shrink)
            assert torch.allclose(q_halt, ref.q_halt, rtol=1e-5, atol=1e-5), (slots, shrink)
            assert all(torch.equal(data[k], batch[k]) for k in batch)  # each example's own entries come back
            if shrink:  # nothing idles: each example is forwarded once per step it runs
                assert r.rows_forwarded == int(ref.steps.sum())
            else:
                assert r.rows_forwarded == slots * r.calls


class HostReads(TorchFunctionMode):
    """Counts the tensor-to-host conversions made under it (what syncs with a GPU: .cpu(), .item(), ...)."""

    READS = {torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
             torch.Tensor.__float__}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))


@torch.no_grad()
def test_one_shape_one_host_read_per_step_and_lm_head_only_for_stopped_rows():
    model, batch = model_and_batch(13)
    halting_differs_by_row(model, batch)
    shapes, decoded = [], []
    model.layers[0].register_forward_pre_hook(lambda m, args: shapes.append(args[0].shape[0]))
    model.lm_head.register_forward_pre_hook(lambda m, args: decoded.append(args[0].shape[0]))
    r = ContinuousRollout(model, 4, 3, early_exit=True, shrink_at_end=False)
    with HostReads() as reads:
        groups = list(r.run(chunks(batch, [13])))
    assert sum(map(len, groups)) == 13
    assert set(shapes) == {4}  # the network always ran the same batch shape
    assert reads.count == r.calls  # the stop mask, once per ACT step
    assert sum(decoded) == 13 < 4 * r.calls  # each example decoded once, at the step it stopped
    ref = act_rollout(model, batch, 3, early_exit=True)
    assert r.calls < 3 * 4  # fewer calls than 4 batches of 4 rows (13 examples) at full length: rows refilled
    assert int(ref.steps.sum()) < 13 * 3


@torch.no_grad()
def test_examples_refused_by_may_start_never_start():
    """The deadline's rule: from the first refused example on, nothing starts; those before it all finish."""
    model, batch = model_and_batch(13)
    r = ContinuousRollout(model, 4, 3)
    ids, _, _, steps, _ = collect(list(r.run(chunks(batch, [5, 8]), may_start=lambda i: i < 6)))
    assert ids.tolist() == list(range(6)) and (steps == 3).all()
    assert list(ContinuousRollout(model, 4, 3).run(chunks(batch, [13]), may_start=lambda i: False)) == []
    assert list(ContinuousRollout(model, 4, 3).run(chunks(batch, [0]))) == []


@torch.no_grad()
def test_a_stop_time_ends_the_run_at_the_next_act_step_with_the_running_rows_unfinished(monkeypatch):
    """`stop_at` (a worker's own deadline): the rows that started before it do not run on to their last step
    past it; those that finished before it are kept, and nothing starts after it."""
    from trm_kaggle.model import rollout as rollout_module

    model, batch = model_and_batch(13)
    clock = iter(range(1000))  # one tick per read of the clock
    monkeypatch.setattr(rollout_module.time, "monotonic", lambda: float(next(clock)))
    r = ContinuousRollout(model, 4, 3)
    groups = list(r.run(chunks(batch, [13]), stop_at=12.0))
    ids, _, _, steps, _ = collect(groups)
    assert 0 < len(ids) < 13 and (steps == 3).all()  # some finished whole, then the run stopped
    assert r.calls < 13 * 3 / 4 + 3  # far fewer model calls than running every row to its last step
    assert list(ContinuousRollout(model, 4, 3).run(chunks(batch, [13]), stop_at=-1.0)) == []
    full = list(ContinuousRollout(model, 4, 3).run(chunks(batch, [13]), stop_at=1e9))
    assert len(collect(full)[0]) == 13


@torch.no_grad()
def test_the_masked_path_xla_runs_gives_the_same_predictions():
    """XLA's path (batch after batch, each padded to the slots, stopped rows masked), run here on CPU."""
    model, batch = model_and_batch(13)
    halting_differs_by_row(model, batch)
    for early_exit in (False, True):
        ref = act_rollout(model, batch, 3, early_exit=early_exit)
        r = ContinuousRollout(model, 5, 3, early_exit, keep_logits=True)
        r.masked = True
        ids, tokens, q_halt, steps, _ = collect(list(r.run(chunks(batch, [13]))))  # tokens = logits' argmax
        assert ids.tolist() == list(range(13)) and torch.equal(tokens, ref.tokens) and torch.equal(steps, ref.steps)
        assert torch.allclose(q_halt, ref.q_halt, rtol=1e-5, atol=1e-5)
        assert r.rows_forwarded == 5 * r.calls  # 3 padded batches of 5 rows


def test_balanced_slots():
    assert [balanced_slots(n, 16) for n in (45, 48, 49, 16, 5, 0)] == [15, 16, 13, 16, 5, 16]
