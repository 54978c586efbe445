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


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_a_run_folder_or_export_train_refuses_for_its_place_is_refused(here, capsys, launcher):
    """Each wrote, exit 0, a job whose training `train` refuses on every node: a run folder that is the job files'
    own --out, an earlier launch's --out or a sweep's folder; an export onto a file, onto --out or onto a folder of
    the user's; a run folder that is, or lies inside, an export (the export onto --out lost a whole run's export at
    its end)."""
    (here / "sw").mkdir()
    (here / "sw" / "sweep.json").write_text('{"runs": []}')
    (here / "exp").mkdir()
    (here / "exp" / "config.json").write_text("{}")
    (here / "exp" / "weights.safetensors").write_bytes(b"")
    (here / "c.yaml").write_text("max_steps: 5\n")
    (here / "mine").mkdir()
    (here / "mine" / "notes.txt").write_text("the user's")
    assert launch(launcher, "--out", "j1", "checkpoint_path=runs/a") == 0
    capsys.readouterr()
    before = listing(here)
    for args, said in (
            (["--out", "jobs", "checkpoint_path=jobs"], "and --out jobs are one path: give each output its own"),
            (["--out", "j2", "checkpoint_path=j1"], "j1 is a launch's folder (it holds .trm_kaggle_jobs)"),
            (["--out", "j2", "checkpoint_path=sw"], "sw is a sweep's folder (it holds sweep.json)"),
            (["--out", "j2", "--export", "c.yaml"], "c.yaml is a file; a folder is written there"),
            (["--out", "k", "--export", "k"], "and --out k are one path: give each output its own"),
            (["--out", "j2", "checkpoint_path=exp"], "exp is an export: its files would mix with the input's"),
            (["--out", "j2", "checkpoint_path=exp/x"], "which is an export: its files would mix"),
            (["--out", "j2", "--export", "mine"], "mine exists, is not empty and is not an export written by")):
        line = one_error_line(capsys, launch(launcher, *args))
        assert said in line, (args, line)
    assert listing(here) == before


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_job_files_in_a_training_run_folder_are_refused(here, capsys, launcher):
    """--out a run folder (a sweep's run, or any training's) wrote the job files, their record and a lock among the
    run's states, exit 0, --force too; `train` and the sweep then refused that run folder as a launch's folder, and
    the run could not be continued."""
    run = here / "sw" / "baseline_s0"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "x"}')
    (here / "r2").mkdir()
    (here / "r2" / "state_step00000004.pt").write_bytes(b"")
    before = listing(here)
    for args, said in ((["--out", "sw/baseline_s0"], "--out sw/baseline_s0 is a training run folder"),
                       (["--out", "sw/baseline_s0", "--force"], "--out sw/baseline_s0 is a training run folder"),
                       (["--out", "sw/baseline_s0/jobs"], f"--out sw/baseline_s0/jobs lies inside {run}, which is a "
                                                          "training run folder"),
                       (["--out", "r2"], "--out r2 is a training run folder (it holds run.json or a train state): "
                                         "its files would mix with the run's; choose a folder of its own")):
        line = one_error_line(capsys, launch(launcher, *args))
        assert said in line, (args, line)
    rc = main(["sweep", "tn", "--launcher", launcher, *CLUSTER[launcher], "--out", "sw/baseline_s0", *SETTINGS])
    assert "--out sw/baseline_s0 is a training run folder" in one_error_line(capsys, rc)
    assert listing(here) == before


def test_a_sweeps_job_files_over_a_file_are_said_as_out(here, capsys):
    (here / "g1.yaml").write_text("name: g1\n")
    rc = main(["sweep", "tn", "--launcher", "slurm", *CLUSTER["slurm"], "--out", "g1.yaml", *SETTINGS])
    assert one_error_line(capsys, rc) == "error: --out g1.yaml is a file; a folder is written there"


# ---------------------------------------------------------------------------
# What the user typed reaches the worker as given: never shell code, never a Kubernetes `$(VAR)`
# ---------------------------------------------------------------------------

STUB = '#!/bin/sh\nfor a in "$@"; do echo "ARG[$a]"; done\n'  # a trm-kaggle that prints its arguments
NODE_ENV = "export SLURM_NODEID=0 TRM_RDZV_HOST=h TRM_RDZV_PORT=1 SLURM_JOB_ID=9 TRM_RUN_DIR=/s/runs/x"


