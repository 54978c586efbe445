"""Unseen tasks -> submission.json, inside a hard time budget (the Kaggle kernel's job).

    challenges -> the fallback submission, written at once (valid whatever happens next)
               -> one unit per task (the first max_tasks) -> shards (`workdir.py`)
               -> one worker per device (`workers.py`)
               -> per worker (`worker.py`): one timed batch -> its plan (`plan.py`) -> per task (`task.py`):
                  augmented dataset of its demonstration pairs -> fine-tune until its share of the budget
                  says stop -> predict every augmented test input -> vote -> units/u<index>/result.json
               -> merge the results into submission.json after every finished task (a kernel stopped by the
                  platform keeps every answer so far; tasks without one keep the fallback)

The budget is planned backwards: each worker times one batch on its device, reserves what inference will
need (plus a safety margin) and fine-tunes with the rest, so fine-tuning stops early instead of inference
running out of time. Whatever happens — a bad task, an exception in the model path, a worker killed, the
budget running out — a complete, valid submission is written: tasks without predictions get the
documented fallback. The work directory keeps each finished task's result, so a restarted run answers
only the tasks still missing.

The modules form a one-way stack: job.py -> workers.py -> (inside each worker) worker.py -> task.py, each
of them reading and writing the work directory through workdir.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from trm_kaggle.atomic import OutputTaken, RewrittenFile, atomic_write_text
from trm_kaggle.config import MIN_PLAN_S, RECURSION_FIELDS, ArchConfig, SolveConfig, revalidated, seconds_argument
from trm_kaggle.data import MAX_GRID, read_challenges
from trm_kaggle.errors import TRMError, UnreadableFile
from trm_kaggle.evaluate import (make_submission, require_tasks, count_test_inputs, validate_submission,
                                 write_submission)
from trm_kaggle.hardware import choose_threads, cuda_problem, pick_device, visible_cuda_ids
from trm_kaggle.jsonio import open_regular, read_json
from trm_kaggle.locks import directory_lock
from trm_kaggle.model import cache_problem, resolve_compile, resolve_forward_dtype, unchecked_config_note
from trm_kaggle.outputs import check_kept, place_problem, writable_problem
from trm_kaggle.solve.plan import Budget
from trm_kaggle.solve.pricing import TEST_TIME_FIELDS, check_kinds
from trm_kaggle.solve.task import NotArcModel, export_canvas
from trm_kaggle.solve.workdir import (RESULT, WorkerSpec, assign, below_a_work_dir_problem, collect, make_units,
                                     others_folder_problem, planted_entry_problem, read_result, solve_io,
                                     task_digest, unit_dir)
from trm_kaggle.solve.workers import Outcome, run_in_process, run_spawned
from trm_kaggle.wording import count, escaped_echo, one_line, shown

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# The whole job
# ---------------------------------------------------------------------------


def _write_answer(cfg: SolveConfig, output: RewrittenFile, challenges: dict, candidates: dict,
                  duplicates: set[str], first: bool = False) -> dict:
    """Build, write (atomically, unless another process wrote `output` meanwhile: `OutputTaken`) and validate
    the submission (`validate_submission`: the rule of validate-submission); returns its part of the report.
    The `first` write, the fallback against the clock, leaves the demonstration pairs unchecked (the later writes
    report malformed tasks) and validates what it wrote from memory (the same text the file holds) instead of
    reading a large file back."""
    built = make_submission(challenges, candidates, fallback=cfg.fallback, check_tasks=not first)
    output.write(lambda: write_submission(cfg.output, built.submission))
    problems = validate_submission(built.submission if first else cfg.output, challenges)
    task_problems = {t: "appears more than once in the challenges file: answered with the fallback"
                     for t in sorted(duplicates)}
    task_problems.update(built.problems)
    return {"output": str(cfg.output), "valid": not problems, "validation_problems": problems[:5],
            "task_problems": dict(list(task_problems.items())[:20])}


def _note(path: Path, text: str) -> bool:
    """Write a log file of the work dir; a failure (full disk, read-only) only costs the log. True once written."""
    try:
        atomic_write_text(path, text)
        return True
    except (OSError, TRMError) as e:  # TRMError: a folder in the file's place
        log.warning("could not write %s: %s", path, getattr(e, "strerror", None) or e)
        return False


def _save_report(work: Path, report: dict) -> None:
    """The run's report as the work dir's solve_report.json; `report['details']` names it once it is written (the
    closing lines point to it only then)."""
    path = work / "solve_report.json"
    written = work.is_dir() and _note(path, json.dumps(report, indent=2, default=str))
    report["details"] = str(path) if written else None


def settings_key(cfg: SolveConfig, dtype: str | None = None) -> dict:
    """What a task's result is made of besides the task: a later run reuses it only when this is equal. `dtype` is
    the activation dtype that runs (`run_dtype`: `auto` and `export` resolved), so a result of one dtype is never
    taken for another's, while `--dtype auto` and the dtype it resolves to share their results."""
    h = hashlib.sha256()
    for name in ("config.json", "weights.safetensors"):
        try:  # through the one gate: a device, FIFO or /proc file is never read (it may never end)
            with open_regular(Path(cfg.weights) / name, name) as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except (OSError, UnreadableFile):  # missing or not a regular file: the load refuses it, in its words
            h.update(b"unreadable")
    fields = ("num_aug", "finetune", "embeddings_fraction", "finetune_steps", *RECURSION_FIELDS, "global_batch_size",
              "lr", "puzzle_emb_lr", "eval_batch_size", "early_exit", "seed")
    # the test-time levers where set (a key of a run without them stays as it was)
    levers = {f: getattr(cfg, f) for f in TEST_TIME_FIELDS if getattr(cfg, f) != SolveConfig.model_fields[f].default}
    return {"weights": h.hexdigest()[:16], **{f: getattr(cfg, f) for f in fields}, "dtype": dtype, **levers}


