"""Scoring a dataset without ARC's voting: Sudoku, Maze (what `build-sudoku` and `build-maze` write) or any other
dataset whose test split holds labels and no test_puzzles.json.

    result = score_dataset(model, "data/sudoku-extreme-1k", EvaluateConfig(batch_size=256))
    result.exact, result.exact_ci95        # solved examples (every label token right), Wilson interval
    print(format_dataset_metrics(result.summary()))

Each test example is one answer: exact accuracy is the share of examples with every label token right, with a
95 % Wilson interval (unit: examples); token accuracy is the mean over examples of the share of their label
tokens right, with a normal interval over examples (unit: examples, not tokens: the tokens of one example are not
independent). The sums come from `ContinuousRollout.score`, which training's test-split check runs too, so the
two report the same numbers for the same weights and steps.

Test-time levers (docs/test_time.md): `trajectories` K with `trajectory_noise` runs K noisy trajectories per
example and the `trajectory_select` rule answers with one of them; `test_depth` runs that many ACT steps and
counts the examples whose prediction settled.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from trm_kaggle.config import EvaluateConfig
from trm_kaggle.data import IGNORE_LABEL_ID, PuzzleLoader
from trm_kaggle.errors import DataError
from trm_kaggle.evaluate.predict import (activation_dtype, check_model_fits, _halt_max_steps, _sync, dataset_argument,
                                         evaluate_config, model_argument, placed)
from trm_kaggle.evaluate.stats import Z95, dtype_words, format_interval, wilson_interval
from trm_kaggle.jsonio import is_regular
from trm_kaggle.model import ContinuousRollout, balanced_slots, counts_settled


def is_arc_dataset(dataset_dir: str | os.PathLike) -> bool:
    """Whether `dataset_dir` is scored by ARC's vote (it has the test_puzzles.json an ARC builder writes)."""
    return is_regular(Path(dataset_dir) / "test_puzzles.json", "test_puzzles.json")  # a FIFO: said, not absent


@dataclass
class DatasetResult:
    """What one scoring of a dataset's test split produced (module docstring)."""

    dataset_dir: str
    examples: int
    exact: float
    exact_ci95: tuple[float, float]
    token_accuracy: float
    token_accuracy_ci95: tuple[float, float]
    mean_steps: float
    max_steps: int
    trajectories: int
    trajectory_noise: float
    trajectory_select: str
    noisy_chosen: int  # examples answered by a noisy trajectory (not trajectory 0)
    settled: int | None  # examples whose prediction settled (test_depth), None: not counted
    early_exit: bool
    seconds: float
    forward_rows: int
    dtype: str  # the activations' dtype that ran (`auto` and `export` resolved; "" for a model that does not say)

    def summary(self) -> dict:
        return {"dataset": self.dataset_dir, "kind": "dataset", "examples": self.examples,
                "exact_accuracy": self.exact, "exact_accuracy_ci95": list(self.exact_ci95),
                "token_accuracy": self.token_accuracy, "token_accuracy_ci95": list(self.token_accuracy_ci95),
                "mean_steps": self.mean_steps, "max_steps": self.max_steps, "early_exit": self.early_exit,
                "trajectories": self.trajectories, "trajectory_noise": self.trajectory_noise,
                "trajectory_select": self.trajectory_select, "noisy_chosen": self.noisy_chosen,
                "settled": self.settled, "forward_rows": self.forward_rows, "dtype": self.dtype,
                "timing": {"seconds_total": self.seconds,
                           "examples_per_second": self.examples / self.seconds if self.seconds > 0 else float("nan")}}


def _mean_interval(total: float, total_sq: float, n: int) -> tuple[float, float]:
    """95 % normal interval of a mean of n values in [0, 1] from their sum and sum of squares, kept in [0, 1]."""
    mean = total / n
    var = max(0.0, total_sq / n - mean * mean) * n / max(1, n - 1)
    half = Z95 * math.sqrt(var / n)
    return max(0.0, mean - half), min(1.0, mean + half)


