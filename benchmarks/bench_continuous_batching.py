"""Benchmark: early exit by compaction against continuous batching, side by side in one run, on this CPU.

    python benchmarks/bench_continuous_batching.py                         # the defaults below
    python benchmarks/bench_continuous_batching.py --examples 96 --batch-size 128  # a solve's task: one batch

The same random-weight model and the same examples run through each way of doing inference:

* compacting: `act_rollout` batch after batch (`--batch-size` rows), stopped rows leaving the batch at each
  step (the inference path before continuous batching);
* continuous, fixed: `ContinuousRollout` with one batch shape throughout, stopped rows refilled from the queue
  and idle rows left in the batch once it is empty (what runs on CUDA);
* continuous, shrinking: the same, but once the queue is empty the stopped rows leave the batch (what runs on
  CPU and MPS).

and, without early exit, batch after batch with every step's logits (`act_rollout`) against the continuous
rollout, which decodes the last step alone. Halting differs by row by construction: random q-head weights and
the bias that makes the mean halting step `--mean-steps` of `--max-steps` (the GPU suite's random paper model
ran 9.5 of 16). Rounds alternate the sides so that load from other processes hits each alike; printed per side:
the median examples/s over rounds, its ratio to compacting's (median of the per-round ratios), the rows
forwarded (sum over model calls of the rows passed), the calls, and whether the predictions (tokens, steps)
agree with compacting's row for row, with the largest q_halt difference: other batch sizes take other BLAS
kernels, whose last-bit differences grow over the recursion (H_cycles * (L_cycles + 1) net calls per ACT
step) and can flip a near-tie argmax of a row that ran many steps. The last side, batch after batch with half
the batch, is the control: the same code as the first full-length side, another batch size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import check_options, loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import numpy as np
    import torch
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model import ContinuousRollout, TinyRecursiveModel, act_rollout, balanced_slots


def build(args) -> tuple[TinyRecursiveModel, dict[str, torch.Tensor]]:
    arch = ArchConfig(hidden_size=args.hidden, num_heads=args.heads, expansion=4, H_cycles=args.H_cycles,
                      L_cycles=args.L_cycles, L_layers=2, halt_max_steps=args.max_steps, puzzle_emb_len=args.prefix,
                      forward_dtype="float32")
    torch.manual_seed(args.seed)
    model = TinyRecursiveModel(arch, args.seq_len, 12, args.examples).eval()
    g = torch.Generator().manual_seed(args.seed)
    examples = {"inputs": torch.randint(0, 12, (args.examples, args.seq_len), generator=g, dtype=torch.int32),
                "puzzle_identifiers": torch.arange(args.examples, dtype=torch.int32)}
    with torch.no_grad():
        model.puzzle_emb.weights.normal_(0.0, 1.0, generator=g)
        model.q_head.weight.normal_(0.0, 1.0, generator=g)
        set_mean_steps(model, examples, args)
    return model, examples


def set_mean_steps(model, examples, args) -> None:
    """The q-head bias whose halting steps average `args.mean_steps` on the first examples (q_halt is linear in it)."""
    sample = {k: v[:min(64, args.examples)] for k, v in examples.items()}
    model.q_head.bias.zero_()
    carry, qs = model.initial_carry(sample), []
    for _ in range(args.max_steps):
        carry, out = model(carry, sample, logits=False)
        qs.append(out["q_halt_logits"].float())
    q = torch.stack(qs, 1)  # (rows, steps)

    def mean_steps(bias: float) -> float:
        stop = (q + bias > 0).float()
        stop[:, -1] = 1.0
        return float(stop.argmax(1).float().mean() + 1)

    lo, hi = -float(q.abs().max()) - 1, float(q.abs().max()) + 1  # mean_steps falls as the bias grows
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_steps(mid) > args.mean_steps else (lo, mid)
    model.q_head.bias[0] = hi


def compacting(model, examples, args, early_exit: bool, batch_size: int | None = None) -> dict:
    n, out, size = args.examples, {"rows": 0, "calls": 0}, batch_size or args.batch_size
    tokens, steps, q_halt = [], [], []
    for at in range(0, n, size):
        batch = {k: v[at:at + size] for k, v in examples.items()}
        r = act_rollout(model, batch, args.max_steps, early_exit)
        tokens.append(r.tokens)
        steps.append(r.steps)
        q_halt.append(r.q_halt)
        out["rows"] += r.rows_forwarded
        out["calls"] += r.calls
    return {**out, "tokens": torch.cat(tokens), "steps": torch.cat(steps), "q_halt": torch.cat(q_halt)}


def continuous(model, examples, args, early_exit: bool, shrink: bool) -> dict:
    slots = balanced_slots(args.examples, args.batch_size)
    rollout = ContinuousRollout(model, slots, args.max_steps, early_exit, shrink_at_end=shrink)
    chunks = ({k: v[at:at + args.batch_size] for k, v in examples.items()}
              for at in range(0, args.examples, args.batch_size))
    tokens = torch.zeros(args.examples, args.seq_len, dtype=torch.uint8)
    steps = torch.zeros(args.examples, dtype=torch.int32)
    q_halt = torch.zeros(args.examples)
    for done in rollout.run(chunks):
        ids = torch.from_numpy(done.ids)
        tokens[ids], steps[ids], q_halt[ids] = done.tokens, done.steps, done.q_halt
    return {"rows": rollout.rows_forwarded, "calls": rollout.calls, "tokens": tokens, "steps": steps,
            "q_halt": q_halt}


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64, help="8x8 grids (ARC's 30x30 is 900: slow on 2 cores)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--prefix", type=int, default=4, help="puzzle_emb_len")
    ap.add_argument("--H-cycles", type=int, default=2)
    ap.add_argument("--L-cycles", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=16)
    ap.add_argument("--mean-steps", type=float, default=9.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    check_options(counts={"--examples": args.examples, "--batch-size": args.batch_size, "--seq-len": args.seq_len,
                          "--hidden": args.hidden, "--heads": args.heads, "--H-cycles": args.H_cycles,
                          "--L-cycles": args.L_cycles, "--max-steps": args.max_steps, "--rounds": args.rounds},
                  threads={"--threads": args.threads}, positive={"--mean-steps": args.mean_steps})
    check_options(counts={"--prefix": args.prefix, "--seed": args.seed}, least=0)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, examples = build(args)
    sides = {
        "early exit: compacting": lambda: compacting(model, examples, args, True),
        "early exit: continuous, fixed": lambda: continuous(model, examples, args, True, False),
        "early exit: continuous, shrinking": lambda: continuous(model, examples, args, True, True),
        "full length: batch after batch": lambda: compacting(model, examples, args, False),
        "full length: continuous": lambda: continuous(model, examples, args, False, True),
        "full length: half the batch": lambda: compacting(model, examples, args, False, max(1, args.batch_size // 2)),
    }
    baseline = {"early exit": "early exit: compacting", "full length": "full length: batch after batch"}
    print(f"{args.examples} examples, batch {args.batch_size} (continuous: "
          f"{balanced_slots(args.examples, args.batch_size)} slots), seq_len {args.seq_len}, hidden {args.hidden}, "
          f"H_cycles {args.H_cycles}, L_cycles {args.L_cycles}, max {args.max_steps} ACT steps, float32, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds")
    times: dict[str, list[float]] = {name: [] for name in sides}
    results = {}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for name, run in sides.items():
                t = time.perf_counter()
                results[name] = run()
                times[name].append(time.perf_counter() - t)
    mean = float(results["early exit: compacting"]["steps"].float().mean())
    print(f"mean ACT steps with early exit: {mean:.2f} of {args.max_steps}")
    print(f"{'side':36s} {'examples/s':>10s} {'ratio':>6s} {'rows fwd':>9s} {'calls':>6s}  predictions")
    for name, r in results.items():
        base = baseline[name.split(":")[0]]
        ratio = statistics.median(b / t for b, t in zip(times[base], times[name]))
        ref = results[base]
        differ = int(((r["tokens"] != ref["tokens"]).any(1) | (r["steps"] != ref["steps"])).sum())
        dq = float((r["q_halt"] - ref["q_halt"]).abs().max())
        print(f"{name:36s} {args.examples / statistics.median(times[name]):10.2f} {ratio:6.2f} {r['rows']:9d} "
              f"{r['calls']:6d}  {'the same' if not differ else f'{differ} rows differ'} (q_halt {dq:.1e})")
    print(f"rows forwarded at the least (each example once per step it runs): "
          f"{int(results['early exit: compacting']['steps'].sum())}; ratios: median per round against the first "
          f"side of the group; {np.round(times['early exit: compacting'], 2).tolist()} s per compacting round")


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
