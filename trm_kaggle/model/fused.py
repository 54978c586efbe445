"""The transformer block with its element-wise work fused into the matmuls (`arch.kernels`), and the dispatch
of a block to it or to float8 (`arch.fp8`, `trm_kaggle.model.fp8`).

TRM's RMSNorm has no learned weight, so the norm of a row is one number: norm(u) = rstd * u with
rstd = 1 / sqrt(mean(u^2) + eps), and norm(u) @ W.T = rstd * (u @ W.T). A post-norm block

    x1 = norm(x + attn(x));  out = norm(x1 + mlp(x1))

then needs x1 nowhere as a tensor: the O projection's epilogue adds the residual and sums the squares of each
row (u), rstd scales the rows of the gate/up product in its epilogue, where SwiGLU runs too, and the down
projection's epilogue adds the residual rstd * u. RoPE runs in the QKV projection's epilogue, dSwiGLU in the
down projection's backward matmul. Per block call that removes, against the plain path: the RoPE pass over
q and k, the gate/up output (2 x the SwiGLU width per row) written and read back, the first norm's pass (u
read, its output written), and in backward the dSwiGLU pass over the gate/up gradient (the backward adds two
light passes of its own: the sums' gradient folded into du, and rs * x for a weight gradient).

Three sub-layer ops carry it, each an autograd Function whose backward is matmuls plus the fused kernels:
`qkv` (QKV + RoPE), `o_res` (O + residual -> u and its row sums of squares) and `mlp` (the SwiGLU MLP with the
norm folded in, its own residual). Between them, plain torch: attention (SDPA), rstd from the sums, the
block's last norm. Autograd chains the ops, and so the gradient of rstd reaches u through its sums of squares
as it would through the plain norm.

The ops' kernels come from a backend:
* "triton": `trm_kaggle.model.fused_triton`, wrapped as torch custom ops, so that torch.compile keeps each
  as one opaque kernel and fuses the torch code around it (autograd Functions dynamo traces);
* "reference": the same decomposition in plain torch with float32 arithmetic, to check the Functions'
  gradients where Triton is absent, and the kernels against it (the self-check behind `kernels=auto`).

`kernels=torch` (the default) leaves the block's forward exactly as it was (no dispatch at all); `auto` takes
triton on CUDA where Triton imports and its kernels pass a self-check on the device, else torch; `triton`
demands it (CUDA, or TRITON_INTERPRET=1 for Triton's interpreter on CPU tensors, as the tests run it). float64
activations (the GPU suite's exact reference) always take the plain path. Its speed on a GPU is not yet
measured: see docs/training.md.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from typing import Callable, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model.fp8 import Fp8Ops
from trm_kaggle.model.layers import Block, CastedLinear, CosSin, rms_norm

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# ---------------------------------------------------------------------------
# Kernels: the reference (plain torch, float32 arithmetic) and Triton's (custom ops)
# ---------------------------------------------------------------------------


def _heads(y: torch.Tensor, S: int, half: int) -> torch.Tensor:
    """(M, 3D) -> (M / S, S, 3, heads, 2, half): the first and second half of each head's columns."""
    return y.view(y.shape[0] // S, S, 3, -1, 2, half)


class _Reference:
    """Each kernel of `fused_triton` in plain torch: products in float32, one rounding to the output dtype."""

    @staticmethod
    def mm(a, b, out_dtype, pre=None, res=None, res_scale=None, x=None, part=0, post=None):
        acc = a.float() @ b.float()
        if pre is not None:
            acc = acc * pre[:, None]
        if res is not None:
            acc = acc + (res.float() if res_scale is None else res.float() * res_scale[:, None])
        sums = acc.square().sum(1) if part == 1 else (acc * x.float()).sum(1) if part == 2 else None
        if post is not None:
            acc = acc * post[:, None]
        return acc.to(out_dtype), sums

    @staticmethod
    def swiglu(x, w, rs, save):
        gu = x.float() @ w.float().t()
        if rs is not None:
            gu = gu * rs[:, None]
        gate, up = gu.chunk(2, dim=1)
        return (F.silu(gate) * up).to(x.dtype), (gu.to(x.dtype) if save else x.new_empty(0))

    @staticmethod
    def dswiglu(dv, wd, gu):
        dh = dv.float() @ wd.float()
        gate, up = gu.float().chunk(2, dim=1)
        s = torch.sigmoid(gate)
        silu = gate * s
        dgu = torch.cat((dh * up * (s * (1 + gate * (1 - s))), dh * silu), dim=1)
        return dgu.to(dv.dtype), (silu * up).to(dv.dtype)

    @staticmethod
    def qkv_rope(x, w, cos, sin):
        S, half = cos.shape
        y = _heads(x.float() @ w.float().t(), S, half)
        a, b = y[:, :, :2].unbind(-2)
        c, s = cos[:, None, None, :], sin[:, None, None, :]
        qk = torch.stack((a * c - b * s, b * c + a * s), dim=-2)
        return torch.cat((qk, y[:, :, 2:]), dim=2).reshape(x.shape[0], -1).to(x.dtype)

    @staticmethod
    def rope_back(g, cos, sin):
        S, half = cos.shape
        y = _heads(g.float(), S, half)
        a, b = y[:, :, :2].unbind(-2)
        c, s = cos[:, None, None, :], sin[:, None, None, :]
        qk = torch.stack((a * c + b * s, b * c - a * s), dim=-2)
        return torch.cat((qk, y[:, :, 2:]), dim=2).reshape(g.shape).to(g.dtype)


@functools.lru_cache(maxsize=None)
def _triton_module():
    from trm_kaggle.model import fused_triton  # imports Triton: only when a fused path runs

    return fused_triton


@torch.library.custom_op("trm_kaggle::fused_mm", mutates_args=())
def _op_mm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, pre: Optional[torch.Tensor],
           res: Optional[torch.Tensor], res_scale: Optional[torch.Tensor], x: Optional[torch.Tensor], part: int,
           post: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    c, sums = _triton_module().mm(a, b, out_dtype, pre, res, res_scale, x, part, post)
    return c, (sums if sums is not None else a.new_empty(0, dtype=torch.float32))


@_op_mm.register_fake
def _(a, b, out_dtype, pre, res, res_scale, x, part, post):
    return a.new_empty(a.shape[0], b.shape[1], dtype=out_dtype), a.new_empty(a.shape[0] if part else 0,
                                                                             dtype=torch.float32)


@torch.library.custom_op("trm_kaggle::fused_swiglu", mutates_args=())
def _op_swiglu(x: torch.Tensor, w: torch.Tensor, rs: Optional[torch.Tensor],
               save: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return _triton_module().swiglu(x, w, rs, save)


@_op_swiglu.register_fake
def _(x, w, rs, save):
    inner = w.shape[0] // 2
    return x.new_empty(x.shape[0], inner), x.new_empty((x.shape[0], 2 * inner) if save else (0,))


@torch.library.custom_op("trm_kaggle::fused_dswiglu", mutates_args=())
def _op_dswiglu(dv: torch.Tensor, wd: torch.Tensor, gu: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return _triton_module().dswiglu(dv, wd, gu)


@_op_dswiglu.register_fake
def _(dv, wd, gu):
    return dv.new_empty(dv.shape[0], 2 * wd.shape[1]), dv.new_empty(dv.shape[0], wd.shape[1])


@torch.library.custom_op("trm_kaggle::fused_qkv_rope", mutates_args=())
def _op_qkv_rope(x: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _triton_module().qkv_rope(x, w, cos, sin)


@_op_qkv_rope.register_fake
def _(x, w, cos, sin):
    return x.new_empty(x.shape[0], w.shape[0])


@torch.library.custom_op("trm_kaggle::fused_rope_back", mutates_args=())
def _op_rope_back(g: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _triton_module().rope_back(g, cos, sin)


@_op_rope_back.register_fake
def _(g, cos, sin):
    return torch.empty_like(g)


class _Triton:
    """The kernels of `fused_triton` through their custom ops (the reference's signatures)."""

    @staticmethod
    def mm(a, b, out_dtype, pre=None, res=None, res_scale=None, x=None, part=0, post=None):
        c, sums = _op_mm(a, b, out_dtype, pre, res, res_scale, x, part, post)
        return c, (sums if part else None)

    swiglu = staticmethod(_op_swiglu)
    dswiglu = staticmethod(_op_dswiglu)
    qkv_rope = staticmethod(_op_qkv_rope)
    rope_back = staticmethod(_op_rope_back)


BACKENDS = {"reference": _Reference, "triton": _Triton}


# ---------------------------------------------------------------------------
# The sub-layers as autograd Functions
# ---------------------------------------------------------------------------


class _QKVRope(torch.autograd.Function):
    """qkv = RoPE(x @ w.T) on the q and k columns; backward: the rotation transposed, then two matmuls."""

    @staticmethod
    def forward(ctx, x, w, cos, sin, backend: str):
        ctx.backend = backend
        ctx.save_for_backward(x, w, cos, sin)
        return BACKENDS[backend].qkv_rope(x, w, cos, sin)

    @staticmethod
    def backward(ctx, g):
        x, w, cos, sin = ctx.saved_tensors
        dacc = BACKENDS[ctx.backend].rope_back(g.contiguous(), cos, sin)
        dx = dacc @ w if ctx.needs_input_grad[0] else None
        dw = dacc.t() @ x if ctx.needs_input_grad[1] else None
        return dx, dw, None, None, None


class _OResidual(torch.autograd.Function):
    """(u, ss) = (a @ w.T + res, row sums of u^2 in float32); backward: d(ss) folds into du as 2 u d(ss)."""

    @staticmethod
    def forward(ctx, a, w, res, backend: str):
        u, ss = BACKENDS[backend].mm(a, w.t(), a.dtype, res=res, part=1)
        ctx.save_for_backward(a, w, u)
        return u, ss

    @staticmethod
    def backward(ctx, du, dss):
        a, w, u = ctx.saved_tensors
        du = torch.addcmul(du.float(), u.float(), dss[:, None], value=2.0).to(u.dtype)
        da = du @ w if ctx.needs_input_grad[0] else None
        dw = du.t() @ a if ctx.needs_input_grad[1] else None
        return da, dw, du, None


class _MLP(torch.autograd.Function):
    """v = down(silu(g) * u) + rs * x with [g | u] = rs * (x @ W_gate_up.T) (rs: the rows' norm factor, or None).

    Backward, with T = dgu @ W_gate_up + dv: dx = rs * T, d(rs) = row sums of T * x (one matmul with both in its
    epilogue), W_gate_up's gradient dgu.T @ (rs * x), W_down's dv.T @ h, h recomputed by the dSwiGLU kernel
    from the saved [g | u] (so h is never kept)."""

    @staticmethod
    def forward(ctx, x, rs, w_gate_up, w_down, backend: str):
        k = BACKENDS[backend]
        h, gu = k.swiglu(x, w_gate_up, rs, True)
        v, _ = k.mm(h, w_down.t(), x.dtype, res=x, res_scale=rs)
        ctx.backend = backend
        ctx.save_for_backward(x, rs, w_gate_up, w_down, gu)
        return v

    @staticmethod
    def backward(ctx, dv):
        x, rs, w_gate_up, w_down, gu = ctx.saved_tensors
        k = BACKENDS[ctx.backend]
        dv = dv.contiguous()
        dgu, h = k.dswiglu(dv, w_down, gu)
        dw_down = dv.t() @ h
        xs = x if rs is None else (x.float() * rs[:, None]).to(x.dtype)
        dw_gate_up = dgu.t() @ xs
        if rs is None:
            dx, drs = k.mm(dgu, w_gate_up, x.dtype, res=dv)[0], None
        else:
            dx, drs = k.mm(dgu, w_gate_up, x.dtype, res=dv, x=x, part=2, post=rs)
        return dx, drs, dw_gate_up, dw_down, None


def _needs_grad(*tensors: Optional[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class FusedOps:
    """The sub-layer ops of `block_forward` on one backend's kernels (no autograd Function where no gradient
    is wanted: the no-grad recursion keeps nothing for backward)."""

    def __init__(self, backend: str):
        self.backend = backend
        self.k = BACKENDS[backend]

    def qkv(self, x: torch.Tensor, w: torch.Tensor, cos_sin: Optional[CosSin], S: int,
            heads: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if cos_sin is None:
            qkv = F.linear(x, w)
        else:
            half = x.shape[-1] // heads // 2
            cos, sin = cos_sin[0][:S, :half].contiguous(), cos_sin[1][:S, half:].contiguous()  # sin_signed: +sin
            if _needs_grad(x, w):
                qkv = _QKVRope.apply(x, w, cos, sin, self.backend)
            else:
                qkv = self.k.qkv_rope(x, w, cos, sin)
        return qkv.view(-1, S, 3, heads, x.shape[-1] // heads).unbind(2)

    def o_res(self, a: torch.Tensor, w: torch.Tensor, res: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if _needs_grad(a, w, res):
            return _OResidual.apply(a, w, res, self.backend)
        return self.k.mm(a, w.t(), a.dtype, res=res, part=1)

    def mlp(self, x: torch.Tensor, rs: Optional[torch.Tensor], w_gate_up: torch.Tensor,
            w_down: torch.Tensor) -> torch.Tensor:
        if _needs_grad(x, rs, w_gate_up, w_down):
            return _MLP.apply(x, rs, w_gate_up, w_down, self.backend)
        h, _ = self.k.swiglu(x, w_gate_up, rs, False)
        return self.k.mm(h, w_down.t(), x.dtype, res=x, res_scale=rs)[0]


OPS = {"reference": FusedOps("reference"), "triton": FusedOps("triton"), "fp8": Fp8Ops()}


# ---------------------------------------------------------------------------
# The block
# ---------------------------------------------------------------------------


def _weight(linear: CastedLinear, dtype: torch.dtype) -> torch.Tensor:
    """The layer's weight in the activation dtype (the pass's cast copy where the model made one)."""
    w = linear.cast_weight
    if w is None:
        w = linear.weight if linear.weight.dtype == dtype else linear.weight.to(dtype)
    return w


def block_forward(block: Block, x: torch.Tensor, cos_sin: Optional[CosSin], ops) -> torch.Tensor:
    """`Block.forward` (post-norm: x = norm(x + mix(x)); norm(x + mlp(x))) through an op set (`OPS`): the same
    function of the same weights, the first norm folded into the MLP as a row scale."""
    B, S, D = x.shape
    dtype = x.dtype
    if block.use_mlp_t:  # the token mixer is a SwiGLU along the sequence: rows are (batch, channel)
        m = block.mlp_t
        xt = x.transpose(1, 2).reshape(B * D, S)
        v = ops.mlp(xt, None, _weight(m.gate_up_proj, dtype), _weight(m.down_proj, dtype))
        x = rms_norm(v.view(B, D, S), block.eps).transpose(1, 2).reshape(B * S, D)
        rs = None
    else:
        attn = block.self_attn
        x2 = x.reshape(B * S, D)
        q, k, v = ops.qkv(x2, _weight(attn.qkv_proj, dtype), cos_sin, S, attn.num_heads)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=False)
        x, ss = ops.o_res(y.transpose(1, 2).reshape(B * S, D), _weight(attn.o_proj, dtype), x2)
        rs = torch.rsqrt(ss / D + block.eps)  # the first norm's factor: x1 = rs * x, never formed
    m = block.mlp
    v = ops.mlp(x, rs, _weight(m.gate_up_proj, dtype), _weight(m.down_proj, dtype))
    return rms_norm(v, block.eps).view(B, S, D)


# ---------------------------------------------------------------------------
# Which path a block takes
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def self_check(device_type: str, dtypes: Optional[Tuple[torch.dtype, ...]] = None) -> Optional[str]:
    """None when every Triton kernel matches the reference on small random inputs on this device (in `dtypes`;
    by default float32 and, on CUDA, bfloat16), else what failed."""
    try:
        device = torch.device(device_type)
        g = torch.Generator().manual_seed(0)
        M, S, D, I, half = 40, 20, 64, 96, 16  # noqa: E741  (2 rows of 20 positions, 2 heads of 32)
        if dtypes is None:
            dtypes = (torch.float32, torch.bfloat16) if device_type == "cuda" else (torch.float32,)
        for dtype in dtypes:
            tol = 1e-4 if dtype == torch.float32 else 2e-2

            def r(*shape, scale=1.0, dt=dtype):
                return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dt)

            x, dv, w_o = r(M, D), r(M, D), r(D, D, scale=D**-0.5)
            wgu, wd, wqkv = r(2 * I, D, scale=D**-0.5), r(D, I, scale=I**-0.5), r(3 * D, D, scale=D**-0.5)
            rs = r(M, dt=torch.float32).abs() + 0.5
            cos, sin = r(S, half, dt=torch.float32), r(S, half, dt=torch.float32)
            gu = _Reference.swiglu(x, wgu, rs, True)[1]
            cases = {
                "mm": lambda k: k.mm(x, w_o.t(), dtype, pre=rs, res=dv, res_scale=rs, part=1),
                "mm rowdot": lambda k: k.mm(gu, wgu, dtype, res=dv, x=x, part=2, post=rs),
                "swiglu": lambda k: k.swiglu(x, wgu, rs, True),
                "dswiglu": lambda k: k.dswiglu(dv, wd, gu),
                "qkv_rope": lambda k: k.qkv_rope(x, wqkv, cos, sin),
                "rope_back": lambda k: k.rope_back(r(M, 3 * D), cos, sin),
            }
            for name, case in cases.items():
                state = g.get_state()
                want = case(_Reference)
                g.set_state(state)
                got = case(_Triton)
                for a, b in zip(_as_tuple(got), _as_tuple(want)):
                    err = (a.float() - b.float()).abs().max().item() / max(b.float().abs().max().item(), 1e-6)
                    if not err <= tol:
                        return f"{name} in {dtype}: relative error {err:.2e} above {tol:g}"
    except Exception as e:  # a Triton that does not compile here, a driver it does not know
        return f"{type(e).__name__}: {e}"
    return None


def _as_tuple(v) -> tuple:
    return tuple(t for t in (v if isinstance(v, tuple) else (v,)) if t is not None and t.numel())


@functools.lru_cache(maxsize=None)
def _auto_checked(device_type: str) -> bool:
    if device_type != "cuda" or not triton_installed():
        return False
    why = self_check(device_type)
    if why is not None:
        warnings.warn(f"arch.kernels=auto: the fused Triton kernels failed their self-check on this GPU ({why}); "
                      f"the blocks run the torch path")
    return why is None


@torch.compiler.assume_constant_result
def _use_triton(kernels: str, device_type: str) -> bool:
    """Whether `kernels` runs the Triton kernels on this device type (a constant for torch.compile: decided once,
    outside the graph)."""
    if kernels == "auto":
        return _auto_checked(device_type)
    if not triton_installed():
        raise TRMError("arch.kernels=triton needs Triton (pip install triton; Linux, CUDA): set arch.kernels=auto "
                       "or torch")
    if device_type != "cuda" and not (device_type == "cpu" and _interpreting()):
        raise TRMError(f"arch.kernels=triton runs on CUDA GPUs, not on {device_type} (TRITON_INTERPRET=1 runs "
                       f"its kernels in Triton's interpreter on a CPU, slowly: for tests): set arch.kernels=auto "
                       f"or torch")
    return True


def dispatch(block: Block, x: torch.Tensor, cos_sin: Optional[CosSin], *, kernels: str,
             fp8: str) -> Optional[torch.Tensor]:
    """A block's output on the path `kernels` and `fp8` choose for this call, or None for the plain path.
    `kernels` may also be "reference" (the fused decomposition in plain torch: for tests)."""
    if x.dtype not in _DTYPES:  # float64: the exact reference computes the plain way
        return None
    if fp8 == "nograd" and not torch.is_grad_enabled():
        return block_forward(block, x, cos_sin, OPS["fp8"])
    if kernels == "reference":
        return block_forward(block, x, cos_sin, OPS["reference"])
    if kernels == "torch" or not _use_triton(kernels, x.device.type):
        return None
    return block_forward(block, x, cos_sin, OPS["triton"])


def block_dispatch(arch: ArchConfig) -> Optional[Callable]:
    """What a Block calls first (`Block.dispatch`) under this arch; None (nothing at all) for the defaults."""
    if arch.kernels == "torch" and arch.fp8 == "off":
        return None
    return functools.partial(dispatch, kernels=arch.kernels, fp8=arch.fp8)


def fused_variant(arch: Union[dict, ArchConfig], *, fp8: bool = True) -> dict:
    """The arch fields (a dict, as benchmarks/bench_train_cpu.py's `Ours` takes them) of the fused variant of
    `arch`: kernels=triton, and fp8=nograd unless `fp8` is False. For side-by-side rows in the GPU suite."""
    fields = arch.model_dump() if isinstance(arch, ArchConfig) else dict(arch)
    return {**fields, "kernels": "triton", "fp8": "nograd" if fp8 else "off"}
