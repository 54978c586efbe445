"""Data curriculum: the run in stages, each sampling only the examples it allows, at its own LR.

`TrainConfig.stages` lists the stages in order. Stage k covers the steps
[bounds[k], bounds[k+1]) of the run, the bounds being the cumulative shares (normalised
to sum to 1) of the run's length: the schedule's total steps, or max_steps when that is
smaller. A run cut short by time_limit stops inside whichever stage it has reached.

While a stage lasts, the loader draws only groups whose examples all pass its filter
(bug types, difficulty cap; read from a code-repair dataset's repair_meta.jsonl), and
the learning rates are the usual warmup/cosine schedule times the stage's factor. A
stage without a filter samples everything and needs no metadata.
"""

from __future__ import annotations

import numpy as np

from trm_kaggle.config import TrainConfig, TrainStage
from trm_kaggle.errors import TRMError
from trm_kaggle.data import PuzzleLoader


def stage_bounds(stages: list[TrainStage], run_steps: int) -> list[int]:
    """First step of each stage, then run_steps: shares normalised and rounded to whole steps."""
    shares = np.cumsum([s.share for s in stages])
    return [0] + [int(round(x)) for x in shares / shares[-1] * run_steps]


class StagePlan:
    """Which stage a step is in, its group mask and its LR factor (pure functions of the step)."""

    def __init__(self, stages: list[TrainStage], group_masks: list[np.ndarray | None], run_steps: int,
                 base_lr: float):
        self.stages, self.group_masks = stages, group_masks
        self.bounds = stage_bounds(stages, run_steps)
        self.factors = [s.lr / base_lr if s.lr is not None else s.lr_scale for s in stages]

    def index_at(self, step: int) -> int:
        return min(int(np.searchsorted(self.bounds[1:], step, side="right")), len(self.stages) - 1)

    def group_mask_at(self, step: int) -> np.ndarray | None:
        return self.group_masks[self.index_at(step)]

    def lr_factor(self, step: int) -> float:
        return self.factors[self.index_at(step)]

    def describe(self) -> str:
        parts = []
        for k, (s, mask) in enumerate(zip(self.stages, self.group_masks)):
            allowed = "all groups" if mask is None else f"{int(mask.sum()):,} groups"
            parts.append(f"stage {k + 1} {s.name or ''} steps {self.bounds[k]}-{self.bounds[k + 1]}: {allowed}, "
                         f"lr x{self.factors[k]:g}")
        return "; ".join(parts)

    @classmethod
    def from_config(cls, cfg: TrainConfig, loader: PuzzleLoader, run_steps: int) -> "StagePlan":
        example_meta = None
        masks = []
        for k, stage in enumerate(cfg.stages):
            if stage.bug_types is None and stage.max_difficulty is None:
                masks.append(None)
                continue
            if example_meta is None:
                example_meta = _example_meta(loader)
            bug_type, difficulty = example_meta
            allowed = np.ones(len(bug_type), dtype=bool)
            if stage.bug_types is not None:
                from trm_kaggle.data import BUG_TYPES  # here: training without stages never needs it

                unknown = sorted(set(stage.bug_types) - set(BUG_TYPES))
                if unknown:
                    raise TRMError(f"stages[{k}]: unknown bug type {unknown[0]!r}; known: {', '.join(BUG_TYPES)}")
                allowed &= np.isin(bug_type, stage.bug_types)
            if stage.max_difficulty is not None:
                allowed &= difficulty <= stage.max_difficulty
            groups = loader.groups_where(allowed)
            if not groups.any():
                raise TRMError(f"stages[{k}] ({stage.name or 'unnamed'}) allows no training example of "
                               f"{', '.join(map(str, loader.dataset_paths))}")
            masks.append(groups)
        return cls(cfg.stages, masks, run_steps, cfg.lr)


def _example_meta(loader: PuzzleLoader) -> tuple[np.ndarray, np.ndarray]:
    """(bug type, difficulty) of every training example, in the loader's global example order."""
    from trm_kaggle.data import read_repair_meta  # the code-repair builder: imported when used

    bug_types, difficulties = [], []
    for k, path in enumerate(loader.dataset_paths):
        meta = read_repair_meta(path, loader.split)
        n = loader.example_offsets[k + 1] - loader.example_offsets[k]
        if len(meta) != n:
            raise TRMError(f"{path / loader.split}: repair_meta.jsonl describes {len(meta)} examples, the split "
                           f"holds {n}")
        bug_types.append(meta.bug_type)
        difficulties.append(meta.difficulty)
    return np.concatenate(bug_types), np.concatenate(difficulties)
