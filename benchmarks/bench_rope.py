"""Benchmark: RoPE on q and k three ways, side by side, forward and backward, on this CPU.

    python benchmarks/bench_rope.py                 # bench_train_cpu.py's shape and the paper's, eager
    python benchmarks/bench_rope.py --compile       # + each way under torch.compile (needs a C++ compiler)

The three ways rotate the same (batch, seq, 2, heads, head_dim) block of q and k:
* cat: x * cos + cat(x2, x1) * sin_signed, the rotation as it was written before the roll;
* roll: x * cos + roll(x, head_dim/2) * sin_signed (`trm_kaggle.model.layers.apply_rope`, the plain path
  CUDA takes);
* complex: one complex multiplication on head dimensions stored pairwise (the CPU fast path of
  `Attention.forward`, which projects q and k in that order).
A step is forward + backward of sum(rope(x) * g). Rounds alternate the ways (A B C A B C ...), so that load
from other processes hits all alike; reported: the median time per step and the median of the per-round
ratios against `cat`.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.entry import check_options, loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import torch
    from trm_kaggle.model import RotaryEmbedding, apply_rope


def rope_cat(x, cos, sin):
    half = x.shape[-1] // 2
    return torch.addcmul(x * cos, torch.cat((x[..., half:], x[..., :half]), dim=-1), sin)


def rope_complex(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.complex(cos[..., :half], sin[..., half:])
    return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (half, 2))) * rot).flatten(-2)


WAYS = {"cat": rope_cat, "roll": apply_rope, "complex": rope_complex}


def timed(fn, x, cos, sin, g, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        x.grad = None
        (fn(x, cos, sin) * g).sum().backward()
    return (time.perf_counter() - t) / steps


def main(argv=None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10, help="timed steps per way and round")
    p.add_argument("--repeats", type=int, default=7, help="rounds")
    p.add_argument("--compile", action="store_true", help="also each way under torch.compile")
    args = p.parse_args(argv)
    check_options(counts={"--steps": args.steps, "--repeats": args.repeats})  # 0: a division by zero
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} "
          "(other processes share these cores: compare ratios, not absolutes)")
    shapes = {"bench_train_cpu (batch 64, 97 positions, 8 heads x 16)": (64, 97, 8, 16),
              "paper ARC (batch 8, 916 positions, 8 heads x 64)": (8, 916, 8, 64)}
    for label, (B, S, H, hd) in shapes.items():
        cos, sin = RotaryEmbedding(hd, S, 10000.0)()
        cos, sin = cos[:, None, None, :], sin[:, None, None, :]
        g = torch.Generator().manual_seed(0)
        x = torch.randn(B, S, 2, H, hd, generator=g).requires_grad_(True)
        grad = torch.randn(B, S, 2, H, hd, generator=g)
        ways = dict(WAYS)
        if args.compile:
            ways.update({f"{k}+compile": torch.compile(v, dynamic=False) for k, v in WAYS.items()})
        for fn in ways.values():  # warm-up (and compilation)
            timed(fn, x, cos, sin, grad, 2)
        times: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(args.repeats):
            for k, fn in ways.items():
                times[k].append(timed(fn, x, cos, sin, grad, args.steps))
        print(f"\n{label}: forward + backward per step, median of {args.repeats} rounds x {args.steps} steps")
        for k, ts in times.items():
            ratio = statistics.median(c / t for c, t in zip(times["cat"], ts))
            print(f"  {k:16s} {1e3 * statistics.median(ts):8.2f} ms   {ratio:5.2f}x cat's speed")
    return 0


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
