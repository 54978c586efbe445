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

from typing import Iterable, List, Tuple, Union

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer


class Lion(Optimizer):
    def __init__(self, params: Iterable, lr: Union[float, Tensor] = 1e-4, betas: Tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0):
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not (0.0 <= betas[0] <= 1.0 and 0.0 <= betas[1] <= 1.0):
            raise ValueError(f"Invalid betas: {betas}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params: List[Tensor] = []
            grads: List[Tensor] = []
            moments: List[Tensor] = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lion does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                moments.append(state["exp_avg"])
            if not params:
                continue
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
