import json
import os
import re
import shutil

import numpy as np
import pytest

from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.data.verify import format_summary, verify_dataset
from trm_kaggle.errors import DataError


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    import numpy as np
    from conftest import random_task, write_prefix_subset
    root = tmp_path_factory.mktemp("verify")
    rng = np.random.default_rng(1)
    write_prefix_subset(root / "p", "training", {f"t{i}": random_task(rng) for i in range(4)})
    write_prefix_subset(root / "p", "evaluation", {f"e{i}": random_task(rng, n_test=2) for i in range(2)})
    build_arc(ArcBuildConfig(output_dir=str(root / "ds"), input_file_prefix=str(root / "p"),
                             subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=3,
                             progress=False, workers=1))
    return root / "ds"


@pytest.fixture
def ds(good, tmp_path):
    shutil.copytree(good, tmp_path / "ds")
    return tmp_path / "ds"


def test_good_dataset_summary(good):
    s = verify_dataset(good)
    assert s["identifiers"] == 1 + 6 * 4 and s["test_tasks"] == 2
    assert s["splits"]["train"]["groups"] == 6 and s["splits"]["test"]["examples"] == 2 * 2 * 4
    text = format_summary(s)
    assert "OK" in text and "train" in text and "test" in text and len(text.splitlines()) <= 24


def _resave(path, fn):
    arr = np.load(path)
    np.save(path, fn(arr))


