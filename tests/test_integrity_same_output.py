"""Two commands building one output at once, the second to finish after long work (an evaluation, the plots of a
comparison): it finds another output where it started from, keeps it, and ends with one line. The output seen at
the swap is compared with what stood there when the command STARTED, not when its write began."""

from __future__ import annotations

import json

import pytest
from cli_helpers import one_error_line
from conftest import write_run

import trm_kaggle.atomic as A
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError

TAKEN = "another command wrote this {kind} while this one was built; that one stands and this one is discarded"


@pytest.mark.parametrize("before", ["none", "an older one"])
def test_an_output_written_after_the_start_and_before_the_block_is_kept(tmp_path, before):
    """`found` taken at the start: another output that appeared before the block is entered is no longer taken
    for what stood there; the refusal comes before anything is built, and the other output stands."""
    target = tmp_path / "out"
    if before != "none":
        with A.atomic_directory(target, kind="comparison") as tmp:
            (tmp / "x").write_text("older")
    found = A.found_at(target)
    with A.atomic_directory(target, kind="comparison") as tmp:  # the other command, finishing first
        (tmp / "x").write_text("the other's")
    with pytest.raises(TRMError, match=TAKEN.format(kind="comparison")):
        with A.atomic_directory(target, kind="comparison", found=found) as tmp:
            (tmp / "x").write_text("mine")
    assert (target / "x").read_text() == "the other's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with A.atomic_directory(target, kind="comparison", found=A.found_at(target)) as tmp:  # unchanged: replaced
        (tmp / "x").write_text("mine")
    assert (target / "x").read_text() == "mine"


@pytest.fixture(scope="module")
def two_exports(tmp_path_factory):
    """A tiny ARC dataset and two exports of other weights evaluated on it."""
    from test_decode import build_tiny_dataset
    from test_evaluate import make_model
    from trm_kaggle.model.export import export_inference

    root = tmp_path_factory.mktemp("same_output")
    dataset = build_tiny_dataset(root)
    for name, seed in (("e1", 0), ("e2", 1)):
        model = make_model(dataset, seed=seed)
        export_inference(root / name, model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    return root, dataset


def _evaluate_while_another_ends_first(monkeypatch, root, dataset, outputs: list[str], watched) -> tuple[int, dict]:
    """`evaluate --weights e1 ...outputs`, during whose evaluation `evaluate --weights e2 ...outputs` runs whole:
    the first's status, and the files of the folder `watched` (their change times) as the second left them."""
    import trm_kaggle.evaluate.run as R

    real, others = R.evaluate, []

    def args(weights: str) -> list[str]:
        return ["evaluate", "--weights", str(root / weights), "--data", str(dataset), *outputs, "--max-tasks", "1",
                "--device", "cpu", "--no-progress"]

    def the_other_first(*a, **kw):
        if not others:  # the first command is mid-evaluation: the second starts and ends
            others.append("started")
            others[0] = main(args("e2"))
            others.append({p.name: p.stat().st_ctime_ns for p in watched.rglob("*")})
        return real(*a, **kw)

    monkeypatch.setattr(R, "evaluate", the_other_first)
    rc = main(args("e1"))
    assert others[0] == 0
    return rc, others[1]


def test_two_evaluations_into_one_report_folder_one_refused_one_kept(two_exports, tmp_path, capsys, monkeypatch):
    """Both once printed `report: R/report.md` and exited 0, R holding the second's report (past the refusal of a
    folder holding the report of other weights). Now the first to finish keeps the folder; the other ends with
    the line of the race, naming the folder."""
    root, dataset = two_exports
    report = tmp_path / "R"
    rc, left = _evaluate_while_another_ends_first(monkeypatch, root, dataset,
                                                  ["--report-dir", str(report), "--no-pictures"], tmp_path)
    line = one_error_line(capsys, rc)
    assert str(report) in line and TAKEN.format(kind="evaluation report") in line
    assert json.loads((report / "report.json").read_text())["weights"]["path"] == str(root / "e2")
    assert {p.name: p.stat().st_ctime_ns for p in tmp_path.rglob("*")} == left and "R" in left


def test_two_evaluations_saving_one_votes_file_one_refused_one_kept(two_exports, tmp_path, capsys, monkeypatch):
    """`--save-votes V` of two evaluations at once: the file stands as the first to finish wrote it."""
    root, dataset = two_exports
    votes = tmp_path / "v.npz"
    rc, left = _evaluate_while_another_ends_first(monkeypatch, root, dataset, ["--save-votes", str(votes)], tmp_path)
    line = one_error_line(capsys, rc)
    assert str(votes) in line and "another process wrote this file while this command ran" in line
    assert {p.name: p.stat().st_ctime_ns for p in tmp_path.rglob("*")} == left and list(left) == ["v.npz"]


def test_two_comparisons_into_one_folder_one_refused_one_kept(tmp_path, capsys, monkeypatch):
    """Two `compare --out C` at once: the second to finish ends with one line, C holds the first's tables."""
    import trm_kaggle.experiments.compare as C

    write_run(tmp_path / "runs" / "a", ["global_batch_size=8"], train=[(10, 4.0, 1.2, 0.10, 0.50)])
    write_run(tmp_path / "other" / "b", ["global_batch_size=8"], train=[(10, 5.0, 1.1, 0.20, 0.40)])
    out = tmp_path / "C"
    real, others = C.comparison_tables, []

    def the_other_first(runs):
        if not others:  # the first command has read its runs: the second starts and ends
            others.append("started")
            others[0] = main(["compare", str(tmp_path / "other"), "--out", str(out), "--metric", "loss"])
        return real(runs)

    monkeypatch.setattr(C, "comparison_tables", the_other_first)
    rc = main(["compare", str(tmp_path / "runs"), "--out", str(out), "--metric", "loss"])
    assert others == [0]
    line = one_error_line(capsys, rc)
    assert str(out) in line and TAKEN.format(kind="comparison") in line
    table = (out / "table.md").read_text()
    assert "| b |" in table and "| a |" not in table
    assert sorted(p.name for p in tmp_path.iterdir()) == ["C", "other", "runs"]
