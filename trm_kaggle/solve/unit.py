"""One worker's job: its tasks, one after another, on one device, inside the global deadline.

    the export -> one timed batch of each kind on this device (sized for it) -> the worker's Plan (logged,
    and saved beside its log) -> per task: its own augmented dataset -> its own fine-tuning run -> predict
    and vote -> units/u<index>/result.json

Before each task the time left is split again (`plan.task_deadlines`): each task gets what the plan prices
for it and an equal share of the rest for fine-tuning, and stops predicting at its end, so a slow task
cannot starve the ones after it, and a fast one leaves its time to them. A task that
raises (a malformed grid the checks missed, CUDA running out of memory) gets no result and keeps its fallback
answer; the worker goes on with the next.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
import traceback
from dataclasses import asdict
from typing import Callable

import torch

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.config import ArchConfig, SolveConfig
from trm_kaggle.data.arc import MAX_GRID
from trm_kaggle.errors import describe
from trm_kaggle.evaluate.report import evaluate
from trm_kaggle.model.export import load_model_for_dataset, read_export
from trm_kaggle.solve.plan import MIN_PLAN_S, Budget, Plan, demo_rows, hms, plan_worker, task_deadlines
from trm_kaggle.solve.shard import (
    Unit, WorkerSpec, read_result, reusable, task_digest, unit_dir, write_result,
)
from trm_kaggle.solve.schedule import finetune_phases
from trm_kaggle.solve.solve import build_unseen_dataset, demo_accuracy, export_canvas, finetune, load_finetuned
from trm_kaggle.train.runtime import pick_device


PARTS = ("src", "data", "finetune")  # what a task's run writes beside its result.json


class _NoDummyLabelNote(logging.Filter):
    """Unseen tasks never have test outputs: the builder's note that it filled dummy labels is noise here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "test labels filled with a dummy" not in record.getMessage()


@contextlib.contextmanager
def _quiet_builder():
    logger, note = logging.getLogger("trm_kaggle.data.build_arc"), _NoDummyLabelNote()
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)


def run_units(spec: WorkerSpec, emit: Callable[[str], None],
              on_unit: Callable[[Unit], None] | None = None) -> Plan | None:
    """Plan, then solve each of the spec's units that has no reusable result; returns the plan (None when the
    deadline had passed before the worker started)."""
    with _quiet_builder():
        return _run_units(spec, emit, on_unit)


def _run_units(spec: WorkerSpec, emit: Callable[[str], None],
               on_unit: Callable[[Unit], None] | None) -> Plan | None:
    cfg = SolveConfig.model_validate_json(spec.config)
    budget = Budget.until(spec.start, spec.deadline)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = pick_device(spec.device)
    challenges = spec.tasks
    keys = {u.index: {**spec.key, "task": task_digest(challenges[u.task_id])} for u in spec.units}
    todo = [u for u in spec.units if not reusable(read_result(spec.work, u), keys[u.index])]

    if not todo:  # nothing to time or plan for: every task of this worker has a reusable answer (or it has none)
        emit(budget.line("resume", f"worker {spec.worker}: nothing to do"
                                   + (f": {len(spec.units)} of {len(spec.units)} tasks already answered by an "
                                      f"earlier run with these settings" if spec.units else "")))
        for u in spec.units:
            if on_unit is not None:
                on_unit(u)
        return None
    export, _ = read_export(cfg.weights)  # unreadable weights fail the worker at once, not each task
    canvas = export_canvas(cfg.weights)
    if spec.deadline is not None and spec.deadline - time.time() < MIN_PLAN_S:
        emit(budget.line("plan", f"worker {spec.worker}: no time left to plan; its {len(todo)} tasks keep the "
                                 f"fallback"))
        return None
    arch = ArchConfig(**{**export["arch"], **cfg.recursion()})  # what will run: a recipe's recursion too
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
                on_unit(u)
    ucfg = cfg.model_copy(update={"num_aug": plan.num_aug, "finetune_steps": plan.finetune_steps,
                                  "threads": spec.threads, "device": spec.device})
    for k, unit in enumerate(todo):
        left = todo[k:]
        if spec.deadline is not None and time.time() >= spec.deadline:
            emit(budget.line("deadline", f"{len(left)} tasks left unanswered keep the fallback"))
            break
        finetune_by = predict_by = None
        if spec.deadline is not None:
            finetune_by, predict_by = task_deadlines(ucfg, plan, [(u.test_inputs, u.train_pairs) for u in left],
                                                     spec.deadline)
        t0 = time.time()
        try:
            report = solve_unit(ucfg, unit, challenges[unit.task_id], keys[unit.index], spec.work, device,
                                finetune_by, predict_by, canvas, banner=k == 0, hard_deadline=spec.deadline)
            emit(budget.line(f"task {unit.task_id} ({k + 1}/{len(todo)})", _summary(report, time.time() - t0)))
        except Exception as e:
            if isinstance(e, torch.OutOfMemoryError) and device.type == "cuda":
                torch.cuda.empty_cache()
            try:  # the task keeps its fallback; its result says why
                write_result(spec.work, unit, keys[unit.index], {}, {"error": describe(e)}, False)
                (unit_dir(spec.work, unit) / "error.log").write_text(traceback.format_exc())
            except OSError:
                pass
            emit(budget.line(f"task {unit.task_id} ({k + 1}/{len(todo)})",
                             f"FAILED ({describe(e)}); it keeps the fallback answer"))
        if on_unit is not None:
            on_unit(unit)
    return plan


