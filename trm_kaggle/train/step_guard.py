"""A training step's finite check decided on the device, so that the steady-state step never waits for it.

The rule is `NonFiniteSteps`': a step whose loss or gradients are not finite changes nothing (weights, the
optimizer's moments and step counts, the EMA, the puzzle rows, the ACT carries), and the run stops after
`max_nonfinite_steps` such steps in a row. Asking "finite?" on the host after every backward makes the CPU
wait for the GPU once per step (and the launch queue runs dry). Here the step's updates run whatever the
answer: `StepGuard` copies every tensor the updates write before they run, and puts each back where the
answer (a 0-dim bool on the device) is "not finite"; the puzzle rows take the answer as a mask
(`SignSGD.step(active=...)`), the carries through `keep_carries`. The answer travels with the step's metrics,
which the host reads once per log interval and replays through `NonFiniteSteps` (its warnings, its stop).

What differs from the check on the host: a skipped step still uses its step number (the schedule moves on,
`max_steps` counts it), and a run that diverges stops at the next log interval instead of at once (with the
same message, naming the step where the limit was reached; the steps after it changed nothing either, or
trained on finite numbers). The trainer uses it on CUDA; the first step of a process, whose optimizer has no
state yet to copy, is checked on the host.
"""

from __future__ import annotations

from typing import Optional

import torch

from trm_kaggle.model import Carry


class StepGuard:
    """Copies of what an optimizer step writes (weights, the dense optimizer's state, the EMA's shadow), put back
    on the device where a step was not finite."""

    def __init__(self, model: torch.nn.Module, dense: Optional[torch.optim.Optimizer], ema=None):
        self.model, self.dense, self.ema = model, dense, ema
        self._saved: Optional[tuple[list[torch.Tensor], list[torch.Tensor]]] = None

    def _written(self) -> Optional[list[torch.Tensor]]:
        """Every tensor the coming step writes, or None when one cannot be put back on the device: optimizer
        state made by this very step (the first), or a step count kept on the host."""
        device = self.model.H_init.device
        tensors: list[torch.Tensor] = []
        if self.dense is not None:
            for group in self.dense.param_groups:
                for p in group["params"]:
                    state = self.dense.state.get(p)
                    if not state:
                        if p.grad is not None:
                            return None  # the optimizer makes its state in this step
                        continue  # no gradient: the step leaves it alone
                    tensors.append(p)
                    tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
        if self.ema is not None:
            tensors += list(self.ema.shadow.values())
        if any(t.device != device for t in tensors):
            return None
        return tensors

    def save(self) -> bool:
        """Copy what the coming step writes (call after backward, before the optimizers); False when this step
        must be checked on the host instead."""
        tensors = self._written()
        self._saved = None if tensors is None else (tensors, [t.detach().clone() for t in tensors])
        return self._saved is not None

    @torch.no_grad()
    def undo_unless(self, finite: torch.Tensor) -> None:
        """Put the copies back where `finite` (a 0-dim bool on the device) is False; no host read."""
        tensors, copies = self._saved
        for t, before in zip(tensors, copies):
            t.copy_(torch.where(finite, t, before))
        self._saved = None


def keep_carries(finite: torch.Tensor, new: list[Carry], old: list[Carry]) -> list[Carry]:
    """The new carries where the step was finite, the old ones (the same rows) where it was not."""

    def pick(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(finite, a, b)

    return [Carry(pick(n.z_H, o.z_H), pick(n.z_L, o.z_L), pick(n.steps, o.steps), pick(n.halted, o.halted),
                  {k: pick(v, o.current_data[k]) for k, v in n.current_data.items()}) for n, o in zip(new, old)]
