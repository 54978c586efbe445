"""The kernel's time plan: what each worker does with the time it has, and lines that say how it is going.

    the worker's device -> one timed batch of each kind (`step_timer.py`), sized for the device and
                           inside a timing cap -> Rates
    Rates + the worker's tasks + its seconds until the deadline -> Plan (augmentations, fine-tuning steps,
                                                                          seconds reserved for inference)

`plan_worker` does both and returns the settings the tasks run with: on CPU and MPS the batches timed (at
most what the memory share holds, grown while a step stays short: `step_timer.time_steps`) are the batches
the tasks use; CUDA and XLA keep the configured ones. Timing takes at most `step_timer.timing_cap` of the time
left (the memory estimate and CUDA's start-up, its first untimed steps, come before and are not counted; the
plan fits the time left after the timing). A step slower than the cap is a measurement, not a failure: the plan
prices from it (the steps it left untimed priced from it as upper bounds). Only a budget too short to time
anything (`step_timer.MIN_TIMING_S`) gets the fixed small plan: nothing priced, no fine-tuning (nothing was timed
to fit it), `SHORT_NUM_AUG` augmentations where num_aug is auto, `SHORT_BATCH` rows per batch on CPU and MPS,
and each task predicting for an equal share of the time left.

The worker answers its cheapest tasks first (`cheapest_first`: fewest test inputs, then fewest demonstration
pairs), so a deadline that comes sooner than priced costs the expensive tasks; and a task whose share of the
time cannot hold one prediction batch gets smaller batches (`prediction_batch`), so that it keeps its share.

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
from typing import Callable, Sequence, TypeVar

import torch

from trm_kaggle.config import (MAX_BATCH_SIZE, MAX_HALT_STEPS, MAX_NUM_AUG, MAX_TRAJECTORIES, WEEK_S, ArchConfig,
                               SolveConfig, number_argument, seconds_argument, sequence_argument, texts_argument,
                               whole_argument)
from trm_kaggle.solve.pricing import (DEMO_ROWS, TASK_OVERHEAD_S, check_kinds, demo_rows, finetune_seconds,
                                      inference_seconds, overhead_seconds, with_test_time)
from trm_kaggle.solve.step_timer import MIN_TIMING_S, SIZED_DEVICES, memory_batches, time_steps, timing_cap
from trm_kaggle.wording import clipped, type_name

AUTO_MAX_AUG = 1000  # upstream's evaluation recipe votes over 1000 augmentations per task
AUTO_MAX_STEPS = 2000  # fine-tuning steps per task
INFERENCE_SHARE = 0.5  # with fine-tuning, inference gets at most this share of the planned time
DECODE_OVERHEAD = 1.3  # measured inference rate x 1.3: decoding, voting, the last partial batch
SHORT_NUM_AUG = 2  # the fixed small plan (a budget too short to time): augmentations where num_aug is auto ...
SHORT_BATCH = 8  # ... and at most this many rows per batch on CPU and MPS
# The bounds of what `Rates` and `make_plan` are given (both on the package's face): far past any measurement or
# challenges file, so only a typo or a wrong type is refused.
MAX_RATE_S = WEEK_S  # seconds of one step, or of the timing: a step slower than the longest budget prices no plan
MAX_PRICED_STEPS = MAX_TRAJECTORIES * MAX_HALT_STEPS  # row-steps of one prediction row (`with_test_time`: its
# trajectories x its depth; `test_depth` is bounded below MAX_HALT_STEPS)
MAX_UNIT_COUNT = 10**9  # test inputs or demonstration pairs of one task (ARC's tasks hold a handful)
MAX_AUG_COPIES = MAX_NUM_AUG + 1  # copies of one test input a plan predicts: num_aug + 1
MAX_WORKER = 4095  # a worker's number (the settings start at most 1024 workers)
T = TypeVar("T")


def hms(seconds: float | None) -> str:
    """12h03m05s / 3m05s / 5.2s; "no limit" for None or +inf (`Budget.left()` without one), 0.0s below zero (a
    deadline passed). The phase log's form; `pricing.hms` is a table column's. NaN, which was "no limit", and
    what is no number are a ValueError naming `seconds`."""
    if isinstance(seconds, float) and seconds == math.inf:
        return "no limit"
    if (s := seconds_argument("seconds", seconds)) is None:
        return "no limit"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f}s"
    h, m = int(s // 3600), int(s % 3600 // 60)
    return f"{h}h{m:02d}m{int(s % 60):02d}s" if h else f"{m}m{int(s % 60):02d}s"


class Budget:
    """The time budget: `left()` seconds until the safety margin starts; `line()` for the phase log.

    Measured on the monotonic clock (`time.monotonic()`, one clock for every process of this machine: the
    workers share the parent's start and end): a step of the wall clock (NTP, a suspended machine's clock
    reset, a user's `date -s`) neither ends the budget early nor stretches it."""

    def __init__(self, seconds: float | None, margin: float, start: float | None = None):
        # checked here: a NaN budget was NaN seconds left, a margin of -inf a 10 s budget shown as "no limit"
        seconds = seconds_argument("seconds", seconds)
        if seconds is not None and seconds < 0:
            raise ValueError(f"seconds={seconds!r}: expected a budget from 0 seconds, or None (no limit)")
        margin = number_argument("margin", margin, 0.0, MAX_RATE_S)
        start = seconds_argument("start", start)
        self.start = time.monotonic() if start is None else start
        self.end = None if seconds is None else self.start + seconds - margin

    @classmethod
    def until(cls, start: float, end: float | None) -> "Budget":
        """The budget that started at `start` (time.monotonic()) and ends at `end` (None: no limit)."""
        budget = cls(None, 0.0, start)
        budget.end = seconds_argument("end", end)
        return budget

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()

    def deadline(self, reserve: float = 0.0) -> float | None:
        """The end less `reserve` seconds (from 0, checked as the margin is: NaN was a NaN deadline); None: no limit."""
        reserve = number_argument("reserve", reserve, 0.0, MAX_RATE_S)
        return None if self.end is None else self.end - reserve

    def line(self, phase: str, detail: str = "") -> str:
        """`[elapsed 3m05s, left 11h20m00s] phase: detail`: one line per phase of the kernel."""
        where = f"[elapsed {hms(time.monotonic() - self.start)}, left {hms(self.left())}]"
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
    timing_s: float = 0.0  # what the timing took ...
    cap_s: float | None = None  # ... of what it was allowed
    notes: tuple[str, ...] = ()  # how the batches were sized, what was priced instead of timed
    sizing_s: float = 0.0  # CPU/MPS: the memory estimate, before the timing and its cap
    startup_s: float = 0.0  # CUDA: its start-up (the first untimed steps), outside the timing and its cap

    def __post_init__(self):
        # checked where they are given, before any plan prices them: a NaN rate priced a NaN plan, a negative one a
        # negative total and the most augmentations, an inf one failed converting to a count
        for name in ("step_s", "embeddings_step_s", "row_step_s", "timing_s", "sizing_s", "startup_s"):
            setattr(self, name, number_argument(name, getattr(self, name), 0.0, MAX_RATE_S))
        if self.cap_s is not None:
            self.cap_s = number_argument("cap_s", self.cap_s, 0.0, MAX_RATE_S)
        self.halt_max_steps = whole_argument("halt_max_steps", self.halt_max_steps, 1, MAX_PRICED_STEPS)
        self.batch = whole_argument("batch", self.batch, 1, MAX_BATCH_SIZE)
        self.eval_batch = whole_argument("eval_batch", self.eval_batch, 1, MAX_BATCH_SIZE)


def measure_rates(arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device, batch: int,
                  eval_batch: int, *, cap_s: float | None = None, processes: int = 1,
                  say: Callable[[str], None] | None = None) -> Rates:
    """One timed batch of each kind on `device` (`step_timer.time_steps`), with the export's architecture, the
    batch sizes the worker will use (`batch_sizes`; on CPU and MPS the most it may use) and at most `cap_s`
    seconds (default `timing_cap(None)`); `say` gets a line before and after each timed step. A step that
    passes the cap still prices the plan (what it left untimed is priced from it, as an upper bound)."""
    t = time_steps(arch, seq_len, vocab_size, device, batch=batch, eval_batch=eval_batch,
                   cap_s=timing_cap(None) if cap_s is None else cap_s, processes=processes,
                   must_finish=device.type == "xla", say=say)
    return Rates(device_name(device), t.step_s, t.embeddings_step_s, t.row_step_s, arch.halt_max_steps, t.batch,
                 t.eval_batch, t.spent_s, t.cap_s, t.notes, t.sizing_s, t.startup_s)


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
    rates: Rates | None  # None: nothing timed (no time limit, or too little time to time anything)
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
    batch: int = 0  # rows per fine-tuning batch (at most: a task with fewer demonstration rows uses them all)
    eval_batch: int = 0  # rows per prediction batch (at most)
    short: bool = False  # the fixed small plan: too little time to time anything
    notes: tuple[str, ...] = ()  # batches changed for the device without timing (memory)

    @property
    def total_s(self) -> float:
        return self.inference_s + self.finetune_s + self.overhead_s

    @property
    def fits(self) -> bool:
        return self.available_s is None or self.total_s <= self.available_s

    def describe(self) -> str:
        def tag(name: str) -> str:
            return (" (fixed small plan)" if self.short else " (auto)") if name in self.auto else ""

        r = self.rates
        head = (f"worker {self.worker} on {r.device if r else 'its device'}: {self.tasks} tasks "
                f"({self.test_inputs} test inputs), num_aug {self.num_aug}{tag('num_aug')}, {self.finetune_steps} "
                f"fine-tuning steps per task{tag('finetune_steps')}")
        batches = f"batches of {self.batch} rows (fine-tuning) and {self.eval_batch} (prediction)"
        notes = "".join(f"; {n}" for n in self.notes)
        if self.short:
            return (f"{head}, {batches}{notes}: the fixed small plan, nothing priced, no fine-tuning (nothing timed "
                    f"to fit it); each task predicts for an equal share of the {hms(self.available_s)} left")
        if r is None:
            return f"{head}, {batches}{notes}; no time limit, so nothing to fit and nothing timed"
        timed = (f"timed batch: {r.step_s:.3g} s per fine-tuning step of every weight, {r.embeddings_step_s:.3g} s "
                 f"of the puzzle rows alone ({r.batch} rows), {r.row_step_s * 1e3:.3g} ms per row and ACT step "
                 f"({r.eval_batch} rows, {r.halt_max_steps} steps); "
                 + (f"start-up {r.startup_s:.1f} s (not counted), " if r.startup_s else "")
                 + (f"sizing {r.sizing_s:.1f} s, " if r.sizing_s else "") + f"timing {r.timing_s:.1f} s"
                 + (f" of its {r.cap_s:.3g} s cap" if r.cap_s is not None else "")
                 + "".join(f"; {n}" for n in r.notes))
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
    if not isinstance(rates, Rates):
        raise TypeError(f"rates: expected Rates, got {type_name(rates)}")
    test_rows = whole_argument("test_rows", test_rows, 0, MAX_UNIT_COUNT * MAX_AUG_COPIES)
    return inference_seconds(test_rows, rates.halt_max_steps, rates.row_step_s) * DECODE_OVERHEAD + 1.0


def task_deadlines(cfg: SolveConfig, plan: Plan, units: Sequence[tuple[int, int]], deadline: float,
                   overhead_s: float = TASK_OVERHEAD_S) -> tuple[float, float]:
    """(fine-tune until, predict until), time.monotonic() values, for the first of the tasks still to do, whose
    (test inputs, demonstration pairs) are `units`, run with `cfg` under `plan`; `overhead_s` is a task's
    dataset build and model load (the worker passes what its tasks so far took, `TASK_OVERHEAD_S` before the
    first).

    The time left is split afresh before each task, so a fast task leaves its time to the ones after it:
    every task gets what the plan prices for it (dataset and model, demonstration scoring before and after,
    inference with decoding and voting) and an equal share of the rest for fine-tuning. Where that leaves
    less than a step, no task is fine-tuned (nor scored on its demonstrations) and the time left is split in
    proportion to the prices, but never less than the price of the task's un-augmented copies while the time left
    holds it (a budget far short of the plan answers tasks one after another instead of cutting them all).
    Under the fixed small plan (nothing priced, no fine-tuning) each task gets an equal share.
    Prediction stops at the task's end either way (its un-augmented test inputs half a share later at most,
    `task.GRACE_SHARE`), so a task slower than priced cannot starve the next. An argument of the wrong kind or
    out of bounds is one TypeError or ValueError naming it (no tasks divided by zero, a NaN deadline or overhead
    gave NaN deadlines)."""
    check_kinds(configs={"cfg": (cfg, SolveConfig, "solve_config(**fields) makes one from a dict")})
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected a Plan (make_plan makes one), got {type_name(plan)}")
    units = checked_units(units)
    if not units:
        raise ValueError("units=[]: expected the (test inputs, demonstration pairs) of at least one task still to do")
    if (deadline := seconds_argument("deadline", deadline)) is None:
        raise ValueError("deadline=None: expected a time.monotonic() value")
    overhead_s = number_argument("overhead_s", overhead_s, 0.0, MAX_RATE_S)
    now = time.monotonic()
    left_s = max(0.0, deadline - now)
    r = plan.rates
    if r is None:  # the fixed small plan: no fine-tuning, equal shares
        return now, now + left_s / len(units)
    n = plan.num_aug + 1

    def priced(demo: bool) -> tuple[list[float], list[float]]:  # seconds before and after fine-tuning, per task
        scored = [min(demo_rows(cfg, t * n), d * n) * r.halt_max_steps * r.row_step_s if demo else 0.0
                  for t, d in units]
        return ([overhead_s + s for s in scored],
                [s + reserve_seconds(t * n, r) for s, (t, _) in zip(scored, units)])

    if cfg.finetune != "none" and plan.finetune_steps > 0:
        before, after = priced(demo=True)
        tune = (left_s - sum(before) - sum(after)) / len(units)
        if tune >= min(r.step_s, r.embeddings_step_s or r.step_s):  # room for a step at least
            finetune_by = now + before[0] + tune
            return finetune_by, min(deadline, finetune_by + after[0])
    before, after = priced(demo=False)  # no fine-tuning: nor its demonstration scoring
    share = left_s * (before[0] + after[0]) / max(1e-9, sum(before) + sum(after))
    # never less than the price of its un-augmented copies, while the time left holds it: a budget far short of
    # the plan (60 tasks in 25 s) gave each task a share too small to predict anything, every prediction was cut
    # and no task answered; now the tasks answer one after another, the cheapest first, until the time runs out
    answer_s = before[0] + reserve_seconds(units[0][0], r)
    return now, min(deadline, now + max(share, min(left_s, answer_s)))


def cheapest_first(units: Sequence[T]) -> list[T]:
    """The worker's tasks (each with `test_inputs` and `train_pairs`) in the order it answers them: the cheapest
    first (fewest test inputs to predict, then fewest demonstration pairs to build and score), the file's order
    among equals. A deadline that comes sooner than priced then costs the expensive tasks, not the cheap ones."""
    return sorted(units, key=lambda u: (u.test_inputs, u.train_pairs))


def prediction_batch(plan: Plan, eval_batch: int, window_s: float) -> int:
    """Rows per prediction batch for a task with `window_s` seconds to predict: `eval_batch`, cut (to one row at
    least) so that one batch is priced to end inside the window. The deadline is checked between batches, so
    an uncut batch larger than the task's share would take the time of the tasks after it."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected a Plan (make_plan makes one), got {type_name(plan)}")
    eval_batch = whole_argument("eval_batch", eval_batch, 1, MAX_BATCH_SIZE)  # -5 rows was 1, '8' a TypeError
    if window_s != math.inf:  # no deadline: the whole batch
        window_s = number_argument("window_s", window_s, -math.inf, math.inf)
    r = plan.rates
    per_row = 0.0 if r is None else inference_seconds(1, r.halt_max_steps, r.row_step_s) * DECODE_OVERHEAD
    if per_row <= 0 or not math.isfinite(window_s):
        return eval_batch
    return max(1, min(eval_batch, int(max(0.0, window_s) / per_row)))


def checked_units(units: object) -> list[tuple[int, int]]:
    """`units`, a list of (test inputs, demonstration pairs) of whole numbers, as a list of pairs; else one
    ValueError or TypeError naming the argument (None was "'NoneType' object is not iterable")."""
    checked = []
    for i, unit in enumerate(sequence_argument("units", units, "(test inputs, demonstration pairs)")):
        if not isinstance(unit, (tuple, list)) or len(unit) != 2:
            raise ValueError(f"units[{i}]={clipped(unit, 40)}: expected (test inputs, demonstration pairs)")
        checked.append((whole_argument(f"units[{i}][0]", unit[0], 0, MAX_UNIT_COUNT),
                        whole_argument(f"units[{i}][1]", unit[1], 0, MAX_UNIT_COUNT)))
    return checked


def plan_arguments(units: Sequence[tuple[int, int]], rates: Rates | None, available_s: float | None,
                   worker: int) -> tuple[list[tuple[int, int]], float | None, int]:
    """(units, available_s, worker) of a `make_plan` call, checked before any work: one ValueError naming the
    argument. A NaN or negative budget once gave a silent plan, inf an OverflowError, None with rates a
    TypeError; a negative unit a negative total, a NaN one a ValueError of int()."""
    checked = checked_units(units)
    if rates is not None and not isinstance(rates, Rates):
        raise ValueError(f"rates={clipped(rates, 40)}: expected Rates, or None (nothing timed)")
    available_s = seconds_argument("available_s", available_s)
    if available_s is not None and available_s < 0:
        raise ValueError(f"available_s={available_s!r}: expected seconds from 0 (the deadline has come), or None")
    if available_s is None and rates is not None:
        raise ValueError("available_s=None: timed rates price a plan to a deadline; expected a finite number of "
                         "seconds (None, no limit, goes with rates=None)")
    return checked, available_s, whole_argument("worker", worker, 0, MAX_WORKER)


def make_plan(cfg: SolveConfig, units: Sequence[tuple[int, int]], rates: Rates | None, available_s: float | None,
              worker: int = 0, notes: Sequence[str] = ()) -> Plan:
    """The plan of a worker whose tasks have (test inputs, demonstration pairs) `units` (whole numbers), run with
    `cfg` (its batches those of the device), with `available_s` seconds until the deadline: a finite number, at
    least 0 (a deadline that has come is 0; a budget past what any plan holds plans the most), or None for no
    limit, which goes with `rates` None (nothing to fit, nothing timed: the settings as they are, none of them
    auto). Rates None with a deadline: the fixed small plan. The arguments are checked before any work
    (`plan_arguments`; `Rates` checks its own fields): one ValueError (a TypeError for a value of the wrong kind:
    a dict as cfg, None as units, 5 as notes) naming the argument."""
    check_kinds(configs={"cfg": (cfg, SolveConfig, "solve_config(**fields) makes one from a dict")})
    notes = texts_argument("notes", notes, "a note")
    units, available_s, worker = plan_arguments(units, rates, available_s, worker)
    tasks, rows = len(units), sum(t for t, _ in units)
    tuning = cfg.finetune != "none"
    auto = tuple(name for name in ("num_aug", "finetune_steps") if getattr(cfg, name) == "auto")
    sizes = {"batch": cfg.global_batch_size, "eval_batch": cfg.eval_batch_size, "notes": tuple(notes)}
    if rates is None:
        if available_s is None:
            if auto:
                # (SolveConfig refuses auto settings without a time budget first)
                raise ValueError("available_s=None: auto settings need a time budget and timed rates")
            return Plan(worker, None, tasks, rows, cfg.num_aug, cfg.finetune_steps if tuning else 0, (), 0.0, 0.0,
                        0.0, None, cfg.plan_margin, **sizes)
        num_aug = SHORT_NUM_AUG if cfg.num_aug == "auto" else cfg.num_aug
        return Plan(worker, None, tasks, rows, num_aug, 0, auto, 0.0, 0.0, 0.0, available_s, cfg.plan_margin,
                    short=True, **sizes)
    scored = demo_rows(cfg)

    def overhead(n: int, tuned: bool = tuning) -> float:  # dataset, model load, demonstration accuracy before and
        # after fine-tuning (scored only where a task is fine-tuned)
        demo = sum(min(scored, d * (n + 1), t * (n + 1)) for t, d in units) if tuned else 0
        return overhead_seconds(tasks, demo, rates.halt_max_steps, rates.row_step_s)

    def infer(n: int) -> float:  # the sum of every task's `reserve_seconds`
        return 0.0 if tasks == 0 else (inference_seconds(rows * (n + 1), rates.halt_max_steps, rates.row_step_s)
                                       * DECODE_OVERHEAD + tasks * 1.0)

    def most_aug(seconds: float) -> int:  # the largest num_aug whose inference fits in `seconds`
        per_copy = inference_seconds(rows, rates.halt_max_steps, rates.row_step_s) * DECODE_OVERHEAD
        if per_copy <= 0:
            return AUTO_MAX_AUG
        # a huge budget over a tiny rate is inf, which floor() cannot convert: past the most, the most
        copies = min(AUTO_MAX_AUG + 1.0, (seconds - tasks * 1.0) / per_copy)
        return max(0, min(AUTO_MAX_AUG, math.floor(copies) - 1))

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
        if steps == 0 and cfg.num_aug == "auto":  # no step fits: no demonstration scoring either, and inference
            # gets the whole plan
            num_aug = most_aug(max(0.0, available_s * (1 - cfg.plan_margin) - overhead(DEMO_ROWS, False)))
    return Plan(worker, rates, tasks, rows, num_aug, steps, auto, infer(num_aug), tune(steps),
                overhead(num_aug, tuning and steps > 0), available_s, cfg.plan_margin, **sizes)


def plan_worker(cfg: SolveConfig, arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device,
                units: Sequence[tuple[int, int]], deadline: float | None, *, worker: int = 0, processes: int = 1,
                say: Callable[[str], None] | None = None) -> tuple[Plan, SolveConfig]:
    """(the plan, the settings the tasks run with) of a worker whose tasks have (test inputs, demonstration
    pairs) `units`, with `deadline` (a time.monotonic() value; None: no limit). Times the steps when there is a
    deadline to fit and time enough to time them (`say` gets each step before and after); on CPU and MPS the
    tasks then run with the batches timed, and without a deadline with the configured ones cut to what the
    memory share holds (`processes`: workers sharing this machine)."""
    sized = device.type in SIZED_DEVICES
    batches: dict[str, int] = {}
    notes: list[str] = []
    rates = None
    available_s = None if deadline is None else max(0.0, deadline - time.monotonic())  # a deadline come: 0 s
    if available_s is None:
        if sized:
            batch, eval_batch, note = memory_batches(arch, seq_len, vocab_size, device, cfg.global_batch_size,
                                                     cfg.eval_batch_size, processes=processes)
            if note:
                batches = {"global_batch_size": batch, "eval_batch_size": eval_batch}
                notes.append(note)
    else:
        cap = timing_cap(available_s)
        if cap < MIN_TIMING_S:
            notes.append(f"{hms(available_s)} until the deadline is too short to time anything (timing may take "
                         f"{cap:.2g} s, under {MIN_TIMING_S:.0f} s)")
        else:
            rates = measure_rates(arch, seq_len, vocab_size, device, *batch_sizes(cfg, units), cap_s=cap,
                                  processes=processes, say=say)
            rates = rates and with_test_time(cfg, rates)  # K trajectories x the test depth per prediction row
            available_s = max(0.0, deadline - time.monotonic())
        if sized:
            batches = ({"global_batch_size": rates.batch, "eval_batch_size": rates.eval_batch} if rates else
                       {"global_batch_size": min(cfg.global_batch_size, SHORT_BATCH),
                        "eval_batch_size": min(cfg.eval_batch_size, SHORT_BATCH)})
    run = cfg.model_copy(update=batches) if batches else cfg
    return make_plan(run, units, rates, available_s, worker, notes), run
