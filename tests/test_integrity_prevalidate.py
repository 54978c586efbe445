"""Outputs and selections are checked before the work, not after it.

An output that cannot be written (a read-only folder, a file where a folder is needed, a folder where a
file is written) and an `evaluate --tasks` id the test split lacks are refused with one `error:` line
before any model is loaded or any data is read for training. `/proc/sys` stands for a read-only mount:
it refuses writes even to root. `train` runs every check of its settings against its data before it makes
its run folder: a refusal leaves no folder behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line
import trm_kaggle.evaluate.run as evaluate_run  # where evaluate loads its model
from trm_kaggle.cli import main

from conftest import make_export

READ_ONLY = Path("/proc/sys")


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a model is loaded or an evaluation starts: the refusal must come first."""
    def forbidden(*a, **k):
        raise AssertionError("the work started before the outputs were checked")

    monkeypatch.setattr(evaluate_run, "load_model_for_dataset", forbidden)
    monkeypatch.setattr(evaluate_run, "evaluate", forbidden)


@pytest.fixture
def world(tmp_path):
    make_export(tmp_path / "exp")
    (tmp_path / "data").mkdir()
    test = {"input": [[1, 2]], "output": [[2, 1]]}
    (tmp_path / "data" / "test_puzzles.json").write_text(json.dumps({"aa01": {"test": [test]},
                                                                      "bb02": {"test": [test, test]}}))
    (tmp_path / "plain").write_text("a file")
    (tmp_path / "folder").mkdir()
    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    return tmp_path


def evaluate(world: Path, *extra: str) -> list[str]:
    return ["evaluate", "--weights", str(world / "exp"), "--data", str(world / "data"), "--no-progress", *extra]


@pytest.mark.skipif(not READ_ONLY.is_dir(), reason="needs /proc/sys")
@pytest.mark.parametrize("flag, where", [("--save-votes", "votes.npz"), ("--report-dir", "report")])
def test_evaluate_refuses_a_read_only_output_before_evaluating(world, capsys, no_work, flag, where):
    line = one_error_line(capsys, main(evaluate(world, flag, str(READ_ONLY / where))))
    assert flag in line and "is in /proc, the system's own" in line  # its place, before its permissions


@pytest.mark.parametrize("flag, where, words", [
    ("--save-votes", "plain/votes.npz", "is a file, not a folder"),     # a file where a folder is needed
    ("--save-votes", "folder", "is a folder; a file is written there"),  # a folder where the file would go
    ("--report-dir", "plain", "is a file; a folder is written there"),
])
def test_evaluate_refuses_outputs_in_the_way(world, capsys, no_work, flag, where, words):
    line = one_error_line(capsys, main(evaluate(world, flag, str(world / where))))
    assert words in line, line
    assert (world / "plain").read_text() == "a file"


@pytest.mark.parametrize("tasks, unknown", [("zz99", "'zz99'"), ("aa01,nope", "'nope'"), ("bb02,x1,x2", "'x1', 'x2'")])
def test_evaluate_refuses_unknown_task_ids_before_evaluating(world, capsys, no_work, tasks, unknown):
    line = one_error_line(capsys, main(evaluate(world, "--report-dir", str(world / "r"), "--tasks", tasks)))
    assert f"--tasks: {unknown} not in the test split" in line and "aa01" in line
    assert not (world / "r").exists()


def test_known_task_ids_pass_the_check(world, monkeypatch):
    """The check lets known ids through: the command goes on to its work (here stopped at its first step, the
    check that the test split has something to score)."""
    def reached(*a, **k):
        raise SystemExit("reached the work")

    monkeypatch.setattr(evaluate_run, "_check_something_to_score", reached)
    monkeypatch.setattr(evaluate_run, "check_metadata", lambda *a, **k: None)  # the stand-in data is no dataset
    with pytest.raises(SystemExit, match="reached the work"):
        main(evaluate(world, "--report-dir", str(world / "r"), "--tasks", "bb02,aa01"))


def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


@pytest.mark.parametrize("setting, words", [
    ("global_batch_size=4096", "global_batch_size 4096 is larger than the at most 40 examples"),
    ("micro_batch_size=3", "micro_batch_size 3 must divide the per-rank batch 8"),
    pytest.param("tensorboard=True", "tensorboard=True needs the tensorboard package",
                 marks=pytest.mark.skipif(_has("tensorboard"), reason="tensorboard is installed here")),
    pytest.param("wandb=True", "wandb=True needs the wandb package",
                 marks=pytest.mark.skipif(_has("wandb"), reason="wandb is installed here")),
])
def test_train_refuses_its_settings_before_it_makes_its_run_folder(tmp_path, capsys, setting, words):
    """The reproducer: a global batch larger than the dataset left a run folder with config.json and run.json;
    other refusals left the folder and its lock file."""
    from integrity_helpers import build_sudoku4, train_args

    data = build_sudoku4(tmp_path / "data")
    rc = main(train_args(data, tmp_path / "runs" / "r", setting, "max_steps=1"))
    assert words in one_error_line(capsys, rc)
    assert not (tmp_path / "runs").exists()  # nothing made: not the run folder, not its parent


@pytest.mark.skipif(not READ_ONLY.is_dir(), reason="needs /proc/sys")
def test_train_submit_and_export_refuse_unwritable_outputs(world, capsys):
    line = one_error_line(capsys, main(["train", f"data_paths=[{world / 'data'}]",
                                        f"checkpoint_path={READ_ONLY / 'run'}", "--no-progress"]))
    assert "checkpoint_path" in line and "is in /proc" in line
    line = one_error_line(capsys, main(["train", f"data_paths=[{world / 'data'}]", f"checkpoint_path={world / 'r'}",
                                        "--export", str(world / "plain" / "exp"), "--no-progress"]))
    assert "--export" in line and "is a file, not a folder" in line and not (world / "r").exists()
    line = one_error_line(capsys, main(["submit", "--challenges", str(world / "c.json"), "--weights",
                                        str(world / "exp"), "--output", str(READ_ONLY / "s.json"), "--work-dir",
                                        str(world / "w")]))
    assert "--output" in line and "is in /proc" in line and not (world / "w").exists()
    line = one_error_line(capsys, main(["export", str(world / "data"), "--out", str(READ_ONLY / "e")]))
    assert "--out" in line and "is in /proc" in line
