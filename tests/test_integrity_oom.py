"""Out of memory under a memory limit is one line saying what to lower, on every device's allocator: CUDA's
OutOfMemoryError, the CPU allocator's RuntimeError, Python's MemoryError; auto_batch halves the micro-batch and
goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from integrity_helpers import train_args
from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.train import setup, step
from trm_kaggle.train.memory import is_out_of_memory

CPU_ALLOCATOR = ("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
                 "allocate 3221225472 bytes. Error code 12 (Cannot allocate memory)")
OOM = [RuntimeError(CPU_ALLOCATOR), MemoryError(), torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
       RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)")]


@pytest.mark.parametrize("error", OOM, ids=["cpu-allocator", "MemoryError", "cuda", "mps"])
def test_out_of_memory_in_a_step_says_what_to_lower(data, tmp_path, capsys, monkeypatch, error):
    def exhausted(*args, **kwargs):
        raise error

    monkeypatch.setattr(step, "accumulate", exhausted)
    assert main(train_args(data, tmp_path / "run", "max_steps=2", "micro_batch_size=4")) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: out of memory on cpu in training step 1: lower micro_batch_size (now 4;"), line
    assert "auto_batch=True" in line and "global_batch_size (now 8)" in line and "trm-kaggle doctor" in line


def test_out_of_memory_while_setting_up_says_so(data, tmp_path, capsys, monkeypatch):
    def exhausted(*args, **kwargs):
        raise RuntimeError(CPU_ALLOCATOR)

    monkeypatch.setattr(setup, "build_model", exhausted)
    assert main(train_args(data, tmp_path / "run", "max_steps=2")) == 2
    line = one_error_line(capsys)
    assert "out of memory on cpu setting up, evaluating or saving the run" in line and "micro_batch_size" in line


def test_auto_batch_halves_the_micro_batch_on_any_allocator(data, tmp_path, monkeypatch, caplog):
    real, calls = step.accumulate, []

    def once_exhausted(forward, model, batch, carries, micro, *args):
        calls.append(micro)
        if len(calls) == 1:
            raise RuntimeError(CPU_ALLOCATOR)
        return real(forward, model, batch, carries, micro, *args)

    monkeypatch.setattr(step, "accumulate", once_exhausted)
    assert main(train_args(data, tmp_path / "run", "max_steps=2", "auto_batch=True")) == 0
    assert calls[:2] == [8, 4] and "out of memory: retrying with micro_batch_size=4" in caplog.text


def test_other_runtime_errors_are_not_taken_for_out_of_memory():
    assert all(is_out_of_memory(e) for e in OOM)
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only the allocators' exception types


@pytest.mark.slow  # about 20 s: a fresh interpreter imports torch and allocates until the limit
def test_a_real_memory_limit(data, tmp_path):
    """Under `ulimit -v` (RLIMIT_AS) a model too large for it fails with the line, not an allocator traceback."""
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch, trm_kaggle.train.loop  # loaded before the limit: only the run's own memory is limited
        from trm_kaggle.cli import main
        from integrity_helpers import train_args
        size = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (size + (300 << 20),) * 2)
        sys.exit(main(train_args({str(data)!r}, {str(tmp_path / "run")!r}, "max_steps=2", "arch.hidden_size=1024",
                                 "arch.num_heads=8", "global_batch_size=40")))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={"OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "1", "PATH": "/usr/bin:/bin"})
    err = [line for line in done.stderr.splitlines()  # TINY's width is set again here: said, and not the point
           if line.strip() and "is set twice on one line" not in line]
    assert done.returncode == 2 and len(err) == 1, done.stderr[-3000:]
    assert err[0].startswith("error: out of memory on cpu") and "micro_batch_size (now 40" in err[0], err


NO_MEMORY = [RuntimeError("can't start new thread"), MemoryError(),
             ImportError("/x/numpy/random/_bounded_integers.so: failed to map segment from shared object"),
             RuntimeError(CPU_ALLOCATOR)]


@pytest.mark.parametrize("error", NO_MEMORY, ids=["thread", "MemoryError", "library", "cpu-allocator"])
def test_memory_that_ran_out_anywhere_is_one_line(tmp_path, capsys, monkeypatch, error):
    """Under `ulimit -v` memory ran out where no out-of-memory check was: the sampler's thread could not start, the
    loader's thread could not load numpy.random, evaluate's allocator, build-arc's JSON reader. Each was a
    traceback (status 1); each is one line saying it was memory, and the limit when one is set."""
    import resource

    import trm_kaggle.cli.data as data_cli

    def exhausted(args):
        raise error

    monkeypatch.setattr(data_cli, "cmd_build_sudoku", exhausted)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (650 << 20, resource.RLIM_INFINITY))
    rc = main(["build-sudoku", "--size", "4", "--num-train", "2", "--num-test", "1", "--output-dir",
               str(tmp_path / "d"), "--no-progress"])
    line = one_error_line(capsys, rc)
    assert line.startswith("error: out of memory under an address-space limit of 650 MiB (ulimit -v): "), line
    assert "give the process more memory" in line


def test_other_errors_are_no_memory_line():
    from trm_kaggle.errors import resource_line

    assert resource_line(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert resource_line(ImportError("No module named 'matplotlib'")) is None
    assert resource_line(ValueError("can't start new thread")) is None


def test_a_picture_library_that_could_not_load_for_memory_is_not_said_missing(monkeypatch):
    """evaluate under `ulimit -v` said "grid pictures need matplotlib: pip install matplotlib" with matplotlib
    installed: its import had run out of memory."""
    import builtins

    from trm_kaggle.errors import TRMError
    from trm_kaggle.evaluate.report import task_picture_png

    real = builtins.__import__

    def no_room(name, *a, **kw):
        if name.startswith("matplotlib"):
            raise ImportError("libpng16.so: failed to map segment from shared object")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_room)
    with pytest.raises(TRMError) as e:
        task_picture_png(None, "t")
    assert str(e.value).startswith("out of memory") and "pip install" not in str(e.value), str(e.value)
