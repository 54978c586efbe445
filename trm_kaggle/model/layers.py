"""Building blocks of the TRM network: init, norm, rope, attention, SwiGLU, blocks.

Parameters are always float32. Activations run in the model's compute dtype (see
`trm_kaggle.model.dtype`: usually bfloat16 on CUDA, float32 or bfloat16 on CPU); a
layer casts its float32 weight to the activation dtype only when the two differ, so
the float32 path has no casts.
Module and weight names follow upstream so its checkpoints map one to one
(see `trm_kaggle.model.upstream`).

This file is the reference arithmetic, the path CUDA and every other device take. On the CPU
(`cpu_fast_path`) the norm, the matmuls, SwiGLU and attention call into `trm_kaggle.model.cpu_kernels`
instead: faster paths with the same arithmetic up to float32 rounding order (oneDNN matmuls with fused
epilogues, RoPE as a complex multiplication, RMSNorm with a hand-written backward).
"""

from __future__ import annotations

import math
import sys
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from trm_kaggle.config import number_argument, whole_argument
from trm_kaggle.model import cpu_kernels

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
        if tensor.is_meta:  # no values to draw (the memory estimate's models); older torch draws import dynamo
            return tensor
        if std == 0:
            return tensor.zero_()
        phi = lambda x: math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # noqa: E731
        cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
        z = cdf(upper) - cdf(lower)
        if not z > 0:  # lower >= upper (or NaN, or both far out): the loop below would redraw forever
            raise ValueError(f"lower={lower!r}, upper={upper!r}: expected lower < upper, a range a normal draw can "
                             "fall in")
        var = 1 + (lower * phi(lower) - upper * phi(upper)) / z - ((phi(lower) - phi(upper)) / z) ** 2
        scale = std / math.sqrt(var)
        # Rejection sampling: draw N(0, 1), redraw every value outside [lower, upper] until none is. Written
        # out rather than nn.init.trunc_normal_, whose algorithm (and so its draws for a seed) changed in torch
        # 2.12: a seed gives these weights on every torch the project supports.
        drawn = torch.empty_like(tensor).normal_()
        while True:
            outside = (drawn < lower) | (drawn > upper)
            if not outside.any():
                break
            drawn = torch.where(outside, torch.empty_like(drawn).normal_(), drawn)
        return tensor.copy_(drawn).mul_(scale)


# ---------------------------------------------------------------------------
# Norm, rotary position encoding
# ---------------------------------------------------------------------------


def cpu_fast_path(x: torch.Tensor) -> bool:
    """Whether x takes the CPU's faster paths (`trm_kaggle.model.cpu_kernels`). Every other device runs the
    reference path, the one CUDA runs; tests switch this off to check that the two compute the same."""
    return x.device.type == "cpu"


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a learned weight over the last axis, statistics in float32."""
    if cpu_fast_path(x) and (y := cpu_kernels.rms_norm(x, eps)) is not None:
        return y
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
        # named where given: base 0, -1 or NaN built NaN tables, head_dim 2.5 a table of another width
        head_dim = whole_argument("head_dim", head_dim, 2, 1 << 20)
        max_positions = whole_argument("max_positions", max_positions, 1, 1 << 24)
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim}: expected an even number (dimensions rotate in pairs)")
        # ArchConfig.rope_theta's bound: a base under 1 turns faster than one radian per position, and one under
        # float32's smallest number (1e-308) became 0 in the float32 arithmetic below: NaN tables again
        number_argument("base", base, 1.0, sys.float_info.max)
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


def linear(x: torch.Tensor, w: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x @ w.T (+ residual) without bias (on the CPU through oneDNN where it pays)."""
    if cpu_fast_path(x):
        return cpu_kernels.linear(x, w, residual)
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
    """down(silu(gate) * up) with gate and up fused into one projection (rows [gate | up]).

    With `norm_eps` set (`arch.swiglu_norm`), "Speed is Confidence"'s variant for Muon (arXiv 2601.19085):
    silu(gate) * up is sigmoid(gate) * (gate * up), and the product gate * up carries a scale that grows with both
    projections; Muon's updates are all of one size, so that scale is taken out by an RMS norm over the hidden
    width before the down projection: down(sigmoid(gate) * rms_norm(gate * up)).
    """

    def __init__(self, hidden_size: int, expansion: float, norm_eps: Optional[float] = None):
        super().__init__()
        inner = swiglu_width(hidden_size, expansion)
        self.inner = inner
        self.norm_eps = norm_eps
        self.gate_up_proj = CastedLinear(hidden_size, 2 * inner)
        self.down_proj = CastedLinear(inner, hidden_size)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        """down(silu(gate) * up) (+ residual, added in the down projection's pass where possible)."""
        if self.norm_eps is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(torch.sigmoid(gate) * rms_norm(gate * up, self.norm_eps), residual)
        if cpu_fast_path(x):
            return cpu_kernels.swiglu(self, x, residual)
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
        # The CPU path's row order of qkv_proj (`cpu_kernels.attention`). A buffer (moved with the module,
        # never saved), so that no forward creates it: a compiled block must not store tensors on itself.
        self.register_buffer("qk_pair_order", cpu_kernels.qk_pair_order(num_heads, self.head_dim)
                             if self.head_dim % 2 == 0 else torch.arange(3 * hidden_size), persistent=False)

    def forward(self, x: torch.Tensor, cos_sin: Optional[CosSin],
                residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        if cpu_fast_path(x) and (y := cpu_kernels.attention(self, x, cos_sin, residual)) is not None:
            return y
        B, S, D = x.shape
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
                 mlp_t: bool = False, total_len: int = 0, swiglu_norm: bool = False):
        super().__init__()
        self.eps = eps
        self.use_mlp_t = mlp_t
        norm_eps = eps if swiglu_norm else None
        if mlp_t:
            self.mlp_t = SwiGLU(total_len, expansion, norm_eps)
        else:
            self.self_attn = Attention(hidden_size, num_heads)
        self.mlp = SwiGLU(hidden_size, expansion, norm_eps)
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
