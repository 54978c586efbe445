"""Benchmark: how far two `estimate`s of the same settings, back to back on this machine, lie apart.

    python benchmarks/bench_estimate_repeat.py               # 3 pairs, one thread each
    python benchmarks/bench_estimate_repeat.py --pairs 5     # more pairs on a busy machine

`estimate` times a fine-tuning step and a prediction step of the model, then prices a Kaggle run from them. Its
figures swung up to 3.9x between two runs on one machine before each was taken as a warm-up call and the median
of up to three timed calls. Each pair runs the same small model twice (one thread: the steadiest measure on a
shared machine) and prints the ratio of the larger total to the smaller; a steady estimate stays within 1.25.
Other work on the machine disturbs single pairs, so the closest pair is printed too.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.entry import loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import torch
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.solve import estimate

ARCH = dict(hidden_size=32, num_heads=2, expansion=2, H_cycles=2, L_cycles=2, L_layers=2, halt_max_steps=4,
            puzzle_emb_len=2, forward_dtype="float32")


def main(argv=None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=3, choices=range(1, 21), metavar="1..20",
                   help="pairs of estimates (default 3)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    arch = ArchConfig(**ARCH)
    ratios = []
    for i in range(args.pairs):
        a, b = (estimate(arch, tasks=120, num_aug=8, finetune_steps=50, batch_size=8, eval_batch_size=16,
                         seq_len=64, cap_s=10.0).total_s for _ in range(2))
        ratios.append(max(a, b) / min(a, b))
        print(f"pair {i + 1}: totals {a:.0f} s and {b:.0f} s, ratio {ratios[-1]:.2f}", flush=True)
    print(f"closest pair: ratio {min(ratios):.2f}; widest: {max(ratios):.2f} (a steady estimate: 1.25 or less)")
    return 0


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
