"""`trm-kaggle torchrun` and `launch`: training beyond one machine, torch's elastic launcher checked before
its rendezvous, and Kubernetes or SLURM job files (written, never submitted). `sweep --launcher` shares the
cluster options."""

from __future__ import annotations

import argparse

from trm_kaggle.cli.common import common_flags, say_defaults
from trm_kaggle.cli.train import train_settings


def add_torchrun(sub) -> None:
    p = sub.add_parser("torchrun", help="torch's elastic launcher (torchrun), checked first, failures in one line",
                       description="Run torchrun with torchrun's own arguments (`torchrun --help` lists them), e.g. "
                                   "trm-kaggle torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d "
                                   "--rdzv-endpoint HOST:PORT --max-restarts 3 -m trm_kaggle train --preset arc2. "
                                   "Checked before the rendezvous: the endpoint has a port, the node counts and the "
                                   "join timeout make sense, and `train`'s settings resolve. A rendezvous that times "
                                   "out (--rdzv-conf join_timeout=SECONDS, torch's default 600) or a worker group "
                                   "that fails past --max-restarts ends with one error line.")
    p.add_argument("torchrun_args", nargs=argparse.REMAINDER, metavar="TORCHRUN_ARGS",
                   help="torchrun's options, then the module or script and its arguments")
    p.set_defaults(func=cmd_torchrun)


def cmd_torchrun(args: argparse.Namespace) -> int:
    from trm_kaggle.launch import torchrun

    targs = torchrun.parse(args.torchrun_args)
    train_args = torchrun.trained_module_args(targs)
    if train_args is not None:  # bad settings: one line on every node now, not one per worker after the rendezvous
        train_settings(train_args)
    torchrun.launch(targs)
    return 0


def cluster_options(p: argparse.ArgumentParser, launcher: str | None) -> None:
    """The options of `launch k8s` / `launch slurm` (launcher None: both sets, for `sweep --launcher`)."""
    from trm_kaggle.config import ClusterConfig, K8sOptions, SlurmOptions

    def default(model, name: str) -> str:
        return f"(default: {model.model_fields[name].default})"

    one = launcher is not None  # `launch`: nodes, GPUs and --out are required
    g = p.add_argument_group("cluster")
    g.add_argument("--nodes", type=int, required=one, default=None, help="machines, one torchrun launcher each"
                   + ("" if one else " (required with --launcher)"))
    g.add_argument("--gpus-per-node", dest="gpus_per_node", type=int, required=one, default=None,
                   help="GPUs per node, one worker each; 0: CPU nodes, one worker each"
                   + ("" if one else " (required with --launcher)"))
    g.add_argument("--out", required=one, default=None, help="directory for the job files; nothing is submitted"
                   + ("" if one else " (required with --launcher)"))
    g.add_argument("--name", default=None, help="job name (default: from the run's name, or the grid's)")
    g.add_argument("--max-restarts", dest="max_restarts", type=int, default=None,
                   help="worker-group restarts torchrun makes after a failure; Kubernetes: also the Job's "
                        f"backoffLimit {default(ClusterConfig, 'max_restarts')}")
    g.add_argument("--rdzv-port", dest="rdzv_port", type=int, default=None,
                   help=f"port of the rendezvous on the first node {default(ClusterConfig, 'rdzv_port')}")
    g.add_argument("--rdzv-timeout", dest="rdzv_timeout", type=int, default=None,
                   help=f"seconds the nodes wait for each other {default(ClusterConfig, 'rdzv_timeout')}")
    g.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of every worker, repeatable (e.g. NCCL_SOCKET_IFNAME=eth0) (default: none)")
    if launcher is not None:
        g.add_argument("--export", default=None, metavar="DIR",
                       help="export inference weights here when training ends, on the shared volume (default: none)")
    g.add_argument("--force", action="store_true", help="replace job files edited since they were written")
    if launcher in ("k8s", None):
        k = p.add_argument_group("kubernetes")
        k.add_argument("--image", required=launcher == "k8s", default=None,
                       help="container image built from the Dockerfile" + ("" if one else " (required with "
                                                                            "--launcher k8s)"))
        k.add_argument("--pvc", required=launcher == "k8s", default=None,
                       help="PersistentVolumeClaim with the data and the runs, mounted in every pod"
                       + ("" if one else " (required with --launcher k8s)"))
        k.add_argument("--mount", default=None, help="where the claim is mounted (the pods' working directory); "
                                                     f"data and runs lie inside {default(K8sOptions, 'mount')}")
        k.add_argument("--namespace", default=None, help=f"namespace {default(K8sOptions, 'namespace')}")
        k.add_argument("--flavor", choices=["job", "pytorchjob"], default=None,
                       help="job: Indexed Job + headless Service; pytorchjob: Kubeflow PyTorchJob "
                            f"{default(K8sOptions, 'flavor')}")
        k.add_argument("--node-selector", dest="node_selector", action="append", default=[], metavar="KEY=VALUE",
                       help="node label the pods need, repeatable (default: none)")
        k.add_argument("--toleration", dest="tolerations", action="append", default=[],
                       metavar="KEY[=VALUE][:EFFECT]", help="taint the pods tolerate, repeatable (default: none)")
        k.add_argument("--shm-size", dest="shm_size", default=None,
                       help=f"memory-backed /dev/shm for DataLoader workers and NCCL {default(K8sOptions, 'shm_size')}")
    if launcher in ("slurm", None):
        s = p.add_argument_group("slurm")
        s.add_argument("--shared-dir", dest="shared_dir", default=None,
                       help="a directory every node sees: the job's working directory; data and runs lie inside "
                            "(default: the current directory)")
        s.add_argument("--time", default=None, help=f"wall-time limit {default(SlurmOptions, 'time')}")
        s.add_argument("--partition", default=None, help="partition (default: the cluster's)")
        s.add_argument("--account", default=None, help="account (default: the cluster's)")
        s.add_argument("--cpus-per-task", dest="cpus_per_task", type=int, default=None,
                       help="CPU cores per node (default: the cluster's)")
        s.add_argument("--setup", action="append", default=[], metavar="LINE",
                       help="shell line run before training, repeatable, e.g. 'source ~/venvs/trm/bin/activate' "
                            "(default: none)")


