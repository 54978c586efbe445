"""benchmarks/entry.py's work folders, scratch and children: a benchmark script removes only what it wrote, leaves
no scratch and no child running behind it whatever ends it, and says a refusal in one escaped `error:` line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from conftest import random_task, write_prefix_subset

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def _script(name: str, *argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), **env})


def _one_error(err: str) -> str:
    err = err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _arc_prefix(root: Path) -> Path:
    """A tiny data set of the subsets bench_build_arc's recipe reads (its build takes about a second)."""
    rng = np.random.default_rng(0)
    prefix = root / "src" / "arc-agi"
    prefix.parent.mkdir(parents=True)
    for subset, n in (("training2", 3), ("evaluation2", 2), ("concept", 2)):
        write_prefix_subset(prefix, subset, {f"{subset[:2]}{i:03d}": random_task(rng, max_side=5) for i in range(n)})
    return prefix


def test_build_arc_keeps_a_users_folder_where_it_would_write_and_removes_only_its_own(tmp_path):
    """`W/upstream-1` of the user's was removed with its files (status 0, no word) though the script never wrote it;
    now refused in one line before any work, the folder kept; a run in a clean work folder leaves none of its own
    folders behind and its scratch folder is gone too."""
    prefix = _arc_prefix(tmp_path)
    (tmp_path / "w" / "upstream-1").mkdir(parents=True)
    (tmp_path / "w" / "upstream-1" / "precious.txt").write_text("mine")
    done = _script("bench_build_arc.py", "--data-prefix", str(prefix), "--num-aug", "1", "--work-dir", "w",
                   cwd=tmp_path)
    assert done.returncode == 2 and "w/upstream-1 is already there" in _one_error(done.stderr), done.stderr
    assert (tmp_path / "w" / "upstream-1" / "precious.txt").read_text() == "mine"
    assert not (tmp_path / "w" / "ours-1").exists()

    (tmp_path / "tmp").mkdir()
    done = _script("bench_build_arc.py", "--data-prefix", str(prefix), "--num-aug", "1", "--work-dir", "w2",
                   cwd=tmp_path, TMPDIR=str(tmp_path / "tmp"))
    assert done.returncode == 0 and "ours     num_aug=1" in done.stdout, done.stderr
    assert not [p.name for p in (tmp_path / "w2").iterdir() if not p.name.startswith(".")]
    done = _script("bench_build_arc.py", "--data-prefix", str(prefix), "--num-aug", "1", cwd=tmp_path,
                   TMPDIR=str(tmp_path / "tmp"))
    assert done.returncode == 0 and not list((tmp_path / "tmp").iterdir()), done.stderr


def test_refusals_of_the_scripts_are_one_escaped_error_line_with_status_2(tmp_path):
    """An escape sequence and a newline in --data-prefix reached the terminal raw (status 1); a child's refusal was
    three lines (`command failed (2): <command line>`, its error, a blank); a user's folder in bench_startup's work
    folder was taken as its dataset, then a three-line failure. Each is one `error:` line, status 2, escaped."""
    done = _script("bench_build_arc.py", "--data-prefix", "x\x1b[31mRED\nline2", cwd=tmp_path)
    err = _one_error(done.stderr)
    assert done.returncode == 2 and "\x1b" not in err and "x\\x1b[31mRED\\nline2" in err, done.stderr

    prefix = _arc_prefix(tmp_path)
    # a count the script takes and its child build refuses (past build-arc's bound): the child's one line
    done = _script("bench_build_arc.py", "--data-prefix", str(prefix), "--num-aug", "200000", cwd=tmp_path)
    assert done.returncode == 2 and "build-arc at num_aug 200000 failed (exit 2): " in _one_error(done.stderr)

    (tmp_path / "sx" / "sudoku4").mkdir(parents=True)
    (tmp_path / "sx" / "sudoku4" / "p.txt").write_text("mine")
    done = _script("bench_startup.py", "--work-dir", "sx", "--rounds", "1", cwd=tmp_path)
    assert done.returncode == 2 and "not a dataset written by this package" in _one_error(done.stderr)
    assert (tmp_path / "sx" / "sudoku4" / "p.txt").read_text() == "mine"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_stop_of_code_repair_ends_its_build_and_removes_its_scratch(tmp_path):
    """SIGTERM to bench_code_repair said `interrupted` while its `build-code-repair` child ran on (and started
    workers) into a scratch folder nobody removed. Now the child is ended before the line, and the scratch is
    gone."""
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen([sys.executable, str(BENCHMARKS / "bench_code_repair.py"), "--workers", "1"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp")})
    child = None
    try:
        deadline = time.monotonic() + 30
        while child is None and time.monotonic() < deadline and proc.poll() is None:
            child = next(iter(_children(proc.pid)), None)
            time.sleep(0.05)
        assert child is not None, "the build never started"
        time.sleep(1.5)  # the build under way, its scratch written
        assert list((tmp_path / "tmp").iterdir())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 143 and err.strip().splitlines()[-1] == "interrupted: stopped by SIGTERM", err
        assert not _running(child), "the build-code-repair child still runs"
        assert not list((tmp_path / "tmp").iterdir())
    finally:
        proc.kill()
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)


def _said(script: str, argv: list[str], monkeypatch) -> int:
    """The script's `main` run in this process on `argv`, as `command` runs it: its status."""
    import importlib

    from benchmarks.entry import said

    main = importlib.import_module(f"benchmarks.{script}").main
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    return said(main)


def test_a_run_folder_planted_as_a_link_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """A link W/pretrain (bench_ttt_modes), W/ttt-<mode>-<seed>-lr<lr> (its fine-tuning) or W/run
    (bench_learn_sudoku) to a user's folder: the training run was written there, status 0. Now one line naming the
    link, status 2, before any work: nothing written there nor in the work folder."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "user.txt").write_text("mine")
    for script, work, link in (("bench_ttt_modes", "t1", "pretrain"), ("bench_ttt_modes", "t2", "ttt-all-0-lr0.001"),
                               ("bench_learn_sudoku", "s1", "run")):
        (tmp_path / work).mkdir()
        (tmp_path / work / link).symlink_to(mine)
        tiny = (["--seeds", "0", "--train-tasks", "2", "--heldout-tasks", "1", "--num-aug", "0", "--pretrain-steps",
                 "1", "--steps", "1", "--batch-size", "2", "--demo-examples", "2", "--threads", "1"]
                if script == "bench_ttt_modes" else ["--minutes", "0.01", "max_steps=1"])  # refused or not: seconds
        argv = ["--work-dir", str(tmp_path / work), *tiny]
        assert _said(script, argv, monkeypatch) == 2, script
        err = _one_error(capsys.readouterr().err)
        assert f"{work}/{link} is a symbolic link to {mine}" in err, err
        assert sorted(p.name for p in (tmp_path / work).iterdir()) == [link]
    assert [p.name for p in mine.iterdir()] == ["user.txt"]
