"""Per-task solutions: a test pair with no known output is never given a dummy label, trained on or scored.

`build-arc` reads solutions task by task (`--task-dir`: each task's own test outputs). A task whose
test pairs have no output keeps upstream's layout and inputs, but every copy of such a pair gets the
ignore label (no loss, no accuracy), `test_puzzles.json` records the pair without an output, and
`evaluate` predicts it and leaves it out of every score. The build's note counts such tasks in each
subset (one of two is not "no solutions").
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import one_error_line
from test_evaluate import Oracle, make_model
from trm_kaggle.cli import main
from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.data.format import load_split
from trm_kaggle.evaluate.pipeline import evaluate
from trm_kaggle.evaluate.report import write_report

GRID = [[1, 2, 3], [4, 5, 6]]


def task(*, solved: bool = True, tests: int = 1, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    grid = lambda: rng.integers(0, 10, size=(2, 3)).tolist()  # noqa: E731
    return {"train": [{"input": grid(), "output": grid()} for _ in range(2)],
            "test": [{"input": grid(), **({"output": grid()} if solved else {})} for _ in range(tests)]}


def write_tasks(root: Path, subsets: dict[str, dict[str, dict]]) -> Path:
    for subset, tasks in subsets.items():
        (root / subset).mkdir(parents=True)
        for task_id, t in tasks.items():
            (root / subset / f"{task_id}.json").write_text(json.dumps(t))
    return root


def build(tmp_path: Path, subsets: dict[str, dict[str, dict]], caplog, **kw) -> tuple[Path, list[str]]:
    src = write_tasks(tmp_path / "tasks", subsets)
    out = tmp_path / "ds"
    with caplog.at_level(logging.INFO, logger="trm_kaggle"):
        build_arc(ArcBuildConfig(output_dir=str(out), task_dir=str(src), subsets=list(subsets),
                                 test_set_name="evaluation", num_aug=2, workers=1, progress=False, canvas=10, **kw))
    return out, [r.getMessage() for r in caplog.records]


def rows_of(ds: Path, split: str, task_id: str) -> list[int]:
    """Example rows of the split that belong to `task_id` (any augmentation)."""
    ids = json.loads((ds / "identifiers.json").read_text())
    s = load_split(ds, split)
    rows = []
    for p, ident in enumerate(s.puzzle_identifiers):
        if ids[int(ident)].split("|||")[0] == task_id:
            rows += range(int(s.puzzle_indices[p]), int(s.puzzle_indices[p + 1]))
    return rows


@pytest.fixture
def mixed(tmp_path, caplog):
    return build(tmp_path, {"training": {"t0": task(seed=1), "t1": task(seed=2)},
                            "evaluation": {"a": task(seed=3), "b": task(solved=False, seed=4)}}, caplog)


def test_one_unsolved_task_beside_a_solved_one(mixed):
    ds, notes = mixed
    (note,) = [n for n in notes if "evaluation:" in n and "test outputs" in n]
    assert "1 of 2 tasks have no test outputs" in note and "'b'" in note, note
    assert not any("no solutions" in n or "dummy" in n for n in notes)
    recorded = json.loads((ds / "test_puzzles.json").read_text())
    assert "output" in recorded["a"]["test"][0] and "output" not in recorded["b"]["test"][0]
    labels = np.asarray(load_split(ds, "test").labels)
    assert not labels[rows_of(ds, "test", "b")].any()  # every copy: the ignore label, no [[0]]
    assert labels[rows_of(ds, "test", "a")].all(axis=1).sum() == 0 and labels[rows_of(ds, "test", "a")].any()


def test_the_unsolved_task_is_predicted_and_never_scored(mixed, tmp_path):
    ds, _ = mixed
    result = evaluate(make_model(ds, Oracle), ds, batch_size=8)  # predicts every label it is given
    assert result.metrics.num_test_outputs == 1 and result.metrics.num_tasks == 1
    assert result.arc_prize_score == 1.0  # task a, the only one scored
    assert ("b", 0) in result.candidates and ("b", 0) not in result.metrics.truth_rank
    summary = result.summary()
    assert summary["unlabeled_test_outputs"] == 1
    write_report(result, tmp_path / "rep", pictures=True, first_n=2)
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["tasks"]["b"]["test"][0]["solved"] is None and report["tasks"]["b"]["solved_fraction"] is None
    assert "| b | 0 | no output known |" in (tmp_path / "rep" / "report.md").read_text()


def test_the_command_line_says_what_is_not_scored(mixed, tmp_path, capsys):
    ds, _ = mixed
    from trm_kaggle.model.export import export_inference

    model = make_model(ds, H_cycles=1)
    export_inference(tmp_path / "exp", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    assert main(["evaluate", "--weights", str(tmp_path / "exp"), "--data", str(ds), "--device", "cpu",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 test output with no known answer: predicted, not scored" in out
    assert "micro-average over 1 test outputs" in out


def test_an_unsolved_task_of_a_training_subset_is_not_trained_on(tmp_path, caplog):
    ds, notes = build(tmp_path, {"training": {"t0": task(seed=1), "t1": task(solved=False, seed=2)},
                                 "evaluation": {"a": task(seed=3)}}, caplog)
    assert any("training: 1 of 2 tasks have no test outputs" in n and "never trained on" in n for n in notes)
    labels = np.asarray(load_split(ds, "train").labels)
    rows = rows_of(ds, "train", "t1")
    per_puzzle = 3  # 2 demonstration pairs + the test pair, in order
    blank = [r for k, r in enumerate(rows) if k % per_puzzle == 2]
    assert not labels[blank].any()
    assert all(labels[r].any() for k, r in enumerate(rows) if k % per_puzzle != 2)  # its demonstrations train


def test_a_fully_unsolved_test_subset(tmp_path, caplog):
    ds, notes = build(tmp_path, {"training": {"t0": task(seed=1)},
                                 "evaluation": {"a": task(solved=False, seed=3), "b": task(solved=False, seed=4)}},
                      caplog)
    assert any("evaluation: no task has test outputs" in n for n in notes)
    result = evaluate(make_model(ds, Oracle), ds, batch_size=8)
    assert result.metrics.num_test_outputs == 0 and result.summary()["unlabeled_test_outputs"] == 2
    assert set(result.candidates) == {("a", 0), ("b", 0)}


def test_a_task_with_some_of_its_test_outputs_is_one_line(tmp_path, capsys):
    t = task(tests=2, seed=5)
    del t["test"][1]["output"]
    src = write_tasks(tmp_path / "tasks", {"training": {"t0": task(seed=1)}, "evaluation": {"half": t}})
    args = ["build-arc", "--task-dir", str(src), "--subsets", "training", "evaluation", "--test-set-name",
            "evaluation", "--num-aug", "0", "--workers", "1", "--no-progress", "--output-dir", str(tmp_path / "ds")]
    line = one_error_line(capsys, main(args))
    assert "half" in line and "1 test output for 2 test inputs" in line
    assert main([*args, "--skip-invalid"]) == 0  # skipped with a note, never built with a made-up output
    assert "skipped malformed task 'half'" in capsys.readouterr().out
