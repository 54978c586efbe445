"""Sharding the tasks across worker processes, one device each, and what the workers leave on disk.

    challenges -> units (one well-formed task each, the first max_tasks) -> `assign`: deterministic, balanced
               -> one process per worker (spawn; the caller's own process when there is one worker)
               -> each unit's result.json in the work directory -> `collect`: candidates for the submission

A task's answer depends on the task, the weights and the settings alone: each task gets its own augmented
dataset (augmentations drawn from generators keyed by its id, puzzle identifiers from 1), its own
fine-tuning run and its own vote. So the merged submission is the same for any number of workers (tested
on CPU with one and two), and a worker that raises, runs out of memory or is killed costs only the tasks
it had not finished: they keep the fallback answers written before any model work started.

Workers write their log lines to `workers/w<i>.events` (the parent prints them, so they show in a notebook's
output), their stdout and stderr to `workers/w<i>.log`, and a result per task to `units/u<index>/result.json`.
This module needs no torch: the worker's device is chosen (CUDA_VISIBLE_DEVICES) before torch starts in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.data.arc import MAX_GRID, parse_task
from trm_kaggle.data.build_arc import task_fits
from trm_kaggle.errors import DataError, describe
from trm_kaggle.lifetime import exit_with_parent

RESULT = "result.json"
KEEP_CANDIDATES = 10  # per test input: make_submission skips invalid or repeated grids, so keep a few


@dataclass(frozen=True)
class Unit:
    """One task of the challenges file; `index` (its position there) names its directory, never its id."""

    index: int
    task_id: str
    test_inputs: int
    train_pairs: int

    @property
    def name(self) -> str:
        return f"u{self.index:05d}"


def make_units(challenges: dict, max_tasks: int | None = None, canvas: int = MAX_GRID
               ) -> tuple[list[Unit], dict[str, str]]:
    """Units for the well-formed tasks among the first `max_tasks` whose grids fit the model's `canvas`;
    {task id: why not} for the others."""
    units, left_out = [], {}
    for index, (task_id, task) in enumerate(challenges.items()):
        if max_tasks is not None and index >= max_tasks:
            break
        try:
            parsed = parse_task(str(task_id), task, "challenges")
        except DataError as e:
            left_out[str(task_id)] = str(e)
            continue
        if not task_fits(parsed, canvas):
            left_out[str(task_id)] = f"a grid larger than the model's {canvas}x{canvas} canvas"
            continue
        units.append(Unit(index, str(task_id), len(parsed.test_inputs), len(parsed.train)))
    return units, left_out


def assign(units: list[Unit], workers: int) -> list[list[Unit]]:
    """Split units across workers: largest first to the least loaded (ties to the lowest index), so the
    split depends only on the units and the worker count. Each worker's units stay in file order."""
    shards: list[list[Unit]] = [[] for _ in range(workers)]
    load = [0] * workers
    for unit in sorted(units, key=lambda u: (-u.test_inputs, u.index)):
        w = min(range(workers), key=lambda i: (load[i], i))
        shards[w].append(unit)
        load[w] += 1 + unit.test_inputs  # fine-tuning costs the same per task, inference grows with test inputs
    return [sorted(s, key=lambda u: u.index) for s in shards]


# ---------------------------------------------------------------------------
# Results on disk
# ---------------------------------------------------------------------------


def task_digest(task: Any) -> str:
    return hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()[:16]


def unit_dir(work: str | os.PathLike, unit: Unit) -> Path:
    return Path(work) / "units" / unit.name


def write_result(work: str | os.PathLike, unit: Unit, key: dict, candidates: dict[int, list], report: dict,
                 complete: bool) -> Path:
    """`units/<name>/result.json`: the task's candidates per test index (best first) and its report.

    `complete` says the task got every planned fine-tuning step and every prediction; only such a result is
    reused by a later run with the same `key` (task, weights, settings)."""
    path = unit_dir(work, unit) / RESULT
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"task": unit.task_id, "key": key, "complete": complete, "report": report,
                             "candidates": {str(i): [g.tolist() if hasattr(g, "tolist") else g
                                                     for g in grids[:KEEP_CANDIDATES]]
                                            for i, grids in candidates.items()}})
    return path


