"""A resumed run notices a dataset rebuilt in place with other contents and the same shapes: every builder
records what each file holds (contents.json), a resume compares its hash (cheaply checked against the files),
and datasets built before the record fall back to the fingerprint of their metadata and sizes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from integrity_helpers import build_sudoku4, train_args
from trm_kaggle.cli import main
from trm_kaggle.config import ArcBuildConfig, MazeBuildConfig
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.data.contents import CONTENTS_FILE, contents_hash
from trm_kaggle.data.puzzles.maze import build_maze
from trm_kaggle.errors import DataError
from trm_kaggle.train import checkpoint as ckpt

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"


def error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1, err
    return err[0]


def same_shapes(a, b) -> bool:
    from trm_kaggle.data.format import read_npy_header

    return all(read_npy_header(a / s / "all__inputs.npy") == read_npy_header(b / s / "all__inputs.npy")
               for s in ("train", "test"))


def test_a_dataset_rebuilt_in_place_with_other_contents_is_refused_at_resume(tmp_path, capsys):
    data, run = tmp_path / "sudoku4", tmp_path / "run"
    build_sudoku4(data, seed=42)
    assert main(train_args(data, run, "max_steps=2")) == 0
    shutil.copytree(data, tmp_path / "before")
    build_sudoku4(data, seed=43)  # the same command with another seed: same shapes, other puzzles
    assert same_shapes(data, tmp_path / "before")
    assert (data / "train" / "dataset.json").read_bytes() == (tmp_path / "before" / "train" / "dataset.json").read_bytes()
    capsys.readouterr()
    assert main(train_args(data, run, "max_steps=4")) == 2
    line = error_line(capsys)
    assert "the dataset changed since this checkpoint" in line and "state_step00000002.pt" in line, line
    assert [p.name for p in ckpt.list_states(run)] == ["state_step00000002.pt"]  # nothing changed in the run


def test_a_rebuild_with_the_same_contents_resumes(tmp_path):
    data, run = tmp_path / "sudoku4", tmp_path / "run"
    build_sudoku4(data, seed=42)
    assert main(train_args(data, run, "max_steps=2")) == 0
    build_sudoku4(data, seed=42)  # rebuilt, byte for byte the same data
    assert main(train_args(data, run, "max_steps=3")) == 0
    assert ckpt.newest_step(run) == 3


@pytest.mark.parametrize("victim", ["train/all__inputs.npy", "train/all__labels.npy", "test/all__inputs.npy",
                                    "identifiers.json"])
def test_a_file_replaced_after_the_build_is_named(tmp_path, capsys, victim):
    data, other = tmp_path / "sudoku4", tmp_path / "other"
    build_sudoku4(data, seed=42)
    build_sudoku4(other, seed=44)
    if victim == "identifiers.json":  # same length, one name changed
        ids = json.loads((data / victim).read_text())
        ids[-1] = ids[-1][:-1] + ("x" if ids[-1][-1] != "x" else "y")
        (data / victim).write_text(json.dumps(ids))
    else:
        shutil.copyfile(other / victim, data / victim)
    with pytest.raises(DataError, match=f"{victim}: differs from the contents its builder recorded"):
        contents_hash(data)
    capsys.readouterr()
    assert main(train_args(data, tmp_path / "run", "max_steps=1")) == 2
    assert victim in error_line(capsys)
    assert main(["verify", str(data)]) == 2
    assert victim in error_line(capsys)
    # evaluating it is refused the same (it was scored as built)
    assert main(["evaluate", "--weights", str(SHIPPED), "--data", str(data), "--no-progress"]) == 2
    assert victim in error_line(capsys)


@pytest.mark.parametrize("edit", ["one entry dropped", "every entry dropped", "an entry's hashes changed"])
def test_a_record_whose_list_was_edited_is_refused(tmp_path, capsys, edit):
    """A label array changed after the build, and its entry taken out of contents.json (or the whole list emptied):
    `verify` said OK, as the overall hash was never compared with the list it stands for."""
    data, other = tmp_path / "sudoku4", tmp_path / "other"
    build_sudoku4(data, seed=42)
    build_sudoku4(other, seed=44)
    victim = "train/all__labels.npy"
    shutil.copyfile(other / victim, data / victim)
    record = json.loads((data / CONTENTS_FILE).read_text())
    if edit == "one entry dropped":
        del record["files"][victim]
    elif edit == "every entry dropped":
        record["files"] = {}
    else:
        record["files"][victim] = json.loads((other / CONTENTS_FILE).read_text())["files"][victim]
    (data / CONTENTS_FILE).write_text(json.dumps(record))
    with pytest.raises(DataError, match="contents.json: its list of files does not add up to its recorded hash"):
        contents_hash(data)
    assert main(["verify", str(data)]) == 2
    assert "does not add up" in error_line(capsys)


def test_a_special_file_in_place_of_a_split_folder_is_named_as_what_it_is(tmp_path, capsys):
    data = tmp_path / "sudoku4"
    build_sudoku4(data, seed=42)
    shutil.rmtree(data / "test")
    os.mkfifo(data / "test")
    with pytest.raises(DataError, match=r"test: folder expected, found a pipe \(FIFO\), where test/"):
        contents_hash(data)
    capsys.readouterr()
    assert main(train_args(data, tmp_path / "run", "max_steps=1")) == 2
    assert "directory expected, found a pipe (FIFO)" in error_line(capsys)  # verify's words, train's first check


def test_datasets_built_before_the_record_fall_back_to_the_old_fingerprint(tmp_path, capsys):
    data, run = tmp_path / "sudoku4", tmp_path / "run"
    build_sudoku4(data, seed=42)
    (data / CONTENTS_FILE).unlink()
    assert contents_hash(data) is None
    legacy = ckpt.dataset_fingerprint([str(data)])
    assert main(train_args(data, run, "max_steps=2")) == 0
    assert main(train_args(data, run, "max_steps=3")) == 0  # resumes
    assert ckpt.newest_step(run) == 3
    assert main(["verify", str(data)]) == 0
    # what the old fingerprint sees (metadata, identifiers, sizes) still stops a resume
    ids = json.loads((data / "identifiers.json").read_text())
    (data / "identifiers.json").write_text(json.dumps(ids + ["extra"]))
    for split in ("train", "test"):  # kept consistent: the metadata checks (verify's) would refuse it first
        meta = json.loads((data / split / "dataset.json").read_text())
        meta["num_puzzle_identifiers"] = len(ids) + 1
        (data / split / "dataset.json").write_text(json.dumps(meta))
    assert ckpt.dataset_fingerprint([str(data)]) != legacy
    capsys.readouterr()
    assert main(train_args(data, run, "max_steps=4")) == 2
    assert "the dataset changed since this checkpoint" in error_line(capsys)


def test_every_builder_records_its_contents(tmp_path, arc_prefix):
    build_arc(ArcBuildConfig(output_dir=str(tmp_path / "arc"), input_file_prefix=str(arc_prefix),
                             subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=2,
                             progress=False, workers=1))
    build_maze(MazeBuildConfig(output_dir=str(tmp_path / "maze"), size=7, num_train=4, num_test=2, progress=False))
    build_sudoku4(tmp_path / "sudoku")
    for name in ("arc", "maze", "sudoku"):
        record = json.loads((tmp_path / name / CONTENTS_FILE).read_text())
        assert {"identifiers.json", "train/all__inputs.npy", "test/all__labels.npy"} <= set(record["files"]), name
        assert contents_hash(tmp_path / name, full=True) == record["sha256"]
    assert "test_puzzles.json" in json.loads((tmp_path / "arc" / CONTENTS_FILE).read_text())["files"]
    # two builds of other contents differ, two of the same do not
    build_arc(ArcBuildConfig(output_dir=str(tmp_path / "arc2"), input_file_prefix=str(arc_prefix),
                             subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=2, seed=7,
                             progress=False, workers=1))
    assert contents_hash(tmp_path / "arc2") != contents_hash(tmp_path / "arc")
    build_sudoku4(tmp_path / "sudoku-again")
    assert contents_hash(tmp_path / "sudoku-again") == contents_hash(tmp_path / "sudoku")
