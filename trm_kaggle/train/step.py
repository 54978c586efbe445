"""One optimizer step of TRM training, as upstream: one step per ACT supervision step.

    batch -> (per micro-batch) carry, outputs = model(carry, micro) -> loss / global_batch -> backward
          -> all-reduce gradients (DDP) -> the non-finite policy: optimizer steps + EMA, or a skip

The ACT carry (latent states of the examples still being worked on) persists from one batch to the next;
rows that halted take fresh examples. `StepRules` are the parts a recipe may replace without touching the
driver (`trm_kaggle.train.loop`): the step's schedule (learning rates, recursion depth, halting
exploration, RSM's warm-up), how it is put into the model, the forward of one micro-batch and the loss of one
supervision step. The default rules follow the config's levers (`trm_kaggle.train.recipes`); without any,
they are upstream's step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import torch

from trm_kaggle.config import TrainConfig
from trm_kaggle.model import Carry, TinyRecursiveModel, act_loss
from trm_kaggle.train.memory import is_out_of_memory, out_of_memory_error
from trm_kaggle.train.nonfinite import Applied, NonFinitePolicy, drop_gradients
from trm_kaggle.train.optimizers import set_learning_rates
from trm_kaggle.train.recipes import supervise
from trm_kaggle.train.runtime import Runtime, all_reduce_
from trm_kaggle.train.schedules import RuleRefused, StepSchedule, schedule_at
from trm_kaggle.train.state import TrainState, resplit
from trm_kaggle.wording import clipped, type_name

log = logging.getLogger(__name__)

#: The per-step sums `accumulate` returns after the loss (row 0), in this order.
METRIC_NAMES = ["count", "lm_loss", "q_halt_loss", "token_accuracy", "exact_accuracy", "q_halt_accuracy", "steps"]
#: The outputs act_loss reads: a supervise rule feeding it must return them.
ACT_OUTPUTS = ("logits", "q_halt_logits")
#: The carry's tensors, one row per batch slot (its `current_data` is checked apart).
_CARRY_TENSORS = ("z_H", "z_L", "steps", "halted")


def configure_model(model: TinyRecursiveModel, schedule: StepSchedule) -> None:
    """Put the step's recursion depth and halting exploration into the model."""
    if (schedule.H_cycles, schedule.L_cycles) != (model.H_cycles, model.L_cycles):
        model.set_recursion(H_cycles=schedule.H_cycles, L_cycles=schedule.L_cycles)
    model.halt_exploration_prob = schedule.exploration


@dataclass
class StepRules:
    """What a recipe may change in a step.

    * `schedule(cfg, step, epoch, total_steps, lr_factor) -> StepSchedule`: the coming step's learning rates,
      recursion depth and halting exploration (a depth curriculum replaces it);
    * `configure(model, schedule)`: puts the schedule into the model before the step (a recipe's detaching
      or stochastic depth goes here);
    * `supervise(forward, model, carry, batch, exploration, warmup, cfg) -> (carry, outputs)`: one micro-batch's
      forward (the ACT step as upstream's, or a recipe's: RSM's warm-up, CGAR's weighting by ACT step);
    * `loss(outputs, labels, halted, steps, loss_type) -> (loss, metrics)`: one supervision step's loss
      (`steps`: each row's ACT step, for a weighting per supervision step).
    """

    schedule: Callable[..., StepSchedule] = schedule_at
    configure: Callable[[TinyRecursiveModel, StepSchedule], None] = configure_model
    loss: Callable = field(default_factory=lambda: act_loss)  # looked up when the rules are made
    supervise: Callable = supervise


@dataclass
class StepSetup:
    """What every step of a run shares (fixed at setup)."""

    cfg: TrainConfig
    rt: Runtime
    local_batch: int  # this rank's rows of the global batch
    policy: NonFinitePolicy
    forward: Callable  # the model, or what calls it
    loss: Callable  # rules.loss, compiled with the model when it is
    rules: StepRules = field(default_factory=StepRules)