def read_result(work: str | os.PathLike, unit: Unit) -> dict | None:
    """The unit's result, or None when there is none (or it is unreadable, or of another task)."""
    try:
        result = json.loads((unit_dir(work, unit) / RESULT).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or result.get("task") != unit.task_id or \
            not isinstance(result.get("candidates"), dict):
        return None
    return result


def reusable(result: dict | None, key: dict) -> bool:
    return bool(result) and result.get("complete") is True and result.get("key") == key


def collect(work: str | os.PathLike, units: list[Unit], keys: dict[int, dict]
            ) -> tuple[dict[tuple[str, int], list], dict[str, dict]]:
    """Candidates {(task id, test index): grids} and reports {task id: report} of every unit whose result was
    made with its key (`keys[unit.index]`: a result of other settings or another task is ignored)."""
    candidates, reports = {}, {}
    for unit in units:
        result = read_result(work, unit)
        if result is None or result.get("key") != keys[unit.index]:
            continue
        for i, grids in result["candidates"].items():
            if str(i).isdigit() and isinstance(grids, list):
                candidates[(unit.task_id, int(i))] = grids
        reports[unit.task_id] = {**(result.get("report") or {}), "complete": bool(result.get("complete"))}
    return candidates, reports


# ---------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------


@dataclass
class WorkerSpec:
    """Everything a worker needs (picklable: it crosses into a spawned process)."""

    worker: int
    device: str  # a SolveConfig.device value, as the worker sees its devices
    units: list[Unit]
    tasks: dict[str, dict]  # the units' tasks, as the parent read them (workers never re-read the file)
    config: str  # the SolveConfig, as JSON
    key: dict  # what a reusable result must have been made with (`reusable`)
    work: str
    start: float  # the kernel's start (time.time()), for elapsed times in log lines
    deadline: float | None  # time.time() by which every answer must be in
    threads: int | None = None  # CPU threads (torch.set_num_threads)
    visible_gpu: str | None = None  # CUDA_VISIBLE_DEVICES of a spawned worker
    workers: int = 1  # how many workers this run has (CPU workers share the machine's memory)

    @property
    def events(self) -> Path:
        return Path(self.work) / "workers" / f"w{self.worker}.events"

    @property
    def log(self) -> Path:
        return Path(self.work) / "workers" / f"w{self.worker}.log"

    @property
    def plan_file(self) -> Path:
        return Path(self.work) / "workers" / f"w{self.worker}.plan.json"


@dataclass
class Outcome:
    """How a worker ended: `error` is None when it finished; `done` counts the units it answered."""

    worker: int
    device: str
    units: int
    done: int = 0
    pid: int | None = None
    exitcode: int | None = None
    error: str | None = None
    log: str | None = None
    plan: dict | None = field(default=None)

    def as_dict(self) -> dict:
        return asdict(self)


Emit = Callable[[str], None]


def event_writer(path: Path) -> Callable[[dict], None]:
    """Append one JSON line per event and flush it (the parent reads the file while the worker runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a", buffering=1)

    def write(event: dict) -> None:
        f.write(json.dumps(event) + "\n")
        f.flush()

    return write


def _child(spec: WorkerSpec) -> None:
    """A spawned worker: ends with its parent, output into its log file, its one device, then its units."""
    exit_with_parent(multiprocessing.parent_process().pid)  # a kernel killed mid-run leaves no GPU busy
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(spec.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if spec.visible_gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = spec.visible_gpu
    from trm_kaggle.solve.unit import run_units  # torch starts here, after the device is chosen

    write = event_writer(spec.events)
    run_units(spec, emit=lambda line: write({"line": line}), on_unit=lambda unit: write({"unit": unit.index}))
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
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _read_plan(spec: WorkerSpec) -> dict | None:
    try:
        return json.loads(spec.plan_file.read_text())
    except (OSError, ValueError):
        return None


def run_in_process(spec: WorkerSpec, emit: Emit, on_answer: Callable[[], None] | None = None) -> Outcome:
    """The one worker in the caller's process (no spawn: nothing to shard). An exception costs its units.
    `on_answer()` runs after each unit (the caller merges what is answered so far)."""
    from trm_kaggle.solve.unit import run_units

    out = Outcome(spec.worker, spec.device, len(spec.units), pid=os.getpid())
    spec.plan_file.unlink(missing_ok=True)  # an earlier run's

    def done(_unit: Unit) -> None:
        out.done += 1
        if on_answer is not None:
            on_answer()

    try:
        run_units(spec, emit=emit, on_unit=done)
    except Exception as e:  # the worker failed as a whole (no device, unreadable weights, ...)
        out.error = describe(e)
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        spec.log.write_text(traceback.format_exc())
        out.log = str(spec.log)
    out.plan = _read_plan(spec)
    return out


def run_spawned(specs: list[WorkerSpec], emit: Emit, *, stop_at: float | None = None, poll_s: float = 0.2,
                on_answer: Callable[[], None] | None = None,
                on_poll: Callable[[list[Outcome]], None] | None = None) -> list[Outcome]:
    """One spawned process per spec; relays their log lines until all have ended, stops any still running
    at `stop_at` (a time.time() value). `on_answer()` runs after a poll that saw units finish (the caller
    merges what is answered so far); `on_poll(outcomes)` at every poll (tests kill workers with it)."""
    ctx = multiprocessing.get_context("spawn")  # never fork: CUDA and threads do not survive it
    outcomes, procs, offsets = [], [], []
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
        return finished

    while True:
        if relay() and on_answer is not None:
            on_answer()
        if on_poll is not None:
            on_poll(outcomes)
        if not any(p.is_alive() for p in procs):
            break
        if stop_at is not None and time.time() >= stop_at:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join(5)
                if p.is_alive():
                    p.kill()
            break
        time.sleep(poll_s)
    for p, out, spec in zip(procs, outcomes, specs):
        p.join(5)
        out.exitcode = p.exitcode
        if p.exitcode != 0:
            last = _last_line(spec.log)
            out.error = _describe_exit(p.exitcode) + (f" ({last})" if last else "")
    relay()
    for out, spec in zip(outcomes, specs):
        out.plan = _read_plan(spec)
    return outcomes
