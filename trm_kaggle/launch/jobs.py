"""What every job file is made from: a training's settings, checked for the cluster and placed on the
directory every node sees, the job's name, and the torchrun line that starts it on each node.

On the cluster each node runs `trm-kaggle torchrun ... -m trm_kaggle train --config <settings>`: rank 0
writes the run directory on the shared volume, a failed worker group restarts from the newest train
state, and a job started again resumes its run, or finds it done and trains nothing
(`trm_kaggle.train.loop`).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass

import pydantic

from trm_kaggle.config import ClusterConfig, TrainConfig, validation_line
from trm_kaggle.errors import TRMError
from trm_kaggle.experiments import RUN_CONFIG
from trm_kaggle.train import default_run_dir, dump_config
from trm_kaggle.wording import count

SETTINGS_FILE = RUN_CONFIG  # a run's resolved settings, as a sweep's runs have them
NAME_LIMIT = 52  # Kubernetes: pod hostnames `<job>-<index>` stay within 63 characters


@dataclass
class ClusterJob:
    """One training on the cluster: its job name, its run's name and its settings (paths on the volume)."""

    name: str
    run: str
    settings: TrainConfig

    @property
    def run_dir(self) -> str:
        return self.settings.checkpoint_path

    def settings_text(self) -> str:
        return dump_config(self.settings)


def torchrun_line(cluster: ClusterConfig, *, endpoint: str, node_rank: str, rdzv_id: str, settings: str,
                  export: str | None = None) -> list[str]:
    """The command every node runs: torchrun's elastic launch of `trm-kaggle train` (see `trm_kaggle.launch.torchrun`).

    c10d assigns the ranks at the rendezvous (torch notes that it ignores --node-rank then); the node's
    index is passed all the same, so that each launcher's log says which node it is."""
    return ["trm-kaggle", "torchrun", "--nnodes", str(cluster.nodes), "--nproc-per-node", str(cluster.procs_per_node),
            "--node-rank", node_rank, "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
            "--rdzv-conf", f"join_timeout={cluster.rdzv_timeout}", "--max-restarts", str(cluster.max_restarts),
            "-m", "trm_kaggle", "train", "--config", settings, *(["--export", export] if export else [])]


# ---------------------------------------------------------------------------
# Settings on the cluster
# ---------------------------------------------------------------------------


def on_volume(path: str, volume: str, what: str, flag: str) -> str:
    """`path` as the nodes see it: absolute, inside `volume` (a relative path is taken from the volume)."""
    placed = posixpath.normpath(posixpath.join(volume, path))
    if placed != volume and not placed.startswith(volume.rstrip("/") + "/"):
        raise TRMError(f"{what} {path}: outside {volume}, the directory every node sees ({flag}); put the data "
                       f"and the runs inside it (a relative path is taken from it)")
    return placed


def cluster_settings(cfg: TrainConfig, cluster: ClusterConfig, what: str = "") -> TrainConfig:
    """`cfg` checked for the cluster and placed on its shared volume: every path absolute inside it."""
    where = f"{what}: " if what else ""
    flag = "--mount" if cluster.launcher == "k8s" else "--shared-dir"
    volume = cluster.volume
    if not cfg.data_paths:
        raise TRMError(f"{where}no data: set data_paths=[DIR] (a dataset on the shared volume, {volume})")
    if cfg.device in ("mps", "xla"):
        raise TRMError(f"{where}device={cfg.device}: cluster jobs run torchrun workers on CUDA or CPU nodes "
                       "(TPU pods: trm-kaggle train --xla-launch, see docs/tpu.md)")
    if cluster.gpus_per_node and cfg.device == "cpu":
        raise TRMError(f"{where}device=cpu with --gpus-per-node {cluster.gpus_per_node}: drop device=cpu, or ask "
                       "for --gpus-per-node 0")
    if not cluster.gpus_per_node and cfg.device == "cuda":
        raise TRMError(f"{where}device=cuda with --gpus-per-node 0: ask for GPUs, or use device=cpu")
    world = cluster.world_size
    if cfg.global_batch_size % world:
        raise TRMError(f"{where}global_batch_size {cfg.global_batch_size} does not split over {world} workers "
                       f"({count(cluster.nodes, 'node')} x {cluster.procs_per_node}): every worker takes the same share")
    if cfg.micro_batch_size and (cfg.global_batch_size // world) % cfg.micro_batch_size:
        raise TRMError(f"{where}micro_batch_size {cfg.micro_batch_size} does not divide the per-worker batch "
                       f"{cfg.global_batch_size // world}")
    placed = {
        "data_paths": [on_volume(p, volume, "data_paths:", flag) for p in cfg.data_paths],
        "data_paths_test": [on_volume(p, volume, "data_paths_test:", flag) for p in cfg.data_paths_test],
        "checkpoint_path": on_volume(str(default_run_dir(cfg)), volume, "checkpoint_path:", flag),
        "load_checkpoint": (on_volume(cfg.load_checkpoint, volume, "load_checkpoint:", flag)
                            if cfg.load_checkpoint else None),
        "progress": False,  # a bar redrawn in a log file is noise; metrics.jsonl and the log lines remain
    }
    try:
        return TrainConfig.model_validate({**cfg.model_dump(), **placed})
    except pydantic.ValidationError as err:
        raise TRMError(f"{where}{validation_line(err)}") from None


def job_name(text: str, limit: int = NAME_LIMIT) -> str:
    """A Kubernetes-safe job name for `text` (lowercase letters, digits, '-'; a letter first); a name cut to
    `limit` ends with a hash of the whole text, so that distinct long texts stay distinct."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not name[:1].isalpha():
        name = ("trm-" + name).rstrip("-")
    if len(name) > limit:
        name = f"{name[:limit - 7].rstrip('-')}-{hashlib.sha256(text.encode()).hexdigest()[:6]}"
    return name