def _edit_json(path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


@pytest.mark.parametrize("corrupt, message", [
    (lambda d: shutil.rmtree(d / "test"), "test: split directory not found"),
    # a special file where a folder should be is named as what it is, never as missing
    (lambda d: (shutil.rmtree(d / "test"), os.mkfifo(d / "test")),
     r"test: split directory expected, found a pipe \(FIFO\)"),
    (lambda d: (shutil.rmtree(d / "test"), os.symlink("/dev/zero", d / "test")),
     r"split directory expected, found a character device \(it links to /dev/zero\)"),
    (lambda d: (d / "identifiers.json").write_text('["x"]'), "entry 0 must be '<blank>'"),
    (lambda d: _resave(d / "train/all__inputs.npy", lambda a: a[:, :-1]), "shape"),
    (lambda d: _resave(d / "train/all__labels.npy", lambda a: a[:-1]), "differ in shape"),
    (lambda d: _resave(d / "train/all__inputs.npy", lambda a: np.where(a == 3, 12, a).astype(np.uint8)), "outside 0..11"),
    (lambda d: _resave(d / "train/all__inputs.npy", lambda a: a.astype(np.float32)), "expected a 2-D integer array"),
    (lambda d: _resave(d / "train/all__puzzle_indices.npy", lambda a: a[::-1].copy()), "must start at 0"),
    (lambda d: _resave(d / "train/all__puzzle_indices.npy", lambda a: np.r_[a[:3], a[2], a[4:]].astype(np.int32)), "not strictly increasing"),
    (lambda d: _resave(d / "train/all__puzzle_indices.npy", lambda a: np.r_[a[:-1], a[-1] - 1].astype(np.int32)), "ends at"),
    (lambda d: _resave(d / "test/all__group_indices.npy", lambda a: a[:-1]), "group_indices has"),
    # the expected length comes from dataset.json, so the message names it (an edited count blamed the array)
    (lambda d: _edit_json(d / "train/dataset.json", total_puzzles=json.loads((d / "train/dataset.json").read_text())
                          ["total_puzzles"] + 1), r"expected \d+ \(dataset.json's total_puzzles \d+, plus one\)"),
    (lambda d: _resave(d / "train/all__puzzle_identifiers.npy", lambda a: a + 1000), "outside the table"),
    # the side that is out: a -1 was said as the largest identifier, a valid one
    (lambda d: _resave(d / "train/all__puzzle_identifiers.npy",
                       lambda a: np.r_[a[:2], -1, a[3:]].astype(np.int32)), r"puzzle identifier -1 outside the table"),
    (lambda d: _edit_json(d / "train/dataset.json", num_puzzle_identifiers=3), "identifiers.json lists"),
    (lambda d: _edit_json(d / "train/dataset.json", mean_puzzle_examples=9.5), "mean_puzzle_examples"),
    (lambda d: _edit_json(d / "test_puzzles.json", e0=None), "e0"),
    (lambda d: (d / "train/all__group_indices.npy").unlink(), "all__group_indices.npy: missing"),
    (lambda d: (d / "train/dataset.json").write_text("{"), "unreadable"),
])
def test_first_problem_is_reported(ds, corrupt, message):
    corrupt(ds)
    with pytest.raises(DataError, match=message):
        verify_dataset(ds)


def test_test_puzzle_count_mismatch(ds):
    tp = json.loads((ds / "test_puzzles.json").read_text())
    tp["e1"]["test"].pop()
    (ds / "test_puzzles.json").write_text(json.dumps(tp))
    with pytest.raises(DataError, match="task e1 has 1 test input but the test split holds 2"):
        verify_dataset(ds)


def test_a_test_task_id_evaluate_would_refuse_is_refused_here(ds):
    """A task id holding control characters or a '/' (or past 128 characters) passed verify, trained, and was
    refused by evaluate only after the training: the ids become the report's file names."""
    bad = "\x1b[31mx/y\n"
    tp = json.loads((ds / "test_puzzles.json").read_text())
    tp[bad] = tp.pop("e0")
    (ds / "test_puzzles.json").write_text(json.dumps(tp))
    with pytest.raises(DataError, match=r"test_puzzles.json: task id .* holds"):
        verify_dataset(ds)


@pytest.mark.parametrize("grid, said", [([[9]], "test input 0 differs from the test split's example"),
                                        ([[99]], "test input 0 is no grid of colours 0-9")])
def test_a_test_input_test_puzzles_json_and_the_split_disagree_on_is_refused(ds, grid, said):
    """verify checked counts only: an edited test input passed, trained, and evaluate refused it after training."""
    tp = json.loads((ds / "test_puzzles.json").read_text())
    tp["e1"]["test"][0]["input"] = grid
    (ds / "test_puzzles.json").write_text(json.dumps(tp))
    with pytest.raises(DataError, match=f"task e1: {said}"):
        verify_dataset(ds)


def _renamed_augmented_puzzle(good, tmp_path, rename) -> tuple:
    """A copy of `good` without contents.json (an upstream or older dataset has none) whose first augmented puzzle
    of the test task e0 is named `rename(task, transform, perm)` in identifiers.json: (the copy, the new name)."""
    copy = tmp_path / "copy"
    shutil.copytree(good, copy)
    (copy / "contents.json").unlink()
    ids = json.loads((copy / "identifiers.json").read_text())
    k = next(i for i, name in enumerate(ids) if name.startswith("e0|||"))
    ids[k] = rename(*ids[k].split("|||"))
    (copy / "identifiers.json").write_text(json.dumps(ids))
    return copy, ids[k]


AUGMENTED_NAMES_EVALUATE_REFUSES = [
    pytest.param(lambda task, t, perm: f"{task}|||t9|||{perm}", r"not an augmented puzzle name", id="no-transform"),
    pytest.param(lambda task, t, perm: f"{task}|||t{(int(t[1:]) + 1) % 8}|||{perm}",
                 r"does not un-augment to test input 0 of task e0 in test_puzzles.json", id="another-transform"),
    pytest.param(lambda task, t, perm: f"e1|||{t}|||{perm}", r"does not un-augment to test input 0 of task e1",
                 id="another-task"),
    pytest.param(lambda task, t, perm: f"\x1b[31m{task}|||{t}|||{perm}",
                 r"is of task \\x1b\[31me0, which test_puzzles.json does not hold", id="escape"),
    pytest.param(lambda task, t, perm: f"../../x|||{t}|||{perm}", r"is of task \.\./\.\./x, which test_puzzles.json",
                 id="path"),
]


@pytest.mark.parametrize("rename, said", AUGMENTED_NAMES_EVALUATE_REFUSES)
def test_verify_refuses_an_augmented_test_puzzle_evaluate_refuses(good, tmp_path, capsys, rename, said):
    """verify skipped every augmented test puzzle: a name evaluate refuses at once (no transform t9, another
    transform, another task's, a task holding an escape sequence or a path) said OK, and hours of training went into
    the dataset. The command checks the test split by evaluate's own rules, in one line naming the puzzle."""
    from trm_kaggle.cli import main

    copy, name = _renamed_augmented_puzzle(good, tmp_path, rename)
    verify_dataset(copy)  # the data layer's checks: the un-augmented puzzles are all right
    assert main(["verify", str(copy)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"error: {re.escape(str(copy))}: test split puzzle \d+[: ].*{said}.*\n", err), err
    assert "\x1b" not in err


def test_the_pipeline_and_the_training_kernel_check_the_test_split_as_verify(good, tmp_path, monkeypatch):
    """The pipeline's dataset stage and the Kaggle training kernel's data dataset verify what they train on: a test
    split evaluate refuses is refused there too, before any training (or publishing)."""
    from trm_kaggle import pipeline
    from trm_kaggle.config import PipelineConfig
    from trm_kaggle.kaggle import BundleIds, train_kernel

    copy, _ = _renamed_augmented_puzzle(good, tmp_path, lambda task, t, perm: f"e1|||{t}|||{perm}")
    monkeypatch.setattr(pipeline, "_write_task_files", lambda *a: None)
    monkeypatch.setattr(pipeline, "_reusable", lambda *a: {"tasks": 6, "train_examples": 1, "test_examples": 1})
    build_cfg = ArcBuildConfig(output_dir=str(copy), input_file_prefix=str(tmp_path / "src" / "arc"))
    with pytest.raises(DataError, match=r"test split puzzle \d+ \(e1\|\|\|t\d\|\|\|\d+\) does not un-augment"):
        pipeline._build_dataset(PipelineConfig(), (build_cfg, {}), {"data_dir": copy})
    with pytest.raises(DataError, match=r"test split puzzle \d+ .*does not un-augment"):
        train_kernel.build_data(tmp_path / "out", copy, ids=BundleIds("tester", "trm-kaggle"), log=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_a_puzzle_named_as_the_blank_identifier_is_refused_and_unused_blank_names_are_not(good, tmp_path, capsys):
    """A dataset whose identifiers.json names a puzzle's identifier '<blank>' besides entry 0 (a task built under
    that name: the name twice) said OK. Entries no puzzle uses may hold it (upstream's builder names every
    identifier below its first so, as build-arc --puzzle-identifiers-start does), and identifier 0 is the puzzle
    of no name (every puzzle of upstream's Sudoku and Maze): both pass."""
    from conftest import random_task, write_prefix_subset
    from trm_kaggle.cli import main

    copy = tmp_path / "copy"
    shutil.copytree(good, copy)
    (copy / "contents.json").unlink()
    ids = json.loads((copy / "identifiers.json").read_text())
    ids[ids.index("t1")] = "<blank>"
    (copy / "identifiers.json").write_text(json.dumps(ids))
    assert main(["verify", str(copy)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"error: {re.escape(str(copy / 'train'))}: puzzle \d+ has identifier {ids.index('<blank>', 1)}"
                        r", which identifiers.json names '<blank>', the name of the blank identifier 0: .*\n", err), err

    rng = np.random.default_rng(2)
    write_prefix_subset(tmp_path / "p", "training", {f"t{i}": random_task(rng) for i in range(2)})
    write_prefix_subset(tmp_path / "p", "evaluation", {"e0": random_task(rng)})
    build_arc(ArcBuildConfig(output_dir=str(tmp_path / "start3"), input_file_prefix=str(tmp_path / "p"),
                             subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=1,
                             puzzle_identifiers_start=3, progress=False, workers=1))
    assert json.loads((tmp_path / "start3" / "identifiers.json").read_text())[:3] == ["<blank>"] * 3
    assert main(["verify", str(tmp_path / "start3")]) == 0
    capsys.readouterr()


def _set(path, **fields):
    def edit(d):
        _edit_json(d / path, **fields)
    return edit


def _identifiers(fn):
    def edit(d):
        p = d / "identifiers.json"
        p.write_text(json.dumps(fn(json.loads(p.read_text()))))
    return edit


def _empty_test_split(d):
    for name in ("inputs", "labels", "puzzle_identifiers"):
        _resave(d / f"test/all__{name}.npy", lambda a: a[:0])
    for name in ("puzzle_indices", "group_indices"):
        np.save(d / f"test/all__{name}.npy", np.zeros(1, np.int32))
    _edit_json(d / "test/dataset.json", total_groups=0, total_puzzles=0, mean_puzzle_examples=0)


# an upstream-format dataset (no contents.json: upstream's builders write none) with one edit; its index arrays,
# headers and JSON files alone show it
@pytest.mark.parametrize("corrupt, said", [
    (_set("train/dataset.json", mean_puzzle_examples=1e-6), "train/dataset.json: mean_puzzle_examples 1e-06 but"),
    (_set("train/dataset.json", mean_puzzle_examples=100.0), "train/dataset.json: mean_puzzle_examples 100.0 but"),
    (_set("train/dataset.json", mean_puzzle_examples=1e300), "train/dataset.json: mean_puzzle_examples 1e+300 but"),
    (_set("test/dataset.json", mean_puzzle_examples=1e300), "test/dataset.json: mean_puzzle_examples 1e+300 but"),
    (_set("train/dataset.json", total_groups=99), "all__group_indices has 7 entries, expected 100"),
    (_set("train/dataset.json", total_puzzles=1), "all__puzzle_indices has 25 entries, expected 2"),
    (_identifiers(lambda ids: ids[:3] + [123] + ids[4:]), "identifiers.json: must be a JSON list of strings"),
    (_identifiers(lambda ids: ["zzz"] + ids[1:]), "identifiers.json: entry 0 must be '<blank>'"),
    (lambda d: (d / "identifiers.json").unlink(), "identifiers.json"),
    (_empty_test_split, "test_puzzles.json: task e0 has no puzzle in the test split"),
    (_set("test/dataset.json", vocab_size=13), "train and test disagree on seq_len/vocab_size"),
    (_set("test/dataset.json", num_puzzle_identifiers=40), "test/dataset.json: num_puzzle_identifiers is 40 but "
                                                           "identifiers.json lists 25"),
])
def test_training_refuses_what_verify_refuses_of_the_metadata_in_its_words(good, tmp_path, capsys, corrupt, said):
    from cli_helpers import one_error_line
    from integrity_helpers import train_args
    from trm_kaggle.cli import main

    ds = tmp_path / "ds"
    shutil.copytree(good, ds)
    (ds / "contents.json").unlink()
    corrupt(ds)
    refused = one_error_line(capsys, main(["verify", str(ds)]))
    assert said in refused
    run = tmp_path / "run"
    assert one_error_line(capsys, main(train_args(ds, run, "max_steps=2"))) == refused
    assert not run.exists()


def test_an_arc_dataset_without_test_puzzles_json_is_refused_by_verify_and_train(good, tmp_path, capsys):
    """Its augmented test puzzles show an ARC dataset: evaluation would score it per example, silently. A dataset
    of puzzles without augmented names (Sudoku, Maze) has none and passes."""
    from cli_helpers import one_error_line
    from integrity_helpers import train_args
    from trm_kaggle.cli import main

    ds = tmp_path / "ds"
    shutil.copytree(good, ds)
    (ds / "contents.json").unlink()
    (ds / "test_puzzles.json").unlink()
    refused = one_error_line(capsys, main(["verify", str(ds)]))
    assert re.search(r"test_puzzles.json: not found, but the test split holds ARC's augmented puzzles \(e0\|\|\|t",
                     refused), refused
    assert one_error_line(capsys, main(train_args(ds, tmp_path / "run", "max_steps=2"))) == refused
    assert not (tmp_path / "run").exists()
    ids = json.loads((ds / "identifiers.json").read_text())
    (ds / "identifiers.json").write_text(json.dumps([n.replace("|||", "-") for n in ids]))
    verify_dataset(ds)  # no augmented name: a dataset scored per example


@pytest.mark.parametrize("scored", [0, 1])
def test_a_test_split_whose_every_label_is_ignored_is_said(tmp_path, caplog, scored):
    """verify said nothing of a test split with no label to score: train warned of it and evaluate refused it."""
    from test_format import write_like_upstream

    write_like_upstream(tmp_path / "up")
    path = tmp_path / "up" / "test" / "all__labels.npy"
    labels = np.zeros_like(np.load(path))  # 0: the ignore label
    labels[-1, -1] = scored
    np.save(path, labels)
    with caplog.at_level("WARNING", logger="trm_kaggle.data.verify"):
        verify_dataset(tmp_path / "up")
    said = [r.getMessage() for r in caplog.records if r.name == "trm_kaggle.data.verify"]
    if scored:
        assert said == []
    else:
        assert len(said) == 1 and re.search(r"test/all__labels.npy: every label of the test split is the ignore "
                                            r"label 0: evaluate has nothing to score", said[0]), said
