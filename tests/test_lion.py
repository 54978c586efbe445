"""Lion: the update pinned on values worked out by hand, its state, and its place in the trainer."""

import pytest
import torch

from trm_kaggle.config import TrainConfig
from trm_kaggle.optim import Lion


def test_two_steps_by_hand():
    """p *= 1 - lr*wd; p -= lr * sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g."""
    lr, wd, b1, b2 = 0.1, 0.5, 0.9, 0.99
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 0.3]))
    opt = Lion([p], lr=lr, betas=(b1, b2), weight_decay=wd)

    # Step 1, m = 0, g = [0.5, -1, 0, 2]: b1*m + 0.1 g = [0.05, -0.1, 0, 0.2], sign [1, -1, 0, 1].
    # Decay first: p * (1 - 0.1*0.5) = p * 0.95 = [0.95, -1.9, 0.475, 0.285];
    # then p - 0.1 * sign = [0.85, -1.8, 0.475, 0.185] (sign(0) = 0: the third weight only decays).
    # m = 0.01 g = [0.005, -0.01, 0, 0.02].
    p.grad = torch.tensor([0.5, -1.0, 0.0, 2.0])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.85, -1.8, 0.475, 0.185]), rtol=0, atol=1e-7)
    torch.testing.assert_close(opt.state[p]["exp_avg"], torch.tensor([0.005, -0.01, 0.0, 0.02]), rtol=0, atol=1e-9)

    # Step 2, g = [-0.05, 0.5, -3, -0.1]:
    #   b1*m + 0.1 g = [0.0045 - 0.005, -0.009 + 0.05, 0 - 0.3, 0.018 - 0.01] = [-0.0005, 0.041, -0.3, 0.008]
    #   sign [-1, 1, -1, 1]. Element 0 is where beta1 and beta2 part: interpolating with b2 = 0.99
    #   would give 0.00495 - 0.0005 = +0.00445 (sign +1); element 3 moves against its gradient (momentum).
    #   p = step1 * 0.95 = [0.8075, -1.71, 0.45125, 0.17575]; p - 0.1 * sign = [0.9075, -1.81, 0.55125, 0.07575]
    #   m = 0.99 m + 0.01 g = [0.00495 - 0.0005, -0.0099 + 0.005, -0.03, 0.0198 - 0.001]
    #     = [0.00445, -0.0049, -0.03, 0.0188]
    p.grad = torch.tensor([-0.05, 0.5, -3.0, -0.1])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.9075, -1.81, 0.55125, 0.07575]), rtol=0, atol=1e-6)
    torch.testing.assert_close(opt.state[p]["exp_avg"], torch.tensor([0.00445, -0.0049, -0.03, 0.0188]),
                               rtol=0, atol=1e-8)


def test_defaults_and_no_grad_and_validation():
    p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = Lion([p, q])
    assert opt.defaults == {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}
    opt.param_groups[0]["lr"] = 0.25  # the trainer writes the scheduled lr into the group
    p.grad = torch.tensor([1e-30, -7.0])  # the size of a gradient does not matter, only its sign
    opt.step()
    assert p.tolist() == [0.75, 1.25]
    assert q.tolist() == [1.0, 1.0] and q not in opt.state  # no gradient: untouched, no state
    for bad in (dict(lr=-1.0), dict(betas=(0.9, 1.5)), dict(weight_decay=-0.1)):
        with pytest.raises(ValueError):
            Lion([torch.nn.Parameter(torch.ones(1))], **bad)


def test_state_dict_round_trip_continues_identically():
    torch.manual_seed(1)
    a = torch.nn.Parameter(torch.randn(6))
    b = torch.nn.Parameter(a.detach().clone())
    oa, ob = Lion([a], lr=1e-2, weight_decay=0.1), Lion([b], lr=1e-2, weight_decay=0.1)
    grads = [torch.randn(6) for _ in range(4)]
    for g in grads[:2]:
        a.grad, b.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
    ob2 = Lion([b], lr=1e-2, weight_decay=0.1)
    ob2.load_state_dict(ob.state_dict())
    torch.testing.assert_close(ob2.state[b]["exp_avg"], oa.state[a]["exp_avg"], rtol=0, atol=0)
    for g in grads[2:]:
        a.grad, b.grad = g.clone(), g.clone()
        oa.step()
        ob2.step()
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_trainer_builds_lion_from_the_config():
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.train.optimizers import make_optimizers

    arch = ArchConfig(hidden_size=16, num_heads=2, L_layers=1, puzzle_emb_len=1, forward_dtype="float32")
    cfg = TrainConfig(arch=arch, optimizer="lion", beta1=0.8, beta2=0.99, weight_decay=1.0)
    dense, sparse = make_optimizers(cfg, TinyRecursiveModel(arch, 16, 6, 3))
    assert isinstance(dense, Lion) and sparse is not None
    assert dense.defaults["betas"] == (0.8, 0.99) and dense.defaults["weight_decay"] == 1.0


@pytest.mark.parametrize("bad", [dict(lr=float("inf")), dict(weight_decay=float("inf")),
                                 dict(betas=(float("nan"), 0.99))], ids=["lr", "weight_decay", "beta1"])
def test_a_non_finite_setting_is_refused_where_given(bad):
    """Lion(lr=inf) took it, and its first step made every weight -inf."""
    (name,) = bad
    with pytest.raises(ValueError, match=rf"^{name}(\[0\])?=(inf|nan): expected "):
        Lion([torch.nn.Parameter(torch.ones(3))], **bad)
