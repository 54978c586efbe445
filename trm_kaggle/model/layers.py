"""Building blocks of the TRM network: init, norm, rope, attention, SwiGLU, blocks.

Parameters are always float32. Activations run in the model's compute dtype (see
`trm_kaggle.model.dtype`: usually bfloat16 on CUDA, float32 or bfloat16 on CPU); a
layer casts its float32 weight to the activation dtype only when the two differ, so
the float32 path has no casts.
Module and weight names follow upstream so its checkpoints map one to one
(see `trm_kaggle.model.upstream`).

float32 on CPU has faster paths with the same arithmetic (up to float32 rounding
order), used by training and evaluation alike:
* matmuls through oneDNN with the SiLU, the SwiGLU gating product and the
  residual add fused into their epilogues (`linear`, `_onednn`);
* RoPE as one complex multiplication on a head-dimension order in which q and k
  are projected (`Attention.forward`; eager only: compiled, the plain path's roll fuses);
* RMSNorm with a hand-written backward (`_RMSNorm`).
bf16 on CPU (chosen by forward_dtype="auto" where bf16 matmuls are fast, see
`trm_kaggle.model.dtype`) runs the matmuls in bf16 but RoPE, attention and the norms
in float32. Other devices and dtypes (bf16 on CUDA) take the plain path.
TRM_ONEDNN=0 in the environment turns the oneDNN matmuls off.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from trm_kaggle.model.compiling import may_be_tracing

CosSin = Tuple[torch.Tensor, torch.Tensor]


# ---------------------------------------------------------------------------
# Initialisation
# ---------------------------------------------------------------------------


def trunc_normal_(tensor: torch.Tensor, std: float = 1.0, lower: float = -2.0, upper: float = 2.0) -> torch.Tensor:
    """Truncated normal whose *actual* standard deviation is `std` (JAX/Flax convention).

    `torch.nn.init.trunc_normal_(std=s)` cuts a N(0, s^2) at +-2s, which leaves a
    spread below s. Upstream uses the JAX convention instead: sample a standard
    normal truncated to [lower, upper] and rescale it so the result has std `std`.
    The variance of a standard normal truncated to [a, b] is
    1 + (a*phi(a) - b*phi(b))/Z - ((phi(a) - phi(b))/Z)^2 with Z = Phi(b) - Phi(a).
    """
    with torch.no_grad():
        if std == 0:
            return tensor.zero_()
        phi = lambda x: math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # noqa: E731
        cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
        z = cdf(upper) - cdf(lower)
        var = 1 + (lower * phi(lower) - upper * phi(upper)) / z - ((phi(lower) - phi(upper)) / z) ** 2
        scale = std / math.sqrt(var)
        nn.init.trunc_normal_(tensor, mean=0.0, std=1.0, a=lower, b=upper)
        return tensor.mul_(scale)


# ---------------------------------------------------------------------------
# Norm, rotary position encoding
# ---------------------------------------------------------------------------


def cpu_fast_path(x: torch.Tensor) -> bool:
    """Whether x takes the CPU-specific paths below. Every other device runs the plain path,
    the one CUDA runs; tests switch this off to check that the two compute the same."""
    return x.device.type == "cpu"


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


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a learned weight over the last axis, statistics in float32."""
    if (x.dtype in (torch.float32, torch.bfloat16) and torch.is_grad_enabled() and x.requires_grad
            and cpu_fast_path(x) and not torch.compiler.is_compiling()):
        return _RMSNorm.apply(x, eps)
    if x.dtype == torch.float32 and hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), eps=eps)
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return x.to(dtype)


