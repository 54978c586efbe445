"""What a training step does when its loss or gradients are not finite: one rule, three ways to apply it.

The rule (`NonFiniteSteps`): such a step changes nothing, and the run stops after `max_nonfinite_steps` of
them in a row. Where the check runs depends on the device and the dtype, chosen once at setup
(`nonfinite_policy`):

* `HostCheck` (CPU; XLA): asked on the host after backward; a skipped step is taken again on the next batch
  under the same step number. On XLA a host read per step would cut the graph, so the check reads the logged
  loss once per interval instead.
* `LossScaling` (float16): inf/nan gradients are the loss scale's business (the step is skipped whole and the
  scale lowered, `trm_kaggle.train.amp`); a loss that is itself not finite counts toward the limit.
* `DeviceGuard` (CUDA): decided on the device, so the steady-state step never waits for the host
  (`trm_kaggle.train.step_guard`); the verdicts are read with the metrics, once per log interval.

Each policy's `apply(state, metrics, carries_before)` runs the optimizer step (and the EMA update) or skips it,
and returns whether the step counts and the verdict the host still has to read.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from trm_kaggle.config import TrainConfig
from trm_kaggle.model import Carry, NonFiniteSteps, all_finite, step_is_finite
from trm_kaggle.train.amp import LossScaler
from trm_kaggle.train.optimizers import optimizer_step
from trm_kaggle.train.runtime import Runtime
from trm_kaggle.train.state import TrainState
from trm_kaggle.train.step_guard import StepGuard, keep_carries

log = logging.getLogger(__name__)

# Devices whose steady-state training step runs without a host read: the finite check decided on the device
# (`DeviceGuard`), exploration draws made there, the puzzle rows' update without `unique()`.
# On a CPU a host read costs nothing, and a skipped step keeps its step number there (as it always has).
SYNC_FREE_DEVICES = ("cuda",)


@dataclass
class Applied:
    counted: bool  # the step number advances (False: the host check skipped it; the next batch takes it again)
    verdict: torch.Tensor | None = None  # decided on the device, read by the host with the step's metrics


def drop_gradients(model) -> None:
    """Forget a step's gradients: the weights' and the puzzle rows' (the sparse optimizer's)."""
    model.zero_grad(set_to_none=True)
    if model.puzzle_emb is not None:
        model.puzzle_emb.clear()


def _step_and_average(state: TrainState, active: torch.Tensor | None = None) -> None:
    optimizer_step(state.dense, state.sparse, active=active)
    if state.ema is not None:
        state.ema.update(state.model)


class HostCheck:
    def __init__(self, count: NonFiniteSteps, per_step: bool = True):
        self.count, self.per_step = count, per_step

    def apply(self, state: TrainState, metrics: torch.Tensor, carries_before: list[Carry]) -> Applied:
        if self.per_step and self.count.skip(step_is_finite(state.model, metrics[0]), state.step):
            drop_gradients(state.model)
            state.carries = carries_before
            log.warning("step %d: the loss or the gradients are not finite; step skipped (%d in a row, the run "
                        "stops at max_nonfinite_steps=%d)", state.step + 1, self.count.in_a_row, self.count.limit)
            return Applied(counted=False)
        _step_and_average(state)
        return Applied(counted=True)

    def replay(self, finite: bool, at: int) -> bool:
        return False  # every verdict was read on the host at its step

    def logged(self, record: dict, step: int) -> None:
        """Without a per-step check (XLA), a non-finite logged loss counts once per interval."""
        if not self.per_step and not math.isfinite(record["loss"]):
            self.count.in_a_row += 1
            self.count.stop(step - 1)


class LossScaling:
    def __init__(self, count: NonFiniteSteps, scaler: LossScaler):
        self.count, self.scaler = count, scaler

    def apply(self, state: TrainState, metrics: torch.Tensor, carries_before: list[Carry]) -> Applied:
        stepped = self.scaler.step(state.dense, state.sparse, state.model)
        if state.dense is not None:
            state.dense.zero_grad(set_to_none=True)
        if self.count.skip(stepped or bool(torch.isfinite(metrics[0])), state.step):
            log.warning("step %d: the loss is not finite (%d in a row, the run stops at max_nonfinite_steps=%d)",
                        state.step + 1, self.count.in_a_row, self.count.limit)
        if state.ema is not None and stepped:
            state.ema.update(state.model)
        return Applied(counted=True)

    def replay(self, finite: bool, at: int) -> bool:
        return False

    def logged(self, record: dict, step: int) -> None:
        pass


class DeviceGuard:
    """The step's updates run whatever the verdict and are undone on the device where it was not finite. The
    first step of a process (no optimizer state to copy yet) falls back to the host check."""

    def __init__(self, count: NonFiniteSteps, guard: StepGuard):
        self.count, self.guard = count, guard
        self.host = HostCheck(count)

    def apply(self, state: TrainState, metrics: torch.Tensor, carries_before: list[Carry]) -> Applied:
        if not self.guard.save():
            return self.host.apply(state, metrics, carries_before)
        grads = [p.grad for p in state.model.parameters() if p.grad is not None]
        verdict = all_finite([metrics[0]] + grads)
        _step_and_average(state, active=verdict)
        self.guard.undo_unless(verdict)  # the EMA's shadow included
        state.carries = keep_carries(verdict, state.carries, carries_before)
        return Applied(counted=True, verdict=verdict)

    def replay(self, finite: bool, at: int) -> bool:
        """The verdict of step `at` (0-based), read with the metrics: True when it was skipped (said here)."""
        if self.count.skip(finite, at):
            log.warning("step %d: the loss or the gradients were not finite; step skipped (%d in a row, the run "
                        "stops at max_nonfinite_steps=%d)", at + 1, self.count.in_a_row, self.count.limit)
            return True
        return False

    def logged(self, record: dict, step: int) -> None:
        pass


NonFinitePolicy = HostCheck | LossScaling | DeviceGuard


#: The settings whose size alone can make a run diverge. Each is measured against its default (`TrainConfig`'s);
#: those without one (None) against what stands in for it: muon_weight_decay follows weight_decay, and muon_lr
#: (which follows lr) against a size no recipe comes near.
STEP_SIZE_SETTINGS = ("lr", "puzzle_emb_lr", "muon_lr", "weight_decay", "puzzle_emb_weight_decay", "muon_weight_decay")
NO_DEFAULT = {"muon_lr": 1.0, "muon_weight_decay": "weight_decay"}
FAR_ABOVE = 100.0  # this many times the reference is far above it


def _usual_size(key: str) -> float:
    default = TrainConfig.model_fields[key].default
    if default is None:
        stand_in = NO_DEFAULT[key]
        return _usual_size(stand_in) if isinstance(stand_in, str) else stand_in
    return default


def divergence_advice(cfg) -> str:
    """What the "training diverged" line tells the user to change: the settings of `cfg` set far above their
    reference (`STEP_SIZE_SETTINGS`) by name, before the usual advice. A weight decay of 1e30 diverged whatever
    lr was, and the line only said to lower lr."""
    far = [f"{k}={getattr(cfg, k):g}" for k in STEP_SIZE_SETTINGS
           if isinstance(getattr(cfg, k, None), (int, float)) and getattr(cfg, k) > FAR_ABOVE * _usual_size(k)]
    if not far:
        return NonFiniteSteps.ADVICE
    return (f"{', '.join(far)} {'is' if len(far) == 1 else 'are'} far above "
            f"{'its' if len(far) == 1 else 'their'} usual size: lower {'it' if len(far) == 1 else 'them'} first; "
            f"else {NonFiniteSteps.ADVICE}")


def nonfinite_policy(state: TrainState, rt: Runtime, limit: int, advice: str = NonFiniteSteps.ADVICE
                     ) -> NonFinitePolicy:
    """The policy for this run's device and dtype (see the module text); `advice` ends its "training diverged"
    line (`divergence_advice`)."""
    count = NonFiniteSteps(limit, advice)
    if state.scaler.enabled:
        return LossScaling(count, state.scaler)
    if rt.device.type in SYNC_FREE_DEVICES:
        return DeviceGuard(count, StepGuard(state.model, state.dense, state.ema))
    return HostCheck(count, per_step=rt.device.type != "xla")