def run_dtype(cfg: SolveConfig, device: str, threads: int | None) -> str | None:
    """The activation dtype the workers run in on `device` ("float32", "bfloat16"...: cfg.forward_dtype with `auto`
    and `export` resolved, as `evaluate` reports it); None where the export's config.json cannot say (the workers
    then fail on it, in their words). On a CPU `auto` is measured with the workers' `threads`."""
    try:
        arch = cfg.run_arch(ArchConfig(**read_json(Path(cfg.weights) / "config.json", "export config.json")["arch"]))
    except Exception:  # noqa: BLE001 - unreadable or foreign weights: the workers report them
        return None
    if arch.forward_dtype != "auto":
        return arch.forward_dtype
    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        return str(resolve_forward_dtype(arch, device)[0]).removeprefix("torch.")
    finally:
        torch.set_num_threads(before)


def worker_devices(cfg: SolveConfig, say: Callable[[str], None], tasks: int | None = None
                   ) -> tuple[str, list[str | None], int | None]:
    """(the workers' device, CUDA_VISIBLE_DEVICES of each worker, CPU threads per worker).

    One worker per visible CUDA device by default, each seeing only its own; on CPU `workers` processes
    share the cores; MPS has one device. More workers than devices are cut to one per device (said, not
    refused: a wrong WORKERS must not cost the kernel its submission), and so are more workers than `tasks`
    (an idle worker still starts a process and times the device)."""
    device = pick_device(cfg.device).type
    if device == "cuda" and (problem := cuda_problem()):  # every task would fail on it: the CPU answers instead
        say(f"warning: {problem}: the workers run on the CPU instead")
        device = "cpu"
    count = torch.cuda.device_count() if device == "cuda" else 1
    workers = cfg.workers or count
    if device != "cpu" and workers > count:
        say(f"warning: workers={workers} but {count} {device} device(s): one worker per device, {count} in all")
        workers = count
    if tasks is not None and workers > max(1, tasks):
        workers = max(1, tasks)
    if device == "cuda":
        return "cuda", (visible_cuda_ids(count)[:workers] if workers > 1 else [None]), cfg.threads
    # the one thread rule of every command (the setting, else OMP_NUM_THREADS, else the free cores), shared
    threads = choose_threads(cfg.threads, share=workers)[0] if device == "cpu" else cfg.threads
    return device, [None] * workers, threads


