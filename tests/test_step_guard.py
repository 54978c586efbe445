"""The steady-state training step without host syncs: the finite check decided on the device (StepGuard), its
skipped steps changing nothing, and the count of host reads per step (a CPU proxy here, CUDA's sync debug mode
under the `cuda` marker).

The stated bound: 0 host reads per steady-state step on CUDA (and on a CPU put in the same mode). What a run
reads outside its steps (set-up, the first step's check, whose optimizer has no state yet, one read per log
interval, the final save) is the same for a run of 4 and of 8 steps; the difference of the two counts is what
4 steady-state steps read.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from benchmarks.bench_sync_free import HostReads
from integrity_helpers import train_args
from trm_kaggle.cli import main
from trm_kaggle.model.trm import Carry
from trm_kaggle.optim.sign_sgd import sparse_sign_sgd_
from trm_kaggle.train import nonfinite, setup, step
from trm_kaggle.train.step_guard import StepGuard, keep_carries

#: Host reads per steady-state training step, at most (CUDA; a CPU in the same mode).
MAX_HOST_READS_PER_STEP = 0


@pytest.fixture
def sync_free(monkeypatch):
    """The CUDA step's mode on this CPU: the finite check on the device, step counts on the device."""
    monkeypatch.setattr(nonfinite, "SYNC_FREE_DEVICES", ("cuda", "cpu"))


def reads_of_a_run(data, run, steps: int, *extra: str) -> HostReads:
    with HostReads() as reads:
        assert main(train_args(data, run, f"max_steps={steps}", "log_interval=1000", "ema=True", *extra)) == 0
    return reads


def test_the_counter_sees_each_kind_of_host_read():
    t = torch.tensor([1.0, 0.0])
    with HostReads() as reads:
        bool(t[0]), int(t[0]), float(t[0]), t[0].item(), t.tolist(), t.nonzero(), torch.unique(t), t[t > 0]
        t + 1, t.sum(), torch.where(t > 0, t, 0.0)  # none of these
    assert reads.count == 8, reads.seen


def test_a_steady_state_step_reads_nothing_on_the_host(data, tmp_path, sync_free):
    """4 more steps add no host read (MAX_HOST_READS_PER_STEP); the same run with the CPU's own per-step check
    (read on the host, where it costs nothing) adds some per step: the count sees them."""
    four = reads_of_a_run(data, tmp_path / "a", 4)
    eight = reads_of_a_run(data, tmp_path / "b", 8)
    assert eight.count - four.count <= 4 * MAX_HOST_READS_PER_STEP, (eight.seen, four.seen)
    assert four.count > 0  # set-up, the first step's check, the log read and the final save do read


def test_the_cpus_own_step_reads_on_the_host_every_step(data, tmp_path):
    four = reads_of_a_run(data, tmp_path / "a", 4)
    eight = reads_of_a_run(data, tmp_path / "b", 8)
    assert eight.count - four.count >= 4, (eight.seen, four.seen)  # the finite check, at least


def test_the_sync_free_mode_trains_as_the_cpu_mode_does(data, tmp_path, monkeypatch):
    """Same data, draws, rule: the losses of the two modes agree to float32 rounding (the step counts' bias
    corrections round in float32 on the device, in double on the host)."""
    assert main(train_args(data, tmp_path / "host", "max_steps=6", "ema=True")) == 0
    monkeypatch.setattr(nonfinite, "SYNC_FREE_DEVICES", ("cuda", "cpu"))
    assert main(train_args(data, tmp_path / "device", "max_steps=6", "ema=True")) == 0
    losses = [[r["loss"] for r in map(json.loads, (tmp_path / name / "metrics.jsonl").read_text().splitlines())]
              for name in ("host", "device")]
    assert len(losses[0]) == len(losses[1]) == 6
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def _state(model, dense, ema, carries) -> dict[str, torch.Tensor]:
    out = {f"w.{n}": p.detach().clone() for n, p in model.named_parameters()}
    out["puzzle rows"] = model.puzzle_emb.weights.clone()
    for i, p in enumerate(dense.param_groups[0]["params"]):
        out.update({f"opt.{i}.{k}": v.clone() for k, v in dense.state.get(p, {}).items()})
    out.update({f"ema.{n}": t.clone() for n, t in ema.shadow.items()})
    for i, c in enumerate(carries or []):
        out.update({f"carry.{i}.z_H": c.z_H.clone(), f"carry.{i}.steps": c.steps.clone(),
                    f"carry.{i}.halted": c.halted.clone(), f"carry.{i}.inputs": c.current_data["inputs"].clone()})
    return out


