"""Unseen tasks -> submission.json, inside a hard time budget (the Kaggle kernel's job).

    challenges -> the fallback submission, written at once (valid whatever happens next)
               -> one unit per task (the first max_tasks) -> shards, one worker per device (`shard.py`)
               -> per worker: one timed batch -> its plan (`plan.py`) -> per task (`unit.py`):
                  augmented dataset of its demonstration pairs (new puzzle identifiers)
                  -> pretrained weights, new embedding rows = the mean trained row
                  -> fine-tune (puzzle rows, all weights, or rows first then all) until its share of the
                     budget says stop
                  -> predict every augmented test input -> vote -> units/u<index>/result.json
               -> merge the results into submission.json after every finished task (a kernel stopped by the
                  platform keeps every answer so far; tasks without one keep the fallback)

The budget is planned backwards: each worker times one batch on its device, reserves what inference will
need (plus a safety margin) and fine-tunes with the rest, so fine-tuning stops early instead of inference
running out of time. Whatever happens — a bad task, an exception in the model path, a worker killed, the
budget running out — a complete, valid submission is written: tasks without predictions get the
documented fallback. The work directory keeps each finished task's result, so a restarted run answers
only the tasks still missing.

This module holds the building blocks of a task's model path (dataset, fine-tuning, demonstration accuracy)
and `solve`, which orders everything.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trm_kaggle.atomic import atomic_write_text
from trm_kaggle.config import RECURSION_FIELDS, ArcBuildConfig, ArchConfig, SolveConfig, TrainConfig
from trm_kaggle.data.arc import MAX_GRID, read_challenges
from trm_kaggle.data.build_arc import build_arc, built_with
from trm_kaggle.data.loader import IGNORE_LABEL_ID, PuzzleLoader
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate.submission import make_submission, validate_submission, write_submission
from trm_kaggle.jsonio import read_json
from trm_kaggle.locks import SUBMIT_LOCK, directory_lock
from trm_kaggle.model.export import model_from_train_state
from trm_kaggle.model.rollout import act_rollout
from trm_kaggle.solve.plan import Budget
from trm_kaggle.solve.shard import (
    Outcome, WorkerSpec, assign, collect, make_units, run_in_process, run_spawned, task_digest,
)
from trm_kaggle.solve.schedule import finetune_phases
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import TrainResult, train
from trm_kaggle.train.runtime import pick_device

log = logging.getLogger(__name__)

SUBSET = "unseen"


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
    if built_with(build_cfg) is not None:
        log.info("reusing the dataset in %s", data_dir)
        return data_dir
    build_arc(build_cfg)
    return data_dir


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
        tcfg = TrainConfig(
            arch=arch, data_paths=[str(data_dir)], load_checkpoint=str(Path(cfg.weights).absolute()),
            global_batch_size=batch, lr=cfg.lr, puzzle_emb_lr=cfg.puzzle_emb_lr,
            lr_warmup_steps=min(100, max(1, cfg.finetune_steps // 10)), epochs=1_000_000,
            max_steps=phase.until_step, eval_interval=None, freeze_weights=phase.freeze_weights, ema=False,
            seed=cfg.seed, device=cfg.device, threads=cfg.threads, checkpoint_path=str(run_dir), checkpoint_keep=1,
            progress=cfg.progress, log_interval=max(1, min(50, cfg.finetune_steps // 10 or 1)))
        result = train(tcfg, deadline=deadline, banner=banner)
        banner = False
        if result.step < phase.until_step:
            break  # out of time
    return result


def load_finetuned(run_dir: Path, device: torch.device):
    """The fine-tuned model of the run's newest train state (live weights: fine-tuning keeps no EMA)."""
    model, _, _ = model_from_train_state(ckpt.load_newest_state(run_dir)[1], use_ema=False)
    return model.to(device)


# ---------------------------------------------------------------------------
# The whole job
# ---------------------------------------------------------------------------


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


