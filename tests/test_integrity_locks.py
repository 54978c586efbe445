"""One writer per directory: `train` (its run folder), `submit` (its --work-dir) and `sweep` take one lock.

A second writer is refused with one line naming the holder; a lock left by a process that is gone is
taken over; the lock is released when the holder ends, however it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import LOCK_FILE, directory_lock

from conftest import make_export

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=1", "arch.L_cycles=1",
        "arch.L_layers=1", "arch.halt_max_steps=2", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "eval_interval=null", "log_interval=1", "device=cpu", "threads=1", "seed=0"]

def test_a_second_holder_is_refused_naming_the_first(tmp_path, holder):
    p = holder(tmp_path / "d", "training")
    with pytest.raises(TRMError) as e:
        with directory_lock(tmp_path / "d", "training"):
            pass
    assert f"another training is running in this directory: process {p.pid}" in str(e.value)
    assert f"kill {p.pid}" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TRMError, match="another training is running"):  # whichever command asks: one lock
        with directory_lock(tmp_path / "d", "submit"):
            pass


def test_a_lock_of_a_process_that_is_gone_is_taken_over(tmp_path, holder):
    p = holder(tmp_path / "d", "training")
    p.send_signal(signal.SIGKILL)  # killed while holding it: the kernel drops the lock
    p.wait()
    assert str(p.pid) in (tmp_path / "d" / LOCK_FILE).read_text()  # its record is still there
    with directory_lock(tmp_path / "d", "training"):
        assert (tmp_path / "d" / LOCK_FILE).read_text().split()[0] == str(os.getpid())
    # a record left by a dead process with no flock at all (a file copied in) is stale too
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / LOCK_FILE).write_text(f"{p.pid} {os.uname().nodename} trm-kaggle train\n")
    with directory_lock(tmp_path / "e", "training"):
        pass


def test_the_lock_is_released_when_the_block_ends(tmp_path):
    for _ in range(2):
        with directory_lock(tmp_path, "training"):
            pass
    with pytest.raises(RuntimeError):
        with directory_lock(tmp_path, "training"):
            raise RuntimeError("boom")
    with directory_lock(tmp_path, "training"):
        pass


def test_a_second_reader_keeps_the_first_readers_record(tmp_path, holder):
    """A second comparison sharing a folder overwrote the first one's record: once it ended, an update was refused
    naming "a process" (or the second one), not the comparison that still held the folder."""
    (tmp_path / "d").mkdir()
    p = holder(tmp_path / "d", "regress", shared=True)
    with directory_lock(tmp_path / "d", "regress", shared=True):
        lines = (tmp_path / "d" / LOCK_FILE).read_text().splitlines()
        assert [line.split()[0] for line in lines] == [str(p.pid), str(os.getpid())]
    with pytest.raises(TRMError) as e:
        with directory_lock(tmp_path / "d", "regress --update-baselines"):
            pass
    assert f"another regress is running in this directory: process {p.pid}" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.slow  # starts a training process: ~20 s on a loaded 2-core machine
def test_two_trainings_on_one_run_folder(sudoku4, tmp_path, capsys):
    """A real training in another process holds its run folder: a second `train` there is refused before
    it writes anything, whatever the first one is doing."""
    run = tmp_path / "run"
    args = [f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY]
    first = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "train", *args, "max_steps=100000",
                              "--no-progress"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (run / LOCK_FILE).is_file() or (run / LOCK_FILE).read_text().split()[:1] != [str(first.pid)]:
            assert first.poll() is None and time.time() < deadline, first.stderr.read()
            time.sleep(0.1)
        before = (run / "metrics.jsonl").read_bytes() if (run / "metrics.jsonl").is_file() else None
        line = one_error_line(capsys, main(["train", *args, "max_steps=100000", "--no-progress"]))
        assert f"{run}: another training is running in this directory: process {first.pid}" in line
        assert first.poll() is None  # the first one goes on
        after = (run / "metrics.jsonl").read_bytes() if (run / "metrics.jsonl").is_file() else None
        assert before is None or after.startswith(before)  # the refused one dropped none of its records
    finally:
        first.kill()
        first.wait(timeout=60)


def test_a_training_under_a_held_lock_writes_nothing(sudoku4, tmp_path, capsys, holder):
    run = tmp_path / "run"
    holder(run, "training")
    line = one_error_line(capsys, main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY,
                                        "max_steps=2", "--no-progress"]))
    assert "another training is running" in line
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]


def test_torchrun_into_a_held_run_folder_is_one_line_before_any_worker(sudoku4, tmp_path, capsys, holder,
                                                                         monkeypatch):
    """Rank 0 refused a run folder another training holds while rank 1 already waited on its first collective: a
    gloo traceback on rank 1 and the launch's status 1. The launcher refuses it first, as it checks settings."""
    from trm_kaggle.launch import torchrun

    monkeypatch.setattr(torchrun, "launch", lambda *a, **kw: pytest.fail("no worker for a held run folder"))
    run = tmp_path / "run"
    holder(run, "training")
    line = one_error_line(capsys, main(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "trm_kaggle",
                                        "train", f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY,
                                        "max_steps=2", "--no-progress"]))
    assert "another training is running" in line
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]


