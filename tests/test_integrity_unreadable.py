"""A file that cannot be read is not damaged, and a special file never makes a command wait.

Every reader of a train state, of weights or of a dataset opens it through one gate
(`trm_kaggle.jsonio.open_regular`): a missing permission, a directory, a FIFO, a device or a failing
disk is one line naming that cause (`UnreadableFile`), and nothing is renamed or restarted on its account.
Only bytes that were read and found wrong (truncated, a checksum that differs) are damage
(`DamagedFile`), and a damaged state is set aside only when a good one remains to resume from.

This machine's tests run as root, where `chmod 000` stops no read: a missing permission is simulated
at the one gate (its `os.open` raises EACCES for the chosen file); a test with a real `chmod` runs
where the tests do not run as root, and skips only there.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import trm_kaggle.jsonio as J
from cli_helpers import one_error_line
from integrity_helpers import flip_inside_largest_entry, train_args, woken_fifos
from trm_kaggle.cli import main
from trm_kaggle.errors import DamagedFile, UnreadableFile
from trm_kaggle.data.format import load_split
from trm_kaggle.model.export import read_export
from trm_kaggle.train import checkpoint as ckpt

from conftest import make_export

AS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A run with states at steps 2 and 3 (copied by each test that changes it)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    for n in (2, 3):
        assert main(train_args(data, run, f"max_steps={n}", "checkpoint_keep=3")) == 0
    return run


def copy_run(trained: Path, to: Path) -> Path:
    import shutil

    return Path(shutil.copytree(trained, to))


def forbid(monkeypatch, *names: str) -> None:
    """Opening a file of one of these names through the one gate fails as a missing permission does."""
    real = os.open

    def fake_open(path, flags, *args, **kwargs):
        if Path(path).name in names:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(J.os, "open", fake_open)


def listing(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir())


@pytest.fixture
def fifo(tmp_path):
    """make(path): a FIFO at `path`. A watchdog opens each for writing after 30 s, so that a reader blocked in
    open() wakes (the test then fails on its time, instead of hanging the suite)."""
    with woken_fifos(30) as made:
        def make(path: Path) -> Path:
            if path.exists() or path.is_symlink():
                path.unlink()
            os.mkfifo(path)
            made.append(path)
            return path

        yield make


# ---------------------------------------------------------------------------
# Train states
# ---------------------------------------------------------------------------


def test_an_unreadable_only_state_is_named_and_left_as_it_is(data, trained, tmp_path, capsys, monkeypatch):
    run = copy_run(trained, tmp_path / "run")
    (run / "state_step00000002.pt").unlink()
    before, metrics = listing(run), (run / "metrics.jsonl").read_bytes()
    forbid(monkeypatch, "state_step00000003.pt")
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=6")))
    assert "state_step00000003.pt" in line and "Permission denied" in line and "not damage" in line, line
    assert listing(run) == before  # nothing renamed .corrupt, no new state
    assert (run / "metrics.jsonl").read_bytes() == metrics  # the metrics were not restarted


def test_an_unreadable_newest_state_is_not_skipped_for_an_older_one(data, trained, tmp_path, capsys, monkeypatch):
    """Resuming from step 2 would silently throw step 3 away (and rotate it out later)."""
    run = copy_run(trained, tmp_path / "run")
    before = listing(run)
    forbid(monkeypatch, "state_step00000003.pt")
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=6")))
    assert "state_step00000003.pt: cannot read train state: Permission denied" in line, line
    assert listing(run) == before


@pytest.mark.parametrize("kind", ["fifo", "directory", "/dev/zero link", "dangling link"])
def test_a_state_that_is_not_a_regular_file_is_named_quickly(data, trained, tmp_path, capsys, fifo, kind):
    run = copy_run(trained, tmp_path / "run")
    newest = run / "state_step00000003.pt"
    newest.unlink()
    if kind == "fifo":
        fifo(newest)
    elif kind == "directory":
        newest.mkdir()
    elif kind == "/dev/zero link":
        newest.symlink_to("/dev/zero")
    else:
        newest.symlink_to(tmp_path / "nowhere.pt")
    before = listing(run)
    t0 = time.perf_counter()
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=6")))
    assert time.perf_counter() - t0 < 20
    words = {"fifo": "not a pipe (FIFO)", "directory": "found a directory", "/dev/zero link": "character device",
             "dangling link": "which does not exist (a dangling link)"}[kind]
    assert "state_step00000003.pt" in line and words in line, line
    assert listing(run) == before


def test_a_failing_disk_is_not_damage(trained, tmp_path, monkeypatch):
    run = copy_run(trained, tmp_path / "run")

    def eio(*a, **k):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(ckpt.torch, "load", eio)
    with pytest.raises(UnreadableFile, match="cannot read train state: Input/output error"):
        ckpt.load_newest_state(run, quarantine=True)
    assert not list(run.glob("*.corrupt"))


def test_damage_is_set_aside_only_when_a_good_state_remains(data, trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path / "run")
    for name in ("state_step00000002.pt", "state_step00000003.pt"):
        flip_inside_largest_entry(run / name)
        with pytest.raises(DamagedFile, match="damaged"):
            ckpt.load_train_state(run / name)
    before = listing(run)
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=6")))
    assert "no readable train state" in line and "left in place" in line, line
    assert listing(run) == before  # nothing renamed: there was nothing to resume from instead


def test_a_damaged_newest_state_beside_a_good_one_is_set_aside(data, trained, tmp_path):
    run = copy_run(trained, tmp_path / "run")
    (run / "state_step00000003.pt").write_bytes((run / "state_step00000003.pt").read_bytes()[:4000])
    assert main(train_args(data, run, "max_steps=4", "checkpoint_keep=3")) == 0
    assert (run / "state_step00000003.pt.corrupt").is_file()
    assert ckpt.newest_step(run) == 4


def test_export_of_a_run_whose_state_cannot_be_read(trained, tmp_path, capsys, monkeypatch):
    run = copy_run(trained, tmp_path / "run")
    forbid(monkeypatch, "state_step00000003.pt")
    line = one_error_line(capsys, main(["export", str(run), "--out", str(tmp_path / "exp")]))
    assert "state_step00000003.pt" in line and "Permission denied" in line, line
    assert not (tmp_path / "exp").exists()


@pytest.mark.skipif(AS_ROOT, reason="root reads a file whatever its permission: the simulated tests above cover it")
def test_a_real_missing_permission(trained, tmp_path, capsys, data):
    run = copy_run(trained, tmp_path / "run")
    (run / "state_step00000003.pt").chmod(0)
    before = listing(run)
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=6")))
    assert "Permission denied" in line and listing(run) == before


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def test_unreadable_weights_name_the_permission_not_missing(tmp_path, monkeypatch):
    make_export(tmp_path / "exp")
    forbid(monkeypatch, "weights.safetensors")
    with pytest.raises(UnreadableFile) as e:
        read_export(tmp_path / "exp")
    assert "weights.safetensors: cannot read weights: Permission denied" in str(e.value)
    assert "missing" not in str(e.value)


def test_submit_with_unreadable_weights_says_permission(tmp_path, capsys, monkeypatch):
    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[2, 1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t0": task}))
    make_export(tmp_path / "exp")
    forbid(monkeypatch, "weights.safetensors")
    main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"), "--output",
          str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "work"), "--num-aug", "1", "--finetune-steps", "1",
          "--device", "cpu", "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert "weights.safetensors" in err and "Permission denied" in err and "missing" not in err, err
    assert json.loads((tmp_path / "s.json").read_text())  # the fallback submission is still written


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_weights_that_are_not_a_regular_file(tmp_path, fifo, kind):
    make_export(tmp_path / "exp")
    w = tmp_path / "exp" / "weights.safetensors"
    if kind == "fifo":
        fifo(w)
    else:
        w.unlink()
        w.mkdir()
    with pytest.raises(UnreadableFile, match="weights" + (" must be a regular file" if kind == "fifo"
                                                          else " expected, found a directory")):
        read_export(tmp_path / "exp")


def test_truncated_weights_are_damage(tmp_path):
    make_export(tmp_path / "exp")
    w = tmp_path / "exp" / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(DamagedFile, match="truncated"):
        read_export(tmp_path / "exp")


# ---------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------


def copy_data(data: Path, to: Path) -> Path:
    import shutil

    return Path(shutil.copytree(data, to))


@pytest.mark.parametrize("name", ["train/all__inputs.npy", "train/all__puzzle_indices.npy",
                                  "train/dataset.json", "identifiers.json", "contents.json"])
@pytest.mark.parametrize("command", ["train", "verify"])
def test_a_fifo_in_a_dataset_never_hangs(data, tmp_path, capsys, fifo, name, command):
    ds = copy_data(data, tmp_path / "ds")
    fifo(ds / name)
    args = train_args(ds, tmp_path / "run", "max_steps=2") if command == "train" else ["verify", str(ds)]
    t0 = time.perf_counter()
    line = one_error_line(capsys, main(args))
    assert time.perf_counter() - t0 < 20
    assert Path(name).name in line and "pipe (FIFO)" in line, line


def test_train_and_verify_with_a_fifo_end_in_a_process_of_their_own(data, tmp_path):
    """The reproducer, as a user runs it: each command ends by itself, with one line."""
    ds = copy_data(data, tmp_path / "ds")
    (ds / "train" / "all__inputs.npy").unlink()
    os.mkfifo(ds / "train" / "all__inputs.npy")
    for args in (train_args(ds, tmp_path / "run", "max_steps=2"), ["verify", str(ds)]):
        r = subprocess.run([sys.executable, "-m", "trm_kaggle", *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "all__inputs.npy" in r.stderr and "pipe (FIFO)" in r.stderr


@pytest.mark.parametrize("kind", ["/dev/zero link", "directory", "permission"])
def test_other_unreadable_dataset_arrays(data, tmp_path, capsys, monkeypatch, kind):
    ds = copy_data(data, tmp_path / "ds")
    arr = ds / "train" / "all__labels.npy"
    arr.unlink()
    if kind == "/dev/zero link":
        arr.symlink_to("/dev/zero")
    elif kind == "directory":
        arr.mkdir()
    else:
        np.save(arr, np.zeros((1, 16), dtype=np.uint8))
        forbid(monkeypatch, "all__labels.npy")
    with pytest.raises(UnreadableFile, match="all__labels.npy"):
        load_split(ds, "train")
    line = one_error_line(capsys, main(["verify", str(ds)]))
    assert "all__labels.npy" in line and {"permission": "Permission denied", "directory": "directory",
                                          "/dev/zero link": "character device"}[kind] in line, line


def test_a_truncated_dataset_array_is_damage(data, tmp_path):
    ds = copy_data(data, tmp_path / "ds")
    arr = ds / "train" / "all__puzzle_identifiers.npy"
    arr.write_bytes(arr.read_bytes()[:20])
    with pytest.raises(DamagedFile, match="unreadable or truncated .npy file"):
        load_split(ds, "train")
    # a .npz archive under the name was opened as one, and read as an array later (an AttributeError)
    import numpy as np

    np.savez(arr, x=np.zeros(3))
    (ds / "train" / "all__puzzle_identifiers.npy.npz").rename(arr)
    with pytest.raises(DamagedFile, match="all__puzzle_identifiers.npy: a .npz archive, not a .npy array"):
        load_split(ds, "train")


def test_import_upstream_of_a_fifo_checkpoint(tmp_path, capsys, fifo):
    step = fifo(tmp_path / "step_10")
    line = one_error_line(capsys, main(["import-upstream", str(step), "--out", str(tmp_path / "exp")]))
    assert "step_10" in line and "pipe (FIFO)" in line


def test_votes_file_that_cannot_be_read(tmp_path, fifo):
    from trm_kaggle.evaluate.vote import VoteTable

    votes = fifo(tmp_path / "votes.npz")
    with pytest.raises(UnreadableFile, match="votes file must be a regular file"):
        VoteTable.load(votes)


def test_the_gate_itself(tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(b"abc")
    with J.open_regular(tmp_path / "f", "thing") as f:
        assert f.read() == b"abc"
    forbid(monkeypatch, "f")
    with pytest.raises(UnreadableFile, match=r"f: cannot read thing: Permission denied \(a permission, not damage"):
        J.open_regular(tmp_path / "f", "thing")
    assert J.read_failure(OSError(errno.EINVAL, "Invalid argument"), "p", "x") is None  # a seek past the end
    assert isinstance(J.read_failure(OSError(errno.EIO, "I/O"), "p", "x"), UnreadableFile)


# ---------------------------------------------------------------------------
# Found by the second round: more readers and the appended log
# ---------------------------------------------------------------------------


def test_a_fifo_metrics_log_is_refused_before_training(data, trained, tmp_path, capsys, fifo):
    run = copy_run(trained, tmp_path / "run")
    fifo(run / "metrics.jsonl")
    t0 = time.perf_counter()
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=3")))
    assert time.perf_counter() - t0 < 20 and "metrics.jsonl" in line and "pipe (FIFO)" in line
    assert ckpt.newest_step(run) == 3  # nothing trained


def test_appending_to_a_fifo_log_never_waits(tmp_path, fifo):
    from trm_kaggle.atomic import append_line
    from trm_kaggle.errors import TRMError

    with pytest.raises(TRMError, match="a log must be a regular file, not a pipe"):
        append_line(fifo(tmp_path / "metrics.jsonl"), "{}")


def test_load_checkpoint_that_is_a_fifo(data, tmp_path, capsys, fifo):
    for name in ("step_10", "state_step00000001.pt"):
        line = one_error_line(capsys, main(train_args(data, tmp_path / "run", "max_steps=1",
                                                      f"load_checkpoint={fifo(tmp_path / name)}")))
        assert name in line and "pipe (FIFO)" in line


def test_a_fifo_in_a_submit_work_dir_never_waits(tmp_path, fifo):
    from trm_kaggle.solve.workdir import Unit, read_result, unit_dir

    unit = Unit(index=0, task_id="t0", test_inputs=1, train_pairs=1)
    unit_dir(tmp_path, unit).mkdir(parents=True)
    fifo(unit_dir(tmp_path, unit) / "result.json")
    t0 = time.perf_counter()
    assert read_result(tmp_path, unit) is None  # unreadable: the task runs again
    assert time.perf_counter() - t0 < 20


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_a_run_or_export_that_is_a_broken_link_is_named_as_one(data, tmp_path, capsys, kind):
    """`export LOOP` said "no train state (state_step*.pt)", `evaluate --weights LOOP` "weights.safetensors:
    missing", `evaluate --data LINK` "LINK/test/dataset.json: dataset.json not found", as if the folder were there;
    `verify` of a dangling link "not found". Each names the link now: the commands' check of their inputs, and the
    library's readers themselves."""
    from trm_kaggle.data import load_metadata, verify_dataset

    link = tmp_path / "link"
    if kind == "loop":
        (tmp_path / "other").symlink_to(link)
        link.symlink_to(tmp_path / "other")
        said = line_says = "is a loop of symbolic links (a dangling link): remove the link"
    else:
        link.symlink_to(tmp_path / "nowhere")
        said = f"not found (a symbolic link to {tmp_path / 'nowhere'}, which does not exist)"
        line_says = f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist (a dangling link)"
    for argv, what in ((["export", str(link), "--out", str(tmp_path / "e")], "run"),
                       (["evaluate", "--weights", str(link), "--data", str(data), "--no-progress"], "--weights"),
                       (["evaluate", "--weights", str(tmp_path), "--data", str(link), "--no-progress"], "--data"),
                       (train_args(link, tmp_path / "run", "max_steps=1"), "data path"),
                       (["verify", str(link)], "DATASET_DIR")):  # the commands' check of their inputs
        line = one_error_line(capsys, main(argv))
        assert f"{what} {link} {line_says}" in line, (argv, line)
    for read, what in ((ckpt.load_newest_state, "run folder"), (read_export, "export folder"),
                       (verify_dataset, "dataset directory"), (lambda p: load_metadata(p, "train"), "dataset directory")):
        with pytest.raises(Exception, match=re.escape(f"{link}: {what} {said}")):
            read(link)


