"""AdamATan2: the update of the `adam-atan2` package, pinned on hand-computed values."""

import math

import numpy as np
import pytest
import torch

from trm_kaggle.optim import AdamATan2, fused_available


def test_two_steps_by_hand():
    """adam-atan2 0.0.3 (what `pip install adam-atan2` gives upstream):
    p *= 1 - lr*wd; p -= (lr / bc1) * atan2(m, sqrt(v) / sqrt(bc2))."""
    lr, wd, b1, b2 = 0.1, 0.1, 0.9, 0.95
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = AdamATan2([p], lr=lr, betas=(b1, b2), weight_decay=wd)

    # Step 1, g = [0.5, -1, 0]: m = 0.1 g = [0.05, -0.1, 0], v = 0.05 g^2, bc1 = 0.1, bc2 = 0.05.
    # sqrt(v) / sqrt(bc2) = |g| = [0.5, 1, 0]; atan2(m, |g|) = [atan(0.1), -atan(0.1), atan2(0, 0) = 0]
    # with atan(0.1) = 0.0996686525; the step size lr / bc1 = 1.0, so each weight moves by
    # 0.997 lr (0.0.2's rule, atan2(m / bc1, ...), would have moved it by pi/4 lr = 0.785 lr).
    # p = p * 0.99 - [0.0996686525, -0.0996686525, 0] = [0.8903313475, -1.8803313475, 0.495]
    p.grad = torch.tensor([0.5, -1.0, 0.0])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.8903313475, -1.8803313475, 0.495]), rtol=0, atol=1e-7)

    # Step 2, g = [0.5, 1, 2]; bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.9025 = 0.0975, lr / bc1 = 0.5263157895.
    #   elem 0: m = 0.9*0.05 + 0.1*0.5 = 0.095,  v = 0.95*0.0125 + 0.05*0.25 = 0.024375
    #           sqrt(v / bc2) = sqrt(0.25) = 0.5 -> atan2(0.095, 0.5) = atan(0.19) = 0.1877619465
    #   elem 1: m = 0.9*(-0.1) + 0.1*1 = 0.01,   v = 0.95*0.05 + 0.05*1 = 0.0975
    #           sqrt(v / bc2) = 1 -> atan(0.01) = 0.0099996667
    #   elem 2: m = 0.2, v = 0.05*4 = 0.2
    #           sqrt(0.2 / 0.0975) = 1.4322297296 -> atan2(0.2, 1.4322297296) = 0.1387451989
    #   p = step1 * 0.99 - 0.5263157895 * atan2 = [0.7826059569, -1.8667910165, 0.4170262111]
    p.grad = torch.tensor([0.5, 1.0, 2.0])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.7826059569, -1.8667910165, 0.4170262111]),
                               rtol=0, atol=1e-6)

    st = opt.state[p]
    assert st["step"].item() == 2
    torch.testing.assert_close(st["exp_avg"], torch.tensor([0.095, 0.01, 0.2]))
    torch.testing.assert_close(st["exp_avg_sq"], torch.tensor([0.024375, 0.0975, 0.2]))


def test_first_step_moves_a_weight_by_about_lr():
    """At step 1 m / sqrt(v / bc2) = 0.1 sign(g), so |update| = lr * atan(0.1) / 0.1 = 0.99669 lr
    whatever the gradient's size (0.0.2's rule gave pi/4 lr)."""
    p = torch.nn.Parameter(torch.zeros(3))
    opt = AdamATan2([p], lr=1e-3, weight_decay=0.0)
    p.grad = torch.tensor([1e-6, -3.0, 1e4])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([-0.99668652e-3, 0.99668652e-3, -0.99668652e-3]),
                               rtol=1e-6, atol=0)


def reference_step(p, g, m, v, t, lr, b1, b2, wd):
    """The package's (0.0.3) per-element math, written out on float64 tensors."""
    p = p * (1 - lr * wd)
    m = m + (1 - b1) * (g - m)
    v = v + (1 - b2) * (g * g - v)
    p = p - (lr / (1 - b1**t)) * torch.atan2(m, torch.sqrt(v) / math.sqrt(1 - b2**t))
    return p, m, v


