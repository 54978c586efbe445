"""Generated ARC-style tasks whose rule is known: flips, rotations, colour swaps, translations.

    tasks = rule_tasks(24, seed=0)                      # ArcTask objects, ids rule000_flip, rule001_rotate, ...
    write_challenges(tasks, "x_training_challenges.json", "x_training_solutions.json")

Each task draws one rule and its parameter, then random grids (sides `min_side`..`max_side`, about half
the cells background) for its demonstration pairs and test inputs, and applies the rule to get every output:

* `flip`: left-right or up-down; `rotate`: 90, 180 or 270 degrees; `transpose`: about either diagonal;
* `swap`: two colours trade places (both occur in every input); other colours stay;
* `translate`: the content moves one cell (in one of 8 directions) inside the same-sized grid; what leaves
  the grid is lost, what enters is background.

The answer is a function of the input and the rule alone, so a model that has learnt the rules and knows
which one a task uses (from its puzzle embedding) solves the task exactly: experiments with a known ceiling
(`notebooks/regression/learn_arc_small` and `ttt_gain`). Everything comes from `seed`: the same arguments
give the same tasks on every machine.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from trm_kaggle.config import MAX_SEED, whole_argument
from trm_kaggle.data.arc.tasks import ArcTask
from trm_kaggle.data.augment import dihedral
from trm_kaggle.names import task_id_problem
from trm_kaggle.wording import clipped, type_name

RULES = ("flip", "rotate", "transpose", "swap", "translate")
_DIHEDRAL = {"flip": (4, 5), "rotate": (1, 2, 3), "transpose": (6, 7)}  # transform ids of trm_kaggle.data.augment
_STEPS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]


def translate(grid: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """The grid's content moved by (dy, dx) cells; cells moved in from outside are background (0)."""
    h, w = grid.shape
    out = np.zeros_like(grid)
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = grid[max(-dy, 0):h - max(dy, 0),
                                                                      max(-dx, 0):w - max(dx, 0)]
    return out


def _random_grid(rng: np.random.Generator, min_side: int, max_side: int, colours: int) -> np.ndarray:
    h, w = rng.integers(min_side, max_side + 1, size=2)
    grid = rng.integers(1, colours + 1, size=(h, w))
    grid[rng.random((h, w)) < 0.5] = 0
    return grid.astype(np.uint8)


def _apply(rule: str, param, grid: np.ndarray) -> np.ndarray:
    if rule in _DIHEDRAL:
        return np.ascontiguousarray(dihedral(grid, param))
    if rule == "swap":
        a, b = param
        out = grid.copy()
        out[grid == a], out[grid == b] = b, a
        return out
    return translate(grid, *param)


def _input_for(rule: str, param, rng: np.random.Generator, min_side: int, max_side: int,
               colours: int) -> np.ndarray:
    while True:  # redraw until the pair shows the rule: both swapped colours present, content that moves
        grid = _random_grid(rng, min_side, max_side, colours)
        if rule == "swap" and not all((grid == c).any() for c in param):
            continue
        if not np.array_equal(_apply(rule, param, grid), grid):
            return grid


def make_rule_task(rng: np.random.Generator, task_id: str, rule: str, n_train: int = 3, n_test: int = 1,
                   min_side: int = 2, max_side: int = 5, colours: int = 4) -> ArcTask:
    """One task with `rule` and a random parameter of it (see the module docstring)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; rules: {', '.join(RULES)}")
    if not 1 <= min_side <= max_side <= 30 or not 2 <= colours <= 9:
        raise ValueError(f"need 1 <= min_side <= max_side <= 30 and 2 <= colours <= 9, got sides "
                         f"{min_side}..{max_side}, {colours} colours")
    if rule in _DIHEDRAL:
        param = int(rng.choice(_DIHEDRAL[rule]))
    elif rule == "swap":
        param = tuple(int(c) for c in rng.choice(np.arange(1, colours + 1), size=2, replace=False))
    else:
        param = _STEPS[int(rng.integers(len(_STEPS)))]
    inputs = [_input_for(rule, param, rng, min_side, max_side, colours) for _ in range(n_train + n_test)]
    outputs = [_apply(rule, param, x) for x in inputs]
    return ArcTask(task_id, list(zip(inputs[:n_train], outputs[:n_train])), inputs[n_train:], outputs[n_train:])


MAX_RULE_TASKS = 1_000_000  # a million tasks is far past any sweep's or test's need, and minutes of work


def rule_tasks(n: int, seed: int, rules: Sequence[str] = RULES, prefix: str = "rule", **kwargs) -> list[ArcTask]:
    """`n` tasks cycling through `rules` (ids `<prefix>000_<rule>`, ...), each from its own seeded generator."""
    if not rules:
        raise ValueError("need at least one rule")
    n = whole_argument("n", n, 1, MAX_RULE_TASKS)  # 2**63 ran (in memory) until the machine gave out
    seed = whole_argument("seed", seed, 0, MAX_SEED)  # -1 was numpy's "expected non-negative integer"
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {clipped(prefix)} ({type_name(prefix)})")
    if problem := task_id_problem(f"{prefix}000_{rules[0]}"):  # the ids become a dataset's names, checked by them
        raise ValueError(f"prefix {clipped(prefix)} makes no task id: {problem}")
    return [make_rule_task(np.random.default_rng([seed, i]), f"{prefix}{i:03d}_{rules[i % len(rules)]}",
                           rules[i % len(rules)], **kwargs) for i in range(n)]