def settings_key(cfg: SolveConfig) -> dict:
    """What a task's result is made of besides the task: a later run reuses it only when this is equal."""
    h = hashlib.sha256()
    for name in ("config.json", "weights.safetensors"):
        try:
            path = Path(cfg.weights) / name  # a device or FIFO is never read (it may never end): the load refuses it
            h.update(path.read_bytes() if path.is_file() else b"not a regular file")
        except OSError:
            h.update(b"missing")
    fields = ("num_aug", "finetune", "embeddings_fraction", "finetune_steps", *RECURSION_FIELDS, "global_batch_size",
              "lr", "puzzle_emb_lr", "eval_batch_size", "early_exit", "seed")
    return {"weights": h.hexdigest()[:16], **{f: getattr(cfg, f) for f in fields}}


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_devices(cfg: SolveConfig, say: Callable[[str], None]) -> tuple[str, list[str | None], int | None]:
    """(the workers' device, CUDA_VISIBLE_DEVICES of each worker, CPU threads per worker).

    One worker per visible CUDA device by default, each seeing only its own; on CPU `workers` processes
    share the cores; MPS has one device. More workers than devices are cut to one per device (said, not
    refused: a wrong WORKERS must not cost the kernel its submission)."""
    device = pick_device(cfg.device).type
    count = torch.cuda.device_count() if device == "cuda" else 1
    workers = cfg.workers or count
    if device != "cpu" and workers > count:
        say(f"warning: workers={workers} but {count} {device} device(s): one worker per device, {count} in all")
        workers = count
    if device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(count)]
        return "cuda", (ids[:workers] if workers > 1 else [None]), cfg.threads
    threads = cfg.threads or (max(1, usable_cores() // workers) if device == "cpu" else None)
    return device, [None] * workers, threads


def _echo(cfg: SolveConfig) -> Callable[[str], None]:
    if cfg.progress:
        return lambda line: print(line, file=sys.stderr, flush=True)
    return log.info


def solve(cfg: SolveConfig, *, echo: Callable[[str], None] | None = None,
          on_poll: Callable[[list[Outcome]], None] | None = None) -> dict[str, Any]:
    """`_solve` as the only writer of cfg.work_dir: a second submit there is refused before it writes anything."""
    with directory_lock(cfg.work_dir, SUBMIT_LOCK, "submit", required=False):
        return _solve(cfg, echo=echo, on_poll=on_poll)


def _solve(cfg: SolveConfig, *, echo: Callable[[str], None] | None = None,
           on_poll: Callable[[list[Outcome]], None] | None = None) -> dict[str, Any]:
    """Write cfg.output in every case; returns a report of what happened.

    Once the challenges file is read, nothing can stop a valid submission from reaching cfg.output: the
    fallback answer is written first, from the challenges in memory, before the work dir is touched; the
    answers replace it task by task as workers finish them. Logs in the work dir are optional.
    `echo` gets one line per phase (default: stderr with `progress`, else the log); `on_poll` is called while
    spawned workers run (tests use it to kill one)."""
    budget = Budget(cfg.time_budget, cfg.safety_margin)
    say = echo or _echo(cfg)
    duplicates: set[str] = set()
    challenges = read_challenges(cfg.challenges, duplicates)
    report: dict[str, Any] = {"tasks": len(challenges), "errors": []}
    report.update(_write_answer(cfg, challenges, {}, duplicates))  # the fallback, on disk before anything else
    say(budget.line("fallback", f"{cfg.output} holds a valid answer for each of the {len(challenges)} tasks"))

    try:
        canvas = export_canvas(cfg.weights)
    except Exception:  # noqa: BLE001 - unreadable weights: the worker reports them, the fallback stands
        canvas = MAX_GRID
    units, left_out = make_units({k: v for k, v in challenges.items() if k not in duplicates}, cfg.max_tasks,
                                 canvas)
    report.update(model_tasks=len(units), left_out=left_out)
    say(budget.line("tasks", f"the model works on {len(units)} of {len(challenges)} tasks"
                    + (f" (max_tasks {cfg.max_tasks})" if cfg.max_tasks else "")
                    + (f"; {len(left_out)} malformed or too large tasks keep the fallback" if left_out else "")
                    + (f"; {len(duplicates)} repeated ids keep the fallback" if duplicates else "")))
    work, key = Path(cfg.work_dir), settings_key(cfg)
    keys = {u.index: {**key, "task": task_digest(challenges[u.task_id])} for u in units}

    def merge() -> tuple[dict, dict, dict]:
        candidates, task_reports = collect(work, units, keys)
        return candidates, task_reports, _write_answer(cfg, challenges, candidates, duplicates)

    def merge_so_far() -> None:  # the submission holds every answer so far: a kernel killed at 12 h keeps them
        try:
            merge()
        except Exception as e:  # noqa: BLE001 - the final merge reports it; the workers must go on
            log.warning("merging the answers so far failed: %s", e)

    outcomes: list[Outcome] = []
    shards: list[list] = []
    causes: list[str] = []  # why the model path failed, for `model_failure`
    try:
        if budget.left() <= 0:
            raise TRMError(f"the time budget ({cfg.time_budget} s) is used up by the safety margin "
                           f"({cfg.safety_margin} s): nothing left for the model")
        work.mkdir(parents=True, exist_ok=True)
        device, visible, threads = worker_devices(cfg, say)
        shards = assign(units, len(visible))
        quiet = cfg if len(visible) == 1 else cfg.model_copy(update={"progress": False})  # no bars in log files
        specs = [WorkerSpec(i, device, shard, {u.task_id: challenges[u.task_id] for u in shard},
                            quiet.model_dump_json(), key, str(work), budget.start, budget.end, threads, visible[i],
                            len(shards))
                 for i, shard in enumerate(shards)]
        say(budget.line("workers", f"{len(specs)} on {device}" + (f", {threads} CPU threads each" if threads else "")
                        + ": " + ", ".join(f"worker {s.worker} {len(s.units)} tasks" for s in specs)))
        if len(specs) == 1:
            outcomes = [run_in_process(specs[0], say, on_answer=merge_so_far)]
        else:  # stop stragglers after the budget's end, leaving half the safety margin to write the answers
            stop_at = None if budget.end is None else budget.end + min(30.0, cfg.safety_margin / 2)
            outcomes = run_spawned(specs, say, stop_at=stop_at, on_answer=merge_so_far, on_poll=on_poll)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the model path failed before any worker ran: the fallback on disk stays the answer
        report["errors"].append(str(e) if isinstance(e, TRMError) else f"{type(e).__name__}: {e}")
        causes.append(report["errors"][-1])
        log.error("model path failed (%s); the submission holds the fallback answers", e)
    for out in outcomes:
        if out.error:
            causes.append(out.error)
            lost = out.units - out.done
            report["errors"].append(f"worker {out.worker} ({out.device}): {out.error}; {lost} of its {out.units} "
                                    f"tasks keep the fallback" + (f"; log: {out.log}" if out.log else ""))
            say(budget.line(f"worker {out.worker}", report["errors"][-1]))

    candidates, task_reports, answer = merge()
    failed = {t: r["error"] for t, r in task_reports.items() if "error" in r}
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
            unanswered.update({u.task_id: why for u in shard})
    fallback = fallback_reasons(challenges, units, left_out, duplicates, cfg.max_tasks, task_reports, candidates,
                                unanswered)
    report.update(answer, workers=[o.as_dict() for o in outcomes], task_reports=task_reports,
                  # tasks whose model path ran and predicted (a task cut before its first prediction is not one)
                  answered=sum(1 for r in task_reports.values() if "error" not in r and r.get("predicted", 0) > 0),
                  predicted=sum(1 for v in candidates.values() if v),
                  fallback=fallback, elapsed_s=round(time.time() - budget.start, 1))
    by_reason: dict[str, list[str]] = {}
    for task_id, why in fallback.items():
        by_reason.setdefault(why, []).append(task_id)
    for why, tasks in by_reason.items():  # one line per reason: a long list of tasks stays one line
        shown_ids = ", ".join(tasks[:3]) + (", ..." if len(tasks) > 3 else "")
        say(budget.line("fallback", (f"task {tasks[0]}" if len(tasks) == 1 else f"{len(tasks)} tasks ({shown_ids})")
                        + f" keep{'s' if len(tasks) == 1 else ''} the fallback answer: {why}"))
    say(budget.line("submission", f"{cfg.output}: {'valid' if report['valid'] else 'INVALID'}; "
                    f"{report['answered']} of {len(challenges)} tasks answered by the model, {report['predicted']} "
                    f"test inputs with model predictions"))
    if work.is_dir():
        _note(work / "solve_report.json", json.dumps(report, indent=2, default=str))
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
            why = f"{len(missing)} of {tests[task_id]} test inputs without a model prediction (cut by the deadline)"
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
