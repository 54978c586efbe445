"""The fine-tuning schedule of test-time training: which steps train the puzzle rows alone, which every weight.

`SolveConfig.finetune` names the mode; `finetune_phases` turns (mode, fraction, steps) into phases of one run,
which `trm_kaggle.solve.task.finetune` runs in turn (each resumes the run where the previous one stopped) and
`trm_kaggle.solve.pricing` prices (a step that trains every weight costs more than one that trains rows alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

from trm_kaggle.config import FinetuneMode

MODES: tuple[str, ...] = get_args(FinetuneMode)


@dataclass(frozen=True)
class Phase:
    """One stretch of a fine-tuning run: puzzle rows alone (`freeze_weights`) or every weight, until a step."""

    freeze_weights: bool
    until_step: int


def finetune_phases(mode: str, embeddings_fraction: float, steps: int) -> list[Phase]:
    """The fine-tuning schedule of `SolveConfig.finetune` over `steps` steps, as phases of one run.

    embeddings-then-all switches at step round(embeddings_fraction * steps) (halves round up): steps before it
    train the puzzle rows alone, steps from it every weight. Empty phases are left out.
    """
    if mode == "none" or steps <= 0:
        return []
    if mode == "embeddings":
        return [Phase(True, steps)]
    if mode == "all":
        return [Phase(False, steps)]
    if mode != "embeddings-then-all":
        raise ValueError(f"unknown fine-tuning mode {mode!r}")
    switch = min(steps, max(0, math.floor(embeddings_fraction * steps + 0.5)))
    return ([Phase(True, switch)] if switch > 0 else []) + ([Phase(False, steps)] if steps > switch else [])


def steps_by_kind(phases: list[Phase]) -> tuple[int, int]:
    """(steps training the puzzle rows alone, steps training every weight) of a schedule."""
    frozen = weights = start = 0
    for p in phases:
        if p.freeze_weights:
            frozen += p.until_step - start
        else:
            weights += p.until_step - start
        start = p.until_step
    return frozen, weights
