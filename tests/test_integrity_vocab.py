"""Tokens outside 0.. are found when a dataset is opened for training or evaluation (one line naming
the file, the row and the token), not as an IndexError inside the model's embedding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from integrity_helpers import build_sudoku4, train_args
from trm_kaggle.cli import main
from trm_kaggle.data.contents import CONTENTS_FILE
from trm_kaggle.data.loader import PuzzleLoader
from trm_kaggle.errors import DataError


@pytest.fixture
def data(tmp_path):
    out = build_sudoku4(tmp_path / "sudoku4")
    (out / CONTENTS_FILE).unlink()  # as a dataset from upstream's builders, which record no contents
    return out


def vocab(data) -> int:
    return json.loads((data / "train" / "dataset.json").read_text())["vocab_size"]


def poke(data, rel: str, row: int, col: int, value) -> None:
    a = np.load(data / rel, mmap_mode="r+")
    a[row, col] = value
    a.flush()


def rewrite_as(data, rel: str, dtype) -> None:
    np.save(data / rel, np.load(data / rel).astype(dtype))


CASES = [
    ("train/all__inputs.npy", 3, "vocab"),  # the first token past the vocabulary
    ("train/all__inputs.npy", 7, 200),
    ("train/all__labels.npy", 0, "vocab"),
    ("train/all__labels.npy", 9, 255),
    ("train/all__inputs.npy", 5, -1),  # a signed file
    ("train/all__labels.npy", 1, 70000),
]


@pytest.mark.parametrize("rel, row, value", CASES)
def test_train_names_the_file_row_and_token(data, tmp_path, capsys, rel, row, value):
    value = vocab(data) if value == "vocab" else value
    if value < 0 or value > 255:
        rewrite_as(data, rel, np.int32)
    poke(data, rel, row, 2, value)
    code = main(train_args(data, tmp_path / "run", "max_steps=1"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and f"{rel}: row {row} has token {value}, outside 0.." in err[0]
    assert "IndexError" not in err[0]
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("state_step*.pt"))


def test_the_test_split_is_checked_when_it_is_opened(data):
    poke(data, "test/all__labels.npy", 4, 0, 99)
    PuzzleLoader([data], "train", 8)  # the train split is fine
    with pytest.raises(DataError, match="test/all__labels.npy: row 4 has token 99"):
        PuzzleLoader([data], "test", 8)


def test_verify_says_the_same(data, capsys):
    poke(data, "train/all__inputs.npy", 6, 1, 77)
    assert main(["verify", str(data)]) == 2
    assert "train/all__inputs.npy: row 6 has token 77, outside 0.." in capsys.readouterr().err


def test_the_ignore_label_is_not_a_token(data):
    meta = json.loads((data / "train" / "dataset.json").read_text())
    meta["ignore_label_id"] = -100
    (data / "train" / "dataset.json").write_text(json.dumps(meta))
    rewrite_as(data, "train/all__labels.npy", np.int32)
    poke(data, "train/all__labels.npy", 0, 0, -100)
    PuzzleLoader([data], "train", 8)
    poke(data, "train/all__labels.npy", 0, 0, -99)
    with pytest.raises(DataError, match="row 0 has token -99"):
        PuzzleLoader([data], "train", 8)


@pytest.mark.parametrize("value", [np.nan, np.inf, 0.5])
@pytest.mark.parametrize("rel", ["train/all__inputs.npy", "test/all__labels.npy"])
def test_float_tokens_are_refused_where_the_split_is_opened(data, rel, value):
    # a NaN made the range check's int() raise, an inf overflow, and a fraction was trained on as its floor
    rewrite_as(data, rel, np.float32)
    poke(data, rel, 2, 1, value)
    with pytest.raises(DataError, match=f"{rel}: dtype float32 with shape .*, expected a 2-D integer array"):
        PuzzleLoader([data], rel.split("/")[0], 8)


@pytest.mark.parametrize("field", ["puzzle_indices", "group_indices", "puzzle_identifiers"])
def test_index_arrays_of_floats_or_another_rank_are_refused(data, field):
    rel = f"train/all__{field}.npy"
    a = np.load(data / rel)
    np.save(data / rel, a.astype(np.float64))
    with pytest.raises(DataError, match=f"{rel}: dtype float64 with shape .*, expected a 1-D integer array"):
        PuzzleLoader([data], "train", 8)
    np.save(data / rel, a[None, :])  # once a truth-value ValueError in the loader's check
    with pytest.raises(DataError, match=f"{rel}: dtype .* with shape \\(1, .*, expected a 1-D integer array"):
        PuzzleLoader([data], "train", 8)


def test_train_and_evaluate_refuse_float_tokens_in_one_line(data, tmp_path, capsys):
    assert main(train_args(data, tmp_path / "run", "max_steps=1")) == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "w")]) == 0
    capsys.readouterr()
    for rel, value in (("train/all__inputs.npy", np.inf), ("test/all__inputs.npy", np.nan)):
        rewrite_as(data, rel, np.float64)
        poke(data, rel, 0, 0, value)
    assert main(train_args(data, tmp_path / "run2", "max_steps=1")) == 2
    assert main(["evaluate", "--weights", str(tmp_path / "w"), "--data", str(data), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert "train/all__inputs.npy: dtype float64 with shape" in err[0]
    # evaluate runs verify's metadata checks on the whole dataset first: its first problem is the train split's
    assert "train/all__inputs.npy: dtype float64 with shape" in err[1]
    assert not list((tmp_path / "run2").glob("state_step*.pt"))