def _echo(cfg: SolveConfig) -> Callable[[str], None]:
    if cfg.progress:
        return lambda line: print(line, file=sys.stderr, flush=True)
    return log.info


def solve(cfg: SolveConfig, *, echo: Callable[[str], None] | None = None,
          on_poll: Callable[[list[Outcome]], None] | None = None, start: float | None = None,
          budget_setting: str | None = None) -> dict[str, Any]:
    """`_solve` as the only writer of cfg.work_dir: a second submit there is refused before it writes anything,
    and so are challenges that hold no task (`{}`: nothing to answer, and an empty "valid" submission would have
    checked nothing). The budget counts from `start` (a time.monotonic() value, e.g. when the command started;
    default now). `budget_setting` names where cfg.time_budget came from in a caller's words, for a budget refused
    as too small (the kernel: its SAVE_TIME_BUDGET or TIME_BUDGET); default `submit`'s --time-budget.
    A script that calls it with more than one worker calls it under `if __name__ == "__main__":` (each worker
    process re-runs the script as it starts: `_refuse_in_a_starting_worker`)."""
    _refuse_in_a_starting_worker()
    check_kinds(configs={"cfg": (cfg, SolveConfig, "solve_config(**fields) makes one from a dict")},
                functions={"echo": echo, "on_poll": on_poll})
    cfg = revalidated(cfg)  # a config built around its validators (model_copy, model_construct) is checked here
    start = _start_argument(start)
    # an output never overwrites, holds or breaks an input, whoever calls (`submit` checked it, and more, already)
    inputs, (output, work_dir) = solve_io(cfg.challenges, cfg.weights, cfg.output, cfg.work_dir, cfg.compile_cache,
                                          flags=False)
    check_kept(inputs, [output, work_dir])
    # before the lock makes the work dir: `output=""` (a folder) was refused only after the work dir beside it was
    # made; a file in the work dir's place is said as `submit` says it, not as a lock the solve could not take
    if problem := writable_problem(output) or place_problem(work_dir):
        raise TRMError(problem)
    # nothing written through a link in the work dir, nor inside another submit's work folder, a training run
    # folder or a sweep's, nor in a pipeline's folder, whoever calls (the kernel, a library caller; `submit` checked
    # it already); a work dir that cannot be written at all still gets its submission, the fallback
    if problem := (below_a_work_dir_problem(cfg.work_dir) or others_folder_problem(cfg.work_dir)
                   or planted_entry_problem(cfg.work_dir)):
        raise TRMError(problem)
    duplicates: set[str] = set()
    challenges = read_challenges(cfg.challenges, duplicates)
    require_tasks(count_test_inputs(challenges), cfg.challenges, "there is nothing to answer")
    with directory_lock(cfg.work_dir, "submit", required=False):
        return _solve(cfg, challenges, duplicates, echo=echo, on_poll=on_poll, start=start,
                      budget_setting=budget_setting)


def _refuse_in_a_starting_worker() -> None:
    """Exit (one line, no traceback) when called while a worker process is starting: spawn re-runs the caller's
    `__main__` script in each worker before the worker's own code, so a script whose solve() call is not under
    `if __name__ == "__main__":` called solve() again in every worker, which met the caller's lock ("another
    submit is running", naming the caller itself) and printed a traceback per worker. The worker's exit is then
    said by the caller (`workers.run_spawned`)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):  # what multiprocessing's own check reads
        script = getattr(sys.modules.get("__mp_main__"), "__file__", None) or "the calling script"
        raise SystemExit(one_line(
            f"error: solve() was called in a worker process as it started: the worker re-ran {script}, which calls "
            'solve() outside `if __name__ == "__main__":`; put the call under that guard (solve() with more than '
            "one worker starts one process per worker)"))


def _start_argument(start: object) -> float:
    """`solve`'s `start`: a time.monotonic() value not ahead of now, or None for now. NaN counted no deadline at all
    (the workers were said stopped at it), and 1e12 overflowed the platform's time_t in the workers."""
    now = time.monotonic()
    if (start := seconds_argument("start", start)) is None:
        return now
    if start > now:
        raise ValueError(f"start={start:g}: a time.monotonic() value ahead of now ({now:.1f}); expected when the run "
                         "started (time.monotonic() then), or None for now")
    return start


