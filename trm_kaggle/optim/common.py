"""What every optimizer here does the same way: its base class, argument checks, the closure, the parameters
with a gradient."""

from __future__ import annotations

import functools
import math
import sys
from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer

from trm_kaggle.config import MAX_LR, number_argument
from trm_kaggle.model import first_nonfinite, may_be_tracing
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
    _load_state_dict = _plain_until_compiling("load_state_dict")

    def add_param_group(self, param_group: dict) -> None:
        """torch's, once the group's own settings (what it does not take from the defaults) are within the bounds
        of the defaults' own: torch's `Optimizer.__init__` adds every group given through here, so a group's
        `lr=nan` or `betas=(2.0, 0.9)`, once taken unchecked, made every weight NaN at the first step."""
        if isinstance(param_group, dict):  # anything else is torch's own TypeError
            params = param_group.get("params")
            if isinstance(params, Tensor):  # as torch takes them (a set stays torch's TypeError)
                param_group["params"] = [params]
            elif params is not None and not isinstance(params, set):
                param_group["params"] = list(params)
            try:
                self.check_group({**self.defaults, **param_group})
            except ValueError as e:
                raise ValueError(f"param group {len(self.param_groups)}: {e}") from None
        self._add_param_group(param_group)

    def check_group(self, group: dict) -> None:
        """ValueError naming the setting for a group's lr, weight_decay or betas out of bounds (those it holds),
        and for a decay whose product with the rate overflows the first step; an optimizer with settings of its
        own checks them too."""
        for key, check in (("lr", lr_argument), ("weight_decay", decay_argument), ("betas", betas_argument)):
            if key in group:
                check(key, group[key])
        if "lr" in group and "weight_decay" in group:
            rate_product("lr x weight_decay", group["lr"], group["weight_decay"])

    #: group settings that say what kind of group it is (a loaded state's must be this optimizer's)
    kind_keys: tuple = ()

    def state_keys(self, group: dict) -> frozenset:
        """What each parameter's state holds in `group` once stepped (none: the optimizer keeps no state)."""
        return frozenset()

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's; the next `step` checks what it took first (`check_loaded`). torch's takes any settings and
        tensors as they are, so a NaN rate, another optimizer's moments or a moment of another shape made the
        weights NaN, or failed inside the step in torch's words. Checked at the step, not here, so that the
        trainer's train-state reader, which compares a loaded state with the run's own settings right after
        loading, says what differs in its words."""
        if not (isinstance(state_dict, dict) and isinstance(state_dict.get("state"), dict)
                and isinstance(state_dict.get("param_groups"), list)):
            raise ValueError(f"state_dict={clipped(state_dict, 40)}: expected an optimizer's state dict "
                             "(a dict of 'state' and 'param_groups')")
        # what this optimizer's groups are (their entries, their kind), for the check of what replaces them
        before = [(frozenset(g) - _NOT_SAVED, {k: g[k] for k in self.kind_keys}) for g in self.param_groups]
        self._load_state_dict(state_dict)
        self._loaded_groups = before

    def check_loaded(self) -> None:
        """Once after `load_state_dict`, before a step changes anything: ValueError naming the group or parameter
        and the entry unless what was loaded is this optimizer's kind of state for its parameters: per group the
        entries it had (another optimizer's lack or add some), of its kind, within `check_group`'s bounds; per
        parameter the state `state_keys` names, each tensor floating point, finite and in its parameter's shape, a
        mean of squares from 0, a step count a whole number from 0."""
        before = self.__dict__.pop("_loaded_groups", None)
        if before is None:
            return
        index = 0
        for g, (group, (keys, kind)) in enumerate(zip(self.param_groups, before)):
            held = frozenset(group) - _NOT_SAVED
            if held != keys:
                raise ValueError(f"loaded state: param group {g} " + "; ".join(
                    ([f"lacks {', '.join(sorted(keys - held))}"] if keys - held else []) +
                    ([f"holds {', '.join(sorted(map(str, held - keys)))}, which this optimizer does not"]
                     if held - keys else [])) + " (another optimizer's state?)")
            for key, value in kind.items():
                if group[key] != value:
                    raise ValueError(f"loaded state: param group {g}'s {key} is {clipped(group[key], 40)}, this "
                                     f"optimizer's {clipped(value, 40)}")
            try:
                self.check_group({k: v for k, v in group.items() if k != "params"})
            except ValueError as e:
                raise ValueError(f"loaded state: param group {g}: {e}") from None
            wanted = self.state_keys(group)
            for p in group["params"]:
                if p in self.state:
                    _check_parameter_state(index, g, self.state[p], wanted, p)
                index += 1


# group entries the saving optimizer may hold and this one not yet (or the other way round): a scheduler's
# initial rate, torch's own flags
_NOT_SAVED = frozenset({"initial_lr", "foreach", "fused", "differentiable", "capturable", "maximize"})


def _check_parameter_state(index: object, group: int, entry: object, keys: frozenset, p: Tensor) -> None:
    """ValueError naming the entry unless `entry` is a parameter's state as this optimizer keeps it."""
    where = f"parameter {clipped(index, 20)} (group {group})"
    if not isinstance(entry, dict):
        raise ValueError(f"loaded state: {where} is {clipped(entry, 40)}: expected a dict of tensors")
    if entry and set(entry) != keys:
        raise ValueError(f"loaded state: {where} holds {', '.join(sorted(map(str, entry))) or 'nothing'}, this "
                         f"optimizer keeps {', '.join(sorted(keys)) or 'nothing'} (another optimizer's state?)")
    for name, t in entry.items():
        said = f"loaded state: {where}: {clipped(name, 20)}"
        if not (isinstance(t, Tensor) and t.is_floating_point()):
            raise ValueError(f"{said} is {clipped(t, 40)}: expected a floating-point tensor")
        if name == "step":
            n = float(t) if t.numel() == 1 else None
            if n is None or not (math.isfinite(n) and n >= 0 and n.is_integer()):
                raise ValueError(f"{said} is {clipped(t, 40)}: expected a whole number from 0")
            continue
        if t.shape != p.shape:
            raise ValueError(f"{said} has shape {tuple(t.shape)}, its parameter {tuple(p.shape)}")
        if first_nonfinite({name: t}):
            raise ValueError(f"{said} holds NaN or inf")
        if name.endswith("_sq") and bool((t < 0).any()):
            raise ValueError(f"{said} holds negative values (a mean of squares)")


def check_hyperparameters(lr: float, weight_decay: float, betas: Optional[Sequence[float]] = None) -> None:
    """ValueError naming the argument unless lr is a number from 0 to MAX_LR, weight_decay a finite number from 0
    and betas two numbers in [0, 1): the bounds of the training config's settings (`lr=inf` and `weight_decay=inf`
    once passed a check written as `not lr >= 0`, and the first step made every weight inf or NaN)."""
    lr_argument("lr", lr)
    decay_argument("weight_decay", weight_decay)
    rate_product("lr x weight_decay", lr, weight_decay)
    if betas is not None:
        betas_argument("betas", betas)


def _number(value: object) -> object:
    """A one-element tensor as its Python number (torch's optimizers take a tensor lr); anything else as it is (a
    tensor of no data, on the meta device, too: refused as no number)."""
    if isinstance(value, Tensor) and value.numel() == 1 and value.device.type != "meta":
        return value.item()
    return value


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
    """A weight decay: a finite number from 0 (inf passed a lower bound and made the first step's weights inf). Its
    product with the rate is bounded where both are known (`rate_product`)."""
    _within(name, value, 0.0, sys.float_info.max, "a finite number from 0")


def ratio_argument(name: str, value: object) -> None:
    """A multiple of a rate: a finite number above 0 (at 0 what it scales never moves). Its product with the rate
    is bounded where both are known (`rate_product`)."""
    bounds = "a finite number above 0"
    if not _within(name, value, 0.0, sys.float_info.max, bounds) > 0.0:
        raise ValueError(f"{name}={clipped(value, 40)}: expected {bounds}")


def rate_product(name: str, rate: object, factor: object) -> float:
    """`rate` x `factor` (a rate times a weight decay or a ratio, both checked) when it is at most MAX_LR, the
    bound of a rate, else one ValueError naming both: 1e-3 x 1e300 passed each bound and made the first step's
    weights inf (the step scales them by 1 - lr * weight_decay), or overflowed float32 inside torch's Muon. The
    trainer builds its optimizers at rate 0 and writes each step's rate: there the step guard catches a run that
    diverges so, naming the setting."""
    product = float(_number(rate)) * float(_number(factor))
    if not product <= MAX_LR:
        raise ValueError(f"{name}={product:g}: expected at most {MAX_LR:g} (lower either)")
    return product


def fraction_argument(name: str, value: object) -> float:
    """The decay of a moving average (a beta, a momentum, the EMA's rate): a number from 0 up to, not including, 1
    (at 1 the average never moves; past 1, below 0 or NaN, the weights it steps overshoot, grow or become NaN)."""
    bounds = "a number from 0 up to, not including, 1"
    if not (number := _within(name, value, 0.0, 1.0, bounds)) < 1.0:
        raise ValueError(f"{name}={clipped(value, 40)}: expected {bounds}")
    return number


def betas_argument(name: str, value: object) -> None:
    """Two decays (beta1, beta2), each a `fraction_argument` (a mapping's keys are no betas)."""
    try:
        betas = None if isinstance(value, (str, bytes, dict)) else tuple(value)
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
