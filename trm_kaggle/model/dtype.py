"""Which activation dtype a run uses: `arch.forward_dtype`, with "auto" decided per device.

Parameters, optimizer states, norms, losses and (on CPU) the attention itself are
float32 in every case; the forward dtype is that of the activations and matmuls.

"auto" picks:
* CUDA: bfloat16 on GPUs with native bf16 (compute capability >= 8.0: A100, H100,
  L4, ...; upstream's dtype); float16 with loss scaling (train/amp.py) on older GPUs with
  fast float16 (T4, V100: tensor cores; P100); float32 on the rest (consumer Pascal and
  older, where float16 arithmetic is slower than float32);
* CPU: bfloat16 only where a bf16 matmul is *measured* to be clearly faster than a
  float32 one on the machine it runs on. CPUs with AVX512_BF16 or AMX (AMD Zen 4+, Intel
  Sapphire Rapids+) run bf16 matmuls about 2x faster than float32; CPUs without
  them (AVX2 only, e.g. most laptops and Kaggle's CPU kernels) emulate them
  hundreds of times slower, where upstream's default bfloat16 is unusable.
* XLA: bfloat16 on TPUs (native there; upstream's dtype), float32 on other PJRT devices;
* MPS and anything else: float32.
"""

from __future__ import annotations

import functools
import time
from typing import Optional, Tuple, Union

import torch

from trm_kaggle import xla
from trm_kaggle.config import ArchConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Pascal GPUs whose float16 arithmetic runs at twice the float32 rate (P100, Jetson TX2); other 6.x at 1/64.
FAST_FP16_PASCAL = ((6, 0), (6, 2))
# bf16 must beat float32 by this factor before "auto" gives up float32's precision for it.
CPU_BF16_MIN_SPEEDUP = 1.3
# Narrower models stay float32 on CPU: their time goes to the (float32) attention and the
# element-wise work, where bf16 only adds conversions, so bf16 is slower below this width
# even on CPUs with fast bf16 matmuls (benchmarks/bench_train_cpu.py --ours-dtype measures it).
CPU_BF16_MIN_HIDDEN = 128


def _matmul_rate(n: int, dtype: torch.dtype, reps: int, budget_s: float) -> float:
    """Best multiply-adds per second of an n x n @ n x n matmul over `reps` (stops early past budget_s)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    for _ in range(2):  # the first calls of a shape/dtype build (JIT) kernels
        a @ b
    best, start = float("inf"), time.perf_counter()
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
        if time.perf_counter() - start > budget_s:
            break
    return n**3 / max(best, 1e-9)


@functools.lru_cache(maxsize=None)
def cpu_bf16_speedup(num_threads: int) -> float:
    """bf16 / float32 matmul throughput on this CPU with `num_threads` threads (measured once, <0.1 s).

    A 128 x 128 product first, so that CPUs which emulate bf16 (0.3 GFLOP/s against
    ~100 for float32) are rejected within ~30 ms; otherwise 384 x 384 (the size of the
    model's matmuls; below ~192 per side bf16 kernels do not pay off), best of a few.
    `num_threads` is only the cache key: the caller has already set torch's thread count."""
    del num_threads
    small = _matmul_rate(128, torch.bfloat16, 3, 0.03) / _matmul_rate(128, torch.float32, 3, 0.03)
    if small < 0.3:
        return small
    return _matmul_rate(384, torch.bfloat16, 5, 0.2) / _matmul_rate(384, torch.float32, 5, 0.2)


def resolve_forward_dtype(arch: ArchConfig, device: Union[str, torch.device], *,
                          bf16_speedup: Optional[float] = None,
                          cuda_capability: Optional[Tuple[int, int]] = None) -> Tuple[torch.dtype, str]:
    """The activation dtype for `arch.forward_dtype` on `device`, and a sentence saying why.

    `bf16_speedup` (CPU) and `cuda_capability` replace the measurement and the device query,
    for deciding about another machine (`trm-kaggle doctor` with given hardware facts)."""
    device = torch.device(device)
    measured = bf16_speedup is not None

    def speedup_here() -> float:
        return bf16_speedup if measured else cpu_bf16_speedup(torch.get_num_threads())

    if arch.forward_dtype != "auto":
        dtype = DTYPES[arch.forward_dtype]
        reason = f"forward_dtype={arch.forward_dtype} set explicitly"
        if device.type == "cpu" and dtype != torch.float32:
            speedup = speedup_here()
            if speedup < CPU_BF16_MIN_SPEEDUP:
                reason += (f" (warning: reduced-precision matmuls run at {speedup:.2g}x the float32 rate on this "
                           "CPU, which has no fast bf16 units; forward_dtype=auto would use float32)")
        return dtype, reason
    if device.type == "cuda":
        if cuda_capability is None and not torch.cuda.is_available():
            return torch.float32, "auto: no CUDA device available, float32"
        # Native bf16 needs compute capability 8.0 (Ampere) or newer. torch.cuda.is_bf16_supported()
        # also says yes on a T4 (7.5) or P100 (6.0), where bf16 is emulated and slow. Those run float16
        # several times faster than float32 (tensor cores from 7.0; P100 and Jetson TX2 at twice the
        # float32 rate), trained with loss scaling; consumer Pascal (6.1) runs float16 at 1/64 the rate.
        major, minor = cuda_capability or torch.cuda.get_device_capability(device)
        if major >= 8 or torch.version.hip:
            return torch.bfloat16, (f"auto: CUDA device (compute capability {major}.{minor}) has native bfloat16 "
                                    "(upstream's dtype)")
        if major >= 7 or (major, minor) in FAST_FP16_PASCAL:
            return torch.float16, (f"auto: CUDA device with compute capability {major}.{minor} (< 8.0, e.g. T4) has "
                                   "no native bfloat16 but fast float16: float16 activations with loss scaling, "
                                   "float32 weights, norms and losses")
        return torch.float32, (f"auto: CUDA device with compute capability {major}.{minor} has neither native "
                               "bfloat16 nor fast float16, so float32")
    if device.type == "cpu":
        if arch.hidden_size < CPU_BF16_MIN_HIDDEN:
            return torch.float32, (f"auto: CPU and hidden_size {arch.hidden_size} < {CPU_BF16_MIN_HIDDEN} "
                                   "(too narrow for bf16 matmuls to pay), so float32")
        speedup = speedup_here()
        if speedup >= CPU_BF16_MIN_SPEEDUP:
            return torch.bfloat16, (f"auto: bf16 matmuls measured {speedup:.1f}x faster than float32 on this CPU "
                                    "(AVX512_BF16/AMX), so bfloat16 activations (upstream's dtype) with float32 "
                                    "weights, norms and attention")
        return torch.float32, (f"auto: bf16 matmuls measured at {speedup:.2g}x the float32 rate on this CPU (no fast "
                               "bf16 units), so float32")
    if device.type == "xla":
        kind = xla.device_kind()
        if kind == "TPU":
            return torch.bfloat16, "auto: TPU (XLA) has native bfloat16 (upstream's dtype)"
        return torch.float32, f"auto: XLA on {kind}, float32"
    return torch.float32, f"auto: {device.type} device, float32"
