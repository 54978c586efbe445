"""One lend of a GPU: every stage of the three parts in one command, the time shared by priority.

    run --part all --budget 480

Each stage has a share of the budget (seconds at the full `FULL_BUDGET_S`, scaled to the budget given, the
shares of the stages not run left out) and a least time it can do anything useful in (`min_s`). Stages run in
`ORDER`, the targets' figures first. Before a stage starts, the shares of the stages after it are reserved
from the time left, highest priority first, as far as they go while this stage keeps its least time; the
stage may use everything else (its share and what earlier stages left). A stage whose allowance is under
its least time is skipped, and said so. So the solve's share is set aside before the evaluation starts, and
an evaluation that overran cannot eat it.

A stage watches its allowance itself (`PartReport.left()`); a stage that runs past it by more than its
`grace`, or past the budget by more than `OVERRUN_S`, is ended (`StageTimeout`), recorded as failed, and the
next stage runs: the stages of a run end at most `OVERRUN_S` after its budget (480 + 30 s, under 9 minutes
with the interpreter's start and the last reports). Every part's report is written as each stage starts and
after it, so a command killed from outside leaves the reports of the stages done; a command stopped by Ctrl-C or
SIGTERM marks the stage it was in `stopped` and the later ones not run, and its reports say `stopped`.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from benchmarks.gpu_suite.report import NOT_RUN_STOPPED, PartReport, PartTimeout

#: The budget the shares are given for: one command of a 10-minute lend, compile included, with a minute
#: for the machine's Python, imports and the last reports.
FULL_BUDGET_S = 480.0
#: (part, stage): the order of priority. Ours' best variant and upstream's compiled bf16 step first (the
#: throughput target), then the CUDA tests, parity, evaluation, the solve, the Sudoku curves, the training
#: recipes at the paper's scale, the largest batch, the profile, and the remaining throughput variants with
#: whatever is left.
ORDER = ((1, "environment"), (1, "throughput_best"), (1, "cuda_tests"), (1, "parity"), (3, "evaluation"),
         (3, "solve"), (3, "projection"), (2, "learning"), (2, "recipes"), (1, "max_batch"), (1, "profile"),
         (1, "throughput_rest"))


#: No stage runs on past the budget by more than this (a grace cannot carry a run past it).
OVERRUN_S = 30.0


def grace(allowance: float) -> float:
    """Seconds a stage may run past its allowance before it is ended (a compile cannot stop in the middle)."""
    return max(10.0, 0.15 * allowance)


class StageTimeout(PartTimeout):
    """A stage ran past its allowance and its grace."""


@dataclass(frozen=True)
class Stage:
    """One stage of a part: `run(rep, ctx, state)` fills `rep`; `share` seconds of `FULL_BUDGET_S`; `min_s`: the
    least allowance it starts with (off smoke mode)."""

    name: str
    run: Callable
    share: float
    min_s: float


@dataclass
class Planned:
    part: int
    stage: Stage
    share_s: float  # its share of this run's budget


def plan(stages: dict[int, list[Stage]], budget_s: float) -> list[Planned]:
    """The stages of the parts given, in `ORDER`, with their shares scaled to `budget_s`."""
    by_name = {(n, s.name): s for n, part in stages.items() for s in part}
    missing = [k for k in by_name if k not in ORDER]
    if missing:
        raise ValueError(f"stages without a place in ORDER: {missing}")
    chosen = [(n, by_name[(n, name)]) for n, name in ORDER if (n, name) in by_name]
    total = sum(s.share for _, s in chosen) or 1.0
    return [Planned(n, s, s.share * budget_s / total) for n, s in chosen]


def allowance(planned: list[Planned], i: int, left_s: float, min_s: float) -> float:
    """Seconds stage `i` may use with `left_s` left: all of it but the shares of the later stages, reserved in
    priority order while this stage keeps `min_s` (a later share that does not fit ends the reserving)."""
    reserved = 0.0
    for later in planned[i + 1:]:
        if left_s - reserved - later.share_s < min_s:
            break
        reserved += later.share_s
    return left_s - reserved


@contextlib.contextmanager
def alarm(seconds: float, what: str) -> Iterator[None]:
    """Raise StageTimeout in the main thread after `seconds` (where the platform has SIGALRM)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise StageTimeout(f"{what} ran past its allowance")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run(planned: list[Planned], reports: dict[int, PartReport], states: dict[int, dict], ctx, budget_s: float,
        say: Callable[[str], None] = print) -> list[dict]:
    """Run the planned stages inside `budget_s` seconds from now; returns what each got and did (also recorded
    in its part's report under `schedule`)."""
    start = time.monotonic()
    end = start + budget_s
    log: list[dict] = []
    began = start
    try:
        for i, p in enumerate(planned):
            began = time.monotonic()
            rep, name = reports[p.part], p.stage.name
            least = 0.0 if ctx.smoke else p.stage.min_s
            left = end - time.monotonic()
            # smoke mode checks the code paths on a shared CPU: every stage may use what is left (tests plant the rest)
            given = left if ctx.smoke else allowance(planned, i, left, least)
            entry = {"stage": name, "part": p.part, "share_s": round(p.share_s, 1), "allowance_s": round(given, 1),
                     "min_s": least, "seconds": None, "status": None}
            log.append(entry)
            rep.data["schedule"].append(entry)
            if rep.data["status"] == "failed":  # its set-up failed: nothing of this part can run
                entry["status"] = "not run (the part failed)"
            elif given < (need := max(least, 0.5 if ctx.smoke else 1.0)):
                # the floor itself is said: "0 s left ..., it needs at least 0 s" contradicted itself
                entry["status"] = "skipped"
                rep.skip(f"stage {name}", f"would not fit: {max(given, 0):.1f} s left for it after reserving the "
                                          f"later stages' shares, it needs at least {need:.1f} s", cut=True)
                say(f"[{time.monotonic() - start:5.0f} s] part {p.part} {name}: skipped ({max(given, 0):.1f} s left "
                    f"for it, needs {need:.1f} s)")
            else:
                say(f"[{time.monotonic() - start:5.0f} s] part {p.part} {name}: up to {given:.0f} s (share "
                    f"{p.share_s:.0f} s)")
                rep.begin(given)
                entry["status"] = "running"
                rep.write()  # a kill during this stage leaves it named
                fresh_start(ctx)
                t, cpu = time.monotonic(), time.process_time()
                try:
                    with alarm(min(given + grace(given), end + OVERRUN_S - time.monotonic()), f"stage {name}"):
                        p.stage.run(rep, ctx, states[p.part])
                    entry["status"] = "ran"
                except StageTimeout as e:
                    entry["status"] = "ended at its allowance"
                    rep.note(f"stage {name}: {e} of {given:.0f} s (+{grace(given):.0f} s grace) and was ended")
                    fresh_start(ctx)  # what it left half-built
                except Exception as e:  # noqa: BLE001 - a unit outside rep.stage: recorded, the next stage runs
                    entry["status"] = "failed"
                    rep.data["stages"].setdefault(name, {"status": "failed", "seconds": None,
                                                         "error": f"{type(e).__name__}: {e}"})
                entry["seconds"] = round(time.monotonic() - t, 1)
                entry["cpu_s"] = round(time.process_time() - cpu, 1)  # this process's threads (not its children)
            rep.write()  # a command killed from outside leaves what was done
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM (`interrupts.Terminated`): the reports say what ran, what did not
        stopped(planned[len(log):], log, reports, time.monotonic() - began)
        raise
    return log


def stopped(left: list[Planned], log: list[dict], reports: dict[int, PartReport], seconds: float) -> None:
    """The command was stopped: the stage it was in says `stopped` (`seconds` into it), the stages it had not
    reached (`left`) say they did not run; `PartReport.stop` then writes each report with its status."""
    if log and log[-1]["status"] == "running":
        log[-1]["status"], log[-1]["seconds"] = "stopped", round(seconds, 1)
    elif log and log[-1]["status"] is None:  # stopped before its entry was settled: it never started
        log[-1]["status"] = NOT_RUN_STOPPED
    for p in left:
        entry = {"stage": p.stage.name, "part": p.part, "share_s": round(p.share_s, 1), "allowance_s": None,
                 "min_s": None, "seconds": None, "status": NOT_RUN_STOPPED}
        log.append(entry)
        reports[p.part].data["schedule"].append(entry)


def fresh_start(ctx) -> None:
    """Before each stage: no compiled graphs of an earlier stage (dynamo counts recompiles of one function
    across every model, and past its limit runs it uncompiled, silently), no cached memory held."""
    import torch

    torch._dynamo.reset()
    if ctx.cuda:
        torch.cuda.empty_cache()