def _solve(cfg: SolveConfig, challenges: dict, duplicates: set[str], *, echo: Callable[[str], None] | None = None,
           on_poll: Callable[[list[Outcome]], None] | None = None, start: float | None = None,
           budget_setting: str | None = None) -> dict[str, Any]:
    """Write cfg.output in every case; returns a report of what happened.

    Once the challenges file is read (`challenges`, with the ids it repeats in `duplicates`), nothing can stop a
    valid submission from reaching cfg.output: the fallback answer is written first, from the challenges in
    memory, before the work dir is touched; the answers replace it task by task as workers finish them. Logs in
    the work dir are optional.
    `echo` gets one line per phase (default: stderr with `progress`, else the log); `on_poll` is called while
    spawned workers run (tests use it to kill one)."""
    budget = Budget(cfg.time_budget, cfg.safety_margin, start)
    say = escaped_echo(echo or _echo(cfg))  # a worker's error names the weights' path: it may hold an escape
    report: dict[str, Any] = {"tasks": len(challenges), "errors": []}
    output = RewrittenFile(cfg.output)  # a second submit writing it meanwhile is seen, never overwritten
    report.update(_write_answer(cfg, output, challenges, {}, duplicates, first=True))  # the fallback, before all else
    say(budget.line("fallback", f"{cfg.output} holds a valid answer for each of the {len(challenges)} tasks"))
    if budget.left() < MIN_PLAN_S:  # reading the file and writing the fallback left no worker time to plan:
        # refused in one line, now (not after another pass over a file that large, nor as tasks never reached)
        return _out_of_time(cfg, report, budget, say, budget_setting)

    not_arc = None
    try:
        canvas = export_canvas(cfg.weights)
        if note := unchecked_config_note(cfg.weights):  # a warning: said under --no-progress too
            log.warning(note)
    except NotArcModel as e:  # said once as the cause below, not as an IndexError of every task
        canvas, not_arc = MAX_GRID, e
    except Exception:  # noqa: BLE001 - unreadable weights: the worker reports them, the fallback stands
        canvas = MAX_GRID
    units, malformed = make_units({k: v for k, v in challenges.items() if k not in duplicates}, cfg.max_tasks,
                                  canvas)
    # refused before the model, each for its reason: a repeated id (which copy was meant is not ours to guess)
    left_out = {**{t: "its id appears more than once in the challenges file" for t in sorted(duplicates)},
                **malformed}
    report.update(model_tasks=len(units), left_out=left_out)
    say(budget.line("tasks", f"the model works on {len(units)} of {len(challenges)} tasks"
                    + (f" (max_tasks {cfg.max_tasks})" if cfg.max_tasks else "")
                    + (f"; {len(malformed)} malformed or too large tasks keep the fallback" if malformed else "")
                    + (f"; {len(duplicates)} repeated ids keep the fallback" if duplicates else "")))
    work = Path(cfg.work_dir)
    keys: dict[int, dict] = {}  # each unit's settings key, once the dtype that runs is known (no result reused before)

    def merge() -> tuple[dict, dict, dict]:
        candidates, task_reports = collect(work, units, keys)
        return candidates, task_reports, _write_answer(cfg, output, challenges, candidates, duplicates)

    def merge_so_far() -> None:  # the submission holds every answer so far: a kernel killed at 12 h keeps them
        if output.taken is not None:  # said once, at the final merge
            return
        try:
            merge()
        except Exception as e:  # noqa: BLE001 - the final merge reports it; the workers must go on
            log.warning("merging the answers so far failed: %s", e)

    outcomes: list[Outcome] = []
    shards: list[list] = []
    causes: list[str] = []  # why the model path failed, for `model_failure`
    try:
        device, visible, threads = worker_devices(cfg, say, len(units))
        # the workers run the dtype resolved here (their own `auto` could measure a CPU otherwise), the one the key
        # names: a rerun in another dtype redoes its tasks
        report["dtype"] = dtype = run_dtype(cfg, device, threads)
        key = settings_key(cfg, dtype)
        keys.update({u.index: {**key, "task": task_digest(challenges[u.task_id])} for u in units})
        if not_arc is not None:
            raise not_arc
        if budget.left() <= 0:
            raise TRMError(f"the time budget ({cfg.time_budget} s) is used up by the safety margin "
                           f"({cfg.safety_margin} s): nothing left for the model")
        work.mkdir(parents=True, exist_ok=True)
        _say_unreadable_results(work, units)
        run_cfg = cfg if dtype is None else cfg.model_copy(update={"forward_dtype": dtype})
        if cfg.compile_cache and not resolve_compile(cfg.compile, device):  # never unsaid (its help says so)
            log.warning("compile cache %s not loaded: nothing is compiled here (compile %s on %s)", cfg.compile_cache,
                        cfg.compile, torch.device(device).type)
        elif cfg.compile_cache and (problem := cache_problem(cfg.compile_cache, device, trusted=True)[0]):
            # said here, a warning: a worker's lines are progress, which --no-progress hides
            log.warning("compile cache ignored: %s", problem)
            run_cfg = cfg.model_copy(update={"compile_cache": None})
        shards = assign(units, len(visible))
        quiet = run_cfg if len(visible) == 1 else run_cfg.model_copy(update={"progress": False})  # no bars in logs
        specs = [WorkerSpec(i, device, shard, {u.task_id: challenges[u.task_id] for u in shard},
                            quiet.model_dump_json(), key, str(work), budget.start, budget.end, threads, visible[i],
                            len(shards))
                 for i, shard in enumerate(shards)]
        say(budget.line("workers", f"{len(specs)} on {device}" + (f", {threads} CPU threads each" if threads else "")
                        + (f", activations in {dtype}" if dtype else "")
                        + ": " + ", ".join(f"worker {s.worker} {len(s.units)} tasks" for s in specs)))
        # stragglers are stopped a quarter into the safety margin (SIGTERM; SIGKILL at its middle), the one
        # worker in this process alike (an alarm): every grace lies inside the margin, whose second half merges
        # and writes the answers
        grace = min(15.0, cfg.safety_margin / 4)
        stop_at, kill_at = (None, None) if budget.end is None else (budget.end + grace, budget.end + 2 * grace)
        if len(specs) == 1:
            outcomes = [run_in_process(specs[0], say, on_answer=merge_so_far, stop_at=stop_at)]
        else:
            outcomes = run_spawned(specs, say, stop_at=stop_at, kill_at=kill_at, on_answer=merge_so_far,
                                   on_poll=on_poll)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the model path failed before any worker ran: the fallback on disk stays the answer
        report["errors"].append(str(e) if isinstance(e, TRMError) else f"{type(e).__name__}: {e}")
        causes.append(report["errors"][-1])
        log.error("model path failed (%s); the submission holds the fallback answers", one_line(e))  # file text
    causes += [out.error for out in outcomes if out.error]
    try:
        candidates, task_reports, answer = merge()
    except OutputTaken as e:  # the other writer's file stands; this run's answers are not lost
        raise OutputTaken(f"{e}; this submit's answers are kept in {work} (a rerun with its own --output reuses "
                          "them)") from None
    report["lost_tasks"] = 0  # tasks a failed worker (killed, out of memory; not one the deadline stopped) left on
    # the fallback: `submit` exits with status 3 for them
    for out in outcomes:
        if out.error:
            # counted from what the merge found: a result written as the worker was stopped at the deadline was
            # said to "keep the fallback" while the submission held it
            shard = shards[out.worker] if out.worker < len(shards) else []
            lost = sum(u.task_id not in task_reports for u in shard) if shard else out.units - out.done
            report["lost_tasks"] += 0 if out.stopped else lost
            kept = (f"{lost} of its {out.units} tasks keep the fallback" if lost else
                    f"each of its {out.units} tasks has a result of the model")
            report["errors"].append(f"worker {out.worker} ({out.device}): {out.error}; {kept}"
                                    + (f"; log: {out.log}" if out.log else ""))
            say(budget.line(f"worker {out.worker}", report["errors"][-1]))
    failed = {t: r["error"] for t, r in task_reports.items() if "error" in r}
    # a task that failed where its result could not be written either: only its worker's word says so
    failed.update({t: why for out in outcomes for t, why in out.unwritten.items() if t not in failed})
    report["errors"] += [f"task {t}: {e} (it keeps the fallback)" for t, e in failed.items()]
    report["model_failed"] = model_failure(len(units), task_reports, causes + list(failed.values()))
    report.update(_summarise(task_reports))
    # why each task without a model answer for every test input has the fallback: one reason per task
    early = "the model path failed before any worker ran" + (f" ({report['errors'][0]})" if report["errors"] else "")
    unanswered = {u.task_id: early for u in units}
    for w, shard in enumerate(shards):
        out = next((o for o in outcomes if o.worker == w), None)
        if out is not None:
            why = (f"worker {w} failed ({out.error})" if out.error else
                   "the time budget ran out before the model reached it")
            unanswered.update({u.task_id: out.unwritten.get(u.task_id, why) for u in shard})
    fallback = fallback_reasons(challenges, units, left_out, duplicates, cfg.max_tasks, task_reports, candidates,
                                unanswered)
    report.update(answer, workers=[o.as_dict() for o in outcomes], task_reports=task_reports,
                  # tasks with a model answer for some test input (a task cut before its first prediction, or
                  # whose predictions decoded to no valid grid, is not one)
                  answered=sum(1 for u in units if "error" not in task_reports.get(u.task_id, {"error": ""})
                               and any(candidates.get((u.task_id, i)) for i in range(u.test_inputs))),
                  # tasks whose model path ran and predicted, whether or not a valid grid came out: the proof
                  # that the model ran, which answered alone cannot give for a model that decodes no grid
                  ran=sum(1 for r in task_reports.values() if "error" not in r and r.get("predicted", 0) > 0),
                  predicted=sum(1 for v in candidates.values() if v),
                  fallback=fallback, elapsed_s=round(time.monotonic() - budget.start, 1))
    report["untuned"] = sum(1 for r in task_reports.values() if r.get("untuned_for_time"))
    report["untuned_note"] = untuned_note(cfg, report)
    _say_outcome(cfg, report, len(challenges), budget, say)
    _save_report(work, report)
    return report


