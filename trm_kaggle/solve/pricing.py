"""How long will the Kaggle kernel take? Measured on this device, extrapolated to the hidden test set.

Every task is fine-tuned and predicted on its own, so the kernel's time is
tasks x (fine-tuning steps x seconds per step) + (test examples x ACT steps x seconds per row-step),
where test examples = tasks x test inputs per task x (num_aug + 1) (`finetune_seconds`, `inference_seconds`;
the kernel's plan, `trm_kaggle.solve.plan`, prices with the same two). A fine-tuning step that trains every
weight costs more than one that trains the puzzle rows alone (weight gradients and the AdamATan2 step come on
top of the backward pass both need), so both are timed and each mode is priced from its schedule
(`schedule.py`). The rates are measured on this device by the step timer (`trm_kaggle.solve.step_timer`:
the real architecture, bounded, announced, batches sized for the device).

The test-time levers (docs/test_time.md) multiply the prediction's work, not its memory: K trajectories run as
K rows of the same batch and `test_depth` replaces halt_max_steps, so one augmented test input costs
K x depth row-steps (`prediction_steps`); the plan prices prediction with it (`with_test_time`).

Each task also costs work outside fine-tuning and prediction (`overhead_seconds`): its dataset build and model
load (`TASK_OVERHEAD_S`), and, where it is fine-tuned, the scoring of its demonstration pairs before and after
(`demo_rows` rows for the export's ACT steps each, at the timed prediction rate). On small settings this is as
much as the fine-tuning and prediction together; `estimate` and the plan price it the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, is_dataclass, replace
from typing import Callable

import torch

from trm_kaggle.config import (MAX_BATCH_SIZE, MAX_FINETUNE_STEPS, MAX_GRID_CELLS, MAX_HALT_STEPS, MAX_NUM_AUG,
                               MAX_PLANNED_TASKS, WEEK_S, ArchConfig, SolveConfig, number_argument, seconds_argument,
                               whole_argument)
from trm_kaggle.data import arc_model_problem
from trm_kaggle.errors import TRMError
from trm_kaggle.hardware import pick_device
from trm_kaggle.model import read_export
from trm_kaggle.solve.schedule import MODES, finetune_phases, steps_by_kind
from trm_kaggle.solve.step_timer import REPEATS, StepTimes, time_steps, timing_cap
from trm_kaggle.train import PRESETS, expand_preset_names, load_train_config
from trm_kaggle.wording import clipped, count, type_name

#: SolveConfig's test-time levers: what they change is priced here and keyed in a task's result (job.py)
TEST_TIME_FIELDS = ("trajectories", "trajectory_noise", "trajectory_select", "test_depth")

# ARC-AGI-2 evaluation: 120 tasks, 167 test inputs, 3.3 demonstration pairs per task on average
TEST_INPUTS_PER_TASK = 167 / 120
DEMO_PAIRS_PER_TASK = 3.3
TASK_OVERHEAD_S = 2.0  # a task's dataset build and model load, until the worker has measured its own
DEMO_ROWS = 64  # demonstration examples scored before and after fine-tuning (`solve.demo_accuracy`)
KAGGLE_LIMIT_S = 12 * 3600
MAX_PRICED_COUNT = 10**9  # tasks, or row-steps of one row, a price takes: far past any plan, so only a typo is refused


def check_kinds(*, configs: dict[str, tuple[object, type, str]] | None = None,
                functions: dict[str, object] | None = None) -> None:
    """A TypeError naming the argument of a solve-package call given the wrong kind of value, before any work: a
    dict for a config failed deep inside as "'dict' object has no attribute 'run_arch'", a number for a callback as
    "'int' object is not callable" (in a worker: taken for the model's failure). `configs`: {name: (value, the type
    expected, how to make one)}; `functions`: {name: a callback, which may be None}."""
    def a(name: str) -> str:
        return f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"

    for name, (value, kind, how) in (configs or {}).items():
        if not isinstance(value, kind):
            raise TypeError(f"{name}: expected {a(kind.__name__)} ({how}), got {a(type_name(value))}")
    for name, value in (functions or {}).items():
        if value is not None and not callable(value):
            raise TypeError(f"{name}: expected a function (or None), got {a(type_name(value))}")


def finetune_seconds(tasks: int, mode: str, embeddings_fraction: float, steps: int, step_s: float,
                     embeddings_step_s: float) -> float:
    """Seconds of fine-tuning `tasks` tasks for `steps` steps each in `mode`, each step priced by what it trains
    (`step_s`: every weight, `embeddings_step_s`: the puzzle rows alone). A count or time out of bounds is one
    ValueError naming it (-3 tasks was -3 seconds, a fraction of 2 was priced)."""
    tasks = whole_argument("tasks", tasks, 0, MAX_PRICED_COUNT)
    embeddings_fraction = number_argument("embeddings_fraction", embeddings_fraction, 0, 1)
    steps = whole_argument("steps", steps, 0, MAX_FINETUNE_STEPS)
    step_s = number_argument("step_s", step_s, 0, WEEK_S)
    embeddings_step_s = number_argument("embeddings_step_s", embeddings_step_s, 0, WEEK_S)
    frozen, weights = steps_by_kind(finetune_phases(mode, embeddings_fraction, steps))
    return tasks * (frozen * embeddings_step_s + weights * step_s)


def inference_seconds(examples: float, act_steps: int, row_step_s: float) -> float:
    """Seconds of predicting `examples` augmented test inputs for `act_steps` ACT steps each (NaN or a negative
    figure is one ValueError naming it: it priced a NaN or negative reserve)."""
    examples = number_argument("examples", examples, 0, MAX_PRICED_COUNT * MAX_PRICED_COUNT)
    act_steps = whole_argument("act_steps", act_steps, 0, MAX_PRICED_COUNT)
    row_step_s = number_argument("row_step_s", row_step_s, 0, WEEK_S)
    return examples * act_steps * row_step_s


def demo_rows(cfg: SolveConfig, test_rows: int | None = None) -> int:
    """Demonstration rows scored before and after fine-tuning: `DEMO_ROWS`, fewer where both batches are
    smaller (a plan sized for a CPU) or where the task predicts fewer rows (`test_rows`: its test inputs times
    their copies). The diagnostic must not cost more than the work: scored twice, it costs at most twice the
    task's predictions."""
    rows = min(DEMO_ROWS, max(cfg.global_batch_size, cfg.eval_batch_size))
    return rows if test_rows is None else max(1, min(rows, test_rows))


