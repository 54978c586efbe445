"""Beyond one machine: the configs of job files for Kubernetes and SLURM (`trm-kaggle launch`, `sweep
--launcher`). The training's own settings stay a TrainConfig, resolved as for a local run."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from trm_kaggle.config.common import _Config

#: A job's name: a DNS-1035 label short enough for Kubernetes' pod hostnames (`<name>-<index>`) and
#: the suffixes a sweep adds; SLURM takes it as it is.
JOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
#: An image reference: [host[:port]/]path[:tag][@digest], the distribution grammar's characters (no spaces).
IMAGE_PATTERN = (r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?/)?"
                 r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
                 r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"
_QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                   "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
MAX_SHM_BYTES = 2**50  # 1Pi: far above any node's memory, so any real /dev/shm fits
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# ASCII digits: `\d` takes any script's, which sbatch refuses once the job is queued
#: SLURM's wall-time forms; minutes and seconds after a colon are 00-59 and a day's hours 0-23 (99:99 was taken)
_SLURM_TIME = r"^([0-9]+-([01]?[0-9]|2[0-3])(:[0-5][0-9]){0,2}|[0-9]+(:[0-5][0-9]){0,2})$"


def _matching(value: Optional[str], pattern: str, expected: str, limit: int = 253) -> Optional[str]:
    """`value` when it matches `pattern` (and has at most `limit` characters), else a readable ValueError."""
    if value is not None and (len(value) > limit or not re.fullmatch(pattern, value)):
        raise ValueError(f"{value[:80]!r} is not {expected}")
    return value


#: The folders of a container's own system: a claim mounted on (or inside) one hides what the job runs on.
_SYSTEM_FOLDERS = frozenset({"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin",
                             "/sys", "/usr"})


def _absolute_posix(path: str, what: str) -> str:
    """An absolute POSIX path without white space or `..` (it ends up in job files on other machines)."""
    import posixpath

    if not path.startswith("/") or any(c.isspace() for c in path) or ".." in path.split("/"):
        raise ValueError(f"{what} must be an absolute path without white space or '..': {path!r}")
    return posixpath.normpath(path)


def _one_line(items: list[str], what: str) -> list[str]:
    for item in items:
        if "\n" in item or "\r" in item or "\x00" in item:
            raise ValueError(f"{what} must be one line each: {item[:60]!r}")
    return items


class K8sOptions(_Config):
    """Kubernetes options of `trm-kaggle launch k8s` and `sweep --launcher k8s`."""

    image: str = Field(description="the container image (built from this repository's Dockerfile)")
    pvc: str = Field(description="PersistentVolumeClaim holding the data and the runs, shared by every pod")
    mount: str = Field("/workspace", description="where the claim is mounted: the working directory; data and runs "
                                                 "must lie inside")
    namespace: str = Field("default", description="namespace of every object")
    flavor: Literal["job", "pytorchjob"] = Field("job", description="job: an Indexed Job + headless Service; "
                                                                    "pytorchjob: a Kubeflow PyTorchJob")
    node_selector: list[str] = Field(default_factory=list, description="KEY=VALUE node labels the pods need")
    tolerations: list[str] = Field(default_factory=list, description="KEY[=VALUE][:EFFECT] taints the pods "
                                                                     "tolerate")
    shm_size: str = Field("16Gi", description="size of the memory-backed /dev/shm (DataLoader workers and NCCL "
                                              "need more than the default 64 MB)")

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return _matching(v, IMAGE_PATTERN, "an image reference ([REGISTRY/]NAME[:TAG][@sha256:DIGEST]: a lowercase "
                                           "name, no spaces)", limit=512)

    @field_validator("pvc")
    @classmethod
    def _pvc(cls, v: str) -> str:
        return _matching(v, _DNS_SUBDOMAIN, "a claim name (lowercase letters, digits, '-' and '.')")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return _matching(v, _DNS_LABEL, "a namespace (lowercase letters, digits and '-', at most 63)", limit=63)

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str) -> str:
        v = _matching(v, _QUANTITY, "a Kubernetes quantity such as 16Gi")
        # the pattern takes any count of digits: a size no node has would only fail at scheduling
        number, unit = re.fullmatch(r"([0-9.]+)(\D*)", v).groups()
        if not 0 < float(number) * _QUANTITY_UNITS[unit] <= MAX_SHM_BYTES:
            raise ValueError(f"{v[:80]!r}: the size must be more than 0 and at most 1Pi")
        return v

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        v = _absolute_posix(v, "mount")
        if not v.strip("/"):  # normpath keeps a leading "//", which is the root too
            raise ValueError("mount must not be /")
        top = "/" + v.strip("/").split("/")[0]
        if top in _SYSTEM_FOLDERS or v.rstrip("/") == "/var":
            raise ValueError(f"mount must not be {v!r}: the claim would hide the container's own {top} (its "
                             "programs, devices or settings); mount it at a folder of its own, e.g. /workspace")
        return v

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, items: list[str]) -> list[str]:
        seen = set()
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not re.fullmatch(_LABEL_KEY, key) or not re.fullmatch(_LABEL_VALUE, value):
                raise ValueError(f"node selector {item!r}: expected KEY=VALUE with a label key and value")
            if key in seen:  # a manifest's nodeSelector is a mapping: the first value was dropped without a word
                raise ValueError(f"node selector {key} is given twice: a node has one value per label; give it once")
            seen.add(key)
        return items

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, items: list[str]) -> list[str]:
        seen = set()
        for item in items:
            if item in seen:  # the manifest listed it twice: a slip, as an env name or a selector key twice is
                raise ValueError(f"toleration {item!r} is given twice; give it once")
            seen.add(item)
            head, _, effect = item.rpartition(":") if ":" in item else (item, "", "")
            key, _, value = head.partition("=")
            if (effect and effect not in _TAINT_EFFECTS) or not re.fullmatch(_LABEL_KEY, key) \
                    or not re.fullmatch(_LABEL_VALUE, value):
                raise ValueError(f"toleration {item!r}: expected KEY[=VALUE][:EFFECT], EFFECT one of "
                                 f"{', '.join(_TAINT_EFFECTS)}")
        return items


class SlurmOptions(_Config):
    """SLURM options of `trm-kaggle launch slurm` and `sweep --launcher slurm`."""

    shared_dir: str = Field(description="a directory every node sees (the job's working directory); data and runs "
                                        "must lie inside")
    time: str = Field("24:00:00", description="wall-time limit (#SBATCH --time)")
    partition: Optional[str] = Field(None, description="partition (#SBATCH --partition)")
    account: Optional[str] = Field(None, description="account (#SBATCH --account)")
    cpus_per_task: Optional[int] = Field(None, ge=1, le=4096, description="CPU cores per node (#SBATCH "
                                                                          "--cpus-per-task)")
    setup: list[str] = Field(default_factory=list, description="shell lines run before training on every node "
                                                               "(module load ..., source venv/bin/activate)")

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        return _matching(v, _SLURM_TIME, "a SLURM time (MINUTES, HH:MM:SS or DAYS-HH[:MM[:SS]])")

    @field_validator("partition", "account")
    @classmethod
    def _slurm_word(cls, v: Optional[str]) -> Optional[str]:
        return _matching(v, r"[A-Za-z0-9_.,-]+", "a SLURM name (letters, digits, '_', '.', ',' and '-')")

    @field_validator("shared_dir")
    @classmethod
    def _shared(cls, v: str) -> str:
        if '"' in v or "\\" in v:  # it is written into `#SBATCH --chdir=`, which sbatch reads with its own quoting
            raise ValueError(f"shared_dir must hold no '\"' or '\\': {v!r}")
        return _absolute_posix(v, "shared_dir")

    @field_validator("setup")
    @classmethod
    def _setup(cls, items: list[str]) -> list[str]:
        return _one_line(items, "setup lines")


#: Environment names the job files, the cluster (Kubernetes, the training operator, SLURM) or torchrun set for
#: each node and worker: an `env` entry of the same name would replace or shadow them.
LAUNCH_ENV = frozenset({"JOB_COMPLETION_INDEX", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
                        "NODE_RANK", "TORCHELASTIC_RUN_ID", "TRM_RUN_DIR", "TRM_RDZV_HOST", "TRM_RDZV_PORT"})
LAUNCH_ENV_PREFIXES = ("PET_", "SLURM_")
#: Names bash holds read-only: the SLURM script's `export UID=5` under `set -e` ended the job at its first line.
READONLY_SHELL_ENV = frozenset({"UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_VERSINFO"})


class ClusterConfig(_Config):
    """Where and how a training runs on a cluster (`trm-kaggle launch k8s|slurm`, `sweep --launcher`): the
    training's own settings are a TrainConfig, resolved as for a local run."""

    launcher: Literal["k8s", "slurm"]
    nodes: int = Field(ge=1, le=10_000, description="machines; one torchrun launcher each")
    gpus_per_node: int = Field(ge=0, le=64, description="GPUs per node, one worker each (0: CPU nodes, one worker)")
    out: str = Field(description="directory the job files are written to (nothing is submitted)")
    name: Optional[str] = Field(None, description="job name (default: from the run's name, or the sweep grid's)")
    max_restarts: int = Field(3, ge=0, le=1000, description="worker-group restarts torchrun makes after a failure "
                                                            "(Kubernetes: also the Job's backoffLimit)")
    rdzv_port: int = Field(29500, ge=1, le=65535, description="TCP port of the rendezvous on the first node")
    rdzv_timeout: int = Field(600, ge=1, le=86400, description="seconds the nodes wait for each other at the "
                                                               "rendezvous (torchrun's join_timeout)")
    env: list[str] = Field(default_factory=list, description="KEY=VALUE environment of every worker (e.g. "
                                                             "NCCL_SOCKET_IFNAME=eth0)")
    export: Optional[str] = Field(None, description="export inference weights here when training ends (inside the "
                                                    "shared volume)")
    force: bool = Field(False, description="replace job files edited since they were written")
    k8s: Optional[K8sOptions] = None
    slurm: Optional[SlurmOptions] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: Optional[str]) -> Optional[str]:
        return _matching(v, JOB_NAME_PATTERN, "a job name (a lowercase letter, then up to 39 lowercase letters, "
                                              "digits and '-', not ending in '-')", limit=40)

    @field_validator("env")
    @classmethod
    def _env(cls, items: list[str]) -> list[str]:
        seen = set()
        for item in _one_line(items, "env"):
            key, sep, _ = item.partition("=")
            if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"env {item!r}: expected KEY=VALUE")
            if key in LAUNCH_ENV or key.startswith(LAUNCH_ENV_PREFIXES):
                # the pod listed the name twice and Kubernetes kept ours: every pod was node 5
                raise ValueError(f"env {key}: the job files, the cluster or torchrun set it for each node (its "
                                 "rank and rendezvous); leave it out")
            if key in READONLY_SHELL_ENV:
                raise ValueError(f"env {key}: bash holds it read-only, so the batch script's export of it would "
                                 "end the job; leave it out")
            if key in seen:  # which one a pod or a batch script keeps is the cluster's choice: say one
                raise ValueError(f"env {key} is given twice: give it once")
            seen.add(key)
        return items

    @model_validator(mode="after")
    def _options_of_the_launcher(self):
        if self.launcher == "k8s" and (self.k8s is None or self.slurm is not None):
            raise ValueError("launcher k8s takes the Kubernetes options (image, pvc, ...) and no SLURM ones")
        if self.launcher == "slurm" and (self.slurm is None or self.k8s is not None):
            raise ValueError("launcher slurm takes the SLURM options (shared_dir, time, ...) and no Kubernetes ones")
        return self

    @property
    def procs_per_node(self) -> int:
        return max(1, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def volume(self) -> str:
        """The directory every node sees, where data and runs lie."""
        return self.k8s.mount if self.k8s is not None else self.slurm.shared_dir