def cluster_values(args: argparse.Namespace) -> dict:
    from trm_kaggle.config import ClusterConfig, K8sOptions, SlurmOptions

    names = set(ClusterConfig.model_fields) | set(K8sOptions.model_fields) | set(SlurmOptions.model_fields)
    return {k: v for k, v in vars(args).items() if k in names}


def add_launch(sub) -> None:
    p = sub.add_parser("launch", help="write (never submit) Kubernetes or SLURM job files for a training",
                       description="Write the job files that start a training on a cluster, from the settings a "
                                   "local `trm-kaggle train` takes (--preset, --config, key=value), resolved and "
                                   "checked first. Nothing is submitted: the last lines say how.")
    kinds = p.add_subparsers(dest="launcher", metavar="LAUNCHER", help="k8s or slurm")
    kinds.required = True
    for launcher, help_text, description in (
            ("k8s", "Kubernetes: an Indexed Job + headless Service (or a Kubeflow PyTorchJob)",
             "Write one manifest (kubectl apply -f FILE): a ConfigMap with the resolved settings, a headless "
             "Service for the rendezvous and an Indexed Job with one pod per node (--flavor pytorchjob: a Kubeflow "
             "PyTorchJob), every pod running trm-kaggle torchrun ... -m trm_kaggle train."),
            ("slurm", "SLURM: an sbatch script",
             "Write an sbatch script: #SBATCH --nodes/--gpus-per-node/--time, the resolved settings written into "
             "the run directory, the first host as the rendezvous, srun starting trm-kaggle torchrun on every "
             "node.")):
        q = kinds.add_parser(launcher, help=help_text, description=description)
        q.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training settings, upstream style")
        q.add_argument("--preset", action="append", default=[], help="named preset, repeatable (default: none)")
        q.add_argument("--config", default=None, help="YAML/JSON config file (default: none)")
        cluster_options(q, launcher)
        common_flags(q)
        say_defaults(q)  # "(required)" after the required options
        q.set_defaults(func=cmd_launch)
    common_flags(p)
    p.set_defaults(func=cmd_launch)


def cmd_launch(args: argparse.Namespace) -> int:
    from trm_kaggle.launch.plan import cluster_config, launch_training

    cluster = cluster_config(args.launcher, cluster_values(args))
    print(launch_training(cluster, config_file=args.config, presets=args.preset, overrides=args.overrides).describe())
    return 0