def overhead_seconds(tasks: int, scored_rows: float, act_steps: int, row_step_s: float,
                     task_s: float = TASK_OVERHEAD_S) -> float:
    """Seconds of the work of `tasks` tasks outside fine-tuning and prediction: each one's dataset build and model
    load (`task_s`), and the scoring of `scored_rows` demonstration rows in all (0 where no task is fine-tuned)
    before and after fine-tuning, `act_steps` ACT steps each at `row_step_s` (the timed prediction rate)."""
    tasks = whole_argument("tasks", tasks, 0, MAX_PRICED_COUNT)
    scored_rows = number_argument("scored_rows", scored_rows, 0, MAX_PRICED_COUNT * MAX_PRICED_COUNT)
    task_s = number_argument("task_s", task_s, 0, WEEK_S)
    return tasks * task_s + 2 * inference_seconds(scored_rows, act_steps, row_step_s)


def prediction_steps(cfg: SolveConfig, halt_max_steps: int) -> int:
    """Row-steps one augmented test input costs to predict: its trajectories x its ACT steps (`test_depth`, else
    `halt_max_steps`). Early exit can only make it less: the price is the most it can cost."""
    check_kinds(configs={"cfg": (cfg, SolveConfig, "solve_config(**fields) makes one from a dict")})
    halt_max_steps = whole_argument("halt_max_steps", halt_max_steps, 1, MAX_HALT_STEPS)
    return cfg.trajectories * (cfg.test_depth or halt_max_steps)


def with_test_time(cfg: SolveConfig, rates):
    """`rates` (the plan's `Rates`) pricing each prediction row at `prediction_steps` (the plan's inference prices read
    `rates.halt_max_steps`). The demonstration scoring, one trajectory at the export's depth, is priced at the
    same rate: an overestimate, on the side of finishing in time."""
    check_kinds(configs={"cfg": (cfg, SolveConfig, "solve_config(**fields) makes one from a dict")})
    if not is_dataclass(rates) or isinstance(rates, type) or not hasattr(rates, "halt_max_steps"):
        raise TypeError(f"rates: expected the plan's Rates, got {type_name(rates)}")
    return replace(rates, halt_max_steps=prediction_steps(cfg, rates.halt_max_steps))


