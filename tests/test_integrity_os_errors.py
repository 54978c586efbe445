"""An OS error names its file and its cause: never "(no path)", never torch's "unexpected pos".

A write that fails (a full disk, a file size limit under `ulimit -f`) raises an OSError without a file
name, and torch's archive writer turns it into "inline_container.cc:672 unexpected pos". Atomic writes,
appended logs and directory builds put the path back, and the cause is said once.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import trm_kaggle.atomic as A
from trm_kaggle.atomic import append_line, atomic_directory, atomic_write, atomic_write_text
from trm_kaggle.errors import describe, os_error_line

from conftest import make_export

LIMIT = 64 * 1024  # bytes a process may write into one file in these tests


def limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def run_limited(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m trm_kaggle ARGS` under a file size limit (as `ulimit -f` sets it)."""
    return subprocess.run([sys.executable, "-m", "trm_kaggle", *args], capture_output=True, text=True, cwd=cwd,
                          preexec_fn=limit_file_size, timeout=300)


WRITERS = {
    "torch.save": lambda f: torch.save({"x": torch.zeros(100_000)}, f),
    "numpy savez": lambda f: np.savez(f, x=np.zeros(100_000)),
    "text": lambda f: f.write(b"x" * 1_000_000),
}


def _full_disk_after(limit: int, monkeypatch):
    """Make every file opened by atomic_write report a full disk once `limit` bytes were written to it."""
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            self.n += len(data)
            if self.n > limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(A.os, "fdopen", lambda fd, mode, **kw: Full(real(fd, mode, **kw)))


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_full_disk_names_the_file_whatever_wrote_it(tmp_path, monkeypatch, writer):
    _full_disk_after(10_000, monkeypatch)
    with pytest.raises(OSError) as e:
        atomic_write(tmp_path / "out.bin", WRITERS[writer])
    line = os_error_line(e.value)
    assert line.startswith(f"{tmp_path / 'out.bin'}: No space left on device (needed: free space")
    assert "unexpected pos" not in line and list(tmp_path.iterdir()) == []  # no temporary left behind


def test_numpys_short_write_is_said_as_a_full_disk_may_cause_it(tmp_path):
    """A dataset built onto a full disk ended with `error: <out>: 40000 requested and 28640 written`: numpy's words,
    read as the 40,000 puzzles typed, and nothing of the disk."""
    def short(folder):
        raise OSError("40000 requested and 28640 written")

    with pytest.raises(OSError) as e:
        with atomic_directory(tmp_path / "ds", kind="dataset") as tmp:
            short(tmp)
    assert os_error_line(e.value) == (f"{tmp_path / 'ds'}: a write was cut short (40000 items requested, 28640 "
                                      "written): the disk is full, or the file past its size limit (needed: free "
                                      "space on its disk)")
    assert list(tmp_path.iterdir()) == []


CHILD = """
import resource, sys, numpy as np, torch
from trm_kaggle.atomic import atomic_write, atomic_write_text, append_line
from trm_kaggle.errors import os_error_line
writers = {"torch.save": lambda: atomic_write(sys.argv[1] + "/a.pt",
                                              lambda f: torch.save({"x": torch.zeros(100_000)}, f)),
           "numpy savez": lambda: atomic_write(sys.argv[1] + "/a.npz", lambda f: np.savez(f, x=np.zeros(100_000))),
           "text": lambda: atomic_write_text(sys.argv[1] + "/a.txt", "x" * 1_000_000),
           "append": lambda: append_line(sys.argv[1] + "/metrics.jsonl", "x" * 1_000_000)}
for name, write in writers.items():
    try:
        write()
        print(name, "written")
    except OSError as e:
        print(name, "|", os_error_line(e))
"""


def test_a_file_of_a_folder_being_built_is_named_in_its_output_not_in_the_removed_partial(tmp_path):
    """A report's picture cut by the size limit was named `rep.partial-<pid>/pictures/x.png`, a folder removed by
    then: the file is named where it would have been."""
    import errno

    with pytest.raises(OSError) as e:
        with atomic_directory(tmp_path / "rep", kind="evaluation report") as tmp:
            (tmp / "pictures").mkdir()
            raise OSError(errno.EFBIG, "File too large", str(tmp / "pictures" / "x.png"))
    assert os_error_line(e.value).startswith(f"{tmp_path / 'rep' / 'pictures' / 'x.png'}: File too large"), e.value
    assert list(tmp_path.iterdir()) == []


def test_a_file_size_limit_names_the_file_and_the_limit(tmp_path):
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                       preexec_fn=limit_file_size, timeout=300)
    lines = dict(line.split(" | ") for line in r.stdout.splitlines())
    assert set(lines) == {"torch.save", "numpy savez", "text", "append"}, r.stdout + r.stderr
    for name, line in lines.items():
        assert line.endswith("File too large (needed: a file size limit that allows it (ulimit -f))"), line
        assert line.startswith(str(tmp_path) + "/"), line


