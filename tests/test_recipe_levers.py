"""The faster-training levers (docs/recipes.md): RSM's contract, the staged depth curriculum, CGAR's supervision
weighting, the large-batch and fast presets: their bounds, what each computes, and an exact resume."""

from __future__ import annotations

import pytest
import torch

from test_train import cfg_for, final_params, losses, sudoku4  # noqa: F401 (40 puzzles: 5 steps an epoch)
from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.train.loop import train
from trm_kaggle.train.recipes import rsm_supervise, supervision_weights, weight_gradients
from trm_kaggle.train.schedules import cycles_at, rsm_warmup_at, schedule_at
from trm_kaggle.train.settings import load_train_config
from trm_kaggle.train.step import StepRules, configure_model


@pytest.mark.parametrize("settings, names", [
    (["rsm.min_warmup=3", "rsm.max_warmup=2"], "rsm.max_warmup 2 is below rsm.min_warmup 3"),
    # settings read by nothing while their lever is off
    (["rsm.min_warmup=2"], "rsm.min_warmup and rsm.max_warmup are RSM's settings, but rsm.enabled is false"),
    (["halt_schedule.start_prob=0.1"], "halt_schedule.start_prob starts a decay over halt_schedule.epochs, which"),
    (["rsm.enabled=True", "rsm.min_warmup=4", "arch.halt_max_steps=4"], "rsm.min_warmup 4 is above"),
    (["curriculum.start_H_cycles=5", "arch.H_cycles=3"], "curriculum.start_H_cycles 5 is deeper than arch.H_cycles"),
    (["curriculum.start_L_cycles=2", "curriculum.stages=[{until: 0.5, depth: 0.5}]"], "a ramp .* or stages"),
    (["curriculum.stages=[{until: 0.6, depth: 0.5}, {until: 0.3, depth: 1}]"], "increasing order of until"),
    (["curriculum.stages=[{until: 0.5, depth: 1.5}]"], "depth"),
    (["supervision_decay=0"], "supervision_decay"),
    (["rsm.enabled=True", "supervision_decay=0.7"], "set one of them"),
    # training the puzzle table alone where there is none (once a traceback at the first step) or at a rate of 0
    (["freeze_weights=true", "arch.puzzle_emb_ndim=0"], "freeze_weights trains the puzzle embeddings alone, but "
                                                         "arch.puzzle_emb_ndim is 0"),
    (["freeze_weights=true", "puzzle_emb_lr=0"], "but puzzle_emb_lr is 0: nothing would train"),
    # a ramp or a decay with nothing to ramp, or ended before it starts: read by nothing
    (["curriculum.start_H_cycles=1"], "start a ramp over curriculum.epochs, which is 0"),
    (["curriculum.epochs=10"], "curriculum.epochs is the length of a ramp .* and neither is set"),
    (["halt_schedule.epochs=10"], "halt_schedule.epochs is the length of a decay from start_prob to end_prob, and"),
    # RSM explores no halting: its twin supervision_decay was refused, these trained the same losses unsaid
    (["rsm.enabled=True", "halt_schedule.end_prob=1.0"], "halt_schedule decays the ACT carry's halting exploration"),
])
def test_bad_or_contradicting_levers_are_one_line_before_anything_runs(settings, names):
    with pytest.raises(TRMError, match=names) as err:
        load_train_config(overrides=settings)
    assert "\n" not in str(err.value)


def test_levers_set_as_they_are_meant_to_be_pass():
    assert load_train_config(overrides=["curriculum.epochs=10", "curriculum.start_H_cycles=1"]).curriculum.epochs == 10
    assert load_train_config(overrides=["halt_schedule.epochs=10", "halt_schedule.end_prob=0.1"]).halt_schedule.epochs
    # a layer that turns a lever off leaves its settings from the layers below (a sweep's no-ema variant over a
    # base with ema_rate=0.99): layered on purpose, not refused
    assert load_train_config(overrides=["ema=true", "ema_rate=0.99", "ema=false"]).ema_rate == 0.99
    assert load_train_config(presets=["sudoku-mlp", "fast"], overrides=["curriculum.epochs=3"]).curriculum.epochs == 3


