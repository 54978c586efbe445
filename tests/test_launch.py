"""`trm-kaggle launch k8s|slurm` and `sweep --launcher`: job files from a local run's settings, checked against
Kubernetes' schemas offline, SLURM scripts run to the end by a stand-in sbatch/srun on 2 CPU "nodes", bad
input refused before anything is written, edited files never overwritten without --force."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import free_port_base
from test_train import TINY
from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.config import SudokuBuildConfig
from trm_kaggle.data.puzzles.sudoku import build_sudoku
from trm_kaggle.experiments.compare import write_comparison
from trm_kaggle.launch import torchrun
from trm_kaggle.launch.files import RECORD
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.settings import load_train_config

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (the dev extra has it)")

IMAGE = "ghcr.io/example/trm-kaggle:0.1"
K8S = ["launch", "k8s", "--nodes", "2", "--gpus-per-node", "8", "--image", IMAGE, "--pvc", "trm-data",
       "--preset", "arc2", "data_paths=[data/arc2concept-aug-1000]", "+run_name=arc2-2x8"]
KUBERNETES_VERSIONS = ("1.27", kv.utils.latest_version())  # the oldest release still common, and the newest


def validate(doc: dict, versions=KUBERNETES_VERSIONS) -> None:
    """Kubernetes' own schemas, strict (unknown fields are errors), offline (the package ships them)."""
    for version in versions:
        kv.validate(doc, version, strict=True)


