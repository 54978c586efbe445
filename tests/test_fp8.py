"""float8 matmuls in the no-grad network calls (`arch.fp8`, model/fp8.py): the quantisation, the emulation's
equality with the scaled product `torch._scaled_mm` computes, an error bound against the exact product, the
calls it reaches (no-grad ones only), and, under `cuda`, `torch._scaled_mm` itself against the emulation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trm_kaggle.config import ArchConfig
from trm_kaggle.model import TinyRecursiveModel, act_loss
from trm_kaggle.model import fp8

U = 2.0**-4  # e4m3's relative rounding bound (3 stored mantissa bits, round to nearest)
SUB = 2.0**-10  # half of its subnormal spacing (2^-9), in units of the row's scale


def operands(M=24, N=40, K=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g) * torch.logspace(-3, 1, M)[:, None]  # rows of very different ranges
    x[3] = 0.0  # a row of zeros
    x[5, :4] = torch.tensor([1e-6, -3e-5, 2.0, 1e-9])
    w = torch.randn(N, K, generator=g) * K**-0.5
    return x, w


def element_bound(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """How far an element's e4m3 value may lie from it: half a unit in the last place, at least half the
    subnormal spacing, both in the row's scale."""
    return torch.maximum(U * x.abs(), SUB * scale)


def test_quantise_rows_puts_each_rows_largest_value_on_448():
    x, _ = operands()
    q, scale = fp8.quantise_rows(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (x.shape[0], 1) and torch.isfinite(scale).all()
    qf = q.float()
    nonzero = x.abs().amax(1) > 0
    assert torch.equal(qf.abs().amax(1)[nonzero], torch.full((int(nonzero.sum()),), 448.0))
    assert torch.equal(qf[3], torch.zeros_like(qf[3]))  # zeros stay zeros
    err = (qf * scale - x).abs()
    assert (err <= element_bound(x, scale) * (1 + 1e-6)).all()
    assert err.max() > 0  # it did round


def test_the_emulation_is_the_scaled_product():
    """sx[m] sw[n] sum_k qx[m,k] qw[n,k], the product `torch._scaled_mm` defines, computed exactly in float64
    (a product of two e4m3 values is exact there, a sum of 64 of them too): the float32 emulation differs only
    by float32 rounding of the sum."""
    x, w = operands()
    qx, sx = fp8.quantise_rows(x)
    qw, sw = fp8.quantise_rows(w)
    exact = (qx.double() @ qw.double().t()) * sx.double() * sw.double().t()
    emulated = fp8.scaled_matmul_emulated(qx, sx, qw, sw, torch.float32)
    magnitude = (qx.double().abs() @ qw.double().abs().t()) * sx.double() * sw.double().t()
    # float32 sums of K terms: within K units of float32 rounding of the sum of magnitudes
    assert ((emulated.double() - exact).abs() <= x.shape[1] * 2.0**-24 * magnitude + 1e-30).all()
    assert (emulated.double() - exact).abs().max() < 1e-3 * exact.abs().max()
    assert torch.equal(fp8.fp8_linear(x, w), emulated)  # what fp8_linear runs off CUDA


def test_fp8_linear_error_bound_against_the_exact_product():
    x, w = operands()
    exact = x.double() @ w.double().t()
    y = fp8.fp8_linear(x, w).double()
    _, sx = fp8.quantise_rows(x)
    _, sw = fp8.quantise_rows(w)
    ex, ew = element_bound(x, sx).double(), element_bound(w, sw).double()
    bound = ex @ w.double().abs().t() + x.double().abs() @ ew.t() + ex @ ew.t()
    assert ((y - exact).abs() <= bound * (1 + 1e-5) + 1e-12).all()
    assert (y - exact).abs().max() > 1e-4  # far from float32: the matmul did run in e4m3
    # leading dims pass through, bf16 in gives bf16 out
    assert fp8.fp8_linear(x.view(4, 6, -1).bfloat16(), w.bfloat16()).shape == (4, 6, w.shape[0])


ARCH = dict(hidden_size=32, num_heads=2, expansion=2, L_cycles=2, L_layers=2, halt_max_steps=3, puzzle_emb_len=2,
            forward_dtype="float32")


def model(fp8_mode: str, H_cycles: int, mlp_t: bool = False) -> TinyRecursiveModel:
    torch.manual_seed(0)
    arch = ArchConfig(**ARCH, H_cycles=H_cycles, fp8=fp8_mode, mlp_t=mlp_t,
                      pos_encodings="none" if mlp_t else "rope")
    return TinyRecursiveModel(arch, 12, 6, 4)


def data() -> dict:
    g = torch.Generator().manual_seed(1)
    return {"inputs": torch.randint(0, 6, (3, 12), generator=g), "labels": torch.randint(1, 6, (3, 12), generator=g),
            "puzzle_identifiers": torch.randint(0, 4, (3,), generator=g, dtype=torch.int32)}


def train_step(m: TinyRecursiveModel):
    m.train()
    batch = data()
    torch.manual_seed(5)
    carry, out = m(m.initial_carry(batch), batch)
    loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    return out["logits"].detach(), {n: p.grad for n, p in m.named_parameters() if p.grad is not None}


def eval_logits(m: TinyRecursiveModel) -> torch.Tensor:
    m.eval()
    batch = data()
    with torch.inference_mode():
        _, out = m(m.initial_carry(batch), batch)
    return out["logits"]


def rel(a, b) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_fp8_leaves_every_call_with_autograd_alone():
    """H_cycles=1: every network call of a training step carries gradients, so fp8=nograd changes nothing."""
    (l0, g0), (l1, g1) = train_step(model("off", 1)), train_step(model("nograd", 1))
    assert torch.equal(l0, l1) and all(torch.equal(g0[n], g1[n]) for n in g0)


@pytest.mark.parametrize("mlp_t", [False, True])
def test_fp8_blocks_are_the_blocks_but_for_the_matmuls(monkeypatch, mlp_t):
    """With the e4m3 matmul swapped for an exact one, fp8=nograd computes what fp8=off does: the float8 blocks
    differ from the plain ones in their matmuls alone (and H_cycles=2 runs a no-grad cycle through them)."""
    off, on = model("off", 2, mlp_t), model("nograd", 2, mlp_t)
    monkeypatch.setattr(fp8, "fp8_linear", lambda x, w: F.linear(x, w))
    (l0, g0), (l1, g1) = train_step(off), train_step(on)
    assert rel(l1, l0) < 1e-5 and max(rel(g1[n], g0[n]) for n in g0) < 1e-5
    assert rel(eval_logits(on), eval_logits(off)) < 1e-5


@pytest.mark.parametrize("mlp_t", [False, True])
def test_fp8_runs_the_no_grad_calls_in_float8(mlp_t):
    """H_cycles=2: the first cycle of a training step and all of an evaluation run in e4m3. Their distance from
    float32 is bf16's scaled by the ratio of the two formats' rounding units (2^-4 / 2^-8 = 16, x2 slack): the
    recursion amplifies both alike (at random weights, tiny width: tens of percent of the logits for e4m3)."""
    off, on, bf16 = model("off", 2, mlp_t), model("nograd", 2, mlp_t), model("off", 2, mlp_t)
    bf16.forward_dtype = torch.bfloat16
    (l0, _), (l1, _), (lb, _) = train_step(off), train_step(on), train_step(bf16)
    assert 0 < rel(l1, l0) <= 32 * rel(lb.float(), l0)
    e0 = eval_logits(off)
    assert 0 < rel(eval_logits(on), e0) <= 32 * rel(eval_logits(bf16).float(), e0)


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and fp8.fp8_capable(torch.device("cuda"))),
                    reason="needs a CUDA GPU of compute capability 8.9+")
