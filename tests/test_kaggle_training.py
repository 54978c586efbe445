"""Training on Kaggle: the data dataset, the training kernel's build, and its sessions run with papermill in an
offline sandbox laid out like /kaggle/input (a network namespace where `unshare` allows one): two chained
sessions end where one uninterrupted run ends; a truncated newest state resumes from the one before; no
previous output starts a new run; a previous output of another config is refused with one line; timed saves
and a stop signal within a session; the notebook never raises, pydantic or torch unimportable included."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from test_notebooks import kernel_name  # noqa: F401 (the session-scoped Jupyter kernel of this interpreter)
from test_train import TINY
from trm_kaggle.cli import main as cli_main
from trm_kaggle.config import SudokuBuildConfig
from trm_kaggle.data.puzzles.sudoku import build_sudoku
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import open_all
from trm_kaggle.kaggle.bundle import build_training, main as bundle_main
from trm_kaggle.kaggle.metadata import BundleIds, verify_manifest
from trm_kaggle.kaggle.push import training_push_commands
from trm_kaggle.kaggle.sandbox import netns_wrapper, papermill_command, probe_netns
from trm_kaggle import kaggle_training
from trm_kaggle.kaggle_training import run_session
from trm_kaggle.model import content_digest
from trm_kaggle.train import checkpoint as ckpt

IDS = BundleIds("tester", "trm-kaggle")
# the tiny model of the training tests, 6 steps in all; seeds and deterministic CPU kernels make runs comparable
SETTINGS = [o for o in TINY if not o.startswith(("progress", "arch.num_heads"))] + ["max_steps=6", "progress=False"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A sudoku dataset packed as the data dataset, the wheels and the training kernel (no downloads)."""
    root = tmp_path_factory.mktemp("training")
    build_sudoku(SudokuBuildConfig(output_dir=str(root / "sudoku4"), size=4, num_train=40, num_test=8, num_aug=1,
                                   progress=False))
    build_training(root / "bundle", ids=IDS, dataset=root / "sudoku4", train_kernel=True, presets=["sudoku4-cpu"],
                   overrides=SETTINGS, download=False, log=lambda _: None)
    return root / "bundle"


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch) -> Path:
    """Packed datasets unpack under the test's folder (the default is the system's temporary folder)."""
    monkeypatch.setattr(kaggle_training, "default_scratch", lambda: tmp_path / "scratch")
    return tmp_path / "scratch"


def inputs(tmp: Path, bundle: Path, previous: Path | None = None) -> Path:
    """A /kaggle/input look-alike: the data and wheels datasets, and a previous session's output."""
    root = tmp / "input"
    shutil.copytree(bundle / "data", root / "datasets" / IDS.user / "trm-kaggle-data")
    shutil.copytree(bundle / "wheels", root / "datasets" / IDS.user / "trm-kaggle-wheels")
    if previous is not None:
        shutil.copytree(previous, root / "trm-kaggle-train")
    for p in [*root.rglob("*"), root]:  # read-only, as on Kaggle
        p.chmod(0o555 if p.is_dir() else 0o444)
    return root


def session(tmp: Path, bundle: Path, kernel: str, previous: Path | None = None, input_root: Path | None = None,
            env: dict | None = None, exist_ok: bool = False, **parameters) -> tuple[Path, str]:
    """Run the built training notebook with papermill in `tmp` (offline); (working folder, kernel log).
    `exist_ok`: the working folder is already there (what it holds is the test's)."""
    tmp.mkdir(parents=True, exist_ok=exist_ok)
    working = tmp / "working"
    working.mkdir(exist_ok=exist_ok)
    params = {"KAGGLE_INPUT": str(input_root or inputs(tmp, bundle, previous)), "KAGGLE_WORKING": str(working),
              "TIME_BUDGET": None, "UNPACK_DIR": str(tmp / "scratch"), **parameters}
    cmd = papermill_command(bundle / "train-kernel" / "kaggle_train.ipynb", tmp / "executed.ipynb", kernel=kernel,
                            cwd=working, parameters=params)
    try:
        cmd = netns_wrapper(probe_netns(), cmd)
    except TRMError:
        pass  # no network namespace here: the notebook reaches for no network either way
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg", **(env or {})})
    assert res.returncode == 0, res.stderr[-3000:]  # the notebook never raises
    return working, executed_text(tmp / "executed.ipynb")


def executed_text(notebook: Path) -> str:
    nb = json.loads(notebook.read_text())
    return "\n".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))


def final_model(run: Path) -> dict[str, torch.Tensor]:
    return ckpt.load_train_state(ckpt.list_states(run)[-1])["model"]


def same_weights(a: Path, b: Path) -> bool:
    """The exports hold equal tensors (their headers name the run folder they came from)."""
    x, y = load_file(a / "weights.safetensors"), load_file(b / "weights.safetensors")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def report(working: Path) -> dict:
    return json.loads((working / "session.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(built, tmp_path_factory, kernel_name):
    return session(tmp_path_factory.mktemp("full") / "s", built, kernel_name)


@pytest.fixture(scope="module")
def first(built, tmp_path_factory, kernel_name):
    """Session 1, stopped by its budget after 3 of the 6 steps (a step budget: the same stop every time)."""
    return session(tmp_path_factory.mktemp("first") / "s", built, kernel_name, SESSION_STEPS=3)


@pytest.mark.slow
def test_two_chained_sessions_equal_one_uninterrupted_run(built, uninterrupted, first, tmp_path, kernel_name):
    full, log_full = uninterrupted
    assert report(full)["status"] == "done" and report(full)["step"] == 6
    assert "no previous train state" in log_full and "the run is done: step 6 of 6" in log_full
    one, log_one = first
    assert report(one)["status"] == "trained" and report(one)["step"] == 3
    assert "starting a new run" in log_one and "run the kernel again" in log_one
    for name in ("weights/weights.safetensors", "training_curve.png", "run/metrics.jsonl"):
        assert (one / name).is_file(), name
    two, log_two = session(tmp_path / "second", built, kernel_name, previous=one)
    r = report(two)
    assert r["status"] == "done" and (r["start_step"], r["step"]) == (3, 6)
    assert r["resumed_from"].endswith("state_step00000003.pt") and "resuming" in log_two
    a, b = final_model(full / "run"), final_model(two / "run")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert same_weights(full / "weights", two / "weights")
    # the metrics of both sessions, one line per step
    assert [json.loads(x)["step"] for x in (two / "run" / "metrics.jsonl").read_text().splitlines()] == list(range(1, 7))
    # the previous output is untouched (read-only input)
    assert ckpt.list_states(one / "run")[-1].name == "state_step00000003.pt"

    # a session given a finished run says so and only exports
    three, log_three = session(tmp_path / "third", built, kernel_name, previous=two)
    assert report(three)["status"] == "done" and "exporting only" in log_three
    assert same_weights(full / "weights", three / "weights")


@pytest.mark.slow
def test_a_previous_output_of_another_config_is_refused_in_one_line(built, first, tmp_path, kernel_name):
    one, _ = first
    other = tmp_path / "other-bundle"
    shutil.copytree(built, other)
    nb_path = other / "train-kernel" / "kaggle_train.ipynb"
    nb_path.write_text(nb_path.read_text().replace("'arch.L_cycles': '2'", "'arch.L_cycles': '3'"))
    working, log = session(tmp_path / "s", other, kernel_name, previous=one)
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "another model or config" in errors[0] and "L_cycles" in errors[0], log
    assert report(working)["status"] == "refused"  # nothing trained; the state is carried for the next session
    (carried,) = ckpt.list_states(working / "run")
    assert carried.read_bytes() == ckpt.list_states(one / "run")[-1].read_bytes()


def test_a_truncated_newest_state_resumes_from_the_one_before(built, tmp_path):
    """Direct (no papermill): the previous output holds states 2 and 4, the newest cut short."""
    data = built / "data"
    prev = tmp_path / "prev"
    assert run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu",
                       overrides=SETTINGS + ["checkpoint_keep=3"], data_dir=data, time_budget=None, session_steps=2,
                       echo=lambda _: None).step == 2
    assert run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu",
                       overrides=SETTINGS + ["checkpoint_keep=3"], data_dir=data, time_budget=None,
                       session_steps=np.int64(2), echo=lambda _: None).step == 4  # a notebook's numpy count too
    newest = ckpt.list_states(prev / "run")[-1]
    newest.write_bytes(newest.read_bytes()[:1000])
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "prev", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=data, time_budget=None, session_steps=1, echo=lines.append)
    assert r.ok and r.resumed_from.endswith("state_step00000002.pt") and (r.start_step, r.step) == (2, 3), lines
    assert len(newest.read_bytes()) == 1000  # the input is never renamed or rewritten


def test_bad_inputs_are_one_line_and_keep_the_previous_state(built, tmp_path):
    lines: list[str] = []
    (tmp_path / "in").mkdir()  # the inputs, apart from the working folder (never inside them)
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, echo=lines.append)
    assert not r.ok and [x for x in lines if x.startswith("error:")] == lines[-1:] and "no dataset" in lines[-1]
    lines.clear()
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "w", preset="no-such-preset", data_dir=built / "data",
                    echo=lines.append)
    assert not r.ok and lines[-1].startswith("error:") and "no-such-preset" in lines[-1]
    # a budget shorter than the margin: nothing trained, one line
    lines.clear()
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=5, margin=10, echo=lines.append)
    assert not r.ok and "leaves no time to train" in lines[-1] and not (tmp_path / "w" / "run").exists()
    assert json.loads((tmp_path / "w" / "session.json").read_text())["ok"] is False


def test_a_working_folder_inside_a_folder_this_package_builds_whole_is_refused_before_training(built, tmp_path):
    """KAGGLE_WORKING=BUNDLE/data (the packed data dataset): a whole session trained into it, its run/ left there,
    and only the export was refused ("done", not ok)."""
    data = tmp_path / "data"
    shutil.copytree(built / "data", data)
    before = sorted(p.name for p in data.iterdir())
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "nothing", working=data, preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and r.step == 0, r
    assert lines[-1].startswith("error: ") and "this package builds whole" in lines[-1], lines
    assert not (data / "run").exists() and not (data / "weights").exists()
    assert sorted(p.name for p in data.iterdir()) == before  # not even the record goes there


def test_a_working_folder_inside_the_inputs_is_refused_and_left_as_it_was(built, tmp_path):
    """KAGGLE_WORKING = the previous session's output (an input): the session trained there and replaced that
    output's session.json."""
    prev = tmp_path / "input" / "prev"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    before = {p: p.read_bytes() for p in prev.rglob("*") if p.is_file()}
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "input", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert not r.ok and r.status == "refused" and "is inside the input KAGGLE_INPUT" in lines[-1], lines
    assert {p: p.read_bytes() for p in prev.rglob("*") if p.is_file()} == before


