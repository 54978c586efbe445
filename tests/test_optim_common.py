"""The optimizers' base class: torch's Optimizer, whose wrapped methods import torch._dynamo only once it is needed."""

import sys

import pytest
import torch
from torch.optim.optimizer import Optimizer

from trm_kaggle.model import PuzzleEmbedding
from trm_kaggle.optim import AdamATan2, Lion, MuonWithAdam, SignSGD
from trm_kaggle.optim import common


def test_methods_run_torch_s_own_and_a_state_round_trips():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    q = torch.nn.Parameter(torch.tensor([0.5]))
    opt = Lion([p], lr=0.1)
    opt.add_param_group({"params": [q], "lr": 0.2})
    p.grad, q.grad = torch.tensor([0.5, -1.0]), torch.tensor([2.0])
    opt.step()
    state = opt.state_dict()
    assert state == Optimizer.state_dict(opt)  # torch's wrapped method gives the same dictionary
    again = Lion([torch.nn.Parameter(p.detach().clone())], lr=0.1)
    again.add_param_group({"params": [torch.nn.Parameter(q.detach().clone())], "lr": 0.2})
    again.load_state_dict(state)
    assert again.state_dict()["param_groups"] == state["param_groups"]
    torch.testing.assert_close(again.state_dict()["state"], state["state"], rtol=0, atol=0)
    opt.zero_grad()
    assert p.grad is None and q.grad is None


@pytest.mark.parametrize("imported", [False, True])
def test_torch_s_wrapper_runs_once_torch_dynamo_is_imported(monkeypatch, imported):
    calls = []

    def plain(self):
        calls.append("plain")

    def wrapped(self):  # stands for torch's wrapper (which would import torch._dynamo)
        calls.append("wrapped")

    wrapped.__wrapped__ = plain
    monkeypatch.setattr(Optimizer, "zero_grad", wrapped)
    method = common._plain_until_compiling("zero_grad")
    import torch._dynamo  # noqa: F401

    if not imported:
        monkeypatch.delitem(sys.modules, "torch._dynamo")
    method(object())
    assert calls == (["wrapped"] if imported else ["plain"])


def _weight():
    return torch.nn.Parameter(torch.ones(2, 2))


BUILDERS = {
    "AdamATan2": lambda groups: AdamATan2(groups, lr=1e-3),
    "Lion": lambda groups: Lion(groups, lr=1e-3),
}
BAD_SETTINGS = [({"lr": float("nan")}, r"lr=nan"), ({"betas": (2.0, 0.9)}, r"betas\[0\]=2.0"),
                ({"weight_decay": -5.0}, r"weight_decay=-5.0")]


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("bad, said", BAD_SETTINGS, ids=["lr", "betas", "weight_decay"])
def test_a_group_s_own_settings_are_checked_as_the_defaults_are(name, bad, said):
    """A group's `lr=nan` (or betas past 1, a negative decay) was taken, and the first step made the weights NaN."""
    with pytest.raises(ValueError, match=rf"^param group 1: {said}: expected "):
        BUILDERS[name]([{"params": [_weight()]}, {"params": [_weight()], **bad}])
    opt = BUILDERS[name]([_weight()])
    with pytest.raises(ValueError, match=rf"^param group 1: {said}: expected "):
        opt.add_param_group({"params": [_weight()], **bad})
    assert len(opt.param_groups) == 1  # nothing added


def test_sign_sgd_checks_an_added_group_too():
    opt = SignSGD(PuzzleEmbedding(4, 2), lr=0.1)
    with pytest.raises(ValueError, match=r"^param group 1: lr=inf: expected "):
        opt.add_param_group({"params": [PuzzleEmbedding(4, 2).weights], "lr": float("inf")})


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="needs torch.optim.Muon (torch >= 2.9)")
def test_muon_checks_an_added_group_s_settings_and_its_own():
    muon = MuonWithAdam([_weight()], [torch.nn.Parameter(torch.ones(2))], lr=1e-3)
    with pytest.raises(ValueError, match=r"^param group 2: betas\[1\]=1.0: expected "):
        muon.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))], "muon": False, "betas": (0.9, 1.0)})
    matrix_group = {k: v for k, v in muon.param_groups[0].items() if k != "params"}
    with pytest.raises(ValueError, match=r"^param group 2: lr_ratio=inf: expected "):
        muon.add_param_group({**matrix_group, "params": [_weight()], "lr_ratio": float("inf")})
    assert len(muon.param_groups) == 2


