"""Non-finite numbers (NaN, inf) caught where they arise: in weights read or written, and in training steps.

Weights with a NaN compute NaN logits whose argmax is an arbitrary but valid-looking answer, so a
run, an export or a submission built on them looks healthy: every place that reads or writes weights
(export, the bundle, evaluate, submit) calls `check_finite` and refuses with one line naming the
file and the tensor. Training skips a step whose loss or gradients are not finite (as fp16 loss
scaling does) and stops after `max_nonfinite_steps` of them in a row (`NonFiniteSteps`).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import torch

from trm_kaggle.errors import TRMError


#: Floating types torch.isfinite takes as they are; others (the float8 types) are widened first.
_CHECKED_AS_IS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def no_plain_data(t: torch.Tensor) -> str | None:
    """The kind of a tensor that holds no plain (strided) data of its own, as its readers name it ("meta",
    "nested", "quantized", "sparse_coo", "sparse_csr", ...), else None. torch loads such tensors from a file, but
    its arithmetic and copies fail on them with a traceback: a reader refuses them by this kind first."""
    if t.is_meta or t.is_nested or t.is_quantized:
        return "meta" if t.is_meta else "nested" if t.is_nested else "quantized"
    return None if t.layout == torch.strided else str(t.layout).removeprefix("torch.")


def first_nonfinite(tensors: Mapping[str, torch.Tensor]) -> tuple[str, int] | None:
    """(name, count of non-finite values) of the first floating-point tensor holding NaN or inf, else None. Tensors
    of no plain data (`no_plain_data`) have no values to count here: `check_finite` refuses them."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and no_plain_data(t) is None:
            t = t.detach()
            if t.dtype not in _CHECKED_AS_IS:  # float8 types: torch has no isfinite for them
                t = t.float()
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                return name, bad
    return None


def check_finite(tensors: Mapping[str, torch.Tensor], source: str) -> None:
    """TRMError naming `source` (a file) and the first tensor with NaN or inf values, or with no plain data to
    check (a sparse or meta tensor: torch's isfinite failed on it with a traceback)."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and (kind := no_plain_data(t)):
            raise TRMError(f"{source}: entry {name!r} holds a {kind} tensor (no plain data to load)")
    found = first_nonfinite(tensors)
    if found is not None:
        name, bad = found
        total = tensors[name].numel()
        raise TRMError(f"{source}: tensor {name} holds {bad} non-finite value{'s' if bad != 1 else ''} (NaN or inf) "
                       f"of {total}: these weights come from a diverged training run and would answer nonsense")


def all_finite(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """A 0-dim bool tensor on the tensors' device: True when every value is finite (no host sync)."""
    flags = [torch.isfinite(t).all() for t in tensors if t is not None]
    return torch.stack(flags).all() if flags else torch.tensor(True)


def step_is_finite(model: torch.nn.Module, loss: torch.Tensor) -> bool:
    """Whether a step's loss and every gradient of the weights are finite (one host read)."""
    return bool(all_finite([loss] + [p.grad for p in model.parameters() if p.grad is not None]))


class NonFiniteSteps:
    """Counts consecutive training steps whose loss or gradients are not finite; stops the run at `limit`.

    `skip(finite, step)` is asked after backward and before the optimizer steps: True means drop this
    step's gradients and do not step (the weights stay finite); after `limit` such steps in a row the
    run stops with an error that says what to lower. A finite step resets the count.
    """

    #: what to change, when the run's settings point at nothing in particular
    ADVICE = "lower lr (or puzzle_emb_lr), raise lr_warmup_steps, or train in float32"

    def __init__(self, limit: int, advice: str = ADVICE):
        self.limit = limit
        self.advice = advice
        self.in_a_row = 0

    def skip(self, finite: bool, step: int) -> bool:
        if finite:
            self.in_a_row = 0
            return False
        self.in_a_row += 1
        if self.in_a_row >= self.limit:
            self.stop(step)
        return True

    def stop(self, step: int) -> None:
        raise NonFiniteTraining(
            f"training diverged: the loss or the gradients were NaN or inf at {self.in_a_row} step(s) in a row, "
            f"up to step {step + 1} (max_nonfinite_steps={self.limit}); {self.advice}; any train state written "
            "before holds finite weights")


class NonFiniteTraining(TRMError):
    """A training run stopped because its numbers were no longer finite (a failed run, not bad input)."""

    exit_status = 1