@dataclass
class Estimate:
    device: str
    finetune_step_s: float  # one step training every weight ("all")
    embeddings_step_s: float  # one step training the puzzle rows alone (weights frozen)
    row_step_s: float
    tasks: int
    finetune_steps: int  # per task
    embeddings_fraction: float
    mode: str
    inference_s: float
    batch: int = 0  # rows of the timed fine-tuning step
    eval_batch: int = 0  # rows of the timed prediction step
    timing: StepTimes | None = None
    setup_s: float = 0.0  # every task's dataset build and model load
    demo_s: float = 0.0  # every task's demonstration scoring before and after fine-tuning (where it is fine-tuned)

    def overhead_seconds(self, mode: str | None = None) -> float:
        """The work outside fine-tuning and prediction in `mode` (default: the estimate's): no fine-tuning, no
        demonstration scoring."""
        tuned = (mode or self.mode) != "none" and self.finetune_steps > 0
        return self.setup_s + (self.demo_s if tuned else 0.0)

    @property
    def overhead_s(self) -> float:
        return self.overhead_seconds()

    def finetune_seconds(self, mode: str | None = None) -> float:
        """Fine-tuning time of `mode` (default: the estimate's) over `finetune_steps` steps per task."""
        return finetune_seconds(self.tasks, mode or self.mode, self.embeddings_fraction, self.finetune_steps,
                                self.finetune_step_s, self.embeddings_step_s)

    @property
    def finetune_s(self) -> float:
        return self.finetune_seconds()

    @property
    def total_s(self) -> float:
        return self.total_seconds()

    def total_seconds(self, mode: str | None = None) -> float:
        return self.finetune_seconds(mode) + self.inference_s + self.overhead_seconds(mode)


_SOLVE = SolveConfig.model_fields


def estimate(arch: ArchConfig, *, tasks: int = 120, num_aug: int = _SOLVE["num_aug"].default,
             finetune_steps: int = _SOLVE["finetune_steps"].default, finetune: str = _SOLVE["finetune"].default,
             embeddings_fraction: float = _SOLVE["embeddings_fraction"].default, batch_size: int = 64,
             eval_batch_size: int = 256, device: str | torch.device = "cpu", seq_len: int = 900,
             vocab_size: int = 12, repeats: int = REPEATS, cap_s: float | None = None,
             say: Callable[[str], None] | None = None, act_steps: int | None = None,
             scored_rows: int = DEMO_ROWS) -> Estimate:
    """The kernel's time for `tasks` tasks on `device`, from steps timed here (`time_steps`: within `cap_s`
    seconds, default `timing_cap(None)`, but a step of each needed kind whatever it costs; `say` gets each step
    before and after it is timed). `act_steps`: row-steps per test input (default arch.halt_max_steps;
    `prediction_steps` with test-time levers). `scored_rows`: the most demonstration rows a task scores before
    and after fine-tuning (`demo_rows`), each for arch.halt_max_steps ACT steps (`overhead_seconds`)."""
    # the call's arguments, before a step is timed: `act_steps=-3` priced negative seconds, `tasks=-1` failed in torch
    check_kinds(configs={"arch": (arch, ArchConfig, "ArchConfig(**fields); an export's config.json holds its fields")},
                functions={"say": say})
    tasks = whole_argument("tasks", tasks, 1, MAX_PLANNED_TASKS)
    num_aug = whole_argument("num_aug", num_aug, 0, MAX_NUM_AUG)
    finetune_steps = whole_argument("finetune_steps", finetune_steps, 0, MAX_FINETUNE_STEPS)
    batch_size = whole_argument("batch_size", batch_size, 1, MAX_BATCH_SIZE)
    eval_batch_size = whole_argument("eval_batch_size", eval_batch_size, 1, MAX_BATCH_SIZE)
    seq_len = whole_argument("seq_len", seq_len, 1, MAX_GRID_CELLS)
    vocab_size = whole_argument("vocab_size", vocab_size, 2, 2**31 - 1)
    repeats = whole_argument("repeats", repeats, 1, 1000)
    act_steps = None if act_steps is None else whole_argument("act_steps", act_steps, 1, 10**6)
    scored_rows = whole_argument("scored_rows", scored_rows, 0, MAX_BATCH_SIZE)
    if finetune not in MODES:
        raise ValueError(f"finetune={clipped(finetune)}: expected one of {', '.join(MODES)}")
    if not (isinstance(embeddings_fraction, (int, float)) and not isinstance(embeddings_fraction, bool)
            and 0.0 <= embeddings_fraction <= 1.0):
        raise ValueError(f"embeddings_fraction={clipped(embeddings_fraction)}: expected a number from 0 to 1")
    if seconds_argument("cap_s", cap_s) is not None and cap_s <= 0:
        raise ValueError(f"cap_s={cap_s!r}: expected a positive number of seconds, or None")
    if not isinstance(device, torch.device):  # a name: checked as every command's device setting is (one line)
        if not isinstance(device, str):
            raise ValueError(f"device={clipped(device)}: expected a device name (cpu, cuda, cuda:N, mps) or a "
                             "torch.device")
        device = pick_device(device)
    n_ids = min(tasks * (num_aug + 1) + 1, 4096)
    t = time_steps(arch, seq_len, vocab_size, torch.device(device), batch=batch_size, eval_batch=eval_batch_size,
                   cap_s=timing_cap(None) if cap_s is None else cap_s, n_ids=n_ids, repeats=repeats,
                   must_finish=True, say=say)
    test_examples = tasks * TEST_INPUTS_PER_TASK * (num_aug + 1)
    # a task scores as many of its demonstration rows as it predicts test rows at most (`solve_unit`)
    scored = tasks * min(scored_rows, TEST_INPUTS_PER_TASK * (num_aug + 1), DEMO_PAIRS_PER_TASK * (num_aug + 1))
    return Estimate(t.device, t.step_s, t.embeddings_step_s, t.row_step_s, tasks, finetune_steps, embeddings_fraction,
                    finetune, inference_seconds(test_examples, act_steps or arch.halt_max_steps, t.row_step_s),
                    t.batch, t.eval_batch, t, setup_s=overhead_seconds(tasks, 0, arch.halt_max_steps, t.row_step_s),
                    demo_s=overhead_seconds(0, scored, arch.halt_max_steps, t.row_step_s))