def _say_unreadable_results(work: Path, units: list) -> None:
    """One warning per task whose result in the work dir a rerun cannot use (damaged, truncated, of another task):
    the task is redone, which a rerun expected to resume otherwise spends without a word."""
    for unit in units:
        path = unit_dir(work, unit) / RESULT
        if os.path.lexists(path) and read_result(work, unit) is None:
            log.warning("%s is unreadable or not a result of task %s: the task is redone", one_line(str(path)),
                        shown(unit.task_id))


def untuned_note(cfg: SolveConfig, report: dict) -> str | None:
    """The warning of a run whose time budget left no time to fine-tune some of its tasks (`report["untuned"]`
    of them: predicted with the pretrained weights), with the settings that fit the plan to the budget where they
    were fixed; None where every task that ran was fine-tuned as planned."""
    untuned = report.get("untuned") or 0
    if not untuned:
        return None
    ran = sum(1 for r in report.get("task_reports", {}).values() if "error" not in r)
    fixed = [name for name in ("num_aug", "finetune_steps") if getattr(cfg, name) != "auto"]
    advice = (f"; {' and '.join(f'{n} {getattr(cfg, n)}' for n in fixed)} {'are' if len(fixed) > 1 else 'is'} "
              "fixed: num_aug and finetune_steps auto (--num-aug auto --finetune-steps auto) fit the plan to the "
              "time budget" if fixed else "")
    return (f"{untuned} of the {count(ran, 'task')} the model ran on {'were' if untuned > 1 else 'was'} predicted "
            f"with the pretrained weights: the time budget left no time to fine-tune "
            f"{'them' if untuned > 1 else 'it'}{advice}")