@torch.no_grad()
def score_dataset(model: torch.nn.Module, dataset_dir: str | os.PathLike, cfg: EvaluateConfig | None = None, *,
                  device: str | torch.device | None = None, **settings) -> DatasetResult:
    """Exact and token accuracy of `model` on the test split of `dataset_dir` under `cfg` (batch_size,
    early_exit, max_steps / test_depth, trajectories, max_tasks: the first N examples; or a dict of its fields).
    A split with nothing to score is a DataError before any inference: no data is not a zero. The model and the
    device are taken as `evaluate` takes them (a path or weights holding NaN or inf refused, meta refused, the
    model put back where it was when the call fails); the q values and logits stay on the device, summed there,
    and are not checked for NaN."""
    model = model_argument(model)
    cfg = evaluate_config(cfg, settings)
    dataset_argument(dataset_dir)
    with placed(model, device) as target:
        return _score(model, dataset_dir, cfg, target)


def _score(model: torch.nn.Module, dataset_dir: str | os.PathLike, cfg: EvaluateConfig,
           device: torch.device) -> DatasetResult:
    """`score_dataset` on its checked arguments, the model on `device`."""
    t0 = time.perf_counter()
    loader = PuzzleLoader(dataset_dir, split="test", global_batch_size=cfg.batch_size, test_mode=True)
    check_model_fits(model, dataset_dir, loader.metadata)
    n = loader.num_examples if cfg.max_tasks is None else min(loader.num_examples, cfg.max_tasks)
    if n == 0:
        raise DataError(f"{dataset_dir}: the test split holds no examples: nothing to score")
    steps = cfg.steps or _halt_max_steps(model)
    K = cfg.trajectories
    slots = cfg.batch_size if device.type == "xla" else balanced_slots(n * K, cfg.batch_size)
    rollout = ContinuousRollout(model, slots, steps, cfg.stops_at_first_halt, device=device, trajectories=K,
                                noise=cfg.trajectory_noise, select=cfg.selection, seed=cfg.trajectory_seed,
                                track_settled=counts_settled(cfg.test_depth))

    def source():
        left = n
        for item in loader:
            take = min(item.num_real, left)
            if take:
                yield {k: item.batch[k][:take] for k in ("inputs", "labels", "puzzle_identifiers")}
            left -= take
            if left <= 0:
                return

    was_training = model.training
    model.eval()
    try:
        # the loader's batches mark an ignored label IGNORE_LABEL_ID, whatever id the dataset's files use
        totals = rollout.score(source(), IGNORE_LABEL_ID)
        _sync(device)
    finally:
        model.train(was_training)
    t = dict(zip(ContinuousRollout.SCORE_FIELDS, totals.tolist()))  # one host read
    count = int(t["examples"])
    if count == 0:
        raise DataError(f"{dataset_dir}: none of the {n} test examples has a label to score")
    return DatasetResult(str(dataset_dir), count, t["exact"] / count, wilson_interval(t["exact"], count),
                         t["token_accuracy"] / count,
                         _mean_interval(t["token_accuracy"], t["token_accuracy_sq"], count), t["steps"] / count,
                         steps, K, cfg.trajectory_noise, cfg.selection, int(t["noisy_chosen"]),
                         int(t["settled"]) if counts_settled(cfg.test_depth) else None, cfg.stops_at_first_halt,
                         time.perf_counter() - t0, rollout.rows_forwarded, activation_dtype(model, device))


def format_dataset_metrics(s: dict) -> str:
    """`DatasetResult.summary()` as printed lines, each number under its own name."""
    lines = [f"exact accuracy (examples with every label token right, over {s['examples']:,} test examples): "
             f"{s['exact_accuracy']:.4f} ({format_interval(s['exact_accuracy_ci95'])}, Wilson, unit: examples)",
             f"token accuracy (mean over examples of their label tokens right): {s['token_accuracy']:.4f} "
             f"({format_interval(s['token_accuracy_ci95'])}, normal, unit: examples)",
             f"ACT steps: {s['mean_steps']:.2f} on average of at most {s['max_steps']}"
             + (" (early exit)" if s["early_exit"] else "") + dtype_words(s)]
    if s["trajectories"] > 1:
        lines.append(f"trajectories: {s['trajectories']} per example, noise {s['trajectory_noise']:g} x RMS, "
                     f"selected by {s['trajectory_select']}; {s['noisy_chosen']:,} of {s['examples']:,} answered by "
                     f"a noisy trajectory ({s['forward_rows']:,} rows forwarded)")
    if s["settled"] is not None:
        lines.append(f"settled: {s['settled']:,} of {s['examples']:,} examples (the predictions of their last 3 "
                     f"ACT steps equal) after {s['max_steps']} steps")
    lines.append(f"{s['timing']['seconds_total']:.1f} s, {s['timing']['examples_per_second']:.1f} examples/s")
    return "\n".join(lines)
