"""Kaggle ARC Prize submissions: build, write and validate them (scoring: `trm_kaggle.evaluate.scoring`).

The file format (docs/kaggle.md)::

    {task_id: [{"attempt_1": grid, "attempt_2": grid}, ...]}

with every task id of the challenges file, one dict per test input in the order
of the task's test inputs, and both attempts always present. A grid is a
rectangular list of rows of plain ints 0..9, each side 1..30
(`trm_kaggle.data.arc.tasks.grid_problem`, the same check as for the tasks).

Building (`make_submission`)
----------------------------
`candidates[(task_id, test_index)]` is a list of grids, best first. Invalid grids
(empty, ragged, a side over 30, a value that is not an int 0..9 - bools and floats
included) are skipped and reported. Duplicates of a grid already chosen are
skipped, so attempt_2 differs from attempt_1 whenever two distinct valid
candidates exist (pass@2 never silently collapses to pass@1).

When fewer than two distinct candidates remain, the free attempts are filled,
in this order, with the first grid of the *fallback chain* that differs from the
attempts already chosen:

* ``fallback="input"`` (default, the identity baseline): the test input itself,
  then its transpose, then ``[[0]]``, then ``[[1]]``;
* ``fallback="blank"``: ``[[0]]``, then ``[[1]]``.

A test input that is itself unusable (missing, not a grid, larger than 30x30)
cannot serve as a fallback; its chain is ``[[0]]``, ``[[1]]``. So attempt_2
always differs from attempt_1.

Every task id of the challenges file gets an entry, malformed tasks included:
as many dicts as the task's ``test`` list has items (an empty list when the
task has no test list or an empty one - the format asks for one dict per test
input, so there is nothing to answer). `make_submission` returns a
`BuiltSubmission(submission, problems)` named tuple; ``problems`` maps a task id
to one line (messages joined by "; ") for every task that is malformed, has no
test inputs, had candidates skipped as invalid, or had candidates for a test
index (or a task id) that the challenges do not have. Tasks that are fine and
merely got no candidates are not problems (their attempts are fallbacks).
"""

from __future__ import annotations

import codecs
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.data import grid_problem, parse_task, read_challenges
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.jsonio import parse_json, read_bytes, read_json
from trm_kaggle.outputs import Input, Output, check_kept, writable_problem
from trm_kaggle.wording import count, shown

log = logging.getLogger(__name__)

ATTEMPTS = ("attempt_1", "attempt_2")
FALLBACKS = ("input", "blank")

Grid = list[list[int]]
GridKey = tuple[tuple[int, ...], ...]

# ---------------------------------------------------------------------------
# Grids (checked by `trm_kaggle.data.arc.tasks.grid_problem`)
# ---------------------------------------------------------------------------


def plain_grid(grid: Any) -> Grid:
    """A valid grid (checked by the caller) as a list of lists of plain ints."""
    if isinstance(grid, np.ndarray):
        return grid.astype(np.int64).tolist()
    return [[int(v) for v in row] for row in grid]


def grid_key(grid: Grid) -> GridKey:
    return tuple(tuple(row) for row in grid)


def attempt_problem(attempt: Any) -> str | None:
    """Why `attempt` is not a valid submitted grid, or None: the one check of an attempt, for
    `validate_submission` and `score_submission` alike. A submission is JSON, so numpy values,
    tuples and bools are refused (a model's numpy candidates are converted by `make_submission`)."""
    return grid_problem(attempt)


# ---------------------------------------------------------------------------
# Loading helpers
# ---------------------------------------------------------------------------