def test_a_build_cut_by_the_limit_names_its_output(tmp_path):
    """A dataset streamed to files inside its build folder: the error names the dataset, nothing half-built."""
    r = run_limited("build-sudoku", "--output-dir", str(tmp_path / "ds"), "--size", "4", "--num-train", "3000",
                    "--num-test", "4", "--num-aug", "3", "--no-progress", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: {tmp_path / 'ds'}: File too large (needed: a file size limit"), r.stderr
    assert "(no path)" not in r.stderr and not (tmp_path / "ds").exists()
    assert not list(tmp_path.glob("ds.partial-*"))


@pytest.mark.slow  # a submit process with two fine-tuned tasks: ~40 s on a loaded 2-core machine
def test_submit_under_a_file_size_limit_says_the_cause_once(tmp_path):
    """Every task's train state is cut by the limit: one line with a file and the cause, not one torch
    message per task; the fallback submission is written."""
    task = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[2, 1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({f"t{i}": task for i in range(2)}))
    make_export(tmp_path / "exp")
    r = run_limited("submit", "--challenges", "c.json", "--weights", "exp", "--output", "s.json", "--work-dir", "w",
                    "--num-aug", "1", "--finetune-steps", "1", "--batch-size", "4", "--eval-batch-size", "16",
                    "--device", "cpu", "--workers", "1", "--no-progress", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("File too large") == 1 and "ulimit -f" in r.stderr, r.stderr
    assert "unexpected pos" not in r.stderr and "(no path)" not in r.stderr and "Traceback" not in r.stderr
    assert "state_step" in r.stderr  # the file that could not be written
    assert json.loads((tmp_path / "s.json").read_text()).keys() == {"t0", "t1"}


def test_an_error_without_a_path_is_not_given_a_fake_one(tmp_path):
    line = os_error_line(OSError(errno.EFBIG, os.strerror(errno.EFBIG)))
    assert line == "File too large (needed: a file size limit that allows it (ulimit -f))"
    assert describe(OSError(errno.ENOSPC, "No space left on device", "/x/y")).startswith("/x/y: No space left")
    with pytest.raises(OSError) as e:
        with atomic_directory(tmp_path / "out", kind="dataset") as tmp:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a streamed write inside the build
    assert e.value.filename == str((tmp_path / "out").absolute()) and not (tmp_path / "out").exists()
    with pytest.raises(OSError) as e:
        append_line(tmp_path / "missing" / "metrics.jsonl", "{}")
    assert "metrics.jsonl" in os_error_line(e.value)
    atomic_write_text(tmp_path / "ok.txt", "fine")  # a write that succeeds is untouched by the naming
    assert (tmp_path / "ok.txt").read_text() == "fine"


def test_an_export_cut_by_the_limit_names_the_export(tmp_path):
    """safetensors reports the system's error in its own words ("... (os error 27)"): one line naming the export."""
    code = ("import sys\nsys.path.insert(0, sys.argv[2])\nfrom conftest import make_export\n"
            "from trm_kaggle.errors import os_error_line\n"
            "try:\n    make_export(__import__('pathlib').Path(sys.argv[1]))\n"
            "except OSError as e:\n    print(os_error_line(e))\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "exp"), str(Path(__file__).parent)],
                       capture_output=True, text=True, preexec_fn=lambda: resource.setrlimit(
                           resource.RLIMIT_FSIZE, (4096, 4096)), timeout=300)
    assert r.stdout.strip() == f"{tmp_path / 'exp'}: File too large (needed: a file size limit that allows it " \
                               "(ulimit -f))", r.stdout + r.stderr
    assert not (tmp_path / "exp").exists() and not list(tmp_path.glob("exp.partial-*"))


def test_an_output_on_a_full_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """`submit --work-dir` on a full disk passed the start's check (an empty lock file still fits there) and
    then lost every model answer: the worker could not open its log. An output whose disk has under
    `MIN_FREE_BYTES` free is refused in one line before anything is written, by the one check of every command."""
    import shutil

    import trm_kaggle.outputs as O
    from trm_kaggle.cli import main

    (tmp_path / "full").mkdir()
    real = shutil.disk_usage

    def usage(path):  # the folder `full` stands for a full disk
        u = real(path)
        return u._replace(free=4096) if Path(path).resolve() == tmp_path / "full" else u

    monkeypatch.setattr(O.shutil, "disk_usage", usage)
    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t0": task}))
    make_export(tmp_path / "exp")
    for out, work in (("s.json", "full/w"), ("full/s.json", "w")):
        code = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"),
                     "--output", str(tmp_path / out), "--work-dir", str(tmp_path / work), "--finetune", "none",
                     "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "is full (4,096 bytes free; needed: free space" in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "exp", "full"] and not any(
            (tmp_path / "full").iterdir())
    assert main(["build-sudoku", "--output-dir", str(tmp_path / "full" / "d"), "--num-train", "2"]) == 2
    assert "the disk of" in capsys.readouterr().err
    # asked at the start alone: a bundle's later part is not refused for the space its earlier parts took
    assert A.replace_problem(tmp_path / "full" / "kernel", "bundle kernel") is None


WHEEL_CHILD = """
import resource, sys
from pathlib import Path
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle.wheels import build_project_wheel
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
try:
    build_project_wheel(Path(sys.argv[1]), builder=sys.argv[2], log=lambda _: None)
    print("built")
except TRMError as e:
    print(e)
"""


@pytest.mark.parametrize("builder, limit", [("builtin", 20_000), ("pip", 300_000)])
def test_a_wheel_cut_by_the_size_limit_is_one_line_naming_the_limit(tmp_path, builder, limit):
    """Under `ulimit -f 20` the wheel step's error was a 6.7 KB line of Python tuples (every file copytree could not
    copy); at 300 KiB pip's whole output with a traceback inside. Neither said `ulimit -f`."""
    from trm_kaggle.kaggle.wheels import can_build_without_isolation

    if builder == "pip" and can_build_without_isolation():
        pytest.skip(f"pip cannot build the wheel in this interpreter: {can_build_without_isolation()}")
    r = subprocess.run([sys.executable, "-c", WHEEL_CHILD, str(tmp_path / "w"), builder, str(limit)],
                       capture_output=True, text=True, timeout=300)
    said = r.stdout.strip()
    assert said.startswith("building the trm_kaggle wheel") and "\n" not in said, r.stdout + r.stderr
    assert said.endswith("File too large (needed: a file size limit that allows it (ulimit -f))") and len(said) < 300


def test_a_scratch_folder_is_removed_under_an_open_file_limit(tmp_path):
    """shutil's rmtree holds a descriptor per level: under `ulimit -n` a bundle build's scratch copy of the sources
    (`trm_wheel_*`, 3 MB) stayed behind after every failed run. The tree is removed by path then."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import os, resource
        from pathlib import Path
        from trm_kaggle.atomic import scratch_folder
        with scratch_folder("trm_wheel_", dir={str(tmp_path)!r}) as tmp:
            deep = tmp.joinpath(*"abcdefghij")
            deep.mkdir(parents=True)
            (deep / "f.txt").write_text("x")
            (tmp / "link").symlink_to({str(tmp_path)!r})  # removed, never followed
            used = len(os.listdir("/proc/self/fd"))
            resource.setrlimit(resource.RLIMIT_NOFILE, (used + 2, used + 2))
        """)
    (tmp_path / "keep.txt").write_text("mine")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"], list(tmp_path.iterdir())


def test_an_open_file_limit_is_said_as_one_not_as_a_damaged_array(tmp_path, monkeypatch):
    """Under `ulimit -n` a dataset's intact .npy file was "unreadable or truncated", and a train state "truncated
    or not written by trm-kaggle?": a read the system refused is said as that, with the limit to raise."""
    from trm_kaggle.data import format as F
    from trm_kaggle.errors import UnreadableFile

    path = tmp_path / "a.npy"
    np.save(path, np.arange(4))
    real = np.load

    def refused(*a, **kw):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(F.np, "load", refused)
    with pytest.raises(UnreadableFile, match="a.npy: cannot read .npy array: Too many open files"):
        F.load_array(path)
    monkeypatch.setattr(F.np, "load", real)
    assert "ulimit -n" in os_error_line(OSError(errno.EMFILE, "Too many open files", "x"))


@pytest.mark.parametrize("refusal", [(0, "Error"), (errno.EFBIG, "File too large")])
def test_a_worker_pool_the_system_refuses_is_one_line_naming_the_way_round(monkeypatch, tmp_path, refusal):
    """`build-arc --workers 2` under `ulimit -f 10`: the pool's semaphore raised OSError(0, 'Error'), said as
    "error: Error"; under `ulimit -f 0` OSError(EFBIG) with no file, said as "error: File too large"."""
    import trm_kaggle.data.arc.build as B
    from trm_kaggle.errors import TRMError

    def refused(*a, **kw):
        raise OSError(*refusal)

    monkeypatch.setattr(B, "ProcessPoolExecutor", refused)
    with pytest.raises(TRMError, match=f"starting 2 worker processes failed: .*{refusal[1]}.* build with --workers 1"):
        B._pool(2, "fork", [])