def test_the_presets_set_their_levers():
    fast = load_train_config(presets=["sudoku-mlp", "fast"])  # the lever that paid (docs/recipes.md)
    assert fast.optimizer == "adam_atan2" and not fast.rsm.enabled
    assert [(s.until, s.depth) for s in fast.curriculum.stages] == [(0.3, 1 / 3), (0.6, 2 / 3)]
    assert fast.model_dump() == load_train_config(presets=["sudoku-mlp", "depth-curriculum"]).model_dump()
    rsm = load_train_config(presets=["sudoku-mlp", "rsm"])
    assert rsm.rsm.enabled and rsm.rsm.max_warmup is None
    cgar = load_train_config(presets=["sudoku-mlp", "cgar"])
    assert cgar.supervision_decay == 0.7 and not cgar.rsm.enabled and cgar.curriculum.epochs == 0
    big = load_train_config(presets=["arc1", "large-batch"])
    assert (big.global_batch_size, big.lr) == (3072, 3e-4)
    plain = load_train_config(presets=["sudoku-mlp"])  # none of it by default
    assert not plain.rsm.enabled and plain.supervision_decay == 1.0 and plain.curriculum.stages == []
    assert schedule_at(plain, 7, 0.1, 100) == schedule_at(plain, 7, 0.1, 100)
    assert schedule_at(plain, 7, 0.1, 100).warmup == 0


def test_cgars_stages_and_rsms_warmup_are_functions_of_the_step():
    cfg = load_train_config(presets=["sudoku-mlp", "depth-curriculum"])  # T=3 n=6: CGAR's own (1,2) (2,4) (3,6)
    assert [cycles_at(cfg, 0.0, p) for p in (0.0, 0.29, 0.3, 0.59, 0.6, 1.0)] == [(1, 2), (1, 2), (2, 4), (2, 4),
                                                                                (3, 6), (3, 6)]
    steps = [schedule_at(cfg, s, 0.0, 100) for s in (0, 30, 60)]  # of a 100-step schedule
    assert [(x.H_cycles, x.L_cycles) for x in steps] == [(1, 2), (2, 4), (3, 6)]
    by_epochs = load_train_config(presets=["sudoku-mlp", "depth-curriculum"], overrides=["curriculum.epochs=10"])
    assert [cycles_at(by_epochs, e, 0.99) for e in (0, 3, 6, 50)] == [(1, 2), (2, 4), (3, 6), (3, 6)]
    rsm = load_train_config(overrides=["rsm.enabled=True", "rsm.min_warmup=1", "rsm.max_warmup=4"])
    draws = [rsm_warmup_at(rsm, s) for s in range(200)]
    assert set(draws) == {1, 2, 3, 4} and draws == [rsm_warmup_at(rsm, s) for s in range(200)]
    other_seed = rsm.model_copy(update={"seed": 1})
    assert draws != [rsm_warmup_at(other_seed, s) for s in range(200)]
    default_max = load_train_config(overrides=["rsm.enabled=True", "arch.halt_max_steps=3"])
    assert {rsm_warmup_at(default_max, s) for s in range(100)} == {0, 1, 2}


def test_supervision_weights_average_one_and_act_on_the_gradient_alone():
    w = supervision_weights(torch.arange(1, 5), 0.5, 4)
    assert w.mean().item() == pytest.approx(1.0) and w[1] / w[0] == pytest.approx(0.5)
    assert torch.equal(supervision_weights(torch.arange(1, 5), 1.0, 4), torch.ones(4))
    x = torch.randn(4, 3, requires_grad=True)
    out = weight_gradients({"logits": x, "target": torch.ones(4)}, w)
    assert torch.equal(out["logits"], x) and torch.equal(out["target"], torch.ones(4))
    (out["logits"] * torch.arange(12.0).view(4, 3)).sum().backward()
    assert torch.allclose(x.grad, torch.arange(12.0).view(4, 3) * w.view(4, 1))


def test_rsm_step_starts_fresh_warms_up_without_gradient_and_keeps_one_graph():
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=2, L_cycles=1, L_layers=1,
                      halt_max_steps=4, puzzle_emb_len=1, forward_dtype="float32")
    model = TinyRecursiveModel(arch, seq_len=4, vocab_size=5, num_puzzle_identifiers=3).train()
    batch = {"inputs": torch.randint(0, 5, (3, 4)), "labels": torch.randint(0, 5, (3, 4)),
             "puzzle_identifiers": torch.tensor([0, 1, 2])}
    carry, out = rsm_supervise(model, batch, warmup=2)
    assert carry.halted.all() and carry.steps.tolist() == [3, 3, 3]
    assert torch.equal(carry.current_data["inputs"], batch["inputs"])
    assert len(model.puzzle_emb._pending) == 1  # the warm-up recorded no embedding rows for a gradient
    # the same depth by hand: three supervision steps from the initial states, the last one differentiated
    z = model.H_init.expand(3, model.total_len, -1), model.L_init.expand(3, model.total_len, -1)
    with torch.no_grad():
        for _ in range(2):
            z = model.inner(*z, batch)[:2]
        by_hand = model.inner(*z, batch)[2]
    assert torch.equal(out["logits"], by_hand)
    assert not torch.equal(rsm_supervise(model, batch, warmup=0)[1]["logits"], by_hand)
    out["logits"].sum().backward()  # one supervision step's graph: every block weight gets its gradient
    assert all(p.grad is not None for p in model.layers.parameters())


