"""The work directory, without torch: the tasks as units, their split across workers, and what each leaves on disk.

    challenges -> units (one well-formed task each, the first max_tasks) -> `assign`: deterministic, balanced
               -> each unit's result.json in the work directory -> `collect`: candidates for the submission

A task's answer depends on the task, the weights and the settings alone: each task gets its own augmented
dataset (augmentations drawn from generators keyed by its id, puzzle identifiers from 1), its own
fine-tuning run and its own vote. So the merged submission is the same for any number of workers (tested
on CPU with one and two), and a worker that raises, runs out of memory or is killed costs only the tasks
it had not finished: they keep the fallback answers written before any model work started.

A worker's files (`WorkerSpec`): its log lines in `workers/w<i>.events`, its stdout and stderr in
`workers/w<i>.log`, its plan in `workers/w<i>.plan.json`, and a result per task in
`units/u<index>/result.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.data import MAX_GRID, grid_problem, parse_task, task_fits
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.jsonio import read_json
from trm_kaggle.locks import LOCK_FILE, holder_kind, refuse_if_held
from trm_kaggle.names import ascii_number
from trm_kaggle import outputs
from trm_kaggle.outputs import (PIPELINE_RUN_DIR, Input, Output, check_io, is_work_dir, special_kind,
                                writable_problem)


RESULT = "result.json"
#: What a solve writes in its work folder: nothing else there is ever replaced.
WORK_ENTRIES = ("src", "data", "units", "workers", "solve_report.json", LOCK_FILE)
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


def solve_io(challenges, weights, output, work_dir, compile_cache=None, *,
             flags: bool = True) -> tuple[list[Input], list[Output]]:
    """What a solve reads and writes (`trm_kaggle.outputs`), named as `submit`'s options (`flags`) or as
    SolveConfig's fields: `solve` checks them itself, `submit` before it calls it."""
    def name(field: str) -> str:
        return "--" + field.replace("_", "-") if flags else field

    cache = []
    if compile_cache:  # the cache file and its record beside it (read with it: a submission written over the
        from trm_kaggle.model import CACHE_RECORD  # record left the cache unreadable for good)

        cache = [Input(compile_cache, name("compile_cache")),
                 Input(Path(compile_cache).with_name(CACHE_RECORD), f"{name('compile_cache')} record")]
    return ([Input(challenges, name("challenges")), Input(weights, name("weights"), tree=True), *cache],
            [Output(output, name("output")), Output(work_dir, name("work_dir"), "folder", WORK_ENTRIES)])


def below_a_work_dir_problem(work: str | os.PathLike, what: str = "work_dir", *,
                             held_by: str | None = "submit") -> str | None:
    """Why `work` may not be a work folder (None when it may): it lies below another submit's work folder, one
    holding its files (units/ and workers/, or solve_report.json) or held by a live solve (its lock: a submit just
    started, nothing written yet). The two solves' files mixed inside the other's folder, while it ran. `held_by`
    None: a folder above it that any live command holds counts too (`submit` refuses those); a library caller may
    run inside one on purpose (the pipeline's own solve in its work folder, the kernel rehearsed by `bundle
    --execute` below the bundle's folder, a regression notebook below regress's), so by default only a live
    solve's lock counts. Its own work folder, reused, is no such thing; the other way round (its units/ or
    workers/ another submit's work folder) is `planted_entry_problem`."""
    # the folders it really lies in: `DIR/../DIR` spelled DIR's own name among its parents (refused as lying
    # inside itself), and a link's name hid the folders above where it leads
    for at in Path(os.path.realpath(work)).parents:
        try:
            if is_work_dir(at):
                return (f"{what} {work} lies inside {at}, which is a submit's work folder (it holds units/ or "
                        "solve_report.json): its files would mix with the solve's; choose a folder of its own")
        except OSError:  # a name too long to hold an entry: its own write says what fails
            continue
        try:
            refuse_if_held(at)
        except TRMError as e:  # the record names what holds it ("submit" for every solve, whoever called it)
            if held_by is None or holder_kind(at) == held_by:
                return f"{what} {work} lies inside a folder a live command holds: {e}"
    return None


def check_pipeline_work_dir(work_dir: str | os.PathLike, what: str = "work_dir") -> None:
    """Refuse (TRMError, one line) a folder no pipeline may work in, before anything is written: asked by
    `run_pipeline` for every caller, and by `pipeline` with its --work-dir's name. Refused: a folder that is, or
    lies inside, a submit's work folder or one a live solve holds (the pipeline's run in WORK/train would be a run
    folder there, which that submit refuses), a training run folder or a sweep's folder (`export` or a resume would
    search the pipeline's files; the sweep's rerun would refuse its runs), a Kaggle training session's output
    (`outputs.others_output_problem`, the rule `build_bundle.py OUT_DIR` shares); then what `check_io` refuses of a
    folder written into (a dataset, an export, a folder this package builds whole, one that cannot be written), the
    same of its dataset folder WORK/data (stage 1 builds below it), and whether its run folder can be written (a
    read-only one was found after the dataset stage ran again). Its own solve works in WORK/ttt, a work folder like any other."""
    if problem := below_a_work_dir_problem(work_dir, what) or outputs.others_output_problem(work_dir, what):
        raise TRMError(problem)
    # and its dataset folder, where stage 1 builds: WORK/data a dataset (a Kaggle training session's inputs) was
    # found by the build, after src/ and a lock were written, and named as the build's output_dir
    check_io([], [Output(work_dir, what, "folder")])
    check_io([], [Output(Path(work_dir) / "data", f"{what}'s dataset folder", "folder")])
    if problem := writable_problem(Output(Path(work_dir) / PIPELINE_RUN_DIR, f"{what}'s run folder", "folder")):
        raise TRMError(problem)


