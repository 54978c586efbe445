"""`trm-kaggle pipeline` ends as its stages end: a submission stage whose model answered no task fails the
command with `submit`'s status, says the stage and the cause in one line, and summary.md says so too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trm_kaggle.cli import main
from trm_kaggle.cli.kaggle import MODEL_FAILED_STATUS


def pipeline_whose_solve_raises(error: BaseException, tmp_path, capsys, monkeypatch):
    """(status, stdout, stderr, work folder) of a short pipeline whose submission stage's solve raises `error`."""
    from trm_kaggle.solve import job

    def raising(*_, **__):
        raise error

    monkeypatch.setattr(job, "run_in_process", raising)
    monkeypatch.setattr(job, "run_spawned", raising)
    w = tmp_path / "w"
    rc = main(["pipeline", "--work-dir", str(w), "--num-aug", "1", "--train-seconds", "3", "--eval-tasks", "1",
               "--unseen-tasks", "1", "--no-progress", "--threads", "1"])
    out, err = capsys.readouterr()
    return rc, out, err, w


def test_a_submission_stage_whose_model_failed_fails_the_pipeline(tmp_path, capsys, monkeypatch):
    """The pipeline said "pipeline finished" with status 0 when the model path failed in stage 4 (`submit` gives
    status 3 for the same failure); summary.md said "valid, 0 of 2 tasks answered by the model"."""
    rc, out, err, w = pipeline_whose_solve_raises(RuntimeError("the worker broke"), tmp_path, capsys, monkeypatch)
    assert rc == MODEL_FAILED_STATUS, (out, err)  # submit's status (pipeline.py holds its own copy of it)
    assert "pipeline finished" not in out and "[4/5] FAILED in" in out and "[5/5]" not in out, out
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: pipeline stage [4/5] submission failed: the model could not run on any of "
                               "its 1 task: RuntimeError: the worker broke;"), lines
    assert "the bundle stage did not run" in lines[0] and f"(summary: {w / 'summary.md'})" in lines[0], lines
    # the earlier stages' outputs stay; the summary says which stage failed; no bundle of weights that cannot run
    assert (w / "weights").is_dir() and (w / "report" / "report.md").is_file() and (w / "submission.json").is_file()
    assert not (w / "bundle").exists()
    summary = (w / "summary.md").read_text()
    assert "FAILED at stage 4, submission (the model could not run" in summary, summary
    assert "| submission | FAILED: the model could not run on any of its 1 task: RuntimeError: the worker broke" \
        in summary, summary
    assert "| bundle |" not in summary and "(not built in this run: the pipeline stopped before it)" in summary


