"""The report of an ARC evaluation (`trm_kaggle.evaluate.pipeline.evaluate`'s EvalResult): the metrics as
printed lines, the per-task table, report.json and report.md with grid pictures, and the record of the weights
it evaluated.

    print(format_metrics(result.summary()))
    write_report(result, "out/eval", tasks=["0934a4d8"])   # report.json, report.md, PNGs
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Sequence

import numpy as np

from trm_kaggle.atomic import (Found, atomic_directory, atomic_write_bytes, atomic_write_json, atomic_write_text,
                               found_at, replace_problem, taken_problem)
from trm_kaggle.config import path_argument, texts_argument, whole_argument
from trm_kaggle.errors import DataError, TRMError, resource_line
from trm_kaggle.evaluate.stats import dtype_words, format_breakdown, format_interval
from trm_kaggle.jsonio import read_json
from trm_kaggle.names import file_in, place_from, shown as quoted
from trm_kaggle.wording import count, one_line, type_name

if TYPE_CHECKING:  # the report reads results; it runs no model (and imports no torch)
    from trm_kaggle.evaluate.pipeline import EvalResult

#: Tasks one report draws at most (each is a picture): `evaluate --first`, `evaluate_export(first=...)` and
#: `write_report(first_n=...)` alike.
MAX_DRAWN = 10_000

# The standard ARC palette, colours 0..9.
ARC_PALETTE = ("#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
               "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25")


def format_metrics(s: dict) -> str:
    """The evaluation's numbers (`EvalResult.summary()`), each under its own unmistakable name.

    `s["pooled_evaluations"]` (set by the caller that pooled) puts a warning line first."""
    passk = ", ".join(f"pass@{k} {_number(v)}" for k, v in s["pass_at_k_task_macro"].items())
    t = s["timing"]
    lines = []
    pooled = s.get("pooled_evaluations", 0)
    if pooled:
        lines.append(f"POOLED with {pooled} earlier evaluation{'s' if pooled > 1 else ''} (upstream's aggregated "
                     "voting): the numbers below are not this model's alone")
    if s.get("unlabeled_test_outputs"):
        lines.append(f"{count(s['unlabeled_test_outputs'], 'test output')} with no known answer: predicted, not "
                     "scored (the numbers below leave them out)")
    if not s["num_test_outputs"]:  # no data is not a zero
        lines.append("no test output with a known answer: nothing scored")
        return "\n".join(lines)
    if cut := _cut_line(s):
        lines.append(cut)
    if s["arc_prize_score"] is None:  # the deadline came before the first prediction
        lines.append("nothing was predicted: nothing scored")
        return "\n".join(lines)
    lines += [
        f"ARC Prize score (micro-average over {s['num_test_outputs']} test outputs, 2 attempts): "
        f"{s['arc_prize_score']:.4f} ({format_interval(s['arc_prize_score_ci95'])}, Wilson, unit: test outputs)",
        f"per-task macro pass@K over {s['num_tasks']} tasks (upstream's ARC/pass@K): {passk}",
        *([f"pass@2 (task macro) {s['pass_at_k_task_macro']['2']:.4f} "
           f"({format_interval(s['pass_at_2_task_macro_ci95'])}, Wilson, unit: tasks)"]
          if s.get("pass_at_2_task_macro_ci95") else []),  # ks without 2: no pass@2, no interval
        f"token_accuracy (per token over all augmented copies; NOT a solve rate): {_number(s['token_accuracy'])}",
    ]
    if s.get("breakdown"):
        lines += ["ARC Prize score by output (solved / test outputs, score, interval):",
                  format_breakdown(s["breakdown"])]
    if s.get("trajectories", 1) > 1:
        lines.append(f"trajectories: {s['trajectories']} per example, noise {s['trajectory_noise']:g} x RMS, each "
                     f"one a vote ({s['prediction_rows']:,} predictions)")
    if s.get("settled") is not None:
        lines.append(f"settled: {s['settled']:,} of {s['prediction_rows']:,} predictions (the predictions of their "
                     f"last 3 ACT steps equal) after {s['max_steps']} steps")
    lines.append(f"{s['num_examples']:,} examples, {t['examples_per_second']:.1f} examples/s, "
                 f"{100 * t['share_outside_model']:.1f} % of the time outside the model{dtype_words(s)}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    """A measure for a line of text: None (nothing measured) is said so, never printed as nan or 0."""
    return "not measured" if value is None else f"{value:.4f}"


def _cut_line(s: dict) -> str | None:
    """The words for an evaluation its deadline cut (`summary()`'s cut_test_outputs), or None."""
    if not s.get("cut_test_outputs"):
        return None
    return (f"CUT by the deadline: {s['cut_test_outputs']:,} of {count(s['num_test_outputs'], 'test output')} lost "
            f"examples before their prediction ({s.get('predicted_rows', 0):,} of {s['prediction_rows']:,} "
            "predictions made); their missing votes score as unsolved")


def nothing_to_score(result: EvalResult) -> str | None:
    """Why `result` has no score to report (no labeled test output, or none predicted), None when it has one."""
    if not result.test_set.truths:
        return (f"{result.dataset_dir}: none of the {count(len(result.test_set.slots), 'test output')} has a known "
                "answer: nothing to score")
    if not len(result.predictions):
        return f"{result.dataset_dir}: the test split holds no examples: nothing to score"
    if not (result.predictions.steps >= 0).any():
        return f"{result.dataset_dir}: the deadline came before the first prediction: nothing to score"
    return None


def format_task_id_table(summaries: dict[str, dict]) -> str:
    """A markdown table, one row per `--task-ids` mode (`summary()` of each evaluation): does the model need its
    own task id?"""
    lines = ["| task ids | ARC Prize score (95 % CI) | pass@2, tasks (95 % CI) | token_accuracy |", "|---|---|---|---|"]
    for mode, s in summaries.items():
        if s["arc_prize_score"] is None or not s.get("pass_at_2_task_macro_ci95"):
            lines.append(f"| {mode} | not scored | not scored | {_number(s['token_accuracy'])} |")
            continue
        a, p = s["arc_prize_score_ci95"], s["pass_at_2_task_macro_ci95"]
        lines.append(f"| {mode} | {s['arc_prize_score']:.4f} ({a[0]:.4f}-{a[1]:.4f}) | "
                     f"{s['pass_at_k_task_macro'].get('2', float('nan')):.4f} ({p[0]:.4f}-{p[1]:.4f}) | "
                     f"{_number(s['token_accuracy'])} |")
    return "\n".join(lines)


def _result_argument(result: object) -> EvalResult:
    """`result`, when it is `evaluate`'s EvalResult; else a TypeError naming it (a dict was an AttributeError)."""
    from trm_kaggle.evaluate.pipeline import EvalResult  # here: the report runs no model, a result brought torch

    if not isinstance(result, EvalResult):
        raise TypeError(f"result: expected an EvalResult (`evaluate`'s), got {type_name(result)}")
    return result


#: The candidates a report lists per test input at most (`top`): write_report and task_report alike.
MAX_TOP = 10**6
#: The candidates a picture draws per test input at most (`attempts`): past 10 none can be read.
MAX_ATTEMPTS_DRAWN = 10


def task_report(result: EvalResult, top: int = 5) -> dict:
    """Per task and test input: solved (truth in the top-2), truth rank (1 = best, None = not among the
    candidates), number of predictions and of distinct candidates, mean sigmoid(q_halt), top votes."""
    result, top = _result_argument(result), whole_argument("top", top, 1, MAX_TOP)  # 0 and -1 listed none or all
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
    lines = [f"# ARC evaluation: {one_line(s['dataset'])}", ""]
    if w:
        lines += [f"Weights: `{w['path']}` (sha256 of the tensors `{w['sha256']}`)", ""]
    if cut := _cut_line(s):
        lines += [f"**{cut}**", ""]
    lines += [f"- **ARC Prize score** (micro over {s['num_test_outputs']} test outputs, truth in the top-2 attempts): "
              f"**{s['arc_prize_score']:.4f}** ({format_interval(s['arc_prize_score_ci95'])}, Wilson, unit: "
              "test outputs)",
              "- **pass@K, task macro** (upstream's ARC/pass@K: mean over "
              f"{s['num_tasks']} tasks of the fraction of test inputs solved in the top K): "
              + ", ".join(f"pass@{k} = {v:.4f}" for k, v in s["pass_at_k_task_macro"].items())
              + (f"; pass@2 {format_interval(s['pass_at_2_task_macro_ci95'])} (Wilson, unit: tasks)"
                 if s.get("pass_at_2_task_macro_ci95") else ""),
              f"- {s['prediction_rows']} augmented predictions, voting by {s['weighting']}"
              + (" (POOLED with earlier evaluations)" if s["pooled_with_other_evaluations"] else ""),
              f"- ACT steps: max {s['max_steps']}, mean {_steps(s['mean_steps'])}, early exit {s['early_exit']}"
              + (f"; settled {s['settled']} of {s['prediction_rows']} predictions (last 3 steps equal)"
                 if s.get("settled") is not None else ""),
              *([f"- trajectories: {s['trajectories']} per augmented copy, noise {s['trajectory_noise']:g} x RMS, "
                 "each one a vote"] if s.get("trajectories", 1) > 1 else []),
              f"- timing: {s['timing']['examples_per_second']:.1f} examples/s overall, "
              f"{100 * s['timing']['share_outside_model']:.1f} % of the time outside the model",
              "",
              f"Per-token diagnostic (not a solve rate): token_accuracy = {_number(s['token_accuracy'])}; "
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


def _steps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def weights_record(weights: str | os.PathLike) -> dict[str, str]:
    """What a report records of the weights it evaluated: their path and the digest of their tensors."""
    from trm_kaggle.model import export_digest

    return {"path": str(weights), "sha256": export_digest(weights)}


REPORT_KIND = "evaluation report"  # the owner record's kind: a report folder is replaced only by another report


def _placed(out_dir: str | os.PathLike, weights: dict[str, str]) -> dict[str, str]:
    """The weights record a report in `out_dir` holds: with where they lie from that folder (`from_report`), so
    the same folders named another way (an absolute path, from inside them, moved together) are known again."""
    place = place_from(weights["path"], out_dir)
    return {**weights, "from_report": place} if place is not None else dict(weights)


def check_report_dir(out_dir: str | os.PathLike, weights: dict[str, str]) -> None:
    """Refuse a folder holding the report of other weights (another path and other tensors): a report is never
    written over another's. The same weights again (retrained in place, or a copy) replace their own report; the
    same place is the same path resolved from here, or the same place seen from the report's folder."""
    path = Path(out_dir) / "report.json"
    if not path.is_file():
        return
    try:
        old = read_json(path, "report.json").get("weights")
    except (TRMError, AttributeError):  # not a report of ours to judge: the write that follows says what is wrong
        return
    if not isinstance(old, dict) or not isinstance(old.get("path"), str):
        return  # a report of an older version: it did not say whose it is
    same_place = Path(old["path"]).resolve() == Path(weights["path"]).resolve() or (
        isinstance(old.get("from_report"), str) and old["from_report"] == place_from(weights["path"], out_dir))
    if not same_place and old.get("sha256") != weights["sha256"]:
        raise TRMError(f"{out_dir}: holds the report of other weights ({old['path']}); name another folder for the "
                       f"report of {weights['path']}, or remove that one")


def checked_report_dir(out_dir: str | os.PathLike, weights: str | os.PathLike, what: str | None = None
                       ) -> tuple[dict[str, str], Found]:
    """(`weights_record(weights)`, `found_at(out_dir)`), for `write_report`'s `weights` and `found`, once `out_dir`
    is known to take the report, before any inference (`evaluate_export` and the evaluate notebook): a folder
    holding the report of other weights, or one that is no report of ours, is a TRMError, its words led by `what`
    where given (the notebook's REPORT_DIR: it was refused by `write_report`, once the whole evaluation had run)."""
    found, record = found_at(out_dir), weights_record(weights)
    try:
        check_report_dir(out_dir, record)
    except TRMError as e:
        if what is None:
            raise
        raise TRMError(f"{what} {e}") from None
    if problem := replace_problem(out_dir, REPORT_KIND, *([what] if what else [])):
        raise TRMError(problem)
    return record, found


def _check_not_taken(out: Path, found: Found | None) -> None:
    """TRMError when another command wrote a report at `out` since `found`: said as the race it is, before
    `check_report_dir` would call it the report of other weights."""
    if found is not None and (problem := taken_problem(out, REPORT_KIND, found)):
        raise TRMError(problem)


def chosen_tasks(items: Sequence[str], known: Collection[str]) -> list[str]:
    """The task ids `evaluate --tasks` names: each item that is a task id of `known` is taken whole (an id may hold
    a comma: build-arc takes one), any other is split at its commas and its white space ("a,b", "a, b" or "a b" in
    one quoted argument: the space was kept, and " b" refused as no task while the refusal listed b); empty parts
    are dropped, repeats kept once. An id the test split lacks stays in the answer for the caller to name."""
    out: list[str] = []
    if isinstance(items, str):  # one id (`-p TASKS 0934a4d8` in a notebook): its letters were taken as ids
        items = [items]
    for item in items:
        out += [item] if item in known else [t for t in re.split(r"[\s,]+", item) if t]
    return list(dict.fromkeys(out))


def tasks_problem(items: Sequence[str], known: Collection[str], data: object, name: str) -> str | None:
    """What is wrong with the task ids `items` to draw (`evaluate --tasks`, `evaluate_export(tasks=...)`: `name`)
    among the task ids `known` of the test split of `data`, or None. Both ask before any inference: an id the split
    lacks was found by `write_report`, after the whole evaluation."""
    chosen = chosen_tasks(items, known)
    if not chosen:
        return f"{name} names no task (give task ids separated by spaces or commas)"
    unknown = [t for t in chosen if t not in known]
    if unknown:
        # quoted and escaped, each id: what was typed (a space, a control character) is seen as it is
        return (f"{name}: {', '.join(map(quoted, unknown[:5]))}{' ...' if len(unknown) > 5 else ''} not in the "
                f"test split of {data} ({count(len(known), 'task')}, e.g. {', '.join(map(quoted, list(known)[:3]))})")
    return None


def write_report(result: EvalResult, out_dir: str | os.PathLike, tasks: Sequence[str] | None = None,
                 first_n: int = 5, top: int = 5, attempts: int = 2, pictures: bool = True,
                 weights: str | os.PathLike | dict[str, str] | None = None, found: Found | None = None
                 ) -> dict[str, Path]:
    """report.json + report.md for every task, and a PNG per chosen task (`tasks`, else the first `first_n`).

    `weights`: the export evaluated (its path, or `weights_record`'s answer): both files record its path and
    digest, and a folder holding the report of other weights is refused (`check_report_dir`). `found`: what stood
    at `out_dir` when the evaluation started (`found_at`): a report another command wrote there meanwhile stands,
    and this one ends with one line (`taken_problem`)."""
    result, out = _result_argument(result), Path(path_argument("out_dir", out_dir, "a report folder"))
    # the call's counts, before any work: attempts=-1 was an IndexError while drawing, 0 a picture of no attempt
    first_n, top = whole_argument("first_n", first_n, 0, MAX_DRAWN), whole_argument("top", top, 1, MAX_TOP)
    attempts = whole_argument("attempts", attempts, 1, MAX_ATTEMPTS_DRAWN)
    tasks = None if tasks is None else texts_argument("tasks", tasks, "a task id")  # [5] was re's TypeError
    weights = _weights_argument(weights, record_too=True)
    problem = nothing_to_score(result)
    if problem:  # no data is not a zero: nothing is written
        raise DataError(problem)
    record = weights_record(weights) if weights is not None and not isinstance(weights, dict) else weights
    _check_not_taken(out, found)
    if record is not None:
        check_report_dir(out, record)
    report = task_report(result, top=top)
    if record is not None:
        report = {"weights": _placed(out, record), **report}
    # `evaluate --tasks`'s words (`tasks_problem`): each id quoted and escaped, a control character in one was
    # written to the terminal as it was
    if tasks and (problem := tasks_problem(tasks, result.test_set.num_tests, result.dataset_dir, "tasks")):
        raise TRMError(problem)
    chosen = chosen_tasks(tasks, result.test_set.num_tests) if tasks else result.test_set.task_ids[:max(0, first_n)]
    paths: dict[str, Path] = {}
    pics: dict[str, str] = {}
    pngs: dict[Path, bytes] = {}
    for task in chosen if pictures else []:
        p = file_in(out / "pictures", task, ".png")  # a task id is data: encoded, never a path
        pngs[p] = task_picture_png(result, task, attempts=attempts)
        paths[f"picture:{task}"] = p
        pics[task] = "pictures/" + p.name.replace("%", "%25")  # the link is a URL: its % escaped
    markdown = _markdown(report, pics)
    # every part is made before the first is written (a picture that cannot be drawn leaves the old report whole),
    # and the folder is replaced as one: a full disk or a Ctrl-C midway never mixes the old report with the new
    with atomic_directory(out, kind=REPORT_KIND, found=found) as tmp:
        atomic_write_json(tmp / "report.json", report, indent=1)
        if pngs:
            (tmp / "pictures").mkdir()
        for p, png in pngs.items():
            atomic_write_bytes(tmp / "pictures" / p.name, png)
        atomic_write_text(tmp / "report.md", markdown)  # UTF-8 whatever the locale (task ids such as é-tâche)
    paths["json"], paths["markdown"] = out / "report.json", out / "report.md"
    return paths


def write_dataset_report(summary: dict, out_dir: str | os.PathLike, weights: dict[str, str] | None = None,
                         found: Found | None = None) -> dict[str, Path]:
    """report.json and report.md of a dataset scored without a vote (`DatasetResult.summary()`); `found` as
    `write_report`'s."""
    from trm_kaggle.evaluate.dataset import format_dataset_metrics

    if not isinstance(summary, dict):  # a list was "list indices must be integers"
        raise TypeError(f"summary: expected a dict (`DatasetResult.summary()`), got {type_name(summary)}")
    out, weights = Path(path_argument("out_dir", out_dir, "a report folder")), _weights_argument(weights)
    _check_not_taken(out, found)
    if weights is not None:
        check_report_dir(out, weights)
    report = {"weights": _placed(out, weights), "summary": summary} if weights is not None else {"summary": summary}
    lines = [f"# Evaluation: {one_line(summary['dataset'])}", ""]  # a name read from a file: one line
    if weights:
        lines += [f"Weights: `{weights['path']}` (sha256 of the tensors `{weights['sha256']}`)", ""]
    lines += [f"- {line}" for line in format_dataset_metrics(summary).splitlines()]
    with atomic_directory(out, kind=REPORT_KIND, found=found) as tmp:  # replaced as one, as `write_report`'s
        atomic_write_json(tmp / "report.json", report, indent=1)
        atomic_write_text(tmp / "report.md", "\n".join(lines) + "\n")
    return {"json": out / "report.json", "markdown": out / "report.md"}


def _weights_argument(weights: object, record_too: bool = False) -> object:
    """`weights`, when None, `weights_record`'s {"path", "sha256"} or (`record_too`: write_report's) the path of an
    export; else a TypeError naming it ({"path": "x"} was KeyError 'sha256')."""
    if weights is None or (record_too and isinstance(weights, (str, os.PathLike))):
        return weights
    if not (isinstance(weights, dict) and isinstance(weights.get("path"), str)
            and isinstance(weights.get("sha256"), str)):
        raise TypeError(f"weights: expected {'the path of an export or ' if record_too else ''}`weights_record`'s "
                        f"{{'path': str, 'sha256': str}}, got {type_name(weights)}")
    return weights


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
    except ImportError as e:  # not installed; or installed, and no memory left to load it (`ulimit -v`)
        raise TRMError(resource_line(e) or "grid pictures need matplotlib: pip install matplotlib") from None
    result, attempts = _result_argument(result), whole_argument("attempts", attempts, 1, MAX_ATTEMPTS_DRAWN)
    if not isinstance(task, str) or task not in result.test_set.num_tests:  # 'nope' was KeyError 'nope'
        raise ValueError(f"task {quoted(task) if isinstance(task, str) else type_name(task)} is not a task of the "
                         f"test set of {one_line(result.dataset_dir)}")
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
