"""The GPU proof: prepare everything a bare GPU machine lacks here, then run three parts there.

    python -m benchmarks.gpu_suite prepare [--upstream-dir DIR] [--out .gpu_suite]    # here, with PyPI
    python -m benchmarks.gpu_suite run --part 1 --out DIR                              # there, one per part
    python -m benchmarks.gpu_suite run --part all --out DIR --smoke                    # CPU, tiny, seconds

`prepare` prints the exact commands for the GPU machine. Each part writes gpu_report.json and gpu_report.md
(+ PNGs) into --out (with --part all: --out/part1 ...) and prints a short table; a part that fails records why
and the others still run. Exit status: 0 when every part ran clean, 1 when one failed or a stage of it did,
2 for bad input. See docs/gpu.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from trm_kaggle.errors import TRMError, os_error_line

PARTS = {1: "part1_training", 2: "part2_learning", 3: "part3_evaluation"}
CAP_S = 540.0  # 9 minutes: one part, one 10-minute command on a borrowed GPU
SMOKE_CAP_S = 300.0  # generous: CI machines are shared


def run_part(n: int, out: Path, ctx, cap_s: float) -> dict:
    """Run part n into `out` under its time cap; always writes its report (failed or not) and returns it."""
    import importlib

    from benchmarks.gpu_suite.report import PartReport, hard_cap, print_summary

    mod = importlib.import_module(f"benchmarks.gpu_suite.{PARTS[n]}")
    rep = PartReport(n, mod.TITLE, ctx.smoke, out, cap_s)
    try:
        with hard_cap(cap_s + 15):  # the parts watch rep.left() themselves; this ends one that does not return
            mod.run(rep, ctx)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - recorded in the report; the next part still runs
        rep.fail(e)
    d = rep.finish()
    print_summary(d, ctx.say)
    ctx.say(f"report: {out / 'gpu_report.md'}")
    return d


def cmd_run(args) -> int:
    import torch

    from benchmarks.gpu_suite.context import make_context

    ctx = make_context(args.smoke, args.prepared, args.upstream_dir, args.device)
    parts = sorted(PARTS) if args.part == "all" else [int(args.part)]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise TRMError(f"--out {out}: exists and is not a folder")
    cap = args.cap_s or (SMOKE_CAP_S if args.smoke else CAP_S)
    ctx.say(f"GPU suite on {ctx.device}{' (smoke mode)' if ctx.smoke else ''}; prepared folder {ctx.prepared}"
            f"{'' if ctx.prepared.is_dir() else ' (absent)'}; upstream: {ctx.upstream or ctx.upstream_why}")
    statuses = []
    threads = torch.get_num_threads()
    try:
        for n in parts:
            if ctx.smoke and ctx.device.type == "cpu":
                # a code-path check on a shared CI machine: one thread is several times faster there than
                # threads contending for its cores (set before each part: training sets its own count)
                torch.set_num_threads(1)
            d = run_part(n, out / f"part{n}" if len(parts) > 1 else out, ctx, cap)
            statuses.append(d["status"])
    finally:
        torch.set_num_threads(threads)
    return 0 if all(s == "ok" for s in statuses) else 1


def cmd_prepare(args) -> int:
    from benchmarks.gpu_suite.prepare import prepare

    prepare(args.out, upstream_dir=args.upstream_dir, download=not (args.no_download or args.smoke),
            smoke=args.smoke, max_mib=args.max_mib, python=args.python)
    return 0


def python_version(text: str) -> str:
    if not re.fullmatch(r"3\.\d{1,2}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPython version such as 3.12")
    return text


def build_parser() -> argparse.ArgumentParser:
    from benchmarks.gpu_suite.context import DEFAULT_PREPARED, UPSTREAM_ENV

    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_suite", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("prepare", help="wheels, upstream's code and the datasets for the GPU machine")
    pr.add_argument("--out", default=str(DEFAULT_PREPARED), help="the prepared folder (default .gpu_suite/)")
    pr.add_argument("--upstream-dir", default=None, help=f"upstream's code (default: ${UPSTREAM_ENV})")
    pr.add_argument("--no-download", action="store_true", help="no PyPI: ship our wheel only (offline)")
    pr.add_argument("--smoke", action="store_true", help="tiny datasets, no download (tests)")
    pr.add_argument("--max-mib", type=float, default=60.0, help="refuse a prepared folder larger than this")
    pr.add_argument("--python", default="3.12", metavar="X.Y", type=python_version,
                    help="the GPU machine's Python, for which the wheels are chosen (default 3.12; this machine's "
                         "own version rehearses the install here)")
    pr.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run", help="run one part (or all) and write its report")
    r.add_argument("--part", required=True, choices=["1", "2", "3", "all"])
    r.add_argument("--out", required=True, help="folder for gpu_report.json, gpu_report.md and PNGs")
    r.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, seconds (what CI runs)")
    r.add_argument("--prepared", default=None, help="the folder `prepare` wrote (default .gpu_suite/)")
    r.add_argument("--upstream-dir", default=None,
                   help=f"upstream's code (default: ${UPSTREAM_ENV}, else the prepared copy)")
    r.add_argument("--device", default=None, help="default: cuda when available (cpu in smoke mode)")
    r.add_argument("--cap-s", type=float, default=None, help=f"time cap per part (default {CAP_S:.0f} s)")
    r.set_defaults(func=cmd_run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TRMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
