"""AdamATan2: the update of the `adam-atan2` package, pinned on hand-computed values."""

import math

import pytest
import torch

from trm_kaggle.optim import AdamATan2, fused_available


def test_two_steps_by_hand():
    lr, wd, b1, b2 = 0.1, 0.1, 0.9, 0.95
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = AdamATan2([p], lr=lr, betas=(b1, b2), weight_decay=wd)

    # Step 1, g = [0.5, -1, 0]. m = 0.1 g, v = 0.05 g^2, bc1 = 0.1, bc2 = 0.05, so
    # m/bc1 = g and sqrt(v)/sqrt(bc2) = |g|: atan2(g, |g|) = +-pi/4, and atan2(0, 0) = 0.
    # p = p * (1 - 0.01) - 0.1 * [pi/4, -pi/4, 0]
    p.grad = torch.tensor([0.5, -1.0, 0.0])
    opt.step()
    q = math.pi / 4
    step1 = [0.99 - 0.1 * q, -1.98 + 0.1 * q, 0.495]
    torch.testing.assert_close(p.detach(), torch.tensor(step1), rtol=0, atol=1e-7)

    # Step 2, g = [0.5, 1, 2]; bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.9025 = 0.0975.
    #   elem 0: m = 0.9*0.05 + 0.1*0.5 = 0.095,  v = 0.95*0.0125 + 0.05*0.25 = 0.024375
    #           m/bc1 = 0.5, sqrt(v/bc2) = sqrt(0.25) = 0.5 -> atan2 = pi/4
    #   elem 1: m = 0.9*(-0.1) + 0.1*1 = 0.01,   v = 0.95*0.05 + 0.05*1 = 0.0975
    #           m/bc1 = 0.01/0.19, sqrt(v/bc2) = 1 -> atan(0.052631579) = 0.052583061
    #   elem 2: m = 0.2, v = 0.05*4 = 0.2
    #           m/bc1 = 1.052631579, sqrt(0.2/0.0975) = 1.432229729 -> atan(0.734959) = 0.633806
    p.grad = torch.tensor([0.5, 1.0, 2.0])
    opt.step()
    upd = [math.pi / 4, math.atan2(0.01 / 0.19, 1.0), math.atan2(0.2 / 0.19, math.sqrt(0.2 / 0.0975))]
    assert upd[1] == pytest.approx(0.052583061, abs=1e-8)
    assert upd[2] == pytest.approx(0.633806, abs=1e-6)
    step2 = [s * 0.99 - 0.1 * u for s, u in zip(step1, upd)]
    torch.testing.assert_close(p.detach(), torch.tensor(step2), rtol=0, atol=1e-6)

    st = opt.state[p]
    assert st["step"].item() == 2
    torch.testing.assert_close(st["exp_avg"], torch.tensor([0.095, 0.01, 0.2]))
    torch.testing.assert_close(st["exp_avg_sq"], torch.tensor([0.024375, 0.0975, 0.2]))


def reference_step(p, g, m, v, t, lr, b1, b2, wd):
    """The package's per-element math, written out on float64 tensors."""
    p = p * (1 - lr * wd)
    m = m + (1 - b1) * (g - m)
    v = v + (1 - b2) * (g * g - v)
    p = p - lr * torch.atan2(m / (1 - b1**t), torch.sqrt(v) / math.sqrt(1 - b2**t))
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
    assert torch.all(p.abs() <= 0.5 * math.pi / 2 + 1e-6)
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