def test_multi_tensor_matches_reference_including_skipped_steps():
    torch.manual_seed(0)
    shapes = [(7, 5), (5,), (3, 4, 2), (1,)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    ref = [(p.detach().double(), torch.zeros(s, dtype=torch.float64), torch.zeros(s, dtype=torch.float64), 0)
           for p, s in zip(params, shapes)]
    lr, b1, b2, wd = 3e-3, 0.9, 0.95, 0.1
    opt = AdamATan2(params, lr=lr, betas=(b1, b2), weight_decay=wd)
    for step in range(6):
        for i, p in enumerate(params):
            if i == 1 and step in (1, 2):  # this tensor gets no gradient in two steps
                p.grad = None
                continue
            g = torch.randn(p.shape)
            p.grad = g
            rp, rm, rv, t = ref[i]
            ref[i] = (*reference_step(rp, g.double(), rm, rv, t + 1, lr, b1, b2, wd), t + 1)
        opt.step()
    for p, (rp, _, _, t) in zip(params, ref):
        torch.testing.assert_close(p.detach().double(), rp, rtol=1e-6, atol=1e-6)
        assert opt.state[p]["step"].item() == t
    assert opt.state[params[1]]["step"].item() == 4


def test_defaults_are_upstreams_and_update_is_bounded():
    p = torch.nn.Parameter(torch.zeros(4))
    opt = AdamATan2([p])
    assert opt.defaults["betas"] == (0.9, 0.95) and opt.defaults["weight_decay"] == 0.1
    opt.param_groups[0]["lr"] = 0.5  # schedulers write the lr into the group
    p.grad = torch.tensor([1e30, -1e-30, 3.0, 0.0])
    opt.step()
    # step 1: the bound is lr * pi/2 / (1 - beta1) = 0.5 * pi/2 / 0.1
    assert torch.all(p.abs() <= 0.5 * math.pi / 2 / 0.1 + 1e-6)
    assert p[3].item() == 0.0


def test_state_dict_round_trip_continues_identically():
    torch.manual_seed(1)
    a = torch.nn.Parameter(torch.randn(6))
    b = torch.nn.Parameter(a.detach().clone())
    oa = AdamATan2([a], lr=1e-2)
    ob = AdamATan2([b], lr=1e-2)
    grads = [torch.randn(6) for _ in range(4)]
    for g in grads[:2]:
        a.grad = g.clone()
        oa.step()
        b.grad = g.clone()
        ob.step()
    ob2 = AdamATan2([b], lr=1e-2)
    ob2.load_state_dict(ob.state_dict())
    for g in grads[2:]:
        a.grad = g.clone()
        oa.step()
        b.grad = g.clone()
        ob2.step()
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and fused_available()), reason="needs CUDA and the adam-atan2 package")
def test_fused_package_agrees_with_foreach():
    torch.manual_seed(0)
    x = torch.randn(1000, device="cuda")
    p1, p2 = torch.nn.Parameter(x.clone()), torch.nn.Parameter(x.clone())
    o1 = AdamATan2([p1], lr=1e-2, use_fused=True)
    o2 = AdamATan2([p2], lr=1e-2, use_fused=False)
    for _ in range(3):
        g = torch.randn(1000, device="cuda")
        p1.grad, p2.grad = g.clone(), g.clone()
        o1.step()
        o2.step()
    torch.testing.assert_close(p1, p2, rtol=1e-5, atol=1e-6)


def test_an_old_package_kernel_is_never_used(monkeypatch):
    """adam-atan2 0.0.2's kernel computes another rule: it must not replace ours when installed."""
    from importlib import metadata

    from trm_kaggle.optim import adam_atan2 as mod

    monkeypatch.setattr(metadata, "version", lambda name: "0.0.2")
    assert mod._load_fused_backend() is None
    monkeypatch.setattr(metadata, "version", lambda name: (_ for _ in ()).throw(metadata.PackageNotFoundError(name)))
    assert mod._load_fused_backend() is None
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.3")
    assert mod._package_version() == (0, 0, 3)


def test_step_counts_on_the_device_give_the_hosts_steps():
    """capturable: the count and bias corrections live with the weights (no host read), the same rule to float32
    rounding of the corrections."""
    torch.manual_seed(0)
    host = [torch.randn(50, 30, requires_grad=True), torch.randn(7, requires_grad=True)]
    dev = [p.detach().clone().requires_grad_(True) for p in host]
    a, b = AdamATan2(host, lr=1e-2), AdamATan2(dev, lr=1e-2, capturable=True)
    for _ in range(20):
        for p, q in zip(host, dev):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        a.step()
        b.step()
    assert b.state[dev[0]]["step"].device == dev[0].device and float(b.state[dev[0]]["step"]) == 20.0
    for p, q in zip(host, dev):
        assert torch.allclose(p, q, atol=1e-6, rtol=0), (p - q).abs().max()


@pytest.mark.parametrize("bad", [dict(lr=math.inf), dict(lr=np.float64(math.inf)), dict(lr=torch.tensor(math.inf)),
                                 dict(weight_decay=math.inf), dict(betas=(0.9, math.inf))],
                         ids=["lr", "numpy lr", "tensor lr", "weight_decay", "beta2"])
def test_an_infinite_setting_is_refused_where_given(bad):
    """lr=inf or weight_decay=inf passed `not lr >= 0`, and the first step made every weight -inf."""
    (name,) = bad
    with pytest.raises(ValueError, match=rf"^{name}(\[1\])?=.*inf.*: expected "):
        AdamATan2([torch.nn.Parameter(torch.ones(3))], **bad)
    # numpy's numbers and a one-element tensor are numbers, as the config takes them
    AdamATan2([torch.nn.Parameter(torch.ones(3))], lr=np.float32(1e-3), weight_decay=np.float64(0.1),
              betas=(np.float64(0.9), 0.95))
    AdamATan2([torch.nn.Parameter(torch.ones(3))], lr=torch.tensor(1e-3))