def _say_outcome(cfg: SolveConfig, report: dict, tasks_total: int, budget: Budget,
                 say: Callable[[str], None]) -> None:
    """The closing lines: one per reason a task keeps the fallback answer, then the submission's state."""
    by_reason: dict[str, list[str]] = {}
    for task_id, why in report["fallback"].items():
        by_reason.setdefault(why, []).append(task_id)
    for why, tasks in by_reason.items():  # one line per reason: a long list of tasks stays one line
        shown_ids = ", ".join(map(shown, tasks[:3])) + (", ..." if len(tasks) > 3 else "")  # ids are data: escaped
        say(budget.line("fallback", (f"task {shown(tasks[0])}" if len(tasks) == 1 else
                                     f"{len(tasks)} tasks ({shown_ids})")
                        + f" keep{'s' if len(tasks) == 1 else ''} the fallback answer: {one_line(why)}"))
    say(budget.line("submission", f"{cfg.output}: {'valid' if report['valid'] else 'INVALID'}; "
                    f"{report['answered']} of {tasks_total} tasks answered by the model"
                    + (f" ({report['ran'] - report['answered']} more predicted, but decoded no valid grid)"
                       if report["ran"] > report["answered"] else "")
                    + f", {report['predicted']} test inputs with model predictions"))
    if report.get("untuned_note"):
        say(budget.line("fine-tuning", report["untuned_note"]))


