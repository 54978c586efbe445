"""Numbers read from names, files and the environment are ASCII digits, and arguments are UTF-8 text.

`str.isdigit()` is true for '²', which `int()` refuses, and for fullwidth '１', which `int()` reads and other
programs (OpenMP, torch, sbatch) do not; `\\d` in a pattern takes every script's digits. Each case below once
ended a command in a traceback or took a number no other program would.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.names import ascii_number


@pytest.mark.parametrize("text,expected", [("12", 12), (" 3\n", 3), ("0", 0), ("²", None), ("１", None),
                                           ("٤", None), ("", None), ("-1", None), ("1" * 19, None), (None, None)])
def test_ascii_number_reads_ascii_digits_only(text, expected):
    assert ascii_number(text) == expected


def test_omp_num_threads_in_other_digits_is_ignored_as_openmp_ignores_it(monkeypatch):
    from trm_kaggle.hardware import env_threads

    for raw in ("²", " ²", "１"):
        monkeypatch.setenv("OMP_NUM_THREADS", raw)
        assert env_threads() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert env_threads() == 3


@pytest.mark.parametrize("env,words", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' in the environment is not a count"),
    ({"WORLD_SIZE": "²"}, "WORLD_SIZE='²'"),
    ({"WORLD_SIZE": "2"}, "RANK, MASTER_ADDR, MASTER_PORT are not"),
    ({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=5 in the environment is not below"),
    ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 in the environment is no number of ranks"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "was not started by torchrun"),
])
def test_a_stray_or_partial_torchrun_environment_is_one_line(monkeypatch, env, words):
    """WORLD_SIZE=abc left in a shell ended `train` in int()'s traceback; WORLD_SIZE=2 without torchrun in
    torch.distributed's rendezvous traceback."""
    from trm_kaggle.train.runtime import torchrun_ranks

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(TRMError) as e:
        torchrun_ranks()
    assert words in str(e.value)


def test_torchrun_ranks_as_torchrun_sets_them(monkeypatch):
    from trm_kaggle.train.runtime import torchrun_ranks

    for name, value in {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
                        "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "r"}.items():
        monkeypatch.setenv(name, value)
    assert torchrun_ranks() == (4, 3, 1)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name)
    assert torchrun_ranks() == (1, 0, 0)


def test_a_users_folder_named_like_an_old_output_with_other_digits_is_left_alone(tmp_path):
    """`OUT.old-²` (a user's backup) beside an output ended every build of OUT in a traceback."""
    from trm_kaggle.atomic import atomic_directory

    for name in ("out.old-²", "out.partial-²", "out.partial-１"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "keep").write_text("mine")
    (tmp_path / "out.partial-².record").write_text("{}")
    with atomic_directory(tmp_path / "out", kind="report") as d:
        (d / "a.txt").write_text("a")
    assert (tmp_path / "out" / "a.txt").read_text() == "a"
    for name in ("out.old-²", "out.partial-²", "out.partial-１"):
        assert (tmp_path / name / "keep").read_text() == "mine"


def test_a_reused_result_with_a_test_index_in_other_digits_is_not_counted(tmp_path):
    """A result.json holding test index '²' ended a rerun of submit in a traceback, status 1."""
    from trm_kaggle.solve.workdir import Unit, collect, unit_dir, write_result

    unit = Unit(index=0, task_id="t0", test_inputs=2, train_pairs=1)
    write_result(tmp_path, unit, {"k": 1}, {0: [[[1]]]}, {}, complete=True)
    path = unit_dir(tmp_path, unit) / "result.json"
    result = json.loads(path.read_text())
    result["candidates"]["²"] = result["candidates"]["１"] = result["candidates"]["0"]
    path.write_text(json.dumps(result))
    candidates, _ = collect(tmp_path, [unit], {0: {"k": 1}})
    assert candidates == {("t0", 0): [[[1]]]}


def test_a_parent_pid_in_other_digits_is_no_parent(monkeypatch):
    from trm_kaggle import lifetime

    monkeypatch.setenv(lifetime.PARENT_ENV, "²")
    lifetime.stop_with_parent()  # returns at once: no parent to watch


@pytest.mark.parametrize("name", ["abc|||t²|||0123456789", "abc|||t3|||012345678²", "abc|||t１|||0123456789"])
def test_a_puzzle_name_with_other_digits_is_not_an_augmented_name(name):
    from trm_kaggle.data.augment import parse_aug_name

    with pytest.raises(ValueError, match="not an augmented puzzle name"):
        parse_aug_name(name)


def test_a_state_file_named_with_other_digits_is_no_state(tmp_path):
    from trm_kaggle.train.checkpoint import _STATE_RE

    assert _STATE_RE.search("state_step00000012.pt")
    assert not _STATE_RE.search("state_step１２.pt")