def read_json_file(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """Parsed JSON, or DataError naming the file and the line/column of a syntax error."""
    return read_json(path, what)


def load_submission(path: str | os.PathLike, warn: bool = True) -> dict:
    """A submission file as a dict (its content is checked by `validate_submission`). A UTF-8 byte-order mark is a
    WARNING line unless `warn` is False (the check before said it); a UTF-16 or UTF-32 file, which no UTF-8 reader
    (Kaggle's) can read, is refused."""
    data = read_bytes(path, "submission file")
    encoding = _byte_order_mark(data)
    if encoding in ("UTF-16", "UTF-32"):
        raise DataError(f"{path}: {encoding} (its byte-order mark says so): Kaggle reads a submission as UTF-8 JSON, "
                        "which this file is not; write it as UTF-8")
    if encoding and warn:  # read as the package reads JSON; the file written by `write_submission` never has one
        log.warning("%s: %s with a byte-order mark: Kaggle reads a submission as UTF-8 JSON and may refuse it "
                    "(write it as UTF-8 without one)", path, encoding)
    raw = parse_json(data, str(path), "submission file")
    if not isinstance(raw, dict):
        raise DataError(f"{path}: a submission must be a JSON object mapping task ids to lists, "
                        f"found {type(raw).__name__}")
    return raw


def _byte_order_mark(data: bytes) -> str | None:
    """The encoding a file's byte-order mark names ("UTF-16"), or None."""
    for bom, name in ((codecs.BOM_UTF8, "UTF-8"), (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                      (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16")):
        if data.startswith(bom):
            return name
    return None


def load_solutions(source: str | os.PathLike | Mapping) -> dict[str, list[Grid]]:
    """`{task_id: [output grid per test input]}` from a path or a dict, every grid checked.

    Raises DataError naming the file, the task and the test index of the first bad entry.
    """
    where = str(source) if isinstance(source, (str, os.PathLike)) else "solutions"
    raw = read_json_file(source, "solutions file") if isinstance(source, (str, os.PathLike)) else source
    if not isinstance(raw, Mapping):
        raise DataError(f"{where}: solutions must map task ids to lists of output grids, "
                        f"found {type(raw).__name__}")
    out: dict[str, list[Grid]] = {}
    for task_id, grids in raw.items():
        if not isinstance(grids, list) or not grids:
            raise DataError(f"{where}: task {_id(task_id)}: expected a non-empty list of output grids")
        checked = []
        for i, g in enumerate(grids):
            problem = grid_problem(g, allow_numpy=True)
            if problem:
                raise DataError(f"{where}: task {_id(task_id)}: test {i}: solution {problem}")
            checked.append(plain_grid(g))
        out[str(task_id)] = checked
    return out


def _test_list(task: Any) -> list | None:
    """The raw test list of a challenge task, or None when it has none."""
    if isinstance(task, Mapping) and isinstance(task.get("test"), list):
        return task["test"]
    return None


def expected_counts(challenges: str | os.PathLike | Mapping) -> dict[str, int]:
    """Number of dicts each task's submission entry must hold (0 for a task without a test list). A task id
    written twice counts its last copy: the one Python's json, and so a grader reading the same file, keeps."""
    return count_test_inputs(read_challenges(challenges, set()))


def count_test_inputs(tasks: Mapping) -> dict[str, int]:
    """Each raw challenge task's number of test inputs: 0 for a task without a test list (a number, a solutions
    file's grids), never the task itself read as a count (`{"x": 5}` was five test inputs)."""
    return {task_id: len(_test_list(task) or []) for task_id, task in tasks.items()}


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------


class BuiltSubmission(NamedTuple):
    """`make_submission`'s result; unpack as ``submission, problems = make_submission(...)``."""

    submission: dict[str, list[dict[str, Grid]]]
    problems: dict[str, str]


def _fallback_chain(test_input: Grid | None, fallback: str) -> Iterable[Grid]:
    """The fallback grids in order, each made only when it is reached (a transpose per test input of a large
    file costs seconds that the first write cannot spare)."""
    if fallback == "input" and test_input is not None:
        yield test_input
        yield [list(col) for col in zip(*test_input)]
    yield [[0]]
    yield [[1]]


def _test_input(pair: Any, i: int) -> tuple[Grid | None, str | None]:
    """(the usable test input grid or None, the problem when unusable)."""
    if not isinstance(pair, Mapping) or "input" not in pair:
        return None, f"test pair {i} has no 'input'"
    problem = grid_problem(pair["input"])
    if problem:
        return None, f"test pair {i} input: {problem}"
    return plain_grid(pair["input"]), None


def _id(task_id: Any) -> str:
    """A task id as a message names it: an id of a submission or solutions file may be megabytes long (2,000,000
    characters once made the error line); past the 128 characters an id may have, it is cut."""
    return shown(str(task_id), 128)


def _task_problem(task_id: str, task: Any) -> str | None:
    """A one-line description of what is wrong with a challenge task (None when fine)."""
    try:
        parse_task(task_id, task, "challenges")
    except DataError as e:
        msg = str(e)
        prefix = f"challenges: task {task_id}: "
        return msg[len(prefix):] if msg.startswith(prefix) else msg
    return None


def challenge_problems(challenges: str | os.PathLike | Mapping) -> dict[str, str]:
    """`{task_id: problem}` for each task of `challenges` that `submit` refuses (answers with the fallback)."""
    found = ((str(task_id), _task_problem(str(task_id), task))
             for task_id, task in read_challenges(challenges, set()).items())
    return {task_id: problem for task_id, problem in found if problem}


def make_submission(challenges: str | os.PathLike | Mapping,
                    candidates: Mapping[tuple[str, int], Iterable[Any]] | None,
                    fallback: str = "input", check_tasks: bool = True) -> BuiltSubmission:
    """Build the Kaggle submission dict for every task of `challenges`.

    `challenges`: the raw challenges JSON (a dict, or the path of the file); it may hold
    malformed tasks. `candidates`: ``{(task_id, test_index): [grid, ...]}``, best first;
    grids may be numpy integer arrays or nested lists. `fallback`: "input" or "blank"
    (see the module docstring for the fallback chain).

    Returns ``BuiltSubmission(submission, problems)``: the submission (plain JSON types)
    and ``{task_id: "problem; problem"}`` for the tasks with something to report. Without
    `check_tasks` the demonstration pairs are not checked (each test input still is): the
    submission is the same, only the problems of malformed tasks go unreported (a first
    fallback written against the clock; a later write reports them).
    """
    if fallback not in FALLBACKS:
        raise TRMError(f"unknown submission fallback {fallback!r}; choose one of {', '.join(FALLBACKS)}")
    raw = read_challenges(challenges)
    candidates = candidates or {}
    notes: dict[str, list[str]] = {}

    def note(task_id: str, msg: str) -> None:
        lst = notes.setdefault(task_id, [])
        if not any(msg in m for m in lst):
            lst.append(msg)

    # candidates keyed by (task id, int index); unknown keys are reported, never written
    by_key: dict[tuple[str, int], Iterable[Any]] = {}
    for key, grids in candidates.items():
        try:
            task_id, index = key
            index = int(index)
        except (TypeError, ValueError):
            raise TRMError(f"candidate key {key!r} is not a (task_id, test_index) pair") from None
        task_id = str(task_id)
        n = len(_test_list(raw.get(task_id)) or [])
        if task_id not in raw:
            note(task_id, "candidates given for a task that is not in the challenges; ignored")
        elif not 0 <= index < n:
            note(task_id, f"candidates given for test index {index} but the task has {count(n, 'test input')}; ignored")
        else:
            by_key[(task_id, index)] = grids

    submission: dict[str, list[dict[str, Grid]]] = {}
    for task_id, task in raw.items():
        task_id = str(task_id)
        tests = _test_list(task)
        problem = _task_problem(task_id, task) if check_tasks else None
        # problems with the test inputs themselves are reported per test input below
        if problem and not (tests and problem.startswith("test pair")):
            note(task_id, f"malformed task: {problem}")
        if not tests:
            note(task_id, "its entry is an empty list (no test inputs to answer)")
            submission[task_id] = []
            continue
        entry = []
        for i, pair in enumerate(tests):
            test_input, input_problem = _test_input(pair, i)
            if input_problem:
                note(task_id, f"{input_problem} (unusable: fallback grids written)")
            chosen: list[Grid] = []
            seen: set[GridKey] = set()
            grids = by_key.get((task_id, i))
            if grids is None:
                grids = []
            elif isinstance(grids, np.ndarray) and grids.ndim == 2:
                note(task_id, f"test {i}: candidates must be a list of grids, got one 2-d array; ignored")
                grids = []
            for k, g in enumerate(grids):
                if len(chosen) == 2:
                    break
                bad = grid_problem(g, allow_numpy=True)
                if bad:
                    note(task_id, f"test {i}: candidate {k} skipped: {bad}")
                    continue
                g = plain_grid(g)
                if grid_key(g) in seen:
                    continue  # a duplicate would waste the second attempt
                seen.add(grid_key(g))
                chosen.append(g)
            for g in _fallback_chain(test_input, fallback):
                if len(chosen) == 2:
                    break
                if grid_key(g) not in seen:
                    seen.add(grid_key(g))
                    chosen.append(g)
            entry.append({"attempt_1": chosen[0], "attempt_2": chosen[1]})
        submission[task_id] = entry
    problems = {task_id: "; ".join(msgs) for task_id, msgs in notes.items()}
    return BuiltSubmission(submission, problems)


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _structure_problems(submission: Any) -> list[str]:
    """Problems with the shape of the submission itself (no challenges needed)."""
    if not isinstance(submission, dict):
        return [f"submission: must be an object mapping task ids to lists, found {type(submission).__name__}"]
    problems = []
    for task_id, entry in submission.items():
        if not isinstance(task_id, str):
            problems.append(f"task {task_id!r}: task id must be a string")
        if not isinstance(entry, list):
            problems.append(f"task {_id(task_id)}: entry must be a list of attempt dicts, found {type(entry).__name__}")
            continue
        for i, item in enumerate(entry):
            if not isinstance(item, dict):
                problems.append(f"task {_id(task_id)}: test {i}: must be an object with attempt_1 and attempt_2, "
                                f"found {type(item).__name__}")
                continue
            for name in ATTEMPTS:
                if name not in item:
                    problems.append(f"task {_id(task_id)}: test {i}: {name} is missing")
                    continue
                bad = attempt_problem(item[name])
                if bad:
                    problems.append(f"task {_id(task_id)}: test {i}: {name}: {bad}")
            extra = sorted(str(k) for k in item if k not in ATTEMPTS)
            if extra:
                problems.append(f"task {_id(task_id)}: test {i}: unexpected keys {', '.join(extra)} "
                                f"(only attempt_1 and attempt_2 are allowed)")
    return problems


def validate_submission(submission_or_path: str | os.PathLike | Mapping,
                        challenges_or_path: str | os.PathLike | Mapping) -> list[str]:
    """Every problem of a submission against its challenges; an empty list means valid.

    Checks: a JSON object of lists of objects with exactly attempt_1 and attempt_2; every
    task id of the challenges present and no other (extra ids are an error); one dict per
    test input; every attempt a rectangular grid of plain ints 0..9 (bool refused), each
    side 1..30. Each message names the task id and, where it applies, the test index.
    Challenges without a task or a test input (`require_tasks`) are its first problem: a
    submission checked against them proves nothing. An unreadable file raises DataError instead.
    """
    counts = expected_counts(challenges_or_path)
    try:
        require_tasks(counts, challenges_or_path, "a submission checked against it proves nothing")
    except DataError as e:
        return [str(e)]
    return submission_problems(submission_or_path, counts)


def submission_problems(submission_or_path: str | os.PathLike | Mapping, counts: Mapping[str, int],
                        source: str = "challenges") -> list[str]:
    """`validate_submission` against `counts`, the number of test inputs of each task of `source`."""
    if isinstance(submission_or_path, (str, os.PathLike)):
        submission: Any = load_submission(submission_or_path)
    else:
        submission = submission_or_path
    problems = _structure_problems(submission)
    if not isinstance(submission, dict):
        return problems
    for task_id, n in counts.items():
        if task_id not in submission:
            problems.append(f"task {_id(task_id)}: missing from the submission ({count(n, 'test input')})")
        elif isinstance(submission[task_id], list) and len(submission[task_id]) != n and not n:
            problems.append(f"task {_id(task_id)}: malformed in the {source}: its 'test' is no list of test inputs "
                            f"(missing, empty or not a list), so its entry must be an empty list, not "
                            f"{count(len(submission[task_id]), 'attempt dict')}")
        elif isinstance(submission[task_id], list) and len(submission[task_id]) != n:
            problems.append(f"task {_id(task_id)}: {count(len(submission[task_id]), 'attempt dict')} for "
                            f"{count(n, 'test input')} "
                            f"(one per test input, in order)")
    for task_id in submission:
        if task_id not in counts:
            problems.append(f"task {_id(task_id)}: not in the {source} (extra task ids are not allowed)")
    return problems


def require_tasks(tasks: Mapping, source: str | os.PathLike | Mapping, consequence: str,
                  what: str = "challenges") -> None:
    """DataError when a challenges or solutions file (`source`) holds no task (`{}`), or when none of its tasks
    has a test input (a solutions file, `{id: [grid, ...]}`, given as challenges): `consequence` says what that
    leaves (a check that proves nothing, nothing to answer). `tasks`: each task's test input count
    (`count_test_inputs` of raw tasks). `what` ("challenges" or "solutions") names a `source` given as a dict, as
    the readers name it. One rule for validate-submission, score and submit (before it writes, and on what it
    wrote)."""
    where = f"{source if isinstance(source, (str, os.PathLike)) else what}: "
    if not tasks:
        raise DataError(f"{where}holds no task, so {consequence}")
    if not any(tasks.values()):
        raise DataError(f"{where}none of its {count(len(tasks), 'task')} has a test input (a solutions file, "
                        f"{{task id: [grid, ...]}}, given as the challenges?), so {consequence}")


def _refuse(submission_or_path: str | os.PathLike | Mapping, problems: list[str], note: str = "",
            counts: Mapping[str, int] | None = None, source: str | os.PathLike | Mapping = "",
            what: str = "challenges") -> None:
    if counts is not None:  # every submission would pass: "valid" would have checked nothing
        require_tasks(counts, source, "a submission checked against it proves nothing", what)
    if problems:
        more = f" (and {count(len(problems) - 1, 'more problem')})" if len(problems) > 1 else ""
        where = f"{submission_or_path}: " if isinstance(submission_or_path, (str, os.PathLike)) else ""
        raise DataError(f"{where}invalid submission{note}: {problems[0]}{more}")


def check_submission(submission_or_path: str | os.PathLike | Mapping,
                     challenges_or_path: str | os.PathLike | Mapping) -> None:
    """Raise DataError with the first problem of `validate_submission` (and how many more), or when the
    challenges hold no task."""
    counts = expected_counts(challenges_or_path)
    _refuse(submission_or_path, submission_problems(submission_or_path, counts), counts=counts,
            source=challenges_or_path)


def check_scorable(submission_or_path: str | os.PathLike | Mapping,
                   solutions: str | os.PathLike | Mapping) -> None:
    """`check_submission` against a solutions file (its task ids and test outputs stand for the challenges):
    a submission Kaggle would refuse (an extra key, an extra or missing task id, a bad grid) has no score."""
    counts = {task_id: len(grids) for task_id, grids in load_solutions(solutions).items()}
    submission = (load_submission(submission_or_path) if isinstance(submission_or_path, (str, os.PathLike))
                  else submission_or_path)
    # tasks named by one file alone are the two files' disagreement, which a solutions file short of a task (or of
    # other tasks) makes as well as the submission: said as such once the tasks both name pass, never as a refusal
    # by Kaggle, which judges the submission against the challenges
    shared = {t: entry for t, entry in submission.items() if t in counts} if isinstance(submission, dict) else None
    _refuse(submission_or_path,
            submission_problems(submission, counts, "solutions") if shared is None else
            submission_problems(shared, {t: counts[t] for t in shared}, "solutions"),
            " (Kaggle would refuse it, so it is not scored)", counts=counts, source=solutions, what="solutions")
    only = {"the submission": [t for t in submission if t not in counts],
            "the solutions": [t for t in counts if t not in submission]}
    if any(only.values()):
        where = f"{submission_or_path}: " if isinstance(submission_or_path, (str, os.PathLike)) else ""
        named = f" ({solutions})" if isinstance(solutions, (str, os.PathLike)) else ""
        said = "; ".join(f"{count(len(ids), 'task')} only in {side} ({', '.join(map(_id, ids[:3]))}"
                         f"{', ...' if len(ids) > 3 else ''})" for side, ids in only.items() if ids)
        raise DataError(f"{where}not scored: the submission and the solutions{named} name different tasks: {said}; "
                        "score it against the solutions of the tasks it answers")


def write_submission(path: str | os.PathLike, submission: Mapping,
                     challenges: str | os.PathLike | Mapping | None = None) -> Path:
    """Write `submission` atomically as one-line JSON; returns the path.

    The submission is checked first and nothing is written when it is malformed
    (DataError with the first problem); with `challenges` the task ids and counts are
    checked too (`check_submission`), and a challenges file is never written over (TRMError).
    """
    # as `submit` checks its --output: never over the challenges, nor over a file a dataset, an export, a run or
    # another command's folder keeps (a run's run.json, a sweep's sweep.json, a lock)
    check_kept([Input(challenges, "challenges")] if isinstance(challenges, (str, os.PathLike)) else [],
               [Output(path, "submission")])
    if problem := writable_problem(Output(path, "submission")):  # /dev, a file on the path: as `submit` says it
        raise TRMError(problem)
    if challenges is not None:
        check_submission(submission, challenges)
    else:
        problems = _structure_problems(submission)
        if problems:
            more = f" (and {count(len(problems) - 1, 'more problem')})" if len(problems) > 1 else ""
            raise DataError(f"invalid submission, not written to {path}: {problems[0]}{more}")
    atomic_write_json(path, submission, through_link=True)  # --output: a link the user named is written through
    return Path(path)


__all__ = [
    "ATTEMPTS", "BuiltSubmission", "FALLBACKS", "attempt_problem", "challenge_problems", "check_scorable", "check_submission", "expected_counts",
    "grid_key", "load_solutions", "load_submission", "make_submission", "plain_grid", "read_json_file",
    "submission_problems", "validate_submission", "write_submission",
]
