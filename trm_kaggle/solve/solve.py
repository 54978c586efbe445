"""Unseen tasks -> submission.json, inside a hard time budget (the Kaggle kernel's job).

    challenges -> augmented dataset of their demonstration pairs (new puzzle identifiers)
               -> pretrained weights, new embedding rows = the mean trained row
               -> fine-tune (puzzle rows, all weights, or rows first then all) until the budget says stop
               -> predict every augmented test input -> vote -> submission.json

The budget is planned backwards: the time inference needs is measured on one batch
and reserved (plus a safety margin) before fine-tuning starts, so fine-tuning
stops early instead of inference running out of time. Whatever happens — a bad
task, an exception in the model path, the budget running out — a complete, valid
submission is written: tasks without predictions get the documented fallback.
The work directory keeps the dataset and fine-tuning states, so a restarted kernel
resumes instead of starting over.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trm_kaggle.atomic import atomic_write_text
from trm_kaggle.config import ArcBuildConfig, ArchConfig, SolveConfig, TrainConfig
from trm_kaggle.data.arc import read_challenges
from trm_kaggle.data.build_arc import build_arc
from trm_kaggle.data.format import load_split
from trm_kaggle.data.loader import IGNORE_LABEL_ID, PuzzleLoader
from trm_kaggle.evaluate.report import evaluate
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.submission import make_submission, validate_submission, write_submission
from trm_kaggle.jsonio import read_json
from trm_kaggle.model.export import load_model_for_dataset, model_from_train_state
from trm_kaggle.model.rollout import act_rollout
from trm_kaggle.solve.estimate import seconds_per_call
from trm_kaggle.solve.schedule import finetune_phases
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import TrainResult, train
from trm_kaggle.train.runtime import pick_device

log = logging.getLogger(__name__)

SUBSET = "unseen"


class Budget:
    """Wall-clock budget: `left()` seconds until the safety margin starts."""

    def __init__(self, seconds: float | None, margin: float):
        self.start = time.time()
        self.end = None if seconds is None else self.start + seconds - margin

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.time()

    def deadline(self, reserve: float = 0.0) -> float | None:
        return None if self.end is None else self.end - reserve


def _link_challenges(tasks: dict, work: Path) -> str:
    """Write the tasks to predict under upstream's naming so the ARC builder reads them (no solutions).

    Written atomically from the parsed challenges (never a byte copy that a full disk can cut short),
    in a folder named by their content hash: other challenges give another prefix, so another dataset.
    """
    text = json.dumps(tasks, sort_keys=True)
    src = work / "src" / hashlib.sha256(text.encode()).hexdigest()[:16]
    target = src / f"arc_{SUBSET}_challenges.json"
    if not target.is_file():
        atomic_write_text(target, text)
    return str(src / "arc")


def export_canvas(weights: str | os.PathLike) -> int:
    """The canvas side an export was trained on (seq_len = side * side; 30 for upstream's ARC models)."""
    seq_len = int(read_json(Path(weights) / "config.json", "export config.json").get("seq_len", 900))
    side = math.isqrt(seq_len)
    return side if side * side == seq_len and 1 <= side <= 30 else 30


def build_unseen_dataset(cfg: SolveConfig, work: Path, tasks: dict, canvas: int = 30) -> Path:
    """The augmented dataset of `tasks` (the parsed challenges) on the model's canvas (a task with a larger
    grid is left out and gets the fallback); reused when a previous run built the same one."""
    data_dir = work / "data"
    build_cfg = ArcBuildConfig(output_dir=str(data_dir), input_file_prefix=_link_challenges(tasks, work),
                               subsets=[SUBSET], test_set_name=SUBSET, test_set_name2=SUBSET, num_aug=cfg.num_aug,
                               seed=cfg.seed, skip_invalid=True, canvas=canvas, progress=cfg.progress)
    try:
        info = read_json(data_dir / "build_info.json", "build_info.json")
        if info["config"] == build_cfg.model_dump(exclude={"progress", "workers"}):
            log.info("reusing the dataset in %s", data_dir)
            return data_dir
    except (DataError, KeyError, TypeError):  # none yet, or unreadable: build it again
        pass
    build_arc(build_cfg)
    return data_dir


def inference_seconds(model, data_dir: Path, cfg: SolveConfig, device: torch.device) -> float:
    """Seconds to predict the whole test split, from timing one batch for one ACT step."""
    test = load_split(data_dir, "test")
    n = test.num_examples
    rows = min(n, cfg.eval_batch_size)
    batch = {"inputs": torch.from_numpy(test.inputs[:rows].astype("int32")).to(device),
             "labels": torch.zeros(rows, test.metadata.seq_len, dtype=torch.int32, device=device),
             "puzzle_identifiers": torch.zeros(rows, dtype=torch.int32, device=device)}
    model.eval()
    with torch.inference_mode():
        carry = model.initial_carry(batch)
        per_row_step = seconds_per_call(lambda: model(carry, batch), device) / rows
    return per_row_step * n * model.arch.halt_max_steps * 1.3 + 5.0  # 30% + 5 s for decoding and voting


@torch.no_grad()
def demo_accuracy(model, data_dir: Path, device: torch.device, max_examples: int = 64) -> dict[str, float]:
    """Exact and token accuracy on (up to `max_examples` of) the tasks' demonstration pairs, the only
    answers known inside the kernel: fine-tuning should raise them."""
    loader = PuzzleLoader([str(data_dir)], "train", 1, prefetch=0)
    n = loader.num_examples
    idx = np.linspace(0, n - 1, num=min(max_examples, n)).astype(np.int64)
    batch = {k: v.to(device) for k, v in loader.examples(idx).items()}
    was = model.training
    model.eval()
    out = act_rollout(model, batch, model.arch.halt_max_steps).outputs
    model.train(was)
    mask = batch["labels"] != IGNORE_LABEL_ID
    right = (out["logits"].argmax(-1) == batch["labels"]) & mask
    return {"demo_exact_accuracy": float((right.sum(-1) == mask.sum(-1)).float().mean()),
            "demo_token_accuracy": float(right.sum() / mask.sum().clamp_min(1)),
            "demo_examples": len(idx)}


def finetune(cfg: SolveConfig, arch: ArchConfig, data_dir: Path, work: Path, deadline: float | None) -> TrainResult:
    """Fine-tune from the pretrained export, phase by phase (`finetune_phases`), in one run directory.

    Each phase resumes the run where the previous one stopped (a restarted kernel resumes too: finished
    phases are skipped). Stops early at `deadline`. Returns the result of the last phase that ran.
    """
    probe = PuzzleLoader([str(data_dir)], "train", 1, seed=cfg.seed, prefetch=0)
    batch = max(1, min(cfg.global_batch_size, probe.max_examples_per_epoch))
    run_dir = work / "finetune"
    result = TrainResult(run_dir, ckpt.newest_step(run_dir), 0.0)
    for phase in finetune_phases(cfg.finetune, cfg.embeddings_fraction, cfg.finetune_steps):
        if result.step >= phase.until_step:
            continue  # done by an earlier run
        tcfg = TrainConfig(
            arch=arch, data_paths=[str(data_dir)], load_checkpoint=str(Path(cfg.weights).absolute()),
            global_batch_size=batch, lr=cfg.lr, puzzle_emb_lr=cfg.puzzle_emb_lr,
            lr_warmup_steps=min(100, max(1, cfg.finetune_steps // 10)), epochs=1_000_000,
            max_steps=phase.until_step, eval_interval=None, freeze_weights=phase.freeze_weights, ema=False,
            seed=cfg.seed, device=cfg.device, threads=cfg.threads, checkpoint_path=str(run_dir), checkpoint_keep=1,
            progress=cfg.progress, log_interval=max(1, min(50, cfg.finetune_steps // 10 or 1)))
        result = train(tcfg, deadline=deadline)
        if result.step < phase.until_step:
            break  # out of time
    return result


def load_finetuned(run_dir: Path, device: torch.device):
    """The fine-tuned model of the run's newest train state (live weights: fine-tuning keeps no EMA)."""
    model, _, _ = model_from_train_state(ckpt.load_newest_state(run_dir)[1], use_ema=False)
    return model.to(device)


def _write_answer(cfg: SolveConfig, challenges: dict, candidates: dict, duplicates: set[str]) -> dict:
    """Build, write (atomically) and validate the submission; returns its part of the report."""
    built = make_submission(challenges, candidates, fallback=cfg.fallback)
    write_submission(cfg.output, built.submission)
    problems = validate_submission(cfg.output, challenges)
    task_problems = {t: "appears more than once in the challenges file: answered with the fallback"
                     for t in sorted(duplicates)}
    task_problems.update(built.problems)
    return {"output": str(cfg.output), "valid": not problems, "validation_problems": problems[:5],
            "task_problems": dict(list(task_problems.items())[:20])}


def _note(path: Path, text: str) -> None:
    """Write a log file of the work dir; a failure (full disk, read-only) only costs the log."""
    try:
        atomic_write_text(path, text)
    except OSError as e:
        log.warning("could not write %s: %s", path, e.strerror or e)


def solve(cfg: SolveConfig) -> dict[str, Any]:
    """Write cfg.output in every case; returns a report of what happened.

    Once the challenges file is read, nothing can stop a valid submission from reaching cfg.output:
    the fallback answer is written first, from the challenges in memory, before the work dir is
    touched; the model path then replaces it when it succeeds. Logs in the work dir are optional."""
    budget = Budget(cfg.time_budget, cfg.safety_margin)
    duplicates: set[str] = set()
    challenges = read_challenges(cfg.challenges, duplicates)
    report: dict[str, Any] = {"tasks": len(challenges), "stages": {}, "errors": []}
    report.update(_write_answer(cfg, challenges, {}, duplicates))  # the fallback, on disk before anything else
    candidates: dict = {}
    work = Path(cfg.work_dir)
    t = time.time()
    try:
        if budget.left() <= 0:
            raise TRMError(f"the time budget ({cfg.time_budget} s) is used up by the safety margin "
                           f"({cfg.safety_margin} s): nothing left for the model")
        device = pick_device(cfg.device)
        work.mkdir(parents=True, exist_ok=True)
        data_dir = build_unseen_dataset(cfg, work, {k: v for k, v in challenges.items() if k not in duplicates},
                                        export_canvas(cfg.weights))
        report["stages"]["dataset_s"] = round(time.time() - t, 1)
        if budget.left() <= 0:
            raise TRMError("the time budget ran out while building the dataset")

        model, export_cfg, _ = load_model_for_dataset(cfg.weights, data_dir, device)
        model.set_recursion(**cfg.recursion())  # a test-time recipe may recurse deeper or stop sooner
        arch = model.arch
        reserve = inference_seconds(model, data_dir, cfg, device)
        report["inference_reserve_s"] = round(reserve, 1)
        if cfg.finetune != "none" and cfg.finetune_steps > 0 and budget.left() > reserve:
            report["before_finetune"] = demo_accuracy(model, data_dir, device)
            t = time.time()
            result = finetune(cfg, arch, data_dir, work, budget.deadline(reserve))
            report["stages"]["finetune_s"] = round(time.time() - t, 1)
            report["finetune_steps"] = result.step
            report["finetune_schedule"] = [asdict(p) for p in finetune_phases(cfg.finetune, cfg.embeddings_fraction,
                                                                              cfg.finetune_steps)]
            model = load_finetuned(result.run_dir, device)
            report["after_finetune"] = demo_accuracy(model, data_dir, device)
        elif cfg.finetune != "none":
            report["errors"].append("no time left for fine-tuning: predicting with the pretrained weights")

        t = time.time()
        result = evaluate(model, data_dir, batch_size=cfg.eval_batch_size, device=device, early_exit=cfg.early_exit,
                          deadline=budget.deadline())
        candidates = result.candidates
        report["stages"]["predict_s"] = round(time.time() - t, 1)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the model path failed: the fallback on disk stays the answer
        report["errors"].append(str(e) if isinstance(e, TRMError) else f"{type(e).__name__}: {e}")
        if work.is_dir():
            _note(work / "error.log", traceback.format_exc())
        log.error("model path failed (%s); the submission holds the fallback answers", e)
        candidates = {}

    if candidates:
        report.update(_write_answer(cfg, challenges, candidates, duplicates))
    report.update(predicted=sum(1 for v in candidates.values() if v), elapsed_s=round(time.time() - budget.start, 1))
    if work.is_dir():
        _note(work / "solve_report.json", json.dumps(report, indent=2, default=str))
    return report