def test_the_training_notebook_skips_a_state_named_with_other_digits(tmp_path):
    """The notebook's first cell (standard library only) read `state_step².pt` with int(): a traceback before the
    install."""
    import ast
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "notebooks" / "kaggle_train.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "state_to_pass_on")
    (tmp_path / "in" / "prev").mkdir(parents=True)
    (tmp_path / "in" / "prev" / "state_step².pt").write_bytes(b"x")
    (tmp_path / "in" / "prev" / "state_step00000003.pt").write_bytes(b"x")
    namespace = {"Path": Path, "KAGGLE_INPUT": str(tmp_path / "in"), "json": json, "os": os}
    exec(compile(ast.Module([func], []), "kaggle_train.py", "exec"), namespace)
    assert namespace["state_to_pass_on"]().endswith("state_step00000003.pt")


@pytest.mark.parametrize("args", [
    ["train", "data_paths=[d]", "checkpoint_path=out", "project_name=p\udc85q"],
    ["train", "data_paths=[d]", "checkpoint_path=outp\udc85q"],
    ["launch", "k8s", "--nodes", "2", "--gpus-per-node", "1", "--out", "out", "--image", "trm:1", "--pvc", "data",
     "--env", "B=p\udc85q", "data_paths=[data/sudoku]"],
    ["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--out", "out", "--shared-dir", "/shared", "--env",
     "B=p\udc85q", "data_paths=[/shared/d]"],
    ["submit", "--challenges", "c.json", "--weights", "w", "--output", "o.json", "--work-dir", "wp\udc85q"],
    ["export", "run", "--out", "expp\udc85q"],
    ["evaluate", "--weights", "w", "--data", "d", "--report-dir", "repp\udc85q"],
])
def test_a_setting_with_bytes_that_are_not_utf8_is_one_line_before_anything_is_made(tmp_path, monkeypatch, capsys,
                                                                                   args):
    """`project_name=p\\x85q` ended train in a UnicodeEncodeError traceback from the lock's holder record, leaving
    the run folder with an empty lock file; `launch --env B=p\\x85q` left its job folder so."""
    from trm_kaggle.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds bytes that are not UTF-8 text" in err and "\\udc85" in err
    assert os.listdir(tmp_path) == []


def test_a_setting_typed_as_utf8_under_another_locale_is_read_as_utf8():
    """Under a locale that is not UTF-8 argv holds 'é' as two escaped bytes: read again, it is 'é'."""
    from trm_kaggle.config import TrainConfig

    escaped = "é".encode().decode("ascii", "surrogateescape")
    assert TrainConfig(project_name=f"x{escaped}").project_name == "xé"
    with pytest.raises(ValueError, match="not UTF-8 text"):
        TrainConfig(project_name="lone \ud800")


def test_a_lock_holder_record_of_a_command_line_with_bytes_that_are_not_utf8_is_written(tmp_path, monkeypatch):
    """The library's writers are reached without the command line's check: their lock records the line escaped."""
    from trm_kaggle.locks import LOCK_FILE, directory_lock

    monkeypatch.setattr(sys, "argv", ["trm-kaggle", os.fsdecode(b"p\x85q")])
    with directory_lock(tmp_path / "d", "training"):
        pass
    assert (tmp_path / "d" / LOCK_FILE).exists()


def test_a_bundle_folder_named_with_bytes_that_are_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    from trm_kaggle.kaggle.bundle import main

    monkeypatch.chdir(tmp_path)
    assert main(["obp\udc85q", "--weights", "w", "--no-download"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds bytes that are not UTF-8 text" in err
    assert os.listdir(tmp_path) == []


def test_a_restart_count_that_is_no_count_is_one_line(tmp_path, monkeypatch, capsys):
    """TORCHELASTIC_RESTART_COUNT=abc left in a shell ended every `train` in int()'s traceback."""
    from trm_kaggle.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["build-sudoku", "--output-dir", "sd", "--num-train", "20", "--num-test", "4", "--num-aug", "0",
                 "--no-progress"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "²")
    assert main(["train", "data_paths=[sd]", "checkpoint_path=run", "arch.hidden_size=32", "arch.L_layers=1",
                 "max_steps=1", "global_batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TORCHELASTIC_RESTART_COUNT='²'" in err


@pytest.mark.parametrize("check", ["number", "seconds"])
def test_a_time_too_large_for_a_float_is_the_packages_value_error(check):
    from trm_kaggle.config import number_argument, seconds_argument

    with pytest.raises(ValueError, match="x=1000"):
        number_argument("x", 10**400, 0, 10) if check == "number" else seconds_argument("x", 10**400)


def test_a_numpy_boolean_is_no_number_either():
    """`TrainConfig(max_steps=np.bool_(True))` trained one step, where a plain True is refused."""
    import numpy as np

    from trm_kaggle.config import TrainConfig, seconds_argument, whole_argument

    with pytest.raises(ValueError, match="boolean"):
        TrainConfig(max_steps=np.bool_(True))
    with pytest.raises(ValueError):
        whole_argument("n", np.bool_(True), 0, 10)
    assert TrainConfig(max_steps=np.int64(5)).max_steps == 5
    assert seconds_argument("deadline", np.float32(100.0)) == 100.0  # numpy's numbers are numbers
