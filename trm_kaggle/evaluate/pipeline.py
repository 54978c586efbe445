"""evaluate's pipeline: an ARC dataset's test split predicted, decoded, voted and scored.

    result = evaluate(model, "data/arc2concept-aug-1000", EvaluateConfig(batch_size=128))
    result = evaluate(model, "data/arc2concept-aug-1000", batch_size=128)   # the same: settings one by one
    result.arc_prize_score                 # micro over test outputs, truth in the top-2
    result.pass_at_k_task_macro[2]         # upstream's ARC/pass@2 (macro over tasks)
    result.candidates[("0934a4d8", 0)]     # [grid, ...] best first, for a submission
    write_report(result, "out/eval", tasks=["0934a4d8"])   # trm_kaggle.evaluate.report: report.json, .md, PNGs

Mapping predictions to test outputs: the test split holds, per test-set task, one
puzzle per augmentation whose examples are the task's test inputs in order, so example
k of a puzzle named `<task>|||t..|||..` (or plain `<task>`) predicts test output k of
`<task>` in test_puzzles.json. `check_inputs=True` (the default) verifies it before any
inference: every un-augmented input must equal that test input, else the dataset and
test_puzzles.json disagree and evaluation stops with a DataError. (Upstream instead looked
test inputs up by the hash of the un-augmented input, which merges identical test inputs of
a task.) `check_test_split(dataset_dir)` runs these rules without a model: `verify` calls it.

`token_accuracy` (fraction of non-PAD label tokens predicted right, over all augmented
copies) is reported under that name only; it is not a solve rate.

Test-time trajectories (`trajectories` K with `trajectory_noise`, docs/test_time.md): every augmented copy runs
as K trajectories and each trajectory's prediction is one more vote (weighted as `weighting` says). `test_depth`
runs that many ACT steps and counts the rows whose prediction settled. A dataset without test_puzzles.json
(Sudoku, Maze) is scored without a vote: `trm_kaggle.evaluate.dataset.score_dataset`.

Command line (`trm_kaggle.evaluate.run`):

    trm-kaggle evaluate --weights EXPORT_DIR --data DATASET --report-dir DIR \\
        [--tasks id1,id2 | --first N] [--early-exit] [--weighting q_halt]
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from trm_kaggle.config import EvaluateConfig, seconds_argument, whole_argument
from trm_kaggle.data import grid_problem, load_identifiers, load_split
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.decode import (PuzzleAugmentations, decode_split_tokens, example_puzzles, grid_to_key,
                                        key_dtype, puzzle_augmentations, side_of)
from trm_kaggle.evaluate.predict import (Predictions, dataset_argument, evaluate_config, model_argument, placed,
                                         predict_split)
from trm_kaggle.evaluate.stats import category_breakdown
from trm_kaggle.evaluate.vote import (ATTEMPTS, PASS_KS, Metrics, Slot, VoteResult, VoteTable, canvas_side, pass_ks,
                                      score)
from trm_kaggle.jsonio import read_json
from trm_kaggle.model import counts_settled
from trm_kaggle.names import task_id_problem
from trm_kaggle.wording import count, shown, type_name


@dataclass
class TestSet:
    """test_puzzles.json as arrays: every (task_id, test_index) with its input, and its truth where it is known
    (a test pair without an output, e.g. an unseen challenge, is predicted and never scored)."""

    slots: list[Slot]
    inputs: dict[Slot, np.ndarray]
    truths: dict[Slot, np.ndarray]  # the labeled slots only
    num_tests: dict[str, int]

    @property
    def labeled(self) -> list[Slot]:
        return [s for s in self.slots if s in self.truths]

    @property
    def task_ids(self) -> list[str]:
        return list(self.num_tests)

    def only(self, task_ids: Sequence[str]) -> "TestSet":
        """The same test set restricted to `task_ids` (kept in this set's order)."""
        keep = set(task_ids)
        slots = [s for s in self.slots if s[0] in keep]
        return TestSet(slots, {s: self.inputs[s] for s in slots},
                       {s: self.truths[s] for s in slots if s in self.truths}, {t: n for t, n in self.num_tests.items() if t in keep})


def foreign_votes(stray: Sequence[Slot], dataset_dir: str | os.PathLike) -> str:
    """The words for votes of test inputs a dataset lacks (`VoteTable.foreign_slots`): never pooled."""
    task, index = stray[0]
    return (f"votes for {count(len(stray), 'test input')} {dataset_dir} does not have (first: task {shown(task)} "
            f"test {index}): the votes of another dataset are never pooled")


def other_canvas(table: VoteTable, side: int, dataset_dir: str | os.PathLike) -> str | None:
    """The words for votes on another canvas than the dataset's (`side`), or None: `VoteTable.merge`'s "keys of
    different canvases" came after the whole inference."""
    if canvas_side(table) == side:
        return None
    return (f"votes on a {canvas_side(table)}x{canvas_side(table)} canvas, and {dataset_dir} is on {side}x{side}: "
            "votes of another dataset's canvas cannot be pooled")


def load_test_set(dataset_dir: str | os.PathLike) -> TestSet:
    path = Path(dataset_dir) / "test_puzzles.json"
    raw = read_json(path, "test_puzzles.json", hint="ARC evaluation needs the test_puzzles.json an ARC builder "
                    "writes; a dataset without one (Sudoku, Maze) is scored by "
                    "trm_kaggle.evaluate.dataset.score_dataset")
    slots, inputs, truths, num_tests = [], {}, {}, {}
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected an object mapping task ids to tasks")
    for task_id, task in raw.items():
        if task_id_problem(task_id):  # before any inference: ids become file names of the report
            raise DataError(f"{path}: task id {task_id_problem(task_id)}")
        tests = task.get("test") if isinstance(task, dict) else None
        if not isinstance(tests, list) or not tests:
            raise DataError(f"{path}: task {task_id} has no test pairs")
        num_tests[task_id] = len(tests)
        for i, pair in enumerate(tests):
            # every grid an ARC grid (`grid_problem`, the tasks' and submissions' check), before any inference: an
            # output of 31x31 failed in scoring after the whole prediction, colour 257 was wrapped to 1 and solved
            for part in ("input", "output"):
                if isinstance(pair, dict) and part in pair and (problem := grid_problem(pair[part])):
                    raise DataError(f"{path}: task {shown(task_id)} test pair {i} {part}: {problem}")
            try:
                x = np.array(pair["input"], dtype=np.uint8)
                y = None if "output" not in pair else np.array(pair["output"], dtype=np.uint8)  # None: unknown
            except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: a value outside 0..255
                raise DataError(f"{path}: task {task_id} test pair {i} needs a rectangular 'input' (and 'output' "
                                "where it is known) of colours") from None
            if x.ndim != 2 or (y is not None and y.ndim != 2):
                raise DataError(f"{path}: task {task_id} test pair {i}: grids must be 2-D")
            s = (task_id, i)
            slots.append(s)
            inputs[s] = x
            if y is not None:
                truths[s] = y
    return TestSet(slots, inputs, truths, num_tests)


@dataclass
class EvalResult:
    """Everything one evaluation produced. Metrics are over the test set of `dataset_dir`."""

    metrics: Metrics
    votes: VoteResult
    table: VoteTable  # this evaluation's votes (merge() them explicitly to pool evaluations)
    predictions: Predictions
    test_set: TestSet
    candidates: dict[Slot, list[np.ndarray]]  # best first, 0x0 grids dropped: for submissions
    token_accuracy: float  # per token, over all augmented copies; NOT a solve rate
    well_formed: float  # fraction of predictions whose crop needed no fallback (see decode)
    timing: dict[str, float]
    dataset_dir: str
    weighting: str
    pooled: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def arc_prize_score(self) -> float:
        return self.metrics.arc_prize_score

    @property
    def pass_at_k_task_macro(self) -> dict[int, float]:
        return self.metrics.pass_at_k_task_macro

    def breakdown(self) -> dict[str, dict]:
        """ARC Prize score by kind of output (same shape / reshaped, size buckets), with 95 % intervals."""
        ts = self.test_set
        solved = {s: 0 <= r < ATTEMPTS for s, r in self.metrics.truth_rank.items()}
        return category_breakdown(ts.labeled, ts.inputs, ts.truths, solved)

    def summary(self) -> dict:
        """JSON-serialisable metrics, counts and timing."""
        p = self.predictions
        voted = p.steps >= 0  # rows the deadline cut cast no vote and ran no step
        metrics = self.metrics.as_dict()
        if not voted.any():  # nothing predicted: no data is not a score of 0 (the unvoted slots scored as unsolved)
            metrics.update(arc_prize_score=None, arc_prize_score_ci95=None, pass_at_2_task_macro_ci95=None,
                           pass_at_k_task_macro={k: None for k in metrics["pass_at_k_task_macro"]})
        return {
            "dataset": self.dataset_dir,
            **metrics,
            "unlabeled_test_outputs": len(self.test_set.slots) - len(self.test_set.truths),  # predicted, not scored
            "breakdown": self.breakdown(),
            "token_accuracy": self.token_accuracy if np.isfinite(self.token_accuracy) else None,  # JSON has no NaN
            "num_examples": len(p) // p.trajectories,
            "prediction_rows": len(p),  # examples x trajectories
            "predicted_rows": int(voted.sum()),  # those the deadline left: each one a vote
            # test outputs with an example the deadline skipped: their missing votes scored as unsolved
            "cut_test_outputs": len(self.extra.get("cut_slots", ())),
            "well_formed_predictions": self.well_formed,
            "weighting": self.weighting,
            "pooled_with_other_evaluations": self.pooled,
            "early_exit": p.early_exit,
            "max_steps": p.max_steps,
            "mean_steps": float(p.steps[voted].mean()) if voted.any() else None,  # a cut row's -1 is no step
            "forward_rows": p.forward_rows,
            "trajectories": p.trajectories,
            "trajectory_noise": p.noise,
            "settled": None if p.settled is None else int(p.settled[p.steps >= 0].sum()),
            "dtype": p.dtype,
            "timing": self.timing,
        }


def evaluate(model: torch.nn.Module, dataset_dir: str | os.PathLike, cfg: EvaluateConfig | None = None, *,
             device: str | torch.device | None = None, pool_with: VoteTable | None = None,
             deadline: float | None = None, always: int = 0, always_until: float | None = None,
             ks: Sequence[int] = PASS_KS, check_inputs: bool = True, **settings) -> EvalResult:
    """Predict the whole test split of `dataset_dir`, vote, and score against test_puzzles.json.

    model: a `TinyRecursiveModel` (`predict_split`: a path is refused, so are weights holding NaN or inf).
    cfg: how it runs (`EvaluateConfig`, or a dict of its fields: batch_size, early_exit, max_steps, weighting,
    max_tasks, keep_logits, progress); `settings` are fields of it given one by one, over cfg's
    (`evaluate(model, data, batch_size=64)`). Its device, dtype and compile choose how an export is loaded
    (`evaluate_export`): the model runs as it is given.
    device: where to run (default: where the model's weights are); the model is moved there and stays there, a
    device this machine lacks (or meta, which holds no data) is refused in one line before any work
    (`hardware.place_model`), and an evaluation that fails puts the model back where it was.
    pool_with: votes of an earlier evaluation to pool with (opt-in; default: this evaluation only).
    deadline, always, always_until: see `predict_split` (the logits of keep_logits are `result.predictions.logits`).
    """
    model = model_argument(model)
    cfg = evaluate_config(cfg, settings)
    # the call's own arguments, before any work: ks=[nan] once failed in numpy after the whole evaluation, and
    # ks=[0] reported a pass@0
    ks = pass_ks(ks)
    pool_with = _pool_argument(pool_with)
    always = whole_argument("always", always, 0, 2**62)
    deadline, always_until = seconds_argument("deadline", deadline), seconds_argument("always_until", always_until)
    dataset_argument(dataset_dir)  # a folder that is not there was "test_puzzles.json not found"
    with placed(model, device) as target:
        return _evaluate(model, dataset_dir, cfg, target, pool_with, deadline, always, always_until, ks, check_inputs)


def _pool_argument(pool_with: object) -> VoteTable | None:
    """`evaluate`'s pool_with: None, a VoteTable or the path of a votes file (`--pool-with`'s, loaded), checked as
    `VoteTable.load` checks a file (a table changed after it was made: NaN q_halt ranked the truth last)."""
    if pool_with is None:
        return None
    if isinstance(pool_with, (str, os.PathLike)):
        return VoteTable.load(pool_with)  # a DataError naming the file
    if not isinstance(pool_with, VoteTable):
        raise TypeError(f"pool_with: expected a VoteTable or the path of a votes file, got {type_name(pool_with)}")
    if problem := pool_with.problem():
        raise ValueError(f"pool_with: {problem}")
    return pool_with


def _evaluate(model, dataset_dir, cfg, device, pool_with, deadline, always, always_until, ks,
              check_inputs) -> EvalResult:
    """`evaluate` on its checked arguments, the model on `device`."""
    t0 = time.perf_counter()
    test_set = load_test_set(dataset_dir)
    if pool_with is not None and (stray := pool_with.foreign_slots(test_set.slots)):
        raise DataError(f"pool_with: {foreign_votes(stray, dataset_dir)}")
    split, side, puzzles = _read_test_split(dataset_dir)
    if pool_with is not None and (problem := other_canvas(pool_with, side, dataset_dir)):
        raise DataError(f"pool_with: {problem}")
    augs = puzzles.augs
    puzzle_of, position = example_puzzles(split.puzzle_indices)
    rows = None  # every example
    if cfg.max_tasks is not None:  # the first tasks of the split, in its order
        first = np.unique(augs.task_index[puzzle_of], return_index=True)[1]  # where each task first appears
        chosen = augs.task_index[puzzle_of][np.sort(first)][:cfg.max_tasks]
        rows = np.flatnonzero(np.isin(augs.task_index[puzzle_of], chosen))
        test_set = test_set.only([augs.task_ids[t] for t in chosen])
        puzzle_of, position = puzzle_of[rows], position[rows]
    # the test split's rules (`check_test_split`), before any inference: a dataset refused here was refused
    # after the whole prediction
    slot = _slots_of_examples(test_set, puzzles, puzzle_of, position, dataset_dir)
    if check_inputs:
        _check_inputs(split.inputs, rows, puzzle_of, puzzles, slot, test_set, side, dataset_dir)
    # every trajectory is a vote: first_halt selects none here, it stops each trajectory at its first q_halt > 0
    preds = predict_split(model, dataset_dir, cfg.batch_size, device, cfg.stops_at_first_halt, max_steps=cfg.steps,
                          progress=cfg.progress, deadline=deadline, examples=rows, always=always,
                          always_until=always_until,
                          keep_logits=cfg.keep_logits, trajectories=cfg.trajectories, noise=cfg.trajectory_noise,
                          seed=cfg.trajectory_seed, track_settled=counts_settled(cfg.test_depth))
    t_pred = time.perf_counter()
    example = np.repeat(np.arange(len(puzzle_of)), preds.trajectories)  # the example of each prediction row
    if not np.array_equal(puzzle_of[example], preds.puzzle_index):
        raise TRMError("predictions are not in the order of the dataset's test split")
    decoded = decode_split_tokens(preds.tokens, puzzle_of[example], augs, side)
    slot = slot[example]
    t_decode = time.perf_counter()

    voted = preds.steps >= 0  # examples skipped at the deadline cast no vote
    table = VoteTable(test_set.slots, slot[voted], decoded.keys[voted], preds.q_halt[voted].astype(np.float64),
                      order=np.nonzero(voted)[0])
    voting = pool_with.merge(table) if pool_with is not None else table
    votes = voting.tally(cfg.weighting)
    metrics = score(votes, test_set.truths, ks)
    candidates = votes.ranked_grids(drop_empty=True)
    for s in test_set.slots:
        candidates.setdefault(s, [])
    t_vote = time.perf_counter()

    labels = split.labels if rows is None else np.asarray(split.labels[rows])
    if preds.trajectories > 1:
        labels = np.asarray(labels)[example]
    tokens = preds.tokens
    if not voted.all():  # the rows the deadline cut hold no prediction: measured over the others (none: NaN)
        tokens, labels = tokens[voted], np.asarray(labels)[voted]
    acc = token_accuracy(tokens, labels, split.metadata.ignore_label_id)
    t_end = time.perf_counter()
    total = t_end - t0
    timing = {
        "seconds_total": total,
        "seconds_model": preds.seconds_model,
        "seconds_predict_outside_model": preds.seconds_total - preds.seconds_model,
        "seconds_decode": t_decode - t_pred,
        "seconds_vote_and_score": t_vote - t_decode,
        "seconds_token_accuracy": t_end - t_vote,
        "examples_per_second": len(preds) / total if total > 0 else float("nan"),
        "model_examples_per_second": len(preds) / preds.seconds_model if preds.seconds_model > 0 else float("nan"),
        "share_outside_model": 1.0 - preds.seconds_model / total if total > 0 else float("nan"),
    }
    return EvalResult(metrics=metrics, votes=votes, table=table, predictions=preds, test_set=test_set,
                      candidates=candidates, token_accuracy=acc,
                      well_formed=float(decoded.well_formed[voted].mean()) if voted.any() else 1.0, timing=timing,
                      dataset_dir=str(dataset_dir), weighting=cfg.weighting, pooled=pool_with is not None,
                      # slots with an example the deadline skipped: a slot without candidates is cut, not unsolvable
                      extra={"cut_slots": [test_set.slots[i] for i in np.unique(slot[~voted])]})


@dataclass
class _TestPuzzles:
    """The test split's puzzles as evaluate reads them: each one's name (identifiers.json's, for messages) and the
    task and augmentation it names."""

    names: list[str]
    augs: PuzzleAugmentations

    def said(self, p: int) -> str:
        """Puzzle `p` for a one-line message: its index and its name, escaped and cut (a name is read from a file)."""
        return f"puzzle {p} ({shown(self.names[p])})"


def _read_test_split(dataset_dir) -> tuple:
    """(the test split, its canvas side, its `_TestPuzzles`); DataError naming the dataset and the first puzzle whose
    name is no task id with an augmentation (`parse_aug_name`), or a canvas that is not square."""
    split = load_split(dataset_dir, "test")
    identifiers = load_identifiers(dataset_dir)
    pid = split.puzzle_identifiers
    if len(pid) and (pid.min() < 0 or pid.max() >= len(identifiers)):  # a -1 named the table's last puzzle
        p = int(np.argmax((pid < 0) | (pid >= len(identifiers))))
        raise DataError(f"{dataset_dir}: test split puzzle {p}: identifier {int(pid[p])} is outside identifiers.json's "
                        f"{len(identifiers)}")
    names = [identifiers[int(i)] for i in pid]
    try:
        side = side_of(split.metadata.seq_len)
    except DataError as e:  # their words name the value, not the dataset it belongs to
        raise DataError(f"{dataset_dir}: {e}") from None
    try:
        return split, side, _TestPuzzles(names, puzzle_augmentations(names))
    except DataError as e:  # "puzzle 3: not an augmented puzzle name: ..."
        raise DataError(f"{dataset_dir}: test split {e}") from None


def check_test_split(dataset_dir: str | os.PathLike, chunk: int = 16384) -> None:
    """Refuse, without a model, a test split `evaluate` would refuse: test_puzzles.json, every puzzle's name (a
    task id, or one with its augmentation), every example a test input of the task its puzzle names, and every
    un-augmented example that very test input. DataError: one line naming the dataset and the first bad puzzle.

    `verify`, the pipeline and the Kaggle training kernel call it after `verify_dataset`, so that no training goes
    into a dataset evaluate refuses only afterwards: the data layer checks the un-augmented puzzles, the augmented
    ones are read by evaluate's rules, here. A dataset without test_puzzles.json (Sudoku, Maze: scored per
    example, `score_dataset`) has none of these rules: nothing is checked. The examples are decoded `chunk` at a
    time, so a large split never holds all its decoded inputs at once.
    """
    if not (Path(dataset_dir) / "test_puzzles.json").exists():  # verify_dataset's test for an ARC dataset
        return
    test_set = load_test_set(dataset_dir)
    split, side, puzzles = _read_test_split(dataset_dir)
    puzzle_of, position = example_puzzles(split.puzzle_indices)
    slot = _slots_of_examples(test_set, puzzles, puzzle_of, position, dataset_dir)
    _check_inputs(split.inputs, None, puzzle_of, puzzles, slot, test_set, side, dataset_dir, chunk=chunk)


def _slots_of_examples(test_set: TestSet, puzzles: _TestPuzzles, puzzle_of: np.ndarray, position: np.ndarray,
                       dataset_dir) -> np.ndarray:
    """Slot index (into test_set.slots) of every example, vectorised over examples; DataError naming the first
    puzzle of a task test_puzzles.json lacks, or with more examples than its task has test inputs."""
    augs = puzzles.augs
    task_ids, task_of = augs.task_ids, augs.task_index[puzzle_of]
    base, tests = {}, {}
    k = 0
    for t in test_set.task_ids:
        base[t], tests[t] = k, test_set.num_tests[t]
        k += test_set.num_tests[t]
    known = np.array([t in base for t in task_ids], dtype=bool)
    if not known[task_of].all():
        e = int(np.argmin(known[task_of]))  # the first example of a task test_puzzles.json lacks
        missing = [task_ids[t] for t in np.unique(task_of) if not known[t]]  # tasks of these examples
        raise DataError(f"{dataset_dir}: test split {puzzles.said(int(puzzle_of[e]))} is of task "
                        f"{shown(task_ids[task_of[e]])}, which test_puzzles.json does not hold "
                        f"({count(len(missing), 'such task')})")
    task_base = np.array([base.get(t, -1) for t in task_ids], dtype=np.int64)
    task_count = np.array([tests.get(t, 0) for t in task_ids], dtype=np.int64)
    over = position >= task_count[task_of]
    if over.any():
        e = int(np.flatnonzero(over)[0])
        raise DataError(f"{dataset_dir}: test split {puzzles.said(int(puzzle_of[e]))} example {position[e]} has no "
                        f"test input: its task {shown(task_ids[task_of[e]])} has only "
                        f"{count(int(task_count[task_of[e]]), 'test input')}")
    return task_base[task_of] + position


def _check_inputs(inputs: np.ndarray, rows: np.ndarray | None, puzzle_of: np.ndarray, puzzles: _TestPuzzles,
                  slot: np.ndarray, test_set: TestSet, side: int, dataset_dir, chunk: int = 16384) -> None:
    """Every example (`rows` of `inputs`; None: all), un-augmented, is the test input of its slot; decoded `chunk`
    examples at a time (a key is side*side bytes: a whole split's keys at once were gigabytes)."""
    want = np.empty(len(test_set.slots), dtype=key_dtype(side))
    for k, s in enumerate(test_set.slots):
        try:
            want[k] = grid_to_key(test_set.inputs[s], side)
        except ValueError:  # a traceback once, after the whole prediction
            raise DataError(f"{dataset_dir}: test_puzzles.json: task {shown(s[0])} test input {s[1]} of shape "
                            f"{test_set.inputs[s].shape} does not fit the dataset's {side}x{side} canvas") from None
    first, bad = None, 0
    for a in range(0, len(slot), chunk):
        at = slice(a, a + chunk)
        tokens = inputs[at] if rows is None else inputs[rows[at]]
        got = decode_split_tokens(np.asarray(tokens), puzzle_of[at], puzzles.augs, side).keys
        wrong = np.flatnonzero(got != want[slot[at]])
        if first is None and len(wrong):
            first = a + int(wrong[0])
        bad += len(wrong)
    if first is not None:
        task, i = test_set.slots[slot[first]]
        raise DataError(f"{dataset_dir}: test split {puzzles.said(int(puzzle_of[first]))} does not un-augment to "
                        f"test input {i} of task {shown(task)} in test_puzzles.json ({count(bad, 'such example')}): "
                        "the dataset and test_puzzles.json disagree")


def token_accuracy(tokens: np.ndarray, labels: np.ndarray, ignore_label_id: int | None = 0,
                   chunk: int = 16384) -> float:
    """Fraction of non-ignored label tokens predicted exactly (per token, all augmented copies)."""
    right = total = 0
    for a in range(0, len(tokens), chunk):
        lab = np.asarray(labels[a:a + chunk])
        mask = lab != ignore_label_id if ignore_label_id is not None else np.ones(lab.shape, bool)
        right += int(((tokens[a:a + chunk] == lab) & mask).sum())
        total += int(mask.sum())
    return right / total if total else float("nan")

