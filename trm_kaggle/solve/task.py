"""One task, start to answer: its augmented dataset -> fine-tuning -> predictions -> vote -> its result.

    the task -> augmented dataset of its demonstration pairs (new puzzle identifiers)
             -> pretrained weights, new embedding rows = the mean trained row
             -> fine-tune (puzzle rows, all weights, or rows first then all) until its deadline
             -> predict every augmented test input -> vote -> units/u<index>/result.json (`workdir.py`)

The building blocks (the dataset, fine-tuning, demonstration accuracy) are also what the benchmarks of
test-time training call.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from trm_kaggle.config import MAX_BATCH_SIZE, ArcBuildConfig, ArchConfig, SolveConfig, TrainConfig, whole_argument
from trm_kaggle.data import (IGNORE_LABEL_ID, LoadReport, MAX_GRID, PuzzleLoader, arc_model_problem, build_arc,
                             built_with, parse_task)
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate import check_model_fits, evaluate
from trm_kaggle.hardware import place_model
from trm_kaggle.jsonio import read_json
from trm_kaggle.model import ContinuousRollout, apply_compile, load_model_for_dataset, model_from_train_state
from trm_kaggle.outputs import special_kind
from trm_kaggle.solve.plan import demo_rows
from trm_kaggle.solve.schedule import finetune_phases
from trm_kaggle.solve.workdir import Unit, unit_dir, write_result
from trm_kaggle.train import TrainResult, checkpoint as ckpt, train

log = logging.getLogger(__name__)

SUBSET = "unseen"
PARTS = ("data", "finetune")  # what a task's run writes beside its result.json
#: How far past its end a task's un-augmented test inputs may still be predicted, as a share of the task's own
#: time: a task slower than priced still answers, and takes half a share at most from the tasks after it
GRACE_SHARE = 0.5


class NotArcModel(TRMError):
    """An export of another kind of task (Sudoku, a maze, code): no ARC task can reach its vocabulary; or one whose
    config.json says no vocabulary or canvas size to compare with ARC's (missing, or not a whole number)."""


def export_canvas(weights: str | os.PathLike) -> int:
    """The canvas side an export was trained on (seq_len = side * side; 30 for upstream's ARC models); NotArcModel
    for a model of another kind of task, whose every prediction would fail on ARC's tokens, and for a vocab_size or
    seq_len missing or not a whole number."""
    config = read_json(Path(weights) / "config.json", "export config.json")
    if isinstance(config, dict) and "vocab_size" in config and (problem := arc_model_problem(config, weights)):
        raise NotArcModel(problem)  # the whole line: a field of the wrong type names the file, not the model's kind
    seq_len = int(config.get("seq_len", 900))
    side = math.isqrt(seq_len)
    return side if side * side == seq_len and 1 <= side <= 30 else 30


def build_unseen_dataset(cfg: SolveConfig, work: Path, tasks: dict, canvas: int = 30) -> Path:
    """The augmented dataset of `tasks` (the challenges, {id: task} as read) on the model's canvas (a task with a
    larger grid is left out and gets the fallback); reused when a previous run built the same one. The tasks
    reach the builder parsed, in memory (in id order), never through a file."""
    report = LoadReport()
    for task_id in sorted(tasks):
        try:
            report.tasks[task_id] = parse_task(task_id, tasks[task_id], "challenges")
        except DataError as e:  # the builder says which were skipped; the others are built
            report.problems[task_id] = str(e)
    loaded = {SUBSET: report}
    data_dir = work / "data"
    build_cfg = ArcBuildConfig(output_dir=str(data_dir), subsets=[SUBSET], test_set_name=SUBSET,
                               test_set_name2=SUBSET, num_aug=cfg.num_aug, seed=cfg.seed, skip_invalid=True,
                               canvas=canvas, progress=cfg.progress, workers=1)  # one task: no process pool
    if built_with(build_cfg, loaded) is not None:
        log.info("reusing the dataset in %s", data_dir)
        return data_dir
    build_arc(build_cfg, loaded)
    return data_dir