def hms(s: float) -> str:
    """`0h03m05s`, a table's column; seconds from 0 (-5 was `-1h59m55s`, NaN a ValueError of int())."""
    s = number_argument("s", s, 0, float("inf"))
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m{int(s % 60):02d}s"


def format_estimate(e: Estimate, tasks: int, num_aug: int) -> str:
    fits = "fits" if e.total_s < KAGGLE_LIMIT_S else "does NOT fit"
    tuning = (f"no fine-tuning (the modes below priced at {e.finetune_steps} steps per task)" if e.mode == "none"
              else f"{e.finetune_steps} fine-tuning steps per task ({e.mode})")
    lines = [
        f"estimate on {e.device} for {tasks} tasks, num_aug {num_aug}, {tuning}:",
        f"  fine-tuning  {hms(e.finetune_s):>12}  ({e.finetune_step_s:.3f} s per step of {e.batch} rows training "
        f"every weight, {e.embeddings_step_s:.3f} s per step training the puzzle rows alone)",
        f"  inference    {hms(e.inference_s):>12}  ({e.row_step_s * 1e3:.2f} ms per example per ACT step, timed on "
        f"{e.eval_batch} rows)",
        f"  per task     {hms(e.overhead_s):>12}  (dataset and model load, {TASK_OVERHEAD_S:g} s a task"
        + (", and its demonstration pairs scored before and after fine-tuning at the prediction rate"
           if e.overhead_s > e.setup_s else "") + ")",
        f"  total        {hms(e.total_s):>12}  -> {fits} in Kaggle's 12 h limit ({e.total_s / KAGGLE_LIMIT_S:.0%})",
        "  every fine-tuning mode (--finetune), same steps:",
    ]
    for mode in MODES:
        total = e.total_seconds(mode)
        lines.append(f"    {'*' if mode == e.mode else ' '} {mode:<20} fine-tuning {hms(e.finetune_seconds(mode)):>10}"
                     f"  total {hms(total):>10}  ({total / KAGGLE_LIMIT_S:.0%} of 12 h)")
    if e.timing is not None:
        sizing = f" after {e.timing.sizing_s:.1f} s of sizing" if e.timing.sizing_s else ""
        startup = (f", after a start-up of {e.timing.startup_s:.1f} s not counted" if e.timing.startup_s else "")
        lines.append(f"  timed in {e.timing.spent_s:.1f} s{sizing} of a {e.timing.cap_s:.0f} s cap{startup}; each "
                     f"figure the median of up to {e.timing.repeats} calls after a warm-up call"
                     + "".join(f"; {note}" for note in e.timing.notes))
    return "\n".join(lines)