def test_a_live_lock_file_this_user_may_only_read_is_still_refused(tmp_path, holder, monkeypatch):
    """A second submit that could not open the running one's lock file for writing (another user's, mode 444)
    warned "no lock taken" and ran beside it in one --work-dir: the file is locked read-only all the same. Where
    nobody holds it, the folder is taken, the holder record left as it was."""
    import errno

    from trm_kaggle import locks

    opened = locks._open_lock_file

    def no_write(path, create=True, writable=True):  # as a user other than the file's owner
        if writable and path.exists():
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return opened(path, create, writable)

    monkeypatch.setattr(locks, "_open_lock_file", no_write)
    p = holder(tmp_path / "d", "submit")
    for required in (True, False):
        with pytest.raises(TRMError, match=f"another submit is running in this directory: process {p.pid}"):
            with directory_lock(tmp_path / "d", "submit", required=required):
                pass
    with pytest.raises(TRMError, match="another submit is running"):
        locks.refuse_if_held(tmp_path / "d")
    p.send_signal(signal.SIGKILL)
    p.wait()
    with directory_lock(tmp_path / "d", "submit", required=False) as held:
        assert held is not None  # a lock, not the unlocked run
        assert str(p.pid) in (tmp_path / "d" / LOCK_FILE).read_text()  # its record could not be rewritten


def test_two_submits_on_one_work_dir(tmp_path, capsys, holder):
    """A submit running on --work-dir holds it: a second one is refused before it writes anything (its
    --output included), with one line."""
    (tmp_path / "c.json").write_text('{"t1": {"train": [{"input": [[1]], "output": [[2]]}], '
                                     '"test": [{"input": [[1]]}]}}')
    make_export(tmp_path / "exp")
    holder(tmp_path / "work", "submit")
    rc = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"), "--output",
               str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "work"), "--no-progress"])
    assert "another submit is running in this directory" in one_error_line(capsys, rc)
    assert not (tmp_path / "s.json").exists() and sorted(p.name for p in (tmp_path / "work").iterdir()) == [
        LOCK_FILE]


def test_sweep_takes_the_same_lock(tmp_path, holder):
    from trm_kaggle.experiments import sweep as S

    holder(tmp_path / "sw", "sweep")
    with pytest.raises(TRMError, match="another sweep is running in this directory"):
        with S._locked(tmp_path / "sw"):
            pass


@pytest.mark.slow  # a submit process: ~20 s on a loaded 2-core machine
def test_two_real_submits_on_one_work_dir(tmp_path, capsys):
    """A submit at work in another process: a second one on its --work-dir is refused, and the first one's
    submission is neither replaced by a fallback nor short of a task."""
    task = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[2, 1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({f"t{i}": task for i in range(2)}))
    make_export(tmp_path / "exp")
    args = ["--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"), "--work-dir",
            str(tmp_path / "work"), "--num-aug", "1", "--finetune-steps", "100000", "--time-budget", "90",
            "--safety-margin", "1", "--batch-size", "4", "--device", "cpu", "--workers", "1", "--no-progress"]
    first = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "submit", *args, "--output",
                              str(tmp_path / "a.json")], stderr=subprocess.PIPE, text=True)
    try:
        lock = tmp_path / "work" / LOCK_FILE
        deadline = time.time() + 120
        while not lock.is_file() or lock.read_text().split()[:1] != [str(first.pid)]:
            assert first.poll() is None and time.time() < deadline, first.stderr.read()
            time.sleep(0.1)
        line = one_error_line(capsys, main(["submit", *args, "--output", str(tmp_path / "b.json")]))
        assert f"another submit is running in this directory: process {first.pid}" in line
        assert not (tmp_path / "b.json").exists() and first.poll() is None
    finally:
        first.kill()
        first.wait(timeout=60)


def test_a_full_disk_costs_the_lock_record_alone(tmp_path, monkeypatch):
    """On a full disk the holder record stayed in the lock file's buffer and its flush at close raised ENOSPC
    after the block had ended: `submit` wrote its answer, then exited 2 with "No space left on device"."""
    import errno

    from trm_kaggle import locks

    real_open, opened = locks._open_lock_file, []

    class Full:  # the lock file on a full disk: every write and flush fails
        def __init__(self, f):
            self.f = f

        def fileno(self):
            return self.f.fileno()

        def __getattr__(self, name):
            return getattr(self.f, name)

        def flush(self):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            opened.append(self.f.fileno())
            self.f.close()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(locks, "_open_lock_file", lambda path, create=True: Full(real_open(path, create)))
    with directory_lock(tmp_path / "d", "submit") as held:
        assert held is not None
    assert opened  # closed once the block ended, its error kept out of the command's result
    monkeypatch.setattr(locks, "_open_lock_file", real_open)
    with directory_lock(tmp_path / "d", "submit") as held:  # and released: the next command takes it
        assert held is not None


def test_a_huge_lock_file_is_read_no_further_than_its_record(tmp_path, holder):
    """A lock file grown to gigabytes (sparse) was read whole before the one-line refusal: 16 s and 6.5 GB."""
    import tracemalloc

    p = holder(tmp_path / "d", "training")
    with open(tmp_path / "d" / LOCK_FILE, "r+b") as f:
        f.truncate(1 << 30)  # a gibibyte after the record, sparse
    tracemalloc.start()
    try:
        with pytest.raises(TRMError, match=f"another training is running in this directory: process {p.pid}"):
            with directory_lock(tmp_path / "d", "submit"):
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak:,} bytes held to read the record"
