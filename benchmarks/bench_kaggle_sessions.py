"""Estimate: how many 12-hour Kaggle T4 sessions each upstream recipe needs, from a CPU step measured here.

    python benchmarks/bench_kaggle_sessions.py [--batch 4] [--steps 3] [--threads 2] [--t4-tflops 20]

For each recipe (its preset's architecture, float32, on this CPU) the script builds a small generated dataset
of the recipe's shapes (9x9 Sudoku: 81 cells; 30x30 Maze: 900 cells, which is also ARC's canvas), trains
`--warmup` + `--steps` optimizer steps with `global_batch_size=--batch`, and takes the median seconds of the
timed steps. It also measures this CPU's float32 matmul rate (1024 x 1024, best of a few). The estimate
assumes a training step is matmul-bound with the same efficiency on both devices, so that

    T4 seconds per step = CPU seconds per example x 768 (the recipe's batch) x CPU rate / T4 rate

with the T4 rate an assumption (--t4-tflops, default 20 TFLOP/s: float16 tensor cores at about 30 % of their
65 TFLOP/s peak; one of the two T4s: a session trains in one process). Steps per run: the preset's
schedule on upstream's dataset sizes (Sudoku-Extreme-1k-aug-1000 and Maze-Hard-1k: 1,000 groups of 1 example,
50,000 epochs, batch 768). A session trains for 11.5 h minus a 10-minute margin. These are estimates, not
measurements of a T4: replace them when a T4 has been timed.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import check_options, loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import torch
    from trm_kaggle.config import MazeBuildConfig, SudokuBuildConfig
    from trm_kaggle.data import build_maze, build_sudoku
    from trm_kaggle.errors import TRMError
    from trm_kaggle.train import load_train_config, total_train_steps, train

SESSION_S = 11.5 * 3600 - 600
TRAIN_PUZZLES = 32  # each small dataset's training puzzles: an epoch's examples, the largest --batch it takes
RECIPES = {  # preset -> (dataset builder, upstream's groups, mean examples per group)
    "sudoku-mlp": ("sudoku", 1000, 1.0),
    "sudoku-att": ("sudoku", 1000, 1.0),
    "maze": ("maze", 1000, 1.0),
}


def matmul_rate(n: int = 1024, reps: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def dataset(kind: str, root: Path) -> Path:
    out = root / kind
    if not out.exists():
        if kind == "sudoku":
            build_sudoku(SudokuBuildConfig(output_dir=str(out), size=9, num_train=TRAIN_PUZZLES, num_test=4,
                                           progress=False))
        else:
            build_maze(MazeBuildConfig(output_dir=str(out), size=30, num_train=TRAIN_PUZZLES, num_test=4,
                                       progress=False))
    return out


def step_seconds(preset: str, data: Path, run: Path, batch: int, warmup: int, steps: int, threads: int) -> float:
    cfg = load_train_config(presets=[preset], overrides=[
        f"data_paths=[{data}]", f"checkpoint_path={run}", f"global_batch_size={batch}", f"max_steps={warmup + steps}",
        "arch.forward_dtype=float32", "device=cpu", f"threads={threads}", "log_interval=1", "eval_interval=null",
        "progress=False"])
    train(cfg)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    clock = [r["elapsed_s"] for r in records if "elapsed_s" in r]
    return statistics.median(b - a for a, b in zip(clock[warmup - 1:], clock[warmup:]))


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--t4-tflops", type=float, default=20.0)
    args = p.parse_args()
    check_options(counts={"--batch": args.batch, "--warmup": args.warmup, "--steps": args.steps},
                  threads={"--threads": args.threads}, positive={"--t4-tflops": args.t4_tflops})
    if args.batch > TRAIN_PUZZLES:  # the training's refusal came after a dataset's build, naming its scratch folder
        raise TRMError(f"--batch {args.batch}: each recipe trains on a dataset of {TRAIN_PUZZLES} puzzles, so a batch "
                       f"of at most {TRAIN_PUZZLES}")
    torch.set_num_threads(args.threads)
    rate = matmul_rate()
    print(f"CPU float32 matmul rate: {rate / 1e9:.0f} GFLOP/s ({args.threads} threads); T4 assumed "
          f"{args.t4_tflops:g} TFLOP/s (ratio {args.t4_tflops * 1e12 / rate:.0f}x)")
    print("| recipe | CPU s/step (batch {b}) | est. T4 s/step (batch 768) | steps | est. T4 hours | sessions |"
          .format(b=args.batch))
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for preset, (kind, groups, mean) in RECIPES.items():
            data = dataset(kind, Path(tmp))
            s = step_seconds(preset, data, Path(tmp) / f"run-{preset}", args.batch, args.warmup, args.steps,
                             args.threads)
            cfg = load_train_config(presets=[preset])
            t4 = s / args.batch * cfg.global_batch_size * rate / (args.t4_tflops * 1e12)
            total = total_train_steps(cfg.epochs, groups, mean, cfg.global_batch_size)
            hours = total * t4 / 3600
            print(f"| {preset} | {s:.2f} | {t4:.3f} | {total:,} | {hours:.1f} | {math.ceil(total * t4 / SESSION_S)} |",
                  flush=True)


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
