"""One worker's job: its tasks, one after another, on one device, inside the global deadline.

    the export -> one timed batch of each kind on this device (sized for it) -> the worker's Plan (logged,
    and saved beside its log) -> per task: its own augmented dataset -> its own fine-tuning run -> predict
    and vote -> units/u<index>/result.json

The cheapest tasks come first (`plan.cheapest_first`). Before each task the time left is split again
(`plan.task_deadlines`): each task gets what the plan prices for it and an equal share of the rest for
fine-tuning, and stops predicting at its end (its prediction batches cut to fit that share:
`plan.prediction_batch`), so a slow task cannot starve the ones after it, and a fast one leaves its time to
them. A task that
raises (a malformed grid the checks missed, CUDA running out of memory) gets no result and keeps its fallback
answer; the worker goes on with the next.
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from trm_kaggle.atomic import atomic_write_json, atomic_write_text
from trm_kaggle.config import MIN_PLAN_S, ArchConfig, SolveConfig
from trm_kaggle.errors import TRMError, describe
from trm_kaggle.hardware import pick_device
from trm_kaggle.model import load_compile_cache, read_export, resolve_compile, save_compile_cache
from trm_kaggle.solve.plan import (
    TASK_OVERHEAD_S, Budget, Plan, cheapest_first, hms, plan_worker, prediction_batch, task_deadlines,
)
from trm_kaggle.solve.task import export_canvas, solve_unit
from trm_kaggle.solve.workdir import Unit, WorkerSpec, read_result, reusable, task_digest, unit_dir, write_result


COMPILE_DIR = "compile"  # the work directory's compile cache (trm_kaggle.model.compiling)


class _NoDummyLabelNote(logging.Filter):
    """Unseen tasks never have test outputs: the builder's note that it filled dummy labels is noise here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "test labels filled with a dummy" not in record.getMessage()


@contextlib.contextmanager
def _quiet_builder():
    logger, note = logging.getLogger("trm_kaggle.data.arc.build"), _NoDummyLabelNote()
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)


def run_units(spec: WorkerSpec, emit: Callable[[str], None],
              on_unit: Callable[[Unit, str | None], None] | None = None) -> Plan | None:
    """Plan, then solve each of the spec's units that has no reusable result; returns the plan (None when the
    deadline had passed before the worker started). `on_unit(unit, unwritten)` follows each unit: `unwritten`
    says why a failed unit's result could not be written in the work dir (else None), which only the worker knows:
    without it, the task would seem cut by the time budget."""
    with _quiet_builder():
        return _run_units(spec, emit, on_unit)


