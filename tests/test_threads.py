"""One rule for the CPU threads of everything that trains or predicts (`trm_kaggle.hardware.choose_threads`):
the `threads` setting, else OMP_NUM_THREADS as the user set it (never overridden silently), else the cores that
other work leaves free (the affinity mask and the load average), split among processes that run side by side.
`pipeline` takes the setting too and hands it to its training, evaluation and submission."""

from __future__ import annotations

import pytest
import torch

from integrity_helpers import train_args
from trm_kaggle import hardware, pipeline
from trm_kaggle.cli import main
from trm_kaggle.config import PipelineConfig
from trm_kaggle.train import loop as train_loop
from trm_kaggle.train.step import train_step as real_step


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(hardware, "_AUTO", {})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before)


def test_the_rule_setting_then_env_then_free_cores(fresh):
    fresh.setattr(hardware, "usable_cores", lambda: 8)
    fresh.setattr(hardware.os, "cpu_count", lambda: 8)
    fresh.setattr(hardware.os, "getloadavg", lambda: (6.0, 6.0, 6.0))  # this process and 5 cores' worth of others
    assert hardware.choose_threads() == (3, "3 of 8 cores free (load average 6.0)")
    assert hardware.choose_threads(share=2)[0] == 1
    fresh.setattr(hardware.os, "getloadavg", lambda: (40.0, 0, 0))
    fresh.setattr(hardware, "_AUTO", {})
    assert hardware.choose_threads()[0] == 1  # never zero
    fresh.setattr(hardware.os, "getloadavg", lambda: (0.3, 0, 0))
    fresh.setattr(hardware, "_AUTO", {})
    assert hardware.choose_threads()[0] == 8
    fresh.setattr(hardware.os, "cpu_count", lambda: 64)  # a container given 8 of 64 busy cores: its share of the load
    fresh.setattr(hardware.os, "getloadavg", lambda: (33.0, 0, 0))
    fresh.setattr(hardware, "_AUTO", {})
    assert hardware.choose_threads()[0] == 4
    fresh.setenv("OMP_NUM_THREADS", "2")
    assert hardware.choose_threads() == (2, "OMP_NUM_THREADS=2")
    assert hardware.choose_threads(5) == (5, "threads=5, over OMP_NUM_THREADS=2")
    fresh.setenv("OMP_NUM_THREADS", "lots")  # OpenMP ignores it as well
    assert hardware.choose_threads(5) == (5, "threads=5")


def test_more_threads_than_cores_are_the_cores(fresh):
    """threads=2048 (or OMP_NUM_THREADS=4096), inside the setting's bound, ended train and submit in a segmentation
    fault inside OpenMP on a 2-core machine, without a word: more threads than cores are capped, and said."""
    fresh.setattr(hardware, "usable_cores", lambda: 8)
    assert hardware.choose_threads(2048) == (8, "threads=2048, capped at the 8 cores this process may use")
    assert hardware.choose_threads(8) == (8, "threads=8")
    fresh.setenv("OMP_NUM_THREADS", "4096")
    assert hardware.choose_threads() == (8, "OMP_NUM_THREADS=4096, capped at the 8 cores this process may use")


def test_training_respects_omp_num_threads_and_says_its_threads(fresh, data, tmp_path, capsys):
    fresh.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(2)  # as torch would have read another value at its start
    during = []
    fresh.setattr(train_loop, "train_step", lambda *a, **k: (during.append(torch.get_num_threads()),
                                                              real_step(*a, **k))[1])
    assert main(train_args(data, tmp_path / "run", "max_steps=1", "threads=null", "progress=True")) == 0
    assert during == [1]  # the run's steps on the thread OMP_NUM_THREADS gives
    assert torch.get_num_threads() == 2  # and the caller's own count back once train() returns
    assert "1 CPU thread (OMP_NUM_THREADS=1)" in capsys.readouterr().err


def test_pipeline_takes_the_setting_and_hands_it_to_training(fresh, tmp_path):
    assert "--threads" in pipeline.pipeline_command(PipelineConfig(threads=2))
    with pytest.raises(ValueError, match="threads"):
        PipelineConfig(threads=0)
    seen = []

    class Stop(Exception):
        pass

    def capture(tcfg, **kw):
        seen.append(tcfg.threads)
        raise Stop

    fresh.setattr(pipeline, "train", capture)
    result = pipeline.PipelineResult(PipelineConfig(threads=2, work_dir=str(tmp_path)))
    result.facts.update(data_dir=tmp_path / "d", run_dir=tmp_path / "r", weights=tmp_path / "w")
    with pytest.raises(Stop):
        pipeline._train_and_export(result.cfg, tmp_path, result)
    assert seen == [2]
