"""Benchmark: `trm-kaggle train device=xla` on PJRT's CPU client, 1 and 2 replicas, beside CPU eager.

    scripts/check_xla.sh bench [--steps 20]          # in the cached torch_xla environment (PJRT_DEVICE=CPU)

Runs the same tiny TRM (hidden 32, 4x4 Sudoku, global batch 8) three times, each as its own command:
CPU eager, XLA with one replica, XLA with two replicas under torchrun (on a CPU host gloo carries
the collectives: `trm_kaggle.xla`). Prints per run: the command's wall time (process start, XLA
compilations and all), compilations, compile and execute seconds (torch_xla's metrics), seconds per
step after the warm-up (and their ratio to CPU eager's, "÷ cpu"), and the largest loss difference
from the CPU eager run. This measures the
XLA machinery (compile once, then reuse) on a CPU, not TPU speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import check_options, child_failed, loading, work_folder  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.xla import WARMUP_STEPS

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=2", "arch.L_cycles=2",
        "arch.L_layers=1", "arch.halt_max_steps=3", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "lr=3e-3", "lr_warmup_steps=2", "eval_interval=null", "log_interval=1",
        "progress=False", "deterministic=True", "seed=3", "ema=True"]


def run(name: str, data: Path, run_dir: Path, steps: int, device: str, replicas: int = 1,
        extra: tuple[str, ...] = ()) -> dict:
    cmd = [sys.executable, "-m", "trm_kaggle", "train", f"data_paths=[{data}]", f"checkpoint_path={run_dir}",
           f"max_steps={steps}", f"device={device}", *TINY, *extra]
    if replicas > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd[1:3] = ["-m", "torch.distributed.run", "--nproc-per-node", str(replicas), "--master-port", str(port),
                    "-m", "trm_kaggle"]
    env = {**{k: v for k, v in os.environ.items() if k != "CPU_NUM_DEVICES"}, "PJRT_DEVICE": "CPU",
           "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise child_failed(name, done.returncode, done.stderr)
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    after = [r for r in records if r["step"] >= WARMUP_STEPS]
    per_step = (after[-1]["elapsed_s"] - after[0]["elapsed_s"]) / max(1, len(after) - 1)
    last = records[-1]
    return {"name": name, "wall_s": wall, "per_step_s": per_step, "losses": [r["loss"] for r in records],
            "compiles": last.get("xla_compiles"), "compile_s": last.get("xla_compile_s"),
            "execute_s": last.get("xla_execute_s"), "recompiles": last.get("xla_recompiles")}


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args()
    check_options(counts={"--steps": args.steps})
    # runs start fresh (one found there would be resumed, not measured) and are removed however the run ends, as is
    # a scratch folder
    runs = ["cpu", "xla1", "xla2"]
    with work_folder(args.work_dir, "bench_xla_", runs, "XLA benchmark") as work:
        try:
            bench(args, work)
        finally:
            for name in runs:
                shutil.rmtree(work / name, ignore_errors=True)


def bench(args: argparse.Namespace, work: Path) -> None:
    """The three runs in `work` (its dataset built there, replacing only one the package built) and their table."""
    data = work / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=200, num_test=8, progress=False))
    print(f"{args.steps} steps each; {os.cpu_count()} CPU cores; work dir {work}")
    # one thread for eager: two on 2 shared cores made its step time swing 20x between runs
    results = [run("cpu eager (1 thread)", data, work / "cpu", args.steps, "cpu", extra=["threads=1"]),
               run("xla, 1 replica", data, work / "xla1", args.steps, "xla"),
               run("xla, 2 replicas (torchrun)", data, work / "xla2", args.steps, "xla", replicas=2)]
    base = results[0]
    print(f"{'run':28s} {'wall s':>8s} {'s/step':>8s} {'÷ cpu':>7s} {'compiles':>8s} {'compile s':>9s} "
          f"{'execute s':>9s} {'recompiles':>10s} {'max |dloss|':>11s}")
    for r in results:
        dloss = max(abs(a - b) for a, b in zip(r["losses"], base["losses"]))
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{r['name']:28s} {r['wall_s']:8.1f} {r['per_step_s']:8.3f} {r['per_step_s'] / base['per_step_s']:6.1f}x "
              f"{fmt(r['compiles'], 'd'):>8s} {fmt(r['compile_s'], '.1f'):>9s} {fmt(r['execute_s'], '.2f'):>9s} "
              f"{fmt(r['recompiles'], 'd'):>10s} {dloss:11.1e}")


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
