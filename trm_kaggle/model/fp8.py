"""float8 (e4m3) matmuls with row-wise scales, for the network calls that run without autograd (`arch.fp8`).

A matmul y = x @ w.T becomes: each row of x and each row of w (an output unit) scaled so that its largest
magnitude lands on e4m3's largest finite value (448), rounded to e4m3, multiplied with float32 accumulation,
and the product scaled back by the two rows' scales:

    sx = amax(|x[m, :]|) / 448,  sw = amax(|w[n, :]|) / 448,  qx = e4m3(x / sx),  qw = e4m3(w / sw)
    y[m, n] = sx[m] * sw[n] * sum_k qx[m, k] * qw[n, k]

On CUDA (compute capability 8.9+: L4, H100) the sum is `torch._scaled_mm`, which computes exactly this with
the scales applied in its epilogue and a bfloat16 result. Elsewhere it is emulated: the same qx, qw and scales,
the products in float32 (exact: e4m3 has 4 significant bits, so a product has at most 8 and fits float32's
24), the sum in float32 and the scales applied after it, as the kernel does. So the emulation differs from the
GPU only in the order of the float32 sum and the GPU's final bfloat16 rounding; it is no faster than float32 and
is there to check the numerics on a CPU (tests/test_fp8.py bounds the error against the exact product).

Why only without autograd: the H_cycles - 1 cycles before the gradient's (and inference) are 2/3 of a
training step's network calls at the paper's T=3 and all of an evaluation's, and their results pass through no
gradient, so rounding there moves where the recursion starts the differentiated cycle but never the gradient's
arithmetic. Whether that costs accuracy is measured by the GPU suite's Sudoku curve and ARC agreement, not
assumed: `arch.fp8` is off by default.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from trm_kaggle.errors import TRMError
from trm_kaggle.model.layers import CosSin, apply_rope

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # the largest finite e4m3fn value
#: A row of zeros gets this amax (any positive number: its values quantise to 0 whatever the scale).
_TINY = 1e-12
#: torch._scaled_mm wants K and N multiples of 16.
_ALIGN = 16


def quantise_rows(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values (M, K), float32 scales (M, 1)) with x ~ values * scales, each row's largest |x| at 448."""
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True).clamp_min(_TINY) / E4M3_MAX
    return (xf / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def scaled_matmul_emulated(qx: torch.Tensor, sx: torch.Tensor, qw: torch.Tensor, sw: torch.Tensor,
                           out_dtype: torch.dtype) -> torch.Tensor:
    """What `torch._scaled_mm(qx, qw.t(), sx, sw.t(), out_dtype)` computes, in float32 on any device."""
    return ((qx.float() @ qw.float().t()) * sx * sw.t()).to(out_dtype)


def fp8_capable(device: torch.device) -> bool:
    """Whether `torch._scaled_mm` with row-wise scales runs on this CUDA device (compute capability 8.9+)."""
    return device.type == "cuda" and _cuda_capability(device.index) >= (8, 9)


@torch.compiler.assume_constant_result
def _cuda_capability(index: Optional[int]) -> Tuple[int, int]:
    """(major, minor) of a CUDA device (a constant for torch.compile: asked once, outside the graph)."""
    return torch.cuda.get_device_capability(index)


def fp8_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T through e4m3 with row-wise scales (module docstring), in x's dtype; no gradient."""
    *lead, K = x.shape
    N = w.shape[0]
    x2 = x.reshape(-1, K)
    qx, sx = quantise_rows(x2)
    qw, sw = quantise_rows(w)
    if x.device.type == "cuda":
        if not fp8_capable(x.device):
            cap = ".".join(map(str, _cuda_capability(x.device.index)))
            raise TRMError(f"arch.fp8=nograd needs a CUDA GPU of compute capability 8.9 or newer (L4, H100); "
                           f"this one is {cap}: set arch.fp8=off")
        if K % _ALIGN == 0 and N % _ALIGN == 0:
            y = torch._scaled_mm(qx, qw.t(), scale_a=sx, scale_b=sw.t(), out_dtype=torch.bfloat16)
            return y.to(x.dtype).view(*lead, N)
    return scaled_matmul_emulated(qx, sx, qw, sw, x.dtype).view(*lead, N)


class Fp8Ops:
    """The block's sub-layers with every matmul in float8 (`trm_kaggle.model.fused.block_forward`'s op set; no
    autograd: it runs only in calls without it). The element-wise work is the plain path's."""

    @staticmethod
    def qkv(x: torch.Tensor, w: torch.Tensor, cos_sin: Optional[CosSin], S: int,
            heads: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        qkv = fp8_linear(x, w).view(-1, S, 3, heads, x.shape[-1] // heads)
        if cos_sin is None:
            return qkv.unbind(2)
        cos, sin = cos_sin
        q, k = apply_rope(qkv[:, :, :2], cos[:S, None, None, :], sin[:S, None, None, :]).to(qkv.dtype).unbind(2)
        return q, k, qkv[:, :, 2]

    @staticmethod
    def o_res(a: torch.Tensor, w: torch.Tensor, res: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        u = fp8_linear(a, w) + res
        return u, u.float().square().sum(-1)

    @staticmethod
    def mlp(x: torch.Tensor, rs: Optional[torch.Tensor], w_gate_up: torch.Tensor, w_down: torch.Tensor
            ) -> torch.Tensor:
        if rs is not None:
            x = (x.float() * rs[:, None]).to(x.dtype)
        gate, up = fp8_linear(x, w_gate_up).chunk(2, dim=-1)
        return fp8_linear(F.silu(gate) * up, w_down) + x
