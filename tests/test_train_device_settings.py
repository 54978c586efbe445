"""Settings that need a device the run lacks are dealt with before the run folder exists: `arch.kernels=triton`
on a CPU is refused in one line (nothing made), `cuda_graphs=True` on a CPU is said in one warning."""

from __future__ import annotations

import logging

import pytest

from cli_helpers import one_error_line
from integrity_helpers import train_args
from trm_kaggle.cli import main


def test_triton_kernels_on_a_cpu_are_refused_before_the_run_folder(data, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the tests' interpreter would run them on the CPU
    run = tmp_path / "run"
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=1", "arch.kernels=triton")))
    assert "arch.kernels=triton" in line and ("not on cpu" in line or "needs Triton" in line), line
    assert not run.exists()


def test_cuda_graphs_on_a_cpu_is_said_once(data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert main(train_args(data, tmp_path / "run", "max_steps=1", "cuda_graphs=True")) == 0
    said = [r.getMessage() for r in caplog.records if "cuda_graphs" in r.getMessage()]
    assert len(said) == 1 and "cpu has no CUDA graphs; the setting is ignored" in said[0], said