def exploration_draws(seed: int, step: int, global_batch: int, halt_max_steps: int, rows: slice,
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Halting-exploration randomness for the rows `rows` of the global batch at `step`.

    Drawn from a generator keyed by (seed, step) over the whole global batch, so a
    row gets the same draw whatever the number of ranks or micro-batches and after a resume.
    On CUDA the generator is CUDA's and the draws are made there: nothing is copied from the
    host, so the step does not wait for a copy (CUDA's random stream is not the CPU's: the
    same seed draws other values on a CPU, the contract holds on each).
    """
    device = torch.device(device)
    where = device if device.type == "cuda" else torch.device("cpu")
    g = torch.Generator(device=where).manual_seed(seed * 1_000_003 + step)
    u = torch.rand(global_batch, generator=g, device=where)[rows]
    m = torch.randint(2, max(3, halt_max_steps + 1), (global_batch,), generator=g, dtype=torch.int32,
                      device=where)[rows]
    return u.to(device), m.to(device)


def split_batch(batch: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    n = next(iter(batch.values())).shape[0]
    return [{k: v[i:i + size] for k, v in batch.items()} for i in range(0, n, size)]


def accumulate(forward, model, batch, carries, micro, step, cfg, rt, local_batch, scaler=None, loss_fn=act_loss,
               supervise_fn=supervise, warmup=0, outputs_read=ACT_OUTPUTS):
    """Forward + backward of every micro-batch of `batch`; returns the new carries and summed metrics.
    `outputs_read`: the outputs `loss_fn` reads (act_loss's by default), which `supervise_fn` must return."""
    metrics, new_carries = None, []
    for k, mb in enumerate(split_batch(batch, micro)):
        first = rt.rank * local_batch + k * micro
        expl = exploration_draws(cfg.seed, step, cfg.global_batch_size, cfg.arch.halt_max_steps,
                                 slice(first, first + micro), rt.device)
        carry, out = checked_supervise(supervise_fn(forward, model, carries[k], mb, expl, warmup, cfg), step,
                                       next(iter(mb.values())).shape[0], outputs_read)
        loss, m = checked_loss(loss_fn(out, carry.current_data["labels"], carry.halted, carry.steps,
                                       cfg.arch.loss_type), step)
        scaled = loss / cfg.global_batch_size
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        new_carries.append(carry)
        m = torch.stack([loss.detach().float()] + [m[n].float() for n in METRIC_NAMES])
        metrics = m if metrics is None else metrics + m
    return new_carries, metrics


def checked_loss(result, step: int) -> tuple[torch.Tensor, Mapping]:
    """`result` (what the run's `StepRules.loss` returned in optimizer step `step + 1`), or TRMError naming the
    rule, the step and what is wrong, as `checked_schedule` does for the schedule: a loss of two numbers, a
    detached one or a float ended in torch's or Python's own errors, naming no rule. What a tensor is, never what
    it holds, is read: the step does not wait for the device."""
    where = f"StepRules.loss at step {step + 1}"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise RuleRefused(f"{where} returned {clipped(result, 60)} (a {type_name(result)}): expected a pair (loss, "
                       "metrics), as act_loss returns")
    loss, metrics = result
    if not isinstance(loss, torch.Tensor):
        problem = f"is {clipped(loss, 40)} (a {type_name(loss)}), not a torch tensor"
    elif loss.ndim != 0 or not loss.is_floating_point():
        problem = f"is a {loss.dtype} tensor of shape {tuple(loss.shape)}, not one floating-point number (a 0-d tensor)"
    elif torch.is_grad_enabled() and not loss.requires_grad:
        problem = "requires no gradient: it is detached from the model's outputs, and no weight would learn from it"
    elif not isinstance(metrics, Mapping):
        problem = f"comes with metrics {clipped(metrics, 40)} (a {type_name(metrics)}), not act_loss's mapping"
    elif missing := [n for n in METRIC_NAMES if not isinstance(metrics.get(n), torch.Tensor)]:
        problem = f"comes with metrics that lack act_loss's tensors {', '.join(missing)}"
    else:
        return loss, metrics
    raise RuleRefused(f"{where}: the loss {problem}")


def checked_supervise(result, step: int, rows: int, outputs_read=ACT_OUTPUTS) -> tuple[Carry, Mapping]:
    """`result` (what the run's `StepRules.supervise` returned for a micro-batch of `rows` rows in optimizer step
    `step + 1`), or TRMError naming the rule, the step and what is wrong, as `checked_loss` does for the loss: None,
    the outputs alone or a carry of None ended in Python's unpacking and attribute errors, outputs of other rows in
    torch's, and outputs detached from the model were blamed on the loss rule that read them. `outputs_read`: the
    outputs the run's loss reads (act_loss's; none is required of a recipe's own loss). Shapes and flags are read,
    never values: the step does not wait for the device."""
    where = f"StepRules.supervise at step {step + 1}"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise RuleRefused(f"{where} returned {clipped(result, 60)} (a {type_name(result)}): expected a pair (carry, "
                       "outputs), as supervise returns")
    carry, outputs = result
    if not isinstance(carry, Carry):
        problem = f"the carry is {clipped(carry, 40)} (a {type_name(carry)}), not the model's Carry"
    elif bad := _rows_problem({**{n: getattr(carry, n) for n in _CARRY_TENSORS},
                               "current_data['labels']": (carry.current_data.get("labels")
                                                          if isinstance(carry.current_data, Mapping) else None)},
                              rows):
        problem = f"the carry's {bad}"
    elif not isinstance(outputs, Mapping):
        problem = (f"the outputs are {clipped(outputs, 40)} (a {type_name(outputs)}), not the model's mapping of "
                   "tensors")
    elif not outputs:
        problem = "the outputs are an empty mapping: the loss has no model output to read"
    elif missing := [n for n in outputs_read if n not in outputs]:
        problem = f"the outputs lack {', '.join(missing)}, which the loss (act_loss) reads"
    elif bad := _rows_problem(dict(outputs), rows):
        problem = f"the outputs' {bad}"
    elif torch.is_grad_enabled() and not any(v.requires_grad for v in outputs.values()):
        problem = ("no output requires a gradient: they are detached from the model, and no weight would learn "
                   "from them")
    else:
        return carry, outputs
    raise RuleRefused(f"{where}: {problem}")


def _rows_problem(tensors: Mapping[str, object], rows: int) -> str | None:
    """What is wrong with the first of `tensors` that is no tensor of `rows` rows (one per row of the micro-batch),
    or None."""
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            return f"{name} is {clipped(value, 40)} (a {type_name(value)}), not a torch tensor"
        if value.ndim == 0 or value.shape[0] != rows:
            return f"{name} has shape {tuple(value.shape)}: expected {rows} rows, one per row of the micro-batch"
    return None


def _largest_divisor_at_most(n: int, k: int) -> int:
    return max(d for d in range(1, max(1, k) + 1) if n % d == 0)


def _forward_backward(state: TrainState, batch: dict[str, torch.Tensor], run: StepSetup, warmup: int = 0
                      ) -> torch.Tensor:
    """`accumulate` over the batch, halving the micro-batch on an out-of-memory error when `auto_batch` allows
    (nothing was applied yet: the partial gradients are dropped and the same rows retried)."""
    cfg, rt = run.cfg, run.rt
    while True:
        try:
            state.carries, metrics = accumulate(run.forward, state.model, batch, state.carries, state.micro,
                                                state.step, cfg, rt, run.local_batch, state.scaler, run.loss,
                                                run.rules.supervise, warmup,
                                                ACT_OUTPUTS if run.rules.loss is act_loss else ())
            return metrics
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:  # any device's allocator
            if not is_out_of_memory(e):
                raise
            if not cfg.auto_batch or state.micro == 1:
                raise out_of_memory_error(cfg, state.micro, rt.device, f"in training step {state.step + 1}") from None
        # Retried only here, past the except block: its exception holds the failed attempt's frames and with them
        # its activations, and on a CPU the retry's own allocations ran out of memory again while they lived.
        _retry_smaller(state, run)


def _retry_smaller(state: TrainState, run: StepSetup) -> None:
    """Halve the micro-batch (a divisor of the local batch) after an out-of-memory step: the failed attempt's
    gradients dropped, the carries cut anew."""
    state.micro = _largest_divisor_at_most(run.local_batch, state.micro // 2)
    drop_gradients(state.model)
    if run.rt.device.type == "cuda":
        torch.cuda.empty_cache()
    state.carries = _resplit(state.carries, state, run)
    log.warning("out of memory: retrying with micro_batch_size=%d (gradient accumulation keeps "
                "the global batch)", state.micro)


def _resplit(carries: list, state: TrainState, run: StepSetup) -> list:
    """`resplit` to the step's micro-batch; running out of memory here is the training step's, said so (with the
    micro-batch now in use), not the set-up's the run would otherwise blame."""
    try:
        return resplit(carries, state.micro)
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
    raise out_of_memory_error(run.cfg, state.micro, run.rt.device, f"in training step {state.step + 1}")


def train_step(state: TrainState, batch: dict[str, torch.Tensor], schedule: StepSchedule,
               run: StepSetup) -> tuple[Applied, torch.Tensor]:
    """One optimizer step on `batch` (already on the device) under `schedule`. Returns what the non-finite
    policy did and the step's summed metrics (still on the device: the host reads them once per log interval).
    `state.step` advances unless the step was skipped on the host."""
    set_learning_rates(state.dense, state.sparse, schedule.lr, schedule.emb_lr)
    run.rules.configure(state.model, schedule)
    if state.carries is None:
        state.carries = [state.model.initial_carry(mb) for mb in split_batch(batch, state.micro)]
    carries_before = state.carries  # what a skipped (non-finite) step leaves in place

    metrics = _forward_backward(state, batch, run, schedule.warmup)
    if run.rt.distributed:  # gradients of all ranks, then the optimizer steps
        all_reduce_([p.grad for p in state.model.parameters() if p.grad is not None] + [metrics])
    if len(carries_before) != len(state.carries):  # an out-of-memory retry cut the micro-batches anew
        carries_before = _resplit(carries_before, state, run)
    applied = run.policy.apply(state, metrics, carries_before)
    if applied.counted:
        state.step += 1
    return applied, metrics
