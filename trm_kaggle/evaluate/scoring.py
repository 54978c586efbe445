"""ARC Prize scoring of a submission against the solutions (`score_submission`, `format_score`).

The ARC Prize score is a micro-average: over all test outputs of the solutions,
1 when either attempt equals the truth exactly, divided by the number of test
outputs. The per-task macro-average (mean over tasks of the fraction of that
task's outputs solved) is reported separately and is never "the score".
A submission is read and checked by `trm_kaggle.evaluate.submission`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from trm_kaggle.config import whole_argument
from trm_kaggle.errors import DataError
from trm_kaggle.evaluate.stats import format_interval, wilson_interval
from trm_kaggle.evaluate.submission import (ATTEMPTS, GridKey, attempt_problem, grid_key, load_solutions,
                                            load_submission, require_tasks)
from trm_kaggle.wording import count, shown


@dataclass
class TaskScore:
    task_id: str
    outputs: int  # test outputs of the task (from the solutions)
    solved: int  # of them matched by attempt_1 or attempt_2
    matched: list[str | None]  # per test output: "attempt_1", "attempt_2" or None
    note: str = ""  # e.g. "missing from the submission"

    @property
    def fraction(self) -> float:
        return self.solved / self.outputs if self.outputs else 0.0


@dataclass
class ScoreReport:
    """ARC Prize scoring. `score` is the micro-average over test outputs (the official score)."""

    solved: int
    total: int
    tasks: list[TaskScore] = field(default_factory=list)
    extra_tasks: list[str] = field(default_factory=list)  # in the submission, not in the solutions

    @property
    def score(self) -> float:
        """The ARC Prize score: solved test outputs / all test outputs (pass@2)."""
        return self.solved / self.total if self.total else 0.0

    @property
    def task_macro_average(self) -> float:
        """Mean over tasks of the fraction of their test outputs solved. NOT the ARC Prize score."""
        return sum(t.fraction for t in self.tasks) / len(self.tasks) if self.tasks else 0.0

    @property
    def score_ci95(self) -> tuple[float, float]:
        """95 % Wilson interval of the ARC Prize score; unit: test outputs."""
        return wilson_interval(self.solved, self.total)

    @property
    def task_macro_ci95(self) -> tuple[float, float]:
        """95 % Wilson interval of the per-task macro-average (pass@2 over tasks); unit: tasks."""
        return wilson_interval(sum(t.fraction for t in self.tasks), len(self.tasks))

    @property
    def tasks_fully_solved(self) -> int:
        return sum(1 for t in self.tasks if t.outputs and t.solved == t.outputs)

    @property
    def missing_tasks(self) -> list[str]:
        return [t.task_id for t in self.tasks if t.note == "missing from the submission"]


_MISSING = object()
MAX_ROWS = 10**9  # rows of format_score's table: any count of tasks a solutions file holds


def _attempt_key(attempt: Any) -> GridKey | None:
    """The comparable form of a valid attempt; None for an attempt `validate_submission` refuses (never counts:
    a numpy one would score here, yet `score` refuses it and JSON cannot hold it). A valid one holds plain ints."""
    if attempt_problem(attempt):
        return None
    return grid_key(attempt)


def score_submission(submission: str | os.PathLike | Mapping,
                     solutions: str | os.PathLike | Mapping) -> ScoreReport:
    """Score a submission (dict or path) against solutions (dict or path).

    For each test output of the solutions: 1 when attempt_1 or attempt_2 equals the truth
    exactly (same shape, same values; an attempt `validate_submission` calls invalid never matches,
    numpy values, tuple rows and bools included). A task missing from the submission, a missing
    dict or a non-dict entry scores 0 for those outputs.
    Solutions without a task are refused (DataError), as `score` refuses them.
    """
    if isinstance(submission, (str, os.PathLike)):
        submission = load_submission(submission, warn=False)  # a byte-order mark: said by `check_scorable`
    if not isinstance(submission, Mapping):
        raise DataError(f"submission must map task ids to lists, found {type(submission).__name__}")
    truth = load_solutions(solutions)
    # a score over no output would read as 0.0 (the counts: a solutions task has no test list to look for)
    require_tasks({task_id: len(grids) for task_id, grids in truth.items()}, solutions, "there is nothing to score",
                  "solutions")
    report = ScoreReport(solved=0, total=0)
    for task_id, outputs in truth.items():
        entry = submission.get(task_id, _MISSING)
        notes = []
        if entry is _MISSING:
            notes.append("missing from the submission")
            entry = []
        elif not isinstance(entry, list):
            notes.append("entry is not a list")
            entry = []
        elif len(entry) != len(outputs):
            notes.append(f"{count(len(entry), 'attempt dict')} for {count(len(outputs), 'test output')}")
        matched: list[str | None] = []
        for i, out in enumerate(outputs):
            want = grid_key(out)
            hit = None
            item = entry[i] if i < len(entry) else None
            if isinstance(item, Mapping):
                for name in ATTEMPTS:
                    if name in item and _attempt_key(item[name]) == want:
                        hit = name
                        break
            elif i < len(entry):
                notes.append(f"test {i} is not an object")
            matched.append(hit)
        solved = sum(m is not None for m in matched)
        report.tasks.append(TaskScore(task_id, len(outputs), solved, matched, "; ".join(notes)))
        report.solved += solved
        report.total += len(outputs)
    report.extra_tasks = [str(t) for t in submission if t not in truth]
    return report


def format_score(report: ScoreReport, max_rows: int = 30) -> str:
    """One screen: the ARC Prize score line, totals, then a per-task table of at most `max_rows` rows (0: no table).
    """
    # checked where given: 0 was a TypeError from max() of no row, NaN one from the slice
    max_rows = whole_argument("max_rows", max_rows, 0, MAX_ROWS)
    lines = [
        f"ARC Prize score (micro-average over {report.total} test outputs, pass@2): {report.score:.4f} "
        f"({format_interval(report.score_ci95)}, Wilson, unit: test outputs)",
        f"solved {report.solved} of {report.total} test outputs; "
        f"{report.tasks_fully_solved} of {len(report.tasks)} tasks fully solved",
        f"per-task macro-average (not the ARC Prize score): {report.task_macro_average:.4f} "
        f"({format_interval(report.task_macro_ci95)}, Wilson, unit: tasks)",
    ]
    if report.missing_tasks:
        lines.append(f"{len(report.missing_tasks)} tasks missing from the submission (scored 0)")
    if report.extra_tasks:
        lines.append(f"{len(report.extra_tasks)} submission tasks not in the solutions (ignored)")
    if report.tasks and max_rows:
        # tasks with a solved output first, each group in solutions order
        rows = [t for t in report.tasks if t.solved] + [t for t in report.tasks if not t.solved]
        ids = {t.task_id: shown(t.task_id) for t in rows[:max_rows]}  # ids come from the files: escaped, cut
        width = max(8, *(len(i) for i in ids.values()))
        lines.append(f"{'task':<{width}}  solved  matched")
        for t in rows[:max_rows]:
            marks = " ".join({"attempt_1": "1", "attempt_2": "2", None: "-"}[m] for m in t.matched)
            note = f"  ({t.note})" if t.note else ""
            lines.append(f"{ids[t.task_id]:<{width}}  {t.solved:>2}/{t.outputs:<2}   {marks}{note}")
        rest = rows[max_rows:]
        if rest:
            lines.append(f"... {len(rest)} more tasks not shown "
                         f"({sum(t.solved for t in rest)} solved outputs among their "
                         f"{sum(t.outputs for t in rest)})")
        lines.append("matched: 1 = attempt_1, 2 = attempt_2, - = not solved (one mark per test output)")
    return "\n".join(lines)

__all__ = ["ScoreReport", "TaskScore", "format_score", "score_submission"]
