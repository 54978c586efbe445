"""Triton kernels of the fused block (`trm_kaggle.model.fused`): matmuls that do the block's element-wise work
in their epilogues, so that the tensor between them never makes a round trip through memory.

Every kernel computes C = A @ B in float32 tiles (A: M x K rows of tokens, B: K x N, any strides) and then, before
the one store:
* `mm`: a row scale, a residual (itself row-scaled), a row sum of squares or a row dot product with another
  tensor, a second row scale: the O projection (+ residual, sum of squares for the next norm), the down
  projection (+ the normalised residual) and the input gradient of the gate/up projection;
* `swiglu`: two accumulators (the gate and the up rows of one weight) -> silu(gate) * up;
* `dswiglu`: dh = dv @ W_down, then dSwiGLU against the saved gate/up (and h recomputed for W_down's gradient);
* `qkv_rope`: two accumulators (the first and second half of each head's columns) -> RoPE on q and k;
* `rope_back`: the transposed rotation of the q and k gradients (element-wise, no matmul).

Importing this module imports Triton; `fused` imports it only when a fused path runs. Under TRITON_INTERPRET=1
(set before the import) the kernels run in Triton's interpreter on CPU tensors: that is how the tests run them
without a GPU. The interpreter multiplies bfloat16 operands wrongly (it reads their bits as integers), so there
the tiles are cast to float32 before the product: the same numbers, since a product of two bf16 values is exact
in float32 and the GPU's bf16 tensor-core product accumulates in float32 too.

Tile sizes are fixed per kernel (no autotuning): bf16 tiles of 128 x 128 x 64 (two accumulators: 128 x 64) are
the usual good choice on sm80-sm90; float32 operands use IEEE products (never TF32), as torch's matmul does
by default, and smaller K tiles.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from triton.runtime.interpreter import InterpretedFunction


# ---------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------


@triton.jit
def _tile_ids(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's (row tile, column tile), in groups of GROUP_M row tiles so that neighbouring programs
    share B's tiles in L2."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    return pid_m, pid_n


@triton.jit
def _dot(a, b, acc, UPCAST: tl.constexpr, PREC: tl.constexpr):
    if UPCAST:  # the interpreter's bf16 product is wrong (see the module's docstring)
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PREC)


@triton.jit
def _matmul_tile(a_ptr, b_ptr, rm, rn, M, N, K, s_am, s_ak, s_bk, s_bn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr):
    """A[rm, :] @ B[:, rn] in float32 (rm, rn: row and column indices, those outside M, N read as zeros)."""
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm.to(tl.int64)[:, None] * s_am + rk[None, :] * s_ak
    b_ptrs = b_ptr + rk[:, None] * s_bk + rn.to(tl.int64)[None, :] * s_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = _dot(a, b, acc, UPCAST, PREC)
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk
    return acc


@triton.jit
def _matmul_tile2(a_ptr, b_ptr, rm, rn1, rn2, M, N, K, s_am, s_ak, s_bk, s_bn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr):
    """A[rm, :] @ B[:, rn1] and A[rm, :] @ B[:, rn2] from one pass over A (columns at or past N read as zeros)."""
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm.to(tl.int64)[:, None] * s_am + rk[None, :] * s_ak
    b1_ptrs = b_ptr + rk[:, None] * s_bk + rn1.to(tl.int64)[None, :] * s_bn
    b2_ptrs = b_ptr + rk[:, None] * s_bk + rn2.to(tl.int64)[None, :] * s_bn
    acc1 = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b1 = tl.load(b1_ptrs, mask=(kk[:, None] < K) & (rn1[None, :] < N), other=0.0)
        b2 = tl.load(b2_ptrs, mask=(kk[:, None] < K) & (rn2[None, :] < N), other=0.0)
        acc1 = _dot(a, b1, acc1, UPCAST, PREC)
        acc2 = _dot(a, b2, acc2, UPCAST, PREC)
        a_ptrs += BK * s_ak
        b1_ptrs += BK * s_bk
        b2_ptrs += BK * s_bk
    return acc1, acc2


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def _mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm,
               pre_ptr, res_ptr, s_rm, res_scale_ptr, x_ptr, s_xm, part_ptr, post_ptr,
               HAS_PRE: tl.constexpr, HAS_RES: tl.constexpr, HAS_RES_SCALE: tl.constexpr, PART: tl.constexpr,
               HAS_POST: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP_M: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr):
    """C = post * (pre * (A @ B) + res_scale * res); PART 1: part[:, tile] = row sums of the bracket's
    squares, PART 2: row sums of the bracket times x (partial sums per column tile, summed by the caller)."""
    pid_m, pid_n = _tile_ids(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = _matmul_tile(a_ptr, b_ptr, rm, rn, M, N, K, s_am, s_ak, s_bk, s_bn, BM, BN, BK, UPCAST, PREC)
    row_ok = rm < M
    mask = row_ok[:, None] & (rn[None, :] < N)
    rows = rm.to(tl.int64)[:, None]
    if HAS_PRE:
        acc = acc * tl.load(pre_ptr + rm, mask=row_ok, other=0.0)[:, None]
    if HAS_RES:
        res = tl.load(res_ptr + rows * s_rm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_RES_SCALE:
            res = res * tl.load(res_scale_ptr + rm, mask=row_ok, other=0.0)[:, None]
        acc = acc + res
    if PART == 1:
        tl.store(part_ptr + rm * tl.cdiv(N, BN) + pid_n, tl.sum(acc * acc, 1), mask=row_ok)
    if PART == 2:
        x = tl.load(x_ptr + rows * s_xm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(part_ptr + rm * tl.cdiv(N, BN) + pid_n, tl.sum(acc * x, 1), mask=row_ok)
    if HAS_POST:
        acc = acc * tl.load(post_ptr + rm, mask=row_ok, other=0.0)[:, None]
    tl.store(c_ptr + rows * s_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_kernel(x_ptr, w_ptr, h_ptr, gu_ptr, rs_ptr, M, I, K, s_xm, s_wn,
                   HAS_RS: tl.constexpr, SAVE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr):
    """h = silu(g) * u with [g | u] = rs * (x @ W.T), W's rows [gate | up] (I each); SAVE also stores [g | u]."""
    pid_m, pid_n = _tile_ids(M, I, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    # B = W.T: B[k, n] = W[n, k]; the up rows are columns I.. of B (masked by the gate's bound: rn < I)
    g, u = _matmul_tile2(x_ptr, w_ptr, rm, rn, rn + I, M, 2 * I, K, s_xm, 1, 1, s_wn, BM, BN, BK, UPCAST, PREC)
    row_ok = rm < M
    mask = row_ok[:, None] & (rn[None, :] < I)
    if HAS_RS:
        rs = tl.load(rs_ptr + rm, mask=row_ok, other=0.0)[:, None]
        g = g * rs
        u = u * rs
    h = g * tl.sigmoid(g) * u
    rows = rm.to(tl.int64)[:, None]
    tl.store(h_ptr + rows * I + rn[None, :], h.to(h_ptr.dtype.element_ty), mask=mask)
    if SAVE:
        tl.store(gu_ptr + rows * (2 * I) + rn[None, :], g.to(gu_ptr.dtype.element_ty), mask=mask)
        tl.store(gu_ptr + rows * (2 * I) + I + rn[None, :], u.to(gu_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dswiglu_kernel(dv_ptr, wd_ptr, gu_ptr, dgu_ptr, h_ptr, M, I, D, s_dm, s_wd,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                    UPCAST: tl.constexpr, PREC: tl.constexpr):
    """dh = dv @ W_down (W_down: D x I), then [dg | du] = [dh * u * silu'(g) | dh * silu(g)] and h = silu(g) * u
    from the saved [g | u]."""
    pid_m, pid_n = _tile_ids(M, I, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    dh = _matmul_tile(dv_ptr, wd_ptr, rm, rn, M, I, D, s_dm, 1, s_wd, 1, BM, BN, BK, UPCAST, PREC)
    mask = (rm < M)[:, None] & (rn[None, :] < I)
    rows = rm.to(tl.int64)[:, None]
    g = tl.load(gu_ptr + rows * (2 * I) + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + rows * (2 * I) + I + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid(g)
    silu = g * s
    dg = dh * u * (s * (1.0 + g * (1.0 - s)))
    tl.store(dgu_ptr + rows * (2 * I) + rn[None, :], dg.to(dgu_ptr.dtype.element_ty), mask=mask)
    tl.store(dgu_ptr + rows * (2 * I) + I + rn[None, :], (dh * silu).to(dgu_ptr.dtype.element_ty), mask=mask)
    tl.store(h_ptr + rows * I + rn[None, :], (silu * u).to(h_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _qkv_rope_kernel(x_ptr, w_ptr, out_ptr, cos_ptr, sin_ptr, M, D, S, HALF, s_xm, s_wn,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                     UPCAST: tl.constexpr, PREC: tl.constexpr):
    """out = x @ W.T (W: 3D x D, rows [q | k | v], heads of 2 * HALF columns) with q and k rotated:
    (a, b) -> (a cos - b sin, b cos + a sin) for column pairs (i, i + HALF) of a head, at the row's position
    (row % S). Tiles run over the 3D / 2 pairs: pair j is column (j // HALF) * 2 HALF + j % HALF and HALF later."""
    pairs = 3 * D // 2
    pid_m, pid_n = _tile_ids(M, pairs, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rj = pid_n * BN + tl.arange(0, BN)
    r = rj % HALF
    c1 = (rj // HALF) * (2 * HALF) + r
    c1 = tl.where(rj < pairs, c1, 3 * D)  # past the last pair: out of bounds, read as zeros
    a, b = _matmul_tile2(x_ptr, w_ptr, rm, c1, c1 + HALF, M, 3 * D, D, s_xm, 1, 1, s_wn, BM, BN, BK, UPCAST, PREC)
    row_ok = rm < M
    mask = row_ok[:, None] & (rj[None, :] < pairs)
    pos = (rm % S).to(tl.int64)[:, None]
    rot = mask & (c1[None, :] < 2 * D)  # q and k rotate, v does not
    cos = tl.load(cos_ptr + pos * HALF + r[None, :], mask=rot, other=1.0)
    sin = tl.load(sin_ptr + pos * HALF + r[None, :], mask=rot, other=0.0)
    rows = rm.to(tl.int64)[:, None]
    tl.store(out_ptr + rows * (3 * D) + c1[None, :], (a * cos - b * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + rows * (3 * D) + c1[None, :] + HALF, (b * cos + a * sin).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _rope_back_kernel(g_ptr, out_ptr, cos_ptr, sin_ptr, M, D, S, HALF, BM: tl.constexpr, BN: tl.constexpr):
    """The gradient through `_qkv_rope_kernel`'s rotation: (da, db) -> (da cos + db sin, db cos - da sin) on the
    q and k pairs, v's columns copied."""
    pairs = 3 * D // 2
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rj = tl.program_id(1) * BN + tl.arange(0, BN)
    r = rj % HALF
    c1 = (rj // HALF) * (2 * HALF) + r
    mask = (rm < M)[:, None] & (rj[None, :] < pairs)
    rot = mask & (c1[None, :] < 2 * D)
    pos = (rm % S).to(tl.int64)[:, None]
    cos = tl.load(cos_ptr + pos * HALF + r[None, :], mask=rot, other=1.0)
    sin = tl.load(sin_ptr + pos * HALF + r[None, :], mask=rot, other=0.0)
    rows = rm.to(tl.int64)[:, None] * (3 * D)
    da = tl.load(g_ptr + rows + c1[None, :], mask=mask, other=0.0).to(tl.float32)
    db = tl.load(g_ptr + rows + c1[None, :] + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows + c1[None, :], (da * cos + db * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + rows + c1[None, :] + HALF, (db * cos - da * sin).to(out_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------
# Launchers (plain functions of tensors; `fused` wraps them as custom ops)
# ---------------------------------------------------------------------------

INTERPRETED = isinstance(_mm_kernel, InterpretedFunction)
GROUP_M = 8


def _pow2(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(n, 1))))


def _tiles(M: int, N: int, K: int, dtype: torch.dtype, dual: bool,
           device: torch.device) -> Tuple[int, int, int, dict]:
    """(BM, BN, BK, launch options) of a matmul: small tiles in the interpreter (its time grows with the number
    of programs and their size alike), fixed GPU tiles elsewhere: 128 x 128 (two accumulators: 128 x 64) with
    K tiles of 64 bf16 elements on sm90+ (3 stages of 32 KiB: 96 KiB of the 228 KiB of shared memory), of 32
    elsewhere (48 KiB: a block gets at most 99 KiB on an L4, 163 on an A100, 64 on a T4); float32 tiles half as
    deep."""
    if INTERPRETED:
        return _pow2(M, 16, 64), _pow2(N, 16, 64), _pow2(K, 16, 64), {}
    hopper = torch.cuda.get_device_capability(device) >= (9, 0)
    bk = (64 if hopper else 32) // (2 if dtype == torch.float32 else 1)
    bn = 64 if dual else 128
    return _pow2(M, 16, 128), _pow2(N, 16, bn), _pow2(K, 16, bk), {"num_warps": 8, "num_stages": 3}


def _rows(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """t with unit column stride (what the kernels assume of everything but a matmul's A and B)."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def _common(dtype: torch.dtype) -> dict:
    return {"GROUP_M": GROUP_M, "UPCAST": INTERPRETED, "PREC": "ieee" if dtype == torch.float32 else "tf32"}


def mm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, pre: Optional[torch.Tensor] = None,
       res: Optional[torch.Tensor] = None, res_scale: Optional[torch.Tensor] = None,
       x: Optional[torch.Tensor] = None, part: int = 0,
       post: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(C, row sums or None) of `_mm_kernel`; a: (M, K), b: (K, N) with any strides; res and x (M, N) contiguous;
    pre, res_scale, post: float32 (M,)."""
    M, K = a.shape
    N = b.shape[1]
    res, x = _rows(res), _rows(x)
    pre, res_scale, post = (t if t is None else t.contiguous() for t in (pre, res_scale, post))
    c = torch.empty(M, N, device=a.device, dtype=out_dtype)
    BM, BN, BK, opts = _tiles(M, N, K, a.dtype, False, a.device)
    tiles_n = triton.cdiv(N, BN)
    sums = torch.empty(M, tiles_n, device=a.device, dtype=torch.float32) if part else None
    dummy = c  # unused pointers (their flag is off)
    grid = (triton.cdiv(M, BM) * tiles_n,)
    _mm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                     pre if pre is not None else dummy, res if res is not None else dummy,
                     res.stride(0) if res is not None else 0, res_scale if res_scale is not None else dummy,
                     x if x is not None else dummy, x.stride(0) if x is not None else 0,
                     sums if sums is not None else dummy, post if post is not None else dummy,
                     HAS_PRE=pre is not None, HAS_RES=res is not None, HAS_RES_SCALE=res_scale is not None,
                     PART=part, HAS_POST=post is not None, BM=BM, BN=BN, BK=BK, **_common(a.dtype), **opts)
    return c, (sums.sum(1) if sums is not None else None)


def swiglu(x: torch.Tensor, w: torch.Tensor, rs: Optional[torch.Tensor],
           save: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(h (M, I), [g | u] (M, 2I), or an empty tensor unless `save`) of `_swiglu_kernel`."""
    x, w = _rows(x), _rows(w)
    M, K = x.shape
    I = w.shape[0] // 2  # noqa: E741
    h = torch.empty(M, I, device=x.device, dtype=x.dtype)
    gu = torch.empty(M, 2 * I, device=x.device, dtype=x.dtype) if save else x.new_empty(0)
    BM, BN, BK, opts = _tiles(M, I, K, x.dtype, True, x.device)
    grid = (triton.cdiv(M, BM) * triton.cdiv(I, BN),)
    _swiglu_kernel[grid](x, w, h, gu if save else h, rs if rs is not None else h, M, I, K, x.stride(0),
                         w.stride(0), HAS_RS=rs is not None, SAVE=save, BM=BM, BN=BN, BK=BK, **_common(x.dtype),
                         **opts)
    return h, gu


def dswiglu(dv: torch.Tensor, wd: torch.Tensor, gu: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """([dg | du] (M, 2I), h (M, I)) of `_dswiglu_kernel`."""
    dv, wd, gu = _rows(dv), _rows(wd), gu.contiguous()
    M, D = dv.shape
    I = wd.shape[1]  # noqa: E741
    dgu = torch.empty(M, 2 * I, device=dv.device, dtype=dv.dtype)
    h = torch.empty(M, I, device=dv.device, dtype=dv.dtype)
    BM, BN, BK, opts = _tiles(M, I, D, dv.dtype, False, dv.device)
    grid = (triton.cdiv(M, BM) * triton.cdiv(I, BN),)
    _dswiglu_kernel[grid](dv, wd, gu, dgu, h, M, I, D, dv.stride(0), wd.stride(0), BM=BM, BN=BN, BK=BK,
                          **_common(dv.dtype), **opts)
    return dgu, h


def qkv_rope(x: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`_qkv_rope_kernel`: x (M, D) with rows in (batch, position) order, cos/sin (S, head_dim / 2) float32."""
    x, w, cos, sin = _rows(x), _rows(w), cos.contiguous(), sin.contiguous()
    M, D = x.shape
    S, half = cos.shape
    out = torch.empty(M, 3 * D, device=x.device, dtype=x.dtype)
    BM, BN, BK, opts = _tiles(M, 3 * D // 2, D, x.dtype, True, x.device)
    grid = (triton.cdiv(M, BM) * triton.cdiv(3 * D // 2, BN),)
    _qkv_rope_kernel[grid](x, w, out, cos, sin, M, D, S, half, x.stride(0), w.stride(0), BM=BM, BN=BN, BK=BK,
                           **_common(x.dtype), **opts)
    return out


def rope_back(g: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`_rope_back_kernel`: g (M, 3D) contiguous."""
    g, cos, sin = g.contiguous(), cos.contiguous(), sin.contiguous()
    M, D3 = g.shape
    S, half = cos.shape
    out = torch.empty_like(g)
    BM, BN = (32, 32) if INTERPRETED else (32, 128)
    grid = (triton.cdiv(M, BM), triton.cdiv(D3 // 2, BN))
    _rope_back_kernel[grid](g, out, cos, sin, M, D3 // 3, S, half, BM=BM, BN=BN)
    return out
