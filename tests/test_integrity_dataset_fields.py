"""dataset.json's fields as read from a file: strict numbers, a finite mean, and a puzzle-table count that the
dataset's names can back, checked before a table is made (a count inflated to 16 million grew a training to
13 GB before its first line)."""

from __future__ import annotations

import json
import shutil

import pytest

from cli_helpers import one_error_line
from integrity_helpers import build_sudoku4, train_args
from trm_kaggle.cli import main
from trm_kaggle.data import PuzzleLoader
from trm_kaggle.errors import DataError


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory):
    return build_sudoku4(tmp_path_factory.mktemp("data") / "sudoku4")


def edited(src, dst, **fields):
    shutil.copytree(src, dst)
    (dst / "contents.json").unlink(missing_ok=True)  # the digests would name the edit first
    for split in ("train", "test"):
        path = dst / split / "dataset.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}).replace('"NaN"', "NaN"))
    return dst


def test_an_inflated_identifier_count_is_refused_before_any_table(sudoku4, tmp_path, capsys):
    data = edited(sudoku4, tmp_path / "ds", num_puzzle_identifiers=16_000_000)
    with pytest.raises(DataError, match=r"num_puzzle_identifiers is 16,000,000, but .*identifiers.json"):
        PuzzleLoader(data, "train", global_batch_size=4, seed=0)
    line = one_error_line(capsys, main(train_args(data, tmp_path / "run")))
    # training reads identifiers.json as verify does (`check_metadata`): the count compared, in verify's words
    assert "num_puzzle_identifiers is 16000000 but identifiers.json lists 1" in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize("fields, name", [({"ignore_label_id": True}, "ignore_label_id"),
                                          ({"vocab_size": "12"}, "vocab_size"),
                                          ({"mean_puzzle_examples": "NaN"}, "mean_puzzle_examples")])
def test_a_field_of_the_wrong_kind_is_not_taken_for_a_number(sudoku4, tmp_path, capsys, fields, name):
    data = edited(sudoku4, tmp_path / "ds", **fields)
    line = one_error_line(capsys, main(["verify", str(data)]))
    assert "dataset.json" in line and name in line, line


@pytest.mark.parametrize("fields, name", [({"ignore_label_id": 10**14}, "ignore_label_id"),
                                          ({"pad_id": 10**12}, "pad_id"), ({"pad_id": -1}, "pad_id"),
                                          ({"blank_identifier_id": 5}, "blank_identifier_id")])
def test_an_id_outside_its_range_is_one_line_not_an_overflow(sudoku4, tmp_path, capsys, fields, name):
    data = edited(sudoku4, tmp_path / "ds", **fields)
    line = one_error_line(capsys, main(["verify", str(data)]))
    assert "dataset.json" in line and name in line, line
    line = one_error_line(capsys, main(train_args(data, tmp_path / "run")))
    assert name in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["../../x", "/abs/p"])
def test_a_set_name_that_is_a_path_is_said_as_one_not_as_a_missing_file(sudoku4, tmp_path, capsys, name):
    data = edited(sudoku4, tmp_path / "ds", sets=[name])
    line = one_error_line(capsys, main(["verify", str(data)]))
    assert "dataset.json: sets: a set name" in line and "is missing" not in line, line
