"""Benchmark: training throughput by CPU thread count, on an idle machine and under a stated added load.

    python benchmarks/bench_threads.py                  # cpu-smoke on 4x4 Sudoku, 40 steps a run
    python benchmarks/bench_threads.py --steps 80 --load 2

Each run is a fresh `trm-kaggle train` process (threads are set once, at its start) with the `cpu-smoke`
preset on a generated 4x4 Sudoku dataset, timed by its own log (examples per second over its steps after the
first, which pays the one-time costs). Per condition, side by side and alternated over `--rounds`:

* baseline: `threads=` every usable core (what training chose before the thread rule, whatever else ran);
* `threads=1`;
* auto: no setting and no OMP_NUM_THREADS (`trm_kaggle.hardware.choose_threads`: the cores the load leaves free).

Conditions: "as found" (whatever else runs on the machine: the load average is printed beside each figure) and
"+N busy" (`--load` processes spinning on a core each, started by the script, the stated load). Printed:
examples/s per run (median over rounds) and its ratio to the baseline of the same condition and round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _spin() -> None:
    while True:
        pass


def _run(data: Path, folder: Path, steps: int, threads: int | None) -> tuple[float, str]:
    """(examples/s after the first step, the threads line the run printed) of one training process."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cmd = [sys.executable, "-m", "trm_kaggle", "train", "--preset", "cpu-smoke", f"data_paths=[{data}]",
           f"checkpoint_path={folder}", f"max_steps={steps}", "log_interval=1", "seed=0", "progress=True"]
    if threads is not None:
        cmd.append(f"threads={threads}")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    records = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "elapsed_s" in r]
    first, last = records[0], records[-1]
    rate = (last["step"] - first["step"]) * 32 / max(1e-9, last["elapsed_s"] - first["elapsed_s"])
    said = next((line.split("; ")[-1] for line in done.stderr.splitlines() if "CPU thread" in line), "?")
    return rate, said


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--load", type=int, default=None, help="busy processes of the loaded condition (default: cores)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.hardware import usable_cores

    cores = usable_cores()
    load = cores if args.load is None else args.load
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sudoku4"
        build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=400, num_test=8, num_aug=1,
                                       progress=False))
        sides = [("baseline", cores), ("threads=1", 1), ("auto", None)]
        for condition in ("as found", f"+{load} busy"):
            spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load if "busy" in condition
                                                                                         else 0)]
            for p in spinners:
                p.start()
            time.sleep(2 if spinners else 0)
            rates: dict[str, list[float]] = {name: [] for name, _ in sides}
            ratios: dict[str, list[float]] = {name: [] for name, _ in sides}
            said: dict[str, str] = {}
            loads = []
            try:
                for r in range(args.rounds):
                    order = sides if r % 2 == 0 else sides[::-1]
                    got = {}
                    for name, threads in order:
                        loads.append(os.getloadavg()[0])
                        got[name], said[name] = _run(data, Path(tmp) / f"{condition}-{name}-{r}".replace(" ", "_"),
                                                     args.steps, threads)
                    for name in got:
                        rates[name].append(got[name])
                        ratios[name].append(got[name] / got["baseline"])
            finally:
                for p in spinners:
                    p.terminate()
            print(f"{condition} (load average {min(loads):.1f}..{max(loads):.1f} before the runs; {cores} cores):")
            for name, _ in sides:
                print(f"  {name:10s} {statistics.median(rates[name]):8.1f} examples/s  x{statistics.median(ratios[name]):.2f}"
                      f"  ({said[name]})")


if __name__ == "__main__":
    main()