@pytest.mark.parametrize("argv, what", [
    (["build-arc", "--task-dir", "{link}", "--output-dir", "{out}", "--no-progress"], "--task-dir"),
    (["build-code-repair", "--corpus", "{link}", "--output-dir", "{out}", "--no-progress"], "--corpus"),
    (["build-sudoku", "--input-dir", "{link}", "--output-dir", "{out}", "--no-progress"], "--input-dir"),
    (["build-maze", "--input-dir", "{link}", "--output-dir", "{out}", "--no-progress"], "--input-dir"),
    (["bundle", "{out}", "--no-download", "--weights", "{link}"], "--weights"),
])
def test_every_commands_input_that_is_a_dangling_link_is_named_so(tmp_path, capsys, argv, what):
    """`build-arc --task-dir LOOP` said "not a directory", `build-code-repair --corpus` "no such directory", the
    bundle's `--weights` "not an export": each command's declared inputs are checked for broken links first."""
    link, out = tmp_path / "link", tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    line = one_error_line(capsys, main([a.format(link=link, out=out) for a in argv]))
    assert f"{what} {link} is a symbolic link to {tmp_path / 'nowhere'}, which does not exist" in line, line
    assert not out.exists()


def without_root_overrides() -> list[str]:
    """The prefix that runs a command without root's file-permission override (none when the tests are not root)."""
    import shutil

    if not AS_ROOT:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("as root, a folder's mode stops no listing: this needs setpriv (util-linux) to drop the override")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]


