"""The CPU's faster paths for `trm_kaggle.model.layers`: the same arithmetic (up to float32 rounding order).

`layers.py` holds the reference arithmetic, the path CUDA and every other device take; where its dispatch
hook `layers.cpu_fast_path(x)` says the CPU, it calls in here instead:
* matmuls through oneDNN with the SiLU, the SwiGLU gating product and the residual add fused into their
  epilogues (`linear`, `swiglu`, `_onednn`);
* RoPE as one complex multiplication on a head-dimension order in which q and k are projected (`attention`;
  eager only: compiled, the reference path's roll fuses);
* RMSNorm with a hand-written backward (`rms_norm`).
bf16 on CPU (chosen by forward_dtype="auto" where bf16 matmuls are fast, see `trm_kaggle.model.dtype`) runs the
matmuls in bf16 but RoPE, attention and the norms in float32. TRM_ONEDNN=0 in the environment turns the oneDNN
matmuls off.

Importing this module never imports torch._dynamo (1.2 s of every CPU process's start-up): the oneDNN custom
op, whose first call would, runs only where torch.compile may be tracing (`_onednn`).
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from trm_kaggle.model.compiling import may_be_tracing

# ---------------------------------------------------------------------------
# RMSNorm with a hand-written backward
# ---------------------------------------------------------------------------


class _RMSNorm(torch.autograd.Function):
    """RMSNorm with a hand-written backward: dx = r * (g - y * mean(g * y)), y = x * r.

    Statistics and both passes run in float32 whatever the input dtype (bf16 in,
    bf16 out). Autograd's backward of the composite (pow, mean, rsqrt, mul) takes
    ~30x the forward's time on CPU; this one is three passes over the tensor.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.float()
        r = torch.rsqrt(xf.square().mean(-1, keepdim=True).add_(eps))
        y = xf * r
        ctx.save_for_backward(y, r)
        ctx.in_dtype = x.dtype
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        y, r = ctx.saved_tensors
        g = g.float()
        m = (g * y).mean(-1, keepdim=True)
        dx = torch.addcmul(g, y, m, value=-1.0).mul_(r)
        return (dx if ctx.in_dtype == torch.float32 else dx.to(ctx.in_dtype)), None


def rms_norm(x: torch.Tensor, eps: float) -> Optional[torch.Tensor]:
    """`layers.rms_norm` with the hand-written backward, where a backward will run (eager); None elsewhere (the
    reference path, whose forward is as fast)."""
    if (x.dtype in (torch.float32, torch.bfloat16) and torch.is_grad_enabled() and x.requires_grad
            and not torch.compiler.is_compiling()):
        return _RMSNorm.apply(x, eps)
    return None


# ---------------------------------------------------------------------------
# Matmuls through oneDNN
# ---------------------------------------------------------------------------

# float32 matmuls on CPU go through oneDNN (`mkldnn._linear_pointwise`, the kernel
# torch.compile uses for frozen CPU linears) instead of ATen's BLAS call: for the
# model's shapes its kernels beat the BLAS call on the CPUs measured so far, and it
# can fuse the SwiGLU activation, the gating product and the residual add into the
# matmul's epilogue (compare on a machine with `TRM_ONEDNN=0` against the default in
# benchmarks/bench_train_cpu.py). Same float32 arithmetic (only the
# summation order of a dot product may differ). Gradients with respect to the
# input use oneDNN too; weight gradients (a long reduction over batch x sequence)
# stay with BLAS, which is faster there. Other dtypes use F.linear.


def _probe_onednn() -> bool:
    if os.environ.get("TRM_ONEDNN", "1") == "0":
        return False
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        lp = torch.ops.mkldnn._linear_pointwise
        x, w = torch.randn(3, 4, 8), torch.randn(6, 8)
        ref = F.linear(x, w)
        ok = torch.allclose(lp(x, w, None, "none", [], ""), ref, atol=1e-5)
        ok &= torch.allclose(lp.binary(x, ref, w, None, "add"), 2 * ref, atol=1e-5)
        ok &= torch.allclose(lp.binary(x, ref, w, None, "mul"), ref * ref, atol=1e-4)
        ok &= torch.allclose(lp(x, w, None, "swish", [], ""), F.silu(ref), atol=1e-5)
        return bool(ok)
    except Exception:  # no oneDNN in this build, or an op signature we do not know
        return False


ONEDNN_LINEAR = _probe_onednn()


