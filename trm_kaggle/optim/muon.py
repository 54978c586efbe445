"""Muon for the hidden matrices, AdamATan2 for everything else: one optimizer for a TRM's weights.

Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers in neural networks") keeps one momentum
buffer per weight matrix and replaces the update by an approximately orthogonal matrix with the same
singular vectors (five Newton-Schulz iterations, in bfloat16). Per matrix W of shape (A, B), step t:

    B   = lerp(B, g, 1 - momentum)                     (the momentum buffer)
    u   = lerp(g, B, momentum) if nesterov else B
    O   = NewtonSchulz(u)                              (singular values near 1)
    W  *= 1 - lr * weight_decay                        (decoupled decay)
    W  -= adjust(lr, A, B) * O

The arithmetic is torch's (the function behind `torch.optim.Muon`, torch 2.9+).
Only 2-D weights of the hidden layers take it: embeddings, heads, norms and biases train better with an
element-wise optimizer (the Muon write-up's advice), here upstream's AdamATan2 (`trm_kaggle.optim.adam_atan2`),
whose arithmetic and state layout are unchanged.

`adjust` is Moonshot's (arXiv 2502.16982, torch's `adjust_lr_fn="match_rms_adamw"`): 0.2 * sqrt(max(A, B)),
which gives Muon's update the RMS of a typical AdamW update, so that the learning rate tuned for the
element-wise optimizer carries over. Each step's rate is the group's `lr` (the schedule writes it, as for every
optimizer here) times the group's `lr_ratio`: Muon's own scale, 1 by default. `adjust_lr_fn="original"` is
Keller Jordan's sqrt(max(1, A / B)) instead, for Muon's own, larger rates (about 0.02: the `muon-sic` preset).

Why one object and not two optimizers: the trainer, its non-finite guard (`train/step_guard.py`), the float16
loss scaler (`train/amp.py`) and the train state see one `torch.optim.Optimizer`: its `param_groups` (one Muon
group, one AdamATan2 group, flagged `muon`), one `state` (Muon's `momentum_buffer`, AdamATan2's `step`,
`exp_avg`, `exp_avg_sq`), one `state_dict()` for an exact resume.

torch's `Muon` class itself is not built: constructing any torch optimizer imports torch._dynamo (1.2 s of a
CPU process's start; see `trm_kaggle.optim.common`), which the function does not.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from trm_kaggle.config import flag_argument, whole_argument
from trm_kaggle.optim.adam_atan2 import AdamATan2
from trm_kaggle.optim.common import (BaseOptimizer, betas_argument, check_hyperparameters, closure_loss,
                                     decay_argument,
                                     fraction_argument, rate_product, ratio_argument, with_grads)
from trm_kaggle.wording import clipped

# torch's defaults (Keller Jordan's): momentum, Nesterov, the quintic's coefficients, its steps, its epsilon.
MOMENTUM = 0.95
NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7
ADJUST_LR = "match_rms_adamw"
# torch's shape scales (None is its "original"), and the most Newton-Schulz steps the training config takes.
ADJUST_LR_FNS = ("match_rms_adamw", "original", None)
MAX_NS_STEPS = 20


def _torch_muon():
    """torch's functional Muon step, the function behind `torch.optim.Muon`, or None before torch 2.9."""
    try:
        from torch.optim._muon import muon
    except ImportError:
        return None
    return muon


def muon_available() -> bool:
    """Whether this torch has Muon (2.9 or newer)."""
    return _torch_muon() is not None