@pytest.mark.parametrize("mode", [0o000, 0o311])
def test_a_run_folder_that_cannot_be_listed_is_named_as_such(trained, tmp_path, mode):
    """`export RUN` of a run folder this user cannot list said "no train state": the glob found none."""
    run = copy_run(trained, tmp_path / "run")
    prefix = without_root_overrides()
    run.chmod(mode)
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "trm_kaggle", "export", str(run), "--out",
                               str(tmp_path / "ex")], capture_output=True, text=True, timeout=300)
    finally:
        run.chmod(0o755)
    assert done.returncode == 2 and "Permission denied" in done.stderr, done.stderr
    assert "no train state" not in done.stderr and not (tmp_path / "ex").exists()


def test_an_export_folder_that_cannot_be_read_is_not_called_no_export(tmp_path):
    """`build_bundle.py --weights EXP` of a folder mode 000 said "not an export (needs weights.safetensors + ...)"."""
    exp = make_export(tmp_path / "exp")
    prefix = without_root_overrides()
    code = ("import sys; from pathlib import Path; from trm_kaggle.kaggle.weights_dataset import export_problem; "
            "print(export_problem(Path(sys.argv[1])))")
    exp.chmod(0)
    try:
        done = subprocess.run([*prefix, sys.executable, "-c", code, str(exp)], capture_output=True, text=True,
                              timeout=300)
    finally:
        exp.chmod(0o755)
    assert done.returncode == 0 and "Permission denied" in done.stdout and "not an export" not in done.stdout, done


