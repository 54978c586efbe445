"""The CPU fast paths of the building blocks against plain float64 references."""

import sys

import pytest
import torch
import torch.nn.functional as F

from trm_kaggle.model import cpu_kernels, layers
from trm_kaggle.model.layers import Attention, RotaryEmbedding, SwiGLU, apply_rope, rms_norm


def _ref_rms_norm(x, eps):
    x = x.double()
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_rms_norm_forward_and_backward(dtype, tol):
    g = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(4, 7, 32, generator=g)).to(dtype).requires_grad_(True)
    up = torch.randn(4, 7, 32, generator=g)
    y = rms_norm(x, 1e-5)
    assert y.dtype == dtype
    (y.float() * up).sum().backward()
    xr = x.detach().double().requires_grad_(True)
    yr = _ref_rms_norm(xr, 1e-5)
    (yr * up.double()).sum().backward()
    assert x.grad.dtype == dtype
    assert torch.allclose(y.double(), yr, atol=tol, rtol=tol)
    assert torch.allclose(x.grad.double(), xr.grad, atol=tol * 3, rtol=tol * 3)


def _ref_attention(attn: Attention, x, cos, sin):
    """Upstream's arithmetic in float64: qkv projection, rotate_half RoPE, SDPA, o_proj."""
    B, S, D = x.shape
    qkv = F.linear(x.double(), attn.qkv_proj.weight.double()).view(B, S, 3, attn.num_heads, attn.head_dim)
    qk = apply_rope(qkv[:, :, :2], cos.double()[:, None, None, :], sin.double()[:, None, None, :])
    q, k, v = qk[:, :, 0], qk[:, :, 1], qkv[:, :, 2]
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return F.linear(y.transpose(1, 2).reshape(B, S, D), attn.o_proj.weight.double())


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 5e-2)])
@pytest.mark.parametrize("grad", [False, True])
def test_cpu_attention_matches_reference(dtype, tol, grad):
    torch.manual_seed(0)
    attn = Attention(32, 4)
    rope = RotaryEmbedding(8, 12, 10000.0)
    x = torch.randn(3, 12, 32)
    cos, sin = rope()
    ref = _ref_attention(attn, x, cos, sin)
    xin = x.clone().to(dtype).requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        y = attn(xin, (cos, sin))
    assert y.dtype == dtype
    err = (y.double() - ref).abs().max() / ref.abs().max()
    assert err < tol
    if grad:  # gradients flow to the input and to both projections
        y.float().square().sum().backward()
        assert xin.grad is not None and attn.qkv_proj.weight.grad.abs().sum() > 0
        xr = x.double().detach().requires_grad_(True)
        _ref_attention(attn, xr, cos, sin).square().sum().backward()
        gerr = (xin.grad.double() - xr.grad).abs().max() / xr.grad.abs().max()
        assert gerr < 3 * tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_cpu_swiglu_matches_reference(dtype, tol):
    torch.manual_seed(0)
    mlp = SwiGLU(32, 4)
    x = torch.randn(2, 5, 32)
    w = mlp.gate_up_proj.weight.double()
    gate, up = F.linear(x.double(), w).chunk(2, dim=-1)
    ref = F.linear(F.silu(gate) * up, mlp.down_proj.weight.double()) + x.double()
    y = mlp(x.to(dtype), residual=x.to(dtype))
    assert y.dtype == dtype
    assert (y.double() - ref).abs().max() / ref.abs().max() < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_the_normed_swiglu_is_sigmoid_gate_times_the_normed_product(dtype, tol):
    """arch.swiglu_norm: down(sigmoid(g) * rms_norm(g * u)) (+ residual), against float64 by hand; the plain
    SwiGLU of the same weights computes something else."""
    torch.manual_seed(0)
    mlp = SwiGLU(32, 4, norm_eps=1e-5)
    x = torch.randn(2, 5, 32)
    gate, up = F.linear(x.double(), mlp.gate_up_proj.weight.double()).chunk(2, dim=-1)
    prod = gate * up
    normed = prod / (prod.square().mean(-1, keepdim=True) + 1e-5).sqrt()
    ref = F.linear(torch.sigmoid(gate) * normed, mlp.down_proj.weight.double()) + x.double()
    y = mlp(x.to(dtype), residual=x.to(dtype))
    assert y.dtype == dtype
    assert (y.double() - ref).abs().max() / ref.abs().max() < tol
    mlp.norm_eps = None
    assert (mlp(x, residual=x).double() - ref).abs().max() / ref.abs().max() > 0.1