def node_arguments(script: Path, where: Path) -> list[str]:
    """The arguments trm-kaggle gets on a node: the script's srun line run by bash (srun dropping its own
    options), with a stub trm-kaggle first on PATH, in `where`."""
    import subprocess

    srun = next(line for line in script.read_text().splitlines() if line.startswith("srun "))
    stub = where / "stub"
    stub.mkdir()
    (stub / "trm-kaggle").write_text(STUB)
    (stub / "trm-kaggle").chmod(0o755)
    (where / "node.sh").write_text(f'srun() {{ shift 3; "$@"; }}\n{NODE_ENV}\n{srun}\n')
    done = subprocess.run(["bash", "node.sh"], cwd=where, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{stub}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    return [line[4:-1] for line in done.stdout.splitlines()]


@pytest.mark.parametrize("shared, export", [
    ("s", "exp$(touch PWNED)"),
    ("s", "exp$(touch PWNED)\"x"),  # a double quote: the node's bash -c failed to parse, the job died at launch
    ("s", "e`touch PWNED`\\'q$HOME${IFS}"),
    ("s", "exp$SLURM_NODEID"),  # the user's text, though it names a variable the script itself uses
    ("s/$(touch${IFS}PWNED)", "exp"),  # a harmless --export under a --shared-dir holding `$`
])
def test_slurm_export_reaches_the_worker_as_given(tmp_path, monkeypatch, capsys, shared, export):
    monkeypatch.chdir(tmp_path)
    shared = f"{tmp_path}/{shared}"  # the shared directory is this machine's too: it and its data are there
    os.makedirs(f"{shared}/data/s4")
    assert main(["launch", "slurm", *CLUSTER["slurm"], "--shared-dir", shared, "--out", "jobs", "--export", export,
                 "data_paths=[data/s4]"]) == 0, capsys.readouterr().err
    args = node_arguments(next((tmp_path / "jobs").glob("*.sbatch")), tmp_path)
    assert args[args.index("--export") + 1] == f"{shared}/{export}"
    # the script's own variables are still expanded on the node
    assert args[args.index("--node-rank") + 1] == "0" and args[args.index("--rdzv-id") + 1] == "trm-9"
    assert args[args.index("--config") + 1] == "/s/runs/x/run_config.yaml"
    assert not (tmp_path / "PWNED").exists()


def kubernetes_expands(text: str, env: dict[str, str]) -> str:
    """What Kubernetes makes of a container's command word: `$(NAME)` of a variable set is its value, `$$` is `$`."""
    import re

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


@pytest.mark.parametrize("flavor", ["job", "pytorchjob"])
@pytest.mark.parametrize("mount, export", [("/workspace", "exp$(MASTER_ADDR)$HOME$$"),
                                           ("/ws/$(JOB_COMPLETION_INDEX)", "e")])
def test_k8s_export_and_mount_reach_the_worker_as_given(tmp_path, monkeypatch, capsys, flavor, mount, export):
    import yaml

    monkeypatch.chdir(tmp_path)
    assert main(["launch", "k8s", "--nodes", "2", "--gpus-per-node", "0", "--image", "img", "--pvc", "claim",
                 "--mount", mount, "--flavor", flavor, "--out", "jobs", "--export", export,
                 "data_paths=[data/s4]", "global_batch_size=8", "device=cpu"]) == 0, capsys.readouterr().err
    docs = list(yaml.safe_load_all(next((tmp_path / "jobs").glob("*.yaml")).read_text()))
    pods = ([docs[-1]["spec"]["template"]] if flavor == "job" else
            [r["template"] for r in docs[-1]["spec"]["pytorchReplicaSpecs"].values()])
    env = {"JOB_COMPLETION_INDEX": "1", "RANK": "1", "MASTER_ADDR": "m", "MASTER_PORT": "5"}
    for pod in pods:
        line = [kubernetes_expands(word, env) for word in pod["spec"]["containers"][0]["command"]]
        assert line[line.index("--export") + 1] == f"{mount}/{export}"
        assert line[line.index("--node-rank") + 1] == "1"  # the manifest's own `$(NAME)` still expands


# ---------------------------------------------------------------------------
# Numbers are ASCII digits: torchrun's flags, a SLURM time
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--nnodes", "²"], "--nnodes '²': expected N or MIN:MAX"),
    (["--nnodes", "２"], "--nnodes '２': expected N or MIN:MAX"),
    (["--nnodes", "1:²"], "--nnodes '1:²': expected N or MIN:MAX"),
    (["--nproc-per-node", "２"], "--nproc-per-node '２': expected a whole number from 1 to 1024"),
    (["--nproc-per-node", "²"], "--nproc-per-node '²': expected a whole number from 1 to 1024"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:²⁹"], "the port must be a number"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:２９５００"], "the port must be a number"),
    (["--rdzv-conf", "timeout=２"], "timeout=２: expected a positive whole number of seconds"),
    (["--rdzv-conf", "timeout=²"], "timeout=²: expected a positive whole number of seconds"),
    (["--rdzv-conf", "join_timeout=６０"], "join_timeout=６０: expected a positive number of seconds"),
    (["--rdzv-conf", "join_timeout=1.5"], "join_timeout=1.5: expected a positive number of seconds (whole"),
    (["--nnodes", "2", "--node-rank", "１"], "--node-rank"),
    (["--max-restarts", "３"], "--max-restarts"),
])
def test_torchrun_numbers_are_ascii_digits(args, words, capsys, tmp_path, monkeypatch):
    from trm_kaggle.launch import torchrun

    def launched(_args):  # a number taken would start torchrun (a static node waits 900 s for its master)
        raise AssertionError("launched")

    monkeypatch.setattr(torchrun, "launch", launched)
    code = main(["torchrun", *args, "-m", "trm_kaggle", "train", f"checkpoint_path={tmp_path / 'run'}"])
    assert words in one_error_line(capsys, code)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("time", ["２٤:00:00", "1-٢", "６０", "1:０0"])
