"""`trm-kaggle evaluate`: an export on a dataset's test split, as the command runs it.

    export + dataset -> (per --task-ids mode: the puzzle-embedding rows chosen) -> predictions -> votes
                     (pooled with earlier evaluations' saved votes) -> metrics -> printed, votes saved, report

An ARC dataset (with test_puzzles.json) is voted over its augmentations; any other (Sudoku, Maze) is scored per
example (`trm_kaggle.evaluate.dataset.score_dataset`: exact and token accuracy with intervals). A test split
with nothing to score is refused before any inference (DataError): no data is not a zero.

Printed lines go to `out` (stdout for the command), notes to `note` (stderr).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Callable, Sequence

from trm_kaggle.atomic import RewrittenFile, taken_problem
from trm_kaggle.config import MAX_SEED, EvaluateConfig, whole_argument
from trm_kaggle.data import check_metadata, contents_hash, load_metadata, load_split
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.dataset import format_dataset_metrics, is_arc_dataset, score_dataset
from trm_kaggle.evaluate.pipeline import evaluate, foreign_votes, load_test_set, other_canvas
from trm_kaggle.evaluate.predict import evaluate_config
from trm_kaggle.evaluate.report import (MAX_DRAWN, REPORT_KIND, checked_report_dir, format_metrics,
                                        format_task_id_table, tasks_problem, write_dataset_report, write_report)
from trm_kaggle.evaluate.vote import VoteTable
from trm_kaggle.hardware import pick_device
from trm_kaggle.model import apply_compile, apply_task_ids, load_model_for_dataset
from trm_kaggle.names import blank_path_problem
from trm_kaggle.outputs import Input, Output, check_kept, writable_problem


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def evaluate_io(weights, data, save_votes=None, report_dir=None, pool_with=(), *,
                flags: bool = True) -> tuple[list[Input], list[Output]]:
    """What an evaluation reads and writes (`trm_kaggle.outputs`), named as `evaluate`'s options (`flags`) or as
    `evaluate_export`'s arguments: `evaluate_export` checks them itself, the command before it calls it. The report
    folder is replaced as a whole: nothing else may lie in it (votes saved there were refused after the work).
    A votes file named twice in `pool_with` is refused here, for both (TRMError): its votes would count twice."""
    def name(field: str) -> str:
        return "--" + field.replace("_", "-") if flags else field

    for field, given, wanted in (("save_votes", save_votes, "a file"), ("report_dir", report_dir, "a folder"),
                                 ("pool_with", pool_with, "a votes file")):  # '' wrote nothing and said nothing
        if problem := blank_path_problem(given, wanted, "or leave it out"):
            raise TRMError(f"{name(field)} {problem}")
    _check_pool_with(pool_with or [], name("pool_with"))
    return ([Input(weights, name("weights"), tree=True), Input(data, name("data"), tree=True),
             *(Input(p, f"{name('pool_with')} file") for p in pool_with or [])],
            [Output(save_votes, name("save_votes")), Output(report_dir, name("report_dir"), "replaced")])


def evaluate_export(weights: str, data: str, cfg: EvaluateConfig | None = None, *,
                    task_ids: Sequence[str] = ("own",), task_id_seed: int = 0, pool_with: Sequence[str] | None = None,
                    save_votes: str | None = None, report_dir: str | None = None, tasks: list[str] | None = None,
                    first: int | None = None, pictures: bool = True, out: Callable[[str], None] = print,
                    note: Callable[[str], None] = _stderr, **settings) -> dict[str, dict]:
    """Evaluate `weights` on `data` once per task-id mode; returns {mode: summary}. `cfg` (an EvaluateConfig or a
    dict of its fields; or its fields one by one in `settings`) says how: the export is loaded on cfg.device, in
    cfg.dtype ("auto" decides per device whatever the export was trained in), compiled as cfg.compile, then
    `evaluate`d. Votes of `pool_with` (files
    of `save_votes`, oldest first) are read before any inference, so a bad file stops the run first. `tasks`,
    `first` (default 5) and `pictures` choose the ARC report's pictures; `tasks` and `first` are checked before
    any inference too, with a report or without."""
    cfg = evaluate_config(cfg, settings)
    task_id_seed = whole_argument("task_id_seed", task_id_seed, 0, MAX_SEED)  # NaN failed in torch after the load
    if first is not None:  # write_report found it after the whole inference, naming its own first_n
        first = whole_argument("first", first, 0, MAX_DRAWN)
    inputs, outputs = evaluate_io(weights, data, save_votes, report_dir, pool_with, flags=False)
    check_kept(inputs, outputs)
    # where the votes and the report go, as `evaluate` checks them: votes in /dev were written after the inference
    if problem := next(filter(None, (writable_problem(o) for o in outputs if o.path not in (None, ""))), None):
        raise TRMError(problem)
    # what verify and training refuse without reading a token row, first and in their words, as they check it (an
    # unreadable dataset.json is said so, not "differs from the contents"): an ARC test split without its
    # test_puzzles.json was scored per example, a task the file names but the split lacks counted as failed
    check_metadata(data)
    contents_hash(data)  # then a dataset changed after its build is refused here, as training and verify refuse it
    arc = is_arc_dataset(data)
    _check_something_to_score(data, arc)
    if not arc and (pool_with or save_votes):
        raise DataError(f"{data} has no test_puzzles.json: it is scored per example, without votes to save or pool")
    if not arc and (tasks is not None or first is not None or not pictures):  # read by nothing: no pictures here
        given = [f for f, on in (("--tasks", tasks is not None), ("--first", first is not None),
                                 ("--no-pictures", not pictures)) if on]
        raise DataError(f"{' and '.join(given)}: {data} has no test_puzzles.json: it is scored per example, and its "
                        "report draws no pictures (ARC's alone) and picks no tasks")
    if not arc and cfg.weighting != "count":  # each example answers alone: no vote to weigh
        raise DataError(f"{data} has no test_puzzles.json: it is scored per example, without votes to weigh "
                        f"(weighting {cfg.weighting})")
    test_set = load_test_set(data) if arc and (tasks is not None or pool_with) else None  # read once for both
    if tasks is not None and (problem := tasks_problem(tasks, test_set.num_tests, data, "tasks")):
        raise TRMError(problem)  # as `evaluate --tasks` says it: write_report found it after the whole inference
    modes = list(dict.fromkeys(task_ids))
    pooled = None
    side = math.isqrt(load_metadata(data, "test").seq_len) if pool_with else 0
    for path in pool_with or []:  # read first: a bad file stops before any inference
        table = VoteTable.load(path)
        if stray := table.foreign_slots(test_set.slots):  # dropped while the scores said "POOLED"
            raise DataError(f"{path}: {foreign_votes(stray, data)}")
        if problem := other_canvas(table, side, data):  # VoteTable.merge's words came after the inference
            raise DataError(f"{path}: {problem}")
        pooled = table if pooled is None else pooled.merge(table)
    extra = {"pooled_evaluations": len(pool_with)} if pool_with else {}
    record = found = None
    if report_dir:  # before any inference: a folder holding the report of other weights is refused
        # and one that is no report of ours at all; `found`: what the report replaces (another one written there
        # meanwhile is kept)
        record, found = checked_report_dir(report_dir, weights)
    # the votes file, as the report: one another evaluation wrote during this one stands, this one ends in one line
    votes_file = RewrittenFile(save_votes) if save_votes else None
    torch_device = pick_device(cfg.device)
    summaries = {}
    while modes:
        mode = modes.pop(0)
        model, _, load_note = load_model_for_dataset(weights, data, torch_device)
        model.arch = model.arch.for_inference(cfg.dtype)
        if load_note and not summaries:
            note(f"note: {load_note}")
        ids_note = apply_task_ids(model, mode, seed=task_id_seed)
        if ids_note and list(task_ids) != ["own"]:
            # every puzzle has the same row whatever the mode: one evaluation answers for all of them
            note(f"note: {ids_note}; evaluating once")
            mode, modes = "/".join([mode] + modes), []
        apply_compile(model, cfg.compile, torch_device)  # auto: on CUDA; lazy: compiles in the first batch
        if list(task_ids) != ["own"]:
            out(f"== task ids: {mode}")
        if not arc:
            result = score_dataset(model, data, cfg, device=torch_device)
            summaries[mode] = result.summary()
            out(format_dataset_metrics(summaries[mode]))
            continue
        result = evaluate(model, data, cfg, device=torch_device, pool_with=pooled)
        summaries[mode] = {**result.summary(), **extra}
        out(format_metrics(summaries[mode]))
    if not arc:
        if report_dir:
            out(f"report: {write_dataset_report(summaries[mode], report_dir, record, found)['markdown']}")
        return summaries
    if len(summaries) > 1:
        out(format_task_id_table(summaries))
    if report_dir and (problem := taken_problem(report_dir, REPORT_KIND, found)):  # before the votes: neither is
        raise TRMError(problem)  # written when another evaluation's report took the folder
    if votes_file is not None:  # this evaluation's votes only, never the pooled ones
        votes_file.write(lambda: result.table.save(save_votes))
    if report_dir:
        paths = write_report(result, report_dir, tasks=tasks, first_n=5 if first is None else first, pictures=pictures,
                             weights=record, found=found)
        out(f"report: {paths['markdown']}")
    return summaries


def _check_pool_with(paths: Sequence[str], name: str) -> None:
    """TRMError when `paths` is one path (its letters were taken for files) or two of them are one file: the same
    name, `./v.npz` beside `v.npz`, a link to it, or a hard link."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TRMError(f"{name}={paths!r}: expected a list of votes files, e.g. [{str(paths)!r}]")
    seen: dict[object, str] = {}
    for path in paths:
        try:
            where = os.path.realpath(path)
        except (TypeError, ValueError):  # not a path (a NUL byte...): the readers name it
            continue
        try:  # one file by any name: a hard link shares no path with it, only its inode
            info = os.stat(where)
            where = (info.st_dev, info.st_ino)
        except OSError:  # not there (yet): the readers name it; its path stands for it
            pass
        if where in seen:
            also = f" (as {seen[where]})" if seen[where] != path else ""
            raise TRMError(f"{name}: {path} is named twice{also}: its votes would be counted twice; name each file "
                           "once")
        seen[where] = path


def _check_something_to_score(data: str, arc: bool) -> None:
    """DataError before any inference when the test split of `data` has nothing to score."""
    if load_split(data, "test").num_examples == 0:
        raise DataError(f"{data}: the test split holds no examples: nothing to score")
    if arc and not load_test_set(data).truths:
        raise DataError(f"{data}: no test output in test_puzzles.json has a known answer: nothing to score")
