"""Losses: float32 stablemax against upstream's float64 formula, softmax CE, the ACT loss and metrics."""

import math

import pytest
import torch
import torch.nn.functional as F

from trm_kaggle.model.losses import IGNORE_LABEL_ID, act_loss, softmax_cross_entropy, stablemax_cross_entropy

# Stated tolerance of the float32 stablemax against the float64 reference:
# |ours - ref| <= ATOL + RTOL * |ref| for the loss, and for each gradient element.
RTOL, ATOL = 2e-5, 1e-9
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


def stablemax_ce_float64(logits, labels, ignore_index=IGNORE_LABEL_ID):
    """Upstream's definition, evaluated in float64: -log(s(x_y) / sum_j s(x_j))."""
    x = logits.double()
    s = torch.where(x < 0, 1 / (1 - x), x + 1)
    logp = torch.log(s / s.sum(-1, keepdim=True))
    valid = labels != ignore_index
    picked = logp.gather(-1, torch.where(valid, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    return -torch.where(valid, picked, 0)


def random_logits(scale, n=1500, V=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, V, generator=g) * scale
    y = torch.randint(0, V, (n,), generator=g)
    # A third of the rows confidently right (tiny loss), a third confidently wrong.
    third = n // 3
    x[:third].scatter_(-1, y[:third, None], 20 * scale)
    x[third:2 * third].scatter_(-1, ((y[third:2 * third] + 1) % V)[:, None], 20 * scale)
    return x.float(), y


@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0, 1e3, 1e6, 1e15, 1e30])
def test_stablemax_float32_matches_float64_reference(scale):
    x, y = random_logits(scale)
    ours = stablemax_cross_entropy(x, y)
    assert ours.dtype == torch.float32
    ref = stablemax_ce_float64(x, y)
    torch.testing.assert_close(ours.double(), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("scale", [1.0, 100.0, 1e6, 1e20])
def test_stablemax_gradient_matches_float64_autograd(scale):
    x, y = random_logits(scale, n=600, seed=1)
    x32 = x.clone().requires_grad_(True)
    w = torch.rand(600, generator=torch.Generator().manual_seed(2))  # non-uniform upstream gradient
    (stablemax_cross_entropy(x32, y) * w).sum().backward()
    x64 = x.double().requires_grad_(True)
    (stablemax_ce_float64(x64, y) * w.double()).sum().backward()
    torch.testing.assert_close(x32.grad.double(), x64.grad, rtol=GRAD_RTOL, atol=GRAD_ATOL)


def test_stablemax_extreme_values_stay_finite():
    x = torch.tensor([[3e38, -3e38, 0.0, 1.0], [-1e30, -1e30, -1e30, -1e30]]).requires_grad_(True)
    y = torch.tensor([1, 2])
    loss = stablemax_cross_entropy(x, y)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(x.grad).all()
    assert loss[1].item() == pytest.approx(math.log(4), rel=1e-6)  # all equal logits: uniform


def test_stablemax_accepts_bfloat16_logits():
    x, y = random_logits(10.0, n=300)
    xb = x.bfloat16().requires_grad_(True)
    loss = stablemax_cross_entropy(xb, y)
    torch.testing.assert_close(loss.double(), stablemax_ce_float64(xb.detach(), y), rtol=RTOL, atol=ATOL)
    loss.sum().backward()
    assert xb.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("fn", [stablemax_cross_entropy, softmax_cross_entropy])
def test_ignored_labels_give_zero_loss_and_zero_gradient(fn):
    x = torch.randn(3, 5, 7, requires_grad=True)
    y = torch.randint(0, 7, (3, 5))
    y[0, :2] = IGNORE_LABEL_ID
    y[2] = IGNORE_LABEL_ID
    loss = fn(x, y)
    assert loss.shape == (3, 5)
    assert torch.all(loss[0, :2] == 0) and torch.all(loss[2] == 0) and torch.all(loss[1] > 0)
    loss.sum().backward()
    assert torch.all(x.grad[0, :2] == 0) and torch.all(x.grad[2] == 0)
    assert x.grad[1].abs().sum() > 0


def test_softmax_cross_entropy_matches_definition():
    x = torch.randn(4, 6, 9) * 5
    y = torch.randint(0, 9, (4, 6))
    ref = -F.log_softmax(x.double(), -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(softmax_cross_entropy(x, y).double(), ref, rtol=1e-5, atol=1e-6)


def test_custom_ignore_index():
    x = torch.randn(2, 4, 5)
    y = torch.tensor([[0, 1, 2, 3], [0, 0, 4, 4]])
    loss = stablemax_cross_entropy(x, y, ignore_index=0)
    assert torch.all(loss[y == 0] == 0) and torch.all(loss[y != 0] > 0)


def _onehot_logits(target, V, wrong_mask=None):
    logits = torch.full(target.shape + (V,), -4.0)
    logits.scatter_(-1, target.clamp_min(0).unsqueeze(-1), 4.0)
    if wrong_mask is not None:  # make those positions predict (target + 1) % V
        alt = torch.full(target.shape + (V,), -4.0).scatter_(-1, ((target.clamp_min(0) + 1) % V).unsqueeze(-1), 4.0)
        logits = torch.where(wrong_mask.unsqueeze(-1), alt, logits)
    return logits


def test_act_loss_metrics_and_total():
    V = 5
    labels = torch.tensor([[1, 2, 3, IGNORE_LABEL_ID],
                           [1, 1, 1, 1],
                           [2, 2, IGNORE_LABEL_ID, IGNORE_LABEL_ID],
                           [IGNORE_LABEL_ID] * 4])
    wrong = torch.zeros(4, 4, dtype=torch.bool)
    wrong[1, 0] = True  # row 1: 3 of 4 right
    logits = _onehot_logits(labels, V, wrong).requires_grad_(True)
    q_halt = torch.tensor([2.0, 1.0, -1.0, 0.5], requires_grad=True)
    q_cont = torch.tensor([0.0, 0.0, 0.0, 0.0], requires_grad=True)
    target_q = torch.tensor([0.2, 0.4, 0.6, 0.8])
    outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_cont, "target_q_continue": target_q}
    halted = torch.tensor([True, True, False, True])
    steps = torch.tensor([3, 5, 2, 7], dtype=torch.int32)

    total, m = act_loss(outputs, labels, halted, steps)

    # Metrics over halted rows with at least one label: rows 0 and 1 (row 3 has none).
    assert m["count"].item() == 2
    assert m["token_accuracy"].item() == pytest.approx(1.0 + 0.75)
    assert m["exact_accuracy"].item() == 1
    # row 0 right and q_halt >= 0 -> correct; row 1 wrong and q_halt >= 0 -> incorrect
    assert m["q_halt_accuracy"].item() == 1
    assert m["steps"].item() == 3 + 5

    per_tok = stablemax_cross_entropy(logits, labels)
    counts = (labels != IGNORE_LABEL_ID).sum(-1).clamp_min(1)
    lm = (per_tok.sum(-1) / counts).sum()
    seq_correct = torch.tensor([1.0, 0.0, 1.0, 1.0])  # rows without labels count as correct, as upstream
    q_halt_loss = F.binary_cross_entropy_with_logits(q_halt, seq_correct, reduction="sum")
    q_cont_loss = F.binary_cross_entropy_with_logits(q_cont, target_q, reduction="sum")
    torch.testing.assert_close(m["lm_loss"], lm.detach())
    torch.testing.assert_close(m["q_halt_loss"], q_halt_loss.detach())
    torch.testing.assert_close(m["q_continue_loss"], q_cont_loss.detach())
    torch.testing.assert_close(total, lm + 0.5 * (q_halt_loss + q_cont_loss))
    total.backward()
    assert logits.grad is not None and q_halt.grad is not None and q_cont.grad is not None


def test_act_loss_without_q_continue_and_softmax():
    labels = torch.tensor([[1, 2], [3, 0]])
    logits = torch.randn(2, 2, 4)
    q_halt = torch.zeros(2)
    outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": torch.zeros(2)}
    total, m = act_loss(outputs, labels, torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.int32),
                        loss_type="softmax_cross_entropy")
    assert "q_continue_loss" not in m
    lm = (softmax_cross_entropy(logits, labels).sum(-1) / 2).sum()
    torch.testing.assert_close(total, lm + 0.5 * m["q_halt_loss"])