def _model_step(arch, batch):
    """Logits and gradients of one training step of a fixed-seed model (random puzzle rows)."""
    from trm_kaggle.model import TinyRecursiveModel, act_loss

    torch.manual_seed(0)
    model = TinyRecursiveModel(arch, 30, 10, 5).train()
    with torch.no_grad():
        model.puzzle_emb.weights.normal_()
    carry, out = model(model.initial_carry(batch), batch)
    loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    return out["logits"].float(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def test_cpu_fast_paths_compute_what_the_plain_path_computes(monkeypatch):
    """The whole model (forward + backward) on the CPU-specific paths (oneDNN, complex RoPE, float32
    attention under bf16, hand-written norm backward) against the plain path every other device
    (CUDA) runs, with the same weights and batch. float32: equal up to rounding. bf16: both are
    compared with the float32 result, and the CPU path must be about as accurate as the plain one
    (bf16 through the recursion moves gradients by 10-50 % on either path)."""
    from trm_kaggle.config import ArchConfig

    kw = dict(hidden_size=64, num_heads=4, expansion=4, H_cycles=2, L_cycles=2, L_layers=2, halt_max_steps=2,
              puzzle_emb_len=2)
    g = torch.Generator().manual_seed(0)
    batch = {"inputs": torch.randint(0, 10, (8, 30), generator=g), "labels": torch.randint(0, 10, (8, 30), generator=g),
             "puzzle_identifiers": torch.randint(0, 5, (8,), generator=g, dtype=torch.int32)}
    fp32, bf16 = ArchConfig(**kw, forward_dtype="float32"), ArchConfig(**kw, forward_dtype="bfloat16")

    monkeypatch.setattr(cpu_kernels, "ONEDNN_MIN_MACS", 0)  # oneDNN on every matmul of this small model
    fast32, fast16 = _model_step(fp32, batch), _model_step(bf16, batch)
    monkeypatch.setattr(layers, "cpu_fast_path", lambda x: False)
    plain32, plain16 = _model_step(fp32, batch), _model_step(bf16, batch)

    assert _rel(fast32[0], plain32[0]) < 1e-5
    for n, g_plain in plain32[1].items():
        assert _rel(fast32[1][n], g_plain) < 1e-4, n
    assert _rel(fast16[0], plain32[0]) <= 1.25 * _rel(plain16[0], plain32[0]) + 0.005
    for n, g32 in plain32[1].items():
        assert _rel(fast16[1][n], g32) <= 1.25 * _rel(plain16[1][n], g32) + 0.01, n


def _rope_by_concatenation(x, cos, sin_signed):
    """RoPE as it was written before the roll: the halves swapped by concatenating the two slices."""
    half = x.shape[-1] // 2
    return torch.addcmul(x * cos, torch.cat((x[..., half:], x[..., :half]), dim=-1), sin_signed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("head_dim", [2, 8, 64])
def test_rope_by_roll_is_bit_identical_to_rope_by_concatenation(dtype, head_dim):
    """apply_rope swaps the halves with a roll: the very values of the concatenation, forward and backward."""
    torch.manual_seed(head_dim)
    cos, sin = RotaryEmbedding(head_dim, 13, 10000.0)()
    x = (torch.randn(3, 13, 2, 4, head_dim) * 5).to(dtype).requires_grad_(True)
    y = x.detach().clone().requires_grad_(True)
    c, s = cos[:, None, None, :], sin[:, None, None, :]
    got, want = apply_rope(x, c, s), _rope_by_concatenation(y, c, s)
    assert got.dtype == want.dtype and torch.equal(got, want)
    g = torch.randn_like(got)
    got.backward(g)
    want.backward(g)
    assert torch.equal(x.grad, y.grad)
    # and it is a rotation: the other half's sign is the one upstream's rotate_half gives
    half = head_dim // 2
    ref = x.detach().double() * c.double() + torch.cat((-x.detach()[..., half:], x.detach()[..., :half]), -1).double() \
        * torch.cat((s[..., half:], s[..., half:]), -1).double()
    assert torch.allclose(got.detach().double(), ref, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-2)


@pytest.mark.skipif(not cpu_kernels.ONEDNN_LINEAR, reason="this torch build has no oneDNN")
@pytest.mark.parametrize("residual", [False, True])
def test_eager_onednn_path_is_the_custom_op_s_arithmetic(residual):
    """Where torch._dynamo is not imported the oneDNN matmuls skip the custom op (whose first call imports it):
    the same kernels, so the same output and gradients, bit for bit."""
    g = torch.Generator().manual_seed(0)
    x0, w0 = torch.randn(2, 40, 64, generator=g), torch.randn(96, 64, generator=g)
    r0 = torch.randn(2, 40, 96, generator=g)
    epilogue = "add" if residual else "none"
    results = []
    for run in (cpu_kernels._onednn_linear, cpu_kernels._EagerOneDNNLinear.apply):
        x, w, r = (t.clone().requires_grad_(True) for t in (x0, w0, r0))
        y = run(x, w, r if residual else None, epilogue)
        (y * torch.cos(y)).sum().backward()
        results.append([y, x.grad, w.grad, r.grad if residual else torch.zeros(())])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_the_oneDNN_matmuls_take_the_custom_op_once_torch_dynamo_is_imported(monkeypatch):
    import torch._dynamo  # noqa: F401

    calls = []
    monkeypatch.setattr(cpu_kernels, "_onednn_linear", lambda *a: calls.append("op") or cpu_kernels._onednn_kernel(*a))
    monkeypatch.setattr(cpu_kernels, "_onednn_kernel", lambda *a: calls.append("kernel") or torch.zeros(()))
    cpu_kernels._onednn(torch.ones(1, 1), torch.ones(1, 1), None, "none")
    assert calls == ["op", "kernel"]
    calls.clear()
    monkeypatch.delitem(sys.modules, "torch._dynamo")
    cpu_kernels._onednn(torch.ones(1, 1), torch.ones(1, 1), None, "none")
    assert calls == ["kernel"]


@pytest.mark.parametrize("args, said", [((4, 8, 0.0), r"^base=0.0: expected a number from 1 to"),
                                        ((4, 8, 1e-308), r"^base=1e-308: expected a number from 1 to"),
                                        ((4, 8, 0.5), r"^base=0.5: expected a number from 1 to"),
                                        ((4, 8, -1.0), r"^base=-1.0: expected"),
                                        ((4, 8, float("nan")), r"^base=nan: expected"),
                                        ((2.5, 8, 10000.0), r"^head_dim=2.5: expected a whole number"),
                                        ((3, 8, 10000.0), r"^head_dim=3: expected an even number"),
                                        ((4, 0, 10000.0), r"^max_positions=0: expected a whole number from 1")])
def test_rope_s_arguments_are_named(args, said):
    """Base 0, NaN, -1 or 1e-308 (0 in float32) built NaN tables without a word; head_dim 2.5 was taken."""
    with pytest.raises(ValueError, match=said):
        RotaryEmbedding(*args)