class RotaryEmbedding(nn.Module):
    """RoPE tables for every position (prefix + sequence), always float32.

    Half-split layout as upstream: dimension i pairs with i + head_dim/2, i.e.
    rope(x) = x * cos + cat(-x2, x1) * sin with cos/sin = [freqs, freqs]. The sign
    of the first half is folded into the cached sin, so applying it is
    x * cos + roll(x, head_dim/2) * sin_signed: no concatenation and no negation per call.
    """

    def __init__(self, head_dim: int, max_positions: int, base: float):
        super().__init__()
        # Computed on the CPU, then put on the default device: arithmetic on the meta device (where the memory
        # estimate builds models) runs torch._refs, whose first call imports torch._dynamo (1.2 s).
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32, device="cpu"), inv_freq)
        cos, sin = freqs.cos(), freqs.sin()
        ambient = torch.empty(0).device
        # Not persistent: a pure function of the config, and upstream does not save them either.
        self.register_buffer("cos_cached", torch.cat((cos, cos), dim=-1).to(ambient), persistent=False)
        self.register_buffer("sin_signed", torch.cat((-sin, sin), dim=-1).to(ambient), persistent=False)

    def forward(self) -> CosSin:
        """(cos, sin_signed), float32 whatever the activation dtype: q and k rotate in float32 and are
        cast back, as upstream does (its tables stay float32 buffers). No-op casts unless the module
        itself was converted (`model.half()`)."""
        return self.cos_cached.float(), self.sin_signed.float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x: (..., head_dim) with cos/sin_signed broadcastable to it (see RotaryEmbedding).

    The halves swap places by a roll of half the head dimension: the same values as concatenating
    (x2, x1), but one indexing expression instead of a new buffer built from two slices, so that a
    compiler fuses the rotation (and its backward, a roll back) into the kernels around it."""
    return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, -1), sin_signed)


# ---------------------------------------------------------------------------
# Linear layers
# ---------------------------------------------------------------------------

# float32 matmuls on CPU go through oneDNN (`mkldnn._linear_pointwise`, the kernel
# torch.compile uses for frozen CPU linears) instead of ATen's BLAS call: for the
# model's shapes its kernels beat the BLAS call on the CPUs measured so far, and it
# can fuse the SwiGLU activation, the gating product and the residual add into the
# matmul's epilogue (compare on a machine with `TRM_ONEDNN=0` against the default in
# benchmarks/bench_train_cpu.py). Same float32 arithmetic (only the
# summation order of a dot product may differ). Gradients with respect to the
# input use oneDNN too; weight gradients (a long reduction over batch x sequence)
# stay with BLAS, which is faster there. Other devices and dtypes use F.linear.


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


def _cpu_fp32(x: torch.Tensor, w: torch.Tensor) -> bool:
    return cpu_fast_path(x) and x.dtype == torch.float32 and w.dtype == torch.float32


def _use_onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    """oneDNN for this x @ w.T: float32 on CPU, and big enough to pay for the call."""
    if not (ONEDNN_LINEAR and _cpu_fp32(x, w)) or x.shape[-1] == 0:
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
    """x @ w.T (+ residual) without bias: oneDNN for float32 on CPU, F.linear elsewhere."""
    if _use_onednn(x, w):
        return _onednn(x, w, residual, "none" if residual is None else "add")
    y = F.linear(x, w)
    return y if residual is None else y + residual


class CastedLinear(nn.Module):
    """Linear layer with float32 weights used in the activation dtype; LeCun-normal init."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(trunc_normal_(torch.empty(out_features, in_features), std=in_features**-0.5))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        # Set by TinyRecursiveModel for one forward pass in reduced precision so the
        # float32 -> bf16 cast happens once per pass instead of once per recursion.
        self.cast_weight: Optional[torch.Tensor] = None

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        w = self.cast_weight
        if w is None:
            w = self.weight if self.weight.dtype == x.dtype else self.weight.to(x.dtype)
        b = self.bias
        if b is None:
            return linear(x, w, residual)
        if b.dtype != x.dtype:
            b = b.to(x.dtype)
        y = F.linear(x, w, b)
        return y if residual is None else y + residual