@torch.no_grad()
def demo_accuracy(model, data_dir: Path, device: torch.device, max_examples: int = 64) -> dict[str, float]:
    """Exact and token accuracy on (up to `max_examples` of) the tasks' demonstration pairs, the only
    answers known inside the kernel: fine-tuning should raise them. The model is moved to `device`."""
    max_examples = whole_argument("max_examples", max_examples, 1, MAX_BATCH_SIZE)  # one batch holds them all
    device = place_model(model, device)
    loader = PuzzleLoader([str(data_dir)], "train", 1, prefetch=0)
    check_model_fits(model, data_dir, loader.metadata)  # another seq_len was torch's "size of tensor a" error
    n = loader.num_examples
    idx = np.linspace(0, n - 1, num=min(max_examples, n)).astype(np.int64)
    batch = loader.examples(idx)
    was = model.training
    model.eval()
    rollout = ContinuousRollout(model, len(idx), model.arch.halt_max_steps, device=device)
    done = next(rollout.run([batch]))  # one batch: every row stops at the last step
    model.train(was)
    labels = done.data["labels"]
    mask = labels != IGNORE_LABEL_ID
    right = (done.tokens.long() == labels.long()) & mask
    return {"demo_exact_accuracy": float((right.sum(-1) == mask.sum(-1)).float().mean()),
            "demo_token_accuracy": float(right.sum() / mask.sum().clamp_min(1)),
            "demo_examples": len(idx)}


