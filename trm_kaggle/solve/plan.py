"""The kernel's time plan: what each worker does with the time it has, and lines that say how it is going.

    the worker's device -> one timed batch of each kind (`estimate`'s step timer) -> Rates
    Rates + the worker's tasks + its seconds until the deadline -> Plan (augmentations, fine-tuning steps,
                                                                          seconds reserved for inference)

Every task is solved on its own, so a worker's time is the sum over its tasks of: fine-tuning
(steps x seconds per step), inference (test inputs x (num_aug + 1) x ACT steps x seconds per row-step, plus
`DECODE_OVERHEAD` for decoding, voting and batch tails) and a fixed per-task overhead (dataset, model load,
demonstration accuracy before and after fine-tuning).

`auto` settings fit that sum into the worker's time minus `plan_margin` (a share kept free for what the
timed batch does not see): NUM_AUG is the largest count (at most `AUTO_MAX_AUG`) whose inference fits in
`INFERENCE_SHARE` of the planned time (all of it without fine-tuning), and FINETUNE_STEPS spends the rest
(at most `AUTO_MAX_STEPS` per task, each step priced by what the fine-tuning mode trains in it). Fixed
settings are kept; the plan then says whether they fit, and the
deadline still stops fine-tuning early where they do not.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from trm_kaggle.config import ArchConfig, SolveConfig
from trm_kaggle.solve.estimate import estimate, finetune_seconds, inference_seconds

AUTO_MAX_AUG = 1000  # upstream's evaluation recipe votes over 1000 augmentations per task
AUTO_MAX_STEPS = 2000  # fine-tuning steps per task
INFERENCE_SHARE = 0.5  # with fine-tuning, inference gets at most this share of the planned time
DECODE_OVERHEAD = 1.3  # measured inference rate x 1.3: decoding, voting, the last partial batch
TASK_OVERHEAD_S = 2.0  # an allowance per task for dataset build, model load, train-state save (not timed)
DEMO_ROWS = 64  # demonstration examples scored before and after fine-tuning (`solve.demo_accuracy`)
MIN_PLAN_S = 10.0  # a worker with less time than this before the deadline starts nothing (timing alone costs more)


def hms(seconds: float) -> str:
    """12h03m05s / 3m05s / 5.2s."""
    if not math.isfinite(seconds):
        return "no limit"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    h, m = int(s // 3600), int(s % 3600 // 60)
    return f"{h}h{m:02d}m{int(s % 60):02d}s" if h else f"{m}m{int(s % 60):02d}s"


class Budget:
    """Wall-clock budget: `left()` seconds until the safety margin starts; `line()` for the phase log."""

    def __init__(self, seconds: float | None, margin: float, start: float | None = None):
        self.start = time.time() if start is None else start
        self.end = None if seconds is None else self.start + seconds - margin

    @classmethod
    def until(cls, start: float, end: float | None) -> "Budget":
        """The budget that started at `start` (time.time()) and ends at `end` (None: no limit)."""
        budget = cls(None, 0.0, start)
        budget.end = end
        return budget

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.time()

    def deadline(self, reserve: float = 0.0) -> float | None:
        return None if self.end is None else self.end - reserve

    def line(self, phase: str, detail: str = "") -> str:
        """`[elapsed 3m05s, left 11h20m00s] phase: detail`: one line per phase of the kernel."""
        where = f"[elapsed {hms(time.time() - self.start)}, left {hms(self.left())}]"
        return f"{where} {phase}" + (f": {detail}" if detail else "")


@dataclass
class Rates:
    """Seconds of one fine-tuning step (a `batch`-row batch) training every weight (`step_s`) or the puzzle rows
    alone (`embeddings_step_s`), and of one row for one ACT step, on `device`."""

    device: str
    step_s: float
    embeddings_step_s: float
    row_step_s: float
    halt_max_steps: int
    batch: int
    eval_batch: int


def measure_rates(arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device, batch: int,
                  eval_batch: int) -> Rates:
    """One timed batch of each kind on `device` (`estimate`'s timer), with the export's architecture and the
    batch sizes the worker will use (`batch_sizes`)."""
    e = estimate(arch, tasks=1, num_aug=0, finetune_steps=0, batch_size=batch, eval_batch_size=eval_batch,
                 device=device, seq_len=seq_len, vocab_size=vocab_size, repeats=1)
    return Rates(device_name(device), e.finetune_step_s, e.embeddings_step_s, e.row_step_s, arch.halt_max_steps,
                 batch, eval_batch)


def batch_sizes(cfg: SolveConfig, units: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """(fine-tuning batch, prediction batch) of the worker's largest task: a task's dataset holds
    (num_aug + 1) copies of its pairs, and a batch is never larger than that. With auto num_aug, the full
    configured sizes (the plan has not chosen num_aug yet)."""
    if cfg.num_aug == "auto" or not units:
        return cfg.global_batch_size, cfg.eval_batch_size
    copies = cfg.num_aug + 1
    return (min(cfg.global_batch_size, max(d for _, d in units) * copies),
            min(cfg.eval_batch_size, max(t for t, _ in units) * copies))


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{device} ({torch.cuda.get_device_name(index)})"
    return str(device)


@dataclass
class Plan:
    """What one worker will do: its tasks, the settings it runs them with, and the seconds each part takes."""

    worker: int
    rates: Rates | None  # None without a time limit: nothing to fit, so nothing is timed
    tasks: int
    test_inputs: int
    num_aug: int
    finetune_steps: int
    auto: tuple[str, ...]  # the settings chosen here
    inference_s: float  # reserved for predicting every task's augmented test inputs
    finetune_s: float
    overhead_s: float
    available_s: float | None  # until the deadline; None = no limit
    margin: float

    @property
    def total_s(self) -> float:
        return self.inference_s + self.finetune_s + self.overhead_s

    @property
    def fits(self) -> bool:
        return self.available_s is None or self.total_s <= self.available_s

    def describe(self) -> str:
        def tag(name: str) -> str:
            return " (auto)" if name in self.auto else ""

        r = self.rates
        head = (f"worker {self.worker} on {r.device if r else 'its device'}: {self.tasks} tasks "
                f"({self.test_inputs} test inputs), num_aug {self.num_aug}{tag('num_aug')}, {self.finetune_steps} "
                f"fine-tuning steps per task{tag('finetune_steps')}")
        if r is None:
            return f"{head}; no time limit, so nothing to fit and nothing timed"
        timed = (f"timed batch: {r.step_s:.3g} s per fine-tuning step of every weight, {r.embeddings_step_s:.3g} s "
                 f"of the puzzle rows alone ({r.batch} rows), {r.row_step_s * 1e3:.3g} ms per row and ACT step "
                 f"({r.eval_batch} rows, {r.halt_max_steps} steps)")
        parts = (f"fine-tuning {hms(self.finetune_s)} + inference {hms(self.inference_s)} reserved + per-task "
                 f"overhead {hms(self.overhead_s)} = {hms(self.total_s)}")
        if self.fits:
            kept = f" ({self.margin:.0%} kept free)" if self.auto else ""
            budget = f"of {hms(self.available_s)} until the deadline{kept}"
        else:
            budget = f"of {hms(self.available_s)}: does NOT fit, fine-tuning stops early at the deadline"
        return f"{head}; {timed}; {parts} {budget}"

    def as_dict(self) -> dict:
        return {**asdict(self), "total_s": self.total_s, "fits": self.fits}


def reserve_seconds(test_rows: int, rates: Rates) -> float:
    """Seconds to reserve for predicting `test_rows` augmented test inputs (plus decoding and voting)."""
    return inference_seconds(test_rows, rates.halt_max_steps, rates.row_step_s) * DECODE_OVERHEAD + 1.0


def make_plan(cfg: SolveConfig, units: Sequence[tuple[int, int]], rates: Rates | None, available_s: float | None,
              worker: int = 0) -> Plan:
    """The plan of a worker whose tasks have (test inputs, demonstration pairs) `units`, with `available_s`
    seconds until the deadline (None: no limit, and then `rates` may be None)."""
    tasks, rows = len(units), int(sum(t for t, _ in units))
    tuning = cfg.finetune != "none"
    auto = tuple(name for name in ("num_aug", "finetune_steps") if getattr(cfg, name) == "auto")
    if available_s is None or rates is None:
        if auto:
            raise ValueError("auto settings need a time budget and timed rates")  # SolveConfig refuses it first
        return Plan(worker, rates, tasks, rows, cfg.num_aug, cfg.finetune_steps if tuning else 0, (), 0.0, 0.0,
                    0.0, None, cfg.plan_margin)

    def overhead(n: int) -> float:  # dataset, model load, demonstration accuracy before and after fine-tuning
        demo_rows = sum(min(DEMO_ROWS, d * (n + 1)) for _, d in units) if tuning else 0
        return tasks * TASK_OVERHEAD_S + 2 * demo_rows * rates.halt_max_steps * rates.row_step_s

    def infer(n: int) -> float:  # the sum of every task's `reserve_seconds`
        return 0.0 if tasks == 0 else (inference_seconds(rows * (n + 1), rates.halt_max_steps, rates.row_step_s)
                                       * DECODE_OVERHEAD + tasks * 1.0)

    def most_aug(seconds: float) -> int:  # the largest num_aug whose inference fits in `seconds`
        per_copy = inference_seconds(rows, rates.halt_max_steps, rates.row_step_s) * DECODE_OVERHEAD
        if per_copy <= 0:
            return AUTO_MAX_AUG
        return max(0, min(AUTO_MAX_AUG, math.floor((seconds - tasks * 1.0) / per_copy) - 1))

    def tune(steps: int) -> float:  # every task's fine-tuning, each step priced by what it trains
        return finetune_seconds(tasks, cfg.finetune, cfg.embeddings_fraction, steps, rates.step_s,
                                rates.embeddings_step_s)

    def most_steps(seconds: float) -> int:  # the most steps per task whose fine-tuning fits in `seconds`
        lo, hi = 0, AUTO_MAX_STEPS
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if tune(mid) <= seconds else (lo, mid - 1)
        return lo

    planned = max(0.0, available_s * (1 - cfg.plan_margin) - overhead(DEMO_ROWS))
    steps = cfg.finetune_steps if tuning else 0
    if cfg.num_aug == "auto":
        if not tuning:
            num_aug = most_aug(planned)
        elif steps == "auto":
            num_aug = most_aug(planned * INFERENCE_SHARE)
        else:
            num_aug = most_aug(planned - tune(steps))
    else:
        num_aug = cfg.num_aug
    if steps == "auto":
        steps = most_steps(planned - infer(num_aug)) if tasks else 0
    return Plan(worker, rates, tasks, rows, num_aug, steps, auto, infer(num_aug), tune(steps), overhead(num_aug),
                available_s, cfg.plan_margin)
