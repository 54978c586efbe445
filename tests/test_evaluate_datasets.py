"""`trm-kaggle evaluate` on the datasets our builders make besides ARC (Sudoku here), the same sums as training's
test-split check, trajectories as ARC votes, and a test split with nothing to score (no data is not a zero)."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch

from conftest import TINY_ARCH, SolvesEven
from trm_kaggle.data.contents import write_contents
from trm_kaggle.cli import main
from trm_kaggle.config import EvaluateConfig
from trm_kaggle.data.format import SplitWriter, load_metadata
from trm_kaggle.errors import DataError
from trm_kaggle.evaluate.dataset import score_dataset
from trm_kaggle.model import TinyRecursiveModel
from trm_kaggle.model.export import export_inference


def _model(data, cls=TinyRecursiveModel):
    meta = load_metadata(data, "test")
    torch.manual_seed(0)
    return cls(TINY_ARCH, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers)


def test_a_sudoku_dataset_is_scored_like_trainings_check_and_from_the_command_line(sudoku4, tmp_path, capsys):
    from trm_kaggle.data import load_split
    from trm_kaggle.train import load_train_config
    from trm_kaggle.train.evaluation import evaluate_split
    from trm_kaggle.train.runtime import Runtime

    model = _model(sudoku4, SolvesEven)
    split = load_split(sudoku4, "test")
    want = float(np.mean(np.asarray(split.inputs).astype(np.int64).sum(-1) % 2 == 0))
    assert 0 < want < 1
    got = score_dataset(model, sudoku4, EvaluateConfig(batch_size=3), device="cpu")
    assert got.examples == split.num_examples and got.exact == pytest.approx(want)
    assert got.exact_ci95[0] < got.exact < got.exact_ci95[1] and got.settled is None
    cfg = load_train_config(overrides=[f"data_paths=[{sudoku4}]", f"checkpoint_path={tmp_path / 'r'}",
                                       "arch.hidden_size=16", "arch.num_heads=2", "arch.L_layers=1",
                                       "arch.H_cycles=1", "arch.L_cycles=1", "arch.halt_max_steps=2"])
    train = evaluate_split(model, cfg, Runtime(torch.device("cpu"), torch.float32, "float32"))
    assert train["eval_exact_accuracy"] == pytest.approx(got.exact, abs=1e-12)  # one helper, one number
    assert train["eval_token_accuracy"] == pytest.approx(got.token_accuracy, rel=1e-9)

    plain = _model(sudoku4)
    export_inference(tmp_path / "export", plain, arch=plain.arch, seq_len=plain.seq_len, vocab_size=plain.vocab_size)
    common = ["evaluate", "--weights", str(tmp_path / "export"), "--data", str(sudoku4), "--device", "cpu",
              "--no-progress"]
    assert main(common + ["--report-dir", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("exact accuracy (examples with every label token right, over ")
    assert "95 % CI" in out and "token accuracy" in out and "report: " in out
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["summary"]["examples"] == split.num_examples and report["weights"]["sha256"]
    assert main(common + ["--trajectories", "3", "--trajectory-noise", "0.3", "--test-depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "trajectories: 3 per example, noise 0.3 x RMS, selected by q_halt" in out
    assert "settled: " in out and "after 4 steps" in out
    # a depth under the 3 equal predictions settling needs measures nothing: no "0 of N settled" line
    assert main(common + ["--test-depth", "2"]) == 0
    out = capsys.readouterr().out
    assert "settled" not in out and "ACT steps: 2.00 on average of at most 2" in out
    assert main(common + ["--trajectories", "3"]) == 2  # no noise: a contradiction, refused in one line
    assert "trajectory-noise above 0" in capsys.readouterr().err
    # each example answers alone: a vote's weighting was read by nothing (exit 0), as --save-votes is refused
    assert main(common + ["--weighting", "q_halt"]) == 2
    assert "scored per example, without votes to weigh (weighting q_halt)" in capsys.readouterr().err
    # its report draws no pictures and picks no tasks: the flags that shape them are read by nothing
    for flags, said in ((["--first", "7"], "--first: "), (["--no-pictures"], "--no-pictures: "),
                        (["--tasks", "foo"], "--tasks: ")):
        assert main(common + ["--report-dir", str(tmp_path / "rep2"), *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and "draws no pictures (ARC's alone)" in err, err
    assert not (tmp_path / "rep2").exists()


@pytest.mark.parametrize("flags, said", [
    (["--task-id-seed", "5"], "--task-id-seed 5 seeds --task-ids random, which is not asked for"),
    (["--task-ids", "own", "blank", "--task-id-seed", "5"], "--task-id-seed 5 seeds --task-ids random"),
    (["--no-pictures"], "--tasks, --first and --no-pictures shape the report's pictures: give --report-dir too"),
    # a report's pictures: none drawn, or two ways to choose them at once (--first was read by nothing)
    (["--report-dir", "r", "--no-pictures", "--tasks", "t1"], "--tasks chooses the tasks to draw, and "
                                                              "--no-pictures draws none: drop one of them"),
    (["--report-dir", "r", "--no-pictures", "--first", "2"], "--first chooses the tasks to draw, and --no-pictures"),
    (["--report-dir", "r", "--tasks", "t1", "--first", "3"], "--first counts the tasks to draw when --tasks is not "
                                                             "given, and --tasks names them: give one"),
])
def test_evaluate_options_read_by_nothing_are_refused_before_any_work(tmp_path, capsys, flags, said):
    """Each was accepted with exit 0 and changed nothing: a seed without the random ids it seeds, pictures
    turned off for a report not written."""
    rc = main(["evaluate", "--weights", str(tmp_path / "none"), "--data", str(tmp_path / "none"),
               *[str(tmp_path / f) if f == "r" else f for f in flags]])
    assert rc == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def _emptied(data, dest):
    shutil.copytree(data, dest)
    meta = load_metadata(data, "test")
    shutil.rmtree(dest / "test")
    SplitWriter(dest / "test", meta.seq_len, meta.vocab_size).finish(meta.num_puzzle_identifiers)
    write_contents(dest)  # built that way: its record says so (a changed dataset is refused before it is scored)
    return dest


def test_an_empty_test_split_is_refused_not_scored_zero(sudoku4, tmp_path, capsys, caplog):
    from trm_kaggle.train import TrainResult, load_train_config
    from trm_kaggle.train.evaluation import evaluate_split
    from trm_kaggle.train.runtime import Runtime

    empty = _emptied(sudoku4, tmp_path / "empty")
    model = _model(empty)
    with pytest.raises(DataError, match="holds no examples: nothing to score"):
        score_dataset(model, empty, device="cpu")
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    rc = main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(empty), "--device", "cpu",
               "--report-dir", str(tmp_path / "rep"), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 2 and "holds no examples: nothing to score" in captured.err and "0.0000" not in captured.out
    assert not (tmp_path / "rep").exists()  # nothing half-written
    cfg = load_train_config(overrides=[f"data_paths=[{empty}]", f"checkpoint_path={tmp_path / 'r'}",
                                       "arch.hidden_size=16", "arch.num_heads=2", "arch.L_layers=1",
                                       "arch.H_cycles=1", "arch.L_cycles=1", "arch.halt_max_steps=2"])
    with caplog.at_level(logging.WARNING):
        got = evaluate_split(model, cfg, Runtime(torch.device("cpu"), torch.float32, "float32"))
    assert got == {"eval_examples": 0} and "no test examples" in caplog.text  # no accuracy, not a 0
    summary = TrainResult(tmp_path / "r", 1, 1.0, eval_metrics=got).summary()
    assert "no test examples, no accuracy" in summary


def test_arc_trajectories_vote_and_an_arc_set_without_answers_is_refused(tmp_path, capsys):
    from test_decode import build_tiny_dataset
    from trm_kaggle.evaluate.pipeline import evaluate

    data = build_tiny_dataset(tmp_path, num_aug=1, tasks=["e872b94a"])
    meta = load_metadata(data, "test")
    torch.manual_seed(0)
    model = TinyRecursiveModel(TINY_ARCH, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers)
    base = evaluate(model, data, batch_size=8, device="cpu")
    again = evaluate(model, data, batch_size=8, device="cpu", trajectories=1)
    assert np.array_equal(base.predictions.tokens, again.predictions.tokens)
    votes = evaluate(model, data, batch_size=8, device="cpu", trajectories=3, trajectory_noise=0.5, test_depth=3)
    n = len(base.predictions)
    s = votes.summary()
    assert s["num_examples"] == n and s["prediction_rows"] == len(votes.table) == 3 * n  # each trajectory votes
    assert s["settled"] is not None and 0 <= s["settled"] <= 3 * n
    from trm_kaggle.evaluate.report import write_report

    md = write_report(votes, tmp_path / "rep", pictures=False)["markdown"].read_text()
    assert f"settled {s['settled']} of {3 * n} predictions" in md and "trajectories: 3 per augmented copy" in md

    raw = json.loads((data / "test_puzzles.json").read_text())
    for task in raw.values():
        for pair in task["test"]:
            pair.pop("output")
    (data / "test_puzzles.json").write_text(json.dumps(raw))
    write_contents(data)  # a set built without answers (its record says so)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    assert main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(data), "--device", "cpu",
                 "--no-progress"]) == 2
    assert "has a known answer: nothing to score" in capsys.readouterr().err


def _ignoring(data, dest, first_ignored):
    """A copy of `data` whose test labels from position `first_ignored` on are the dataset's ignore_label_id."""
    shutil.copytree(data, dest)
    meta = load_metadata(data, "test")
    labels_file = dest / "test" / "all__labels.npy"
    labels = np.load(labels_file)
    labels[:, first_ignored:] = meta.ignore_label_id
    np.save(labels_file, labels)
    write_contents(dest)
    return dest


