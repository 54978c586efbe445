"""AdamATan2: Adam with atan2 in place of the epsilon division ("Scaling Exponents
Across Parameterizations and Optimizers", arXiv 2407.05872), as upstream trains TRM.

The rule is that of the `adam-atan2` package as `pip install adam-atan2` installs it
for upstream's requirements.txt: version 0.0.3, a fused CUDA kernel
(`csrc/adam_atan2.cu` in its sdist). Per element, with step t counted from 1:

    p  *= 1 - lr * weight_decay                      (decoupled decay, first)
    m   = lerp(m, g, 1 - beta1)
    v   = lerp(v, g*g, 1 - beta2)
    p  -= (lr / (1 - beta1^t)) * atan2(m, sqrt(v) / sqrt(1 - beta2^t))

The first-moment bias correction scales the step outside the atan2. (Version 0.0.2
put it inside, `lr * atan2(m / bc1, ...)`: at step 1 that moves a weight by
lr * pi/4 = 0.785 lr, where 0.0.3 moves it by lr * atan2(0.1 g, |g|) / 0.1 = 0.997 lr.)
atan2 needs no epsilon; every update is bounded by lr * pi/2 / (1 - beta1^t).

This is a pure-PyTorch multi-tensor (`torch._foreach_*`) version that runs on every
device. Where the package's compiled kernel imports, its version is 0.0.3 or newer
(the same rule) and a group's tensors are on CUDA, the kernel is used instead; an
older package is ignored, so results never depend on which version is installed.
State layout (`step` float32 tensor, `exp_avg`, `exp_avg_sq`) is the package's.

The foreach path keeps the step count on the host and forms the bias corrections there, in double
precision, as the kernel does; on CUDA (and with `capturable=True` anywhere) the count lives on the
device and the corrections are formed there too: no host read of the count, so that a training step
never waits for the device (the same rule; the corrections round in float32 instead of double).
"""

from __future__ import annotations

import math
from typing import Iterable, List, Tuple, Union

import torch
from torch import Tensor

from trm_kaggle.config import flag_argument
from trm_kaggle.optim.common import BaseOptimizer, check_hyperparameters, closure_loss, with_grads

# The first version of the `adam-atan2` package whose kernel computes the rule above.
FUSED_MIN_VERSION = (0, 0, 3)


def _package_version() -> tuple[int, ...] | None:
    """The installed `adam-atan2` distribution's version, or None when it cannot be read."""
    from importlib import metadata

    try:
        text = metadata.version("adam-atan2")
    except metadata.PackageNotFoundError:
        return None
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def _load_fused_backend():
    """The package's compiled kernel when it computes our rule (>= 0.0.3), else None."""
    version = _package_version()
    if version is None or version < FUSED_MIN_VERSION:
        return None  # absent, or 0.0.2's kernel (bias correction inside the atan2): never used
    try:  # the compiled extension of the `adam-atan2` package (CUDA only)
        import adam_atan2_backend  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None
    return adam_atan2_backend


_fused_backend = _load_fused_backend()


def fused_available() -> bool:
    return _fused_backend is not None