def test_a_step_skipped_on_the_device_changes_nothing(data, tmp_path, monkeypatch, caplog, sync_free):
    """A NaN in step 2's gradients: weights, optimizer state, EMA, puzzle rows and carries after it are those
    before it; the skip is said (at the log read) as the host check says it, and its metrics are left out."""
    held, states = {}, []
    real_make, real_ema, real_acc = setup.make_optimizers, setup.EMA, step.accumulate

    def make(*a, **k):
        held["dense"], held["sparse"] = real_make(*a, **k)
        return held["dense"], held["sparse"]

    def ema(*a, **k):
        held["ema"] = real_ema(*a, **k)
        return held["ema"]

    def accumulate(forward, model, batch, carries, *rest):
        states.append(_state(model, held["dense"], held["ema"], carries))  # what each step starts from
        out = real_acc(forward, model, batch, carries, *rest)
        if len(states) == 2:
            next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = float("nan")
        return out

    monkeypatch.setattr(setup, "make_optimizers", make)
    monkeypatch.setattr(setup, "EMA", ema)
    monkeypatch.setattr(step, "accumulate", accumulate)
    caplog.set_level(logging.WARNING)
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=4", "ema=True", "log_interval=2")) == 0
    assert len(states) == 4  # the skipped step used its step number
    before, after = states[1], states[2]
    assert set(before) == set(after)
    assert all(torch.equal(before[k], after[k]) for k in before), [k for k in before
                                                                   if not torch.equal(before[k], after[k])]
    assert not all(torch.equal(states[0][k], before[k]) for k in before if k.startswith("w."))  # step 1 trained
    assert "step 2: the loss or the gradients were not finite; step skipped (1 in a row" in caplog.text
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    assert all(json.dumps(r).count("NaN") == 0 for r in records)


def test_a_run_diverging_on_the_device_stops_with_the_contracts_line(data, tmp_path, capsys, sync_free):
    from cli_helpers import one_error_line

    from trm_kaggle.train import checkpoint as ckpt

    run = tmp_path / "run"
    code = main(train_args(data, run, "max_steps=40", "lr_warmup_steps=0", "max_nonfinite_steps=3", "lr=1e30",
                           "log_interval=5"))
    line = one_error_line(capsys)
    assert code == 1 and "training diverged" in line and "max_nonfinite_steps=3" in line and "lower lr" in line
    for path in ckpt.list_states(run):
        state = ckpt.load_train_state(path)
        assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())