def estimate_kernel(cfg: SolveConfig, *, weights: str | os.PathLike | None = None, preset: str | None = None,
                    tasks: int = 120, devices: int = 1, batch_size: int = 64, eval_batch_size: int = 64,
                    device: str = "auto", say: Callable[[str], None] | None = None) -> str:
    """`trm-kaggle estimate`: the kernel's time for `tasks` tasks shared over `devices` devices (the busiest
    one's share is timed), for the architecture of the export `weights` or of the training preset `preset` (one
    of them; an export must be an ARC model, as the bundle requires) under `cfg`'s test-time recipe; the text the
    command prints."""
    check_kinds(configs={"cfg": (cfg, SolveConfig, "solve_config(**fields) makes one from a dict")},
                functions={"say": say})
    tasks, devices = whole_argument("tasks", tasks, 1, MAX_PLANNED_TASKS), whole_argument("devices", devices, 1, 4096)
    _check_source(weights, preset)
    if weights:
        config, _ = read_export(weights)
        if problem := arc_model_problem(config, weights):  # the bundle's check: the kernel could never run it
            raise TRMError(problem)
        arch, seq_len, vocab = ArchConfig(**config["arch"]), config["seq_len"], config["vocab_size"]
    else:
        for name in expand_preset_names(preset):  # only the architecture is timed: a modifier without one is unread
            if PRESETS[name]["kind"] != "base" and "arch" not in PRESETS[name]["overrides"]:
                raise TRMError(f"--preset {preset}: {name} sets no architecture "
                               f"({', '.join(sorted(PRESETS[name]['overrides']))}), and estimate times the preset's "
                               f"architecture alone: drop {name}")
        arch, seq_len, vocab = load_train_config(presets=[preset]).arch, 900, 12
    arch = cfg.run_arch(arch)
    share = -(-tasks // devices)  # the busiest device's share
    steps = prediction_steps(cfg, arch.halt_max_steps)
    e = estimate(arch, tasks=share, num_aug=cfg.num_aug, finetune_steps=cfg.finetune_steps, finetune=cfg.finetune,
                 embeddings_fraction=cfg.embeddings_fraction, batch_size=batch_size, eval_batch_size=eval_batch_size,
                 device=pick_device(device), seq_len=seq_len, vocab_size=vocab, say=say, act_steps=steps,
                 scored_rows=demo_rows(cfg))
    sampled = (f"\n(inference priced at {count(cfg.trajectories, 'trajectory', 'trajectories')} x "
               f"{steps // cfg.trajectories} ACT steps = {steps} row-steps per augmented test input; "
               "docs/test_time.md)" if cfg.trajectories > 1 or cfg.test_depth else "")
    return (format_estimate(e, share, cfg.num_aug) + sampled
            + (f"\n(per device: {tasks} tasks over {devices} devices)" if devices > 1 else ""))


def _check_source(weights: object, preset: object) -> None:
    """One ValueError naming the argument unless exactly one of `weights` (an export folder) and `preset` (a
    training preset's name) is given: neither once reached the preset reader as None (a TypeError from below),
    and both priced the export alone without a word. `None` and "" are not given (the command's check, in its
    flags' words, comes first)."""
    if weights is not None and not isinstance(weights, (str, os.PathLike)):
        raise ValueError(f"weights={clipped(weights)}: expected an export folder (a path), or None")
    if preset is not None and not isinstance(preset, str):
        raise ValueError(f"preset={clipped(preset)}: expected a training preset's name (e.g. 'arc2'), or None")
    if bool(weights) == bool(preset):
        said = f"weights={clipped(weights)} and preset={clipped(preset)}"
        raise ValueError(f"{said}: expected one of them, weights (an export folder whose architecture is timed) or "
                         "preset (a training preset's name, e.g. 'arc2')")