def test_a_stop_during_the_submission_stage_says_the_submission_left_is_the_fallback(tmp_path, capsys, monkeypatch):
    """SIGTERM during [4/5] said only "interrupted: stopped by SIGTERM" and left submission.json holding the
    baseline fallback answers, which read as the model's submission."""
    from trm_kaggle.interrupts import Terminated

    rc, out, err, w = pipeline_whose_solve_raises(Terminated(), tmp_path, capsys, monkeypatch)
    assert rc == 143 and "[4/5] submission" in out, (out, err)
    assert err.strip() == (f"interrupted: pipeline stage [4/5] submission stopped by SIGTERM; {w / 'weights'} is this "
                           f"run's export (step {_step(w)}); {w / 'submission.json'} is not the stage's result: it "
                           "holds the fallback answers written before the model ran (and any the model had "
                           f"finished); run the same command again to finish it (summary: {w / 'summary.md'})"), err
    assert (w / "submission.json").is_file()
    summary = (w / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("STOPPED at stage 4 of 5, submission (stopped by SIGTERM)"), summary
    assert f"| submission | `{w / 'submission.json'}` | not the stage's result: it holds the fallback" in summary
    assert f"| Kaggle bundle | `{w / 'bundle'}` | none yet |" in summary, summary


def _step(w) -> int:
    """The step of the newest train state in the work folder `w`."""
    from trm_kaggle.train import list_states, load_newest_state

    assert list_states(w / "train")
    return load_newest_state(w / "train")[1]["step"]


ARGS = ["--num-aug", "1", "--train-seconds", "2", "--eval-tasks", "1", "--unseen-tasks", "1", "--no-progress",
        "--threads", "1"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A work folder a short pipeline ran to its end in (copied by each test: a rerun changes it)."""
    w = tmp_path_factory.mktemp("finished") / "w"
    assert main(["pipeline", "--work-dir", str(w), *ARGS]) == 0
    return w


def _rerun_stopped(finished, tmp_path, capsys, monkeypatch, name: str, error: BaseException):
    """(status, stderr, work folder, the earlier summary) of a rerun of `finished` whose stage's call `name`
    (pipeline.evaluate, pipeline.build_bundle) raises `error`."""
    from trm_kaggle import pipeline

    w = tmp_path / "w"
    shutil.copytree(finished, w)
    earlier = (w / "summary.md").read_text()

    def stopped(*_, **__):
        raise error

    monkeypatch.setattr(pipeline, name, stopped)
    capsys.readouterr()
    rc = main(["pipeline", "--work-dir", str(w), *ARGS])
    return rc, capsys.readouterr().err, w, earlier


def test_a_rerun_stopped_in_evaluation_leaves_a_summary_that_says_which_file_is_from_which_run(
        finished, tmp_path, capsys, monkeypatch):
    """Ctrl-C in [3/5] of a rerun printed only "interrupted", and summary.md still described the earlier run
    (its step, its valid submission) though weights/ had been replaced and report/, submission.json and bundle/
    were made from the earlier weights."""
    rc, err, w, earlier = _rerun_stopped(finished, tmp_path, capsys, monkeypatch, "evaluate", KeyboardInterrupt())
    assert rc == 130 and earlier.splitlines()[2].startswith("Finished"), (err, earlier)
    assert err.strip() == (f"interrupted: pipeline stage [3/5] evaluation stopped by SIGINT; {w / 'weights'} is this "
                           f"run's export (step {_step(w)}); {w / 'report'}, {w / 'submission.json'}, {w / 'bundle'} "
                           "are left from an earlier run, made from the earlier weights; run the same command again "
                           f"to finish it (summary: {w / 'summary.md'})"), err
    summary = (w / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("STOPPED at stage 3 of 5, evaluation (stopped by SIGINT)"), summary
    assert "Run the same command again to finish it." in summary and "## Figures" not in summary, summary
    assert f"| inference weights (export) | `{w / 'weights'}` | this run (step {_step(w)}) |" in summary, summary
    for what, name in (("evaluation report", "report"), ("submission", "submission.json"), ("Kaggle bundle", "bundle")):
        assert (f"| {what} | `{w / name}` | an earlier run, made from the earlier weights, not the current weights/ |"
                in summary), summary


def test_a_rerun_stopped_in_the_bundle_stage_names_the_stage_and_the_signal(finished, tmp_path, capsys, monkeypatch):
    """SIGTERM in [5/5] printed only "interrupted: stopped by SIGTERM"."""
    from trm_kaggle.interrupts import Terminated

    rc, err, w, _ = _rerun_stopped(finished, tmp_path, capsys, monkeypatch, "build_bundle", Terminated())
    assert rc == 143, err
    assert err.strip() == (f"interrupted: pipeline stage [5/5] bundle stopped by SIGTERM; {w / 'weights'} is this "
                           f"run's export (step {_step(w)}); {w / 'bundle'} is left from an earlier run, made from "
                           f"the earlier weights; run the same command again to finish it (summary: "
                           f"{w / 'summary.md'})"), err
    summary = (w / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("STOPPED at stage 5 of 5, bundle (stopped by SIGTERM)"), summary
    assert f"| submission | `{w / 'submission.json'}` | this run |" in summary, summary


def test_a_rerun_says_in_summary_md_that_it_is_in_progress(finished, tmp_path, capsys, monkeypatch):
    """A rerun killed outright (SIGKILL: no handler runs) left the earlier run's summary naming replaced files."""
    from trm_kaggle import pipeline

    seen = []
    monkeypatch.setattr(pipeline, "build_bundle", lambda *_, **__: seen.append((w / "summary.md").read_text())
                        or (_ for _ in ()).throw(SystemExit(9)))
    w = tmp_path / "w"
    shutil.copytree(finished, w)
    with pytest.raises(SystemExit):
        main(["pipeline", "--work-dir", str(w), *ARGS])
    assert seen[0].splitlines()[2].startswith("IN PROGRESS since "), seen
    assert "stage 5 of 5, bundle, is running" in seen[0] and "| bundle | running | |" in seen[0], seen
    assert f"| Kaggle bundle | `{w / 'bundle'}` | an earlier run, made from the earlier weights" in seen[0], seen


def test_the_closing_line_escapes_a_newline_in_the_work_folders_name():
    from trm_kaggle.config import PipelineConfig
    from trm_kaggle.pipeline import PipelineResult

    line = PipelineResult(PipelineConfig(work_dir="a\nb"), summary=Path("a\nb/summary.md")).describe()
    assert "\n" not in line and "outputs under a\\nb; summary: a\\nb/summary.md" in line, line
