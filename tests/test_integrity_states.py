"""Train states and exports carry a checksum: a damaged one is named and never resumed from or loaded, the newest
good state is used instead, nothing is deleted on its account, and a state another run wrote is never the newest."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from integrity_helpers import flip_inside_largest_entry, flip_safetensors_data, train_args
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.model.export import read_export
from trm_kaggle.train import checkpoint as ckpt


def states(run):
    return [p.name for p in ckpt.list_states(run)]


def losses(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def run_three_states(data, run):
    for n in (2, 3, 4):
        assert main(train_args(data, run, f"max_steps={n}", "checkpoint_keep=3")) == 0
    assert states(run) == ["state_step00000002.pt", "state_step00000003.pt", "state_step00000004.pt"]


@pytest.mark.parametrize("damage", ["flipped", "truncated", "zeroed"])
def test_a_damaged_newest_state_is_named_set_aside_and_the_newest_good_one_resumed(data, tmp_path, caplog, damage):
    run = tmp_path / "run"
    run_three_states(data, run)
    newest = run / "state_step00000004.pt"
    if damage == "flipped":  # the file still opens: only the checksum can tell
        flip_inside_largest_entry(newest)
    elif damage == "truncated":
        newest.write_bytes(newest.read_bytes()[:5000])
    else:
        newest.write_bytes(b"\0" * newest.stat().st_size)
    with pytest.raises(TRMError, match="state_step00000004.pt: (damaged|not a readable)"):
        ckpt.load_train_state(newest)
    caplog.set_level(logging.WARNING)
    assert main(train_args(data, run, "max_steps=6", "checkpoint_keep=3")) == 0
    said = caplog.text
    assert "state_step00000004.pt" in said and "renamed to state_step00000004.pt.corrupt" in said
    assert (run / "state_step00000004.pt.corrupt").is_file()  # kept for inspection, never deleted
    # resumed from step 3 (the good one), so the log continues there and every loss is finite
    assert [r["step"] for r in losses(run)] == [1, 2, 3, 4, 5, 6]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in losses(run))
    assert states(run) == ["state_step00000002.pt", "state_step00000003.pt", "state_step00000006.pt"]


def test_rotation_never_deletes_good_states_because_of_damaged_newer_ones(data, tmp_path):
    run = tmp_path / "run"
    run_three_states(data, run)
    for name in ("state_step00000003.pt", "state_step00000004.pt"):
        flip_inside_largest_entry(run / name)
    assert main(train_args(data, run, "max_steps=3", "checkpoint_keep=3")) == 0  # resumes from 2, trains to 3
    assert states(run) == ["state_step00000002.pt", "state_step00000003.pt"]
    assert sorted(p.name for p in run.glob("*.corrupt")) == ["state_step00000003.pt.corrupt",
                                                             "state_step00000004.pt.corrupt"]
    assert ckpt.load_train_state(run / "state_step00000003.pt")["step"] == 3


@pytest.mark.parametrize("there", ["file", "fifo", "folder"])
def test_setting_a_damaged_state_aside_replaces_nothing_already_there(data, tmp_path, there):
    """`<name>.corrupt` was an os.replace: an earlier kept copy (or a FIFO we did not write) was lost without a
    word, and a folder there stopped the resume. The damaged state goes to the next free name instead."""
    import os

    run = tmp_path / "run"
    run_three_states(data, run)
    flip_inside_largest_entry(run / "state_step00000004.pt")
    taken = run / "state_step00000004.pt.corrupt"
    if there == "file":
        taken.write_text("an earlier kept copy")
    elif there == "fifo":
        os.mkfifo(taken)
    else:
        taken.mkdir()
    assert main(train_args(data, run, "max_steps=5", "checkpoint_keep=3")) == 0  # resumed from 3
    assert ckpt.newest_step(run) == 5 and (run / "state_step00000004.pt.corrupt.1").is_file()
    assert {"file": taken.is_file() and taken.read_text() == "an earlier kept copy", "fifo": taken.is_fifo(),
            "folder": taken.is_dir()}[there]


def test_a_state_of_another_run_where_the_run_saves_is_set_aside_not_replaced(data, tmp_path, caplog):
    """A state of another run copied in as step 10 was "left in place" at the resume from step 4, then replaced
    by the run's own state when it reached step 10: the other run's state was lost without a word."""
    run, other = tmp_path / "run", tmp_path / "other"
    run_three_states(data, run)
    assert main(train_args(data, other, "max_steps=6", "seed=4")) == 0
    planted = ckpt.list_states(other)[-1].read_bytes()
    (run / "state_step00000006.pt").write_bytes(planted)
    caplog.set_level(logging.WARNING)
    assert main(train_args(data, run, "max_steps=6", "checkpoint_keep=3")) == 0  # resumed from 4, saves at 6
    assert "renamed to state_step00000006.pt.other (kept, not deleted)" in caplog.text
    assert (run / "state_step00000006.pt.other").read_bytes() == planted
    assert ckpt.load_train_state(run / "state_step00000006.pt")["run_id"] == ckpt.recorded_run_id(run)


def test_a_state_of_another_run_copied_in_is_never_the_newest(data, tmp_path, caplog):
    run, other = tmp_path / "run", tmp_path / "other"
    run_three_states(data, run)
    assert main(train_args(data, other, "max_steps=5", "seed=4")) == 0
    stray = run / "state_step99999999.pt"
    stray.write_bytes(ckpt.list_states(other)[-1].read_bytes())
    caplog.set_level(logging.WARNING)
    assert ckpt.newest_step(run) == 4
    assert "state_step99999999.pt: written by another run" in caplog.text
    assert main(train_args(data, run, "max_steps=7", "checkpoint_keep=2")) == 0
    assert states(run) == ["state_step00000004.pt", "state_step00000007.pt", "state_step99999999.pt"]  # left alone
    assert ckpt.load_train_state(run / "state_step00000007.pt")["run_id"] == ckpt.recorded_run_id(run)
    # the export of the run takes the run's own newest state too
    assert main(["export", str(run), "--out", str(tmp_path / "w")]) == 0
    assert read_export(tmp_path / "w")[0]["info"]["step"] == 7
    # a state of another run numbered below the run's own is not rotated away either
    (run / "state_step00000001.pt").write_bytes(ckpt.list_states(other)[-1].read_bytes())
    assert main(train_args(data, run, "max_steps=9", "checkpoint_keep=1")) == 0
    assert states(run) == ["state_step00000001.pt", "state_step00000009.pt", "state_step99999999.pt"]


def test_a_renamed_copy_of_an_older_state_is_never_the_newest(data, tmp_path, caplog):
    """A state whose name says a later step than it holds would stay the newest however far the run went on:
    every resume would go back to its step."""
    run = tmp_path / "run"
    run_three_states(data, run)
    oldest = ckpt.list_states(run)[0]
    held = ckpt.load_train_state(oldest)["step"]
    renamed = run / "state_step00000050.pt"
    renamed.write_bytes(oldest.read_bytes())
    caplog.set_level(logging.WARNING)
    assert ckpt.newest_step(run) == 4
    assert f"state_step00000050.pt: holds step {held}, not the step 50 its name says" in caplog.text
    assert main(train_args(data, run, "max_steps=6")) == 0
    assert ckpt.newest_step(run) == 6 and renamed.exists()  # left in place


def test_a_renamed_copy_below_the_saved_step_is_never_rotated_away(data, tmp_path, caplog):
    """A copy of the step-2 state named as step 5, "left in place" at the resume from step 4, was deleted by the
    rotation of the run's save at step 7 (checkpoint_keep=1) without a word: the user made it, not the run."""
    run = tmp_path / "run"
    run_three_states(data, run)
    renamed = run / "state_step00000005.pt"
    renamed.write_bytes((run / "state_step00000002.pt").read_bytes())
    caplog.set_level(logging.WARNING)
    assert main(train_args(data, run, "max_steps=7", "checkpoint_keep=1")) == 0
    assert "state_step00000005.pt: holds step 2, not the step 5 its name says" in caplog.text
    assert states(run) == ["state_step00000005.pt", "state_step00000007.pt"]