def _stepped(make, shape=(4, 3)):
    p = torch.nn.Parameter(torch.randn(*shape))
    opt = make([p])
    p.grad = torch.ones_like(p)
    opt.step()
    return opt


def _adam(params):
    return AdamATan2(params, lr=1e-3)


def _lion(params):
    return Lion(params, lr=1e-3)


def _muon(params):
    return MuonWithAdam(params, [], lr=1e-3)


@pytest.mark.parametrize("make, change, said", [
    (_adam, {"lr": float("nan")}, r"^loaded state: param group 0: lr=nan: expected a number from 0 to 1e\+30"),
    (_adam, {"betas": (2.0, 0.9)}, r"^loaded state: param group 0: betas\[0\]=2.0: expected"),
    (_lion, {"weight_decay": -5.0}, r"^loaded state: param group 0: weight_decay=-5.0: expected"),
    (_muon, {"ns_steps": 0}, r"^loaded state: param group 0: ns_steps=0: expected a whole number"),
    (_muon, {"lr_ratio": float("inf")}, r"^loaded state: param group 0: lr_ratio=inf: expected"),
])
def test_a_loaded_state_s_settings_are_checked_as_a_group_s(make, change, said):
    """load_state_dict took what the constructor and add_param_group refuse; the next step made every weight NaN."""
    opt = _stepped(make)
    state = opt.state_dict()
    state["param_groups"][0].update(change)
    opt.load_state_dict(state)
    weights = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    with pytest.raises(ValueError, match=said):
        opt.step()
    assert all(torch.equal(p, w) for p, w in zip(opt.param_groups[0]["params"], weights))  # nothing changed


def test_a_sign_sgd_state_s_settings_are_checked():
    opt = SignSGD(PuzzleEmbedding(5, 4), lr=0.1)
    state = opt.state_dict()
    state["param_groups"][0].update(lr=float("nan"))
    opt.load_state_dict(state)
    with pytest.raises(ValueError, match=r"^loaded state: param group 0: lr=nan"):
        opt.step()


def _with_step(step):
    def change(state):
        state["state"][0]["step"] = step
    return change


def _fill(name, value):
    def change(state):
        state["state"][0][name].fill_(value)
    return change


@pytest.mark.parametrize("make, load_into, change, said", [
    (_adam, _lion, None, r"^loaded state: parameter 0 \(group 0\) holds exp_avg, exp_avg_sq, step, this optimizer "
                         r"keeps exp_avg \(another optimizer's state\?\)"),
    (_lion, _adam, None, r"holds exp_avg, this optimizer keeps exp_avg, exp_avg_sq, step"),
    (_muon, _lion, None, r"^loaded state: param group 0 lacks betas; holds adjust_lr_fn"),
    (_adam, _muon, None, r"^loaded state: param group 0 lacks .*muon"),
    (_adam, _adam, _with_step(torch.tensor(-1.0)), r"^loaded state: parameter 0 \(group 0\): 'step' is tensor\(-1\.\): expected a whole number from 0"),
    (_adam, _adam, _with_step(torch.tensor(float("nan"))), r"^loaded state: parameter 0 \(group 0\): 'step' is tensor\(nan\): expected a whole number from 0"),
    (_adam, _adam, _with_step(torch.tensor(0.5)), r"^loaded state: parameter 0 \(group 0\): 'step' is tensor\(0\.5000\): expected a whole number from 0"),
    (_adam, _adam, _with_step(3), r"^loaded state: parameter 0 \(group 0\): 'step' is 3: expected a floating-point tensor"),
    (_adam, _adam, _fill("exp_avg_sq", -1.0), r"^loaded state: parameter 0 \(group 0\): 'exp_avg_sq' holds negative values"),
    (_lion, _lion, _fill("exp_avg", float("nan")), r"^loaded state: parameter 0 \(group 0\): 'exp_avg' holds NaN or inf"),
])
def test_another_optimizer_s_state_or_a_broken_one_is_refused_naming_the_entry(make, load_into, change, said):
    """Lion took AdamATan2's state and its betas; a NaN, negative or half step count failed inside the step or
    was used (ZeroDivisionError, int() of NaN, a bias correction of 1.5 steps)."""
    state = _stepped(make).state_dict()
    if change:
        change(state)
    opt = _stepped(load_into)
    opt.load_state_dict(state)
    with pytest.raises(ValueError, match=said):
        opt.step()