class MuonWithAdam(BaseOptimizer):
    """Muon for `muon_params` (2-D matrices), AdamATan2 for `adam_params`; one `lr` set per step for both groups,
    Muon's taken times `lr_ratio`. `weight_decay` is decoupled in both (rate * weight_decay per step, Muon's rate
    being lr * lr_ratio); `muon_weight_decay`, where given, is Muon's instead."""

    def __init__(self, muon_params: Iterable[Tensor], adam_params: Iterable[Tensor], lr: float = 0.0,
                 lr_ratio: float = 1.0, momentum: float = MOMENTUM, nesterov: bool = True,
                 ns_steps: int = NS_STEPS, adjust_lr_fn: Optional[str] = ADJUST_LR,
                 betas: Tuple[float, float] = (0.9, 0.95), weight_decay: float = 0.1,
                 muon_weight_decay: Optional[float] = None, capturable: Union[bool, None] = None):
        self._muon = _torch_muon()
        if self._muon is None:
            raise RuntimeError(f"Muon needs torch 2.9 or newer (torch.optim.Muon); this torch is {torch.__version__}")
        check_hyperparameters(lr, weight_decay, betas)
        _check_muon_arguments(lr_ratio, momentum, ns_steps, adjust_lr_fn, muon_weight_decay, nesterov)
        rate_product("lr x lr_ratio", lr, lr_ratio)
        muon_params, adam_params = list(muon_params), list(adam_params)
        for p in muon_params:
            if p.ndim != 2:
                raise ValueError(f"Muon takes 2-D weights only, not one of shape {tuple(p.shape)}")
        groups = []
        if muon_params:
            groups.append(dict(params=muon_params, muon=True, lr_ratio=lr_ratio, momentum=momentum,
                               nesterov=nesterov, ns_coefficients=NS_COEFFICIENTS, ns_steps=ns_steps, eps=NS_EPS,
                               adjust_lr_fn=adjust_lr_fn,
                               weight_decay=weight_decay if muon_weight_decay is None else muon_weight_decay))
        if adam_params:
            groups.append(dict(params=adam_params, muon=False, betas=tuple(betas)))
        # AdamATan2 does the element-wise groups' arithmetic: it is handed each such group's parameters, rates and
        # this object's state at every step (a loaded state dict replaces both here); built at the first such step.
        self._capturable = capturable
        self._adam: Optional[AdamATan2] = None
        super().__init__(groups, dict(lr=lr, weight_decay=weight_decay))

    kind_keys = ("muon",)

    def check_group(self, group: dict) -> None:
        """The settings every optimizer here checks, and a group's own: a Muon group's (all of them, with the
        bounds of the arguments that set them; 2-D weights only), an AdamATan2 group's betas. A group of neither
        kind, a Muon group of another shape or an AdamATan2 group without betas failed inside the step."""
        super().check_group(group)
        if not flag_argument("muon", group.get("muon")):
            betas_argument("betas", group.get("betas"))
            return
        missing = [k for k in _MUON_SETTINGS if k not in group]
        if missing:
            raise ValueError(f"a Muon group (muon=True) lacks {', '.join(missing)}")
        _check_muon_arguments(group["lr_ratio"], group["momentum"], group["ns_steps"], group["adjust_lr_fn"], None,
                              group["nesterov"])
        rate_product("lr x lr_ratio", group["lr"], group["lr_ratio"])
        for p in group.get("params") or []:
            if not isinstance(p, Tensor) or p.ndim != 2:
                raise ValueError(f"Muon takes 2-D weights only, not one of shape {tuple(getattr(p, 'shape', ()))}")

    def state_keys(self, group: dict) -> frozenset:
        return frozenset({"momentum_buffer"}) if group["muon"] else AdamATan2.STATE

    @torch.no_grad()
    def step(self, closure=None):
        self.check_loaded()
        loss = closure_loss(closure)
        for group in self.param_groups:
            if group["muon"]:
                self._muon_step(group)
            elif group["params"]:
                if self._adam is None:
                    self._adam = AdamATan2(group["params"], lr=group["lr"], betas=group["betas"],
                                           weight_decay=group["weight_decay"], capturable=self._capturable)
                self._adam.state = self.state
                self._adam.param_groups[0].update(params=group["params"], lr=group["lr"], betas=group["betas"],
                                                  weight_decay=group["weight_decay"])
                self._adam.step()
        return loss

    def _muon_step(self, group: dict) -> None:
        params = with_grads(group, "Muon")
        if not params:
            return
        buffers = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            buffers.append(state["momentum_buffer"])
        # the schedule writes lr before each step: a rate whose product overflows float32 is named here, not in torch
        rate = rate_product("lr x lr_ratio", group["lr"], group["lr_ratio"])
        self._muon(params, [p.grad for p in params], buffers, lr=rate,
                   weight_decay=group["weight_decay"], momentum=group["momentum"], nesterov=group["nesterov"],
                   ns_coefficients=tuple(group["ns_coefficients"]), ns_steps=group["ns_steps"], eps=group["eps"],
                   adjust_lr_fn=group["adjust_lr_fn"], has_complex=False)


# what a Muon group holds besides its parameters, rate and weight decay
_MUON_SETTINGS = ("lr_ratio", "momentum", "nesterov", "ns_coefficients", "ns_steps", "eps", "adjust_lr_fn")


def _check_muon_arguments(lr_ratio, momentum, ns_steps, adjust_lr_fn, muon_weight_decay, nesterov=True) -> None:
    """ValueError naming the argument for a Muon setting outside the training config's bounds (each once stepped
    without a word: `lr_ratio=inf` made the matrices inf, `ns_steps=-1` skipped the orthogonalization and an
    unknown `adjust_lr_fn` fell back to no scaling at all, `nesterov="no"` ran Nesterov). `lr_ratio` is bounded
    as a rate is (the trainer passes muon_lr / lr, which a small lr makes large); lr x lr_ratio is checked where
    both are known."""
    ratio_argument("lr_ratio", lr_ratio)
    fraction_argument("momentum", momentum)
    flag_argument("nesterov", nesterov)
    whole_argument("ns_steps", ns_steps, 1, MAX_NS_STEPS)
    if not (adjust_lr_fn is None or isinstance(adjust_lr_fn, str) and adjust_lr_fn in ADJUST_LR_FNS):
        raise ValueError(f"adjust_lr_fn={clipped(adjust_lr_fn, 40)}: expected one of "
                         f"{', '.join(repr(name) for name in ADJUST_LR_FNS)}")
    if muon_weight_decay is not None:
        decay_argument("muon_weight_decay", muon_weight_decay)


def split_hidden_matrices(hidden: Iterable[Tensor], everything: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """(the 2-D tensors of `hidden` that are in `everything`, the rest of `everything`), in `everything`'s order."""
    ids = {id(p) for p in hidden if p.ndim == 2}
    return [p for p in everything if id(p) in ids], [p for p in everything if id(p) not in ids]