class CastedEmbedding(nn.Module):
    """Embedding table with float32 weights, looked up in the activation dtype."""

    def __init__(self, num_embeddings: int, embedding_dim: int, init_std: float):
        super().__init__()
        self.weight = nn.Parameter(trunc_normal_(torch.empty(num_embeddings, embedding_dim), std=init_std))

    def forward(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        out = F.embedding(ids, self.weight)  # gather first, cast only the rows used
        return out if out.dtype == dtype else out.to(dtype)


def swiglu_width(hidden_size: int, expansion: float) -> int:
    """Upstream's inner width: round(expansion * hidden * 2/3), rounded up to a multiple of 256."""
    inner = round(expansion * hidden_size * 2 / 3)
    return -(inner // -256) * 256


class SwiGLU(nn.Module):
    """down(silu(gate) * up) with gate and up fused into one projection (rows [gate | up])."""

    def __init__(self, hidden_size: int, expansion: float):
        super().__init__()
        inner = swiglu_width(hidden_size, expansion)
        self.inner = inner
        self.gate_up_proj = CastedLinear(hidden_size, 2 * inner)
        self.down_proj = CastedLinear(inner, hidden_size)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        """down(silu(gate) * up) (+ residual, added in the down projection's pass where possible)."""
        w = self.gate_up_proj.weight
        if _use_onednn(x, w) and self.gate_up_proj.cast_weight is None:
            # gate and up as two matmuls, so that both come out contiguous (SiLU and its
            # backward run 2-3x slower on the strided halves of one [gate | up] output).
            w_gate, w_up = w[: self.inner], w[self.inner:]
            if _needs_grad(x, w):
                h = F.silu(_onednn(x, w_gate, None, "none")) * _onednn(x, w_up, None, "none")
            else:  # SiLU and the gating product run inside the two matmuls' epilogues
                h = _onednn(x, w_up, _onednn(x, w_gate, None, "swish"), "mul")
            return self.down_proj(h, residual)
        if cpu_fast_path(x):  # two contiguous halves here too (bf16 on CPU)
            w = self.gate_up_proj.cast_weight
            w = w if w is not None else self.gate_up_proj.weight.to(x.dtype)
            gate, up = linear(x, w[: self.inner]), linear(x, w[self.inner:])
        else:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up, residual)


# ---------------------------------------------------------------------------
# Attention and the transformer block
# ---------------------------------------------------------------------------


class Attention(nn.Module):
    """Non-causal multi-head self-attention with a fused qkv projection (rows [q | k | v])."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv_proj = CastedLinear(hidden_size, 3 * hidden_size)
        self.o_proj = CastedLinear(hidden_size, hidden_size)
        # A buffer (moved with the module, never saved), so that no forward creates it: a compiled block
        # must not store tensors on itself.
        self.register_buffer("qk_pair_order", self._pair_order(num_heads, self.head_dim) if self.head_dim % 2 == 0
                             else torch.arange(3 * hidden_size), persistent=False)

    @staticmethod
    def _pair_order(num_heads: int, head_dim: int) -> torch.Tensor:
        """Row order of qkv_proj.weight that interleaves each q/k head as (x0, x_h, x1, x_h+1, ...), h = head_dim/2."""
        half, D = head_dim // 2, num_heads * head_dim
        ambient, cpu = torch.empty(0).device, torch.device("cpu")  # on the CPU: see RotaryEmbedding
        within = torch.arange(head_dim, device=cpu).view(2, half).t().reshape(-1)  # 0, h, 1, h+1, ...
        qk = (torch.arange(2 * num_heads, device=cpu)[:, None] * head_dim + within).reshape(-1)
        return torch.cat((qk, torch.arange(2 * D, 3 * D, device=cpu))).to(ambient)

    def forward(self, x: torch.Tensor, cos_sin: Optional[CosSin],
                residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, S, D = x.shape
        w = self.qkv_proj.cast_weight if self.qkv_proj.cast_weight is not None else self.qkv_proj.weight
        if (cos_sin is not None and cpu_fast_path(x) and x.dtype in (torch.float32, torch.bfloat16)
                and self.head_dim % 2 == 0 and not torch.compiler.is_compiling()):
            # (Eager only. Compiled, the plain path below fuses its roll into the kernels around it; and
            # inductor with a nested compile region gave wrong input gradients for the permuted weight
            # below, torch 2.13.)
            # RoPE as one complex multiplication. Attention only needs the dot products q.k,
            # which do not change when q and k list their head dimensions in the same
            # other order; so q and k are projected with their rows permuted to pair
            # dimension i with i + head_dim/2 side by side, and (x_i, x_i+h) * (cos + i sin)
            # is then exactly upstream's x * cos + rotate_half(x) * sin. One pass, no
            # concatenation of 8-float pieces (the slow part of RoPE on CPU).
            # bf16 on CPU: the projections run in bf16 (fast where the CPU has AVX512_BF16/AMX), but
            # the rotation and the attention itself in float32, as upstream rotates: torch's CPU
            # attention is several times slower in bf16 at these head sizes (its backward ~5x).
            half = self.head_dim // 2
            w = w if w.dtype == x.dtype else w.to(x.dtype)
            qkv = linear(x, w[self.qk_pair_order]).view(B, S, 3, self.num_heads, self.head_dim)
            qkv = qkv.float()  # no-op in float32
            cos, sin = cos_sin  # float32 tables (RotaryEmbedding)
            c, s = cos[:, None, None, :half], sin[:, None, None, half:]  # sin_signed's 2nd half is +sin
            # split/unbind (not indexing): their backward is one concatenation, not a zero-filled
            # buffer per piece.
            qk, v = qkv.split((2, 1), dim=2)
            rot = torch.complex(c, s)
            qk = torch.view_as_real(torch.view_as_complex(qk.unflatten(-1, (half, 2))) * rot).flatten(-2)
            q, k = qk.unbind(2)
            v = v.squeeze(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False)
            return self.o_proj(y.transpose(1, 2).reshape(B, S, D).to(x.dtype), residual)
        qkv = self.qkv_proj(x).view(B, S, 3, self.num_heads, self.head_dim)
        if cos_sin is not None:
            cos, sin = cos_sin
            # Rotate q and k in one go; cos/sin (S, head_dim) -> (S, 1, 1, head_dim).
            qk = apply_rope(qkv[:, :, :2], cos[:, None, None, :], sin[:, None, None, :]).to(qkv.dtype)
            q, k = qk[:, :, 0], qk[:, :, 1]
        else:
            q, k = qkv[:, :, 0], qkv[:, :, 1]
        v = qkv[:, :, 2]
        # SDPA wants (B, heads, S, head_dim); transposes are views, SDPA handles the strides.
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False)
        return self.o_proj(y.transpose(1, 2).reshape(B, S, D), residual)


class Block(nn.Module):
    """Post-norm block: x = norm(x + mix(x)); x = norm(x + mlp(x)).

    The token mixer is attention, or with `mlp_t` a SwiGLU across the sequence
    axis (the block transposes to (B, D, S), so that SwiGLU, its residual and its
    norm all act along the sequence, exactly as upstream).
    """

    def __init__(self, hidden_size: int, num_heads: int, expansion: float, eps: float,
                 mlp_t: bool = False, total_len: int = 0):
        super().__init__()
        self.eps = eps
        self.use_mlp_t = mlp_t
        if mlp_t:
            self.mlp_t = SwiGLU(total_len, expansion)
        else:
            self.self_attn = Attention(hidden_size, num_heads)
        self.mlp = SwiGLU(hidden_size, expansion)
        # Another path for this block (fused kernels, float8: `trm_kaggle.model.fused.block_dispatch`), set by
        # the model where its arch asks for one: returns the block's output, or None for the path below.
        self.dispatch: Optional[Callable[..., Optional[torch.Tensor]]] = None

    def forward(self, x: torch.Tensor, cos_sin: Optional[CosSin]) -> torch.Tensor:
        if self.dispatch is not None:
            y = self.dispatch(self, x, cos_sin)
            if y is not None:
                return y
        if self.use_mlp_t:
            xt = x.transpose(1, 2)
            x = rms_norm(self.mlp_t(xt, residual=xt), self.eps).transpose(1, 2)
        else:
            x = rms_norm(self.self_attn(x, cos_sin, residual=x), self.eps)
        return rms_norm(self.mlp(x, residual=x), self.eps)