def test_a_moment_of_another_shape_is_refused():
    state = _stepped(_adam).state_dict()
    with pytest.raises(ValueError, match=r"^loaded state: parameter 0 \(group 0\): 'exp_avg' has shape \(4, 3\), its "
                                         r"parameter \(5, 2\)"):
        opt = _adam([torch.nn.Parameter(torch.randn(5, 2))])
        opt.load_state_dict(state)
        opt.step()


@pytest.mark.parametrize("state", [None, {"state": {}}, 5])
def test_a_state_dict_that_is_none_is_named(state):
    with pytest.raises(ValueError, match=r"^state_dict=.*: expected an optimizer's state dict"):
        _adam([torch.nn.Parameter(torch.randn(2))]).load_state_dict(state)


@pytest.mark.parametrize("make", [_adam, _lion, _muon])
def test_an_optimizer_s_own_state_round_trips(make):
    opt = _stepped(make)
    opt.load_state_dict(opt.state_dict())


@pytest.mark.parametrize("optimizer", [AdamATan2, Lion])
def test_a_weight_decay_whose_product_with_the_rate_overflows_is_refused(optimizer):
    """weight_decay=1e300 passed "a finite number from 0" and the first step made every weight inf."""
    with pytest.raises(ValueError, match=r"^lr x weight_decay=1e\+297: expected at most 1e\+30"):
        optimizer([torch.nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=1e300)
    with pytest.raises(ValueError, match=r"^param group 1: lr x weight_decay="):
        optimizer([torch.nn.Parameter(torch.zeros(2))], lr=1e-3).add_param_group(
            {"params": [torch.nn.Parameter(torch.zeros(2))], "weight_decay": 1e300})


def test_sign_sgd_s_weight_decay_is_bounded_alike():
    with pytest.raises(ValueError, match=r"^lr x weight_decay="):
        SignSGD(PuzzleEmbedding(3, 2), lr=1e-3, weight_decay=1e300)


@pytest.mark.parametrize("optimizer", [AdamATan2, Lion])
def test_a_meta_tensor_rate_is_named(optimizer):
    """torch's "Tensor.item() cannot be called on meta tensors" named no argument."""
    with pytest.raises(ValueError, match=r"^lr=.*: expected a number from 0 to 1e\+30"):
        optimizer([torch.nn.Parameter(torch.zeros(3))], lr=torch.tensor(1e-3, device="meta"))


@pytest.mark.parametrize("optimizer", [AdamATan2, Lion])
def test_betas_given_as_a_mapping_are_refused(optimizer):
    with pytest.raises(ValueError, match=r"^betas=.*: expected two numbers"):
        optimizer([torch.nn.Parameter(torch.zeros(3))], betas={0.9: 1, 0.8: 2})


@pytest.mark.parametrize("name", ["use_fused", "capturable"])
def test_adam_s_flags_are_booleans(name):
    """use_fused="no" was taken as yes."""
    with pytest.raises(ValueError, match=rf"^{name}='no': expected True or False"):
        AdamATan2([torch.nn.Parameter(torch.zeros(3))], **{name: "no"})
