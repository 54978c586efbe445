"""`trm-kaggle sweep`, `compare` and `regress`: grids of training runs (here, or as cluster job files),
their tables and plots, and the regression notebooks against their baselines."""

from __future__ import annotations

import argparse
import re

from trm_kaggle.cli.cluster import cluster_options, cluster_values
from trm_kaggle.cli.common import common_flags, flag
from trm_kaggle.errors import TRMError


def _seed_list(text: str) -> list[int]:
    """`0,1,2`: whole numbers in ASCII digits, none left out (`0,,1` is a typo, not the seeds 0 and 1)."""
    items = [x.strip() for x in text.split(",")]
    if not all(re.fullmatch(r"[0-9]+", x, re.ASCII) for x in items):
        raise TRMError(f"--seeds {text!r}: expected comma-separated whole numbers from 0 (seeds are never "
                       "negative) such as 0,1,2")  # one line, status 2
    return [int(x) for x in items]


def add_sweep(sub) -> None:
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
    flag(p, "sweep_dir", default=None, help="where the runs go (default runs/sweeps/<grid name>; with --launcher: "
                                            "on the shared volume)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="runs at once: one GPU each where the runs use CUDA, else the CPU cores split between them "
                        "(default: %(default)s)")
    flag(p, "dry_run", action="store_true",
         help="print the base settings and every run with its variant; run nothing")
    flag(p, "list_grids", action="store_true", help="print the built-in grids and exit")
    p.add_argument("--launcher", choices=["k8s", "slurm"], default=None,
                   help="write cluster job files instead of running: one Kubernetes job per run, or one SLURM job "
                        "array; their runs land in --sweep-dir on the shared volume (default: run here)")
    cluster_options(p, None)
    common_flags(p)
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from trm_kaggle.experiments import describe_grids, load_grid, run_sweep, with_seeds

    if args.list_grids:
        print(describe_grids())
        return 0
    if not args.grid:
        raise TRMError("sweep: name a grid (trm-kaggle sweep --list-grids) or a YAML grid file")
    grid = load_grid(args.grid)
    if args.seeds is not None:
        grid = with_seeds(grid, args.seeds)
    cluster = cluster_values(args)
    if args.launcher is not None:
        from trm_kaggle.launch import cluster_config, launch_sweep

        if args.parallel != 1 or args.dry_run:
            raise TRMError("--parallel and --dry-run run the sweep here; with --launcher the cluster runs it")
        result = launch_sweep(cluster_config(args.launcher, cluster), grid, sweep_dir=args.sweep_dir,
                              config_file=args.config, presets=args.preset, overrides=args.overrides)
        print(result.describe())
        return 0
    given = [k for k, v in cluster.items() if v not in (None, [], False)]
    if given:
        raise TRMError(f"--{given[0].replace('_', '-')}: a cluster option; add --launcher k8s or --launcher slurm")
    summary = run_sweep(grid, f"runs/sweeps/{grid.name}" if args.sweep_dir is None else args.sweep_dir, presets=args.preset,
                        config_file=args.config, overrides=args.overrides, parallel=args.parallel,
                        progress=args.progress, dry_run=args.dry_run)
    if not args.dry_run:
        print(summary.describe())
    return min(summary.failed, 100)


def add_compare(sub) -> None:
    p = sub.add_parser("compare", help="table (Markdown, CSV) and plots of runs or sweeps",
                       description="Read run directories, sweep directories (also while the sweep runs) or "
                                   "directories of runs; write table.md, table.csv, curves.png and final.png.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run directories, sweep directories or directories of runs")
    p.add_argument("--out", default=None, help="output directory (default: DIR/compare for one DIR, else compare)")
    p.add_argument("--metric", default=None, help="metric of the curves and the bar chart (default: "
                                                   "eval_exact_accuracy when runs evaluated, else exact_accuracy)")
    common_flags(p)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from trm_kaggle.experiments import default_out, write_comparison
    from trm_kaggle.wording import one_line

    out = args.out if args.out is not None else default_out(args.dirs)
    paths = write_comparison(args.dirs, out, metric=args.metric)
    print(paths["markdown_text"])
    # a typed --out, escaped as every success line's paths are (an escape sequence recoloured the terminal)
    print(one_line("wrote " + ", ".join(str(paths[k]) for k in ("markdown", "csv", "curves", "bars") if paths.get(k))))
    return 0


def add_regress(sub) -> None:
    from trm_kaggle.experiments import TIMEOUT_S

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
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"each notebook's time limit, the whole notebook's: one still running then is stopped and "
                        f"fails, the others run on (default: {TIMEOUT_S:g})")
    common_flags(p)
    p.set_defaults(func=cmd_regress)


def cmd_regress(args: argparse.Namespace) -> int:
    from trm_kaggle.experiments import regress

    return regress(args.names, out=args.out, update=args.update_baselines, notebook_dir=args.notebooks,
                   jobs=args.jobs, timeout=args.timeout)
