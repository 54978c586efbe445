"""`trm-kaggle pipeline` ends as its stages end: a submission stage whose model answered no task fails the
command with `submit`'s status, says the stage and the cause in one line, and summary.md says so too."""

from __future__ import annotations

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
    assert err.strip() == (f"interrupted: stopped by SIGTERM; {w / 'submission.json'} is not the stage's result: it "
                           "holds the fallback answers written before the model ran (and any the model had "
                           "finished); run the pipeline again to finish it"), err
    assert (w / "submission.json").is_file()