class AdamATan2(BaseOptimizer):
    def __init__(self, params: Iterable, lr: Union[float, Tensor] = 1e-4,
                 betas: Tuple[float, float] = (0.9, 0.95), weight_decay: float = 0.1,
                 use_fused: Union[bool, None] = None, capturable: Union[bool, None] = None):
        check_hyperparameters(lr, weight_decay, betas)
        for name, flag in (("use_fused", use_fused), ("capturable", capturable)):
            if flag is not None:  # "no" was taken as yes
                flag_argument(name, flag)
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        # None: fused kernel when available and the tensors are on CUDA.
        self.use_fused = use_fused
        # None: the step count on the device for CUDA tensors, on the host elsewhere.
        self.capturable = capturable

    STATE = frozenset({"step", "exp_avg", "exp_avg_sq"})

    def state_keys(self, group: dict) -> frozenset:
        return self.STATE

    @torch.no_grad()
    def step(self, closure=None):
        self.check_loaded()
        loss = closure_loss(closure)
        for group in self.param_groups:
            fused = self.use_fused if self.use_fused is not None else fused_available()
            fused = fused and _fused_backend is not None and all(
                p.is_cuda for p in group["params"] if p.grad is not None)
            params: List[Tensor] = []
            grads: List[Tensor] = []
            exp_avgs: List[Tensor] = []
            exp_avg_sqs: List[Tensor] = []
            steps: List[Tensor] = []
            for p in with_grads(group, "AdamATan2"):
                state = self.state[p]
                # The fused kernel reads the step count on the device; so does the capturable foreach path.
                # The other foreach path keeps it on the host, where its bias corrections are formed.
                on_device = fused or (self.capturable if self.capturable is not None else p.is_cuda)
                step_device = p.device if on_device else torch.device("cpu")
                if len(state) == 0:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                elif state["step"].device != step_device:
                    state["step"] = state["step"].to(step_device)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            lr = float(group["lr"])
            beta1, beta2 = group["betas"]
            wd = group["weight_decay"]
            if fused:
                _step_fused(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd)
            elif steps[0].device.type != "cpu" or (self.capturable and steps[0].device == params[0].device):
                _step_foreach_on_device(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd)
            else:
                _step_foreach(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd)
        return loss


def _step_fused(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd) -> None:
    torch._foreach_add_(steps, 1)
    _fused_backend.adam_atan2_cuda_impl_(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd)


def _step_foreach(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd) -> None:
    # Tensors whose step counts differ (a parameter that skipped steps) get their own bias corrections.
    by_step: dict = {}
    for i, s in enumerate(steps):
        s.add_(1)
        by_step.setdefault(int(s.item()), []).append(i)
    for t, idx in by_step.items():
        ps = [params[i] for i in idx]
        gs = [grads[i] for i in idx]
        ms = [exp_avgs[i] for i in idx]
        vs = [exp_avg_sqs[i] for i in idx]
        # The scalars as the kernel forms them: in double precision, then used in the tensors' dtype.
        step_size = lr / (1.0 - beta1**t)
        bc2_sqrt = math.sqrt(1.0 - beta2**t)

        den = _decay_and_direction(ps, gs, ms, vs, lr, beta1, beta2, wd, bc2_sqrt)
        torch._foreach_add_(ps, den, alpha=-step_size)


def _decay_and_direction(ps, gs, ms, vs, lr, beta1, beta2, wd, bc2_sqrt) -> List[Tensor]:
    """Decay the weights, update both moments; returns atan2(m, sqrt(v) / bc2_sqrt) per weight, the update's
    direction before its step size (`bc2_sqrt`: one number, or one 0-dim tensor per weight)."""
    if wd != 0:
        torch._foreach_mul_(ps, 1.0 - lr * wd)
    torch._foreach_lerp_(ms, gs, 1.0 - beta1)
    torch._foreach_lerp_(vs, torch._foreach_mul(gs, gs), 1.0 - beta2)
    den = torch._foreach_sqrt(vs)
    torch._foreach_div_(den, bc2_sqrt)
    for m, d in zip(ms, den):  # no foreach atan2 in PyTorch; the result overwrites den
        torch.atan2(m, d, out=d)
    return den


def _step_foreach_on_device(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, wd) -> None:
    """`_step_foreach` with the step counts on the parameters' device: the bias corrections are tensors there
    (per parameter, so counts that differ need no grouping), and nothing is read on the host."""
    torch._foreach_add_(steps, 1)
    # step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t), both (per parameter) 0-dim tensors
    bc1 = torch._foreach_pow(beta1, steps)
    torch._foreach_sub_(bc1, 1.0)  # beta1^t - 1 = -(1 - beta1^t)
    step_size = torch._foreach_div(bc1, lr)
    torch._foreach_reciprocal_(step_size)  # -(lr / (1 - beta1^t)): the update's sign folded in
    bc2 = torch._foreach_pow(beta2, steps)
    torch._foreach_neg_(bc2)
    torch._foreach_add_(bc2, 1.0)
    torch._foreach_sqrt_(bc2)
    den = _decay_and_direction(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, wd, bc2)
    torch._foreach_mul_(den, step_size)
    torch._foreach_add_(params, den)
