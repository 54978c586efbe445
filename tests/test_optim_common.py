"""The optimizers' base class: torch's Optimizer, whose wrapped methods import torch._dynamo only once it is needed."""

import sys

import pytest
import torch
from torch.optim.optimizer import Optimizer

from trm_kaggle.optim import Lion
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