def test_the_guard_puts_back_what_a_step_wrote_only_where_it_was_not_finite():
    model = torch.nn.Linear(3, 2)
    model.register_buffer("H_init", torch.zeros(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()  # the momentum buffers exist now
    for ok in (False, True):
        model(torch.ones(1, 3)).sum().backward()
        guard = StepGuard(model, opt)
        assert guard.save()
        written = guard._written()
        assert len(written) == 4  # weight, bias and their momentum buffers
        before = [t.detach().clone() for t in written]
        opt.step()
        guard.undo_unless(torch.tensor(ok))
        kept = [torch.equal(t, b) for t, b in zip(written, before)]
        assert kept == [not ok] * 4, (ok, kept)
        opt.zero_grad()


def test_the_guard_asks_for_the_host_check_where_it_cannot_undo():
    model = torch.nn.Linear(3, 2)
    model.register_buffer("H_init", torch.zeros(1))
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    assert not StepGuard(model, opt).save()  # the first step makes the optimizer's state


def test_kept_carries_are_the_old_ones_where_the_step_was_not_finite():
    def carry(v):
        return Carry(torch.full((2, 3, 4), v), torch.full((2, 3, 4), v), torch.full((2,), int(v)),
                     torch.tensor([True, False]), {"inputs": torch.full((2, 5), int(v))})

    new, old = [carry(1.0)], [carry(7.0)]
    for ok, want in ((True, 1.0), (False, 7.0)):
        kept = keep_carries(torch.tensor(ok), new, old)[0]
        assert torch.equal(kept.z_H, torch.full((2, 3, 4), want)) and int(kept.steps[0]) == int(want)
        assert torch.equal(kept.current_data["inputs"], torch.full((2, 5), int(want)))


def test_puzzle_rows_keep_their_values_when_the_step_is_inactive():
    table = torch.randn(6, 4)
    ids, grads = torch.tensor([1, 3, 1]), torch.randn(3, 4)
    for active, changes in ((torch.tensor(False), False), (torch.tensor(True), True)):
        t = table.clone()
        sparse_sign_sgd_(t, ids, grads, lr=0.1, weight_decay=0.1, active=active)
        assert torch.equal(t, table) != changes
    ref, static = table.clone(), table.clone()
    sparse_sign_sgd_(ref, ids, grads, lr=0.1, weight_decay=0.1)  # unique() on the CPU
    sparse_sign_sgd_(static, ids, grads, lr=0.1, weight_decay=0.1, active=torch.tensor(True))  # no unique()
    assert torch.allclose(ref, static, atol=1e-7)


def test_exploration_draws_of_a_row_do_not_depend_on_the_split():
    whole = step.exploration_draws(3, 17, 12, 8, slice(0, 12), torch.device("cpu"))
    parts = [step.exploration_draws(3, 17, 12, 8, slice(i, i + 4), torch.device("cpu")) for i in (0, 4, 8)]
    assert torch.equal(whole[0], torch.cat([p[0] for p in parts]))
    assert torch.equal(whole[1], torch.cat([p[1] for p in parts]))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_exploration_draws_are_made_on_the_device_and_keep_the_contract():
    dev = torch.device("cuda")
    whole = step.exploration_draws(3, 17, 12, 8, slice(0, 12), dev)
    assert whole[0].device.type == "cuda"
    parts = [step.exploration_draws(3, 17, 12, 8, slice(i, i + 4), dev) for i in (0, 4, 8)]
    assert torch.equal(whole[0], torch.cat([p[0] for p in parts]))
    assert torch.equal(whole[1], step.exploration_draws(3, 17, 12, 8, slice(0, 12), dev)[1])
    assert int(whole[1].min()) >= 2 and int(whole[1].max()) <= 8


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_steady_state_step_does_not_sync(data, tmp_path):
    """CUDA's own count: torch.cuda.set_sync_debug_mode warns at every synchronizing call."""
    import warnings

    def syncs(run, steps):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                args = [a for a in train_args(data, run, f"max_steps={steps}", "log_interval=1000", "compile=off")
                        if a not in ("device=cpu", "deterministic=True")]
                assert main(args + ["device=cuda"]) == 0
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return [str(w.message) for w in caught if "synchroniz" in str(w.message)]

    four, eight = syncs(tmp_path / "a", 4), syncs(tmp_path / "b", 8)
    assert four  # the mode is on: set-up and the log read do sync
    assert len(eight) - len(four) <= 4 * MAX_HOST_READS_PER_STEP, eight[len(four):][:5]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_are_pinned(data):
    from trm_kaggle.data.loader import PuzzleLoader

    batch = next(iter(PuzzleLoader([str(data)], "train", 8, pin_memory=True)))
    assert all(t.is_pinned() for t in batch.values())
