"""The worker processes, without torch: one per device, their log lines relayed, stopped at the deadline.

    shards (`workdir.assign`) -> one process per worker (spawn; the caller's own process when there is one)
                              -> each runs `worker.run_units` on its units -> results on disk (`workdir.py`)

Workers write their log lines to `workers/w<i>.events` (the parent prints them, so they show in a notebook's
output) and their stdout and stderr to `workers/w<i>.log`. This module needs no torch: the worker's device is
chosen (CUDA_VISIBLE_DEVICES) before torch starts in it, which is why `worker.py` is imported only inside the
worker.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from trm_kaggle.atomic import atomic_write_text, open_log
from trm_kaggle.errors import describe
from trm_kaggle.lifetime import exit_with_parent
from trm_kaggle.progress import bars_of_this_process_only
from trm_kaggle.solve.workdir import Unit, WorkerSpec


@dataclass
class Outcome:
    """How a worker ended: `error` is None when it finished; `done` counts the units it answered; `stopped` when the
    deadline stopped it (its unfinished tasks ran out of time, not lost to a failure)."""

    worker: int
    device: str
    units: int
    done: int = 0
    pid: int | None = None
    exitcode: int | None = None
    error: str | None = None
    log: str | None = None
    plan: dict | None = field(default=None)
    unwritten: dict[str, str] = field(default_factory=dict)  # task id -> why its failed result is not on disk
    stopped: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


Emit = Callable[[str], None]


def event_writer(path: Path) -> Callable[[dict], None]:
    """Append one JSON line per event and flush it (the parent reads the file while the worker runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = os.fdopen(open_log(path), "a", buffering=1, encoding="utf-8")  # a planted link is never followed

    def write(event: dict) -> None:
        f.write(json.dumps(event) + "\n")
        f.flush()

    return write


def _child(spec: WorkerSpec) -> None:
    """A spawned worker: ends with its parent, output into its log file, its one device, then its units."""
    exit_with_parent(multiprocessing.parent_process().pid)  # a kernel killed mid-run leaves no GPU busy
    bars_of_this_process_only()  # the dataset builder's bars: no semaphore left for the parent's tracker
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    fd = open_log(spec.log)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for stream in (sys.stdout, sys.stderr):  # a log file: UTF-8 like every file, whatever the locale
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")
    if spec.visible_gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = spec.visible_gpu
    from trm_kaggle.solve.worker import run_units  # torch starts here, after the device is chosen

    write = event_writer(spec.events)
    run_units(spec, emit=lambda line: write({"line": line}),
              on_unit=lambda unit, unwritten: write({"unit": unit.index, "task": unit.task_id,
                                                     **({"unwritten": unwritten} if unwritten else {})}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every result is on disk: skip the interpreter's (slow, torch-heavy) teardown


@contextlib.contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    """Set environment variables for a child started inside the block (spawn copies os.environ)."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running at the deadline: stopped"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _read_plan(spec: WorkerSpec) -> dict | None:
    try:
        return json.loads(spec.plan_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class DeadlineReached(BaseException):
    """Raised in the one in-process worker at its stop time: what SIGTERM is to a spawned one. A BaseException, so
    that no task's own `except Exception` takes it for that task's failure and goes on to the next."""


@contextlib.contextmanager
def _alarm(stop_at: float | None) -> Iterator[Callable[[Callable[[], None]], None]]:
    """`DeadlineReached` raised in this thread at `stop_at` (a time.monotonic() value): the one bound of a step that
    no deadline check reaches (a single step of a very deep recursion can take minutes). Yields `shielded(fn)`,
    which runs `fn` with the alarm held off until it returns (a merge of the answers is never cut half-way). Only
    in the main thread of a system with `setitimer` (elsewhere nothing is armed, as before)."""
    armed = (stop_at is not None and hasattr(signal, "setitimer")
             and threading.current_thread() is threading.main_thread())
    state = {"held": False, "pending": False}

    def ring(_signum, _frame) -> None:
        if state["held"]:
            state["pending"] = True
            return
        raise DeadlineReached

    def shielded(fn: Callable[[], None]) -> None:
        state["held"] = True
        try:
            fn()
        finally:
            state["held"] = False
        if state["pending"]:
            raise DeadlineReached

    if not armed:
        yield lambda fn: fn()
        return
    previous = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(0.001, stop_at - time.monotonic()))
        yield shielded
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(spec: WorkerSpec, emit: Emit, on_answer: Callable[[], None] | None = None,
                   stop_at: float | None = None) -> Outcome:
    """The one worker in the caller's process (no spawn: nothing to shard). An exception costs its units.
    `on_answer()` runs after each unit (the caller merges what is answered so far). At `stop_at` (a
    time.monotonic() value) the worker is stopped wherever it is, as a spawned one is by SIGTERM (`_alarm`)."""
    from trm_kaggle.solve.worker import run_units

    out = Outcome(spec.worker, spec.device, len(spec.units), pid=os.getpid())
    spec.plan_file.unlink(missing_ok=True)  # an earlier run's

    try:
        with _alarm(stop_at) as shielded:
            def done(unit: Unit, unwritten: str | None) -> None:
                out.done += 1
                if unwritten:
                    out.unwritten[unit.task_id] = unwritten
                if on_answer is not None:
                    shielded(on_answer)

            run_units(spec, emit=emit, on_unit=done)
    except DeadlineReached:
        out.error = _describe_exit(None)  # as a spawned worker stopped at the deadline is described
        out.stopped = True
    except Exception as e:  # the worker failed as a whole (no device, unreadable weights, ...)
        out.error = describe(e)
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(spec.log, traceback.format_exc())
        out.log = str(spec.log)
    out.plan = _read_plan(spec)
    return out


def stop_workers(procs: list, kill_at: float) -> None:
    """SIGTERM to every worker still running (with SIGCONT: a stopped one takes it at once), SIGKILL to those
    still alive at `kill_at` (a time.monotonic() value): the whole grace ends there, however many workers."""
    for p in procs:
        if p.is_alive():
            p.terminate()
            with contextlib.suppress(OSError):
                os.kill(p.pid, signal.SIGCONT)
    for p in procs:
        p.join(max(0.0, kill_at - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()


def run_spawned(specs: list[WorkerSpec], emit: Emit, *, stop_at: float | None = None, kill_at: float | None = None,
                poll_s: float = 0.2, on_answer: Callable[[], None] | None = None,
                on_poll: Callable[[list[Outcome]], None] | None = None) -> list[Outcome]:
    """One spawned process per spec; relays their log lines until all have ended, stops any still running
    at `stop_at` (a time.monotonic() value), killing those still alive at `kill_at` (default 5 s later).
    `on_answer()` runs after a poll that saw units finish (the caller merges what is answered so far);
    `on_poll(outcomes)` at every poll (tests stop or kill workers with it)."""
    procs: list = []
    try:
        return _run_spawned(specs, emit, procs, stop_at=stop_at, kill_at=kill_at, poll_s=poll_s, on_answer=on_answer,
                            on_poll=on_poll)
    except BaseException:
        # whatever ends the wait early (Ctrl-C in a notebook, a callback that raises): the workers end with it,
        # before the caller's lock is released; they went on fine-tuning and writing in the work dir (and kept
        # their devices busy) until the caller's process ended, beside the next solve there
        stop_workers(procs, time.monotonic() + 5.0)
        for p in procs:
            p.join(1.0)  # reaped: no process of this call is left behind, not even a zombie
        raise


def _run_spawned(specs: list[WorkerSpec], emit: Emit, procs: list, *, stop_at: float | None, kill_at: float | None,
                 poll_s: float, on_answer: Callable[[], None] | None,
                 on_poll: Callable[[list[Outcome]], None] | None) -> list[Outcome]:
    """`run_spawned`'s work; each process is put in `procs` as it starts (the caller stops them if this raises)."""
    ctx = multiprocessing.get_context("spawn")  # never fork: CUDA and threads do not survive it
    outcomes, offsets = [], []
    for spec in specs:
        spec.events.parent.mkdir(parents=True, exist_ok=True)
        for path in (spec.events, spec.log, spec.plan_file):
            path.unlink(missing_ok=True)  # this run's files (they are ours: `workers/` belongs to the solver)
        p = ctx.Process(target=_child, args=(spec,), name=f"trm-kaggle-worker-{spec.worker}", daemon=True)
        with _environ(CUDA_VISIBLE_DEVICES=spec.visible_gpu):
            p.start()
        procs.append(p)
        offsets.append(0)
        outcomes.append(Outcome(spec.worker, spec.device, len(spec.units), pid=p.pid, log=str(spec.log)))

    def relay() -> int:
        finished = 0
        for i, spec in enumerate(specs):
            try:
                with open(spec.events, "rb") as f:
                    f.seek(offsets[i])
                    data = f.read()
            except OSError:
                continue
            complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
            offsets[i] += len(complete)
            for raw in complete.splitlines():
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if "line" in event:
                    emit(f"[worker {spec.worker}] {event['line']}")
                if "unit" in event:
                    outcomes[i].done += 1
                    finished += 1
                    if isinstance(event.get("unwritten"), str) and isinstance(event.get("task"), str):
                        outcomes[i].unwritten[event["task"]] = event["unwritten"]
        return finished

    while True:
        if relay() and on_answer is not None:
            on_answer()
        if on_poll is not None:
            on_poll(outcomes)
        if not any(p.is_alive() for p in procs):
            break
        if stop_at is not None and time.monotonic() >= stop_at:
            for p, out in zip(procs, outcomes):
                out.stopped = p.is_alive()
            stop_workers(procs, stop_at + 5.0 if kill_at is None else kill_at)
            break
        time.sleep(poll_s)
    reaped = time.monotonic() + 1.0  # ended or killed: gone at once (one in uninterruptible I/O is left behind)
    for p, out, spec in zip(procs, outcomes, specs):
        p.join(max(0.0, reaped - time.monotonic()))
        out.exitcode = p.exitcode
        if p.exitcode != 0:
            last = _last_line(spec.log)
            out.error = _describe_exit(p.exitcode) + (f" ({last})" if last else "")
            if p.exitcode is not None and p.exitcode > 0 and not spec.log.exists():  # `_child` opens it first:
                # the process ended while it started, its message on this process's stderr (a script re-run
                # without its `__main__` guard: `job._refuse_in_a_starting_worker`)
                out.error += (" as it started, before its work (its message is on the caller's standard error; a "
                              'script that calls solve() with several workers calls it under `if __name__ == '
                              '"__main__":`)')
                out.log = None
    relay()
    for out, spec in zip(outcomes, specs):
        out.plan = _read_plan(spec)
    return outcomes
