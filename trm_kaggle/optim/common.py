"""What every optimizer here does the same way: argument checks, the closure, the parameters with a gradient."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor


def check_hyperparameters(lr: float, weight_decay: float, betas: Optional[Sequence[float]] = None) -> None:
    """ValueError for a negative lr or weight decay, or betas outside [0, 1)."""
    if not lr >= 0.0:
        raise ValueError(f"Invalid learning rate: {lr}")
    if betas is not None and not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"Invalid betas: {betas}")
    if not weight_decay >= 0.0:
        raise ValueError(f"Invalid weight_decay: {weight_decay}")


def closure_loss(closure: Optional[Callable[[], Tensor]]) -> Optional[Tensor]:
    """The loss of a step's closure (re-evaluated with autograd on, as torch's optimizers do), or None."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def with_grads(group: dict, optimizer: str) -> List[Tensor]:
    """The parameters of a param group that received a gradient; a sparse gradient is refused."""
    params = []
    for p in group["params"]:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            raise RuntimeError(f"{optimizer} does not support sparse gradients")
        params.append(p)
    return params
