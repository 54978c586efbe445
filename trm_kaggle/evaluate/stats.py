"""Error bars and categories for ARC scores: 95 % Wilson intervals, and a breakdown by kind of output.

A score measured on a hundred test outputs is uncertain by several points, and a score of 0 on a few dozen says
little; every report therefore prints an interval beside it. The Wilson score interval of a proportion
p = k / n at z (1.96 for 95 %) is

    centre = (p + z^2 / 2n) / (1 + z^2 / n)
    half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)

It stays inside [0, 1] and is informative at k = 0, where the normal approximation has zero width.

Units: the ARC Prize score is a proportion of test outputs (k solved of n). The task-macro pass@2 is a proportion
of tasks: n = tasks, k = the sum over tasks of the fraction of their test inputs solved in the top 2 (a task with
one of two test inputs solved counts 0.5).

The breakdown splits the test outputs by whether the output has its input's shape ("same shape") or not
("reshaped"), and by the larger side of the output grid in the buckets of `SIZE_EDGES` (1-10, 11-20, 21-30).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

Z95 = 1.959963984540054  # the 97.5 % quantile of the standard normal
SIZE_EDGES = (10, 20, 30)  # buckets of the output's larger side: 1-10, 11-20, 21-30


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for `successes` of `n`; (0, 1) when n is 0."""
    if not -1e-9 * n <= successes <= max(n, 0) * (1 + 1e-9):  # tolerance: k may be a sum of fractions
        raise ValueError(f"successes must lie in [0, n]: {successes} of {n}")
    if n <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, successes / n))
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def format_interval(ci: Sequence[float]) -> str:
    return f"95 % CI {ci[0]:.4f}-{ci[1]:.4f}"


def size_bucket(shape: tuple[int, int]) -> str:
    """The bucket of an output grid by its larger side ('1-10', '11-20', '21-30')."""
    side, low = max(shape), 1
    for edge in SIZE_EDGES:
        if side <= edge:
            return f"{low}-{edge}"
        low = edge + 1
    return f">{SIZE_EDGES[-1]}"


def category_breakdown(slots: Sequence, inputs: Mapping, truths: Mapping, solved: Mapping) -> dict[str, dict]:
    """Solved test outputs per category (see the module docstring), each with its Wilson interval.

    slots: the (task_id, test_index) of every test output; inputs/truths: their grids; solved: slot -> bool.
    """
    groups: dict[str, list[bool]] = {"same shape": [], "reshaped": []}
    low = 1
    for edge in SIZE_EDGES:
        groups[f"largest side {low}-{edge}"] = []
        low = edge + 1
    for s in slots:
        truth = np.asarray(truths[s])
        hit = bool(solved.get(s, False))
        groups["same shape" if np.asarray(inputs[s]).shape == truth.shape else "reshaped"].append(hit)
        groups.setdefault(f"largest side {size_bucket(truth.shape)}", []).append(hit)
    out = {}
    for name, hits in groups.items():
        k, n = int(sum(hits)), len(hits)
        out[name] = {"test_outputs": n, "solved": k, "arc_prize_score": k / n if n else 0.0,
                     "ci95": list(wilson_interval(k, n))}
    return out


def format_breakdown(breakdown: Mapping[str, Mapping]) -> str:
    """One line per category: solved / outputs, score and interval (empty categories left out)."""
    return "\n".join(f"  {name:<20} {c['solved']:>4} / {c['test_outputs']:<4} {c['arc_prize_score']:.4f}  "
                     f"({format_interval(c['ci95'])})"
                     for name, c in breakdown.items() if c["test_outputs"])


def dtype_words(s: dict) -> str:
    """The activations' dtype that ran, as a summary's line ends with it ("" where the model did not say)."""
    return f", activations in {s['dtype']}" if s.get("dtype") else ""