needs_muon = pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="needs torch.optim.Muon (torch >= 2.9)")


@pytest.mark.parametrize("levers", [
    pytest.param(("rsm.enabled=True", "rsm.min_warmup=0", "rsm.max_warmup=3", "curriculum.epochs=1",
                  "curriculum.stages=[{until: 0.3, depth: 0.5}, {until: 0.6, depth: 0.75}]", "arch.H_cycles=2",
                  "arch.L_cycles=4", "optimizer=muon"), marks=needs_muon, id="muon+rsm+stages"),
    pytest.param(("supervision_decay=0.7", "curriculum.epochs=1", "curriculum.stages=[{until: 0.5, depth: 0.5}]",
                  "arch.L_cycles=4"), id="cgar"),
])
def test_a_run_with_the_levers_resumes_exactly(sudoku4, tmp_path, levers):
    """Stopped at step 3 (inside the curriculum's second stage) and resumed, a run takes the very steps of an
    uninterrupted one (Muon, RSM and the stages together: Muon's state too); the schedule the model saw shows the stages
    (and RSM's varying warm-up)."""
    seen = []

    def spy(model, schedule):
        configure_model(model, schedule)
        seen.append((model.H_cycles, model.L_cycles, schedule.warmup))

    full = train(cfg_for(sudoku4, tmp_path / "a", "max_steps=6", *levers), rules=StepRules(configure=spy))
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=3", *levers))
    resumed = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=6", *levers))
    assert full.step == resumed.step == 6
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    a, b = final_params(tmp_path / "a"), final_params(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    depths = [s[:2] for s in seen]
    if levers[0].startswith("rsm"):  # 5 steps an epoch: stage 1 for steps 0-1, stage 2 for 2, then the arch's
        assert depths == [(1, 2), (1, 2), (2, 3), (2, 4), (2, 4), (2, 4)]
        assert len({s[2] for s in seen}) > 1 and all(0 <= s[2] <= 3 for s in seen)
    else:
        assert depths == [(1, 2), (1, 2), (1, 2), (2, 4), (2, 4), (2, 4)]
        assert {s[2] for s in seen} == {0}


def test_the_levers_change_training_and_the_default_does_not(sudoku4, tmp_path):
    """rsm and the decay each give other losses than upstream's step on the same data and seed."""
    runs = {name: tmp_path / name for name in ("plain", "rsm", "decay")}
    train(cfg_for(sudoku4, runs["plain"], "max_steps=3"))
    train(cfg_for(sudoku4, runs["rsm"], "max_steps=3", "rsm.enabled=True"))
    train(cfg_for(sudoku4, runs["decay"], "max_steps=3", "supervision_decay=0.5"))
    plain = losses(runs["plain"])
    assert losses(runs["rsm"]) != plain
    # the weights act on the gradient only: the first step's loss is upstream's, the next ones differ
    decayed = losses(runs["decay"])
    assert decayed[0] == plain[0] and decayed[1:] != plain[1:]


def test_muons_optimizer_state_is_one_float_per_matrix_weight_and_two_for_the_rest():
    from trm_kaggle.train.memory import count_parameters, estimate_training_memory

    adam = load_train_config(presets=["sudoku-mlp"])
    muon = load_train_config(presets=["sudoku-mlp", "muon"])
    P = count_parameters(adam.arch, 81, 11)
    est = {c.optimizer: estimate_training_memory(c, seq_len=81, vocab_size=11, num_puzzle_identifiers=2).optimizer
           for c in (adam, muon)}
    assert est["adam_atan2"] == 8 * P
    embedding_and_heads = 11 * 512 + 512 * 11 + 512 * 2 + 2  # token embedding, lm_head, q_head with its bias
    assert est["muon"] == 4 * (P + embedding_and_heads)
