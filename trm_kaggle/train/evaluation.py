"""The test-split check during training: exact accuracy per (augmented) example, every `eval_interval` epochs.

This is per-example accuracy, not the ARC score: `trm-kaggle evaluate` votes over augmentations and reports
pass@K / the ARC Prize score. With EMA the shadow weights are evaluated, as upstream. `Evaluations` decides
when one is due (upstream's `eval_interval` and `min_eval_interval`) and whether it ends before the deadline.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import torch

from trm_kaggle import xla
from trm_kaggle.config import TrainConfig
from trm_kaggle.data import IGNORE_LABEL_ID, PuzzleLoader
from trm_kaggle.model import ContinuousRollout, TinyRecursiveModel, balanced_slots
from trm_kaggle.train.metrics import METRICS_FILE, read_metrics
from trm_kaggle.train.runtime import Runtime, all_reduce_
from trm_kaggle.train.stops import EvaluationCut, StopControl, expected_eval_seconds

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_split(model: TinyRecursiveModel, cfg: TrainConfig, rt: Runtime, batch_size: int | None = None
                   ) -> dict[str, float]:
    """Exact accuracy of the test split's examples after halt_max_steps ACT steps.

    The examples run through a fixed batch (`ContinuousRollout`, whose `score` sums what `trm-kaggle evaluate`
    reports of a Sudoku or Maze dataset too); only the last step's logits are decoded. A test split without
    examples records no accuracy (`eval_examples` 0 alone): no data is not a zero.
    """
    settings = cfg.evaluation()  # the shape every evaluation takes
    batch_size = batch_size or settings.batch_size
    loader = PuzzleLoader(cfg.data_paths_test or cfg.data_paths, "test", batch_size, seed=cfg.seed, rank=rt.rank,
                          world_size=rt.world_size)
    local_batch = batch_size // rt.world_size
    slots = local_batch if rt.device.type == "xla" else balanced_slots(
        math.ceil(loader.num_examples / rt.world_size), local_batch)
    rollout = ContinuousRollout(model, slots, settings.max_steps, device=rt.device)
    source = ({k: item.batch[k][:item.num_real] for k in ("inputs", "labels", "puzzle_identifiers")}
              for item in loader)
    was_training = model.training
    model.eval()
    totals = rollout.score(source, IGNORE_LABEL_ID)
    if rt.distributed:
        all_reduce_([totals])
    if rt.device.type == "xla":
        xla.step_boundary()  # XLA: run the reduction before the host reads it
    model.train(was_training)
    count, exact, token, _, steps = totals.tolist()[:5]  # one host read
    if count == 0:
        log.warning("test split: no test examples to score (no accuracy recorded)")
        return {"eval_examples": 0}
    return {"eval_examples": int(count), "eval_exact_accuracy": exact / count, "eval_token_accuracy": token / count,
            "eval_steps": steps / count}


def evaluate_weights(model, ema, cfg: TrainConfig, rt: Runtime) -> dict[str, float]:
    """`evaluate_split` of the weights upstream evaluates: the EMA's shadow where there is one."""
    if ema is None:
        return evaluate_split(model, cfg, rt)
    with ema.applied(model):
        metrics = evaluate_split(model, cfg, rt)
    if rt.device.type == "xla":
        xla.step_boundary()  # XLA: restore the live weights now, not inside the next step's graph
    return metrics


def last_evaluation_seconds(run_dir: Path) -> float | None:
    """How long the run's last evaluation took (metrics.jsonl's `evaluation_s`), None before the first."""
    evals = read_metrics(run_dir)[1] if (run_dir / METRICS_FILE).is_file() else []
    timed = [r["evaluation_s"] for r in evals if isinstance(r.get("evaluation_s"), (int, float))]
    return float(timed[-1]) if timed else None