def docs_of(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


# ---------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------


def test_k8s_writes_a_settings_map_a_headless_service_and_an_indexed_job_that_validate(tmp_path, capsys):
    out = tmp_path / "jobs"
    assert main([*K8S, "--out", str(out), "--toleration", "nvidia.com/gpu:NoSchedule", "--node-selector",
                 "gpu=h100", "--env", "NCCL_DEBUG=INFO", "--namespace", "research"]) == 0
    printed = capsys.readouterr().out
    assert f"kubectl apply -f {out / 'arc2-2x8.yaml'}" in printed and "nothing submitted" in printed
    docs = docs_of(out / "arc2-2x8.yaml")
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job"]
    for doc in docs:
        validate(doc)
        assert doc["metadata"]["namespace"] == "research"
    kinds = by_kind(docs)
    job, service = kinds["Job"], kinds["Service"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    container = pod["containers"][0]
    assert container["command"] == [
        "trm-kaggle", "torchrun", "--nnodes", "2", "--nproc-per-node", "8", "--node-rank", "$(JOB_COMPLETION_INDEX)",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "arc2-2x8-0.arc2-2x8:29500", "--rdzv-id", "arc2-2x8",
        "--rdzv-conf", "join_timeout=600", "--max-restarts", "3",
        "-m", "trm_kaggle", "train", "--config", "/etc/trm-kaggle/run_config.yaml"]
    # $(JOB_COMPLETION_INDEX) is expanded by Kubernetes from the pod's env: the Job's completion index
    index = next(e for e in container["env"] if e["name"] == "JOB_COMPLETION_INDEX")
    assert "job-completion-index" in index["valueFrom"]["fieldRef"]["fieldPath"]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in container["env"]
    assert container["resources"] == {"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}}
    assert container["image"] == IMAGE and container["workingDir"] == "/workspace"
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # the rendezvous host is pod 0's name through the headless service
    assert service["spec"]["clusterIP"] == "None" and pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["port"] == 29500
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"]["claimName"] == "trm-data"
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    # torch's own parser takes the line (node 1's), and its settings resolve to the local run's, on the volume
    settings = tmp_path / "run_config.yaml"
    settings.write_text(kinds["ConfigMap"]["data"]["run_config.yaml"])
    line = [str(settings) if a.startswith("/etc/") else "1" if a.startswith("$(") else a for a in container["command"]]
    args = torchrun.parse(line[2:])
    assert (args.nnodes, args.nproc_per_node, args.node_rank, args.max_restarts) == ("2", "8", 1, 3)
    assert torchrun.trained_module_args(args) == ["--config", str(settings)]
    remote = load_train_config(settings).model_dump()
    local = load_train_config(None, ["arc2"], ["data_paths=[data/arc2concept-aug-1000]", "+run_name=arc2-2x8"])
    expected = {**local.model_dump(), "data_paths": ["/workspace/data/arc2concept-aug-1000"],
                "checkpoint_path": "/workspace/runs/arc2-2x8", "progress": False}
    assert remote == expected


#: The PyTorchJob fields of Kubeflow's training operator (kubeflow.org/v1): no schema of this custom
#: resource is available offline, so its own fields are checked against these names and its pod
#: templates against Kubernetes' PodTemplateSpec.
PYTORCHJOB_SPEC = {"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"}
REPLICA_SPEC = {"replicas", "restartPolicy", "template"}
RUN_POLICY = {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit", "schedulingPolicy",
              "suspend", "managedBy"}


@pytest.mark.parametrize("nodes", [1, 3])
def test_pytorchjob_flavor_writes_a_kubeflow_pytorchjob(tmp_path, nodes):
    out = tmp_path / "jobs"
    args = [a if a != "2" else str(nodes) for a in K8S]
    assert main([*args, "--out", str(out), "--flavor", "pytorchjob", "--max-restarts", "5"]) == 0
    docs = docs_of(out / "arc2-2x8.yaml")
    assert [d["kind"] for d in docs] == ["ConfigMap", "PyTorchJob"]
    validate(docs[0])
    job = docs[1]
    assert job["apiVersion"] == "kubeflow.org/v1" and set(job["spec"]) <= PYTORCHJOB_SPEC
    assert set(job["spec"]["runPolicy"]) <= RUN_POLICY and job["spec"]["runPolicy"]["backoffLimit"] == 5
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == ({"Master": 1, "Worker": nodes - 1} if nodes > 1
                                                               else {"Master": 1})
    for replica in replicas.values():
        assert set(replica) <= REPLICA_SPEC and replica["restartPolicy"] in ("Always", "OnFailure", "Never",
                                                                             "ExitCode")
        validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                  "template": replica["template"]})
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"  # the operator finds the training container by this name
        assert {"name": "pytorchjob-port", "containerPort": 29500, "protocol": "TCP"} in container["ports"]
        line = container["command"]
        assert line[line.index("--rdzv-endpoint") + 1] == "$(MASTER_ADDR):$(MASTER_PORT)"
        assert line[line.index("--node-rank") + 1] == "$(RANK)" and line[line.index("--nnodes") + 1] == str(nodes)


def test_a_manifest_that_breaks_the_schema_is_caught():
    """The check itself: a misspelt field of a Job fails Kubernetes' strict schema."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": {"completionMod": "Indexed", "template": {"spec": {"containers": [{"name": "a", "image": "b"}],
                                                                      "restartPolicy": "Never"}}}}
    with pytest.raises(kv.utils.ValidationError, match="completionMod"):
        validate(job)


@pytest.mark.parametrize("change, message", [
    ({"--preset": "no-such-preset"}, "unknown preset 'no-such-preset'"),
    ({"+": "arch.no_such_key=1"}, "no_such_key"),
    ({"--nodes": "0"}, "--nodes: Input should be greater than or equal to 1"),
    ({"--image": "trm kaggle:latest"}, "--image: 'trm kaggle:latest' is not an image reference"),
    ({"+": "data_paths=[/data/arc2]"}, "data_paths: /data/arc2: outside /workspace"),
    ({"+": "data_paths=[../arc2]"}, "outside /workspace"),
    ({"+": "checkpoint_path=/tmp/runs/x"}, "checkpoint_path: /tmp/runs/x: outside /workspace"),
    ({"--mount": "/mnt/shared", "+": "data_paths=[/workspace/data]"}, "outside /mnt/shared"),
    ({"+": "device=cpu"}, "device=cpu with --gpus-per-node 8"),
    ({"+": "global_batch_size=100"}, "global_batch_size 100 does not split over 16 workers"),
    ({"--toleration": "gpu:Sometimes"}, "--toleration"),
    ({"--node-selector": "gpu"}, "--node-selector"),
    ({"--namespace": "Research_Team"}, "--namespace"),
    ({"--name": "9lives"}, "--name"),
    ({"--env": "NO_VALUE"}, "--env"),
    # the pod listed JOB_COMPLETION_INDEX twice and Kubernetes kept the typed one: every pod was node rank 5
    ({"--env": "JOB_COMPLETION_INDEX=5"}, "env JOB_COMPLETION_INDEX: the job files, the cluster or torchrun set it"),
    ({"--env": "PET_NODE_RANK=1"}, "env PET_NODE_RANK: the job files"),
    ({"--rdzv-port": "70000"}, "--rdzv-port"),
    ({"--export": "/elsewhere/weights"}, "--export /elsewhere/weights: outside /workspace"),
    ({"--shm-size": "99999999999999999999Ti"}, "at most 1Pi"),
    ({"--shm-size": "2Pi"}, "at most 1Pi"),
    ({"--shm-size": "0"}, "more than 0"),
])
def test_bad_k8s_input_is_one_error_line_and_nothing_is_written(tmp_path, capsys, change, message):
    argv = list(K8S)
    for flag, value in change.items():
        if flag == "+":
            argv.append(value)
        elif flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main([*argv, "--out", str(tmp_path / "jobs")]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "jobs").exists()


# ---------------------------------------------------------------------------
# Job files already there: ours, edited, or someone else's
# ---------------------------------------------------------------------------


def test_an_edited_manifest_is_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "jobs"
    manifest = out / "arc2-2x8.yaml"
    assert main([*K8S, "--out", str(out)]) == 0
    assert main([*K8S, "--out", str(out)]) == 0  # the same files again: left as they are
    assert "(1 unchanged)" in capsys.readouterr().out
    assert main([*K8S, "lr=3e-4", "--out", str(out)]) == 0  # ours and not edited: replaced
    assert "lr: 0.0003" in manifest.read_text()
    edited = manifest.read_text() + "# a note of mine\n"
    manifest.write_text(edited)
    assert main([*K8S, "lr=1e-3", "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert "was edited since it was written" in line and "--force" in line
    assert manifest.read_text() == edited  # nothing lost
    assert main([*K8S, "lr=1e-3", "--out", str(out), "--force"]) == 0
    assert "lr: 0.001" in manifest.read_text() and "a note of mine" not in manifest.read_text()
    record = json.loads((out / RECORD).read_text())
    assert list(record["files"]) == ["arc2-2x8.yaml"] and len(record["files"]["arc2-2x8.yaml"]) == 1
    # `kubectl apply -f DIR` reads every .json/.yaml/.yml file of DIR, hidden ones too: only manifests there
    assert [p.name for p in out.iterdir() if p.suffix in (".json", ".yaml", ".yml")] == ["arc2-2x8.yaml"]


def test_an_unreadable_job_record_is_written_again_and_said(tmp_path, capsys):
    """A record overwritten with garbage, the job files unchanged: the launch succeeded keeping the garbage, and
    said nothing (the next edit of the manifest could no longer be told from our own write)."""
    out = tmp_path / "jobs"
    manifest = out / "arc2-2x8.yaml"
    assert main([*K8S, "--out", str(out)]) == 0
    good = (out / RECORD).read_bytes()
    capsys.readouterr()
    (out / RECORD).write_bytes(b"\x00garbage\x1b[31m")
    assert main([*K8S, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"note: {out / RECORD} held no record of job files trm-kaggle can read: written again" in said
    assert "(1 unchanged)" in said and (out / RECORD).read_bytes() == good
    manifest.write_text(manifest.read_text() + "# a note of mine\n")
    assert "was edited since it was written" in one_error_line(capsys, main([*K8S, "lr=1e-3", "--out", str(out)]))


def test_files_we_did_not_write_and_inputs_are_never_replaced(tmp_path, capsys):
    out = tmp_path / "jobs"
    out.mkdir()
    theirs = out / "arc2-2x8.yaml"
    theirs.write_text("kind: Mine\n")
    assert main([*K8S, "--out", str(out)]) == 2
    assert "was not written by trm-kaggle" in one_error_line(capsys)
    assert theirs.read_text() == "kind: Mine\n" and not (out / RECORD).exists()
    config = out / "smoke.yaml"
    config.write_text("lr: 0.001\n")
    assert main([*K8S, "--config", str(config), "--name", "smoke", "--out", str(out), "--force"]) == 2
    assert "is an input of this command" in one_error_line(capsys)
    assert config.read_text() == "lr: 0.001\n"


# ---------------------------------------------------------------------------
# SLURM
# ---------------------------------------------------------------------------

FAKE_SBATCH = r'''#!/bin/bash
# Stand-in for sbatch: runs the batch script now, on this machine, as SLURM would on an allocation of
# --nodes hosts (every array task in turn), in the script's --chdir.
set -euo pipefail
script=$1
nodes=$(sed -n 's/^#SBATCH --nodes=\([0-9]*\)$/\1/p' "$script")
chdir=$(sed -n 's/^#SBATCH --chdir=\(.*\)$/\1/p' "$script")
last=$(sed -n 's/^#SBATCH --array=0-\([0-9]*\)$/\1/p' "$script")
for task in $(seq 0 "${last:-0}"); do
    (cd "$chdir" && env SLURM_JOB_ID=$((4200 + task)) SLURM_JOB_NODELIST="node[0-$((nodes - 1))]" \
        SLURM_JOB_NUM_NODES="$nodes" SLURM_NNODES="$nodes" ${last:+SLURM_ARRAY_TASK_ID=$task} bash "$script")
done
'''

JOB_PORTS = (200, 201)  # the scripts' port is base + SLURM_JOB_ID % 1000; the fake sbatch's ids are 4200, 4201

FAKE_SRUN = r'''#!/bin/bash
# Stand-in for srun: one task per node of the allocation, all on this machine; SLURM_NODEID tells them apart.
nodes=$SLURM_JOB_NUM_NODES
while [[ $# -gt 0 && $1 == --* ]]; do
    case $1 in --nodes=*) nodes=${1#--nodes=} ;; esac
    shift
done
pids=()
for ((i = 0; i < nodes; i++)); do
    SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 "$@" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
'''

FAKE_SCONTROL = r'''#!/bin/bash
# Stand-in for `scontrol show hostnames LIST`: every "node" is this machine.
for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); do echo 127.0.0.1; done
'''


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A directory standing for the cluster's shared filesystem, with a tiny dataset in it."""
    root = tmp_path_factory.mktemp("shared")
    build_sudoku(SudokuBuildConfig(output_dir=str(root / "data" / "sudoku4"), size=4, num_train=40, num_test=8,
                                   num_aug=1, progress=False))
    return root


@pytest.fixture
def slurm_env(tmp_path) -> dict:
    bin_dir = tmp_path / "fake-slurm"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    path = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1"}


def slurm_args(shared: Path, out: Path, *extra: str, nodes: int = 2) -> list[str]:
    return ["launch", "slurm", "--nodes", str(nodes), "--gpus-per-node", "0", "--out", str(out), "--shared-dir",
            str(shared), "--time", "0:10:00", "--rdzv-port", str(free_port_base(JOB_PORTS)), "--rdzv-timeout", "120",
            "data_paths=[data/sudoku4]", *TINY, *extra]


def test_slurm_script_has_the_allocation_and_the_torchrun_line(tmp_path, shared, capsys):
    out = tmp_path / "jobs"
    (shared / "data" / "arc2").mkdir(exist_ok=True)  # the shared directory is this machine's too: its data is here
    assert main(["launch", "slurm", "--nodes", "4", "--gpus-per-node", "8", "--out", str(out), "--shared-dir",
                 str(shared), "--time", "2-00:00:00", "--partition", "gpu", "--account", "trm", "--setup",
                 "source /opt/venv/bin/activate", "--env", "NCCL_SOCKET_IFNAME=ib0", "--preset", "arc2",
                 "data_paths=[data/arc2]", "+run_name=arc2-4x8"]) == 0
    assert f"sbatch {out / 'arc2-4x8.sbatch'}" in capsys.readouterr().out
    script = (out / "arc2-4x8.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(out / "arc2-4x8.sbatch")]).returncode == 0
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --time=2-00:00:00", "#SBATCH --partition=gpu", "#SBATCH --account=trm",
                 f"#SBATCH --chdir={shared}", "source /opt/venv/bin/activate", "export NCCL_SOCKET_IFNAME=ib0",
                 f"run_dirs=({shared}/runs/arc2-4x8)", "data_paths:", f"- {shared}/data/arc2"):
        assert line in script.splitlines() or line in script, line
    srun = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    assert srun.startswith("srun --nodes=4 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec trm-kaggle "
                           "torchrun --nnodes 4 --nproc-per-node 8 --node-rank \"$SLURM_NODEID\" --rdzv-backend c10d "
                           "--rdzv-endpoint \"$TRM_RDZV_HOST:$TRM_RDZV_PORT\" --rdzv-id \"trm-$SLURM_JOB_ID\" ")
    assert "TRM_RDZV_PORT=$((29500 + SLURM_JOB_ID % 1000))" in script.splitlines()
    assert srun.endswith("-m trm_kaggle train --config \"$TRM_RUN_DIR/run_config.yaml\"'")
    assert "#SBATCH --array" not in script


@pytest.mark.parametrize("extra, message", [
    (["--time", "tomorrow"], "--time: 'tomorrow' is not a SLURM time"),
    (["--time", "99999:99:99"], "--time: '99999:99:99' is not a SLURM time"),  # minutes and seconds are 00-59
    (["--time", "1-25:00"], "--time: '1-25:00' is not a SLURM time"),  # a day's hours are 0-23
    (["data_paths=[/elsewhere/sudoku4]"], "outside"),
    (["--nodes", "0"], "--nodes"),
    (["--setup", "echo a\necho b"], "--setup"),
    (["--partition", "gpu queue"], "--partition"),
    (["--rdzv-port", "65000"], "--rdzv-port 65000: SLURM jobs add their job id mod 1000"),
])
def test_bad_slurm_input_is_one_error_line_and_nothing_is_written(tmp_path, shared, capsys, extra, message):
    out = tmp_path / "jobs"
    argv = slurm_args(shared, out)
    if extra[0] in argv:
        argv[argv.index(extra[0]) + 1] = extra[1]
    else:
        argv += extra
    assert main(argv) == 2
    assert message in one_error_line(capsys)
    assert not out.exists()


def test_a_slurm_shared_dir_missing_here_is_refused_and_a_dataset_not_there_yet_said(tmp_path, shared, capsys):
    """The shared directory is this machine's too: a missing one was written into the script, and the nodes failed
    on it once the job had left the queue. A dataset not built there yet is said (the job may be written first)."""
    out = tmp_path / "jobs"
    argv = slurm_args(shared, out)
    argv[argv.index("--shared-dir") + 1] = str(tmp_path / "nonexistent")
    assert main(argv) == 2
    assert f"--shared-dir {tmp_path / 'nonexistent'}: no such directory here" in one_error_line(capsys)
    assert not out.exists()
    assert main(slurm_args(shared, out, "data_paths=[data/missing]")) == 0
    said = capsys.readouterr()
    assert f"note: data_paths: {shared / 'data' / 'missing'}: no dataset there yet" in said.out + said.err


@pytest.mark.slow
def test_sbatch_script_trains_to_the_end_on_two_fake_nodes(tmp_path, shared, slurm_env, capsys):
    out = tmp_path / "jobs"
    assert main(slurm_args(shared, out, "max_steps=4", "+run_name=slurm-two-nodes")) == 0
    script = out / "slurm-two-nodes.sbatch"
    done = subprocess.run(["sbatch", str(script)], env=slurm_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = shared / "runs" / "slurm-two-nodes"
    state = ckpt.load_train_state(ckpt.list_states(run)[-1])
    assert state["step"] == 4 and state["world_size"] == 2  # two nodes, one worker each, to the last step
    assert load_train_config(run / "run_config.yaml").data_paths == [str(shared / "data" / "sudoku4")]
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert steps == [1, 2, 3, 4]
    assert "rendezvous at 127.0.0.1:" in done.stdout


# ---------------------------------------------------------------------------
# Sweeps on a cluster
# ---------------------------------------------------------------------------


def test_sweep_writes_one_valid_kubernetes_job_per_run(tmp_path, capsys):
    out = tmp_path / "jobs"
    assert main(["sweep", "ablations", "--preset", "sudoku4-cpu", "data_paths=[data/sudoku4]", "--seeds", "0,1",
                 "--launcher", "k8s", "--nodes", "2", "--gpus-per-node", "1", "--image", IMAGE, "--pvc", "runs",
                 "device=auto", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8 runs on 2 nodes x 1 worker" in printed and "trm-kaggle compare /workspace/runs/sweeps/ablations" in printed
    files = sorted(out.glob("*.yaml"))
    assert len(files) == 8
    names, run_dirs, ema = set(), set(), {}
    for f in files:
        kinds = by_kind(docs_of(f))
        for doc in kinds.values():
            validate(doc, versions=KUBERNETES_VERSIONS[-1:])
        names.add(kinds["Job"]["metadata"]["name"])
        settings = yaml.safe_load(kinds["ConfigMap"]["data"]["run_config.yaml"])
        run_dirs.add(settings["checkpoint_path"])
        ema[Path(settings["checkpoint_path"]).name] = settings["ema"]
    assert len(names) == 8 and all(n.startswith("ablations-") for n in names)
    assert run_dirs == {f"/workspace/runs/sweeps/ablations/{v}_s{s}" for v in ("baseline", "no-ema", "attention",
                                                                               "act-8") for s in (0, 1)}
    assert ema["no-ema_s0"] is False and ema["baseline_s1"] == ema["attention_s0"]


def k8s_sweep_args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    grid = tmp_path / "lr.yaml"
    grid.write_text("name: lr\naxes:\n  - ['lr=1e-3', 'lr=3e-3']\nseeds: [0, 1]\n")
    return ["sweep", str(grid), "--launcher", "k8s", "--nodes", "1", "--gpus-per-node", "0", "--image", IMAGE,
            "--pvc", "runs", "data_paths=[data/sudoku4]", "device=cpu", "--out", str(out), *extra]


def test_a_sweep_written_again_with_fewer_runs_removes_the_job_files_of_the_runs_it_no_longer_has(tmp_path, capsys):
    """The earlier sweep's manifests stayed, and `kubectl apply -f DIR`, the command printed, submitted them too.
    Only the sweep's own files that still hold what was written go; another launch's, a user's and an edited one
    never do (an edited one is refused)."""
    out = tmp_path / "jobs"
    assert main(k8s_sweep_args(tmp_path, out)) == 0
    assert main(["launch", "k8s", "--nodes", "1", "--gpus-per-node", "0", "--image", IMAGE, "--pvc", "runs",
                 "data_paths=[data/sudoku4]", "device=cpu", "+run_name=solo", "--out", str(out)]) == 0
    (out / "mine.yaml").write_text("kind: Mine\n")
    capsys.readouterr()
    assert main(k8s_sweep_args(tmp_path, out, "--seeds", "0")) == 0
    printed = capsys.readouterr().out
    assert ("removed 2 files an earlier launch of this sweep wrote there, of runs it no longer has: "
            "lr-lr-1e-3-s1.yaml, lr-lr-3e-3-s1.yaml") in printed, printed
    assert sorted(p.name for p in out.glob("*.yaml")) == ["lr-lr-1e-3-s0.yaml", "lr-lr-3e-3-s0.yaml", "mine.yaml",
                                                           "solo.yaml"]
    assert sorted(json.loads((out / RECORD).read_text())["files"]) == ["lr-lr-1e-3-s0.yaml", "lr-lr-3e-3-s0.yaml",
                                                                       "solo.yaml"]
    assert main(k8s_sweep_args(tmp_path, out)) == 0
    (out / "lr-lr-1e-3-s1.yaml").write_text((out / "lr-lr-1e-3-s1.yaml").read_text() + "# a note of mine\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = one_error_line(capsys, main(k8s_sweep_args(tmp_path, out, "--seeds", "0")))
    assert "lr-lr-1e-3-s1.yaml: was written here for sweep lr (k8s), which no longer has it, and was changed" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written, nothing removed


def test_a_garbage_or_hostile_job_record_never_touches_a_file_outside_out(tmp_path, capsys):
    """A record is read from the folder: its names are only ever names of files this command writes there."""
    out, outside = tmp_path / "jobs", tmp_path / "outside.yaml"
    outside.write_text("kind: Theirs\n")
    out.mkdir()
    (out / RECORD).write_text("{garbage")
    assert main(k8s_sweep_args(tmp_path, out)) == 0
    theirs = hashlib.sha256(outside.read_bytes()).hexdigest()
    record = json.loads((out / RECORD).read_text())
    for name in ("../outside.yaml", str(outside), "sub/../../outside.yaml"):
        record["files"][name], record["groups"][name] = [theirs], "sweep lr (k8s)"
    (out / RECORD).write_text(json.dumps(record))
    assert main(k8s_sweep_args(tmp_path, out, "--seeds", "0")) == 0
    assert outside.read_text() == "kind: Theirs\n"
    assert sorted(p.name for p in out.glob("*.yaml")) == ["lr-lr-1e-3-s0.yaml", "lr-lr-3e-3-s0.yaml"]


def test_cluster_options_need_their_launcher(tmp_path, capsys):
    base = ["sweep", "ablations", "data_paths=[data/sudoku4]", "--sweep-dir", str(tmp_path / "s")]
    assert main([*base, "--image", IMAGE]) == 2
    assert "--image: a cluster option; add --launcher" in one_error_line(capsys)
    assert main([*base, "--launcher", "k8s", "--nodes", "1", "--gpus-per-node", "1", "--out", str(tmp_path / "j"),
                 "--image", IMAGE, "--pvc", "x", "--time", "10"]) == 2
    assert "--time: not an option of the k8s launcher" in one_error_line(capsys)
    assert not (tmp_path / "s").exists() and not (tmp_path / "j").exists()


@pytest.mark.slow
def test_sweep_as_a_slurm_job_array_lands_where_compare_reads_it_and_reruns_skip_done_runs(tmp_path, shared,
                                                                                           slurm_env, capsys):
    grid = tmp_path / "lr.yaml"
    grid.write_text("name: lr\naxes:\n  - ['lr=1e-3', 'lr=3e-3']\n")
    out = tmp_path / "jobs"
    args = ["sweep", str(grid), "--launcher", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--out", str(out),
            "--shared-dir", str(shared), "--rdzv-port", str(free_port_base(JOB_PORTS)), "--rdzv-timeout", "120",
            "data_paths=[data/sudoku4]", *[o for o in TINY if not o.startswith("seed=")], "max_steps=3"]
    assert main(args) == 0  # (a sweep sets each run's seed itself)
    script = out / "lr.sbatch"
    assert "#SBATCH --array=0-1" in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    first = subprocess.run(["sbatch", str(script)], env=slurm_env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    sweep_dir = shared / "runs" / "sweeps" / "lr"
    runs = sorted(p.name for p in sweep_dir.iterdir())
    assert runs == ["lr=1e-3_s0", "lr=3e-3_s0"]
    metrics = {r: (sweep_dir / r / "metrics.jsonl").read_bytes() for r in runs}
    table = write_comparison([sweep_dir], tmp_path / "compare")["markdown_text"]
    assert "lr=1e-3_s0" in table and "lr=3e-3_s0" in table
    again = subprocess.run(["sbatch", str(script)], env=slurm_env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("already done at step 3") == 2  # each array task finds its run done
    assert {r: (sweep_dir / r / "metrics.jsonl").read_bytes() for r in runs} == metrics


def slurm_sweep_args(shared: Path, out: Path, sweep_dir: str, *extra: str) -> list[str]:
    """`sweep` of a 2-run grid (lr.yaml, written next to `out`) as a SLURM job array on the `shared` directory."""
    grid = out.parent / "lr.yaml"
    grid.write_text("name: lr\naxes:\n  - ['lr=1e-3', 'lr=3e-3']\n")
    return ["sweep", str(grid), "--sweep-dir", sweep_dir, "--launcher", "slurm", "--nodes", "1", "--gpus-per-node",
            "0", "--out", str(out), "--shared-dir", str(shared), "data_paths=[data/sudoku4]",
            *[o for o in TINY if not o.startswith("seed=")], "max_steps=3", *extra]


def test_the_printed_submit_and_compare_commands_paste_as_one_command_each(tmp_path, shared, capsys):
    """`submit: sbatch L/o $(id)/ok.sbatch` ran `id` and split the path when pasted: each path is quoted."""
    out = tmp_path / "o $(id)"
    assert main(slurm_sweep_args(shared, out, "runs/a b$(id)")) == 0
    said = {ln.split(": ", 1)[0]: ln.split(": ", 1)[1] for ln in capsys.readouterr().out.splitlines() if ": " in ln}
    assert shlex.split(said["submit"]) == ["sbatch", str(out / "lr.sbatch")]
    compare = shlex.split(said["compare them there"].split(";")[0])
    assert compare[:2] == ["trm-kaggle", "compare"] and compare[2].endswith("runs/a b$(id)") and len(compare) == 3


def test_a_slurm_sweep_never_trains_through_a_link_off_the_shared_volume(tmp_path, shared, capsys):
    """A run folder planted as a symbolic link in the shared sweep folder, or a --sweep-dir through a link to
    elsewhere, passed (the paths were checked as text): the array task trained into the link's target, off the
    shared volume. Links are followed here, where the shared directory is this machine's too."""
    victim, out = tmp_path / "victim", tmp_path / "jobs"
    victim.mkdir()
    sweeps = shared / "runs" / "sweeps" / f"planted-{tmp_path.name}"
    (sweeps / "links").mkdir(parents=True)
    (sweeps / "links" / "lr=1e-3_s0").symlink_to(victim)
    (sweeps / "inside").mkdir()  # a link to a folder on the volume is no run folder either, as for a local sweep
    (sweeps / "inside" / "lr=3e-3_s0").symlink_to(sweeps / "links")
    (sweeps / "away").symlink_to(victim)
    for sweep_dir, said in ((sweeps / "links", "run lr=1e-3_s0: run folder"), (sweeps / "inside", "symbolic link"),
                            (sweeps / "away" / "x", "--sweep-dir")):
        line = one_error_line(capsys, main(slurm_sweep_args(shared, out, str(sweep_dir.relative_to(shared)))))
        assert said in line and ("symbolic link" in line or "outside" in line), line
    assert main(slurm_args(shared, out, f"checkpoint_path={sweeps.relative_to(shared)}/away/one")) == 2
    assert "leads through a symbolic link to" in one_error_line(capsys)
    assert not out.exists() and not any(victim.iterdir())


def test_a_slurm_sweep_over_runs_trained_with_other_settings_is_refused(tmp_path, shared, capsys):
    """A local sweep refuses a run started with other settings; the job array was written, and each task replaced
    its run's run_config.yaml before `train` refused the run's states."""
    from trm_kaggle.launch import cluster_config, launch_sweep
    from trm_kaggle.experiments import load_grid

    out, sweep_dir = tmp_path / "jobs", f"runs/sweeps/retrained-{tmp_path.name}"
    args = slurm_sweep_args(shared, out, sweep_dir)
    cluster = cluster_config("slurm", {"nodes": 1, "gpus_per_node": 0, "out": str(out), "shared_dir": str(shared)})
    overrides = [a for a in args[args.index("data_paths=[data/sudoku4]"):]]
    job = launch_sweep(cluster, load_grid(args[1]), sweep_dir=sweep_dir, overrides=overrides).jobs[0]
    run = Path(job.run_dir)  # as a task leaves it: its settings and a train state
    run.mkdir(parents=True)
    (run / "config.json").write_text(job.settings.model_dump_json())
    (run / "state_step00000003.pt").write_bytes(b"state")
    script = (out / "lr.sbatch").read_bytes()
    line = one_error_line(capsys, main([*args, "arch.hidden_size=64", "weight_decay=0.2"]))
    assert f"run {job.run}: {run} was trained with other settings (arch.hidden_size: " in line, line
    assert (out / "lr.sbatch").read_bytes() == script
    assert main([*args, "max_steps=6"]) == 0  # what a resumed run may change
    assert "max_steps: 6" in (out / "lr.sbatch").read_text()


def test_an_env_name_given_twice_is_refused():
    """`--env A=1 --env A=2` wrote both; which one a pod or a batch script keeps is the cluster's choice."""
    from trm_kaggle.config.cluster import ClusterConfig

    with pytest.raises(ValueError, match="env A is given twice: give it once"):
        ClusterConfig.model_validate({"launcher": "k8s", "k8s": {"image": "i", "pvc": "p"}, "env": ["A=1", "A=2"]})


def test_a_node_selector_key_given_twice_is_refused(tmp_path, capsys):
    """`--node-selector kubernetes.io/arch=amd64 --node-selector kubernetes.io/arch=arm64` wrote arm64 alone, exit
    0: a manifest's nodeSelector holds one value per label."""
    argv = [*K8S, "--node-selector", "kubernetes.io/arch=amd64", "--node-selector", "kubernetes.io/arch=arm64",
            "--out", str(tmp_path / "jobs")]
    assert main(argv) == 2
    assert "node selector kubernetes.io/arch is given twice" in one_error_line(capsys)
    assert not (tmp_path / "jobs").exists()


def test_a_toleration_given_twice_is_refused(tmp_path, capsys):
    """`--toleration gpu:NoSchedule` twice wrote the same toleration twice into the manifest, exit 0."""
    argv = [*K8S, "--toleration", "gpu:NoSchedule", "--toleration", "gpu:NoSchedule", "--out", str(tmp_path / "jobs")]
    assert main(argv) == 2
    assert "toleration 'gpu:NoSchedule' is given twice" in one_error_line(capsys)
    assert not (tmp_path / "jobs").exists()


def kubernetes_expanded(value: str, env: dict[str, str]) -> str:
    """An env value as Kubernetes gives it to the container: `$$` is `$`, `$(NAME)` an earlier variable's value."""
    import re

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), value)


def test_an_env_value_reaches_the_worker_as_given(tmp_path):
    """`--env 'A=$(JOB_COMPLETION_INDEX)x' --env 'B=$$y'` were written verbatim: Kubernetes expands the first to
    0x or 1x and reads the second as `$y` (the SLURM script exports both as given)."""
    given = {"A": "$(JOB_COMPLETION_INDEX)x", "B": "$$y", "C": "plain $ sign"}
    out = tmp_path / "jobs"
    assert main([*K8S, "--out", str(out), *[f"--env={k}={v}" for k, v in given.items()]]) == 0
    container = by_kind(docs_of(out / "arc2-2x8.yaml"))["Job"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert {k: kubernetes_expanded(env[k], {"JOB_COMPLETION_INDEX": "0"}) for k in given} == given


@pytest.mark.parametrize("name", ["UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS"])
def test_an_env_name_bash_holds_read_only_is_refused(name):
    """`--env UID=5` was written as `export UID='5'`: under `set -e` the job ended at that line on the cluster."""
    from trm_kaggle.config.cluster import ClusterConfig

    with pytest.raises(ValueError, match=f"env {name}: bash holds it read-only"):
        ClusterConfig.model_validate({"launcher": "k8s", "k8s": {"image": "i", "pvc": "p"}, "env": [f"{name}=5"]})


@pytest.mark.parametrize("where", ["/dev/trm-probe", "{tmp}/f/sub", "/proc/x", "/"])
def test_the_launch_library_checks_its_out_folder_as_the_command_does(tmp_path, where):
    """`launch_training(ClusterConfig(out="/dev/x"))` wrote job files into /dev (and into / as root); a file on the
    path was pathlib's NotADirectoryError."""
    from trm_kaggle.config.cluster import ClusterConfig
    from trm_kaggle.launch.plan import launch_training

    (tmp_path / "f").write_text("a file")
    out = where.format(tmp=tmp_path)
    cluster = ClusterConfig(launcher="k8s", nodes=1, gpus_per_node=1, out=out, k8s={"image": "i", "pvc": "p"})
    with pytest.raises(TRMError, match=r"^--out "):
        launch_training(cluster, overrides=["data_paths=[/workspace/d]"])
    assert not os.path.lexists("/dev/trm-probe") and not os.path.lexists("/trm-d.yaml")


@pytest.mark.parametrize("folder, said", [("./-dash", "./-dash"), ("ln\nx", "ln\nx")])
def test_a_printed_submit_command_names_its_out_folder_when_pasted(tmp_path, shared, capsys, monkeypatch, folder,
                                                                   said):
    """`--out ./-dash` printed `sbatch -dash/r1.sbatch` (sbatch read -d, a dependency, then the script from stdin),
    and `--out $'ln\\nx'` printed `sbatch 'ln\\nx/r1.sbatch'`, a backslash and an n when pasted."""
    from test_wording import pasted

    monkeypatch.chdir(tmp_path)
    assert main(["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--out", folder, "--shared-dir",
                 str(shared), "data_paths=[data/sudoku4]", *TINY, "+run_name=r1"]) == 0
    submit = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("submit: "))
    assert pasted(submit.removeprefix("submit: ")) == ["sbatch", f"{said}/r1.sbatch"]
    assert (tmp_path / folder / "r1.sbatch").is_file()
    # kubectl's -f names a file, or a folder of several (a sweep's)
    for args, named in (([*K8S, "--out", f"{folder}/one"], f"{said}/one/arc2-2x8.yaml"),
                        (["sweep", "ablations", "--preset", "sudoku4-cpu", "data_paths=[data/sudoku4]", "--launcher",
                          "k8s", "--nodes", "1", "--gpus-per-node", "1", "--image", IMAGE, "--pvc", "runs", "device=auto", "--out",
                          f"{folder}/many"], f"{said}/many")):
        assert main(args) == 0
        submit = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("submit: "))
        assert pasted(submit.removeprefix("submit: ")) == ["kubectl", "apply", "-f", named]


def test_every_line_launch_and_a_cluster_sweep_print_shows_a_typed_out_folder_escaped(tmp_path, shared, capsys,
                                                                                     monkeypatch):
    """`--out $'./-o ut\\n\\x1b[31mx'` printed `wrote 1 file to ./-o ut` and a second line starting with the raw escape
    sequence, which coloured the terminal: each line says the path escaped, and the submit line still pastes."""
    from test_wording import pasted

    monkeypatch.chdir(tmp_path)
    folder = "./-o ut $(id)\n\x1b[31mx\tq"
    (tmp_path / folder).mkdir()
    runs = [(["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--out", f"{folder}/s", "--shared-dir",
              str(shared), "data_paths=[data/sudoku4]", *TINY, "+run_name=r1"], "sbatch", f"{folder}/s/r1.sbatch"),
            ([*K8S, "--out", f"{folder}/k"], "kubectl", f"{folder}/k/arc2-2x8.yaml"),
            (slurm_sweep_args(shared, tmp_path / folder / "w", "runs/w"), "sbatch", str(tmp_path / folder / "w" / "lr.sbatch"))]
    for args, tool, named in runs:
        assert main(args) == 0
        lines = capsys.readouterr().out.splitlines()
        assert all(line.isprintable() for line in lines), lines
        assert any(line.startswith("wrote ") and "\\n\\x1b[31mx\\tq" in line for line in lines), lines
        submit = next(ln for ln in lines if ln.startswith("submit: ")).removeprefix("submit: ")
        assert pasted(submit)[0] == tool and pasted(submit)[-1] == named
