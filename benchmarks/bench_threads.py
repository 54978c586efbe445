"""Benchmark: training throughput by CPU thread count, on an idle machine and under a stated added load.

    python benchmarks/bench_threads.py                  # cpu-smoke on 4x4 Sudoku, 40 steps a run
    python benchmarks/bench_threads.py --steps 80 --load 2

Each run is a fresh `trm-kaggle train` process (threads are set once, at its start) with the `cpu-smoke`
preset on a generated 4x4 Sudoku dataset, timed by its own log (examples per second over its steps after the
first, which pays the one-time costs). Per condition, side by side and alternated over `--rounds`:

* baseline: `threads=` every usable core with GNU OpenMP's own spinning waits (`GOMP_SPINCOUNT=300000`, its
  default: a thread that finished its share spins a while before it sleeps), what training did before the
  thread rule and before trm_kaggle shortened the spin (`trm_kaggle.hardware.quiet_openmp_waits`);
* passive: the same threads with `OMP_WAIT_POLICY=PASSIVE` (a waiting thread sleeps at once);
* short spin: the same threads with `GOMP_SPINCOUNT=10000` (GNU OpenMP's spin before sleeping, 300,000 by default);
* `threads=1`;
* auto: no setting, no OMP_NUM_THREADS, OMP_WAIT_POLICY or GOMP_SPINCOUNT: what a user gets (the thread rule
  of `trm_kaggle.hardware.choose_threads`, the short spin); `threads=1` waits as auto does.

Conditions: "as found" (whatever else runs on the machine: the load average is printed beside each figure) and
"+N busy" (`--load` processes spinning on a core each, started by the script, the stated load). Printed:
examples/s per run (median over rounds) and its ratio to the baseline of the same condition and round; under
load also the busy processes' own work (loop iterations per second, summed) while each run trained, against the
same baseline: what a training's waiting threads take from its neighbours.
"""

from __future__ import annotations

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


def _spin(counter) -> None:
    n = 0
    while True:
        n += 1
        if n % 100_000 == 0:
            with counter.get_lock():
                counter.value += 100_000


#: What each side sets of OpenMP's waiting (the training process's environment, nothing else of it changed).
WAITS = {"spin": {"GOMP_SPINCOUNT": "300000"}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
         "short": {"GOMP_SPINCOUNT": "10000"}, "default": {}}


def _run(data: Path, folder: Path, steps: int, threads: int | None, wait: str = "spin") -> tuple[float, str]:
    """(examples/s after the first step, the threads line the run printed) of one training process."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(WAITS[wait])
    cmd = [sys.executable, "-m", "trm_kaggle", "train", "--preset", "cpu-smoke", f"data_paths=[{data}]",
           f"checkpoint_path={folder}", f"max_steps={steps}", "log_interval=1", "seed=0", "progress=True"]
    if threads is not None:
        cmd.append(f"threads={threads}")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        from benchmarks.entry import child_failed

        raise child_failed(f"the training of {folder.name}", done.returncode, done.stderr)
    records = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "elapsed_s" in r]
    first, last = records[0], records[-1]
    rate = (last["step"] - first["step"]) * 32 / max(1e-9, last["elapsed_s"] - first["elapsed_s"])
    said = next((line.split("; ")[-1] for line in done.stderr.splitlines() if "CPU thread" in line), "?")
    return rate, said


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--load", type=int, default=None, help="busy processes of the loaded condition (default: cores)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.entry import check_options

    check_options(counts={"--steps": args.steps, "--rounds": args.rounds})
    most = 4 * (os.cpu_count() or 1)  # busy processes: a billion of them was a fork bomb
    if args.load is not None and not (isinstance(args.load, int) and 0 <= args.load <= most):
        from trm_kaggle.errors import TRMError

        raise TRMError(f"--load {args.load}: from 0 to {most} busy processes (4 per core)")
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.hardware import usable_cores

    cores = usable_cores()
    load = cores if args.load is None else args.load
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sudoku4"
        build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=400, num_test=8, num_aug=1,
                                       progress=False))
        sides = [("baseline", cores, "spin"), ("passive", cores, "passive"), ("short spin", cores, "short"),
                 ("threads=1", 1, "default"), ("auto", None, "default")]
        for condition in ("as found", f"+{load} busy"):
            work = multiprocessing.Value("q", 0)
            spinners = [multiprocessing.Process(target=_spin, args=(work,), daemon=True)
                        for _ in range(load if "busy" in condition else 0)]
            for p in spinners:
                p.start()
            time.sleep(2 if spinners else 0)
            rates: dict[str, list[float]] = {name: [] for name, *_ in sides}
            ratios: dict[str, list[float]] = {name: [] for name, *_ in sides}
            others: dict[str, list[float]] = {name: [] for name, *_ in sides}  # neighbours' work, against baseline
            said: dict[str, str] = {}
            loads = []
            try:
                for r in range(args.rounds):
                    order = sides if r % 2 == 0 else sides[::-1]
                    got, theirs = {}, {}
                    for name, threads, wait in order:
                        loads.append(os.getloadavg()[0])
                        w0, t0 = work.value, time.perf_counter()
                        got[name], said[name] = _run(data, Path(tmp) / f"{condition}-{name}-{r}".replace(" ", "_"),
                                                     args.steps, threads, wait)
                        theirs[name] = (work.value - w0) / (time.perf_counter() - t0)
                    for name in got:
                        rates[name].append(got[name])
                        ratios[name].append(got[name] / got["baseline"])
                        if spinners:
                            others[name].append(theirs[name] / max(theirs["baseline"], 1e-9))
            finally:
                for p in spinners:
                    p.terminate()
            print(f"{condition} (load average {min(loads):.1f}..{max(loads):.1f} before the runs; {cores} cores):")
            for name, *_ in sides:
                line = (f"  {name:10s} {statistics.median(rates[name]):8.1f} examples/s  "
                        f"x{statistics.median(ratios[name]):.2f}")
                if spinners:
                    line += f"  neighbours' work x{statistics.median(others[name]):.2f}"
                print(line + f"  ({said[name]}); rounds: " + " ".join(f"{x:.0f}" for x in rates[name]))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
