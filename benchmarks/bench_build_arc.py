"""Benchmark: `trm-kaggle build-arc` against upstream's builder on the arc2concept recipe.

    python benchmarks/bench_build_arc.py                       # ours at num_aug 100 and 1000
    python benchmarks/bench_build_arc.py --upstream-dir PATH   # + upstream side by side (num_aug <= --upstream-max-aug)

Needs `../shared/data/arc-combined` (upstream's exact JSON files) or `--data-prefix`.
Upstream's builder is not shipped with this project; pass a checkout of the paper's
code (the directory holding `dataset/build_arc_dataset.py`) to measure it in the same
run. Without it the ratio is taken against the figures measured on this machine type
and recorded in issue #2, and the output says so.

Reported per run: wall time, peak RSS summed over the whole process tree (workers
included, sampled every 50 ms), and bytes on disk. Outputs are deleted afterwards: the scratch directory
whatever ends the run (a stop included); in a `--work-dir` the `ours-N` and `upstream-N` folders this run
wrote, and nothing else (one already there is refused before any work, in one `error:` line, status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import check_options, child_failed, ended, loading, work_folder  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import numpy as np

HERE = Path(__file__).resolve().parent
RECIPE = ["--subsets", "training2", "evaluation2", "concept", "--test-set-name", "evaluation2"]
# Upstream on this 2-core / 24 GB machine type, from issue #2: (wall seconds, peak RSS bytes, bytes on disk)
UPSTREAM_REFERENCE = {100: (94.0, 2.4e9, 994e6), 1000: (956.0, 21.7e9, 9.0e9)}


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def measure(what: str, cmd: list[str], cwd: str | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS of the process tree, its stdout) of `cmd` (a build that prints a few lines: its
    pipes are read at its end); its failure is one line naming `what`, and a stop ends it before the script's own
    line. Also bench_code_repair.py's."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with ended(proc):
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        out, err = proc.communicate()
    if proc.returncode != 0:
        raise child_failed(what, proc.returncode, err)
    return wall, peak, out


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def parity(ours: Path, theirs: Path) -> list[str]:
    """Structural agreement between our dataset and upstream's at the same recipe."""
    out = []
    for split in ("train", "test"):
        a = json.loads((ours / split / "dataset.json").read_text())
        b = json.loads((theirs / split / "dataset.json").read_text())
        same_keys = set(a) == set(b)
        out.append(f"{split}: dataset.json keys identical: {same_keys}; groups {a['total_groups']} vs {b['total_groups']};"
                   f" puzzles {a['total_puzzles']:,} vs {b['total_puzzles']:,}")
        for f in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"):
            x = np.load(ours / split / f"all__{f}.npy", mmap_mode="r")
            y = np.load(theirs / split / f"all__{f}.npy", mmap_mode="r")
            if x.dtype != y.dtype or x.shape[1:] != y.shape[1:]:
                out.append(f"  {f}: dtype/shape differ: ours {x.dtype}{x.shape} upstream {y.dtype}{y.shape}")
    ta = json.loads((ours / "test_puzzles.json").read_text())
    tb = json.loads((theirs / "test_puzzles.json").read_text())
    out.append(f"test_puzzles.json: same task ids: {set(ta) == set(tb)}; same tasks: {ta == tb}")
    # un-augmented test puzzles are not translated, so their encoded rows must be byte-identical
    def unaug_rows(d: Path) -> dict[str, bytes]:
        ids = json.loads((d / "identifiers.json").read_text())
        pid = np.load(d / "test/all__puzzle_identifiers.npy")
        pin = np.load(d / "test/all__puzzle_indices.npy")
        x = np.load(d / "test/all__inputs.npy", mmap_mode="r")
        y = np.load(d / "test/all__labels.npy", mmap_mode="r")
        return {ids[i]: x[pin[p]:pin[p + 1]].tobytes() + y[pin[p]:pin[p + 1]].tobytes()
                for p, i in enumerate(pid) if "|||" not in ids[i]}
    ra, rb = unaug_rows(ours), unaug_rows(theirs)
    out.append(f"un-augmented test examples byte-identical: {ra == rb} ({len(ra)} tasks)")
    return out


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-prefix", default=str(HERE.parent.parent / "shared/data/arc-combined/arc-agi"))
    ap.add_argument("--num-aug", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--upstream-dir", default=None, help="checkout of upstream's code (runs its builder side by side)")
    ap.add_argument("--upstream-max-aug", type=int, default=100,
                    help="skip upstream above this num_aug (its 1000 run needs ~22 GB RAM and 16 min here)")
    ap.add_argument("--work-dir", default=None, help="scratch directory (default: a temp dir; ~9 GB at num_aug 1000)")
    args = ap.parse_args()
    check_options(counts={"--upstream-max-aug": args.upstream_max_aug,
                          "--num-aug": next((n for n in args.num_aug if n < 0), None)}, least=0)
    from trm_kaggle.errors import TRMError

    if not Path(args.data_prefix + "_training2_challenges.json").is_file():
        raise TRMError(f"{args.data_prefix}_training2_challenges.json not found: pass --data-prefix")
    writes = [f"{side}-{n}" for n in args.num_aug for side in ("ours", "upstream")]
    with work_folder(args.work_dir, "bench_build_arc_", writes, "build-arc benchmark") as work:
        rows = bench(args, work)
    print("\nnum_aug  speed-up vs upstream  peak RSS (ours)  RSS ratio (upstream/ours)  baseline")
    for n, speed, rss, rss_ratio, label in rows:
        print(f"{n:<8} {speed:>10.1f}x {rss / 1e9:>16.2f} GB {rss_ratio:>18.1f}x   {label}")
    print("targets: >= 10x faster than upstream at the same num_aug; peak RSS < 2 GB at num_aug=1000")


def bench(args: argparse.Namespace, work: Path) -> list[tuple]:
    """Each --num-aug built by ours (and upstream's), its rows for the table; the folders it wrote in `work`
    removed after each, whatever ends it."""
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; scratch {work}")
    rows = []
    for n in args.num_aug:
        ours_dir, theirs_dir = work / f"ours-{n}", work / f"upstream-{n}"
        try:
            rows += bench_one(args, n, ours_dir, theirs_dir)
        finally:  # only this run's folders: `work_folder` refused any that were there before it
            shutil.rmtree(ours_dir, ignore_errors=True)
            shutil.rmtree(theirs_dir, ignore_errors=True)
    return rows


def bench_one(args: argparse.Namespace, n: int, ours_dir: Path, theirs_dir: Path) -> list[tuple]:
    """One --num-aug: ours built and measured (upstream's beside it where asked); its row of the table, if any."""
    cmd = [sys.executable, "-m", "trm_kaggle", "build-arc", "--input-file-prefix", args.data_prefix, *RECIPE,
           "--num-aug", str(n), "--output-dir", str(ours_dir), "--no-progress"]
    wall, rss, _ = measure(f"build-arc at num_aug {n}", cmd)
    size = disk_bytes(ours_dir)
    ids = len(json.loads((ours_dir / "identifiers.json").read_text()))
    print(f"ours     num_aug={n:<5} wall {wall:7.1f} s  peak RSS {rss / 1e9:6.2f} GB  disk {size / 1e9:6.2f} GB  "
          f"identifiers {ids:,}", flush=True)
    base, label = None, "reference (issue #2, same machine type, not this run)"
    if args.upstream_dir and n <= args.upstream_max_aug:
        ucmd = [sys.executable, "-m", "dataset.build_arc_dataset", "--input-file-prefix",
                str(Path(args.data_prefix).absolute()), *RECIPE, "--num-aug", str(n), "--output-dir", str(theirs_dir)]
        uwall, urss, _ = measure(f"upstream's builder at num_aug {n}", ucmd, cwd=args.upstream_dir)
        base, label = (uwall, urss, disk_bytes(theirs_dir)), "measured side by side in this run"
        print(f"upstream num_aug={n:<5} wall {uwall:7.1f} s  peak RSS {urss / 1e9:6.2f} GB  disk {base[2] / 1e9:6.2f} GB",
              flush=True)
        for line in parity(ours_dir, theirs_dir):
            print("  parity: " + line)
    elif n in UPSTREAM_REFERENCE:
        base = UPSTREAM_REFERENCE[n]
    return [(n, base[0] / wall, rss, base[1] / max(rss, 1), label)] if base else []


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
