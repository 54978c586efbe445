"""Exponential moving average of the weights, used for evaluation and export (upstream: ema=True, rate 0.999).

The parameters are averaged; buffers (the puzzle-embedding table, H_init/L_init) are taken from the
live model, as upstream does. Parameters frozen when the average is made (`freeze_weights`: the puzzle rows
train alone) keep their average as it is: the weights do not move, so the average of a stage that trained them
(a staged test-time schedule's, loaded from its train state) survives and is what evaluation and export use.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from trm_kaggle.model import first_nonfinite
from trm_kaggle.optim.common import fraction_argument
from trm_kaggle.wording import clipped


class EMA:
    def __init__(self, model: nn.Module, rate: float = 0.999):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model={clipped(model, 40)}: expected a torch.nn.Module")
        # the training config's bound for ema_rate, [0, 1): NaN, inf, 2.0 or -1 made the average NaN or run away;
        # kept as a float (a tensor rate was kept as one)
        self.rate = fraction_argument("rate", rate)
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}
        if not self.shadow:  # its update was torch's "Tensor list must have at least one tensor"
            raise ValueError(f"model={type(model).__name__}: has no parameters to average")
        # the parameters that train: the others' averages stay as they are (see the module's docstring)
        self.moving = [n for n, p in model.named_parameters() if p.requires_grad]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        if not self.moving:  # frozen weights: their averages stay
            return
        params = dict(model.named_parameters()) if isinstance(model, nn.Module) else {}
        live = [params.get(n) for n in self.moving]
        if any(p is None or p.shape != self.shadow[n].shape or p.dtype != self.shadow[n].dtype
               for n, p in zip(self.moving, live)):
            raise ValueError(f"model={type(model).__name__}: not the model this average was made of "
                             "(its parameters' names, shapes or dtypes differ)")
        # shadow <- rate * shadow + (1 - rate) * param
        torch._foreach_lerp_([self.shadow[n] for n in self.moving], [p.detach() for p in live], 1.0 - self.rate)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.shadow)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """The averages of `state`, once it holds this average's names, each a finite floating-point tensor of its
        shape (one of another shape was broadcast into it, NaN taken as it is): else one ValueError naming it."""
        if not isinstance(state, dict):
            raise TypeError(f"state={clipped(state, 40)}: expected a dict of tensors by parameter name")
        missing, foreign = sorted(set(self.shadow) - set(state)), sorted(set(state) - set(self.shadow), key=str)
        if missing or foreign:
            raise ValueError("EMA state " + "; ".join(
                ([f"lacks {', '.join(missing[:3])}"] if missing else []) +
                ([f"holds names this average has not: {', '.join(map(str, foreign[:3]))}"] if foreign else [])))
        for n, t in state.items():
            if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.shape == self.shadow[n].shape):
                raise ValueError(f"EMA state {n}: {clipped(t, 40)}: expected a floating-point tensor of shape "
                                 f"{tuple(self.shadow[n].shape)}")
        if found := first_nonfinite(state):
            raise ValueError(f"EMA state {found[0]}: holds NaN or inf")
        for n, t in self.shadow.items():
            t.copy_(state[n])

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[nn.Module]:
        """Temporarily put the averaged weights into `model` (for evaluation or export)."""
        params = dict(model.named_parameters())
        backup = {n: params[n].detach().clone() for n in self.shadow}
        with torch.no_grad():
            for n, t in self.shadow.items():
                # On XLA a plain copy_ would let the weight share the shadow's buffer; the next training step,
                # which updates the shadow in place, would then need another program (a recompilation).
                # `t * 1.0` is exact and gives the weight a buffer of its own.
                params[n].copy_(t * 1.0 if t.device.type == "xla" else t)
        try:
            yield model
        finally:
            with torch.no_grad():
                for n, t in backup.items():
                    params[n].copy_(t)
