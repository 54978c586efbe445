"""Launch files refuse outputs inside inputs, as `train` itself does (`trm_kaggle.train.run_io`).

`launch slurm|k8s` and `sweep --launcher` check the training the job will run on the paths its nodes use (a
run folder or `--export` inside a dataset, a run folder holding the checkpoint it loads), and the job files
they write here (`--out`) against the datasets; a local `sweep` checks each run's folder before it writes.
Each refusal is one `error:` line, status 2, before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.config import SudokuBuildConfig
from trm_kaggle.data.puzzles.sudoku import build_sudoku

CLUSTER = {"slurm": ["--nodes", "1", "--gpus-per-node", "0", "--time", "1:00:00"],
           "k8s": ["--nodes", "1", "--gpus-per-node", "0", "--image", "img", "--pvc", "claim", "--mount", "/workspace"]}
SETTINGS = ["data_paths=[data/s4]", "global_batch_size=8", "device=cpu"]


@pytest.fixture
def here(tmp_path_factory, monkeypatch) -> Path:
    """A folder holding a dataset at data/s4 (the shared directory of a SLURM job, a copy of the volume's
    contents for Kubernetes); the current folder."""
    root = tmp_path_factory.mktemp("launch")
    build_sudoku(SudokuBuildConfig(output_dir=str(root / "data" / "s4"), size=4, num_train=8, num_test=2, num_aug=1,
                                   progress=False))
    monkeypatch.chdir(root)
    return root


def launch(launcher: str, *args: str) -> int:
    return main(["launch", launcher, *CLUSTER[launcher], *SETTINGS, *args])


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
@pytest.mark.parametrize("args, words", [
    (["--out", "data/s4/jobs"], "--out data/s4/jobs lies inside {h}/data/s4, which is a dataset"),
    (["--out", "data/s4"], "--out data/s4 is a dataset"),
    (["--out", "jobs", "checkpoint_path=data/s4/run"], "run folder (checkpoint_path) {v}/data/s4/run is inside the "
                                                       "input data path {v}/data/s4"),
    (["--out", "jobs", "checkpoint_path=data/s4"], "run folder (checkpoint_path) {v}/data/s4 is also the input"),
    (["--out", "jobs", "--export", "data/s4/export"], "--export {v}/data/s4/export is inside the input data path"),
    (["--out", "jobs", "--export", "data/s4/../s4/e"], "--export {v}/data/s4/e is inside the input data path"),
    (["--out", "jobs", "checkpoint_path=runs/a", "load_checkpoint=runs/a/state_step00000001.pt"],
     "run folder (checkpoint_path) {v}/runs/a holds the input load_checkpoint {v}/runs/a/state_step00000001.pt"),
    (["--out", "jobs", "data_paths_test=[data/s4]", "checkpoint_path=data/s4/r"], "is inside the input data path"),
])
def test_launch_refuses_outputs_inside_inputs(here, capsys, launcher, args, words):
    before = listing(here)
    volume = str(here) if launcher == "slurm" else "/workspace"
    line = one_error_line(capsys, launch(launcher, *args))
    assert words.format(v=volume, h=here) in line, line
    assert listing(here) == before  # nothing written, the dataset untouched


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_job_files_through_a_link_into_the_data(here, capsys, launcher):
    os.symlink(here / "data" / "s4", here / "link")
    line = one_error_line(capsys, launch(launcher, "--out", "link/jobs"))
    assert "--out link/jobs (through a link) lies inside" in line and "which is a dataset" in line, line
    assert not (here / "data" / "s4" / "jobs").exists()


def test_slurm_on_another_shared_directory_checks_the_paths_there(here, capsys, tmp_path):
    """--shared-dir elsewhere: the run folder is placed there, and checked there."""
    shared = tmp_path / "shared"
    build_sudoku(SudokuBuildConfig(output_dir=str(shared / "data" / "s4"), size=4, num_train=8, num_test=2,
                                   num_aug=1, progress=False))
    line = one_error_line(capsys, launch("slurm", "--shared-dir", str(shared), "--out", "jobs",
                                         "checkpoint_path=data/s4/run"))
    assert f"run folder (checkpoint_path) {shared}/data/s4/run is inside the input data path {shared}/data/s4" in line


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_a_sweep_on_the_cluster_inside_its_data_is_refused(here, capsys, launcher):
    before = listing(here)
    rc = main(["sweep", "tn", "--launcher", launcher, *CLUSTER[launcher], "--out", "jobs", "--sweep-dir",
               "data/s4/sweep", *SETTINGS])
    line = one_error_line(capsys, rc)
    assert "run T2n2_s0: run folder (checkpoint_path)" in line and "is inside the input data path" in line
    assert listing(here) == before


def test_a_local_sweep_inside_its_data_is_refused_before_it_writes(here, capsys):
    before = listing(here)
    line = one_error_line(capsys, main(["sweep", "tn", "--sweep-dir", "data/s4/sweep", *SETTINGS, "max_steps=1",
                                        "--no-progress"]))
    assert "--sweep-dir data/s4/sweep lies inside" in line and "which is a dataset" in line, line
    assert listing(here) == before


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_what_train_accepts_is_written(here, capsys, launcher):
    """Job files beside the data (in the folder holding it: they replace none of it) and a run folder outside it."""
    assert launch(launcher, "--out", "data", "checkpoint_path=runs/a", "--export", "exports/a") == 0
    out = capsys.readouterr().out
    assert "wrote 1 file to data" in out
    assert {p.name for p in (here / "data").iterdir()} >= {"s4", ".trm_kaggle_jobs"}