def test_states_from_before_checksums_and_run_ids_are_resumed_with_a_note(data, tmp_path, caplog):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.list_states(run)[-1]
    old = torch.load(path, weights_only=True)
    del old["sha256"], old["run_id"]
    torch.save(old, path)
    (run / ckpt.RUN_RECORD).unlink()
    caplog.set_level(logging.WARNING)
    assert main(train_args(data, run, "max_steps=3")) == 0
    assert "written before train states carried a checksum; loaded unverified" in caplog.text
    assert [r["step"] for r in losses(run)] == [1, 2, 3]
    assert ckpt.load_train_state(ckpt.list_states(run)[-1])["run_id"] == ckpt.recorded_run_id(run)


def test_a_copied_run_directory_keeps_its_id_and_resumes(data, tmp_path):
    import shutil

    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    shutil.copytree(run, tmp_path / "copy")
    assert main(train_args(data, tmp_path / "copy", "max_steps=3")) == 0
    assert ckpt.recorded_run_id(tmp_path / "copy") == ckpt.recorded_run_id(run)
    assert [r["step"] for r in losses(tmp_path / "copy")] == [1, 2, 3]


@pytest.mark.parametrize("command", ["evaluate", "bundle"])
def test_a_damaged_export_is_refused_by_name(data, tmp_path, capsys, command):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    assert main(["export", str(run), "--out", str(tmp_path / "w")]) == 0
    flip_safetensors_data(tmp_path / "w" / "weights.safetensors")
    capsys.readouterr()
    with pytest.raises(TRMError, match="weights.safetensors: damaged: its tensors do not match the checksum"):
        read_export(tmp_path / "w")
    if command == "evaluate":
        code = main(["evaluate", "--weights", str(tmp_path / "w"), "--data", str(data), "--device", "cpu"])
    else:
        code = main(["bundle", str(tmp_path / "bundle"), "--weights", str(tmp_path / "w"), "--no-download"])
    err = capsys.readouterr().err
    assert code != 0 and "damaged" in err and "weights.safetensors" in err, err
    assert not (tmp_path / "bundle").exists()
