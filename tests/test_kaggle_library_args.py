"""The Kaggle bundle's library face: `BundleIds`, `build_bundle`'s arguments and the metadata helpers refuse a bad
argument in one TRMError naming it, before anything is written."""

from __future__ import annotations

import numpy as np
import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import metadata as M


@pytest.fixture
def refused(tmp_path, monkeypatch):
    """`build_bundle(**kw)` expected to be refused with `words`: never reaching the out folder's lock (where the
    first byte is written), from a repo that is no checkout, so that a check left out fails on something else."""
    def nothing_written(*args, **kw):
        pytest.fail("the out folder was taken")

    monkeypatch.setattr(B, "_out_dir_lock", nothing_written)
    out = tmp_path / "out"

    def run(words: str, **kw) -> str:
        kw = {"repo": tmp_path / "no-checkout", "weights": tmp_path / "no-export", "download": False,
              "log": lambda _: None, **kw}
        with pytest.raises(TRMError, match=words) as e:
            B.build_bundle(out, ids=M.BundleIds("u", "trm-kaggle"), **kw)
        assert not out.exists()
        return str(e.value)
    return run


def test_bundle_ids_take_only_a_user_and_a_prefix_the_command_line_would():
    with pytest.raises(TRMError, match="^BundleIds user=None: must be a string"):
        M.BundleIds(user=None)
    with pytest.raises(TRMError, match="^BundleIds prefix=5: must be a string"):
        M.BundleIds(prefix=5)
    with pytest.raises(TRMError, match="user 'bad\\\\nuser' is not a Kaggle user name") as e:
        M.BundleIds(user="bad\nuser")
    assert "\n" not in str(e.value)
    with pytest.raises(TRMError, match=r"--user/--slug-prefix give an invalid Kaggle id.*lowercase"):
        M.BundleIds("u", "Bad")
    assert M.BundleIds("u", "p" * 34).kernel_id == f"u/{'p' * 34}-submission"  # only the wheels id is always made


def test_build_bundle_takes_a_bool_for_enable_gpu(refused):
    refused("^enable_gpu='no': expected True or False", enable_gpu="no")
    refused("^enable_gpu=1: expected True or False", enable_gpu=1)
    refused("^repo ", enable_gpu=np.bool_(False))  # numpy's bool passes, to the next check


def test_build_bundle_takes_strings_for_kaggle_has(refused):
    refused("^kaggle_has item 0, 5: expected a distribution name", kaggle_has=[5])
    line = refused("^kaggle_has item 1, b'torch\\\\x1b\\[2J\\\\n': expected", kaggle_has=["numpy", b"torch\x1b[2J\n"])
    assert "\x1b" not in line and "\n" not in line
    refused("^kaggle_has='torch': expected a list of distribution names, not one string", kaggle_has="torch")
    refused("^kaggle_has=None: expected a list", kaggle_has=None)
    refused("^repo ", kaggle_has=(n for n in ["torch"]))  # any iterable of names passes, to the next check


def test_build_bundle_names_a_repo_that_is_no_checkout(refused, tmp_path):
    refused(f"^repo {tmp_path / 'no-checkout'} does not exist: pass this project's checkout")
    (tmp_path / "file").write_text("x")
    refused("^repo .* is not a folder", repo=tmp_path / "file")
    (tmp_path / "folder").mkdir()
    refused("^repo .* is not this project's checkout: it has no notebooks/ folder", repo=tmp_path / "folder")
    refused("^repo=5: expected the path", repo=5)


def test_dataset_metadata_refuses_an_id_that_is_not_owner_slash_slug():
    with pytest.raises(TRMError, match="field 'id': 'bad\\\\nid' must look like '<user>/<slug>'") as e:
        M.dataset_metadata("bad\nid")
    assert "\n" not in str(e.value)
    with pytest.raises(TRMError, match="field 'id'"):
        M.dataset_metadata(None)
    with pytest.raises(TRMError, match="field 'title'"):
        M.dataset_metadata("u/trm-kaggle-data", title="x")
    assert M.dataset_metadata("u/trm-kaggle-data")["title"] == "trm-kaggle-data"