def others_folder_problem(work: str | os.PathLike, what: str = "work_dir") -> str | None:
    """Why `work` may not be a solve's work folder because another command keeps its files there, or None: a
    training run folder (`outputs.run_folder_problem`), a sweep's folder (`outputs.sweep_folder_problem`; `submit`
    and `pipeline` refuse their --work-dir with the same words, `what` naming the setting), or a pipeline's work
    folder itself (it holds train/run.json: the solve's units/ and report there made the pipeline's rerun refuse
    the folder as a submit's; inside one is the pipeline's own solve, WORK/ttt). `solve` asks it for every caller,
    `submit` with its --work-dir's name."""
    from trm_kaggle.train import RUN_RECORD  # here, not above: the work directory's module stays without torch

    if problem := outputs.run_folder_problem(work, what) or outputs.sweep_folder_problem(work, what):
        return problem
    record = f"{PIPELINE_RUN_DIR}/{RUN_RECORD}"
    if (Path(work) / record).is_file():
        return (f"{what} {work} is a pipeline's work folder (it holds {record}): its files would mix with the "
                "pipeline's, whose rerun would then refuse it; choose a folder of its own")
    return None


def _taken_problem(work: str | os.PathLike, folder: Path) -> str | None:
    """Why the workers may not write into `folder` (the work dir's `units/` or `workers/`): it is another submit's
    work folder, finished or live (`submit --work-dir W/workers` running, then `submit --work-dir W`: the second's
    plans and results went in among the first one's files, exit 0). A lock its process left when it ended is no
    obstacle, as for a work dir inside another's (its files, once written, are)."""
    if is_work_dir(folder):
        return (f"work dir {work}: {folder} is a submit's work folder (it holds units/ or solve_report.json): the "
                "workers' files would mix with that solve's; choose a folder of its own")
    try:
        refuse_if_held(folder)
    except TRMError as e:
        return f"work dir {work}: the workers write into {folder}, which a live command holds: {e}"
    return None


def planted_entry_problem(work: str | os.PathLike) -> str | None:
    """Why the work dir cannot take the workers (None when it can): `units/` or `workers/` is a file (every task
    failed after its work), another submit's work folder or held by a live command (`_taken_problem`), or what the
    workers write below them (a unit's folder, its fine-tuning run, its data, a result) is a symbolic link: written
    through, a result went outside the work dir, and a result already where the link pointed was taken as the
    model's answers; so are `units/` and `workers/` themselves (the kernel's work folder is no option anyone
    typed). A FIFO there costs its task alone, said by its worker."""
    for top in ("units", "workers"):
        folder = Path(work) / top
        try:
            if not os.path.lexists(folder):
                continue
            if folder.is_symlink():
                return (f"work dir {work}: {folder} is a symbolic link to {os.path.realpath(folder)}; the workers "
                        "never write through a link: remove the link")
            if not folder.is_dir():
                return (f"work dir {work}: {folder} is {special_kind(folder) or 'a file'}; the workers write a "
                        "folder there")
            if problem := _taken_problem(work, folder):
                return problem
            for entry in folder.iterdir():
                inside = [] if entry.is_symlink() or not entry.is_dir() else list(entry.iterdir())
                for path in (entry, *inside):
                    if path.is_symlink():
                        return (f"work dir {work}: {path} is a symbolic link to {os.path.realpath(path)}; the "
                                "workers never write through a link: remove the link")
        except OSError:  # an unreadable folder: the worker that needs it names it
            continue
    return None


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
    path = unit_dir(work, unit) / RESULT
    if not os.path.lexists(path):
        return None
    try:
        result = read_json(path, "unit result")  # the one reader: a FIFO in its place is never waited on
    except TRMError:
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
        if result is None or result.get("key") != keys.get(unit.index):  # no key yet: nothing is reused
            continue
        for i, grids in result["candidates"].items():
            # only what a worker writes: a test index of this task, grids that are grids (a damaged or foreign
            # result counted a fourth prediction for three test inputs)
            index = ascii_number(i, max_digits=6)
            if index is not None and index < unit.test_inputs and isinstance(grids, list):
                candidates[(unit.task_id, index)] = [g for g in grids if grid_problem(g) is None]
        reports[unit.task_id] = {**(result.get("report") or {}), "complete": bool(result.get("complete"))}
    return candidates, reports


# ---------------------------------------------------------------------------
# A worker's share and its files
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
    start: float  # the kernel's start (time.monotonic(): the same clock in every process), for elapsed times
    deadline: float | None  # time.monotonic() by which every answer must be in
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
