"""Lion ("Symbolic Discovery of Optimization Algorithms", Chen et al. 2023, arXiv 2302.06675).

Per element, with decoupled weight decay (applied first, as AdamATan2 does here):

    p  *= 1 - lr * weight_decay
    p  -= lr * sign(beta1 * m + (1 - beta1) * g)
    m   = beta2 * m + (1 - beta2) * g

One moment instead of Adam's two (half the optimizer memory), and every weight moves
by exactly lr (or 0) per step, so lr is usually 3-10x smaller than AdamW's and the
weight decay 3-10x larger to keep lr * weight_decay (the paper's advice). The update
interpolates with beta1 and the moment with beta2: defaults (0.9, 0.99), the paper's.
`sign(0) = 0`: a weight whose interpolation is exactly zero does not move.

Multi-tensor (`torch._foreach_*`) and device-agnostic; state layout `exp_avg`.
"""

from __future__ import annotations

from typing import Iterable, Tuple, Union

import torch
from torch import Tensor

from trm_kaggle.optim.common import BaseOptimizer, check_hyperparameters, closure_loss, with_grads


class Lion(BaseOptimizer):
    def __init__(self, params: Iterable, lr: Union[float, Tensor] = 1e-4, betas: Tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0):
        check_hyperparameters(lr, weight_decay, betas)
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def state_keys(self, group: dict) -> frozenset:
        return frozenset({"exp_avg"})

    @torch.no_grad()
    def step(self, closure=None):
        self.check_loaded()
        loss = closure_loss(closure)
        for group in self.param_groups:
            params = with_grads(group, "Lion")
            if not params:
                continue
            for p in params:
                if len(self.state[p]) == 0:
                    self.state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            moments = [self.state[p]["exp_avg"] for p in params]
            lr = float(group["lr"])
            beta1, beta2 = group["betas"]
            wd = group["weight_decay"]
            if wd != 0:
                torch._foreach_mul_(params, 1.0 - lr * wd)
            # lerp(m, g, w) = (1 - w) m + w g: the update's interpolation, a new tensor (m is still needed)
            update = torch._foreach_lerp(moments, grads, 1.0 - beta1)
            torch._foreach_sign_(update)
            torch._foreach_add_(params, update, alpha=-lr)
            torch._foreach_lerp_(moments, grads, 1.0 - beta2)
        return loss