def test_write_manifest_refuses_a_folder_that_is_not_there(tmp_path):
    with pytest.raises(TRMError, match="does not exist"):
        M.write_manifest(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(TRMError, match="is not a folder"):
        M.write_manifest(tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("argument, words", [
    ({"ids": "tester/trm"}, "ids: expected a BundleIds, got str"), ({"weights": 5}, "weights: expected a path"),
    ({"notebook": 5}, "notebook: expected a path"), ({"out_dir": 5}, "out_dir: expected the bundle's folder"),
    ({"compile_cache": 5}, "compile_cache: expected a path"), ({"target": "cp311"}, "target: expected a Target"),
    ({"targets": "cp311"}, "targets: expected a list of Target"), ({"targets": ["cp311"]}, r"targets\[0\]"),
    ({"log": 5}, "log: expected a function"), ({"held": 5}, "held: expected a contextlib.ExitStack"),
    ({"extra_wheels": [5]}, r"extra_wheels\[0\]: expected a wheel file"),
    ({"download": "no"}, "download='no': expected True or False"),
    ({"wheel_kernel": "no"}, "wheel_kernel='no': expected True or False")])
def test_build_bundle_names_an_argument_of_the_wrong_type(tmp_path, monkeypatch, argument, words):
    """Each was an AttributeError or TypeError in Python's words naming none (ids, weights, out_dir, target, log,
    held), or misread: one str of extra_wheels per character ("--extra-wheel f"), download="no" as yes."""
    monkeypatch.setattr(B, "_out_dir_lock", lambda *a, **k: pytest.fail("the out folder was taken"))
    monkeypatch.chdir(tmp_path)
    kw = {"out_dir": tmp_path / "out", "ids": M.BundleIds("u", "trm-kaggle"), "weights": tmp_path / "no-export",
          "download": False, "log": lambda _: None, **argument}
    with pytest.raises((TypeError, TRMError), match=words):
        B.build_bundle(kw.pop("out_dir"), **kw)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argument, words", [
    ({"presets": "sudoku4-cpu"}, "unknown preset 'sudoku4-cpu'"),
    ({"overrides": "nokey"}, "override 'nokey'"), ({"time_budget": "x"}, "time_budget='x': expected a finite"),
    ({"dataset": 5}, "dataset: expected the data folder"), ({"train_kernel": "no"}, "train_kernel='no'"),
    ({"ids": "tester/trm"}, "ids: expected a BundleIds")])
def test_build_training_names_an_argument_of_the_wrong_type(tmp_path, monkeypatch, argument, words):
    """presets="sudoku4-cpu" was the unknown preset 's', overrides="max_steps=5" the override 'm';
    time_budget="x" and dataset=5 were Python's TypeErrors naming neither."""
    monkeypatch.setattr(B, "_out_dir_lock", lambda *a, **k: pytest.fail("the out folder was taken"))
    kw = {"ids": M.BundleIds("u", "trm-kaggle"), "download": False, "train_kernel": True, "log": lambda _: None,
          "presets": ["no-such-preset"], **argument}
    if "overrides" in argument:
        kw["presets"] = ["sudoku4-cpu"]
    if "presets" in argument:
        kw["presets"] = argument["presets"].replace("sudoku4-cpu", "sudoku4-cpu-nope")
        words = "sudoku4-cpu-nope"
    with pytest.raises((TypeError, ValueError, TRMError), match=words) as e:
        B.build_training(tmp_path / "out", **kw)
    assert "'s'" not in str(e.value) and "'n'" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_one_extra_wheel_given_as_a_str_is_one_wheel(tmp_path):
    """extra_wheels="foo.whl" was read per character: "--extra-wheel f: no such file"."""
    ids = M.BundleIds("u", "trm-kaggle")
    assert B._checked_arguments(tmp_path, ids, "foo.whl", False, print, None) == ["foo.whl"]
    assert B._checked_arguments(tmp_path, ids, (tmp_path / "a.whl",), False, print, None) == [tmp_path / "a.whl"]
