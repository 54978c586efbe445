"""Reading metrics.jsonl: one record per step across resumptions, wall time counted across processes,
a half-written last line skipped, evaluations placed on the wall clock of their step."""

import json

import pytest
from conftest import write_run

from trm_kaggle.train.metrics import read_metrics


def test_a_plain_run(tmp_path):
    run = write_run(tmp_path / "r", train=[(10, 5.0, 1.5, 0.1, 0.5), (20, 9.0, 1.0, 0.3, 0.7)],
                    evals=[(20, 0.25, 0.6)])
    train, evals = read_metrics(run)
    assert [(r["step"], r["wall_s"], r["loss"]) for r in train] == [(10, 5.0, 1.5), (20, 9.0, 1.0)]
    assert [(r["step"], r["wall_s"], r["eval_exact_accuracy"]) for r in evals] == [(20, 9.0, 0.25)]


def test_a_resumed_run_keeps_the_last_attempt_and_counts_wall_time_across_processes(tmp_path):
    # attempt 1 logs steps 1..4 (elapsed 1..4 s), evaluates at 2 and 4, is killed; its newest state was step 2.
    # attempt 2 resumes at 2: steps 3..6 with elapsed 1.5, 3, 4.5, 6 s from its own start.
    run = write_run(tmp_path / "r", train=[(1, 1.0, 4.0, 0, 0), (2, 2.0, 3.0, 0, 0), (3, 3.0, 2.0, 0, 0),
                                           (4, 4.0, 1.0, 0, 0)], evals=[(2, 0.1, 0.2), (4, 0.4, 0.5)])
    with open(run / "metrics.jsonl", "a") as f:
        for step, elapsed, loss in ((3, 1.5, 2.5), (4, 3.0, 1.5), (5, 4.5, 1.2), (6, 6.0, 0.9)):
            f.write(json.dumps({"step": step, "loss": loss, "elapsed_s": elapsed}) + "\n")
        f.write(json.dumps({"step": 6, "eval_exact_accuracy": 0.6}) + "\n")
    train, evals = read_metrics(run)
    # steps 3 and 4 are attempt 2's; its clock starts at step 2's wall time (2 s)
    assert [(r["step"], r["wall_s"], r["loss"]) for r in train] == [
        (1, 1.0, 4.0), (2, 2.0, 3.0), (3, 3.5, 2.5), (4, 5.0, 1.5), (5, 6.5, 1.2), (6, 8.0, 0.9)]
    # the evaluation at step 4 belonged to the lost attempt: replaced by nothing (attempt 2 evaluated at 6)
    assert [(r["step"], r["wall_s"], r["eval_exact_accuracy"]) for r in evals] == [(2, 2.0, 0.1), (6, 8.0, 0.6)]


def test_a_resume_at_the_last_logged_step_is_seen_by_its_clock(tmp_path):
    """Resumed from the state of the last logged step: the step keeps increasing but elapsed_s restarts."""
    run = write_run(tmp_path / "r", train=[(10, 50.0, 1.0, 0, 0), (20, 100.0, 0.5, 0, 0)])
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 30, "loss": 0.4, "elapsed_s": 40.0}) + "\n")
    train, _ = read_metrics(run)
    assert [r["wall_s"] for r in train] == [50.0, 100.0, 140.0]


def test_start_step_joins_the_clocks_where_neither_step_nor_clock_goes_back(tmp_path):
    """Records of this version name the step their process began at. Here the resumed process (from the state
    at step 20, the file already cut back to it) takes longer to its first log than the first process ran."""
    run = tmp_path / "r"
    run.mkdir()
    lines = [{"step": 10, "loss": 2.0, "elapsed_s": 5.0, "start_step": 0},
             {"step": 20, "loss": 1.0, "elapsed_s": 10.0, "start_step": 0},
             {"step": 30, "loss": 0.5, "elapsed_s": 12.0, "start_step": 20}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    train, _ = read_metrics(run)
    assert [(r["step"], r["wall_s"]) for r in train] == [(10, 5.0), (20, 10.0), (30, 22.0)]


def test_drop_metrics_after_keeps_each_step_once(tmp_path):
    from trm_kaggle.train.metrics import drop_metrics_after

    run = write_run(tmp_path / "r", train=[(10, 5.0, 1.5, 0.1, 0.5), (20, 9.0, 1.0, 0.3, 0.7)], evals=[(20, 0.25, 0.6)],
                    tail='{"step": 30, "lo')
    drop_metrics_after(run / "metrics.jsonl", 10)
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [10]


@pytest.mark.parametrize("tail", ['{"step": 30, "loss": 0.', "not json\n", '["a list"]\n', '{"loss": 1}\n',
                                  '{"step": 30, "loss": 1.0, "elapsed_s": null}\n'])
def test_unreadable_lines_are_skipped(tmp_path, tail):
    run = write_run(tmp_path / "r", train=[(10, 5.0, 1.5, 0.1, 0.5), (20, 9.0, 1.0, 0.3, 0.7)], tail=tail)
    train, evals = read_metrics(run)
    assert [r["step"] for r in train] == [10, 20] and evals == []


def test_no_metrics_yet(tmp_path):
    assert read_metrics(tmp_path) == ([], [])


@pytest.mark.parametrize("extra", [
    {"step": 2, "loss": 1.0},  # no start_step after records that have one: once taken as a resumption at step 1
    {"step": 30, "loss": float("inf"), "elapsed_s": 1.0},  # a repeat of the last step replaced its record
    {"step": 20, "loss": 9.0, "elapsed_s": 30.0, "start_step": 0},  # its process logged step 20 already
    {"step": 25, "loss": 9.0, "elapsed_s": 1.0, "start_step": 25},  # a process logs steps after its start
])
def test_a_record_no_run_writes_after_this_versions_records_is_skipped_with_a_warning(tmp_path, caplog, extra):
    run = tmp_path / "r"
    run.mkdir()
    lines = [{"step": 10, "loss": 2.0, "elapsed_s": 5.0, "start_step": 0},
             {"step": 20, "loss": 1.0, "elapsed_s": 10.0, "start_step": 0},
             {"step": 30, "loss": 0.5, "elapsed_s": 12.0, "start_step": 20}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*lines, extra]))
    with caplog.at_level("INFO"):
        train, _ = read_metrics(run)
    assert [(r["step"], r["loss"]) for r in train] == [(10, 2.0), (20, 1.0), (30, 0.5)]
    said = [r for r in caplog.records if "skipped 1 record(s) no run writes" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"


def test_a_line_that_is_no_json_with_lines_after_it_is_said_as_damage(tmp_path, caplog):
    """Three hand-added lines (one not JSON, one of step 1e999, one of text) were counted as one skipped record:
    a line that is not JSON was taken for the one being written, wherever it stood. Only the last line is."""
    run = write_run(tmp_path / "r", train=[(10, 5.0, 1.5, 0.1, 0.5), (20, 9.0, 1.0, 0.3, 0.7)])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1:1] = ["not json \x1b[2J here", '{"step": 1e999, "loss": 1.0}', '{"step": 15, "loss": "abc"}']
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 30, "lo')
    with caplog.at_level("INFO"):
        train, _ = read_metrics(run)
    assert [r["step"] for r in train] == [10, 20]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [f"{run / 'metrics.jsonl'}: skipped 3 record(s) no run writes (first: line 2: not a JSON "
                      "record)"], warned
    assert any("skipped 1 line(s) that are no JSON record" in r.getMessage() for r in caplog.records)
