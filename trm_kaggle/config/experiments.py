"""Grids of training runs (`trm-kaggle sweep`): a sweep's axes of variants and its seeds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from trm_kaggle.config.common import MAX_SEED, _Config

MAX_SWEEP_RUNS = 10_000

#: What a name that becomes a directory may look like (sweep, variant and run names).
SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+=-]{0,119}$"


class SweepVariant(_Config):
    """One value of a sweep axis: presets and `key=value` overrides applied on top of the sweep's base."""

    name: str = Field(pattern=SAFE_NAME_PATTERN)  # part of the run directory's name
    presets: list[str] = Field(default_factory=list)
    overrides: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v):
        """A string is shorthand: `baseline` (no change), `key=value` (one override), else presets `A+B`."""
        if not isinstance(v, str):
            return v
        text = v.strip()
        if text in ("baseline", ""):
            return {"name": "baseline"}
        # a derived name keeps the safe characters; explicit names are checked as they are
        name = re.sub(r"[^A-Za-z0-9._+=-]+", "-", text).strip("-.")[:60] or "variant"
        if "=" in text:
            return {"name": name, "overrides": [text]}
        return {"name": name, "presets": [text]}


class SweepGrid(_Config):
    """A grid of training runs: one variant from every axis, for every seed (`trm-kaggle sweep`).

    In a YAML file (read by `trm_kaggle.yamlio`):

        name: sudoku4-lr
        presets: [sudoku4-cpu]                # every run
        overrides: [max_steps=600]            # every run
        axes:
          - [baseline, no-ema, attention+T3n6]   # presets (`baseline`: none)
          - ["lr=1e-3", "lr=3e-3"]                # key=value overrides
          - [{name: big, presets: [large], overrides: [lr=3e-4]}]
        seeds: [0, 1]
    """

    name: str = Field(pattern=SAFE_NAME_PATTERN)
    description: str = ""
    presets: list[str] = Field(default_factory=list)
    overrides: list[str] = Field(default_factory=list)
    axes: list[list[SweepVariant]] = Field(default_factory=list, max_length=16)
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(default_factory=lambda: [0], min_length=1,
                                                                  max_length=1000)

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes: list[list[SweepVariant]]) -> list[list[SweepVariant]]:
        for i, axis in enumerate(axes):
            if not axis:
                raise ValueError(f"axis {i} is empty")
            names = [v.name for v in axis]
            if len(set(names)) != len(names):
                raise ValueError(f"axis {i} repeats a variant name: {names}")
        return axes

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"repeated seed in {seeds}")
        return seeds

    @model_validator(mode="after")
    def _size(self) -> "SweepGrid":
        runs = len(self.seeds)
        for axis in self.axes:
            runs *= len(axis)
        if runs > MAX_SWEEP_RUNS:  # a typo in a grid file, not a study
            raise ValueError(f"{runs:,} runs; a grid holds at most {MAX_SWEEP_RUNS:,}")
        return self