class Evaluations:
    """When the run evaluates, and each evaluation's outcome.

    One is due when the step completes an `eval_interval` of epochs (upstream's iteration), from the
    iteration numbered `min_eval_interval` on (upstream: `_iter_id >= min_eval_interval`, counted from 0). The
    schedule's last step ends its last iteration (`epochs // eval_interval` of them, upstream's count): the
    schedule's length is truncated to whole steps, and the last interval once ended a step after it, so the
    final weights were never evaluated. A schedule in which no iteration evaluates is said, once; so is a
    `max_steps` that stops the run before its first evaluation, or after its last (the final weights are not
    evaluated): max_steps only stops the schedule early (a resumed run with a larger one continues it), so it
    adds no evaluation of its own.
    Under a deadline an evaluation that would end after it is skipped, with a warning: its length is the last
    one measured, or (before the first) an estimate from the test split's batches and the step time.
    """

    def __init__(self, cfg: TrainConfig, rt: Runtime, run_dir: Path, steps_per_epoch: float, step: int,
                 deadline: float | None, total_steps: int | None = None, stop_at: int | None = None):
        self.cfg, self.rt, self.deadline, self.steps_per_epoch = cfg, rt, deadline, steps_per_epoch
        # why this call evaluates nothing (max_steps stops it before its first evaluation), for the closing lines
        self.unevaluated: str | None = None
        # None: once, at the schedule's end (upstream's eval_interval is then the run's epochs)
        self.interval = cfg.eval_interval if cfg.eval_interval is not None else cfg.epochs
        self.total_steps = total_steps  # the schedule's length: its last step ends the last iteration
        self.iterations = cfg.epochs // self.interval if self.interval else 0
        if self.interval and self.iterations <= (cfg.min_eval_interval or 0) and rt.is_main:
            log.warning("eval_interval=%s with epochs=%s%s: no interval of the schedule evaluates, so the test "
                        "split is never evaluated (eval_interval=null evaluates once, at the schedule's end)",
                        cfg.eval_interval, cfg.epochs,
                        f" and min_eval_interval={cfg.min_eval_interval}" if cfg.min_eval_interval else "")
        elif (self.interval and rt.is_main and stop_at is not None and total_steps is not None
              and step < stop_at < total_steps):  # max_steps stops the schedule early
            self._warn_of_the_stop(step, stop_at)
        self.last_epoch = self._iteration(step) if self.interval else None
        self.last_s = last_evaluation_seconds(run_dir) if deadline is not None and self.interval else None
        self.test_batches: int | None = None  # counted when an evaluation first needs an estimate of its length
        self.metrics: dict[str, float] = {}
        self.seconds = 0.0

    def due(self, step: int) -> bool:
        """Whether `step` (just taken) ends an interval that evaluates."""
        if not self.interval:
            return False
        e = self._iteration(step)
        if e <= self.last_epoch:
            return False
        self.last_epoch = e
        return e - 1 >= (self.cfg.min_eval_interval or 0)  # upstream's iteration e - 1

    def _iteration(self, step: int) -> int:
        """How many iterations (eval intervals) have ended by `step`; it never decreases as `step` grows."""
        e = math.floor(step / self.steps_per_epoch / self.interval)
        if self.total_steps is not None and step >= self.total_steps:
            e = max(e, self.iterations)
        return e

    def _first_step(self, after: int, upto: int, iteration: int) -> int | None:
        """The first step in (after, upto] by which `iteration` iterations have ended, None when none is."""
        if self._iteration(upto) < iteration:
            return None
        lo, hi = after + 1, upto  # a bisection: a long schedule has millions of steps
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._iteration(mid) >= iteration else (mid + 1, hi)
        return lo

    def _first_evaluation(self, after: int, upto: int) -> int | None:
        """The first step in (after, upto] that `due` evaluates, stepping from `after` on; None when none does."""
        return self._first_step(after, upto, max(self._iteration(after), self.cfg.min_eval_interval or 0) + 1)

    def _warn_of_the_stop(self, step: int, stop_at: int) -> None:
        """Say when max_steps stops the run (from `step` on) before its first evaluation, or where none is due."""
        cfg = self.cfg
        later = self._first_evaluation(stop_at, self.total_steps)  # the schedule's next one after the stop
        # at the schedule's end no max_steps is needed: the run without one gets there
        remedies = [f"max_steps={later} ends on one"] if later is not None and later < self.total_steps else []
        if self._first_evaluation(step, stop_at) is None:
            if self.interval > 1:  # eval_interval=null: the interval is the whole schedule
                remedies.append("a smaller eval_interval evaluates sooner" if cfg.eval_interval is not None
                                else "an eval_interval (epochs) evaluates sooner")
            if cfg.min_eval_interval:
                remedies.append("a smaller min_eval_interval evaluates sooner")
            due = "" if later is None else f", at step {later}" + (
                " (the schedule's end)" if later == self.total_steps else "")
            self.unevaluated = (f"not evaluated: max_steps={cfg.max_steps} stops the run at step {stop_at} (epoch "
                                f"{stop_at / self.steps_per_epoch:.2f}), before its {'first' if step == 0 else 'next'} "
                                f"evaluation{due}: " + "; ".join(
                                    [*remedies, "`trm-kaggle evaluate` scores an export of the run"]))
            # eval_interval=null asks for one evaluation, at the schedule's end, which a max_steps stop does not
            # reach by design (cpu-smoke's 50 steps): said in the closing lines; an interval given is a warning
            log.log(logging.WARNING if cfg.eval_interval is not None else logging.INFO, "%s",
                    f"the test split is {self.unevaluated}")
        elif self._iteration(stop_at - 1) == self._iteration(stop_at):  # no interval ends at the stop
            last = self._first_step(step, stop_at, self._iteration(stop_at))
            log.warning("max_steps=%d stops the run at step %d, which does not evaluate: the final weights are not "
                        "evaluated (the last evaluation is at step %d; %s)", cfg.max_steps, stop_at, last,
                        "; ".join([*remedies, "`trm-kaggle evaluate` scores an export of the run"]))

    def run(self, model, ema, control: StopControl, step: int, seconds_per_step: float) -> str:
        """Evaluate now: "done" (`metrics`, `seconds` set), "skipped" (it would end after the deadline) or "cut"
        (a stop signal cut it short: the last complete evaluation's metrics stand; the caller notes it in the state
        saved at this step, and a resume runs it first)."""
        if self.deadline is not None:  # an evaluation must end before the deadline, or not start
            if self.last_s is None and self.test_batches is None:
                self.test_batches = len(PuzzleLoader(self.cfg.data_paths_test or self.cfg.data_paths, "test",
                                                     self.cfg.global_batch_size, seed=self.cfg.seed, prefetch=0))
            expected = expected_eval_seconds(self.last_s, self.test_batches, self.cfg.arch.halt_max_steps,
                                             seconds_per_step)
            if expected is not None and not control.eval_fits(expected):
                log.warning("step %d: evaluation skipped: it would end after %s (about %.0f s needed, %.0f s left)",
                            step, control.deadline_name, expected, self.deadline - time.monotonic())
                return "skipped"
        t_eval = time.perf_counter()
        try:
            with control.cuttable():  # a stop signal cuts it short (it changes no weight)
                metrics = evaluate_weights(model, ema, self.cfg, self.rt)
        except EvaluationCut as cut:
            model.train()
            log.warning("step %d: evaluation cut short by %s (the run's resume runs it first)", step, cut)
            return "cut"
        self.metrics, self.seconds = metrics, time.perf_counter() - t_eval
        self.last_s = self.seconds
        return "done"