def test_cuda_scaled_mm_is_the_emulation():
    """torch._scaled_mm (row-wise scales, bf16 out) against the emulation from the same e4m3 values and scales:
    equal up to the GPU's order of the float32 sum and its bf16 rounding."""
    x, w = operands(M=64, N=96, K=128)
    x, w = x.cuda().bfloat16(), w.cuda().bfloat16()
    y = fp8.fp8_linear(x, w).float()
    qx, sx = fp8.quantise_rows(x)
    qw, sw = fp8.quantise_rows(w)
    emulated = fp8.scaled_matmul_emulated(qx, sx, qw, sw, torch.float32)
    magnitude = (qx.float().abs() @ qw.float().abs().t()) * sx * sw.t()
    assert ((y - emulated).abs() <= 2.0**-8 * emulated.abs() + x.shape[1] * 2.0**-24 * magnitude + 1e-30).all()


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and fp8.fp8_capable(torch.device("cuda"))),
                    reason="needs a CUDA GPU of compute capability 8.9+")
def test_cuda_fp8_model_runs_close_to_bf16():
    torch.manual_seed(0)
    arch = dict(ARCH, forward_dtype="bfloat16", H_cycles=2, hidden_size=64, num_heads=4)
    off = TinyRecursiveModel(ArchConfig(**arch), 12, 6, 4).cuda()
    on = TinyRecursiveModel(ArchConfig(**arch, fp8="nograd"), 12, 6, 4).cuda()
    on.load_state_dict(off.state_dict())
    batch = {k: v.cuda() for k, v in data().items()}
    outs = []
    for m in (off, on):
        m.eval()
        with torch.inference_mode():
            outs.append(m(m.initial_carry(batch), batch)[1]["logits"].float())
    assert 0 < rel(outs[1], outs[0]) < 0.1