def test_slurm_time_is_ascii_digits(tmp_path, monkeypatch, capsys, time):
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--time", time, "--out", "jobs",
                 "data_paths=[data/s4]"])
    assert f"--time: {time!r} is not a SLURM time" in one_error_line(capsys, code)
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize("shared", ['/s/a"b', "/s/a\\b"])
def test_slurm_shared_dir_holds_nothing_sbatch_reads_as_quoting(tmp_path, monkeypatch, capsys, shared):
    """`--shared-dir` is written into `#SBATCH --chdir=`, whose quotes and backslashes sbatch reads itself."""
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--shared-dir", shared, "--out", "jobs",
                 "data_paths=[data/s4]"])
    assert "shared_dir must hold no" in one_error_line(capsys, code)
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_a_run_folder_holding_a_newline_stays_inside_the_header_comment(here, capsys, launcher):
    """`checkpoint_path=runs/z<newline>touch INJECTED; #` ended the job file's first comment: its second line ran on
    every node (and ended sbatch's reading of the #SBATCH lines), or began YAML of its own (a planted object)."""
    import yaml

    assert launch(launcher, "--out", "jobs", "checkpoint_path=runs/z\ntouch INJECTED; #\nkind: Secret") == 0
    (job,) = [p for p in (here / "jobs").iterdir() if not p.name.startswith(".")]
    text = job.read_text()
    header = text.split("#SBATCH", 1)[0] if launcher == "slurm" else text.split("\n---", 1)[0].split("\napiVersion")[0]
    assert all(line.startswith("#") for line in header.splitlines()), header
    assert "run z\\ntouch INJECTED; #\\nkind: Secret" in text.splitlines()[1 if launcher == "slurm" else 0]
    if launcher == "k8s":
        assert "Secret" not in {d.get("kind") for d in yaml.safe_load_all(text) if d}


ROOT = "--mount: mount must not be /"
SYSTEM = "the claim would hide the container's own"


@pytest.mark.parametrize("mount, said", [("/", ROOT), ("//", ROOT), ("///", ROOT), ("//.", ROOT),
                                         ("/proc", SYSTEM), ("/dev/shm", SYSTEM), ("//etc", SYSTEM),
                                         ("/usr/local", SYSTEM), ("/var", SYSTEM)])
def test_k8s_mount_on_the_root_or_a_system_folder_is_refused(tmp_path, monkeypatch, capsys, mount, said):
    """`//` is the root too (normpath keeps a leading `//`): the claim would be mounted over the container's /; on
    /proc, /etc, /usr ... it hides what the container runs on. A folder of its own below /var is taken."""
    monkeypatch.chdir(tmp_path)
    args = ["launch", "k8s", "--nodes", "1", "--gpus-per-node", "0", "--image", "img", "--pvc", "claim", "--out",
            "jobs", "data_paths=[data/s4]"]
    assert said in one_error_line(capsys, main([*args, "--mount", mount]))
    assert not (tmp_path / "jobs").exists()
    assert main([*args, "--mount", "/var/data"]) == 0


def test_cluster_config_takes_numpy_numbers(tmp_path):
    """A numpy number compared with [] is an empty array, whose truth is an error: options are told apart by type."""
    np = pytest.importorskip("numpy")
    from trm_kaggle.launch import cluster_config

    cluster = cluster_config("slurm", {"nodes": np.int64(2), "gpus_per_node": np.int64(0), "force": np.bool_(False),
                                       "rdzv_port": np.int32(80), "max_restarts": np.int16(3),
                                       "out": str(tmp_path / "o"), "partition": None, "export": []})
    assert (cluster.nodes, cluster.gpus_per_node, cluster.rdzv_port) == (2, 0, 80)
