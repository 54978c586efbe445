"""Evidence that the engine learns: a small TRM on generated 4x4 Sudoku, CPU only, with a wall-clock limit.

    python benchmarks/bench_learn_sudoku.py [--minutes 10] [--target 0.8] [key=value ...]
    python benchmarks/bench_learn_sudoku.py arch.forward_dtype=bfloat16     # the bf16 CPU path learns too

Generates 2000 training and 200 held-out uniquely-solvable 4x4 puzzles (minimal: no given can be removed),
trains with the `sudoku4-cpu` preset, evaluates the held-out puzzles every 2 epochs (exact solve rate:
every cell right, after the full halt_max_steps), prints the curve and whether the target was reached in time.
Held-out means distinct puzzles; a 4x4 grid has only 288 possible solutions, so solution grids recur.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import check_options, command, loading, run_folder_problem, work_folder  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.errors import TRMError
    from trm_kaggle.train import load_train_config, train


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("overrides", nargs="*", help="training config overrides on top of the preset (key=value)")
    args = ap.parse_args()
    check_options(counts={"--seed": args.seed}, positive={"--minutes": args.minutes, "--target": args.target}, least=0)
    if not 0 < args.minutes <= 7 * 24 * 60:  # NaN never stopped the run by its time
        raise TRMError(f"--minutes {args.minutes}: a number of minutes above 0 and at most a week")
    if not 0 <= args.target <= 1 or math.isnan(args.target):
        raise TRMError(f"--target {args.target}: a held-out exact solve rate from 0 to 1")
    # held from the start (a second benchmark there rebuilt the first one's data while it trained, then was
    # refused); no --work-dir: a scratch folder of its own, removed on any exit
    with work_folder(args.work_dir, "bench_sudoku4_", (), "Sudoku learning benchmark", check=check_work) as work:
        learn(work, args)


def check_work(work: Path) -> None:
    """The run folder WORK/run, before any work: a symbolic link there had the training written into the folder it
    points to (the dataset WORK/sudoku4 is refused by its build, before anything is written)."""
    if problem := run_folder_problem(work / "run"):
        raise TRMError(problem)


def learn(work: Path, args: argparse.Namespace) -> None:
    """Build the puzzles in `work`, train until the time limit or the target holds, print the curve."""
    data = work / "sudoku4"
    t0 = time.perf_counter()
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=2000, num_test=200, seed=args.seed,
                                   progress=False))
    print(f"data: 2000 train / 200 held-out 4x4 puzzles in {time.perf_counter() - t0:.1f} s ({data})")

    start = time.perf_counter()
    curve: list[tuple[int, float, float]] = []
    reached: list[float] = []
    # ~62 steps per eval; the step cap keeps the run inside the time limit with margin for slow machines
    cfg = load_train_config(presets=["sudoku4-cpu"], overrides=[
        f"data_paths=[{data}]", f"checkpoint_path={work / 'run'}", f"seed={args.seed}", "progress=False",
        "log_interval=31", "max_steps=3000", *args.overrides])
    if args.overrides:
        print(f"overrides: {' '.join(args.overrides)}")

    def on_eval(step: int, m: dict) -> bool:
        elapsed = time.perf_counter() - start
        curve.append((step, elapsed, m["eval_exact_accuracy"]))
        print(f"  step {step:5d}  {elapsed:7.1f} s  held-out exact solve rate {m['eval_exact_accuracy']:.3f} "
              f"(token accuracy {m['eval_token_accuracy']:.3f}, {m['eval_examples']} puzzles)", flush=True)
        if m["eval_exact_accuracy"] >= args.target and not reached:
            reached.append(elapsed)
        # stop at the time limit, or three evaluations after reaching the target (to show it holds)
        return elapsed > args.minutes * 60 or (bool(reached) and sum(c[2] >= args.target for c in curve) >= 3)

    train(cfg, on_eval=on_eval)
    best = max(c[2] for c in curve) if curve else 0.0
    print(f"best held-out exact solve rate {best:.3f}; target {args.target:.2f} "
          + (f"reached after {reached[0]:.0f} s (limit {args.minutes * 60:.0f} s)" if reached
             else f"NOT reached within {args.minutes:.0f} min"))


if __name__ == "__main__":
    sys.exit(command(main))  # a refusal, a stop: one line and the status of the package's commands
