"""Exponential moving average of the weights, used for evaluation and export (upstream: ema=True, rate 0.999).

Only trainable parameters are averaged; buffers (the puzzle-embedding table, H_init/L_init)
are taken from the live model, as upstream does.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from trm_kaggle.optim.common import fraction_argument


class EMA:
    def __init__(self, model: nn.Module, rate: float = 0.999):
        # the training config's bound for ema_rate, [0, 1): NaN, inf, 2.0 or -1 made the average NaN or run away
        fraction_argument("rate", rate)
        self.rate = rate
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        params = dict(model.named_parameters())
        names = list(self.shadow)
        # shadow <- rate * shadow + (1 - rate) * param
        torch._foreach_lerp_([self.shadow[n] for n in names], [params[n].detach() for n in names], 1.0 - self.rate)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.shadow)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = set(self.shadow) - set(state)
        if missing:
            raise KeyError(f"EMA state lacks {sorted(missing)[:3]}")
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