def test_a_weights_folder_the_export_would_not_replace_is_refused_before_training(built, tmp_path):
    """WORKING/weights holding a file of the user's: the session trained, then export_run refused to replace it."""
    (tmp_path / "w" / "weights").mkdir(parents=True)
    (tmp_path / "w" / "weights" / "notes.txt").write_text("mine")
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "nothing", working=tmp_path / "w", preset="sudoku4-cpu",
                    overrides=SETTINGS, data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and r.step == 0, lines
    assert "is not an export written by this package" in lines[-1], lines
    assert not (tmp_path / "w" / "run").exists() and (tmp_path / "w" / "weights" / "notes.txt").read_text() == "mine"


def test_a_dataset_folder_name_found_below_the_inputs_is_said_escaped(built, tmp_path):
    """The session's lines name the dataset it found below KAGGLE_INPUT: a folder named with an escape sequence
    reached the kernel's output raw."""
    shutil.copytree(built.parent / "sudoku4", tmp_path / "input" / "d\x1b[31m")
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "input", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, session_steps=1, echo=lines.append)
    assert r.ok, lines
    assert not any("\x1b" in line for line in lines) and any("d\\x1b[31m" in line for line in lines), lines
    assert not any("\\n" in line for line in lines), lines  # the training's two-line summary: two lines, as before


def test_a_batch_the_dataset_cannot_fill_is_refused_at_build_time(built, tmp_path):
    """global_batch_size 64 over 40 examples built with exit 0; the Kaggle session then ended "status": "error"."""
    with pytest.raises(TRMError, match="global_batch_size 64 is larger than the at most 40 examples one epoch"):
        build_training(tmp_path / "b", ids=IDS, dataset=built.parent / "sudoku4", train_kernel=True,
                       presets=["sudoku4-cpu"], overrides=["max_steps=6", "global_batch_size=64"], download=False,
                       log=lambda _: None)
    assert not (tmp_path / "b").exists()
    # the docs' "every later session" build keeps its data dataset: its manifest's record is asked
    kept = Path(shutil.copytree(built, tmp_path / "kept"))
    with pytest.raises(TRMError, match="global_batch_size 64 is larger than the at most 40 examples one epoch of the "
                                       "data dataset"):
        build_training(kept, ids=IDS, train_kernel=True, presets=["sudoku4-cpu"],
                       overrides=["max_steps=6", "global_batch_size=64"], download=False, log=lambda _: None)


@pytest.mark.parametrize("steps", [-1, 0, True, 2.5, "3", 10**30, np.bool_(True)])
def test_a_session_step_cap_that_is_no_positive_count_is_named(built, tmp_path, steps):
    # -1 trained nothing and blamed a time budget that was not set; True trained one step
    lines: list[str] = []
    (tmp_path / "in").mkdir()
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=steps, echo=lines.append)
    assert not r.ok and len(lines) == 1 and lines[0].startswith("error: session_steps=")
    assert lines[0].endswith(f": expected a whole number from 1 to {kaggle_training.MAX_SESSION_STEPS:,}, or None "
                             "for no cap"), lines
    assert not (tmp_path / "w" / "run").exists()


def test_a_budget_shorter_than_one_step_and_out_of_memory_keep_the_previous_state(built, tmp_path, monkeypatch):
    prev = tmp_path / "prev"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    state = ckpt.list_states(prev / "run")[-1]
    before = state.read_bytes()
    # a previous output trained on other data is refused, never resumed or restarted
    other = tmp_path / "other-data"
    build_sudoku(SudokuBuildConfig(output_dir=str(other), size=4, num_train=30, num_test=8, num_aug=1, progress=False))
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "w0", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=other, time_budget=None, echo=lines.append)
    assert r.status == "refused" and "another dataset" in lines[-1]
    assert ckpt.list_states(tmp_path / "w0" / "run")[-1].read_bytes() == before  # carried, never trained on

    import trm_kaggle.train.loop as loop

    real_train = loop.train  # the budget left for training: a microsecond, whatever this machine's speed
    monkeypatch.setattr(loop, "train", lambda cfg, **kw: real_train(cfg.model_copy(update={"time_limit": 1e-6})))
    lines.clear()
    r = run_session(input_root=prev, working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", echo=lines.append)
    assert not r.ok and "ended before one training step" in lines[-1] and lines[-1].startswith("error:")
    assert [x for x in lines if x.startswith("error:")] == lines[-1:]
    assert state.read_bytes() == before and ckpt.newest_step(tmp_path / "w" / "run") == 2  # the copy, resumable

    def out_of_memory(cfg, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(loop, "train", out_of_memory)
    lines.clear()
    r = run_session(input_root=prev, working=tmp_path / "w2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and lines[-1].startswith("error: out of memory") and "does not fit" in lines[-1]
    assert state.read_bytes() == before and ckpt.newest_step(tmp_path / "w2" / "run") == 2


def test_a_refused_session_carries_the_previous_state_so_the_next_one_resumes(built, tmp_path):
    """Session 2 refused before it copied the state (its data dataset not attached yet): its output held only
    session.json, and session 3, given that output, started a new run from step 0 with status "trained"."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, echo=lines.append)
    assert not r.ok and "no dataset" in lines[-1] and r.step == 2, lines  # session.json says where the run stands
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert r.ok and r.start_step == 2 and r.step == 3 and r.resumed_from, r


@pytest.mark.parametrize("setting", [dict(session_steps=2_000_000_000), dict(time_budget=20_000_000),
                                     dict(time_budget=1e400), dict(save_every_s=0)])
def test_a_session_setting_it_refuses_still_passes_the_state_on(built, tmp_path, setting):
    """A SESSION_STEPS or TIME_BUDGET the notebook's first cell keeps but the session refuses (past 10**9 steps,
    past 10**7 s) was refused before the carry: the output held session.json alone, naming no state, and the next
    session started the run over from step 0 with status "trained". The settings are asked once the state is
    carried: the refused session passes it on, and the next one resumes."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", **{"time_budget": None, **setting}, echo=lines.append)
    assert not r.ok and r.status == "error" and lines[-1].startswith("error: ") and r.step == 2, lines
    assert ckpt.newest_step(tmp_path / "s2" / "run") == 2 and report(tmp_path / "s2")["previous_state"]
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert r.ok and r.start_step == 2 and r.step == 3, r


def test_a_working_folder_in_a_bundle_part_gets_no_session_record(built, tmp_path, kernel_name):
    """KAGGLE_WORKING=BUNDLE/wheels: the session was refused, but its first cell had written session.json into the
    wheels dataset, which build_bundle.py then refused to replace ("1 entries this package did not write")."""
    part = Path(shutil.copytree(built / "wheels", tmp_path / "wheels"))
    before = sorted(p.name for p in part.iterdir())
    _, log = session(tmp_path / "s", built, kernel_name, KAGGLE_WORKING=str(part / "sub"))
    assert f"KAGGLE_WORKING {part / 'sub'} lies in {part}, a folder the package builds whole" in log, log
    assert sorted(p.name for p in part.iterdir()) == before


def test_a_working_folder_inside_the_notebooks_inputs_gets_no_session_record(built, tmp_path, kernel_name):
    """KAGGLE_WORKING inside KAGGLE_INPUT (a previous output): the first cell replaced that output's session.json."""
    root = inputs(tmp_path / "t", built)
    root.chmod(0o755)
    (root / "prev").mkdir()
    (root / "prev" / "session.json").write_text('{"status": "trained"}')
    _, log = session(tmp_path / "s", built, kernel_name, input_root=root, KAGGLE_WORKING=str(root / "prev"))
    assert f"KAGGLE_WORKING {root / 'prev'} lies in KAGGLE_INPUT {root}" in log, log
    assert (root / "prev" / "session.json").read_text() == '{"status": "trained"}'


def test_the_training_bundle_and_its_metadata(built, tmp_path, capsys):
    meta = json.loads((built / "train-kernel" / "kernel-metadata.json").read_text())
    assert meta["machine_shape"] == "NvidiaTeslaT4" and meta["enable_gpu"] is True
    assert meta["dataset_sources"] == ["tester/trm-kaggle-wheels", "tester/trm-kaggle-data"]
    assert meta["kernel_sources"] == ["tester/trm-kaggle-train"]  # its own previous version
    # the data dataset is flat (an upload sends no subfolders): the archive, its manifest, the metadata
    assert sorted(p.name for p in (built / "data").iterdir() if not p.name.startswith(".")) == \
        ["data.tar", "dataset-metadata.json", "manifest.json"]
    assert verify_manifest(built / "data") == 2
    inside = json.loads((built / "data" / "manifest.json").read_text())["archive"]["files"]
    assert {"identifiers.json", "train/dataset.json", "train/all__inputs.npy", "test/all__labels.npy"} <= set(inside)
    cmds = training_push_commands(built)
    assert [c[1:3] for c in cmds] == [["datasets", "create"], ["datasets", "create"], ["kernels", "push"]]
    # the command line: a bad preset and a bad dataset are one error line, exit 2, nothing written
    assert bundle_main([str(tmp_path / "o"), "--train-kernel", "--preset", "nope", "--no-download"]) == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "o" / "train-kernel").exists()
    assert bundle_main([str(tmp_path / "o"), "--dataset", str(tmp_path / "missing")]) == 2
    assert "missing: dataset directory not found" in capsys.readouterr().err
    # key=value settings after the options, the first session
    assert bundle_main([str(tmp_path / "o"), "--train-kernel", "--preset", "sudoku4-cpu", "--no-download",
                        "lr=1e-3", "--user", "tester"]) == 0
    assert "OVERRIDES = {'lr': '1e-3'}" in (tmp_path / "o" / "train-kernel" / "kaggle_train.ipynb").read_text()
    assert cli_main(["bundle", str(tmp_path / "p"), "--train-kernel", "--preset", "sudoku4-cpu", "--no-download",
                     "--first-session", "--user", "tester"]) == 0
    assert json.loads((tmp_path / "p" / "train-kernel" / "kernel-metadata.json").read_text())["kernel_sources"] == []
    assert sys.executable  # the sandbox kernel runs this interpreter