def finetune(cfg: SolveConfig, arch: ArchConfig, data_dir: Path, work: Path, deadline: float | None,
             banner: bool = False) -> TrainResult:
    """Fine-tune from the pretrained export, phase by phase (`finetune_phases`), in one run directory.

    Each phase resumes the run where the previous one stopped (a restarted kernel resumes too: finished
    phases are skipped). Stops early at `deadline`. Returns the result of the last phase that ran.
    `banner`: the first phase prints training's device and model lines (a worker asks for them once, not
    per task).
    """
    probe = PuzzleLoader([str(data_dir)], "train", 1, seed=cfg.seed, prefetch=0)
    batch = max(1, min(cfg.global_batch_size, probe.max_examples_per_epoch))
    run_dir = work / "finetune"
    result = TrainResult(run_dir, ckpt.newest_step(run_dir), 0.0)
    for phase in finetune_phases(cfg.finetune, cfg.embeddings_fraction, cfg.finetune_steps):
        if result.step >= phase.until_step:
            continue  # done by an earlier run
        # the pretrained export starts the run; a later phase (or a restarted kernel) resumes the run's own state,
        # and naming the export there warned on every task that the weights given were "not loaded"
        start_from = str(Path(cfg.weights).absolute()) if not ckpt.list_states(run_dir) else None
        tcfg = TrainConfig(
            arch=arch, data_paths=[str(data_dir)], load_checkpoint=start_from,
            global_batch_size=batch, lr=cfg.lr, puzzle_emb_lr=cfg.puzzle_emb_lr,
            lr_warmup_steps=min(100, max(1, cfg.finetune_steps // 10)), epochs=1_000_000,
            max_steps=phase.until_step, eval_interval=None, freeze_weights=phase.freeze_weights, ema=False,
            seed=cfg.seed, device=cfg.device, threads=cfg.threads, checkpoint_path=str(run_dir), checkpoint_keep=1,
            compile=cfg.compile,
            progress=cfg.progress, log_interval=max(1, min(50, cfg.finetune_steps // 10 or 1)))
        result = train(tcfg, deadline=deadline, banner=banner)  # both on the monotonic clock
        banner = False
        if result.step < phase.until_step:
            break  # out of time
    return result


def load_finetuned(run_dir: Path, device: torch.device):
    """The fine-tuned model of the run's newest train state (live weights: fine-tuning keeps no EMA)."""
    model, _, _ = model_from_train_state(ckpt.load_newest_state(run_dir)[1], use_ema=False)
    return model.to(device)


def solve_unit(cfg: SolveConfig, unit: Unit, task: dict, key: dict, work: str, device: torch.device,
               finetune_by: float | None, predict_by: float | None, canvas: int = MAX_GRID,
               banner: bool = False, hard_deadline: float | None = None) -> dict:
    """One task: dataset (on the model's `canvas`) -> fine-tuning (until `finetune_by`) -> predictions (until
    `predict_by`) -> vote. Writes the unit's result.json and returns its report. `banner`: fine-tuning prints
    its device and model lines (the worker's first task). The un-augmented copies of the test inputs are
    predicted even when the task's time is up: a task slower than priced still answers with their votes instead
    of keeping the fallback, for `GRACE_SHARE` of the task's time more at most, and never past `hard_deadline`
    (the worker's own). Until the worker's end, one task whose single prediction cost more than its share (many
    trajectories, a deep test depth) took the time of every task after it."""
    udir = unit_dir(work, unit)
    for part in PARTS:  # a task's run always starts fresh: only complete results are reused
        shutil.rmtree(udir / part, ignore_errors=True)
    if (kind := special_kind(udir)) is not None or (udir.is_file() and (kind := "a file")):
        raise TRMError(f"{udir}: {kind} where the task's folder goes; remove it")  # not "File exists"
    udir.mkdir(parents=True, exist_ok=True)
    report: dict = {"num_aug": cfg.num_aug, "planned_steps": cfg.finetune_steps}

    t = start = time.monotonic()
    data_dir = build_unseen_dataset(cfg, udir, {unit.task_id: task}, canvas)
    model, _, _ = load_model_for_dataset(cfg.weights, data_dir, device)
    model.arch = cfg.run_arch(model.arch)  # a test-time recipe may recurse deeper or stop sooner; dtype per device
    apply_compile(model, cfg.compile, device)  # regions; the process's compiled code serves every task
    report["dataset_s"] = round(time.monotonic() - t, 2)
    steps = 0
    demos = demo_rows(cfg, unit.test_inputs * (cfg.num_aug + 1))
    if cfg.finetune != "none" and cfg.finetune_steps > 0:
        if finetune_by is None or finetune_by > time.monotonic():
            report["before_finetune"] = demo_accuracy(model, data_dir, device, demos)
            report["finetune_schedule"] = [asdict(p) for p in finetune_phases(cfg.finetune, cfg.embeddings_fraction,
                                                                              cfg.finetune_steps)]
            t = time.monotonic()
            result = finetune(cfg, model.arch, data_dir, udir, finetune_by, banner=banner)
            steps = result.step
            report["finetune_s"] = round(time.monotonic() - t, 2)
            model = load_finetuned(result.run_dir, device)
            apply_compile(model, cfg.compile, device)
            report["after_finetune"] = demo_accuracy(model, data_dir, device, demos)
        else:
            report["note"] = "no time left for fine-tuning: predicted with the pretrained weights"
            report["untuned_for_time"] = True
    report["finetune_steps"] = steps

    t = time.monotonic()
    always_until = hard_deadline
    if predict_by is not None:
        grace_until = predict_by + GRACE_SHARE * max(0.0, predict_by - start)
        always_until = grace_until if hard_deadline is None else min(hard_deadline, grace_until)
    always = unit.test_inputs if always_until is None or time.monotonic() < always_until else 0
    res = evaluate(model, data_dir, cfg.evaluation(), device=device, deadline=predict_by, always=always,
                   always_until=always_until)
    predicted = res.predictions.steps >= 0
    report.update(predict_s=round(time.monotonic() - t, 2), examples=int(len(predicted)),
                  predicted=int(predicted.sum()))
    candidates = {i: grids for (task_id, i), grids in res.candidates.items() if task_id == unit.task_id}
    # test inputs with a copy the deadline skipped: the others were predicted whole (no candidate = no valid grid)
    report["cut_inputs"] = sorted(i for task_id, i in res.extra.get("cut_slots", []) if task_id == unit.task_id)
    complete = bool(predicted.all()) and (cfg.finetune == "none" or steps >= cfg.finetune_steps)
    # the whole task, as the plan prices it: dataset, model load, demonstration accuracy, fine-tuning, prediction
    report["task_s"] = round(time.monotonic() - start, 2)
    write_result(work, unit, key, candidates, report, complete)
    for part in PARTS:  # ours, and no longer needed: keep /kaggle/working small
        shutil.rmtree(udir / part, ignore_errors=True)
    return report
