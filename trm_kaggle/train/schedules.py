"""Schedules over training: learning rate, recursion curriculum, halting exploration."""

from __future__ import annotations

import math
from dataclasses import dataclass

from trm_kaggle.config import TrainConfig


def total_train_steps(epochs: int, total_groups: int, mean_puzzle_examples: float, global_batch_size: int) -> int:
    """The schedule's length in optimizer steps, computed as upstream does: the product in this
    order, then truncated with int(). (At least 1: a dataset smaller than one global batch per
    run still trains a step, where upstream would train none.)"""
    return max(1, int(epochs * total_groups * mean_puzzle_examples / global_batch_size))


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


def cycles_at(cfg: TrainConfig, epoch: float) -> tuple[int, int]:
    """(H_cycles, L_cycles) at this (fractional) epoch: a linear ramp from the curriculum's start values."""
    c, a = cfg.curriculum, cfg.arch
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


@dataclass(frozen=True)
class StepSchedule:
    """What the schedules say for one optimizer step."""

    lr: float  # the weights'
    emb_lr: float  # the puzzle rows'
    H_cycles: int
    L_cycles: int
    exploration: float  # halting exploration probability


def schedule_at(cfg: TrainConfig, step: int, epoch: float, total_steps: int, lr_factor: float = 1.0) -> StepSchedule:
    """The schedule of optimizer step `step + 1` (the learning rate as upstream's counter gives it), at `epoch`;
    `lr_factor` scales both rates (a data curriculum's current stage)."""
    lr = lr_factor * lr_at_step(step, cfg.lr, cfg.lr_warmup_steps, total_steps, cfg.lr_min_ratio)
    emb_lr = lr_factor * lr_at_step(step, cfg.puzzle_emb_lr, cfg.lr_warmup_steps, total_steps, cfg.lr_min_ratio)
    H_cycles, L_cycles = cycles_at(cfg, epoch)
    return StepSchedule(lr, emb_lr, H_cycles, L_cycles, exploration_at(cfg, epoch))
