"""One supervision step of a micro-batch, as the run's recipe says (docs/recipes.md).

    upstream's (the default)   carry, outputs = model(carry, batch): the ACT carry goes on across steps
    supervision_decay < 1      the same, each row's gradient weighted by its ACT step (CGAR's weighting)
    rsm.enabled                fresh examples every step: `warmup` supervision steps without gradient from the
                               initial states, then one with the gradient and the loss (RSM's contract)

The model is used from outside (`act_begin`, `inner`, `initial_carry`), so compiled regions and the model's
own recursion (H_cycles - 1 cycles without gradient, the last with it) stay what they are.
"""

from __future__ import annotations

import torch

from trm_kaggle.config import TrainConfig
from trm_kaggle.model import Carry, TinyRecursiveModel


def supervise(forward, model: TinyRecursiveModel, carry: Carry, batch: dict[str, torch.Tensor], exploration,
              warmup: int, cfg: TrainConfig) -> tuple[Carry, dict[str, torch.Tensor]]:
    """The step's forward of one micro-batch under `cfg`'s recipe: (the carry for the next step, the outputs the
    loss reads). `forward` is the model or what calls it; `warmup` is the schedule's RSM warm-up."""
    if cfg.rsm.enabled:
        return rsm_supervise(model, batch, warmup)
    carry, outputs = forward(carry, batch, exploration=exploration)
    if cfg.supervision_decay != 1.0:
        weights = supervision_weights(carry.steps, cfg.supervision_decay, cfg.arch.halt_max_steps)
        outputs = weight_gradients(outputs, weights)
    return carry, outputs


# ---------------------------------------------------------------------------
# RSM: detached warm-up, the loss at the last step
# ---------------------------------------------------------------------------


def rsm_supervise(model: TinyRecursiveModel, batch: dict[str, torch.Tensor], warmup: int
                  ) -> tuple[Carry, dict[str, torch.Tensor]]:
    """Every row starts its batch example from the initial states, runs `warmup` supervision steps without
    autograd, then one with it. The returned carry has every row halted (the next step starts afresh) and
    `steps` = warmup + 1 (the depth the loss saw). The continue head gets no target: no row continues."""
    fresh = model.initial_carry(batch)  # every row halted: act_begin takes the whole batch
    z_H, z_L, steps, data = model.act_begin(fresh.halted, fresh.z_H, fresh.z_L, fresh.steps, fresh.current_data,
                                            batch, model.H_init, model.L_init)
    # no_grad, not inference_mode: the states go on into the step with autograd, which may save them
    with torch.no_grad():
        for _ in range(warmup):
            z_H, z_L, _, _, _ = model.inner(z_H, z_L, data, logits=False)
    z_H, z_L, logits, q_halt, q_continue = model.inner(z_H, z_L, data)
    outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_continue}
    return Carry(z_H, z_L, steps + (warmup + 1), fresh.halted, data), outputs


# ---------------------------------------------------------------------------
# CGAR's hierarchical supervision weighting
# ---------------------------------------------------------------------------


def supervision_weights(steps: torch.Tensor, decay: float, halt_max_steps: int) -> torch.Tensor:
    """decay^(t - 1) for a row at ACT step t (1-based), scaled so that the weights of steps 1..halt_max_steps
    average 1: the step's gradient keeps upstream's overall size while early steps weigh more."""
    mean = sum(decay ** k for k in range(halt_max_steps)) / halt_max_steps
    return torch.pow(torch.tensor(decay, dtype=torch.float32, device=steps.device),
                     (steps - 1).clamp_min(0).float()) / mean


class _ScaleRows(torch.autograd.Function):
    """Identity forward; backward multiplies row r's gradient by weights[r]."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(weights)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (weights,) = ctx.saved_tensors
        return grad * weights.view((-1,) + (1,) * (grad.ndim - 1)).to(grad.dtype), None


def weight_gradients(outputs: dict[str, torch.Tensor], weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """The outputs with each row's gradient scaled by its weight. The values are untouched: the loss and the
    metrics read what upstream's would (the logged loss stays the unweighted one), the weights act on the
    gradient alone, which is that of the weighted loss sum_r weights[r] * loss_r (each row's loss depends on
    its own outputs only)."""
    return {k: _ScaleRows.apply(v, weights) if v.requires_grad else v for k, v in outputs.items()}
