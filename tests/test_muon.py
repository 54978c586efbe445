"""optimizer=muon: which weights Muon takes, its arithmetic as torch's, one optimizer to the trainer (state dict,
StepGuard, float16 loss scaling), a run that learns and resumes exactly, and the line an old torch gets."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from cli_helpers import one_error_line
from test_model import make_batch, tiny_model
from test_step_guard import MAX_HOST_READS_PER_STEP, reads_of_a_run
from test_train import cfg_for, final_params, losses, sudoku4  # noqa: F401 (the module-scoped dataset)
from trm_kaggle.cli import main
from trm_kaggle.config import ArchConfig, TrainConfig
from trm_kaggle.model.losses import act_loss
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.optim.adam_atan2 import AdamATan2
from trm_kaggle.optim.muon import MuonWithAdam
from trm_kaggle.optim.sign_sgd import SignSGD
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train import nonfinite, optimizers
from trm_kaggle.train.loop import train
from trm_kaggle.train.optimizers import make_optimizers, optimizer_step, set_learning_rates
from trm_kaggle.train.settings import load_train_config
from trm_kaggle.train.step_guard import StepGuard

#: torch.optim.Muon arrived in torch 2.9 (older torch: `optimizer=muon` is refused, tested below)
needs_muon = pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="needs torch.optim.Muon (torch >= 2.9)")

MUON = ["optimizer=muon", "lr=1e-3"]


def names_by_group(model, dense) -> tuple[set[str], set[str]]:
    name = {id(p): n for n, p in model.named_parameters()}
    groups = {g["muon"]: {name[id(p)] for p in g["params"]} for g in dense.param_groups}
    return groups[True], groups[False]


@needs_muon
@pytest.mark.parametrize("mlp_t", [False, True])
def test_muon_takes_the_blocks_matrices_and_adam_atan2_the_rest(mlp_t):
    arch = ArchConfig(hidden_size=16, num_heads=2, L_layers=2, puzzle_emb_len=1, forward_dtype="float32", mlp_t=mlp_t)
    model = TinyRecursiveModel(arch, 16, 6, 3)
    cfg = TrainConfig(arch=arch, optimizer="muon", muon_lr_ratio=2.0, beta1=0.8, weight_decay=0.5)
    dense, sparse = make_optimizers(cfg, model)
    assert isinstance(dense, MuonWithAdam) and isinstance(sparse, SignSGD)
    hidden, rest = names_by_group(model, dense)
    expected = {n for n, p in model.named_parameters() if n.startswith("layers.") and p.ndim == 2}
    assert hidden == expected and len(hidden) == 8  # 4 matrices a block (qkv, o or mlp_t's 2; the MLP's 2)
    assert all(any(k in n for k in ("proj", "mlp_t")) for n in hidden)
    assert rest == {"embed_tokens.weight", "lm_head.weight", "q_head.weight", "q_head.bias"}
    assert hidden | rest == {n for n, _ in model.named_parameters()}  # every weight, once
    # the puzzle rows (a buffer) stay SignSGD's; H_init/L_init are buffers no optimizer moves, as upstream
    assert all(p is not model.puzzle_emb.weights for g in dense.param_groups for p in g["params"])
    muon_group, adam_group = dense.param_groups
    assert (muon_group["lr_ratio"], muon_group["momentum"], muon_group["nesterov"], muon_group["ns_steps"],
            muon_group["adjust_lr_fn"], muon_group["weight_decay"]) == (2.0, 0.95, True, 5, "match_rms_adamw", 0.5)
    assert adam_group["betas"] == (0.8, 0.95) and adam_group["weight_decay"] == 0.5
    set_learning_rates(dense, sparse, 3e-4, 1e-2)
    assert [g["lr"] for g in dense.param_groups] == [3e-4, 3e-4]  # one rate a step; Muon's ratio applies inside


@needs_muon
def test_the_steps_are_torchs_muon_and_adam_atan2():
    """Bit for bit: the Muon group steps as torch.optim.Muon (Moonshot's RMS match, lr * lr_ratio), the other
    as AdamATan2 on its own, over a few steps with changing rates."""
    torch.manual_seed(0)
    w, v = torch.randn(6, 4), torch.randn(4)
    ours = [torch.nn.Parameter(w.clone()), torch.nn.Parameter(v.clone())]
    ref = [torch.nn.Parameter(w.clone()), torch.nn.Parameter(v.clone())]
    opt = MuonWithAdam([ours[0]], [ours[1]], lr_ratio=4.0, weight_decay=0.1, betas=(0.9, 0.95))
    ref_muon = torch.optim.Muon([ref[0]], lr=0.0, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    ref_adam = AdamATan2([ref[1]], lr=0.0, weight_decay=0.1, betas=(0.9, 0.95))
    for lr in (1e-3, 2e-3, 5e-4):
        gw, gv = torch.randn(6, 4), torch.randn(4)
        for g in opt.param_groups:
            g["lr"] = lr
        ref_muon.param_groups[0]["lr"], ref_adam.param_groups[0]["lr"] = 4.0 * lr, lr
        ours[0].grad, ours[1].grad, ref[0].grad, ref[1].grad = gw.clone(), gv.clone(), gw.clone(), gv.clone()
        opt.step()
        ref_muon.step()
        ref_adam.step()
        assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    assert torch.equal(opt.state[ours[0]]["momentum_buffer"], ref_muon.state[ref[0]]["momentum_buffer"])
    assert set(opt.state[ours[1]]) == {"step", "exp_avg", "exp_avg_sq"}
    with pytest.raises(ValueError, match="2-D"):
        MuonWithAdam([torch.nn.Parameter(torch.ones(3))], [])


@needs_muon
def test_a_loaded_state_dict_continues_identically():
    torch.manual_seed(1)
    w, v = torch.randn(5, 3), torch.randn(3)
    a = [torch.nn.Parameter(w.clone()), torch.nn.Parameter(v.clone())]
    b = [torch.nn.Parameter(w.clone()), torch.nn.Parameter(v.clone())]
    oa, ob = MuonWithAdam([a[0]], [a[1]]), MuonWithAdam([b[0]], [b[1]])
    grads = [(torch.randn(5, 3), torch.randn(3)) for _ in range(4)]

    def step(opt, params, g):
        for group in opt.param_groups:
            group["lr"] = 1e-2
        params[0].grad, params[1].grad = g[0].clone(), g[1].clone()
        opt.step()

    for g in grads[:2]:
        step(oa, a, g)
        step(ob, b, g)
    ob2 = MuonWithAdam([b[0]], [b[1]], lr_ratio=9.0)  # the loaded groups' settings win, as for torch's optimizers
    ob2.load_state_dict(ob.state_dict())
    assert ob2.param_groups[0]["lr_ratio"] == 1.0
    for g in grads[2:]:
        step(oa, a, g)
        step(ob2, b, g)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for pa, pb in zip(a, b):
        assert all(torch.equal(oa.state[pa][k], ob2.state[pb][k]) for k in oa.state[pa])


def one_step(model, dense, sparse, lr=1e-3):
    batch = make_batch(B=4)
    carry = model.initial_carry(batch)
    carry, out = model(carry, batch)
    loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    set_learning_rates(dense, sparse, lr, 1e-2)


@needs_muon
def test_the_step_guard_puts_a_muon_step_back():
    """StepGuard copies every tensor the step writes (weights, momentum buffers, AdamATan2's moments and counts)
    and puts them back where the step was not finite."""
    model = tiny_model(forward_dtype="float32").train()
    dense, sparse = make_optimizers(TrainConfig(arch=model.arch, optimizer="muon"), model)
    guard = StepGuard(model, dense)
    one_step(model, dense, sparse)
    assert not guard.save()  # the first step makes the state: checked on the host
    optimizer_step(dense, sparse)
    one_step(model, dense, sparse)
    assert guard.save()
    written = guard._saved[0]
    before = [t.clone() for t in written]
    buffers = [dense.state[p]["momentum_buffer"] for p in dense.param_groups[0]["params"]]
    moments = [dense.state[p]["exp_avg"] for p in dense.param_groups[1]["params"]]
    assert all(any(t is w for w in written) for t in buffers + moments)
    optimizer_step(dense, sparse)
    assert not any(torch.equal(t, b) for t, b in zip(written, before) if t.is_floating_point() and t.numel() > 1)
    guard.undo_unless(torch.tensor(False))
    assert all(torch.equal(t, b) for t, b in zip(written, before))


@needs_muon
def test_a_steady_state_muon_step_reads_nothing_on_the_host(sudoku4, tmp_path, monkeypatch):
    """CUDA's step on this CPU (the finite check and AdamATan2's step counts on the device): Muon's step reads
    nothing on the host either, so 4 more steps add no read."""
    monkeypatch.setattr(nonfinite, "SYNC_FREE_DEVICES", ("cuda", "cpu"))
    four = reads_of_a_run(sudoku4, tmp_path / "a", 4, *MUON)
    eight = reads_of_a_run(sudoku4, tmp_path / "b", 8, *MUON)
    assert eight.count - four.count <= 4 * MAX_HOST_READS_PER_STEP, (eight.seen, four.seen)


@needs_muon
def test_a_muon_run_learns_and_resumes_exactly(sudoku4, tmp_path):
    full = train(cfg_for(sudoku4, tmp_path / "a", "max_steps=4", *MUON))
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=2", *MUON))
    resumed = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=4", *MUON))
    assert full.step == resumed.step == 4
    assert losses(tmp_path / "a") == losses(tmp_path / "b")  # bit-identical losses
    a, b = final_params(tmp_path / "a"), final_params(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = (ckpt.load_train_state(ckpt.list_states(tmp_path / r)[-1])["optimizer"] for r in ("a", "b"))
    assert sa["param_groups"] == sb["param_groups"] and [g["muon"] for g in sa["param_groups"]] == [True, False]
    assert sa["state"].keys() == sb["state"].keys()
    kinds = set()
    for k, s in sa["state"].items():
        kinds |= set(s)
        assert all(torch.equal(v, sb["state"][k][n]) for n, v in s.items()), k
    assert kinds == {"momentum_buffer", "step", "exp_avg", "exp_avg_sq"}


@needs_muon
def test_a_muon_run_lowers_the_loss(sudoku4, tmp_path):
    train(cfg_for(sudoku4, tmp_path / "run", "max_steps=40", "log_interval=1", *MUON))
    got = [loss for _, loss in losses(tmp_path / "run")]
    assert len(got) == 40
    assert sum(got[-8:]) / 8 < 0.8 * sum(got[:8]) / 8, got


@needs_muon
def test_a_float16_muon_run_keeps_float32_state(sudoku4, tmp_path):
    """The loss scaler unscales every gradient of the one optimizer and steps it whole."""
    result = train(cfg_for(sudoku4, tmp_path / "run", "max_steps=2", "arch.forward_dtype=float16", *MUON))
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "run")[-1])
    assert result.step == 2 and state["amp"]["skipped"] == 0
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for s in state["optimizer"]["state"].values()
               for t in s.values() if t.is_floating_point())


def test_the_preset_and_the_default():
    cfg = load_train_config(presets=["arc2", "muon"])
    assert cfg.optimizer == "muon" and cfg.muon_lr_ratio == 1.0
    assert load_train_config(presets=["arc2"]).optimizer == "adam_atan2"  # upstream's recipe stays the default
    dense, _ = make_optimizers(TrainConfig(arch=tiny_model().arch), tiny_model())
    assert type(dense) is AdamATan2


def test_a_torch_without_muon_gets_one_line_before_the_run_folder(sudoku4, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(optimizers, "muon_available", lambda: False)
    run = tmp_path / "run"
    from test_train import TINY

    rc = main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY, "max_steps=1", *MUON])
    line = one_error_line(capsys)
    assert rc != 0 and "optimizer=muon needs torch 2.9 or newer" in line
    assert not run.exists()


@needs_muon
def test_building_and_stepping_muon_does_not_import_dynamo():
    """torch's Muon class imports torch._dynamo when built; the optimizer here calls its step function only."""
    code = ("import sys, torch\n"
            "from trm_kaggle.optim.muon import MuonWithAdam\n"
            "w, b = torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3))\n"
            "opt = MuonWithAdam([w], [b], lr=1e-3)\n"
            "w.grad, b.grad = torch.randn(4, 3), torch.randn(3)\n"
            "opt.step(); opt.zero_grad(set_to_none=True); opt.load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


# --- Muon as "Speed is Confidence" trains it (the `muon-sic` preset): its own rate, shape scale, momentum,
# Newton-Schulz steps and weight decay, and the normed SwiGLU ---

SIC = ["optimizer=muon", "muon_lr=0.02", "muon_scale=original", "muon_momentum=0.6", "muon_ns_steps=3",
       "muon_weight_decay=0.005", "arch.swiglu_norm=True"]


@needs_muon
def test_muons_settings_reach_its_group_and_leave_the_other_alone():
    """muon_lr is the matrices' peak rate whatever lr is (the ratio the schedule's lr is multiplied by); the
    momentum, Newton-Schulz steps, shape scale and weight decay are the Muon group's only."""
    model = tiny_model()
    cfg = TrainConfig(arch=model.arch, optimizer="muon", lr=4e-3, weight_decay=0.1, muon_lr=0.02,
                      muon_momentum=0.6, muon_ns_steps=3, muon_scale="original", muon_weight_decay=0.005)
    dense, _ = make_optimizers(cfg, model)
    muon, adam = sorted(dense.param_groups, key=lambda g: not g["muon"])
    assert muon["lr_ratio"] == pytest.approx(5.0) and cfg.muon_ratio == pytest.approx(5.0)
    assert (muon["momentum"], muon["ns_steps"], muon["adjust_lr_fn"], muon["weight_decay"]) == (0.6, 3, "original",
                                                                                              0.005)
    assert adam["weight_decay"] == 0.1 and "momentum" not in adam
    default = TrainConfig(arch=model.arch, optimizer="muon", lr=4e-3, muon_lr_ratio=2.0)
    dense, _ = make_optimizers(default, model)
    muon = next(g for g in dense.param_groups if g["muon"])
    assert (muon["lr_ratio"], muon["momentum"], muon["ns_steps"], muon["adjust_lr_fn"], muon["weight_decay"]) == (
        2.0, 0.95, 5, "match_rms_adamw", default.weight_decay)


@needs_muon
def test_the_sic_settings_step_as_torchs_muon_with_them():
    """Bit for bit against torch.optim.Muon built with the same rate, momentum, steps, scale and decay."""
    torch.manual_seed(0)
    w, v = torch.randn(6, 4), torch.randn(4)
    ours, ref = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    opt = MuonWithAdam([ours], [torch.nn.Parameter(v.clone())], lr_ratio=5.0, momentum=0.6, ns_steps=3,
                       adjust_lr_fn="original", weight_decay=0.1, muon_weight_decay=0.005)
    ref_muon = torch.optim.Muon([ref], lr=0.0, weight_decay=0.005, momentum=0.6, ns_steps=3,
                                adjust_lr_fn="original")
    for lr in (1e-3, 4e-3, 2e-3):
        g = torch.randn(6, 4)
        for group in opt.param_groups:
            group["lr"] = lr
        ref_muon.param_groups[0]["lr"] = 5.0 * lr
        ours.grad, ref.grad = g.clone(), g.clone()
        opt.step()
        ref_muon.step()
        assert torch.equal(ours, ref)
    with pytest.raises(ValueError, match="weight_decay"):
        MuonWithAdam([torch.nn.Parameter(w.clone())], [], muon_weight_decay=-1.0)


def test_the_muon_settings_are_bounded_and_one_rate_is_set_once():
    arch = tiny_model().arch
    for bad in (dict(muon_lr=0.0), dict(muon_lr=float("nan")), dict(muon_momentum=1.0), dict(muon_ns_steps=0),
                dict(muon_ns_steps=21), dict(muon_weight_decay=-1.0), dict(muon_scale="keller"),
                dict(muon_lr=0.02, muon_lr_ratio=2.0)):
        with pytest.raises(ValueError):
            TrainConfig(arch=arch, optimizer="muon", **bad)
    with pytest.raises(ValueError, match="both set the matrices' rate"):
        TrainConfig(arch=arch, optimizer="muon", muon_lr=0.02, muon_lr_ratio=2.0)


@pytest.mark.parametrize("optimizer", ["adam_atan2", "adamw", "lion"])
def test_muon_settings_under_another_optimizer_are_one_error_not_dropped(optimizer, capsys):
    """`--preset ...+muon-sic optimizer=lion` would train Lion with Muon's settings read by nothing: refused in one
    line naming them; Muon's defaults (every preset but Muon's) pass under any optimizer."""
    from trm_kaggle.cli import main

    arch = tiny_model().arch
    TrainConfig(arch=arch, optimizer=optimizer)
    with pytest.raises(ValueError, match=f"muon_ns_steps 3: Muon's settings, but optimizer is {optimizer}"):
        TrainConfig(arch=arch, optimizer=optimizer, muon_ns_steps=3)
    assert main(["train", "--print-config", "--preset", "sudoku4-cpu+muon-sic", f"optimizer={optimizer}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid training config: muon_lr 0.02, muon_momentum 0.6" in err, err


def test_swiglu_norm_is_refused_with_the_fused_kernels_and_takes_the_plain_path_on_auto():
    arch = tiny_model().arch.model_dump()
    for bad in (dict(kernels="triton"), dict(fp8="nograd")):
        with pytest.raises(ValueError, match="swiglu_norm runs on the torch kernels only"):
            ArchConfig(**{**arch, "swiglu_norm": True, **bad})
    model = TinyRecursiveModel(ArchConfig(**{**arch, "swiglu_norm": True, "kernels": "auto"}), 16, 10, 5)
    assert all(b.dispatch is None and b.mlp.norm_eps is not None for b in model.layers)
    assert all(b.mlp.norm_eps is None for b in tiny_model().layers)  # upstream's SwiGLU stays the default


def test_the_sic_preset():
    cfg = load_train_config(presets=["sudoku-mlp", "muon-sic"])
    assert (cfg.optimizer, cfg.muon_lr, cfg.muon_scale, cfg.muon_momentum, cfg.muon_ns_steps) == (
        "muon", 0.02, "original", 0.6, 3)
    assert cfg.arch.swiglu_norm and cfg.arch.mlp_t and cfg.muon_weight_decay == 0.005
    assert cfg.muon_ratio == pytest.approx(0.02 / cfg.lr) and cfg.lr == load_train_config(presets=["sudoku-mlp"]).lr
    assert not load_train_config(presets=["sudoku-mlp"]).arch.swiglu_norm


@needs_muon
def test_a_sic_run_resumes_exactly(sudoku4, tmp_path):
    """Muon's momentum buffers under its own settings, and the normed SwiGLU's weights, resume bit for bit."""
    train(cfg_for(sudoku4, tmp_path / "a", "max_steps=4", *SIC))
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=2", *SIC))
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=4", *SIC))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    a, b = final_params(tmp_path / "a"), final_params(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "b")[-1])
    muon = next(g for g in state["optimizer"]["param_groups"] if g["muon"])
    assert (muon["momentum"], muon["ns_steps"], muon["adjust_lr_fn"], muon["weight_decay"]) == (0.6, 3, "original",
                                                                                              0.005)


@needs_muon
@pytest.mark.parametrize("name, value", [("lr", float("inf")), ("lr_ratio", float("inf")), ("momentum", float("nan")),
                                         ("ns_steps", -1), ("ns_steps", 2.0), ("adjust_lr_fn", "bogus"),
                                         ("muon_weight_decay", float("inf"))])
def test_muons_own_settings_are_refused_where_given(name, value):
    """Each was taken and stepped without a word (lr=inf: the matrices -inf; ns_steps=-1: no orthogonalization;
    an unknown adjust_lr_fn: no scaling at all); the training config refuses them all."""
    w = torch.nn.Parameter(torch.ones(4, 3))
    with pytest.raises(ValueError, match=rf"^{name}=\S+: expected "):
        MuonWithAdam([w], [torch.nn.Parameter(torch.ones(3))], **{name: value})
    # the trainer's muon_lr / lr may be well past the config's muon_lr_ratio bound; None is torch's "original"
    MuonWithAdam([w], [], lr_ratio=200.0, ns_steps=np.int64(3), adjust_lr_fn=None)


def test_a_rate_ratio_whose_product_overflows_is_refused_at_construction():
    """lr_ratio=1e300 was taken; the first step was torch's "value cannot be converted to type float without
    overflow"."""
    with pytest.raises(ValueError, match=r"^lr x lr_ratio=1e\+297: expected at most 1e\+30"):
        MuonWithAdam([torch.nn.Parameter(torch.randn(4, 3))], [], lr=1e-3, lr_ratio=1e300)


def test_a_rate_written_later_whose_product_overflows_is_named_at_the_step():
    m = torch.nn.Parameter(torch.randn(4, 3))
    opt = MuonWithAdam([m], [], lr=0.0, lr_ratio=1e20)
    opt.param_groups[0]["lr"] = 1e20  # as a schedule writes it
    m.grad = torch.ones_like(m)
    with pytest.raises(ValueError, match=r"^lr x lr_ratio=1e\+40"):
        opt.step()


def test_nesterov_is_a_boolean():
    with pytest.raises(ValueError, match=r"^nesterov='no': expected True or False"):
        MuonWithAdam([torch.nn.Parameter(torch.randn(4, 3))], [], nesterov="no")


_MUON_GROUP = dict(muon=True, lr_ratio=1.0, momentum=0.9, nesterov=True, ns_coefficients=(3.4445, -4.775, 2.0315),
                   ns_steps=5, eps=1e-7, adjust_lr_fn=None)


@pytest.mark.parametrize("group, said", [
    ({**_MUON_GROUP, "params": [torch.nn.Parameter(torch.randn(2, 2, 2))]},
     r"^param group 1: Muon takes 2-D weights only, not one of shape \(2, 2, 2\)"),
    ({"params": [torch.nn.Parameter(torch.randn(3))]}, r"^param group 1: muon=None: expected True or False"),
    ({"params": [torch.nn.Parameter(torch.randn(3))], "muon": False}, r"^param group 1: betas=None: expected two"),
    ({"params": [torch.nn.Parameter(torch.randn(4, 4))], "muon": True},
     r"^param group 1: a Muon group \(muon=True\) lacks lr_ratio"),
])
def test_an_added_group_its_step_cannot_run_is_refused(group, said):
    """Each was taken and failed at the step: torch's "Param gradient must be a 2D matrix", KeyError 'muon'."""
    opt = MuonWithAdam([torch.nn.Parameter(torch.randn(4, 3))], [], lr=1e-3)
    with pytest.raises(ValueError, match=said):
        opt.add_param_group(group)
    assert len(opt.param_groups) == 1


def test_an_element_wise_group_added_later_is_stepped_by_adam():
    """An AdamATan2 group added to a Muon-only optimizer was "'NoneType' object has no attribute 'state'"; two
    such groups each step their own parameters once."""
    m, a, b = (torch.nn.Parameter(torch.randn(*s)) for s in ((4, 3), (3,), (2,)))
    opt = MuonWithAdam([m], [], lr=1e-3)
    opt.add_param_group({"params": [a], "muon": False, "betas": (0.9, 0.95)})
    opt.add_param_group({"params": [b], "muon": False, "betas": (0.9, 0.95)})
    for p in (m, a, b):
        p.grad = torch.ones_like(p)
    opt.step()
    assert float(opt.state[a]["step"]) == float(opt.state[b]["step"]) == 1.0


def test_a_muon_state_whose_group_says_another_kind_is_refused():
    m, a = torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3))
    opt = MuonWithAdam([m], [a], lr=1e-3)
    state = opt.state_dict()
    state["param_groups"][0]["muon"] = False
    opt.load_state_dict(state)
    with pytest.raises(ValueError, match=r"^loaded state: param group 0's muon is False, this optimizer's True"):
        opt.step()
