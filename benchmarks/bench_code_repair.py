"""Benchmark: `trm-kaggle build-code-repair` on this interpreter's standard library.

    python benchmarks/bench_code_repair.py                    # 64x48 characters, ruff pairs if installed
    python benchmarks/bench_code_repair.py --grid 8x32 --strip-docstrings --tokens bpe

Runs the command as users do (a subprocess) and reports validated pairs per second of
wall clock (every pair written, after validation and deduplication, over the whole
command's time: start-up, corpus listing, BPE training and the final writes included)
and the peak resident memory of the process tree (workers included, sampled every
50 ms). The load average is printed with it: on a shared machine it explains a slow run.
The dataset is deleted afterwards, with its scratch folder, whatever ends the run: a stop (Ctrl-C, SIGTERM)
ends the command first (it stops its workers), then says its one line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import check_options, loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    from bench_build_arc import measure


def run(extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-code-repair-") as scratch:  # removed however the run ends
        return measured(extra, Path(scratch) / "ds")


def measured(extra: list[str], out: Path) -> dict:
    """One build into `out` (a child ended before a stop or an error leaves here), its figures."""
    cmd = [sys.executable, "-m", "trm_kaggle", "build-code-repair", "--output-dir", str(out), "--no-progress", *extra]
    load = os.getloadavg()[0]
    wall, peak, stdout = measure("build-code-repair", cmd)
    info = json.loads((out / "build_info.json").read_text())
    pairs = sum(sum(per_type.values()) for per_type in info["pairs"].values())
    return {"pairs": pairs, "wall_s": wall, "pairs_per_s": pairs / wall, "peak_rss_mb": peak / 1e6,
            "load_before": load, "files": sum(info["files"].values()), "lint": info["lint"],
            "summary": stdout.splitlines()[0]}


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid", default="64x48")
    p.add_argument("--tokens", default="char", choices=["char", "bpe"])
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--strip-docstrings", action="store_true")
    p.add_argument("--lint", default="auto", choices=["auto", "on", "off"])
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    check_options(counts={"--workers": args.workers, "--repeat": args.repeat})
    extra = ["--grid", args.grid, "--tokens", args.tokens, "--workers", str(args.workers), "--lint", args.lint]
    if args.strip_docstrings:
        extra.append("--strip-docstrings")
    print(f"build-code-repair on the standard library of Python {sys.version.split()[0]}, {os.cpu_count()} CPUs: "
          + " ".join(extra))
    for _ in range(args.repeat):
        r = run(extra)
        print(f"{r['pairs']:,} validated pairs from {r['files']:,} files in {r['wall_s']:.1f} s wall: "
              f"{r['pairs_per_s']:,.0f} pairs/s; peak RSS (process tree) {r['peak_rss_mb']:.0f} MB; "
              f"load average before {r['load_before']:.1f}; linter pairs {'on' if r['lint'] else 'off'}")


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