def test_continue_from_a_kernel_output_as_a_run_state_dataset(built, tmp_path):
    """--continue-from: `kaggle kernels output` (a stand-in here) becomes the run-state dataset, which the kernel
    attaches instead of kernel_sources; an output without a loadable state is one error, nothing written."""
    session_out = tmp_path / "session"
    run_session(input_root=tmp_path / "none", working=session_out, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    calls = []

    def kaggle_output(cmd, **kw):  # kaggle kernels output USER/KERNEL -p DIR
        calls.append(cmd[:4])
        shutil.copytree(session_out, cmd[-1], dirs_exist_ok=True)
        Path(cmd[-1], "run", ".trm_kaggle.lock").write_text("held by the old session\n")  # as the session left it
        Path(cmd[-1], "trm-kaggle-train.log").write_text("[the client's log of the old session]\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    report = build_training(tmp_path / "b", ids=IDS, train_kernel=True, presets=["sudoku4-cpu"], overrides=SETTINGS,
                            continue_from="tester/trm-kaggle-train", runner=kaggle_output, download=False,
                            log=lambda _: None)
    assert calls == [["kaggle", "kernels", "output", "tester/trm-kaggle-train"]]
    assert report["run_state"]["step"] == 2 and verify_manifest(tmp_path / "b" / "run-state") == 2
    inside = json.loads((tmp_path / "b" / "run-state" / "manifest.json").read_text())["archive"]["files"]
    assert {"run/state_step00000002.pt", "weights/weights.safetensors", "session.json"} <= set(inside)
    assert "run/.trm_kaggle.lock" not in inside and "trm-kaggle-train.log" not in inside  # the old session's
    assert not [p for p in (tmp_path / "b" / "run-state").iterdir() if p.is_dir()]  # flat: all of it uploads
    # attached as Kaggle attaches it (read-only), the packed state is what the next session resumes from
    attached = tmp_path / "input" / "datasets" / "tester" / "trm-kaggle-run-state"
    shutil.copytree(tmp_path / "b" / "run-state", attached)
    attached.chmod(0o555)
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "input", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert r.ok and (r.start_step, r.step) == (2, 3) and "state_step00000002.pt" in r.resumed_from, lines
    assert any("run-state.tar checked and unpacked in" in line for line in lines), lines
    meta = json.loads((tmp_path / "b" / "train-kernel" / "kernel-metadata.json").read_text())
    assert meta["kernel_sources"] == [] and meta["dataset_sources"][-1] == "tester/trm-kaggle-run-state"
    assert json.loads((tmp_path / "b" / "run-state" / "dataset-metadata.json").read_text())["id"] == \
        "tester/trm-kaggle-run-state"
    assert [c[-1].split("/")[-1] for c in training_push_commands(tmp_path / "b")] == \
        ["wheels", "run-state", "train-kernel"]

    def empty_output(cmd, **kw):
        Path(cmd[-1], "session.json").write_text("{}")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    with pytest.raises(TRMError, match="no train state that loads"):
        build_training(tmp_path / "c", ids=IDS, train_kernel=True, presets=["sudoku4-cpu"], overrides=SETTINGS,
                       continue_from="tester/trm-kaggle-train", runner=empty_output, download=False,
                       log=lambda _: None)
    assert not (tmp_path / "c" / "run-state").exists()

    def unauthenticated(cmd, **kw):  # the client's cause comes first, then instructions over several lines
        err = "Authentication required to call the Kaggle API.\n" + "".join(f"Option {c}: ...\n" for c in "ABCD")
        return subprocess.CompletedProcess(cmd, 1, "", err)

    with pytest.raises(TRMError, match="failed with status 1: Authentication required to call the Kaggle API"):
        build_training(tmp_path / "d", ids=IDS, train_kernel=True, presets=["sudoku4-cpu"], overrides=SETTINGS,
                       continue_from="tester/trm-kaggle-train", runner=unauthenticated, download=False,
                       log=lambda _: None)


@pytest.mark.parametrize("path, ok", [("/home/me/runs/exp", False), ("'weights/x'", False),
                                      ("/kaggle/input/../../etc/passwd", False), ("/kaggle/input/..", False),
                                      ("/kaggle/input/my-weights", True), ("'/kaggle/input/a b/w'", True),
                                      ("/kaggle/input/a/../b", True), ("null", True), ("None", True),
                                      ("'null'", False)])
def test_load_checkpoint_must_be_a_path_a_session_can_read(path, ok):
    """A path of the building machine passed the build and failed only on Kaggle, after the push. `null`, the
    setting's default (no initial weights), was refused as a path outside /kaggle/input."""
    from trm_kaggle.kaggle.train_kernel import check_kernel_overrides

    if ok:
        check_kernel_overrides([f"load_checkpoint={path}"])
    else:
        with pytest.raises(TRMError, match="give load_checkpoint a path under /kaggle/input/"):
            check_kernel_overrides([f"load_checkpoint={path}"])


def test_load_checkpoint_under_a_local_sessions_own_inputs_is_read(tmp_path):
    """The notebook runs anywhere with KAGGLE_INPUT pointed at a folder of the datasets: weights under that folder
    were refused and sent to /kaggle/input/, where they were then not found. The session checks against its own
    inputs, and names them when it refuses."""
    from trm_kaggle.kaggle.train_kernel import check_kernel_overrides

    root = tmp_path / "in"
    check_kernel_overrides([f"load_checkpoint={root / 'weights' / 'w.pt'}"], root)
    for outside in ("/kaggle/input/weights/w.pt", f"{root}/../elsewhere/w.pt", str(root)):
        with pytest.raises(TRMError, match=f"give load_checkpoint a path under {root}/ "):
            check_kernel_overrides([f"load_checkpoint={outside}"], root)
    lines: list[str] = []  # the session: past the check, to the data it lacks (no data dataset attached)
    run_session(input_root=root, working=tmp_path / "w", preset="sudoku4-cpu",
                overrides=[f"load_checkpoint={root / 'weights' / 'w.pt'}"], time_budget=None, echo=lines.append)
    assert lines[-1].startswith(f"error: no dataset under {root}"), lines
    lines.clear()
    run_session(input_root=root, working=tmp_path / "w2", preset="sudoku4-cpu",
                overrides=["load_checkpoint=/kaggle/input/weights/w.pt"], time_budget=None, echo=lines.append)
    assert f"give load_checkpoint a path under {root}/ " in lines[-1], lines


@pytest.mark.parametrize("owned", ["data_paths=[/etc]", "checkpoint_path=/tmp/elsewhere", "+checkpoint_path=x",
                                   "~data_paths"])
def test_the_kernel_sets_its_own_data_and_run_folder(built, tmp_path, capsys, owned):
    """Only the working folder outlives a Kaggle session: an override moving the run (or the data) is refused
    at build time, nothing built, and by the session, nothing trained."""
    out = tmp_path / "o"
    assert bundle_main([str(out), "--dataset", str(built.parent / "sudoku4"), "--train-kernel", "--preset",
                        "sudoku4-cpu", "--no-download", "--user", "tester", owned]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the training kernel sets" in err[0] and not out.exists(), err
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w", preset="sudoku4-cpu",
                    overrides=SETTINGS + [owned], data_dir=built / "data", time_budget=None, session_steps=1,
                    echo=lines.append)
    assert not r.ok and "the training kernel sets" in lines[-1] and not (tmp_path / "w" / "run").exists(), lines


def test_a_bad_continue_from_is_refused_before_anything_is_built(built, tmp_path, capsys):
    out = tmp_path / "o"
    assert bundle_main([str(out), "--dataset", str(built.parent / "sudoku4"), "--train-kernel", "--preset",
                        "sudoku4-cpu", "--no-download", "--user", "tester", "--continue-from", "me/../x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--continue-from" in err[0] and not out.exists(), err


def test_a_session_saves_on_a_timer_and_a_stop_signal_ends_it_saved(built, tmp_path, monkeypatch):
    """Timed states on the way (save_every_s; the stops module's clock advanced one second per look here), and a
    SIGTERM (Kaggle's stop) saves the step it ends: status "interrupted" in session.json, one line, no raise."""
    import signal

    from trm_kaggle.train import stops

    now = [0.0]
    monkeypatch.setattr(stops, "monotonic", lambda: now.__setitem__(0, now[0] + 1.0) or now[0])
    import trm_kaggle.train.loop as loop

    real_train = loop.train

    def stopped_at_step_7(cfg, **kw):
        return real_train(cfg, on_step=lambda step, r: step == 7 and os.kill(os.getpid(), signal.SIGTERM), **kw)

    monkeypatch.setattr(loop, "train", stopped_at_step_7)
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w", preset="sudoku4-cpu",
                    overrides=[o for o in SETTINGS if not o.startswith("max_steps")] + ["checkpoint_keep=100"],
                    data_dir=built / "data", time_budget=None, save_every_s=2.5, echo=lines.append)
    assert not r.ok and r.status == "interrupted" and r.step == 7 and r.stopped_by == "SIGTERM"
    assert lines[-1] == (f"stopped by SIGTERM at step 7: train state saved to {tmp_path / 'w' / 'run'}/"
                         "state_step00000007.pt; run the kernel again (a new version) to continue from it"), lines
    assert any(line.startswith("training from step 0 to step ") and line.endswith("a train state every 2.5 s")
               for line in lines), lines
    assert [int(p.name[10:18]) for p in ckpt.list_states(tmp_path / "w" / "run")] == [2, 5, 7]
    record = json.loads((tmp_path / "w" / "session.json").read_text())
    assert record["status"] == "interrupted" and record["step"] == 7
    # an interrupted session exports its weights too (from the state it saved)
    assert record["weights"] == str(tmp_path / "w" / "weights") and (tmp_path / "w" / "weights" / "config.json").is_file()
    assert record["curve"] is None and any(n.startswith("no training curve: the session was stopped")
                                           for n in record["notes"]), record  # null said, not left unexplained


def test_a_stop_after_the_training_finishes_the_export_and_the_report(built, tmp_path, monkeypatch):
    """The reproducer: a SIGTERM to the notebook's runner just after "trained N steps" (the runner's watch passes it
    on) met the default handler while the kernel exported: the kernel died and session.json kept saying the session
    had not finished, with the run done at its last step. The export and the curve are finished first now."""
    import signal

    from trm_kaggle.train import checkpoint as checkpoints

    real_export = checkpoints.export_run

    def stopped_while_exporting(*args, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_export(*args, **kw)

    monkeypatch.setattr(checkpoints, "export_run", stopped_while_exporting)
    before = signal.getsignal(signal.SIGTERM)
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert r.ok and r.status == "done" and r.step == r.target_step, lines
    record = json.loads((tmp_path / "w" / "session.json").read_text())
    assert record["status"] == "done" and record["seconds"] > 0 and (tmp_path / "w" / "weights" / "config.json").is_file()
    assert record["notes"] == ["SIGTERM came once the training had ended: the export and the session's record "
                               "were finished first"], record
    assert signal.getsignal(signal.SIGTERM) is before  # the session's handler given back


def test_the_runners_end_is_one_stop_and_a_later_one_waits_for_the_record(built, tmp_path, monkeypatch):
    """SIGTERM to the training kernel's runner: its watch thread and ipykernel's poller each sent SIGTERM, and two
    more than 0.25 s apart were a second stop; a stop while the interrupted session exported met no handler (the
    session's was given back): session.json kept "started", weights/ half-written. One stop is sent; a later one
    waits for the export and the record."""
    import signal

    from trm_kaggle.train import checkpoint as checkpoints

    from trm_kaggle import runner_watch

    sent: list[int] = []
    monkeypatch.setattr(runner_watch, "_runner_stop", __import__("threading").Lock())
    monkeypatch.setattr(runner_watch.os, "kill", lambda pid, sig: sent.append(sig))
    poller = runner_watch._SaveBeforeExit()
    poller._exit(1)
    assert runner_watch._stop_for_the_gone_runner() is False and sent == [signal.SIGTERM]  # the thread's: none
    monkeypatch.undo()

    import trm_kaggle.train.loop as loop

    real_train, real_export = loop.train, checkpoints.export_run

    def stopped_at_step_2(cfg, **kw):
        return real_train(cfg, on_step=lambda step, r: step == 2 and os.kill(os.getpid(), signal.SIGTERM), **kw)

    def stopped_again_while_exporting(*args, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_export(*args, **kw)

    monkeypatch.setattr(loop, "train", stopped_at_step_2)
    monkeypatch.setattr(checkpoints, "export_run", stopped_again_while_exporting)
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lambda line: None)
    record = json.loads((tmp_path / "w" / "session.json").read_text())
    assert r.status == record["status"] == "interrupted" and record["step"] == 2, record
    assert (tmp_path / "w" / "weights" / "weights.safetensors").is_file()
    assert any(n.startswith("SIGTERM came once the training had ended") for n in record["notes"]), record


def test_a_stop_before_the_training_ends_the_session_interrupted(built, tmp_path, monkeypatch):
    """A SIGTERM while the session looks for its dataset (before any training): "interrupted", nothing trained,
    session.json written; and a second stop inside the training (stopped at once) is reported, not raised."""
    import signal

    from trm_kaggle import interrupts

    real_find = kaggle_training.find_dataset

    def stopped_while_looking(*args, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_find(*args, **kw)

    monkeypatch.setattr(kaggle_training, "find_dataset", stopped_while_looking)
    r = run_session(input_root=built, working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, echo=lambda line: None)
    assert not r.ok and r.status == "interrupted" and r.stopped_by == "SIGTERM" and r.step == 0, r
    assert json.loads((tmp_path / "w" / "session.json").read_text())["status"] == "interrupted"
    assert not (tmp_path / "w" / "run").exists()

    import trm_kaggle.train.loop as loop

    real_train = loop.train
    monkeypatch.setattr(interrupts, "REPEAT_S", 0.0)  # the second is no repeat of the first

    def twice_at_step_2(cfg, **kw):
        return real_train(cfg, on_step=lambda step, _: step == 2 and [os.kill(os.getpid(), signal.SIGTERM)
                                                                      for _ in range(2)], **kw)

    monkeypatch.setattr(loop, "train", twice_at_step_2)
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lambda line: None)
    assert not r.ok and r.status == "interrupted" and r.stopped_by == "SIGTERM", r
    assert "before it finished" in r.message


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stop_during_the_states_copy_still_passes_the_state_on(built, tmp_path, monkeypatch, signum):
    """A stop while the previous state was copied left `.state_step*.pt.copy.tmp` alone in the output: the next
    session started from step 0, though the stopped one said the next would resume."""
    import signal

    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    real_copy = kaggle_training.shutil.copyfile

    def stopped_while_copying(src, dst, *args, **kw):
        os.kill(os.getpid(), getattr(signal, signum))
        return real_copy(src, dst, *args, **kw)

    monkeypatch.setattr(kaggle_training.shutil, "copyfile", stopped_while_copying)
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lambda _: None)
    assert not r.ok and r.status == "interrupted", r
    monkeypatch.setattr(kaggle_training.shutil, "copyfile", real_copy)
    assert ckpt.newest_step(tmp_path / "s2" / "run") == 2 and not list((tmp_path / "s2" / "run").glob(".*.tmp"))
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2, r


def test_a_stop_before_the_state_is_carried_waits_for_it(built, tmp_path, monkeypatch):
    """A SIGTERM in the session's first second (before it reached the carry) ended it "interrupted" with an output
    of no state: the next session started the run over from step 0."""
    import signal

    import trm_kaggle.kaggle.bundle as bundle_module

    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    real = bundle_module.check_kernel_overrides

    def stopped_at_the_start(overrides, *args):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(overrides, *args)

    monkeypatch.setattr(bundle_module, "check_kernel_overrides", stopped_at_the_start)
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lambda _: None)
    assert not r.ok and r.status == "interrupted" and r.stopped_by == "SIGTERM", r
    monkeypatch.setattr(bundle_module, "check_kernel_overrides", real)
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2, r


def test_a_changed_data_archive_still_passes_the_state_on(built, tmp_path):
    """The packed data dataset was checked and unpacked before the state was copied: a changed data.tar (or a
    stop while it unpacked) left an output of no state, and the next session started from step 0."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    bad = tmp_path / "in2"
    shutil.copytree(built / "data", bad / "data")
    shutil.copytree(prev, bad / "previous")
    with open(bad / "data" / "data.tar", "r+b") as f:
        f.seek(600)
        f.write(b"X")
    lines: list[str] = []
    r = run_session(input_root=bad, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, echo=lines.append)
    assert not r.ok and r.step == 2 and ckpt.newest_step(tmp_path / "s2" / "run") == 2, lines
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2, r


def run_state_inputs(built: Path, tmp_path: Path) -> Path:
    """Inputs of a --continue-from session: the data dataset and a session's output (step 2) packed as the
    run-state dataset, as Kaggle attaches them (read-only)."""
    from trm_kaggle.kaggle import train_kernel

    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)

    def kaggle_output(cmd, **kw):  # kaggle kernels output USER/KERNEL -p DIR
        shutil.copytree(prev, cmd[-1], dirs_exist_ok=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    root = tmp_path / "in2"
    train_kernel.fetch_run_state(root / "datasets" / IDS.user / "trm-kaggle-run-state", "tester/trm-kaggle-train",
                                 ids=IDS, runner=kaggle_output, log=lambda _: None)
    shutil.copytree(built / "data", root / "datasets" / IDS.user / "trm-kaggle-data")
    return root


def read_only(root: Path) -> Path:
    for p in [*root.rglob("*"), root]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    return root


def test_a_refused_data_dataset_still_passes_the_packed_state_on(built, tmp_path):
    """The data dataset was unpacked before the run-state one: a cut data.tar beside a run-state dataset
    (--continue-from) refused the session before the packed state was carried; its output held no state and
    its record said none ("previous_state": null), so the next --continue-from build refused."""
    root = run_state_inputs(built, tmp_path)
    data_tar = root / "datasets" / IDS.user / "trm-kaggle-data" / "data.tar"
    data_tar.write_bytes(data_tar.read_bytes()[:5000])
    lines: list[str] = []
    r = run_session(input_root=read_only(root), working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, echo=lines.append)
    assert not r.ok and lines[-1].startswith("error: ") and "data.tar" in lines[-1], lines
    assert ckpt.newest_step(tmp_path / "s2" / "run") == 2, lines
    assert report(tmp_path / "s2")["previous_state"].endswith("state_step00000002.pt")
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2, r


@pytest.mark.parametrize("when, stop", [("noted before the session", "SIGTERM"), ("during its first checks", "SIGTERM"),
                                        ("during the unpacking", "SIGTERM"), ("during the unpacking", "SIGINT")])
def test_a_stop_early_in_a_session_still_passes_the_packed_state_on(built, tmp_path, monkeypatch, when, stop):
    """A SIGTERM 2-3.5 s into a --continue-from session (or one noted during the install) was let through once
    the attached outputs were carried, before the run-state dataset was unpacked and carried: "it had no train
    state to pass on", an output of no state. A SIGINT (Jupyter's interrupt) there ended the session at once, as
    Python's own handler does, with no state passed on."""
    import signal

    import trm_kaggle.kaggle.bundle as bundle_module

    root = read_only(run_state_inputs(built, tmp_path))
    stopped = [signal.SIGTERM] if when == "noted before the session" else []
    if when == "during its first checks":
        real = bundle_module.check_kernel_overrides

        def stopped_early(overrides, *args):
            os.kill(os.getpid(), getattr(signal, stop))
            return real(overrides, *args)

        monkeypatch.setattr(bundle_module, "check_kernel_overrides", stopped_early)
    if when == "during the unpacking":
        import trm_kaggle.kaggle as kaggle_package

        unpack = kaggle_package.open_packed

        def stopped_unpacking(*args, **kw):
            os.kill(os.getpid(), getattr(signal, stop))
            return unpack(*args, **kw)

        monkeypatch.setattr(kaggle_package, "open_packed", stopped_unpacking)
    lines: list[str] = []
    r = run_session(input_root=root, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, stopped=stopped, echo=lines.append)
    assert not r.ok and r.status == "interrupted" and r.stopped_by == stop, (r, lines)
    assert ckpt.newest_step(tmp_path / "s2" / "run") == 2 and "the newest state saved in this output" in lines[-1]
    assert report(tmp_path / "s2")["previous_state"].endswith("state_step00000002.pt")


@pytest.mark.parametrize("where", ["a file", "inside the working folder"])
def test_an_unpack_dir_refused_still_passes_the_packed_state_on(built, tmp_path, where):
    """UNPACK_DIR naming a file (or a folder inside KAGGLE_WORKING) refused the session before the run-state dataset
    was unpacked: an output of no state. The state is unpacked into a temporary folder of the session's own and
    carried, then UNPACK_DIR is refused, and that temporary folder is gone."""
    import tempfile

    root = read_only(run_state_inputs(built, tmp_path))
    working = tmp_path / "s2"
    if where == "a file":
        scratch = tmp_path / "scratch-file"
        scratch.write_text("not a folder")
    else:
        scratch = working / "scratch"
    before = set(Path(tempfile.gettempdir()).glob("trm-kaggle-run-state-*"))
    lines: list[str] = []
    r = run_session(input_root=root, working=working, preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, scratch=scratch, echo=lines.append)
    assert not r.ok and r.status == "refused" and lines[-1].startswith(f"error: UNPACK_DIR {scratch}"), lines
    assert ckpt.newest_step(working / "run") == 2, lines
    assert report(working)["previous_state"].endswith("state_step00000002.pt")
    assert set(Path(tempfile.gettempdir()).glob("trm-kaggle-run-state-*")) == before
    assert not (working / "scratch").exists() and scratch.exists() == (where == "a file")
    r = run_session(input_root=working, working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2, r


@pytest.mark.parametrize("damage", ["manifest missing", "manifest {}", "manifest empty", "manifest of the data",
                                    "archive renamed"])
def test_a_run_state_dataset_that_cannot_be_opened_is_refused_never_started_over(built, tmp_path, damage):
    """A run-state dataset whose manifest.json was missing (or `{}`) beside its run-state.tar was not seen as a
    packed dataset: "no previous train state: starting a new run", trained from step 0 and "done", and the next
    --continue-from packed that run, every earlier session's steps lost without a word. An empty manifest, another
    dataset's, or the archive renamed were refused, but the record named no state, so the next session started
    the run over."""
    root = run_state_inputs(built, tmp_path)
    folder = root / "datasets" / IDS.user / "trm-kaggle-run-state"
    manifest = folder / "manifest.json"
    if damage == "manifest missing":
        manifest.unlink()
    elif damage == "archive renamed":
        (folder / "run-state.tar").rename(folder / "run-state-old.tar")
    else:
        data_manifest = root / "datasets" / IDS.user / "trm-kaggle-data" / "manifest.json"
        manifest.write_text({"manifest {}": "{}", "manifest empty": "",
                             "manifest of the data": data_manifest.read_text()}[damage])
    lines: list[str] = []
    r = run_session(input_root=read_only(root), working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused", (r, lines)
    named = folder if damage == "archive renamed" else folder / "run-state.tar"
    assert lines[-1].startswith(f"error: {named}"), lines
    assert not any((tmp_path / "s2" / "run").glob("state_step*.pt")), lines
    assert report(tmp_path / "s2")["previous_state"] == str(named)
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert not r.ok and r.status == "refused", r  # its record names the state it could not pass on


def test_a_damaged_run_state_dataset_beside_a_good_one_still_passes_the_good_state_on(built, tmp_path):
    """A second, damaged copy of the run-state dataset (a byte changed) refused the session before the good one
    beside it was carried: an output of no state, and a record naming none."""
    root = run_state_inputs(built, tmp_path)
    good = root / "datasets" / IDS.user / "trm-kaggle-run-state"
    bad = root / "datasets" / "aaa-other" / "trm-kaggle-run-state"  # found first
    shutil.copytree(good, bad)
    tar = bytearray((bad / "run-state.tar").read_bytes())
    tar[600] ^= 1
    (bad / "run-state.tar").write_bytes(bytes(tar))
    lines: list[str] = []
    r = run_session(input_root=read_only(root), working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and lines[-1].startswith(f"error: {bad / 'run-state.tar'}"), lines
    assert ckpt.newest_step(tmp_path / "s2" / "run") == 2, lines
    assert report(tmp_path / "s2")["previous_state"].endswith("state_step00000002.pt")


def test_the_training_range_names_the_step_the_run_ends_at(built, tmp_path):
    """The reproducer: "training from step 0 to step 20000" for a run whose schedule ends at 3,125."""
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w", preset="sudoku4-cpu",
                    overrides=[o for o in SETTINGS if not o.startswith("max_steps")] + ["max_steps=20000", "epochs=2"],
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert r.ok and r.target_step < 20000, lines
    assert f"training from step 0 to step 1, a train state every 300 s" in lines, lines
    r = run_session(input_root=tmp_path / "w", working=tmp_path / "w2", preset="sudoku4-cpu",
                    overrides=[o for o in SETTINGS if not o.startswith("max_steps")] + ["max_steps=20000", "epochs=2"],
                    data_dir=built / "data", time_budget=None, save_every_s=None, echo=lines.append)
    assert r.ok and f"training from step 1 to step {r.target_step}" in lines, lines


@pytest.mark.parametrize("package", ["pydantic", "torch"])
def test_the_notebook_never_raises_when_a_dependency_cannot_be_imported(built, tmp_path, kernel_name, package):
    """The reproducer: with pydantic broken the training notebook raised and wrote no session.json."""
    broken = tmp_path / "broken" / package
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(f"raise ImportError('simulated: {package} is not importable')\n")
    working, log = session(tmp_path / "s", built, kernel_name, env={"PYTHONPATH": str(broken.parent)})
    record = json.loads((working / "session.json").read_text())
    assert record["ok"] is False and f"ImportError: simulated: {package} is not importable" in record["message"]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"simulated: {package} is not importable" in errors[0], log[-3000:]
    assert "Traceback" not in log and not (working / "run").exists()


@pytest.mark.parametrize("case", ["newest unreadable", "every state damaged"])
def test_a_previous_output_that_cannot_be_resumed_is_refused_never_restarted(built, tmp_path, case):
    """Direct (no papermill): plain `train` refuses these folders; the session must too, never step 0 with ok."""
    prev = tmp_path / "prev"
    assert run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu",
                       overrides=SETTINGS + ["checkpoint_keep=3"], data_dir=built / "data", time_budget=None,
                       session_steps=2, echo=lambda _: None).step == 2
    (newest,) = ckpt.list_states(prev / "run")
    if case == "newest unreadable":  # a FIFO named like a newer state: never opened, never waited on
        os.mkfifo(newest.with_name("state_step00000009.pt"))
    else:
        newest.write_bytes(newest.read_bytes()[:1000])
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert not r.ok and r.status == "refused" and r.step == 0 and not (tmp_path / "w" / "run").exists(), lines
    assert lines[-1].startswith("error: the previous output cannot be resumed: ") and "start afresh" in lines[-1]
    assert json.loads((tmp_path / "w" / "session.json").read_text())["status"] == "refused"


def test_the_data_manifest_records_no_local_path(built):
    text = (built / "data" / "manifest.json").read_text()
    assert json.loads(text)["source"] == "sudoku4" and str(built.parent) not in text


def test_session_json_names_only_a_curve_the_session_drew(built, tmp_path, monkeypatch):
    """A training_curve.png already in the working folder (an earlier one, or planted) is not this session's
    curve when the curve was skipped: session.json says none."""
    import trm_kaggle.pipeline as P

    working = tmp_path / "w"
    working.mkdir()
    (working / "training_curve.png").write_bytes(b"an old picture")
    monkeypatch.setattr(P, "write_training_curve", lambda run, path: "training curve skipped: the run is too short")
    r = run_session(input_root=tmp_path / "none", working=working, preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.curve is None and json.loads((working / "session.json").read_text())["curve"] is None


def test_a_stop_noted_before_the_session_still_passes_the_state_on(built, tmp_path):
    """A SIGTERM during the notebook's install or torch's import (noted by its first cell) ended the session
    "interrupted" before it carried the state, its record saying the next session resumes: the next one started the
    run over from step 0. The noted stop is raised once the state is carried."""
    import signal

    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, stopped=[signal.SIGTERM], echo=lines.append)
    assert not r.ok and r.status == "interrupted" and r.stopped_by == "SIGTERM" and r.step == 2, r
    assert ckpt.newest_step(tmp_path / "s2" / "run") == 2 and "the newest state saved in this output" in lines[-1]
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2 and r.step == 3, r


def test_a_session_killed_before_it_carried_the_state_makes_the_next_one_refuse(built, tmp_path, monkeypatch):
    """Killed outright (or its runner gone) during the install, before it copied the state: its output held only
    the first cell's session.json, and the next session started the run over from step 0 with exit 0. The first
    cell's record names the state it had to pass on: the next session refuses, and so does the one after it."""
    import signal

    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    shutil.copytree(prev, tmp_path / "in2" / "trm-kaggle-train")
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "kaggle_train.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:  # session 2: its first cell alone, as a kill during the install leaves it
        scope: dict = {}
        exec(cells[0], scope)
        scope.update(KAGGLE_INPUT=str(tmp_path / "in2"), KAGGLE_WORKING=str(tmp_path / "s2"))
        exec(cells[1], scope)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    named = str(tmp_path / "in2" / "trm-kaggle-train" / "run" / "state_step00000002.pt")
    assert report(tmp_path / "s2")["status"] == "started" and report(tmp_path / "s2")["previous_state"] == named
    for n in (3, 4):  # each given the one before's output, as Kaggle chains versions
        lines: list[str] = []
        r = run_session(input_root=tmp_path / f"s{n - 1}", working=tmp_path / f"s{n}", preset="sudoku4-cpu",
                        overrides=SETTINGS, data_dir=built / "data", time_budget=None, echo=lines.append)
        assert not r.ok and r.status == "refused" and r.step == 0, (r, lines)
        assert lines[-1].startswith("error: no train state among the inputs") and named in lines[-1], lines
        assert "refusing to start the run over" in lines[-1] and report(tmp_path / f"s{n}")["previous_state"] == named
        assert not (tmp_path / f"s{n}" / "run").exists()
    shutil.copytree(prev, tmp_path / "in5" / "earlier")  # the state attached again: the run goes on
    shutil.copytree(tmp_path / "s4", tmp_path / "in5" / "trm-kaggle-train")
    r = run_session(input_root=tmp_path / "in5", working=tmp_path / "s5", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok and r.start_step == 2 and r.step == 3, r


@pytest.mark.parametrize("where", ["the working folder", "the inputs", "a folder above both"])
def test_an_unpack_folder_in_the_inputs_or_the_output_is_refused_after_the_carry(built, tmp_path, where):
    """UNPACK_DIR inside KAGGLE_INPUT unpacked the data into an input; inside KAGGLE_WORKING it put a second copy
    of the data in the output, so every later session was refused ("2 datasets among the inputs"). Both are
    refused once the previous state is carried; a folder above both (the inputs' parent) is no input."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    shutil.copytree(built / "data", tmp_path / "in" / "data")
    shutil.copytree(prev, tmp_path / "in" / "previous")
    scratch = {"the working folder": tmp_path / "s2" / "unpacked", "the inputs": tmp_path / "in" / "unpacked",
               "a folder above both": tmp_path}[where]
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, session_steps=1, scratch=scratch, echo=lines.append)
    if where == "a folder above both":
        assert r.ok and r.start_step == 2 and r.step == 3, lines
        return
    assert not r.ok and r.status == "refused" and lines[-1].startswith(f"error: UNPACK_DIR {scratch} is inside"), lines
    assert not scratch.exists() and ckpt.newest_step(tmp_path / "s2" / "run") == 2  # the state passed on


@pytest.mark.parametrize("overrides", ['{"max_steps": 4,', "[" * 100_000, {"max_steps": 10**5000},
                                       {"lr": {1, 2}}])
def test_overrides_it_cannot_read_are_refused_after_the_state_is_carried(built, tmp_path, overrides):
    """The notebook read OVERRIDES before the session: one it could not read (cut JSON, brackets nested past the
    stack, a number of 5,000 digits) stopped the kernel with an output of no state, in Python's own words."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=overrides,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and lines[-1].startswith("error: override"), lines
    assert len(lines[-1]) < 400 and ckpt.newest_step(tmp_path / "s2" / "run") == 2  # the state passed on


@pytest.mark.parametrize("folder", ["run", "weights"])
def test_a_run_or_export_folder_planted_as_a_link_is_refused(built, tmp_path, folder):
    """KAGGLE_WORKING/run (or weights) a link to a folder elsewhere: the states or the export went there, exit 0,
    and the output, the next session's input, held only the link."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "s2").mkdir()
    (tmp_path / "s2" / folder).symlink_to(tmp_path / "elsewhere")
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert not r.ok and r.status == "refused" and "is a symbolic link" in lines[-1], lines
    assert not list((tmp_path / "elsewhere").iterdir()) and report(tmp_path / "s2")["previous_state"], lines
    if folder == "weights":  # refused after the carry: the state passed on (a run/ link leaves nowhere to carry to)
        assert ckpt.newest_step(tmp_path / "s2" / "run") == 2


def test_an_unpacked_copy_planted_as_a_link_is_never_unpacked_through(built, tmp_path):
    """UNPACK_DIR/data-<digest> a link to another folder: called damaged and unpacked again through the link, which
    replaced the folder it pointed to (one inside KAGGLE_INPUT)."""
    scratch = tmp_path / "sc"
    open_all(built, scratch, say=lambda _: None)  # unpacked once, as a session unpacks it
    (unpacked,) = scratch.iterdir()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "mine.txt").write_text("an input")
    shutil.rmtree(unpacked)
    unpacked.symlink_to(tmp_path / "in")
    with pytest.raises(TRMError, match="is a symbolic link to .*: an unpacked dataset is never read or written"):
        open_all(built, scratch, say=lambda _: None)
    assert [p.name for p in (tmp_path / "in").iterdir()] == ["mine.txt"]


class _Uploads:
    """A stand-in Kaggle client that records what a push would upload."""

    def __init__(self):
        self.calls = []

    def dataset_status(self, ident):
        return "ready"

    def dataset_create_new(self, folder, *a, **k):
        self.calls.append(folder)

    def dataset_create_version(self, folder, *a, **k):
        self.calls.append(folder)

    def kernels_push(self, folder):
        self.calls.append(folder)
        return types.SimpleNamespace(url="u", version_number=1, error=None)


@pytest.mark.parametrize("damage", ["a cut wheel", "a wheels id of another user"])
def test_push_training_checks_every_dataset_before_anything_is_uploaded(built, tmp_path, damage):
    """A 100-byte wheel and a wheels dataset-metadata.json naming `bob/x\\n` were uploaded, rc 0: push_training
    checked only the data and run-state manifests, and the kernel's sources against themselves."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.kaggle.push import push_training

    bundle = tmp_path / "bundle"
    shutil.copytree(built, bundle)
    if damage == "a cut wheel":
        wheel = next((bundle / "wheels").glob("trm_kaggle-*.whl"))
        with open(wheel, "r+b") as f:
            f.truncate(100)
    else:
        path = bundle / "wheels" / "dataset-metadata.json"
        meta = json.loads(path.read_text())
        path.write_text(json.dumps({**meta, "id": "bob/trm-kaggle-wheels\n"}))
    api = _Uploads()
    with pytest.raises(TRMError, match="differs from manifest.json" if damage == "a cut wheel" else "field .id."):
        push_training(bundle, api=api, wait_s=1, poll_s=0.01, say=lambda _: None)
    assert api.calls == []


def test_continue_from_says_and_records_the_newest_state_it_packs(tmp_path, monkeypatch):
    """A newer state in a hidden folder of the output was said ("newest state: step 3") and recorded in the
    run-state manifest, but not packed: the next session resumed from step 2 without a word."""
    from trm_kaggle.kaggle import train_kernel

    def kaggle_output(cmd, **kw):
        for rel in ("run/state_step00000002.pt", ".old/state_step00000003.pt"):
            Path(cmd[-1], rel).parent.mkdir(parents=True, exist_ok=True)
            Path(cmd[-1], rel).write_bytes(b"a state")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    # each folder's newest state by its name (the files here are stand-ins that load nowhere)
    monkeypatch.setattr(train_kernel, "_newest_step",
                        lambda folder: max(int(p.name[10:18]) for p in folder.glob("state_step*.pt")))
    said = []
    report = train_kernel.fetch_run_state(tmp_path / "run-state", "tester/trm-kaggle-train", ids=IDS,
                                          runner=kaggle_output, log=said.append)
    assert report["step"] == 2 and any("newest state: step 2" in line for line in said), said
    assert json.loads((tmp_path / "run-state" / "manifest.json").read_text())["step"] == 2



def test_continue_from_an_output_with_a_folder_named_like_a_state_says_so(built, tmp_path):
    """An output holding a folder named like a newer state beside a good one was refused as holding "no train
    state that loads", which is false: the folder is named, as `trm-kaggle train` and the session refuse it."""
    from trm_kaggle.kaggle import train_kernel

    session_out = tmp_path / "session"
    run_session(input_root=tmp_path / "none", working=session_out, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)

    def kaggle_output(cmd, **kw):
        shutil.copytree(session_out, cmd[-1], dirs_exist_ok=True)
        Path(cmd[-1], "run", "state_step00000098.pt").mkdir()
        return subprocess.CompletedProcess(cmd, 0, "", "")

    with pytest.raises(TRMError) as e:
        train_kernel.fetch_run_state(tmp_path / "run-state", "tester/trm-kaggle-train", ids=IDS,
                                     runner=kaggle_output, log=lambda _: None)
    assert str(e.value).startswith("the output of tester/trm-kaggle-train cannot be continued from: "
                                   "run/state_step00000098.pt: train state expected, found a directory"), e.value
    assert not (tmp_path / "run-state").exists()

def test_continue_from_an_output_with_a_folder_of_only_damaged_states_is_refused_as_the_session_would(
        built, tmp_path, capsys):
    """A folder of the output whose only state is damaged (named with an escape sequence), beside a good run/: the
    build packed it (exit 0), printed the folder's name raw in its warning, and the next session refused the
    whole output ("no readable train state")."""
    from trm_kaggle.kaggle import train_kernel
    from trm_kaggle.wording import log_one_line_each

    session_out = tmp_path / "session"
    run_session(input_root=tmp_path / "none", working=session_out, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    odd = "e\x1b[2J"

    def kaggle_output(cmd, **kw):
        shutil.copytree(session_out, cmd[-1], dirs_exist_ok=True)
        Path(cmd[-1], odd).mkdir()
        Path(cmd[-1], odd, "state_step00000099.pt").write_bytes(b"not a state" * 100)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    log_one_line_each(logging.WARNING, force=True)  # as build_bundle.py says its warnings
    try:
        with pytest.raises(TRMError) as e:
            train_kernel.fetch_run_state(tmp_path / "run-state", "tester/trm-kaggle-train", ids=IDS,
                                         runner=kaggle_output, log=lambda _: None)
    finally:
        logging.getLogger().handlers.clear()
    assert str(e.value).startswith("the output of tester/trm-kaggle-train cannot be continued from: its folder "
                                   "e\\x1b[2J holds train states none of which loads"), e.value
    assert "\x1b" not in capsys.readouterr().err and not (tmp_path / "run-state").exists()


@pytest.mark.parametrize("change", [{"future_setting": 3}, {"lr": "fast"}])
def test_a_state_of_settings_this_version_cannot_read_is_refused_naming_the_setting(built, tmp_path, change):
    """A state whose config holds a setting a newer version added, or a value of another type (its checksum made
    anew): pydantic's error ended the session "error: ValidationError: 1 validation error for TrainConfig" with
    status "error", naming neither the state nor the setting. Now `trm-kaggle train`'s line, status "refused",
    the state passed on."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    (path,) = ckpt.list_states(prev / "run")
    state = torch.load(path, weights_only=False)
    state.pop("sha256")
    state["config"] = json.dumps({**json.loads(state["config"]), **change})
    state["sha256"] = content_digest(state)
    torch.save(state, path)
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and [x for x in lines if x.startswith("error:")] == lines[-1:], lines
    (key,) = change
    assert f"{path}: field 'config': not settings this trm_kaggle can resume with: {key}" in lines[-1], lines
    assert ckpt.list_states(tmp_path / "s2" / "run")[-1].read_bytes() == path.read_bytes()  # passed on


NAMED = "/kaggle/input/x/run/state_step00000005.pt"
UNREAD = "the state named in {}, a record that cannot be read"  # what both sides pass on for such a record
UNREADABLE = {  # an earlier kernel run's record naming the state it had to pass on, as a newer version or damage left it
    "over 1 MiB": json.dumps({"status": "started", "previous_state": NAMED, "history": ["x" * 100] * 11_000}).encode(),
    "cut short": json.dumps({"status": "started", "previous_state": NAMED}).encode()[:-10],
    "not UTF-8": json.dumps({"previous_state": NAMED, "notes": "caf\xe9"}, ensure_ascii=False).encode("latin-1"),
}


@pytest.mark.parametrize("damage", list(UNREADABLE))
def test_a_previous_record_that_cannot_be_read_is_refused_never_restarted(built, tmp_path, damage):
    """A previous output holding no train state and a record naming the state it had to pass on, but over 1 MiB,
    cut short or not UTF-8: taken as naming nothing, and the run started over from step 0 without a word. Now one
    line naming the record and why, status "refused", and the next session, given this one's output, refuses too."""
    record = tmp_path / "in" / "trm-kaggle-train" / "session.json"
    record.parent.mkdir(parents=True)
    record.write_bytes(UNREADABLE[damage])
    passed_on = UNREAD.format(record)
    for n, root in ((2, tmp_path / "in"), (3, tmp_path / "s2")):
        lines: list[str] = []
        r = run_session(input_root=root, working=tmp_path / f"s{n}", preset="sudoku4-cpu", overrides=SETTINGS,
                        data_dir=built / "data", time_budget=None, echo=lines.append)
        assert not r.ok and r.status == "refused" and r.step == 0, (r, lines)
        assert [x for x in lines if x.startswith("error:")] == lines[-1:], lines
        assert str(record) in lines[-1] and "refusing to start the run over" in lines[-1], lines
        assert report(tmp_path / f"s{n}")["previous_state"] == passed_on and not (tmp_path / f"s{n}" / "run").exists()
    assert "cannot be read" in report(tmp_path / "s2")["message"]



def test_a_run_state_dataset_whose_record_names_a_state_it_lacks_is_refused_never_restarted(built, tmp_path):
    """A run-state dataset (--continue-from) whose archive holds the previous session's record naming the state it
    had to pass on, but no train state: the records were read only under the inputs as mounted, never in the
    unpacked archive, and the run started over from step 0. Now read there too: refused, the name passed on."""
    from trm_kaggle.kaggle.metadata import write_manifest
    from trm_kaggle.kaggle.packed import ARCHIVE_KEY, pack

    source = tmp_path / "output"
    (source / "run").mkdir(parents=True)
    (source / "session.json").write_text(json.dumps({"status": "interrupted", "previous_state": NAMED, "step": 5}))
    (source / "run" / "run.json").write_text("{}")
    attached = tmp_path / "in" / "trm-kaggle-run-state"
    attached.mkdir(parents=True)
    write_manifest(attached, {ARCHIVE_KEY: pack(source, attached, "run-state.tar")})
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and r.step == 0, (r, lines)
    assert lines[-1].startswith("error: no train state among the inputs") and NAMED in lines[-1], lines
    assert report(tmp_path / "s2")["previous_state"] == NAMED and not (tmp_path / "s2" / "run").exists()

def test_the_notebooks_first_cell_passes_on_what_the_session_does(tmp_path):
    """The first cell's `state_to_pass_on` (written into session.json before the install) and the package's
    `named_state` give one answer for each previous record: a record that cannot be read was "names nothing" on
    both sides (a session killed during its install passed nothing on, and the next one started the run over)."""
    import ast

    from trm_kaggle.kaggle_training import named_state

    source = (Path(__file__).resolve().parents[1] / "notebooks" / "kaggle_train.py").read_text(encoding="utf-8")
    wanted = {"BOMS", "read_record", "state_to_pass_on"}
    nodes = [n for n in ast.parse(source).body if getattr(n, "name", None) in wanted
             or any(getattr(t, "id", None) in wanted for t in getattr(n, "targets", []))]
    cell = compile(ast.Module(nodes, []), "kaggle_train.py", "exec")
    named = json.dumps({"previous_state": NAMED})
    cases = {**UNREADABLE, "a key repeats": b'{"previous_state": "a", "previous_state": "b"}',
             "nested too deeply": b"[" * 100_000, "empty": b"", "a FIFO": None, "a folder": None,
             "1 MiB exactly": (named[:-1] + " " * ((1 << 20) - len(named)) + "}").encode(),
             "UTF-16 with its mark": named.encode("utf-16"), "names nothing": b'{"ok": true}', "a list": b"[1]"}
    for case, data in cases.items():
        root = tmp_path / case
        record = root / "previous" / "session.json"
        record.parent.mkdir(parents=True)
        if case == "a FIFO":
            os.mkfifo(record)
        elif case == "a folder":
            record.mkdir()
        else:
            record.write_bytes(data)
        scope = {"Path": Path, "json": json, "codecs": __import__("codecs"), "KAGGLE_INPUT": str(root)}
        exec(cell, scope)
        want = (None if case in ("names nothing", "a list") else
                NAMED if case in ("1 MiB exactly", "UTF-16 with its mark") else UNREAD.format(record))
        assert (scope["state_to_pass_on"](), named_state(root)) == (want, want), case
    (tmp_path / "empty" / "later").mkdir()  # a readable record naming a state wins over one that cannot be read
    (tmp_path / "empty" / "later" / "session.json").write_text(named)
    scope["KAGGLE_INPUT"] = str(tmp_path / "empty")
    assert (scope["state_to_pass_on"](), named_state(tmp_path / "empty")) == (NAMED, NAMED)


def test_a_previous_state_of_another_arch_names_the_field_that_differs(tmp_path):
    """Both `arch` blocks were shown as JSON clipped to one width: a difference late in the block (swiglu_norm)
    read as two identical values. The refusal names the field, as `train` resuming does (one wording for both)."""
    from trm_kaggle.config import TrainConfig
    from trm_kaggle.kaggle_training import refuse_other_run

    cfg = TrainConfig(data_paths=[str(tmp_path)])
    saved = cfg.model_copy(update={"arch": cfg.arch.model_copy(update={"swiglu_norm": not cfg.arch.swiglu_norm})})
    with pytest.raises(TRMError, match=r"another model or config \(arch\.swiglu_norm: "
                                       f"{saved.arch.swiglu_norm} in it, {cfg.arch.swiglu_norm} now\\)"):
        refuse_other_run(tmp_path / "state_step00000003.pt", {"config": saved.model_dump_json()}, cfg)


def test_a_data_folder_whose_name_holds_a_comma_is_the_one_trained_on(built, tmp_path, monkeypatch):
    """DATA_DIR (and the unpacked copy under UNPACK_DIR) went into an override's text, `data_paths=[{folder}]`: a
    folder `up,x` trained on `up` and `x` (or failed naming `up`), a trailing space was dropped."""
    monkeypatch.setattr(kaggle_training, "default_scratch", lambda: tmp_path / "up,x ]")
    r = run_session(input_root=tmp_path / "none", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert r.ok, r
    (trained,) = json.loads((tmp_path / "w" / "run" / "config.json").read_text())["data_paths"]
    assert Path(trained).is_relative_to(tmp_path / "up,x ]") and (Path(trained) / "train" / "dataset.json").is_file()


def test_values_are_set_as_they_are_never_read_as_override_text(tmp_path):
    from trm_kaggle.train import load_train_config

    folder, run = str(tmp_path / "kk,ll ]"), str(tmp_path / "run,1 ")
    cfg = load_train_config(values={"data_paths": [folder], "checkpoint_path": run}, overrides=["max_steps=3"])
    assert cfg.data_paths == [folder] and cfg.checkpoint_path == run and cfg.max_steps == 3


def test_the_notebooks_first_cell_notes_every_stop_signal_of_the_package():
    """The first cell noted SIGTERM and SIGHUP only: a scheduler's SIGUSR1, SIGUSR2 or SIGXCPU before the session's
    own handler (during the install, torch's import) killed the Jupyter kernel, and the previous state was not
    carried. It notes the package's stop signals (`interrupts.TERMINATING`), each of them."""
    import ast
    import signal

    from trm_kaggle.interrupts import TERMINATING

    source = (Path(__file__).resolve().parents[1] / "notebooks" / "kaggle_train.py").read_text(encoding="utf-8")
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.For) and "_note_stop" in ast.unparse(n)]
    before = {s: signal.getsignal(s) for s in TERMINATING}
    scope = {"signal": signal, "_note_stop": lambda signum, frame: None}
    try:
        exec(compile(ast.Module(nodes, []), "kaggle_train.py", "exec"), scope)
        noted = {s for s in TERMINATING if signal.getsignal(s) is scope["_note_stop"]}
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert noted == {s for s in TERMINATING if before[s] is not signal.SIG_IGN}, noted


def another_run_state(built: Path, tmp_path: Path, dest: Path, steps: int, *extra: str) -> None:
    """`dest`: a run-state dataset of another run of `steps` steps (`extra` settings: another seed, another
    config), packed as --continue-from packs a kernel's output."""
    from trm_kaggle.kaggle import train_kernel

    prev = tmp_path / f"other-{steps}"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=[*SETTINGS, *extra],
                data_dir=built / "data", time_budget=None, session_steps=steps, echo=lambda _: None)
    train_kernel.fetch_run_state(dest, "tester/other-run", ids=IDS, log=lambda _: None,
                                 runner=lambda cmd, **kw: subprocess.CompletedProcess(
                                     cmd, 0 if shutil.copytree(prev, cmd[-1], dirs_exist_ok=True) else 1, "", ""))


@pytest.mark.parametrize("what", ["folder", "archive"])
def test_a_run_state_dataset_that_cannot_be_read_is_refused_never_started_over(built, tmp_path, monkeypatch, what):
    """A run-state dataset whose folder this user cannot list was passed by without a word ("no previous train
    state: starting a new run", from step 0); one whose archive it cannot read ended the session in a raw
    PermissionError, status "error", its record naming no state: the next session started the run over."""
    from trm_kaggle.kaggle import packed

    root = read_only(run_state_inputs(built, tmp_path))
    folder = root / "datasets" / IDS.user / "trm-kaggle-run-state"
    denied = folder if what == "folder" else folder / "run-state.tar"
    with monkeypatch.context() as m:  # as a folder or file of mode 000 is to a user who is not root
        if what == "folder":  # neither listed nor searched: its files cannot be reached by name either
            for name in ("scandir", "stat", "lstat"):
                def refused(path=".", *args, real=getattr(os, name), listing=name == "scandir", **kw):
                    if folder == Path(path) if listing else folder in Path(path).parents:
                        raise PermissionError(13, "Permission denied", str(path))
                    return real(path, *args, **kw)
                m.setattr(os, name, refused)
        else:
            real_sha = packed.sha256_file
            m.setattr(packed, "sha256_file", lambda path: (_ for _ in ()).throw(PermissionError(
                13, "Permission denied", str(path))) if Path(path) == denied else real_sha(path))
        lines: list[str] = []
        r = run_session(input_root=root, working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                        data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and lines[-1].startswith(f"error: {folder}"), (r, lines)
    assert "Permission denied" in lines[-1] and not any("starting a new run" in line for line in lines), lines
    assert report(tmp_path / "s2")["previous_state"] == str(folder)
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert not r.ok and r.status == "refused", r  # its record names the dataset it could not read


def test_a_run_state_dataset_unpacked_in_place_is_checked_before_its_state_is_carried(built, tmp_path):
    """Where Kaggle unpacked the run-state archive in place, its files were carried as an attached output's before
    they were checked: another run's state swapped in was copied into the output (and resumed from by the next
    session), and the refusal said the sizes differed when both were the same."""
    root = run_state_inputs(built, tmp_path)
    folder = root / "datasets" / IDS.user / "trm-kaggle-run-state"
    with tarfile.open(folder / "run-state.tar") as tar:
        tar.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (folder / "run-state.tar").unlink()
    another_run_state(built, tmp_path, tmp_path / "seed7", 2, "seed=7")
    with tarfile.open(tmp_path / "seed7" / "run-state.tar") as tar:
        foreign = tar.extractfile("run/state_step00000002.pt").read()
    state = folder / "run" / "state_step00000002.pt"
    assert len(foreign) == state.stat().st_size  # the same size: only the digest tells them apart
    state.write_bytes(foreign)
    lines: list[str] = []
    r = run_session(input_root=read_only(root), working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and lines[-1].startswith(f"error: {folder}: {state}: differs from"), lines
    assert "the same size" in lines[-1] and not any("copied to" in line for line in lines), lines
    assert not (tmp_path / "s2" / "run" / "state_step00000002.pt").exists()
    assert report(tmp_path / "s2")["previous_state"].startswith(str(folder))  # the next session refuses too


def test_the_states_of_two_runs_among_the_inputs_are_refused_naming_both(built, tmp_path):
    """Two run-state datasets of different runs: the newer one (another config) was carried alone and refused, the
    good one no longer in the output; at equal steps the first by name was resumed without a word. Now neither
    is guessed: one line names both, and the record names a state, so the next session refuses too."""
    root = run_state_inputs(built, tmp_path)
    other = root / "datasets" / "someone" / "trm-kaggle-run-state"
    another_run_state(built, tmp_path, other, 3, "seed=7")
    lines: list[str] = []
    r = run_session(input_root=read_only(root), working=tmp_path / "s2", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, echo=lines.append)
    assert not r.ok and r.status == "refused" and "the inputs hold the train states of 2 runs" in lines[-1], lines
    assert "state_step00000002.pt" in lines[-1] and "state_step00000003.pt" in lines[-1], lines
    assert not any((tmp_path / "s2" / "run").glob("state_step*.pt"))
    assert report(tmp_path / "s2")["previous_state"]
    r = run_session(input_root=tmp_path / "s2", working=tmp_path / "s3", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lambda _: None)
    assert not r.ok and r.status == "refused", r


@pytest.mark.parametrize("link", ["/etc/passwd", "/dev/zero"])
def test_continue_from_an_output_holding_a_link_out_of_it_is_refused_and_builds_nothing(built, tmp_path, link):
    """A kernel output holding a link to /etc/passwd was packed through it (this machine's file would have been
    published with the run-state dataset); a link to /dev/zero was refused naming the download folder, gone when
    the line was read; and each refusal left OUT_DIR holding the data dataset, packed before the download."""
    session_out = tmp_path / "session"
    run_session(input_root=tmp_path / "none", working=session_out, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    (session_out / "run" / "notes.txt").symlink_to(link)

    def kaggle_output(cmd, **kw):  # kaggle kernels output USER/KERNEL -p DIR (links kept as links)
        shutil.copytree(session_out, cmd[-1], dirs_exist_ok=True, symlinks=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    data = tmp_path / "sudoku4"
    shutil.copytree(built.parent / "sudoku4", data)
    with pytest.raises(TRMError, match=re.escape(f"the output of tester/trm-kaggle-train cannot be continued from: "
                                                 f"run/notes.txt: a symbolic link to {link}, outside the output")):
        build_training(tmp_path / "b", ids=IDS, dataset=data, train_kernel=True, presets=["sudoku4-cpu"],
                       overrides=SETTINGS, continue_from="tester/trm-kaggle-train", runner=kaggle_output,
                       download=False, log=lambda _: None)
    assert not (tmp_path / "b").exists()


def test_a_data_dataset_with_a_file_linked_in_from_outside_says_so(built, tmp_path):
    """A link in the user's dataset to a file outside it (/etc/passwd) was packed and published without a word;
    a big file linked in to save space is still packed, and now said."""
    from trm_kaggle.kaggle import train_kernel

    data = tmp_path / "sudoku4"
    shutil.copytree(built.parent / "sudoku4", data)
    (data / "notes.txt").symlink_to("/etc/passwd")
    said: list[str] = []
    train_kernel.build_data(tmp_path / "d", data, ids=IDS, log=said.append)
    assert any(line.startswith(f"packed 1 file(s) linked in from outside {data}") and "notes.txt -> /etc/passwd" in line
               for line in said), said


def test_a_session_refused_for_a_training_running_in_its_folder_writes_no_record(built, tmp_path):
    """A second session on the working folder of a session still training was refused ("another training is
    running"), but its error record replaced the running session's session.json (and its carry wrote into the
    run folder the first one trains in). Refused before anything is written: said on the console alone."""
    from trm_kaggle.locks import directory_lock

    working = tmp_path / "w"
    (working / "run").mkdir(parents=True)
    (working / "session.json").write_text('{"status": "started"}')
    lines: list[str] = []
    with directory_lock(working / "run", "training"):
        r = run_session(input_root=tmp_path / "none", working=working, preset="sudoku4-cpu", overrides=SETTINGS,
                        data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert not r.ok and lines[-1].startswith("error: ") and "another training is running" in lines[-1], lines
    assert (working / "session.json").read_text() == '{"status": "started"}'
    assert [p.name for p in (working / "run").iterdir()] == [".trm_kaggle.lock"]


def test_the_notebook_run_twice_on_one_working_folder_leaves_the_first_ones_record(built, tmp_path, kernel_name):
    """The notebook's first cell wrote its "started" record over the record of the session training in the same
    working folder, which then held the second one's error record until the first one ended (for good, had that
    one been killed). The first cell says the refusal and writes nothing."""
    from trm_kaggle.locks import directory_lock

    working = tmp_path / "s" / "working"
    (working / "run").mkdir(parents=True)
    (working / "session.json").write_text('{"status": "started"}')
    with directory_lock(working / "run", "training"):
        _, log = session(tmp_path / "s", built, kernel_name, SESSION_STEPS=1, exist_ok=True)
    assert f"KAGGLE_WORKING {working}: another training is running in this folder" in log, log
    assert (working / "session.json").read_text() == '{"status": "started"}'
    assert [p.name for p in (working / "run").iterdir()] == [".trm_kaggle.lock"]


def test_a_session_resuming_the_states_in_its_working_folder_records_where_they_came_from(built, tmp_path):
    """KAGGLE_WORKING holding an older session's output (or the notebook run again): the session resumed from the
    states there, but its session.json said resumed_from null and previous_state null."""
    working = tmp_path / "w"
    run_session(input_root=tmp_path / "none", working=working, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "none", working=working, preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    state = str(working / "run" / "state_step00000002.pt")
    assert r.ok and r.start_step == 2 and r.step == 3 and r.resumed_from == state, r
    assert report(working)["resumed_from"] == state and report(working)["previous_state"] == state
    assert any("resuming the states already in" in line and "state_step00000002.pt" in line for line in lines), lines


def test_a_state_linked_in_from_outside_the_inputs_is_refused_as_continue_from_refuses_it(built, tmp_path):
    """A state in the previous output that is a symbolic link to a state elsewhere on the machine was resumed from
    and copied ("previous output: ... copied"); `build_bundle.py --continue-from` refuses links out of a
    downloaded output. The session refuses them too, in one line naming the link."""
    elsewhere = tmp_path / "elsewhere"
    run_session(input_root=tmp_path / "none", working=elsewhere, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=2, echo=lambda _: None)
    link = tmp_path / "in" / "prev" / "run" / "state_step00000002.pt"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere / "run" / "state_step00000002.pt")
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    data_dir=built / "data", time_budget=None, session_steps=1, echo=lines.append)
    assert not r.ok and r.status == "refused" and r.step == 0, r
    assert lines[-1].startswith(f"error: the previous output cannot be resumed: {link}: a symbolic link to "), lines
    assert not list((tmp_path / "w").glob("run/state_step*.pt"))


def test_a_data_archive_without_its_manifest_is_named(built, tmp_path):
    """The data dataset's manifest.json gone: "no dataset under IN: attach the data dataset ...", naming neither
    the data.tar found nor the missing manifest (a run-state.tar without one is named)."""
    root = tmp_path / "in"
    shutil.copytree(built / "data", root / "data")
    (root / "data" / "manifest.json").unlink()
    lines: list[str] = []
    r = run_session(input_root=root, working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, session_steps=1, echo=lines.append)
    assert not r.ok and lines[-1] == (
        f"error: no dataset under {root}: {root / 'data' / 'data.tar'} has no manifest of a packed dataset beside "
        f"it ({root / 'data' / 'manifest.json'} missing, unreadable, or without its 'archive' entry), so it cannot "
        "be checked or unpacked; attach the data dataset as build_bundle.py --dataset built it, or set DATA_DIR"), lines


def test_a_previous_output_past_this_kernels_last_step_is_said_plainly(built, tmp_path):
    """A previous output at step 3 and a kernel built with max_steps=2: "status: done; step 3 -> 3 of 2". Said as
    it is: already past the run's last step, nothing to train."""
    prev = tmp_path / "s1"
    run_session(input_root=tmp_path / "none", working=prev, preset="sudoku4-cpu", overrides=SETTINGS,
                data_dir=built / "data", time_budget=None, session_steps=3, echo=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=prev, working=tmp_path / "s2", preset="sudoku4-cpu",
                    overrides=[*SETTINGS, "max_steps=2"], data_dir=built / "data", time_budget=None, echo=lines.append)
    assert r.ok and r.status == "done" and r.step == 3 and r.target_step == 2, r
    said = ("already at step 3, past step 2 where this kernel's settings end the run (max_steps or the schedule): "
            "nothing to train; exporting only")
    assert r.message == said and said in lines and not any(" of 2" in line for line in lines), lines


def test_a_training_bundles_rebuild_stopped_before_its_kernel_keeps_the_old_bundle(built, tmp_path, monkeypatch):
    """`build_bundle.py B --dataset NEW --train-kernel ...` stopped by SIGTERM once data/ was built: the new data/
    stood beside the old train-kernel/ (the old settings), and a push published the two as one bundle. The rebuild
    stopped before its last part leaves the old bundle as it was, every file and folder."""
    from trm_kaggle.interrupts import Terminated
    from trm_kaggle.kaggle import bundle

    out = tmp_path / "b"
    shutil.copytree(built, out)
    before = {p.relative_to(out).as_posix(): p.read_bytes() if p.is_file() else os.stat(p).st_ino
              for p in sorted(out.rglob("*")) if p.name != ".trm_kaggle.lock"}

    def stopped(*args, **kwargs):
        raise Terminated()

    monkeypatch.setattr(bundle, "build_train_kernel", stopped)
    with pytest.raises(Terminated):
        bundle.build_training(out, ids=IDS, dataset=built.parent / "sudoku4", train_kernel=True,
                              presets=["sudoku4-cpu"], overrides=[*SETTINGS, "max_steps=10"], download=False,
                              log=lambda _: None)
    after = {p.relative_to(out).as_posix(): p.read_bytes() if p.is_file() else os.stat(p).st_ino
             for p in sorted(out.rglob("*")) if p.name != ".trm_kaggle.lock"}
    assert after == before


def test_two_datasets_among_the_inputs_are_named_as_attached(built, tmp_path):
    """Two data datasets attached (one in a bundle built inside a session's output): "2 datasets among the inputs
    (.../trm-kaggle-inputs-0/data-<hash>, ...)" named the temporary folders they were unpacked into, which the user
    never attached and cannot detach. Each is named as the packed dataset among the inputs it came from."""
    from trm_kaggle.kaggle.train_kernel import build_data

    build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "other"), size=4, num_train=20, num_test=8, num_aug=1,
                                   progress=False))
    shutil.copytree(built / "data", tmp_path / "in" / "data")
    build_data(tmp_path / "in" / "prev" / "sub" / "data", tmp_path / "other", ids=IDS, log=lambda _: None)
    lines: list[str] = []
    r = run_session(input_root=tmp_path / "in", working=tmp_path / "w", preset="sudoku4-cpu", overrides=SETTINGS,
                    time_budget=None, echo=lines.append)
    assert not r.ok and lines[-1].startswith("error: 2 datasets among the inputs ("), lines
    named = lines[-1].split("(", 1)[1].split("):", 1)[0]
    assert sorted(named.split(", ")) == sorted(f"{tmp_path / 'in' / d} (packed)" for d in ("data", "prev/sub/data")), \
        lines[-1]
    assert "set DATA_DIR to the one to train on" in lines[-1], lines[-1]