# Below this many multiply-adds per matmul, oneDNN's per-call overhead (a custom op)
# outweighs its faster kernel. The crossover depends on the CPU; this threshold sits at
# the top of the measured range, so small matmuls never pay the overhead (re-measure with
# benchmarks/bench_train_cpu.py, with and without TRM_ONEDNN=0, before moving it).
ONEDNN_MIN_MACS = 1 << 25


def _use_onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    """oneDNN for this x @ w.T: float32, and big enough to pay for the call."""
    if not (ONEDNN_LINEAR and x.dtype == torch.float32 and w.dtype == torch.float32) or x.shape[-1] == 0:
        return False
    return (x.numel() // x.shape[-1]) * w.shape[0] * w.shape[1] >= ONEDNN_MIN_MACS


def _needs_grad(*tensors: Optional[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _onednn_kernel(x: torch.Tensor, w: torch.Tensor, other: Optional[torch.Tensor], epilogue: str) -> torch.Tensor:
    """oneDNN x @ w.T followed, in the same pass, by `epilogue`: "none", "swish" (SiLU),
    "add" (+ other) or "mul" (* other)."""
    lp = torch.ops.mkldnn._linear_pointwise
    x, w = x.contiguous(), w.contiguous()
    if other is None:
        return lp(x, w, None, epilogue, [], "")
    return lp.binary(x, other.contiguous(), w, None, epilogue)


@torch.library.custom_op("trm_kaggle::linear", mutates_args=())
def _onednn_linear(x: torch.Tensor, w: torch.Tensor, other: Optional[torch.Tensor], epilogue: str) -> torch.Tensor:
    """`_onednn_kernel` as a custom op, so that torch.compile keeps it as one opaque kernel and fuses the
    element-wise work around it."""
    return _onednn_kernel(x, w, other, epilogue)


@_onednn_linear.register_fake
def _(x, w, other, epilogue):
    return x.new_empty((*x.shape[:-1], w.shape[0]))


def _onednn_linear_setup(ctx, inputs, output):
    x, w, _, epilogue = inputs
    ctx.epilogue = epilogue
    ctx.save_for_backward(x, w)


def _onednn_linear_backward(ctx, dy):
    if ctx.epilogue not in ("none", "add"):
        raise RuntimeError(f"trm_kaggle::linear: no gradient through the '{ctx.epilogue}' epilogue (inference only)")
    x, w = ctx.saved_tensors
    dx = dw = dother = None
    if ctx.needs_input_grad[0]:  # oneDNN again: faster than BLAS for this product too
        dx = _onednn(dy, w.t().contiguous(), None, "none")
    if ctx.needs_input_grad[1]:  # a long reduction over batch x sequence: BLAS is faster there
        dw = dy.reshape(-1, dy.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
    if ctx.epilogue == "add" and ctx.needs_input_grad[2]:
        dother = dy
    return dx, dw, dother, None


_onednn_linear.register_autograd(_onednn_linear_backward, setup_context=_onednn_linear_setup)


class _EagerOneDNNLinear(torch.autograd.Function):
    """The custom op's forward and backward as a plain autograd function, for code that is not compiled."""

    @staticmethod
    def forward(x, w, other, epilogue):
        return _onednn_kernel(x, w, other, epilogue)

    setup_context = staticmethod(_onednn_linear_setup)
    backward = staticmethod(_onednn_linear_backward)


def _onednn(x: torch.Tensor, w: torch.Tensor, other: Optional[torch.Tensor], epilogue: str) -> torch.Tensor:
    """The oneDNN product, through the custom op wherever torch.compile may be tracing (torch._dynamo imported),
    else through `_EagerOneDNNLinear` (or the kernel itself when no gradient is needed). Same kernels, same
    numbers: the custom op's first call imports torch._dynamo, 1.2 s of the start-up of every CPU process
    (evaluate, submit, a Kaggle kernel) that never compiles."""
    if may_be_tracing():
        return _onednn_linear(x, w, other, epilogue)
    if _needs_grad(x, w, other):
        return _EagerOneDNNLinear.apply(x, w, other, epilogue)
    return _onednn_kernel(x, w, other, epilogue)


def linear(x: torch.Tensor, w: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`layers.linear` on the CPU: x @ w.T (+ residual, in the matmul's epilogue) through oneDNN where it pays,
    F.linear elsewhere."""
    if _use_onednn(x, w):
        return _onednn(x, w, residual, "none" if residual is None else "add")
    y = F.linear(x, w)
    return y if residual is None else y + residual


# ---------------------------------------------------------------------------
# SwiGLU and attention
# ---------------------------------------------------------------------------


def swiglu(mlp: nn.Module, x: torch.Tensor, residual: Optional[torch.Tensor]) -> torch.Tensor:
    """`layers.SwiGLU.forward` on the CPU: gate and up as two matmuls, so that both come out contiguous (SiLU
    and its backward run 2-3x slower on the strided halves of one [gate | up] output); without a gradient,
    float32, SiLU and the gating product run inside the two oneDNN matmuls' epilogues."""
    w, cast = mlp.gate_up_proj.weight, mlp.gate_up_proj.cast_weight
    if _use_onednn(x, w) and cast is None:
        w_gate, w_up = w[: mlp.inner], w[mlp.inner:]
        if _needs_grad(x, w):
            h = F.silu(_onednn(x, w_gate, None, "none")) * _onednn(x, w_up, None, "none")
        else:
            h = _onednn(x, w_up, _onednn(x, w_gate, None, "swish"), "mul")
        return mlp.down_proj(h, residual)
    w = cast if cast is not None else w.to(x.dtype)  # bf16 on CPU
    gate, up = linear(x, w[: mlp.inner]), linear(x, w[mlp.inner:])
    return mlp.down_proj(F.silu(gate) * up, residual)


def qk_pair_order(num_heads: int, head_dim: int) -> torch.Tensor:
    """Row order of qkv_proj.weight that interleaves each q/k head as (x0, x_h, x1, x_h+1, ...), h = head_dim/2
    (`attention`); v keeps its rows."""
    half, D = head_dim // 2, num_heads * head_dim
    ambient, cpu = torch.empty(0).device, torch.device("cpu")  # on the CPU: see layers.RotaryEmbedding
    within = torch.arange(head_dim, device=cpu).view(2, half).t().reshape(-1)  # 0, h, 1, h+1, ...
    qk = (torch.arange(2 * num_heads, device=cpu)[:, None] * head_dim + within).reshape(-1)
    return torch.cat((qk, torch.arange(2 * D, 3 * D, device=cpu))).to(ambient)


def attention(attn: nn.Module, x: torch.Tensor, cos_sin: Optional[Tuple[torch.Tensor, torch.Tensor]],
              residual: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """`layers.Attention.forward` with RoPE as one complex multiplication, in eager float32 or bf16 with RoPE and
    an even head dimension; None elsewhere (the reference path).

    (Eager only. Compiled, the reference path fuses its roll into the kernels around it; and inductor with a
    nested compile region gave wrong input gradients for the permuted weight below, torch 2.13.)
    Attention only needs the dot products q.k, which do not change when q and k list their head dimensions in
    the same other order; so q and k are projected with their rows permuted to pair dimension i with
    i + head_dim/2 side by side, and (x_i, x_i+h) * (cos + i sin) is then exactly upstream's
    x * cos + rotate_half(x) * sin. One pass, no concatenation of 8-float pieces (the slow part of RoPE on CPU).
    bf16 on CPU: the projections run in bf16 (fast where the CPU has AVX512_BF16/AMX), but the rotation and the
    attention itself in float32, as upstream rotates: torch's CPU attention is several times slower in bf16 at
    these head sizes (its backward ~5x)."""
    if (cos_sin is None or x.dtype not in (torch.float32, torch.bfloat16) or attn.head_dim % 2
            or torch.compiler.is_compiling()):
        return None
    B, S, D = x.shape
    half = attn.head_dim // 2
    w = attn.qkv_proj.cast_weight if attn.qkv_proj.cast_weight is not None else attn.qkv_proj.weight
    w = w if w.dtype == x.dtype else w.to(x.dtype)
    qkv = linear(x, w[attn.qk_pair_order]).view(B, S, 3, attn.num_heads, attn.head_dim)
    qkv = qkv.float()  # no-op in float32
    cos, sin = cos_sin  # float32 tables (RotaryEmbedding)
    c, s = cos[:, None, None, :half], sin[:, None, None, half:]  # sin_signed's 2nd half is +sin
    # split/unbind (not indexing): their backward is one concatenation, not a zero-filled buffer per piece.
    qk, v = qkv.split((2, 1), dim=2)
    rot = torch.complex(c, s)
    qk = torch.view_as_real(torch.view_as_complex(qk.unflatten(-1, (half, 2))) * rot).flatten(-2)
    q, k = qk.unbind(2)
    v = v.squeeze(2)
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False)
    return attn.o_proj(y.transpose(1, 2).reshape(B, S, D).to(x.dtype), residual)