def _larger_budget(budget_setting: str | None, margin: bool) -> str:
    """The advice closing a budget refused as too small, naming the setting the budget came from: `submit`'s
    --time-budget (and, where the margin alone is to blame, its --safety-margin), or the caller's own parameter (a
    Save Version run's budget is the kernel's SAVE_TIME_BUDGET: its TIME_BUDGET, named there once, would change
    the scored rerun's too; the kernel's safety margin is no parameter of its own)."""
    if budget_setting is not None:
        return f"give a larger time budget: {budget_setting}"
    return "give a larger time budget: --time-budget" + ("; or a smaller --safety-margin" if margin else "")


def _out_of_time(cfg: SolveConfig, report: dict, budget: Budget, say: Callable[[str], None],
                 budget_setting: str | None = None) -> dict:
    """The report of a run whose budget left no worker time to plan once the fallback was written: the budget
    refused as too small for the challenges file, in one line naming the setting to raise (`_larger_budget`); the
    fallback stands."""
    took, left = time.monotonic() - budget.start, max(0.0, budget.left())
    usable = cfg.time_budget - cfg.safety_margin
    if usable < MIN_PLAN_S:  # the settings alone leave too little, whatever the file: say so, not the reading
        why = (f"the time budget ({cfg.time_budget:g} s) leaves {max(usable, 0.0):g} s after its safety margin "
               f"({cfg.safety_margin:g} s), less than the {MIN_PLAN_S:g} s a worker needs to time its device and "
               f"plan ({_larger_budget(budget_setting, margin=True)})")
    else:
        why = (f"the time budget ({cfg.time_budget:g} s, {cfg.safety_margin:g} s of it the safety margin) is too "
               f"small for {cfg.challenges}: reading its {report['tasks']} tasks and writing the fallback took "
               f"{took:.1f} s, leaving {math.floor(left * 10) / 10:.1f} s, less than the {MIN_PLAN_S:g} s a worker needs to time its device "
               f"and plan ({_larger_budget(budget_setting, margin=False)})")
    say(budget.line("budget", why))
    report["errors"].append(why)
    report.update(model_failed=why, model_tasks=min(cfg.max_tasks or report["tasks"], report["tasks"]), left_out={},
                  workers=[], task_reports={}, answered=0, ran=0, predicted=0, fallback={}, elapsed_s=round(took, 1))
    _save_report(Path(cfg.work_dir), report)
    return report


