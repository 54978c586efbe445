"""evaluate / predict_split / score_dataset called from Python with arguments they cannot run: each is refused
before any work, in one error naming the argument, and the caller's model is left as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from test_decode import build_tiny_dataset
from trm_kaggle.config import ArchConfig, EvaluateConfig
from trm_kaggle.data.format import load_metadata, load_split
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate import predict as predict_module
from trm_kaggle.evaluate.dataset import score_dataset
from trm_kaggle.evaluate.pipeline import evaluate
from trm_kaggle.evaluate.predict import predict_split
from trm_kaggle.model.trm import TinyRecursiveModel

ARCH = ArchConfig(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                  puzzle_emb_len=1, forward_dtype="float32")
FIRST = [0, 1]  # the examples the quick runs predict


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_tiny_dataset(tmp_path_factory.mktemp("libeval"), num_aug=1, tasks=("e872b94a", "1a2e2828"))


def make_model(dataset, cls=TinyRecursiveModel, seq_len=None):
    torch.manual_seed(0)
    meta = load_metadata(dataset, "test")
    return cls(ARCH, seq_len or meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers).eval()


def weights_of(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def same_weights(model, before) -> bool:
    now = model.state_dict()
    return all(now[k].device.type == "cpu" and torch.equal(now[k], v) for k, v in before.items())


def test_a_meta_device_is_refused_before_the_model_moves(dataset):
    model = make_model(dataset)
    before = weights_of(model)
    for call in (lambda: predict_split(model, dataset, device="meta", examples=FIRST),
                 lambda: evaluate(model, dataset, device=torch.device("meta")),
                 lambda: score_dataset(model, dataset, device="meta")):
        with pytest.raises(TRMError, match=r"device=.*meta.* holds no data"):
            call()
        assert same_weights(model, before)  # on the CPU, weights and all: it was moved to meta and lost them
    assert len(predict_split(model, dataset, examples=FIRST)) == 2  # and it still runs


def test_a_failed_call_puts_the_model_back_where_it_was(dataset, monkeypatch):
    """The device a call moved the model to is left when the call fails: `placed` moves it back (here the move is
    pretended, so that a machine without a GPU checks it too)."""
    model = make_model(dataset, seq_len=16)  # another canvas: refused after the model was placed
    moves = []
    real_to = model.to
    model.to = lambda *a, **k: (moves.append(a), real_to(*a, **k))[1]
    monkeypatch.setattr(predict_module, "place_model", lambda m, d: torch.device("cuda", 0))
    with pytest.raises(TRMError, match="seq_len 16"):
        predict_split(model, dataset, device="cuda")
    assert moves == [(torch.device("cpu"),)]
    moves.clear()
    monkeypatch.setattr(predict_module, "place_model", lambda m, d: torch.device("cpu"))
    with pytest.raises(TRMError, match="seq_len 16"):
        predict_split(model, dataset)
    assert moves == []  # nothing moved: nothing to put back


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_holding_nan_or_inf_are_refused_naming_the_tensor(dataset, value):
    model = make_model(dataset)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = value  # one value: a score of 0.0 came back for the whole model
    for call in (lambda: evaluate(model, dataset, max_tasks=1), lambda: predict_split(model, dataset, examples=FIRST),
                 lambda: score_dataset(model, dataset, max_tasks=1)):
        with pytest.raises(TRMError, match=r"model: tensor lm_head\.weight holds 1 non-finite value \(NaN or inf\)"):
            call()


class OverflowingQ(TinyRecursiveModel):
    """Finite weights whose q_halt comes out NaN for the second example: activations that overflowed."""

    def inner(self, z_H, z_L, batch, logits=True):
        z_H, z_L, out, q, qc = super().inner(z_H, z_L, batch, logits)
        return z_H, z_L, out, torch.where(batch["puzzle_identifiers"] == self.bad, torch.nan, q), qc


def test_a_q_halt_that_comes_out_nan_stops_the_prediction_naming_the_example(dataset):
    model = make_model(dataset, OverflowingQ)
    model.bad = int(load_split(dataset, "test").puzzle_identifiers[1])
    with pytest.raises(TRMError, match="example 1 of the test split: the model's q_halt logit or logits came out NaN"):
        predict_split(model, dataset, examples=FIRST)
    model.bad = -5  # none: the same call runs
    assert np.isfinite(predict_split(model, dataset, examples=FIRST, keep_logits=True).q_halt).all()


def test_example_indices_must_be_whole_numbers(dataset):
    model = make_model(dataset)
    for bad in (np.array([0.5, 1.7]), [0, 1.0], [True, False], torch.tensor([0.0, 1.0]), [[0, 1]], 0, ["0"]):
        with pytest.raises(TRMError, match="examples: expected a list of whole-number example indices"):
            predict_split(model, dataset, examples=bad)
    one = predict_split(model, dataset, examples=FIRST)
    for good in (np.array(FIRST, dtype=np.uint8), torch.tensor(FIRST), (np.int64(0), 1)):
        assert np.array_equal(predict_split(model, dataset, examples=good).tokens, one.tokens)
    assert len(predict_split(model, dataset, examples=[])) == 0


def test_cfg_may_be_a_dict_of_its_fields_and_nothing_else():
    from trm_kaggle.evaluate.predict import evaluate_config

    assert evaluate_config({"batch_size": 8}, {"max_tasks": 2}) == EvaluateConfig(batch_size=8, max_tasks=2)
    assert evaluate_config({"batch_size": 8}, {"batch_size": 4}).batch_size == 4  # settings over cfg, as for a config
    assert evaluate_config(None, {}) == EvaluateConfig()
    with pytest.raises(TRMError, match="EvaluateConfig: .*batch_sise"):
        evaluate_config({"batch_sise": 8}, {})
    for bad in (8, "batch_size=8", [("batch_size", 8)]):
        with pytest.raises(TypeError, match="cfg: expected an EvaluateConfig or a dict of its fields"):
            evaluate_config(bad, {})
    with pytest.raises(TypeError, match="cfg: a dict of EvaluateConfig fields is keyed by their names"):
        evaluate_config({1: 8}, {})


def test_evaluate_takes_its_cfg_as_a_dict(dataset):
    model = make_model(dataset)
    result = evaluate(model, dataset, {"max_tasks": 1, "batch_size": 8})  # was AttributeError: no 'updated'
    assert len(result.test_set.task_ids) == 1
    with pytest.raises(TypeError, match="cfg: expected an EvaluateConfig"):
        evaluate(model, dataset, 8)


def test_a_path_or_other_object_for_the_model_is_a_type_error_naming_it(dataset, tmp_path):
    for call in (evaluate, predict_split, score_dataset):
        with pytest.raises(TypeError, match=r"model='exparc' is a path, not a model: .*load_model_for_dataset"):
            call("exparc", dataset)
        with pytest.raises(TypeError, match=r"model='.*exparc' is a path"):
            call(tmp_path / "exparc", dataset)
        with pytest.raises(TypeError, match="model: expected a TinyRecursiveModel .*, got dict"):
            call({"arch": ARCH}, dataset)


def test_a_dataset_folder_that_is_not_there_is_said_so(dataset, tmp_path):
    model = make_model(dataset)
    for call in (evaluate, predict_split, score_dataset):
        with pytest.raises(DataError, match=r"nope: dataset folder not found$"):  # was "test_puzzles.json not found"
            call(model, tmp_path / "nope")
    with pytest.raises(DataError, match="dataset folder expected, found a file"):
        evaluate(model, dataset / "identifiers.json")
    with pytest.raises(TypeError, match="dataset_dir: expected a dataset folder's path, got int"):
        predict_split(model, 3)  # stat'ed as file descriptor 3


def test_evaluate_on_a_dataset_without_test_puzzles_points_to_score_dataset(dataset, sudoku4):
    with pytest.raises(DataError, match=r"test_puzzles.json not found .*scored by trm_kaggle\.evaluate\.dataset\."
                                        r"score_dataset"):
        evaluate(make_model(dataset), sudoku4)


# --- arguments and files checked before any inference; a cut evaluation says so -------------------------------


def _no_inference(monkeypatch):
    from trm_kaggle.evaluate import pipeline as pipeline_module

    def boom(*a, **k):
        raise AssertionError("predicted before the check")

    monkeypatch.setattr(pipeline_module, "predict_split", boom)


@pytest.mark.parametrize("output, said", [
    ([[1] * 31] * 31, "size 31x31 is outside 1..30"), ([[12]], "value 12"), ([[1.5]], "value 1.5"),
    ([[True]], "value True")])
def test_a_test_output_that_is_no_arc_grid_is_refused_before_inference(dataset, tmp_path, monkeypatch, output,
                                                                         said):
    import json
    import shutil

    data = tmp_path / "d"
    shutil.copytree(dataset, data)
    raw = json.loads((data / "test_puzzles.json").read_text())
    task = next(iter(raw))
    raw[task]["test"][0]["output"] = output
    (data / "test_puzzles.json").write_text(json.dumps(raw))
    _no_inference(monkeypatch)
    with pytest.raises(DataError, match=f"test_puzzles.json: task {task} test pair 0 output: {said}"):
        evaluate(make_model(dataset), data)


def test_pool_with_is_checked_as_a_votes_file_before_inference(dataset, tmp_path, monkeypatch):
    from trm_kaggle.evaluate.vote import VoteTable

    model = make_model(dataset)
    table = VoteTable.from_grids([(("e872b94a", 0), np.ones((2, 2), np.uint8), 0.0)])
    table.save(tmp_path / "v.npz")
    table.q_halt[0] = np.nan  # changed after it was made: ranked the truth last
    _no_inference(monkeypatch)
    with pytest.raises(ValueError, match="^pool_with: non-finite q_halt"):
        evaluate(model, dataset, pool_with=table)
    small = VoteTable.from_grids([(("e872b94a", 0), np.ones((2, 2), np.uint8), 0.0)], side=10)
    with pytest.raises(DataError, match="^pool_with: votes on a 10x10 canvas"):  # merge's words came after inference
        evaluate(model, dataset, pool_with=small)
    with pytest.raises(TypeError, match="^pool_with: expected a VoteTable or the path of a votes file, got int"):
        evaluate(model, dataset, pool_with=5)
    with pytest.raises(AssertionError, match="predicted before the check"):  # a path is loaded, as --pool-with's
        evaluate(model, dataset, pool_with=str(tmp_path / "v.npz"))
    with pytest.raises(TypeError, match="^ks: expected a list of whole numbers, got NoneType"):
        evaluate(model, dataset, ks=None)


def test_an_evaluation_the_deadline_cut_before_any_prediction_scores_nothing(dataset, tmp_path):
    from trm_kaggle.evaluate.report import format_metrics, write_report

    result = evaluate(make_model(dataset), dataset, deadline=0.0)
    s = result.summary()
    assert s["arc_prize_score"] is None and s["mean_steps"] is None and s["token_accuracy"] is None
    assert s["predicted_rows"] == 0 and s["cut_test_outputs"] == len(result.test_set.slots)
    text = format_metrics(s)
    assert "CUT by the deadline" in text and "nothing was predicted: nothing scored" in text and "0.0000" not in text
    with pytest.raises(DataError, match="the deadline came before the first prediction: nothing to score"):
        write_report(result, tmp_path / "rep")
    assert not (tmp_path / "rep").exists()


def test_report_arguments_are_checked_and_named(dataset, tmp_path):
    from trm_kaggle.evaluate.report import task_picture_png, task_report, write_dataset_report, write_report

    result = evaluate(make_model(dataset), dataset, max_tasks=1)
    with pytest.raises(TRMError, match=r"tasks: 'a\\x1b\[2J\\x07' not in the test split") as e:
        write_report(result, tmp_path / "rep", tasks=["a\x1b[2J\x07"])
    assert "\x1b" not in str(e.value)
    for call, kind, said in (
            (lambda: write_report(result, tmp_path / "rep", tasks=[5]), TypeError, r"tasks\[0\]: expected a str"),
            (lambda: write_report({"a": 1}, tmp_path / "rep"), TypeError, "result: expected an EvalResult"),
            (lambda: write_report(result, tmp_path / "rep", weights={"path": "x"}), TypeError, "weights: expected"),
            (lambda: write_dataset_report([1], tmp_path / "rep"), TypeError, "summary: expected a dict"),
            (lambda: task_report(result, top=0), ValueError, "top=0"),
            (lambda: task_report(result, top=-1), ValueError, "top=-1"),
            (lambda: task_picture_png(result, "e872b94a", attempts=0), ValueError, "attempts=0"),
            (lambda: task_picture_png(result, "e872b94a", attempts=100), ValueError, "attempts=100"),
            (lambda: task_picture_png(result, "nope"), ValueError, "task 'nope' is not a task of the test set")):
        with pytest.raises(kind, match=said):
            call()
    assert not (tmp_path / "rep").exists()
