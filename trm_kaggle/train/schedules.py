"""Schedules over training: learning rate, recursion curriculum, halting exploration, RSM's warm-up depth.

Every schedule is a function of the step (and the epoch it falls in) alone, so a resumed run takes the very
schedule of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from dataclasses import dataclass

from trm_kaggle.config import MAX_LR, ArchConfig, TrainConfig, number_argument, whole_argument
from trm_kaggle.errors import TRMError
from trm_kaggle.wording import clipped, type_name


# the most steps, epochs or groups a schedule counts: torch's and numpy's 64-bit integers, with room
_MAX_COUNT = 2**62


def total_train_steps(epochs: int, total_groups: int, mean_puzzle_examples: float, global_batch_size: int) -> int:
    """The schedule's length in optimizer steps, computed as upstream does: the product in this
    order, then truncated with int(). (At least 1: a dataset smaller than one global batch per
    run still trains a step, where upstream would train none.) Each argument is checked where it is given (a batch
    of 0 was a ZeroDivisionError, NaN examples int()'s error, -10 groups a schedule of 1 step)."""
    epochs = whole_argument("epochs", epochs, 0, _MAX_COUNT)
    total_groups = whole_argument("total_groups", total_groups, 0, _MAX_COUNT)
    mean_puzzle_examples = number_argument("mean_puzzle_examples", mean_puzzle_examples, 0.0, float(_MAX_COUNT))
    global_batch_size = whole_argument("global_batch_size", global_batch_size, 1, _MAX_COUNT)
    return max(1, min(_MAX_COUNT, int(epochs * total_groups * mean_puzzle_examples / global_batch_size)))


def lr_at_step(completed_steps: int, base_lr: float, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """The learning rate of the next optimizer step, after `completed_steps` steps.

    Upstream increments its step counter before computing the rate, so optimizer step k
    (k = 1, 2, ...) uses cosine_lr(k): the first step already has lr(1) > 0."""
    return cosine_lr(completed_steps + 1, base_lr, warmup_steps, total_steps, min_ratio)


def cosine_lr(step: int, base_lr: float, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Linear warmup from 0, then cosine decay to `min_ratio * base_lr` (upstream's schedule;
    its default min_ratio 1.0 means constant after warmup)."""
    if step < warmup_steps:
        return base_lr * step / max(1, warmup_steps)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return base_lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _ramp(start: float, end: float, epoch: float, epochs: int) -> float:
    if epochs <= 0 or epoch >= epochs:
        return end
    return start + (end - start) * max(0.0, epoch) / epochs


def _share_of(n: int, share: float) -> int:
    return max(1, math.floor(n * share + 0.5))  # rounded half up: 3 x 1/3 -> 1, 6 x 2/3 -> 4


def cycles_at(cfg: TrainConfig, epoch: float, progress: float = 0.0) -> tuple[int, int]:
    """(H_cycles, L_cycles) at this (fractional) epoch: a linear ramp from the curriculum's start values, or the
    stage of a staged curriculum (`progress`: the share of the whole schedule done, for stages over all of it)."""
    c, a = cfg.curriculum, cfg.arch
    if c.stages:
        share = epoch / c.epochs if c.epochs else progress
        depth = next((s.depth for s in c.stages if share < s.until), 1.0)
        return _share_of(a.H_cycles, depth), _share_of(a.L_cycles, depth)
    h0 = a.H_cycles if c.start_H_cycles is None else c.start_H_cycles
    l0 = a.L_cycles if c.start_L_cycles is None else c.start_L_cycles
    return (max(1, round(_ramp(h0, a.H_cycles, epoch, c.epochs))),
            max(1, round(_ramp(l0, a.L_cycles, epoch, c.epochs))))


def exploration_at(cfg: TrainConfig, epoch: float) -> float:
    """Halting exploration probability at this epoch: decays linearly from start_prob to end_prob."""
    h, p = cfg.halt_schedule, cfg.arch.halt_exploration_prob
    start = p if h.start_prob is None else h.start_prob
    end = p if h.end_prob is None else h.end_prob
    return _ramp(start, end, epoch, h.epochs)


def rsm_warmup_at(cfg: TrainConfig, step: int) -> int:
    """RSM's gradient-free supervision steps before optimizer step `step + 1`: uniform in [min_warmup,
    max_warmup], drawn from a generator keyed by (seed, step) alone (the same on every rank, after a resume)."""
    r = cfg.rsm
    if not r.enabled:
        return 0
    most = cfg.arch.halt_max_steps - 1 if r.max_warmup is None else r.max_warmup
    return random.Random(f"rsm-warmup:{cfg.seed}:{step}").randint(r.min_warmup, most)


@dataclass(frozen=True)
class StepSchedule:
    """What the schedules say for one optimizer step."""

    lr: float  # the weights'
    emb_lr: float  # the puzzle rows'
    H_cycles: int
    L_cycles: int
    exploration: float  # halting exploration probability
    warmup: int = 0  # RSM: supervision steps without gradient before the one with the loss


def _check_schedule_arguments(cfg: object, step: object, epoch: object, total_steps: object, lr_factor: object) -> None:
    """`schedule_at`'s arguments, each named where it is out of bounds."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg={clipped(cfg, 40)}: expected a TrainConfig (load_train_config gives one)")
    whole_argument("step", step, 0, _MAX_COUNT)
    number_argument("epoch", epoch, 0.0, float(_MAX_COUNT))
    whole_argument("total_steps", total_steps, 1, _MAX_COUNT)
    number_argument("lr_factor", lr_factor, 0.0, MAX_LR)


class RuleRefused(TRMError):
    """What a run's `StepRules` rule returned for a step, refused before it changed anything of the run (weights,
    optimizer, carries): the state before that step is whole, and the trainer saves it first."""


def _one_number(value: object) -> object:
    """`value`'s number when it holds one alone (numpy's scalars, a 0-d array or tensor: what a schedule computed
    with numpy or torch returns), else `value`: np.int64(2) was refused as no whole number."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return value.item()
    return value


def checked_schedule(schedule, step: int, cfg: TrainConfig) -> StepSchedule:
    """`schedule` (what a run's `StepRules.schedule` returned for optimizer step `step + 1`) with plain Python
    numbers, or RuleRefused naming the rule, the step and the field. A recipe's schedule is code a user writes: a NaN
    rate trained the step (NaN weights, then 20 skipped steps called divergence and blamed on the config's lr), a
    depth of 0 was pydantic's error about an ArchConfig set right, a text rate Python's own error. A number of
    numpy's or a 0-d tensor is read as the number it holds."""
    where = f"StepRules.schedule at step {step + 1}"
    if not isinstance(schedule, StepSchedule):
        raise RuleRefused(f"{where} returned {type(schedule).__name__}: expected a StepSchedule")

    def refuse(name: str, what: str) -> TRMError:
        value = getattr(schedule, name)
        kind = "" if type(value) in (int, float, bool) else f"a {type_name(value)}; "
        return RuleRefused(f"{where}: {name} {clipped(value, 60)} is not {what} ({kind}the config's settings are not "
                        "the cause: the schedule's own value is)")

    def number(name: str, low: float, high: float) -> float:
        value = _one_number(getattr(schedule, name))
        if not isinstance(value, bool) and isinstance(value, (int, float)) and low <= value <= high:
            with contextlib.suppress(OverflowError):  # an int beyond floats (10**400): no rate
                return float(value)
        raise refuse(name, f"a number from {low:g} to {high:g}")

    def whole(name: str, low: int, high: int) -> int:
        try:
            return whole_argument(name, _one_number(getattr(schedule, name)), low, high)
        except ValueError:
            raise refuse(name, f"a whole number from {low} to {high}") from None

    # the config's bound for its rates (one owner): 1e39 passed a check to inf, and float32's step sizes overflowed
    # in the optimizer, naming neither the rule nor the field
    plain = {"lr": number("lr", 0.0, MAX_LR), "emb_lr": number("emb_lr", 0.0, MAX_LR)}
    for name in ("H_cycles", "L_cycles"):  # ArchConfig's own bounds: one owner
        plain[name] = whole(name, 1, next(m.le for m in ArchConfig.model_fields[name].metadata if hasattr(m, "le")))
    plain["exploration"] = number("exploration", 0.0, 1.0)
    plain["warmup"] = whole("warmup", 0, max(cfg.arch.halt_max_steps - 1, cfg.rsm.max_warmup or 0))
    return dataclasses.replace(schedule, **plain)  # plain numbers, as the config's; a subclass's own fields kept


def schedule_at(cfg: TrainConfig, step: int, epoch: float, total_steps: int, lr_factor: float = 1.0) -> StepSchedule:
    """The schedule of optimizer step `step + 1` (the learning rate as upstream's counter gives it), at `epoch`;
    `lr_factor` scales both rates (a data curriculum's current stage). Arguments outside their bounds are named in
    one ValueError (TypeError for `cfg`): a NaN factor, a step below 0 or a factor of 1e40 gave NaN, negative or
    overflowing rates without a word."""
    _check_schedule_arguments(cfg, step, epoch, total_steps, lr_factor)
    lr = lr_factor * lr_at_step(step, cfg.lr, cfg.lr_warmup_steps, total_steps, cfg.lr_min_ratio)
    emb_lr = lr_factor * lr_at_step(step, cfg.puzzle_emb_lr, cfg.lr_warmup_steps, total_steps, cfg.lr_min_ratio)
    if not max(lr, emb_lr) <= MAX_LR:  # the config's bound for its rates (one owner), as `checked_schedule`'s
        raise ValueError(f"lr_factor={lr_factor!r}: gives a rate of {max(lr, emb_lr):g}, above {MAX_LR:g}")
    H_cycles, L_cycles = cycles_at(cfg, epoch, progress=step / max(1, total_steps))
    return StepSchedule(lr, emb_lr, H_cycles, L_cycles, exploration_at(cfg, epoch), rsm_warmup_at(cfg, step))
