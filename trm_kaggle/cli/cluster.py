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
        from trm_kaggle.locks import refuse_if_held
        from trm_kaggle.train import check_run_io, default_run_dir

        # a run folder another training holds, too: refused by rank 0 alone, it left the other ranks waiting on
        # their first collective (a traceback each, and the launch's status 1); and its files, which every rank
        # refused in a line of its own
        cfg = train_settings(train_args)
        check_run_io(cfg)
        refuse_if_held(default_run_dir(cfg))
    torchrun.launch(targs)
    return 0


def cluster_options(p: argparse.ArgumentParser, launcher: str | None) -> None:
    """The options of `launch k8s` / `launch slurm` (launcher None: both sets, for `sweep --launcher`); each one's
    help is its field's description."""
    from pydantic_core import PydanticUndefined

    from trm_kaggle.config import ClusterConfig, K8sOptions, SlurmOptions, field_help

    def option(group, name: str, model, *flags: str, more: str = "", required: bool = False, **kw) -> None:
        """`--name` (or `flags`) for `model`'s field `name`; the default said from the field when it has one."""
        default = model.model_fields[name].default
        if not more and default not in (None, [], PydanticUndefined) and kw.get("action") != "store_true":
            more = f" (default: {default})"
        group.add_argument(*(flags or ["--" + name.replace("_", "-")]), dest=name, required=required,
                           help=field_help(model, name, more), **kw)

    one = launcher is not None  # `launch`: nodes, GPUs and --out are required
    needed = "" if one else " (required with --launcher)"
    repeatable = " (repeatable; default: none)"
    g = p.add_argument_group("cluster")
    option(g, "nodes", ClusterConfig, type=int, required=one, default=None, more=needed)
    option(g, "gpus_per_node", ClusterConfig, type=int, required=one, default=None, more=needed)
    option(g, "out", ClusterConfig, required=one, default=None, more=needed)
    option(g, "name", ClusterConfig, default=None)
    for name in ("max_restarts", "rdzv_port", "rdzv_timeout"):
        option(g, name, ClusterConfig, type=int, default=None)
    option(g, "env", ClusterConfig, action="append", default=[], metavar="KEY=VALUE", more=repeatable)
    if launcher is not None:
        option(g, "export", ClusterConfig, default=None, metavar="DIR", more=" (default: none)")
    option(g, "force", ClusterConfig, action="store_true")
    if launcher in ("k8s", None):
        k = p.add_argument_group("kubernetes")
        for name in ("image", "pvc"):
            option(k, name, K8sOptions, required=launcher == "k8s", default=None,
                   more="" if one else " (required with --launcher k8s)")
        for name in ("mount", "namespace"):
            option(k, name, K8sOptions, default=None)
        option(k, "flavor", K8sOptions, choices=["job", "pytorchjob"], default=None)
        option(k, "node_selector", K8sOptions, action="append", default=[], metavar="KEY=VALUE", more=repeatable)
        option(k, "tolerations", K8sOptions, "--toleration", action="append", default=[],
               metavar="KEY[=VALUE][:EFFECT]", more=repeatable)
        option(k, "shm_size", K8sOptions, default=None)
    if launcher in ("slurm", None):
        s = p.add_argument_group("slurm")
        option(s, "shared_dir", SlurmOptions, default=None, more=" (default: the current directory)")
        option(s, "time", SlurmOptions, default=None)
        for name in ("partition", "account"):
            option(s, name, SlurmOptions, default=None, more=" (default: the cluster's)")
        option(s, "cpus_per_task", SlurmOptions, type=int, default=None, more=" (default: the cluster's)")
        option(s, "setup", SlurmOptions, action="append", default=[], metavar="LINE", more=repeatable)


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
    from trm_kaggle.launch import cluster_config, launch_training

    cluster = cluster_config(args.launcher, cluster_values(args))
    print(launch_training(cluster, config_file=args.config, presets=args.preset, overrides=args.overrides).describe())
    return 0
