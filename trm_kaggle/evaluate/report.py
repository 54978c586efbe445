"""ARC evaluation end to end: predict -> decode -> vote -> metrics, plus reports.

    result = evaluate(model, "data/arc2concept-aug-1000")
    result.arc_prize_score                 # micro over test outputs, truth in the top-2
    result.pass_at_k_task_macro[2]         # upstream's ARC/pass@2 (macro over tasks)
    result.candidates[("0934a4d8", 0)]     # [grid, ...] best first, for a submission
    write_report(result, "out/eval", tasks=["0934a4d8"])   # report.json, report.md, PNGs

Mapping predictions to test outputs: the test split holds, per test-set task, one
puzzle per augmentation whose examples are the task's test inputs in order, so example
k of a puzzle named `<task>|||t..|||..` (or plain `<task>`) predicts test output k of
`<task>` in test_puzzles.json. `check_inputs=True` (the default) verifies it: every
un-augmented input must equal that test input, else the dataset and test_puzzles.json
disagree and evaluation stops with a DataError. (Upstream instead looked test inputs up
by the hash of the un-augmented input, which merges identical test inputs of a task.)

`token_accuracy` (fraction of non-PAD label tokens predicted right, over all augmented
copies) is reported under that name only; it is not a solve rate.

Command line:

    trm-kaggle evaluate --weights EXPORT_DIR --data DATASET --report-dir DIR \\
        [--tasks id1,id2 | --first N] [--early-exit] [--weighting q_halt]
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from trm_kaggle.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from trm_kaggle.data.format import load_identifiers, load_split
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.decode import (decode_split_tokens, example_puzzles, grids_to_keys, puzzle_augmentations,
                                        side_of)
from trm_kaggle.evaluate.predict import Predictions, predict_split
from trm_kaggle.evaluate.stats import category_breakdown, format_breakdown, format_interval
from trm_kaggle.evaluate.vote import ATTEMPTS, PASS_KS, Metrics, Slot, VoteResult, VoteTable, Weighting, score
from trm_kaggle.hardware import place_model
from trm_kaggle.jsonio import read_json
from trm_kaggle.names import file_in, task_id_problem
from trm_kaggle.wording import count

# The standard ARC palette, colours 0..9.
ARC_PALETTE = ("#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
               "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25")


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


def load_test_set(dataset_dir: str | os.PathLike) -> TestSet:
    path = Path(dataset_dir) / "test_puzzles.json"
    raw = read_json(path, "test_puzzles.json", hint="ARC evaluation needs the test_puzzles.json an ARC builder writes")
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
            try:
                x = np.array(pair["input"], dtype=np.uint8)
                y = None if "output" not in pair else np.array(pair["output"], dtype=np.uint8)  # None: unknown
            except (KeyError, TypeError, ValueError):
                raise DataError(f"{path}: task {task_id} test pair {i} needs a rectangular 'input' (and 'output' "
                                "where it is known)") from None
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
        return {
            "dataset": self.dataset_dir,
            **self.metrics.as_dict(),
            "unlabeled_test_outputs": len(self.test_set.slots) - len(self.test_set.truths),  # predicted, not scored
            "breakdown": self.breakdown(),
            "token_accuracy": self.token_accuracy,
            "num_examples": len(p),
            "well_formed_predictions": self.well_formed,
            "weighting": self.weighting,
            "pooled_with_other_evaluations": self.pooled,
            "early_exit": p.early_exit,
            "max_steps": p.max_steps,
            "mean_steps": float(p.steps.mean()) if len(p) else 0.0,
            "forward_rows": p.forward_rows,
            "dtype": p.dtype,
            "timing": self.timing,
        }


def evaluate(model: torch.nn.Module, dataset_dir: str | os.PathLike, *, batch_size: int = 256,
             device: str | torch.device | None = None, early_exit: bool = False, max_steps: int | None = None,
             weighting: Weighting = "count", ks: Sequence[int] = PASS_KS, check_inputs: bool = True,
             pool_with: VoteTable | None = None, progress: bool = False, deadline: float | None = None,
             max_tasks: int | None = None, always: int = 0, keep_logits: bool = False) -> EvalResult:
    """Predict the whole test split of `dataset_dir`, vote, and score against test_puzzles.json.

    pool_with: votes of an earlier evaluation to pool with (opt-in; default: this evaluation only).
    max_tasks: only the first N tasks of the test split, in its order (quick runs); scores are over them.
    deadline, always, keep_logits: see `predict_split` (the logits are `result.predictions.logits`).
    device: where to run (default: where the model's weights are); the model is moved there, and a device this
    machine lacks is refused in one line before any work (`hardware.place_model`).
    """
    t0 = time.perf_counter()
    device = place_model(model, device)
    test_set = load_test_set(dataset_dir)
    split = load_split(dataset_dir, "test")
    side = side_of(split.metadata.seq_len)
    identifiers = load_identifiers(dataset_dir)
    names = [identifiers[int(i)] for i in split.puzzle_identifiers]
    augs = puzzle_augmentations(names)
    puzzle_of, position = example_puzzles(split.puzzle_indices)
    rows = None  # every example
    if max_tasks is not None:
        if max_tasks < 1:
            raise TRMError(f"max_tasks must be >= 1, got {max_tasks}")
        first = np.unique(augs.task_index[puzzle_of], return_index=True)[1]  # where each task first appears
        chosen = augs.task_index[puzzle_of][np.sort(first)][:max_tasks]
        rows = np.flatnonzero(np.isin(augs.task_index[puzzle_of], chosen))
        test_set = test_set.only([augs.task_ids[t] for t in chosen])
        puzzle_of, position = puzzle_of[rows], position[rows]
    preds = predict_split(model, dataset_dir, batch_size, device, early_exit, max_steps=max_steps, progress=progress,
                          deadline=deadline, examples=rows, always=always, keep_logits=keep_logits)
    t_pred = time.perf_counter()
    if not np.array_equal(puzzle_of, preds.puzzle_index):
        raise TRMError("predictions are not in the order of the dataset's test split")
    slot = _slots_of_examples(test_set, augs.task_ids, augs.task_index[puzzle_of], position, dataset_dir)
    decoded = decode_split_tokens(preds.tokens, puzzle_of, augs, side)
    if check_inputs:
        inputs = split.inputs if rows is None else np.asarray(split.inputs[rows])
        _check_inputs(inputs, puzzle_of, augs, slot, test_set, side, dataset_dir)
    t_decode = time.perf_counter()

    voted = preds.steps >= 0  # examples skipped at the deadline cast no vote
    table = VoteTable(test_set.slots, slot[voted], decoded.keys[voted], preds.q_halt[voted].astype(np.float64),
                      order=np.nonzero(voted)[0])
    voting = pool_with.merge(table) if pool_with is not None else table
    votes = voting.tally(weighting)
    metrics = score(votes, test_set.truths, ks)
    candidates = votes.ranked_grids(drop_empty=True)
    for s in test_set.slots:
        candidates.setdefault(s, [])
    t_vote = time.perf_counter()

    acc = token_accuracy(preds.tokens, split.labels if rows is None else np.asarray(split.labels[rows]),
                         split.metadata.ignore_label_id)
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
                      well_formed=float(decoded.well_formed.mean()) if len(preds) else 1.0, timing=timing,
                      dataset_dir=str(dataset_dir), weighting=weighting, pooled=pool_with is not None,
                      # slots with an example the deadline skipped: a slot without candidates is cut, not unsolvable
                      extra={"cut_slots": [test_set.slots[i] for i in np.unique(slot[~voted])]})


def _slots_of_examples(test_set: TestSet, task_ids: list[str], task_of: np.ndarray, position: np.ndarray,
                       dataset_dir) -> np.ndarray:
    """Slot index (into test_set.slots) of every example, vectorised over examples."""
    base, tests = {}, {}
    k = 0
    for t in test_set.task_ids:
        base[t], tests[t] = k, test_set.num_tests[t]
        k += test_set.num_tests[t]
    missing = [task_ids[t] for t in np.unique(task_of) if task_ids[t] not in base]  # tasks of these examples
    if missing:
        raise DataError(f"{dataset_dir}: test-split puzzles of tasks missing from test_puzzles.json: "
                        f"{', '.join(missing[:5])}")
    task_base = np.array([base.get(t, -1) for t in task_ids], dtype=np.int64)
    task_count = np.array([tests.get(t, 0) for t in task_ids], dtype=np.int64)
    over = position >= task_count[task_of]
    if over.any():
        e = int(np.flatnonzero(over)[0])
        raise DataError(f"{dataset_dir}: test example {e} is input {position[e]} of a puzzle of task "
                        f"{task_ids[task_of[e]]}, which has only {count(int(task_count[task_of[e]]), 'test input')}")
    return task_base[task_of] + position


def _check_inputs(inputs: np.ndarray, puzzle_of: np.ndarray, augs, slot: np.ndarray, test_set: TestSet,
                  side: int, dataset_dir) -> None:
    got = decode_split_tokens(inputs, puzzle_of, augs, side).keys
    want = grids_to_keys([test_set.inputs[s] for s in test_set.slots], side)
    bad = np.flatnonzero(got != want[slot])
    if len(bad):
        e = int(bad[0])
        task, i = test_set.slots[slot[e]]
        raise DataError(f"{dataset_dir}: test example {e} (puzzle {augs.task_ids[augs.task_index[puzzle_of[e]]]}) "
                        f"does not un-augment to test input {i} of task {task} in test_puzzles.json "
                        f"({len(bad)} such examples): the dataset and test_puzzles.json disagree")


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


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------


def format_metrics(s: dict) -> str:
    """The evaluation's numbers (`EvalResult.summary()`), each under its own unmistakable name.

    `s["pooled_evaluations"]` (set by the caller that pooled) puts a warning line first."""
    passk = ", ".join(f"pass@{k} {v:.4f}" for k, v in s["pass_at_k_task_macro"].items())
    t = s["timing"]
    lines = []
    pooled = s.get("pooled_evaluations", 0)
    if pooled:
        lines.append(f"POOLED with {pooled} earlier evaluation{'s' if pooled > 1 else ''} (upstream's aggregated "
                     "voting): the numbers below are not this model's alone")
    if s.get("unlabeled_test_outputs"):
        lines.append(f"{count(s['unlabeled_test_outputs'], 'test output')} with no known answer: predicted, not "
                     "scored (the numbers below leave them out)")
    lines += [
        f"ARC Prize score (micro-average over {s['num_test_outputs']} test outputs, 2 attempts): "
        f"{s['arc_prize_score']:.4f} ({format_interval(s['arc_prize_score_ci95'])}, Wilson, unit: test outputs)",
        f"per-task macro pass@K over {s['num_tasks']} tasks (upstream's ARC/pass@K): {passk}",
        f"pass@2 (task macro) {s['pass_at_k_task_macro'].get('2', float('nan')):.4f} "
        f"({format_interval(s['pass_at_2_task_macro_ci95'])}, Wilson, unit: tasks)",
        f"token_accuracy (per token over all augmented copies; NOT a solve rate): {s['token_accuracy']:.4f}",
    ]
    if s.get("breakdown"):
        lines += ["ARC Prize score by output (solved / test outputs, score, interval):",
                  format_breakdown(s["breakdown"])]
    lines.append(f"{s['num_examples']:,} examples, {t['examples_per_second']:.1f} examples/s, "
                 f"{100 * t['share_outside_model']:.1f} % of the time outside the model")
    return "\n".join(lines)


def format_task_id_table(summaries: dict[str, dict]) -> str:
    """A markdown table, one row per `--task-ids` mode (`summary()` of each evaluation): does the model need its
    own task id?"""
    lines = ["| task ids | ARC Prize score (95 % CI) | pass@2, tasks (95 % CI) | token_accuracy |", "|---|---|---|---|"]
    for mode, s in summaries.items():
        a, p = s["arc_prize_score_ci95"], s["pass_at_2_task_macro_ci95"]
        lines.append(f"| {mode} | {s['arc_prize_score']:.4f} ({a[0]:.4f}-{a[1]:.4f}) | "
                     f"{s['pass_at_k_task_macro'].get('2', float('nan')):.4f} ({p[0]:.4f}-{p[1]:.4f}) | "
                     f"{s['token_accuracy']:.4f} |")
    return "\n".join(lines)


def task_report(result: EvalResult, top: int = 5) -> dict:
    """Per task and test input: solved (truth in the top-2), truth rank (1 = best, None = not among the
    candidates), number of predictions and of distinct candidates, mean sigmoid(q_halt), top votes."""
    votes, ts = result.votes, result.test_set
    ranks = result.metrics.truth_rank
    n_cand = dict(zip(votes.slots, votes.num_candidates().tolist()))
    n_votes, mean_q = {}, {}
    for s, i in votes.slot_index.items():
        sl = votes.candidates(s)
        n_votes[s] = int(votes.votes[sl].sum())
        mean_q[s] = float(votes.slot_mean_q[i]) if votes.slot_mean_q is not None and n_votes[s] else None
    tasks: dict[str, dict] = {}
    for s in ts.slots:
        task, i = s
        truth = ts.truths.get(s)  # None: no output known, nothing to score
        top_list = []
        for c in votes.ranked(s, limit=top):
            g = c.pop("grid")
            top_list.append({**c, "shape": list(g.shape), "correct": None if truth is None else
                             bool(g.shape == truth.shape and np.array_equal(g, truth))})
        entry = tasks.setdefault(task, {"test": []})
        entry["test"].append({
            "test_index": i,
            "solved": None if truth is None else 0 <= ranks.get(s, -1) < 2,
            "truth_rank": ranks.get(s, -1) + 1 if ranks.get(s, -1) >= 0 else None,  # 1 = best
            "truth_shape": None if truth is None else list(truth.shape),
            "predictions": n_votes.get(s, 0),
            "distinct_candidates": n_cand.get(s, 0),
            "mean_sigmoid_q_halt": mean_q.get(s),
            "top": top_list,
        })
    for entry in tasks.values():
        known = [t["solved"] for t in entry["test"] if t["solved"] is not None]
        entry["solved_fraction"] = float(np.mean(known)) if known else None
    return {"summary": result.summary(), "tasks": tasks}


def _markdown(report: dict, pictures: dict[str, str]) -> str:
    s = report["summary"]
    w = report.get("weights")
    lines = [f"# ARC evaluation: {s['dataset']}", ""]
    if w:
        lines += [f"Weights: `{w['path']}` (sha256 of the tensors `{w['sha256']}`)", ""]
    lines += [f"- **ARC Prize score** (micro over {s['num_test_outputs']} test outputs, truth in the top-2 attempts): "
              f"**{s['arc_prize_score']:.4f}** ({format_interval(s['arc_prize_score_ci95'])}, Wilson, unit: "
              "test outputs)",
              "- **pass@K, task macro** (upstream's ARC/pass@K: mean over "
              f"{s['num_tasks']} tasks of the fraction of test inputs solved in the top K): "
              + ", ".join(f"pass@{k} = {v:.4f}" for k, v in s["pass_at_k_task_macro"].items())
              + f"; pass@2 {format_interval(s['pass_at_2_task_macro_ci95'])} (Wilson, unit: tasks)",
              f"- {s['num_examples']} augmented predictions, voting by {s['weighting']}"
              + (" (POOLED with earlier evaluations)" if s["pooled_with_other_evaluations"] else ""),
              f"- ACT steps: max {s['max_steps']}, mean {s['mean_steps']:.2f}, early exit {s['early_exit']}",
              f"- timing: {s['timing']['examples_per_second']:.1f} examples/s overall, "
              f"{100 * s['timing']['share_outside_model']:.1f} % of the time outside the model",
              "",
              f"Per-token diagnostic (not a solve rate): token_accuracy = {s['token_accuracy']:.4f}; "
              f"well-formed predictions = {s['well_formed_predictions']:.4f}",
              "", "| output category | solved / test outputs | ARC Prize score | 95 % CI (Wilson) |", "|---|---|---|---|"]
    lines += [f"| {name} | {c['solved']} / {c['test_outputs']} | {c['arc_prize_score']:.4f} | "
              f"{c['ci95'][0]:.4f}-{c['ci95'][1]:.4f} |" for name, c in s.get("breakdown", {}).items()
              if c["test_outputs"]]
    lines += ["", "| task | test | solved (top-2) | truth rank (1 = best) | predictions | distinct | mean sigmoid(q_halt) | top votes |",
             "|---|---|---|---|---|---|---|---|"]
    for task, entry in report["tasks"].items():
        for t in entry["test"]:
            tops = ", ".join(f"{c['votes']}{'*' if c['correct'] else ''} ({c['shape'][0]}x{c['shape'][1]})"
                             for c in t["top"]) or "-"
            mq = "-" if t["mean_sigmoid_q_halt"] is None else f"{t['mean_sigmoid_q_halt']:.3f}"
            rank = "-" if t["truth_rank"] is None else str(t["truth_rank"])
            solved = "no output known" if t["solved"] is None else "yes" if t["solved"] else "no"
            lines.append(f"| {task} | {t['test_index']} | {solved} | {rank} | "
                         f"{t['predictions']} | {t['distinct_candidates']} | {mq} | {tops} |")
    lines += ["", "Top votes: vote count per candidate, best first; `*` marks the correct grid."]
    if pictures:
        lines += ["", "## Pictures", ""]
        for task, rel in pictures.items():
            lines += [f"### {task}", "", f"![{task}]({rel})", ""]
    return "\n".join(lines) + "\n"


def weights_record(weights: str | os.PathLike) -> dict[str, str]:
    """What a report records of the weights it evaluated: their path and the digest of their tensors."""
    from trm_kaggle.model.export import export_digest

    return {"path": str(weights), "sha256": export_digest(weights)}


def check_report_dir(out_dir: str | os.PathLike, weights: dict[str, str]) -> None:
    """Refuse a folder holding the report of other weights (another path and other tensors): a report is never
    written over another's. The same weights again (retrained in place, or a copy) replace their own report."""
    path = Path(out_dir) / "report.json"
    if not path.is_file():
        return
    try:
        old = read_json(path, "report.json").get("weights")
    except (TRMError, AttributeError):  # not a report of ours to judge: the write that follows says what is wrong
        return
    if not isinstance(old, dict) or not isinstance(old.get("path"), str):
        return  # a report of an older version: it did not say whose it is
    same_place = Path(old["path"]).resolve() == Path(weights["path"]).resolve()
    if not same_place and old.get("sha256") != weights["sha256"]:
        raise TRMError(f"{out_dir}: holds the report of other weights ({old['path']}); name another folder for the "
                       f"report of {weights['path']}, or remove that one")


def write_report(result: EvalResult, out_dir: str | os.PathLike, tasks: Sequence[str] | None = None,
                 first_n: int = 5, top: int = 5, attempts: int = 2, pictures: bool = True,
                 weights: str | os.PathLike | dict[str, str] | None = None) -> dict[str, Path]:
    """report.json + report.md for every task, and a PNG per chosen task (`tasks`, else the first `first_n`).

    `weights`: the export evaluated (its path, or `weights_record`'s answer): both files record its path and
    digest, and a folder holding the report of other weights is refused (`check_report_dir`)."""
    out = Path(out_dir)
    record = weights_record(weights) if weights is not None and not isinstance(weights, dict) else weights
    if record is not None:
        check_report_dir(out, record)
    out.mkdir(parents=True, exist_ok=True)
    report = task_report(result, top=top)
    if record is not None:
        report = {"weights": record, **report}
    chosen = list(tasks) if tasks else result.test_set.task_ids[:max(0, first_n)]
    unknown = [t for t in chosen if t not in result.test_set.num_tests]
    if unknown:
        raise TRMError(f"tasks not in the test set: {', '.join(unknown)}")
    paths: dict[str, Path] = {}
    pics: dict[str, str] = {}
    pngs: dict[Path, bytes] = {}
    for task in chosen if pictures else []:
        p = file_in(out / "pictures", task, ".png")  # a task id is data: encoded, never a path
        pngs[p] = task_picture_png(result, task, attempts=attempts)
        paths[f"picture:{task}"] = p
        pics[task] = "pictures/" + p.name.replace("%", "%25")  # the link is a URL: its % escaped
    markdown = _markdown(report, pics)
    # every part is made before the first is written: a picture that cannot be drawn leaves the old report whole
    atomic_write_json(out / "report.json", report, indent=1)
    if pngs:
        (out / "pictures").mkdir(exist_ok=True)
    for p, png in pngs.items():
        atomic_write_bytes(p, png)
    atomic_write_text(out / "report.md", markdown)  # UTF-8 whatever the locale (task ids such as é-tâche)
    paths["json"], paths["markdown"] = out / "report.json", out / "report.md"
    return paths


def _draw_grid(ax, grid: np.ndarray | None, title: str) -> None:
    from matplotlib.colors import ListedColormap

    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    if grid is None or grid.size == 0:
        ax.text(0.5, 0.5, "none", ha="center", va="center", fontsize=8, transform=ax.transAxes)
        return
    ax.imshow(grid, cmap=ListedColormap(ARC_PALETTE), vmin=0, vmax=9, interpolation="nearest")
    h, w = grid.shape
    ax.set_xticks(np.arange(-0.5, w, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, h, 1), minor=True)
    ax.set_axisbelow(False)
    ax.grid(which="minor", color="#555555", linewidth=0.4)
    ax.tick_params(which="minor", length=0)


def task_picture_png(result: EvalResult, task: str, attempts: int = 2) -> bytes:
    """PNG bytes: one row per test input with input, truth and the top `attempts` candidates."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise TRMError("grid pictures need matplotlib: pip install matplotlib") from None
    ts = result.test_set
    n = ts.num_tests[task]
    cols = 2 + attempts
    fig = Figure(figsize=(2.2 * cols, 2.3 * n))
    FigureCanvasAgg(fig)  # the Agg canvas, without touching pyplot's global backend
    axes = fig.subplots(n, cols, squeeze=False)
    for i in range(n):
        s = (task, i)
        ranked = result.votes.ranked(s, limit=attempts)
        rank = result.metrics.truth_rank.get(s, -1)
        _draw_grid(axes[i][0], ts.inputs[s], f"test {i} input")
        _draw_grid(axes[i][1], ts.truths.get(s), "truth")
        for a in range(attempts):
            c = ranked[a] if a < len(ranked) else None
            title = f"attempt {a + 1}" + ("" if c is None else f": {c['votes']} votes" + (" ✓" if rank == a else ""))
            _draw_grid(axes[i][2 + a], None if c is None else c["grid"], title)
    fig.suptitle(task, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def save_task_picture(result: EvalResult, task: str, path: str | os.PathLike, attempts: int = 2) -> Path:
    atomic_write_bytes(path, task_picture_png(result, task, attempts))
    return Path(path)