def solve_unit(cfg: SolveConfig, unit: Unit, task: dict, key: dict, work: str, device: torch.device,
               finetune_by: float | None, predict_by: float | None, canvas: int = MAX_GRID,
               banner: bool = False, hard_deadline: float | None = None) -> dict:
    """One task: dataset (on the model's `canvas`) -> fine-tuning (until `finetune_by`) -> predictions (until
    `predict_by`) -> vote. Writes the unit's result.json and returns its report. `banner`: fine-tuning prints
    its device and model lines (the worker's first task). Before `hard_deadline` (the worker's own) the
    un-augmented copies of the test inputs are predicted even when the task's time is up: a task slower than
    priced still answers with their votes instead of keeping the fallback."""
    udir = unit_dir(work, unit)
    for part in PARTS:  # a task's run always starts fresh: only complete results are reused
        shutil.rmtree(udir / part, ignore_errors=True)
    udir.mkdir(parents=True, exist_ok=True)
    report: dict = {"num_aug": cfg.num_aug, "planned_steps": cfg.finetune_steps}

    t = time.time()
    data_dir = build_unseen_dataset(cfg, udir, {unit.task_id: task}, canvas)
    model, _, _ = load_model_for_dataset(cfg.weights, data_dir, device)
    model.set_recursion(**cfg.recursion())  # a test-time recipe may recurse deeper or stop sooner
    report["dataset_s"] = round(time.time() - t, 2)
    steps = 0
    if cfg.finetune != "none" and cfg.finetune_steps > 0:
        if finetune_by is None or finetune_by > time.time():
            report["before_finetune"] = demo_accuracy(model, data_dir, device, demo_rows(cfg))
            report["finetune_schedule"] = [asdict(p) for p in finetune_phases(cfg.finetune, cfg.embeddings_fraction,
                                                                              cfg.finetune_steps)]
            t = time.time()
            result = finetune(cfg, model.arch, data_dir, udir, finetune_by, banner=banner)
            steps = result.step
            report["finetune_s"] = round(time.time() - t, 2)
            model = load_finetuned(result.run_dir, device)
            report["after_finetune"] = demo_accuracy(model, data_dir, device, demo_rows(cfg))
        else:
            report["note"] = "no time left for fine-tuning: predicted with the pretrained weights"
    report["finetune_steps"] = steps

    t = time.time()
    always = unit.test_inputs if hard_deadline is None or time.time() < hard_deadline else 0
    res = evaluate(model, data_dir, batch_size=cfg.eval_batch_size, device=device, early_exit=cfg.early_exit,
                   deadline=predict_by, always=always)
    predicted = res.predictions.steps >= 0
    report.update(predict_s=round(time.time() - t, 2), examples=int(len(predicted)), predicted=int(predicted.sum()))
    candidates = {i: grids for (task_id, i), grids in res.candidates.items() if task_id == unit.task_id}
    complete = bool(predicted.all()) and (cfg.finetune == "none" or steps >= cfg.finetune_steps)
    write_result(work, unit, key, candidates, report, complete)
    for part in PARTS:  # ours, and no longer needed: keep /kaggle/working small
        shutil.rmtree(udir / part, ignore_errors=True)
    return report


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