def model_failure(model_tasks: int, task_reports: dict[str, dict], causes: list[str]) -> str | None:
    """Why the model could not run on any of its `model_tasks` tasks (each one's model path failed), or None.

    None too when some task ran (whatever it predicted) or when no error stopped the model (a time budget
    that ran out first is not a failure of the model). `causes` are the errors met, in order; the most
    frequent one is the answer, said once for every task it cost."""
    if not model_tasks or not causes or any("error" not in r for r in task_reports.values()):
        return None
    kinds = [re.sub(r"\d+", "#", c) for c in causes]  # one kind: the same error of tasks in other folders
    most = max(dict.fromkeys(kinds), key=kinds.count)
    others = len(set(kinds)) - 1
    return causes[kinds.index(most)] + (f" (and {others} other kind{'s' if others > 1 else ''} of error)"
                                        if others else "")


def fallback_reasons(challenges: dict, units: list, left_out: dict[str, str], duplicates: set[str],
                     max_tasks: int | None, task_reports: dict[str, dict], candidates: dict,
                     unanswered: dict[str, str]) -> dict[str, str]:
    """{task id: why it holds the fallback answer (for some or all of its test inputs)}, in file order, for
    every task without model candidates for each test input; `unanswered`: why a unit has no result at all."""
    tests = {u.task_id: u.test_inputs for u in units}
    reasons = {}
    for task_id in challenges:
        if task_id in duplicates:
            why = "its id appears more than once in the challenges file"
        elif task_id in left_out:
            why = left_out[task_id]
        elif task_id not in tests:
            why = f"beyond max_tasks {max_tasks} (the model works on the first {max_tasks} tasks)"
        elif "error" in task_reports.get(task_id, {}):
            why = f"the model path failed on it ({task_reports[task_id]['error']})"
        elif task_id not in task_reports:
            why = unanswered.get(task_id, "no result from the model")
        else:
            missing = [i for i in range(tests[task_id]) if not candidates.get((task_id, i))]
            if not missing:
                continue
            cut = set(task_reports[task_id].get("cut_inputs", []))
            # a cut input of a task that predicted copies had its un-augmented copy predicted (`solve_unit`
            # predicts those whatever the task's deadline): no grid decoded from it, the deadline cut the rest
            partly = task_reports[task_id].get("predicted", 0) > 0
            causes = [("cut by the deadline", 0 if partly else sum(i in cut for i in missing)),
                      ("with no valid grid decoded from the copies predicted (the deadline cut the others)",
                       sum(i in cut for i in missing) if partly else 0),
                      ("predicted whole, but no valid grid decoded", sum(i not in cut for i in missing))]
            why = (f"{len(missing)} of {tests[task_id]} test inputs without a model answer ("
                   + "; ".join(f"{n} {what}" if len(missing) > 1 else what for what, n in causes if n) + ")")
        reasons[task_id] = why
    return reasons


def _summarise(task_reports: dict[str, dict]) -> dict[str, Any]:
    """Means over the tasks that were fine-tuned: demonstration accuracy before and after, steps."""
    tuned = [r for r in task_reports.values() if "after_finetune" in r]
    if not tuned:
        return {}
    out: dict[str, Any] = {"finetuned_tasks": len(tuned),
                           "mean_finetune_steps": sum(r["finetune_steps"] for r in tuned) / len(tuned)}
    for when in ("before_finetune", "after_finetune"):
        out[when] = {k: sum(r[when][k] for r in tuned) / len(tuned)
                     for k in ("demo_exact_accuracy", "demo_token_accuracy")}
    return out
