"""What every optimizer here does the same way: its base class, argument checks, the closure, the parameters
with a gradient."""

from __future__ import annotations

import functools
from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer

from trm_kaggle.model import may_be_tracing


def _plain_until_compiling(name: str):
    """`Optimizer.<name>` as it is written, while torch._dynamo has not been imported; torch's wrapped one after.

    torch wraps four of Optimizer's methods so that torch.compile never traces into them, and the wrapper imports
    torch._dynamo on its first call: 1.2 s of a CPU training process's start-up (3.8 s in all for a 3-step
    `trm-kaggle train`), spent by every process that builds an optimizer. While torch._dynamo is not imported
    nothing can be compiling, so the method itself does the same; once it is (a compiled model), torch's wrapper
    runs as usual."""
    wrapped = getattr(Optimizer, name)
    plain = getattr(wrapped, "__wrapped__", wrapped)  # a torch that does not wrap it: the same method either way

    @functools.wraps(plain)
    def method(self, *args, **kwargs):
        return (wrapped if may_be_tracing() else plain)(self, *args, **kwargs)

    return method


class BaseOptimizer(Optimizer):
    """torch's `Optimizer`, without its import of torch._dynamo at start-up (see `_plain_until_compiling`)."""

    add_param_group = _plain_until_compiling("add_param_group")
    zero_grad = _plain_until_compiling("zero_grad")
    state_dict = _plain_until_compiling("state_dict")
    load_state_dict = _plain_until_compiling("load_state_dict")


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
