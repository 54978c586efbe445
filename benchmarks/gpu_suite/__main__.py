"""The GPU proof: prepare everything a bare GPU machine lacks here, then run it there in one command.

    python -m benchmarks.gpu_suite prepare [--upstream-dir DIR] [--out .gpu_suite]    # here, with PyPI
    python -m benchmarks.gpu_suite run --part all --out DIR                            # there: one lend, 480 s
    python -m benchmarks.gpu_suite run --part 3 --out DIR                              # one part alone
    python -m benchmarks.gpu_suite run --part all --out DIR --smoke                    # CPU, tiny, seconds

`prepare` prints the exact command for the GPU machine. `run` shares its --budget between the stages of the
parts asked for, by priority (benchmarks/gpu_suite/schedule.py); each part writes gpu_report.json and
gpu_report.md (+ PNGs) into --out (with --part all: --out/part1 ...) after every stage, and prints a short
table at the end; a stage that fails or is skipped is recorded and the others still run. Exit status: 0
when every part ran clean, 1 when a stage failed or was skipped, 2 for bad input. A stop (Ctrl-C, SIGTERM) is one
`interrupted: ...` line and status 130 or 143, as the package's commands end: `prepare` leaves its output as it
was, `run` leaves its reports saying `stopped` (what ran, what did not) and still packs them. See docs/gpu.md.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from trm_kaggle.errors import TRMError, os_error_line

PARTS = {1: "part1_training", 2: "part2_learning", 3: "part3_evaluation"}
BUDGET_S = 480.0  # --part all: one 10-minute command on a borrowed GPU, compile included
PART_BUDGET_S = 480.0  # one part alone
SMOKE_BUDGET_S = 300.0  # generous: CI machines are shared


def run_parts(parts: list[int], out: Path, ctx, budget_s: float) -> list[dict]:
    """Every stage of `parts` in one schedule inside `budget_s` seconds; each part's report written after each
    of its stages and at the end; returns the reports."""
    import importlib

    from benchmarks.gpu_suite import schedule
    from benchmarks.gpu_suite.report import PartReport, print_summary

    mods = {n: importlib.import_module(f"benchmarks.gpu_suite.{PARTS[n]}") for n in parts}
    reports = {n: PartReport(n, mods[n].TITLE, ctx.smoke, out / f"part{n}" if len(parts) > 1 else out, budget_s)
               for n in parts}
    states: dict[int, dict] = {}
    try:
        try:
            for n in parts:
                try:
                    states[n] = mods[n].setup(reports[n], ctx)
                except Exception as e:  # noqa: BLE001 - recorded in the part's report; the other parts still run
                    reports[n].fail(e)
            planned = schedule.plan({n: mods[n].stages() for n in parts}, budget_s)
            schedule.run(planned, reports, states, ctx, budget_s, ctx.say)
        finally:
            for n, st in states.items():
                mods[n].teardown(st)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM (`interrupts.Terminated`)
        stopped(e, list(reports.values()))
        raise
    done = [reports[n].finish() for n in parts]
    for n, d in zip(parts, done):
        print_summary(d, ctx.say)
        ctx.say(f"report: {reports[n].out / 'gpu_report.md'}")
    return done


def stopped(e: KeyboardInterrupt, reports: list) -> None:
    """A stopped run: each report rewritten with status `stopped` (the stage it was in, those that ran, those that
    did not) before the command ends, so that none says `running` once its process is gone; the stop's one line
    (`interrupts.interrupted` prints it) names them."""
    from benchmarks.gpu_suite.report import REPORT_MD

    with later_stops_wait():
        for rep in reports:
            with contextlib.suppress(OSError):  # a full disk: the stop's line is still said
                rep.stop(str(e) or "stopped by SIGINT (Ctrl-C)")
    said = "the reports say what ran and what did not: " + ", ".join(str(r.out / REPORT_MD) for r in reports)
    e.args = (f"{e}; {said}" if str(e) else said,)


@contextlib.contextmanager
def later_stops_wait() -> Iterator[None]:
    """After a stop: a later Ctrl-C or SIGTERM inside the block is dropped, so that it cannot cut the bounded work
    that records the stop (the reports, their archive)."""
    from trm_kaggle.interrupts import FirstStopOnly

    stops = FirstStopOnly()
    stops.hold()
    try:
        yield
    finally:
        stops.give_back()


def check_run_paths(args) -> None:
    """`--out` and `--pack` against the prepared folder `run` reads, before any work: `prepare` builds that folder
    whole, so a report written into it (or an --out that holds it) would keep `prepare` from replacing it."""
    from trm_kaggle.outputs import Input, Output, check_io

    from benchmarks.gpu_suite.context import DEFAULT_PREPARED

    # every path as given (`--out ''` as Path is `.`), and whether each can be written: a --pack refused only
    # once the whole suite had run spent a lend's minutes
    check_io([Input(args.prepared or DEFAULT_PREPARED, "--prepared", tree=True)],
             [Output(args.out, "--out", "folder"), Output(args.pack, "--pack")])
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise TRMError(f"--out {out}: exists and is not a folder")
    if args.pack and (not args.pack.endswith(".tar.gz") or Path(args.pack).resolve().is_relative_to(out.resolve())):
        raise TRMError(f"--pack {args.pack}: must end in .tar.gz and lie outside --out {out}")
    # reports this run does not replace (a `--part 3` into the --out of an earlier `--part all`) were packed beside
    # its own, one of them still saying "running"
    parts = sorted(PARTS) if args.part == "all" else [int(args.part)]
    ours = {out / f"part{n}" for n in parts} if len(parts) > 1 else {out}
    stale = [p for p in sorted(out.glob("gpu_report.json")) + sorted(out.glob("part*/gpu_report.json"))
             if p.parent not in ours]
    if stale:
        raise TRMError(f"--out {out} holds the report of another run ({stale[0]}), which this run would not replace "
                       "and --pack would carry beside its own: choose an empty --out, or remove that report")


def cmd_run(args) -> int:
    check_run_paths(args)
    budget = args.budget or (SMOKE_BUDGET_S if args.smoke else BUDGET_S if args.part == "all" else PART_BUDGET_S)
    if budget <= 0:
        raise TRMError(f"--budget must be > 0 seconds, got {budget:g}")

    import torch

    from benchmarks.gpu_suite.context import make_context

    ctx = make_context(args.smoke, args.prepared, args.upstream_dir, args.device)
    parts = sorted(PARTS) if args.part == "all" else [int(args.part)]
    out = Path(args.out)
    ctx.say(f"GPU suite on {ctx.device}{' (smoke mode)' if ctx.smoke else ''}; budget {budget:.0f} s; prepared "
            f"folder {ctx.prepared}{'' if ctx.prepared.is_dir() else ' (absent)'}; upstream: "
            f"{ctx.upstream or ctx.upstream_why}")
    threads = torch.get_num_threads()
    if ctx.smoke and ctx.device.type == "cpu":
        # a code-path check on a shared CI machine: one thread is several times faster there than threads
        # contending for its cores (training sets its own count; the schedule runs in this one thread)
        torch.set_num_threads(1)

    def close() -> None:
        torch.set_num_threads(threads)
        if args.pack:
            pack(out, Path(args.pack), ctx.say)

    try:
        reports = run_parts(parts, out, ctx, budget)
    except KeyboardInterrupt:  # the reports say `stopped` (`run_parts`); the archive still carries them back
        with later_stops_wait():
            close()
        raise
    except BaseException:
        close()
        raise
    close()
    return 0 if all(d["status"] == "ok" for d in reports) else 1


def pack(out: Path, archive: Path, say) -> None:
    """Every file under `out` in one .tar.gz (written whole or not at all): a lend brings back at most a few
    files, and the three parts write ten."""
    import os
    import tarfile
    import tempfile

    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{archive.name}.", dir=archive.parent)
    try:
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            if out.is_dir():
                tar.add(out, arcname=out.name)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    say(f"reports packed: {archive}")


def cmd_prepare(args) -> int:
    from trm_kaggle.names import blank_path_problem

    from benchmarks.gpu_suite.prepare import prepare

    if problem := blank_path_problem(args.out):
        raise TRMError(f"--out {problem}")

    prepare(args.out, upstream_dir=args.upstream_dir, download=not (args.no_download or args.smoke),
            smoke=args.smoke, max_mib=args.max_mib, python=args.python)
    return 0


def python_version(text: str) -> str:
    if not re.fullmatch(r"3\.\d{1,2}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPython version such as 3.12")
    return text


def build_parser() -> argparse.ArgumentParser:
    from trm_kaggle.config import WEEK_S, bounded_number

    from benchmarks.gpu_suite.context import DEFAULT_PREPARED, UPSTREAM_ENV

    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(prog="python -m benchmarks.gpu_suite", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("prepare", help="wheels, upstream's code and the datasets for the GPU machine")
    pr.add_argument("--out", default=str(DEFAULT_PREPARED), help="the prepared folder (default .gpu_suite/)")
    pr.add_argument("--upstream-dir", default=None, help=f"upstream's code (default: ${UPSTREAM_ENV})")
    pr.add_argument("--no-download", action="store_true", help="no PyPI: ship our wheel only (offline)")
    pr.add_argument("--smoke", action="store_true", help="tiny datasets, no download (tests)")
    pr.add_argument("--max-mib", type=bounded_number("--max-mib", 0, 1e6, float), default=60.0,
                    help="refuse a prepared folder larger than this")
    pr.add_argument("--python", default="3.12", metavar="X.Y", type=python_version,
                    help="the GPU machine's Python, for which the wheels are chosen (default 3.12; this machine's "
                         "own version rehearses the install here)")
    pr.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run", help="run the parts (all: one lend) and write their reports")
    r.add_argument("--part", required=True, choices=["1", "2", "3", "all"])
    r.add_argument("--out", required=True, help="folder for gpu_report.json, gpu_report.md and PNGs")
    r.add_argument("--pack", default=None, metavar="FILE.tar.gz",
                   help="also write everything under --out into this one archive at the end (a lend's way back)")
    r.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, seconds (what CI runs)")
    r.add_argument("--prepared", default=None, help="the folder `prepare` wrote (default .gpu_suite/)")
    r.add_argument("--upstream-dir", default=None,
                   help=f"upstream's code (default: ${UPSTREAM_ENV}, else the prepared copy)")
    r.add_argument("--device", default=None, help="default: cuda when available (cpu in smoke mode)")
    r.add_argument("--budget", "--cap-s", type=bounded_number("--budget", 1e-3, WEEK_S, float), default=None,
                   dest="budget",
                   help=f"seconds for all the stages asked for, shared by priority (default {BUDGET_S:.0f}; "
                        f"{SMOKE_BUDGET_S:.0f} with --smoke)")
    r.set_defaults(func=cmd_run)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # a number out of its bounds: one line (`bounded_number`)
        return args.func(args)
    except TRMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # SIGTERM and SIGHUP stop it as Ctrl-C does, and a stop is the package's one `interrupted` line and status
    from benchmarks.entry import command

    sys.exit(command(main))
