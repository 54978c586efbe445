"""What every optimizer here does the same way: its base class, argument checks, the closure, the parameters
with a gradient."""

from __future__ import annotations

import functools
import sys
from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer

from trm_kaggle.config import MAX_LR, number_argument
from trm_kaggle.model import may_be_tracing
from trm_kaggle.wording import clipped


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
    """torch's `Optimizer`, without its import of torch._dynamo at start-up (see `_plain_until_compiling`), whose
    every param group's settings are checked as the defaults are (`check_group`)."""

    _add_param_group = _plain_until_compiling("add_param_group")
    zero_grad = _plain_until_compiling("zero_grad")
    state_dict = _plain_until_compiling("state_dict")
    load_state_dict = _plain_until_compiling("load_state_dict")

    def add_param_group(self, param_group: dict) -> None:
        """torch's, once the group's own settings (what it does not take from the defaults) are within the bounds
        of the defaults' own: torch's `Optimizer.__init__` adds every group given through here, so a group's
        `lr=nan` or `betas=(2.0, 0.9)`, once taken unchecked, made every weight NaN at the first step."""
        if isinstance(param_group, dict):  # anything else is torch's own TypeError
            try:
                self.check_group({**self.defaults, **param_group})
            except ValueError as e:
                raise ValueError(f"param group {len(self.param_groups)}: {e}") from None
        self._add_param_group(param_group)

    def check_group(self, group: dict) -> None:
        """ValueError naming the setting for a group's lr, weight_decay or betas out of bounds (those it holds);
        an optimizer with settings of its own checks them too."""
        for key, check in (("lr", lr_argument), ("weight_decay", decay_argument), ("betas", betas_argument)):
            if key in group:
                check(key, group[key])


def check_hyperparameters(lr: float, weight_decay: float, betas: Optional[Sequence[float]] = None) -> None:
    """ValueError naming the argument unless lr is a number from 0 to MAX_LR, weight_decay a finite number from 0
    and betas two numbers in [0, 1): the bounds of the training config's settings (`lr=inf` and `weight_decay=inf`
    once passed a check written as `not lr >= 0`, and the first step made every weight inf or NaN)."""
    lr_argument("lr", lr)
    decay_argument("weight_decay", weight_decay)
    if betas is not None:
        betas_argument("betas", betas)


def _number(value: object) -> object:
    """A one-element tensor as its Python number (torch's optimizers take a tensor lr); anything else as it is."""
    return value.item() if isinstance(value, Tensor) and value.numel() == 1 else value


def _within(name: str, value: object, low: float, high: float, bounds: str) -> float:
    """`value` as a float when it is a finite number from `low` to `high` (numpy's numbers and one-element tensors
    too, never a bool), else one ValueError naming the argument, its value and `bounds`."""
    try:
        return number_argument(name, _number(value), low, high)
    except ValueError:
        raise ValueError(f"{name}={clipped(value, 40)}: expected {bounds}") from None


def lr_argument(name: str, value: object) -> None:
    """A learning rate (or a multiple of one): a number from 0 to MAX_LR, the config's bound for `lr` (0 leaves the
    weights as they are: the trainer's schedule writes each step's rate)."""
    _within(name, value, 0.0, MAX_LR, f"a number from 0 to {MAX_LR:g}")


def decay_argument(name: str, value: object) -> None:
    """A weight decay: a finite number from 0 (inf passed a lower bound and made the first step's weights inf)."""
    _within(name, value, 0.0, sys.float_info.max, "a finite number from 0")


def ratio_argument(name: str, value: object) -> None:
    """A multiple of a rate: a finite number above 0 (at 0 what it scales never moves)."""
    bounds = "a finite number above 0"
    if not _within(name, value, 0.0, sys.float_info.max, bounds) > 0.0:
        raise ValueError(f"{name}={clipped(value, 40)}: expected {bounds}")


def fraction_argument(name: str, value: object) -> None:
    """The decay of a moving average (a beta, a momentum, the EMA's rate): a number from 0 up to, not including, 1
    (at 1 the average never moves; past 1, below 0 or NaN, the weights it steps overshoot, grow or become NaN)."""
    bounds = "a number from 0 up to, not including, 1"
    if not _within(name, value, 0.0, 1.0, bounds) < 1.0:
        raise ValueError(f"{name}={clipped(value, 40)}: expected {bounds}")


def betas_argument(name: str, value: object) -> None:
    """Two decays (beta1, beta2), each a `fraction_argument`."""
    try:
        betas = None if isinstance(value, (str, bytes)) else tuple(value)
    except TypeError:
        betas = None
    if betas is None or len(betas) != 2:
        raise ValueError(f"{name}={clipped(value, 40)}: expected two numbers (beta1, beta2)")
    for i, beta in enumerate(betas):
        fraction_argument(f"{name}[{i}]", beta)


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
