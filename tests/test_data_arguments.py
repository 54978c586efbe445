"""The data layer's library calls name a wrong argument where it is given, before any work: an empty path, a
config or tasks of the wrong type, puzzle names and tokens a dataset cannot hold; and its ARC sources say what a
challenges file holds (no task, test outputs unlike its solutions')."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.config.data import ArcBuildConfig, MazeBuildConfig, SudokuBuildConfig
from trm_kaggle.data import (LoadReport, PuzzleLoader, build_arc, build_grid_dataset, build_maze, build_sudoku,
                             contents_hash, load_identifiers, load_metadata, load_split, read_challenges, rule_tasks,
                             verify_dataset)
from trm_kaggle.data.arc.build import collect_jobs
from trm_kaggle.data.arc.tasks import load_challenges, load_subset, load_task_dir
from trm_kaggle.data.puzzles.grids import build_grid_dataset_from_jsonl
from trm_kaggle.errors import DataError, TRMError

GRID = np.ones((2, 2), dtype=int)


def grid_build(out, **changes) -> dict:
    args = dict(train=[[("p", [(GRID, GRID)])]], test=[[("q", [(GRID, GRID)])]], vocab_size=5, grid_shape=(2, 2))
    return build_grid_dataset(out, **{**args, **changes})


@pytest.fixture
def in_dataset(tmp_path, monkeypatch) -> Path:
    """The current folder is a dataset (where '' read as the current folder found one) and a sibling of its own."""
    grid_build(tmp_path / "ds")
    (tmp_path / "ds" / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path / "ds")
    return tmp_path / "ds"


@pytest.mark.parametrize("call", [
    lambda: grid_build(""),
    lambda: verify_dataset(""),
    lambda: load_metadata("", "train"),
    lambda: load_split("", "train"),
    lambda: load_identifiers(""),
    lambda: contents_hash(""),
    lambda: PuzzleLoader("", global_batch_size=2),
    lambda: PuzzleLoader([".", ""], global_batch_size=2),
    lambda: read_challenges(""),
    lambda: load_challenges(""),
    lambda: load_task_dir(""),
    lambda: load_subset("train", task_dir=""),
    lambda: build_grid_dataset_from_jsonl("", "out", 5, (2, 2)),
    lambda: build_grid_dataset_from_jsonl("x.jsonl", "", 5, (2, 2)),
])
def test_an_empty_path_is_refused_never_read_as_the_current_folder(in_dataset, call):
    before = sorted(os.listdir(in_dataset))
    with pytest.raises(TRMError, match=r"(dataset_dir|dataset_paths(\[1\])?|output_dir|source|challenges|directory|"
                                       r"task_dir|path) is empty"):
        call()
    assert sorted(os.listdir(in_dataset)) == before and (in_dataset / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("call, words", [
    (lambda: build_arc({"output_dir": "o"}), r"cfg: expected an ArcBuildConfig .*got dict"),
    (lambda: build_arc(None), r"cfg: expected an ArcBuildConfig .*got None"),
    (lambda: build_sudoku({"output_dir": "o"}), r"cfg: expected a SudokuBuildConfig .*got dict"),
    (lambda: build_maze(None), r"cfg: expected a MazeBuildConfig .*got None"),
    (lambda: build_maze(SudokuBuildConfig(output_dir="o")), r"cfg: expected a MazeBuildConfig .*SudokuBuildConfig"),
    (lambda: build_arc(ArcBuildConfig(output_dir="o", subsets=["s"], test_set_name="s"), loaded=5),
     r"loaded: expected None or a dict of subset names to LoadReport.*\(int\)"),
    (lambda: build_arc(ArcBuildConfig(output_dir="o", subsets=["s"], test_set_name="s"), loaded={"s": {}}),
     r"loaded: expected None or a dict of subset names to LoadReport"),
    (lambda: grid_build(5), r"output_dir: expected the dataset folder's path .*got int"),
])
def test_the_builders_name_an_argument_of_the_wrong_type_before_any_work(tmp_path, monkeypatch, call, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=words):
        call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("changes, error, words", [
    ({"train": [[("a\x1b[2Jb\n", [(GRID, GRID)])]]}, DataError, r"train group 0 puzzle 0: puzzle name .*holds"),
    ({"train": [[("a/../b", [(GRID, GRID)])]]}, DataError, "puzzle name 'a/../b' holds '/'"),
    ({"train": [[("..", [(GRID, GRID)])]]}, DataError, "puzzle name '..' is not a name"),
    ({"train": [[("x|||t1|||0", [(GRID, GRID)])]]}, DataError, "puzzle name 'x|||t1|||0' holds '|||'"),
    ({"identifiers": ["a", "b", "a"]}, DataError, "identifiers entry 2: 'a' is given twice"),
    ({"ignore_label_id": -5}, ValueError, r"ignore_label_id=-5: expected a whole number from 0 to 4"),
    ({"pad_id": 9}, ValueError, r"pad_id=9: expected a whole number from 0 to 4"),
])
def test_build_grid_dataset_refuses_names_and_tokens_no_dataset_holds(tmp_path, changes, error, words):
    with pytest.raises(error, match=words) as e:
        grid_build(tmp_path / "ds", **changes)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_build_grid_dataset_with_no_ignore_label_builds(tmp_path):
    assert grid_build(tmp_path / "ds", ignore_label_id=None, identifiers=["<blank>", "p"])["train"]["puzzles"] == 1


@pytest.mark.parametrize("model", [ArcBuildConfig, SudokuBuildConfig, MazeBuildConfig])
@pytest.mark.parametrize("value", ["no", "yes", 1, None])
def test_a_builders_flag_is_a_bool_never_a_truthy_value(model, value):
    with pytest.raises(ValueError, match=r"progress=.*expected True or False"):
        model(output_dir="o", progress=value)
    assert model(output_dir="o", progress=np.bool_(False)).progress is False


def test_arc_build_paths_take_an_os_pathlike(tmp_path):
    cfg = ArcBuildConfig(output_dir=tmp_path / "o", input_file_prefix=Path("arc/a"), skip_invalid=True)
    assert (cfg.output_dir, cfg.input_file_prefix, cfg.skip_invalid) == (str(tmp_path / "o"), "arc/a", True)
    assert SudokuBuildConfig(output_dir=Path("o"), input_dir=Path("csv")).input_dir == "csv"


def write_subset(folder: Path, subset: str, challenges: dict, solutions: dict | None) -> None:
    (folder / f"a_{subset}_challenges.json").write_text(json.dumps(challenges))
    if solutions is not None:
        (folder / f"a_{subset}_solutions.json").write_text(json.dumps(solutions))


TASK = {"train": [{"input": [[1]], "output": [[1]]}], "test": [{"input": [[1]]}]}


@pytest.mark.parametrize("solutions", [{}, None])
def test_a_challenges_file_of_no_task_is_named_as_such(tmp_path, solutions):
    write_subset(tmp_path, "training", {"t1": TASK}, None)
    write_subset(tmp_path, "evaluation", {}, solutions)
    cfg = ArcBuildConfig(output_dir=str(tmp_path / "out"), input_file_prefix=str(tmp_path / "a"),
                         subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=1, canvas=8,
                         workers=1, progress=False)
    with pytest.raises(DataError, match=r"a_evaluation_challenges.json: holds no tasks \(from --input-file-prefix "
                                        r".* and subset evaluation\)"):
        build_arc(cfg)
    assert not (tmp_path / "out").exists()


def test_test_outputs_unlike_the_solutions_file_are_warned_once_naming_file_and_task(tmp_path):
    own = {"train": TASK["train"], "test": [{"input": [[1]], "output": [[5]]}]}
    same = {"train": TASK["train"], "test": [{"input": [[1]], "output": [[1]]}]}
    write_subset(tmp_path, "evaluation", {"t1": own, "t2": same, "t3": own}, {t: [[[1]]] for t in ("t1", "t2", "t3")})
    cfg = ArcBuildConfig(output_dir=str(tmp_path / "out"), input_file_prefix=str(tmp_path / "a"),
                         subsets=["evaluation"], test_set_name="evaluation", progress=False)
    _, notes = collect_jobs(cfg)
    warned = [text for level, text in notes if level == logging.WARNING and "differ" in text]
    assert warned == [f"{tmp_path / 'a_evaluation_solutions.json'}: the test outputs of 2 tasks differ from those "
                      f"{tmp_path / 'a_evaluation_challenges.json'} holds itself (e.g. task t1): the solutions "
                      "file's are used"]
    report = load_subset("evaluation", input_file_prefix=str(tmp_path / "a"))
    assert report.tasks["t1"].test_outputs[0].tolist() == [[1]]  # the solutions file's, as before


def test_in_memory_tasks_still_build(tmp_path):
    report = LoadReport(tasks={t.id: t for t in rule_tasks(2, 0, max_side=5)})
    cfg = ArcBuildConfig(output_dir=str(tmp_path / "o"), subsets=["s"], test_set_name="s", num_aug=1, canvas=8,
                         progress=False, workers=1)
    assert build_arc(cfg, {"s": report})["tasks"] == 2
