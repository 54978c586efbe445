"""Loss scaling for float16 training (torch.amp.GradScaler), owned in one place.

float16 has 5 exponent bits: small gradients underflow to zero unless the loss is
multiplied by a large factor before backward and the gradients divided by it before
the optimizer sees them. `torch.amp.GradScaler` does that and adapts the factor: a step
whose gradients hold an inf or a nan is skipped (weights, optimizer moments and EMA
unchanged) and the scale halved; after `growth_interval` clean steps it doubles. A few
skipped steps at the start of a run, while the scale comes down from 2**16, are the
normal working of it, not a fault: they are counted and logged, not raised.

bfloat16 and float32 have float32's exponent range and train unscaled: `LossScaler`
is then a pass-through. Weights, optimizer moments and losses stay float32 in every
case (the model casts its float32 weights to the activation dtype; see model/dtype.py).

The scale, its growth tracker and the count of skipped steps belong to the train state
(`state_dict`), so a resumed float16 run takes the very steps an uninterrupted one takes.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from trm_kaggle.errors import TRMError

log = logging.getLogger(__name__)


class _Steps:
    """Every optimizer of one training step seen by GradScaler as one: the step is taken whole or skipped
    whole. The puzzle rows' gradients (SignSGD's, held outside `parameters()`) are checked with the
    weights', so an inf anywhere skips everything."""

    def __init__(self, dense, sparse, rows: list[torch.Tensor]):
        self.dense, self.sparse = dense, sparse
        params = [p for g in dense.param_groups for p in g["params"]] if dense is not None else []
        self.param_groups = [{"params": params + rows}]
        self.taken = False

    def step(self) -> None:
        if self.dense is not None:
            self.dense.step()
        if self.sparse is not None:
            self.sparse.step()
        self.taken = True


class LossScaler:
    """Scales the loss and steps the optimizers under float16 (`scale` is a pass-through for other dtypes)."""

    def __init__(self, dtype: torch.dtype, device: torch.device):
        self.enabled = dtype == torch.float16
        self.skipped = 0  # steps whose update was dropped for non-finite gradients, over the whole run
        self.scaler = None
        if self.enabled:
            try:
                self.scaler = torch.amp.GradScaler(torch.device(device).type)
            except (RuntimeError, ValueError, AttributeError) as e:
                raise TRMError(f"forward_dtype float16 needs loss scaling, which torch has no GradScaler for on "
                               f"{torch.device(device).type} ({e}); use float32 or bfloat16 there") from None

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.enabled else loss

    def step(self, dense, sparse, model) -> bool:
        """The optimizer steps of one training step (after backward and any all-reduce); False when skipped.

        Float16 only (other dtypes step through `train.optimizers.optimizer_step`): unscale every gradient (the
        weights' and the touched puzzle rows'), take the steps only if all are finite, and adapt the scale."""
        if not self.enabled:
            raise RuntimeError("LossScaler.step is float16's optimizer step; other dtypes use optimizer_step")
        rows = model.puzzle_emb.rows_with_grad() if model.puzzle_emb is not None else []
        steps = _Steps(dense, sparse, rows)
        if all(p.grad is None for p in steps.param_groups[0]["params"]):  # nothing trained this step: no check
            steps.step()
            return True
        before = self.scaler.get_scale()
        self.scaler.unscale_(steps)
        self.scaler.step(steps)
        self.scaler.update()
        if not steps.taken:
            self.skipped += 1
            if sparse is not None:
                sparse.zero_grad()  # the rows' gradients of the dropped step are not carried into the next
            log.info("float16: inf/nan gradients, step skipped and loss scale lowered %g -> %g (%d skipped so far)",
                     before, self.scaler.get_scale(), self.skipped)
        return steps.taken

    def record(self) -> dict[str, float]:
        """What the metrics log gets at each interval (nothing unless float16)."""
        if not self.enabled:
            return {}
        return {"loss_scale": float(self.scaler.get_scale()), "skipped_steps": self.skipped}

    def state_dict(self) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        return {"scaler": self.scaler.state_dict(), "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not self.enabled:
            return
        if state is None:
            log.info("float16: the train state holds no loss scale (written without float16): the scale starts "
                     "at %g", self.scaler.get_scale())
            return
        self.scaler.load_state_dict(state["scaler"])
        self.skipped = int(state.get("skipped", 0))
