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
