"""The work directory (trm_kaggle.solve.workdir): units, their deterministic split across workers, results on disk.

The worker processes themselves run in tests/test_solve.py (two workers equal one; a killed worker)."""

from __future__ import annotations

import json

import numpy as np

from trm_kaggle.solve.workdir import (
    Unit, assign, collect, make_units, read_result, reusable, task_digest, unit_dir, write_result,
)

GOOD = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}


def test_units_are_the_well_formed_tasks_among_the_first_max_tasks():
    ch = {"a": GOOD, "bad": {"train": [], "test": [{"input": [[1]]}]}, "b": {**GOOD, "test": GOOD["test"] * 2},
          "c": GOOD}
    units, left_out = make_units(ch)
    assert [(u.index, u.task_id, u.test_inputs, u.train_pairs) for u in units] == [(0, "a", 1, 1), (2, "b", 2, 1),
                                                                                  (3, "c", 1, 1)]
    assert list(left_out) == ["bad"] and "no train pairs" in left_out["bad"]
    assert [u.task_id for u in make_units(ch, max_tasks=2)[0]] == ["a"]
    # a hostile id never names a directory: the index does
    assert Unit(7, "../../etc", 1, 1).name == "u00007"


def test_assignment_is_deterministic_balanced_and_in_file_order():
    units = [Unit(i, f"t{i}", 1 + (i % 3 == 0), 3) for i in range(10)]
    shards = assign(units, 3)
    assert shards == assign(list(reversed(units)), 3)  # depends on the units, not their order in the call
    assert sorted(u.index for s in shards for u in s) == list(range(10))
    loads = [sum(1 + u.test_inputs for u in s) for s in shards]
    assert max(loads) - min(loads) <= 2
    assert all([u.index for u in s] == sorted(u.index for u in s) for s in shards)
    assert assign(units, 1) == [units]


def test_results_round_trip_and_only_matching_keys_are_collected(tmp_path):
    a, b = Unit(0, "a", 2, 1), Unit(1, "b", 1, 1)
    key = {"weights": "w", "task": task_digest(GOOD)}
    write_result(tmp_path, a, key, {0: [np.array([[1, 2]]), [[3]]], 1: []}, {"finetune_steps": 4}, complete=True)
    write_result(tmp_path, b, {**key, "weights": "other"}, {0: [[[5]]]}, {}, complete=True)
    assert reusable(read_result(tmp_path, a), key) and not reusable(read_result(tmp_path, a), {**key, "seed": 1})
    candidates, reports = collect(tmp_path, [a, b], {0: key, 1: key})
    assert candidates == {("a", 0): [[[1, 2]], [[3]]], ("a", 1): []}  # b was made with other weights
    assert reports == {"a": {"finetune_steps": 4, "complete": True}}
    # a result of another task in the unit's directory (the file was edited or reordered) is not this unit's
    assert read_result(tmp_path, Unit(0, "z", 1, 1)) is None
    (unit_dir(tmp_path, b) / "result.json").write_text("{not json")
    assert read_result(tmp_path, b) is None
    partial = Unit(2, "p", 1, 1)
    write_result(tmp_path, partial, key, {0: [[[1]]]}, {}, complete=False)
    assert not reusable(read_result(tmp_path, partial), key)
    assert json.loads((unit_dir(tmp_path, partial) / "result.json").read_text())["complete"] is False


def test_a_reused_result_counts_only_its_tasks_test_inputs_and_real_grids(tmp_path):
    """A rerun reused a result.json holding candidates for test index 7 of a task with one test input: the
    summary said 4 test inputs with model predictions for 3. Only a test index of the task and grids that are
    grids are taken."""
    from trm_kaggle.solve.workdir import Unit, collect, write_result

    unit = Unit(index=0, task_id="t0", test_inputs=1, train_pairs=1)
    write_result(tmp_path, unit, {"k": 1}, {0: [[[1, 2]], [[99]], [[float("nan")]]], 7: [[[1]]]}, {}, complete=True)
    candidates, reports = collect(tmp_path, [unit], {0: {"k": 1}})
    assert candidates == {("t0", 0): [[[1, 2]]]} and reports["t0"]["complete"] is True