def test_a_dataset_holding_a_read_only_folder_is_refused_before_it_is_replaced(tmp_path):
    """Its train/ mode 555: the new dataset took its place, exit 0, and the old split stayed beside it as
    `s.old-<pid>/` with no record (so nothing would ever remove it)."""
    out = tmp_path / "s"
    build = [sys.executable, "-m", "trm_kaggle", "build-sudoku", "--output-dir", str(out), "--size", "4",
             "--num-test", "2", "--no-progress"]
    assert subprocess.run([*build, "--num-train", "8"], capture_output=True).returncode == 0
    before = sorted(p.name for p in (out / "train").iterdir())
    prefix = without_root_overrides()
    (out / "train").chmod(0o555)
    try:
        done = subprocess.run([*prefix, *build, "--num-train", "6"], capture_output=True, text=True, timeout=300)
    finally:
        (out / "train").chmod(0o755)
    assert done.returncode == 2 and f"{out / 'train'} (inside {out}) is read-only" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"] and sorted(p.name for p in (out / "train").iterdir()) \
        == before


def test_an_empty_array_or_one_smaller_than_its_header_says_is_damage(data, tmp_path, capsys):
    """An empty .npy was numpy's EOFError (a traceback from verify, train, evaluate and the bundle); one whose header
    declares 10**12 entries was "out of memory", blamed on the batch settings. Both name the file."""
    import numpy as np

    ds = copy_data(data, tmp_path / "ds")
    arr = ds / "train" / "all__puzzle_indices.npy"
    saved = np.load(arr)
    arr.write_bytes(b"")
    line = one_error_line(capsys, main(["verify", str(ds)]))
    assert "all__puzzle_indices.npy: an empty file, not a .npy array" in line, line
    header = np.lib.format.header_data_from_array_1_0(saved)
    header["shape"] = (10**12,)
    with open(arr, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(saved.tobytes())
    with pytest.raises(DamagedFile, match=r"all__puzzle_indices.npy: its header declares shape \(1000000000000,\)"):
        load_split(ds, "train")
    line = one_error_line(capsys, main(["verify", str(ds)]))
    assert "but the file holds" in line and "memory" not in line, line


def test_task_files_behind_a_folder_this_user_may_not_enter_are_said_as_a_permission(tmp_path):
    """build-arc's inputs in a folder of mode 000 were "no *.json task files" (--task-dir), "file not found"
    (--input-file-prefix) and "a dangling link" (a link into it): each is there, only out of this user's reach."""
    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]], "output": [[4]]}]}
    (tmp_path / "rd" / "training").mkdir(parents=True)
    (tmp_path / "rd" / "training" / "t1.json").write_text(json.dumps(task))
    (tmp_path / "hid").mkdir()
    (tmp_path / "hid" / "g_training_challenges.json").write_text(json.dumps({"t1": task}))
    (tmp_path / "lk_training_solutions.json").symlink_to(tmp_path / "hid" / "g_training_challenges.json")
    code = ("import sys; from trm_kaggle.data.arc.tasks import load_task_dir, load_prefix_subset; "
            "from trm_kaggle.outputs import link_problem; from trm_kaggle.errors import DataError\n"
            "for call in (lambda: load_task_dir('rd/training'), lambda: load_prefix_subset('hid/g', 'training')):\n"
            "    try: call(); print('no error')\n"
            "    except DataError as e: print(e)\n"
            "print(link_problem('lk_training_solutions.json', '--input-file-prefix file'))\n")
    prefix = without_root_overrides()
    (tmp_path / "rd" / "training").chmod(0)
    (tmp_path / "hid").chmod(0)
    try:
        done = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
    finally:
        (tmp_path / "rd" / "training").chmod(0o755)
        (tmp_path / "hid").chmod(0o755)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 3, done
    assert lines[0].startswith("rd/training: the task folder cannot be listed (Permission denied)"), lines[0]
    assert lines[1].startswith("hid/g_training_challenges.json: challenges file cannot be reached: a folder on its "
                               "path does not let this user in (Permission denied)"), lines[1]
    assert "cannot reach (Permission denied" in lines[2] and "does not exist" not in lines[2], lines[2]