def _run_units(spec: WorkerSpec, emit: Callable[[str], None],
               on_unit: Callable[[Unit, str | None], None] | None) -> Plan | None:
    cfg = SolveConfig.model_validate_json(spec.config)
    budget = Budget.until(spec.start, spec.deadline)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = pick_device(spec.device)
    challenges = spec.tasks
    keys = {u.index: {**spec.key, "task": task_digest(challenges[u.task_id])} for u in spec.units}
    todo = cheapest_first([u for u in spec.units if not reusable(read_result(spec.work, u), keys[u.index])])

    if not todo:  # nothing to time or plan for: every task of this worker has a reusable answer (or it has none)
        emit(budget.line("resume", f"worker {spec.worker}: nothing to do"
                                   + (f": {len(spec.units)} of {len(spec.units)} tasks already answered by an "
                                      f"earlier run with these settings" if spec.units else "")))
        for u in spec.units:
            if on_unit is not None:
                on_unit(u, None)  # answered by an earlier run: nothing unwritten
        return None
    export, _ = read_export(cfg.weights)  # unreadable weights fail the worker at once, not each task
    canvas = export_canvas(cfg.weights)
    if spec.deadline is not None and spec.deadline - time.monotonic() < MIN_PLAN_S:
        emit(budget.line("plan", f"worker {spec.worker}: no time left to plan; its {len(todo)} tasks keep the "
                                 f"fallback"))
        return None
    arch = cfg.run_arch(ArchConfig(**export["arch"]))  # what will run: a recipe's recursion too, its dtype
    plan, cfg = plan_worker(cfg, arch, export["seq_len"], export["vocab_size"], device,
                            [(u.test_inputs, u.train_pairs) for u in todo], spec.deadline, worker=spec.worker,
                            processes=spec.workers, say=lambda line: emit(budget.line("plan", line)))
    spec.plan_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(spec.plan_file, plan.as_dict(), indent=2)
    emit(budget.line("plan", plan.describe()))
    if len(todo) < len(spec.units):
        emit(budget.line("resume", f"{len(spec.units) - len(todo)} of {len(spec.units)} tasks already answered "
                                   f"by an earlier run with these settings"))
        for u in spec.units:
            if u not in todo and on_unit is not None:
                on_unit(u, None)
    ucfg = cfg.model_copy(update={"num_aug": plan.num_aug, "finetune_steps": plan.finetune_steps,
                                  "threads": spec.threads, "device": spec.device})
    compiled = resolve_compile(cfg.compile, device)
    if compiled:  # the bundle's cache for this GPU and torch (its author's choice), and what this machine kept
        say = lambda line: emit(budget.line("compile", line))  # noqa: E731
        if cfg.compile_cache:
            load_compile_cache(cfg.compile_cache, device, trusted=True, say=say)
        load_compile_cache(Path(spec.work) / COMPILE_DIR, device, say=say)
    setup_s = SetupTimes()
    for k, unit in enumerate(todo):
        left = todo[k:]
        if spec.deadline is not None and time.monotonic() >= spec.deadline:
            emit(budget.line("deadline", f"{len(left)} tasks left unanswered keep the fallback"))
            break
        finetune_by = predict_by = None
        tcfg = ucfg
        if spec.deadline is not None:
            finetune_by, predict_by = task_deadlines(ucfg, plan, [(u.test_inputs, u.train_pairs) for u in left],
                                                     spec.deadline, setup_s.typical())
            rows = prediction_batch(plan, ucfg.eval_batch_size, predict_by - finetune_by)
            if rows < ucfg.eval_batch_size:  # the task's share holds no whole batch: smaller ones keep it
                tcfg = ucfg.model_copy(update={"eval_batch_size": rows})
        t0 = time.monotonic()
        unwritten = None
        try:
            report = solve_unit(tcfg, unit, challenges[unit.task_id], keys[unit.index], spec.work, device,
                                finetune_by, predict_by, canvas, banner=k == 0, hard_deadline=spec.deadline)
            emit(budget.line(f"task {unit.task_id} ({k + 1}/{len(todo)})", _summary(report, time.monotonic() - t0)))
            setup_s.add(report.get("dataset_s"), first=k == 0)
        except Exception as e:
            if isinstance(e, torch.OutOfMemoryError) and device.type == "cuda":
                torch.cuda.empty_cache()
            try:  # the task keeps its fallback; its result says why
                write_result(spec.work, unit, keys[unit.index], {}, {"error": describe(e)}, False)
                atomic_write_text(unit_dir(spec.work, unit) / "error.log", traceback.format_exc())
            except (OSError, TRMError) as w:  # the work dir cannot hold it (full, a special file where it goes):
                # the parent is told instead; one task's place costs that task alone, never its worker's others
                unwritten = f"{describe(e)}; the work dir could not hold its result" + \
                    ("" if describe(w) == describe(e) else f" ({describe(w)})")
            emit(budget.line(f"task {unit.task_id} ({k + 1}/{len(todo)})",
                             f"FAILED ({describe(e)}); it keeps the fallback answer"))
        if on_unit is not None:
            on_unit(unit, unwritten)
    if compiled:  # for the next run here, or a bundle's --compile-cache
        save_compile_cache(Path(spec.work) / COMPILE_DIR, device)
    return plan


class SetupTimes:
    """A task's dataset build and model load, as this worker measured them: the median of its tasks so far
    (the first task's only while it is the one measured: it pays one-time costs, imports and caches), or
    `TASK_OVERHEAD_S` before any. A slow disk or a large task set then takes its time from the shares the
    tasks after it are promised, not from their predictions."""

    def __init__(self):
        self.first: float | None = None
        self.seen: list[float] = []

    def add(self, seconds, first: bool = False) -> None:
        if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0:
            if first:
                self.first = float(seconds)
            else:
                self.seen.append(float(seconds))

    def typical(self) -> float:
        if self.seen:
            return statistics.median(self.seen[-32:])
        return self.first if self.first is not None else TASK_OVERHEAD_S


def _summary(report: dict, seconds: float) -> str:
    parts = []
    if "finetune_s" in report:
        b, a = report["before_finetune"], report["after_finetune"]
        parts.append(f"{report['finetune_steps']} fine-tuning steps in {hms(report['finetune_s'])} (demonstration "
                     f"exact accuracy {b['demo_exact_accuracy']:.2f} -> {a['demo_exact_accuracy']:.2f})")
    elif "note" in report:
        parts.append(report["note"])
    cut = "" if report["predicted"] == report["examples"] else " (the rest cut: the task's time was up)"
    parts.append(f"{report['predicted']} of {report['examples']} augmented test inputs predicted in "
                 f"{hms(report['predict_s'])}{cut}")
    return "; ".join(parts) + f"; {hms(seconds)} in all"