def test_ignored_labels_are_left_out_of_evaluates_scores_as_of_trainings(sudoku4, tmp_path, capsys):
    from trm_kaggle.data import load_split
    from trm_kaggle.train import load_train_config
    from trm_kaggle.train.evaluation import evaluate_split
    from trm_kaggle.train.runtime import Runtime

    assert load_metadata(sudoku4, "test").ignore_label_id == 0  # what build-sudoku writes
    half = _ignoring(sudoku4, tmp_path / "half", 8)
    model = _model(half, SolvesEven)
    split = load_split(half, "test")
    inputs = np.asarray(split.inputs).astype(np.int64)
    want = float(np.mean(inputs.sum(-1) % 2 == 0))
    assert 0 < want < 1
    got = score_dataset(model, half, EvaluateConfig(batch_size=3), device="cpu")
    assert got.examples == split.num_examples and got.exact == pytest.approx(want)  # an ignored token is not wrong
    cfg = load_train_config(overrides=[f"data_paths=[{half}]", f"checkpoint_path={tmp_path / 'r'}",
                                       "arch.hidden_size=16", "arch.num_heads=2", "arch.L_layers=1",
                                       "arch.H_cycles=1", "arch.L_cycles=1", "arch.halt_max_steps=2"])
    train = evaluate_split(model, cfg, Runtime(torch.device("cpu"), torch.float32, "float32"))
    assert train["eval_exact_accuracy"] == pytest.approx(got.exact, abs=1e-12)
    assert train["eval_token_accuracy"] == pytest.approx(got.token_accuracy, rel=1e-9)

    none = _ignoring(sudoku4, tmp_path / "none", 0)  # every label ignored: nothing to score, not a zero
    with pytest.raises(DataError, match=f"none of the {split.num_examples} test examples has a label to score"):
        score_dataset(model, none, device="cpu")
    plain = _model(none)
    export_inference(tmp_path / "export", plain, arch=plain.arch, seq_len=plain.seq_len, vocab_size=plain.vocab_size)
    rc = main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(none), "--device", "cpu",
               "--report-dir", str(tmp_path / "rep"), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 2 and "has a label to score" in captured.err and "0.0000" not in captured.out
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("dtype, ran", [("bfloat16", "bfloat16"), ("auto", "float32"), ("export", "float16")])
def test_the_report_records_and_the_summary_says_the_dtype_that_ran(sudoku4, tmp_path, capsys, dtype, ran):
    """evaluation.md says report.json records the dtype that ran: a Sudoku or Maze report had no dtype anywhere, and
    nothing printed said whether --dtype float16 ran. The dtype recorded is the one `auto` and `export` resolve to
    (auto: float32 on a CPU for this narrow model; export: the export's own forward_dtype)."""
    from trm_kaggle.config import ArchConfig

    meta = load_metadata(sudoku4, "test")
    torch.manual_seed(0)
    model = TinyRecursiveModel(ArchConfig(**{**TINY_ARCH.model_dump(), "forward_dtype": "float16"}), meta.seq_len,
                               meta.vocab_size, meta.num_puzzle_identifiers)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    assert main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(sudoku4), "--device", "cpu",
                 "--no-progress", "--dtype", dtype, "--report-dir", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "ACT steps: " in out and f", activations in {ran}\n" in out, out
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["summary"]["dtype"] == ran
