"""The Kaggle kernel's job (`trm-kaggle submit`: test-time training, voting, the submission) and the main job end
to end (`trm-kaggle pipeline`). Each field's description is also its option's `--help`."""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from trm_kaggle.config.common import (MAX_BATCH_SIZE, MAX_FINETUNE_STEPS, MAX_LR, MAX_NUM_AUG, MAX_SEED, WEEK_S, YEAR_S,
                                      CompileSetting, _Config, bounded_number, compile_setting)
from trm_kaggle.config.evaluate import (MAX_TEST_DEPTH, MAX_TRAJECTORIES, MAX_TRAJECTORY_NOISE, EvaluateConfig,
                                        TrajectorySelect, trajectory_problem)
from trm_kaggle.config.model import MAX_HALT_STEPS, RECURSION_FIELDS, ArchConfig, InferenceDtype

FinetuneMode = Literal["embeddings-then-all", "all", "embeddings", "none"]


#: Hidden tasks `estimate` plans for, at most (Kaggle's sets hold 120 and 240).
MAX_PLANNED_TASKS = 1_000_000


def default_work_dir(output: str) -> str:
    """`submit`'s work folder when none is named: beside the submission, named after it (runs/s.json ->
    runs/s-ttt), so that it lands where its output does and two submissions in one folder keep theirs apart."""
    path = PurePath(output)
    if not path.name:  # "", ".", "/": a folder, where a submission file goes (with_name raised its own error)
        raise ValueError(f"{output!r} names a folder, not a submission file")
    return str(path.with_name(f"{path.stem}-ttt"))


def count_or_auto(text: str) -> int | str:
    """A command-line value of SolveConfig.num_aug or finetune_steps: a whole number, or 'auto'."""
    if text != "auto" and not text.isascii():  # int() reads any script's digits ('５' is 5)
        raise ValueError(text)
    return text if text == "auto" else int(text)


def bounded_count_or_auto(option: str, most: int):
    """An argparse type for `option`, a flag that passes a count on to a SolveConfig made elsewhere (the bundle's
    kernel): 'auto', or a whole number from 0 to `most` checked while parsing (`bounded_number`)."""
    number = bounded_number(option, 0, most)
    return lambda text: text if text == "auto" else number(text)


#: A worker with less time than this before the deadline starts nothing (timing its device alone costs more):
#: a budget must leave it beyond the safety margin for the model to run at all.
MIN_PLAN_S = 10.0


class SolveConfig(_Config):
    """`trm-kaggle submit`: a challenges file -> submission.json within a wall-clock budget.

    Every task is solved on its own (its own augmented dataset, fine-tuning run and vote), so a task's
    answer does not depend on which worker solved it or on the other tasks.
    """

    challenges: str = Field(description="challenges JSON, e.g. /kaggle/input/<competition>/arc-agi_test_challenges"
                                        ".json")
    weights: str = Field(description="export directory: trm-kaggle export / import-upstream")
    output: str = Field("submission.json", description="the submission to write (atomically)")
    # None: the validator puts it beside `output` (default_work_dir)
    work_dir: Optional[str] = Field(None, description="per-task datasets, fine-tuning states and results; a rerun "
                                                      "resumes (default: beside output, named after it: OUTPUT-ttt)")
    time_budget: Optional[float] = Field(None, gt=0, le=WEEK_S, allow_inf_nan=False,
                                         description="seconds for everything, at most a week (default: no limit)")
    safety_margin: float = Field(60.0, ge=0, le=WEEK_S, allow_inf_nan=False,
                                 description="seconds kept free at the end of the budget, at most a week")
    plan_margin: float = Field(0.15, ge=0.0, lt=1.0, description="share of each worker's time that 'auto' leaves "
                                                                 "unplanned")
    num_aug: Union[int, Literal["auto"]] = Field(100, description="augmentations per task, for fine-tuning and for "
                                                                  "voting, or auto (submit: fit the time budget)")
    # Published TRM runs on unseen ARC tasks found embeddings-only fine-tuning near useless and full or staged
    # fine-tuning best (docs/test-time-training.md).
    finetune: FinetuneMode = Field("embeddings-then-all", description="what test-time training trains: "
                                   "embeddings-then-all (the puzzle rows alone for the first embeddings_fraction of "
                                   "the steps, then every weight); all; embeddings; none")
    embeddings_fraction: float = Field(0.5, ge=0.0, le=1.0, description="embeddings-then-all: share of the steps "
                                                                        "that train the puzzle rows alone")
    finetune_steps: Union[int, Literal["auto"]] = Field(500, description="fine-tuning steps per task (each task is "
                                                        "fine-tuned on its own), or auto (submit: fit the time "
                                                        "budget)")
    # Test-time recursion (the same weights, deeper or shallower); bounds: ArchConfig's.
    H_cycles: Optional[int] = Field(None, ge=1, le=256, description="test-time recursion depth (default: the "
                                                                    "export's)")
    L_cycles: Optional[int] = Field(None, ge=1, le=256, description="test-time latent updates per cycle (default: "
                                                                    "the export's)")
    halt_max_steps: Optional[int] = Field(None, ge=1, le=MAX_HALT_STEPS, description="test-time ACT steps of fine-tuning, "
                                          "and of prediction unless test_depth is set (default: the export's)")
    max_tasks: Optional[int] = Field(None, ge=1, description="the model works on the first N tasks; the others get "
                                                             "the fallback, all are submitted (default: every task)")
    workers: Optional[int] = Field(None, ge=1, le=1024, description="worker processes, one device each, at most one "
                                                                    "per task (default: one per visible GPU, else 1)")
    global_batch_size: int = Field(64, ge=1, le=MAX_BATCH_SIZE, description="fine-tuning examples per step (on CPU and MPS an upper "
                                                         "limit: the plan sizes the batch for the device)")
    lr: float = Field(1e-4, gt=0, le=MAX_LR, allow_inf_nan=False, description="learning rate of the weights, while "
                                                                              "fine-tuning trains them")
    puzzle_emb_lr: float = Field(1e-2, gt=0, le=MAX_LR, allow_inf_nan=False, description="learning rate of the "
                                                                                          "puzzle rows")
    eval_batch_size: int = Field(256, ge=1, le=MAX_BATCH_SIZE, description="prediction examples per model call (on "
                                 "CPU and MPS an upper limit, as the fine-tuning batch)")
    early_exit: bool = Field(False, description="an example stops at its first q_halt > 0 and its prediction row "
                                                "takes the next example")
    forward_dtype: InferenceDtype = Field("auto", description="activation dtype of fine-tuning and prediction: auto "
                                          "decides per device, whatever the weights were trained in; export keeps "
                                          "the export's forward_dtype")
    compile: CompileSetting = Field("auto", description="torch.compile fine-tuning and predictions by region: auto "
                                                        "= on CUDA only; on; off")
    # Shipped with the weights (`trm-kaggle bundle --compile-cache`): a file the bundle's author chose, checked
    # against its recorded digest.
    compile_cache: Optional[str] = Field(None, description="a compile cache made for this GPU and torch (a bundle's "
                                         "compile_cache.bin, with its compile_cache.json beside it): loaded when "
                                         "both match, else ignored with one line; a cache is code, give only one "
                                         "you made (default: none)")
    # Test-time trajectories and depth, for prediction only (fine-tuning and its demonstration scoring keep the
    # export's depth); the plan prices them (solve/pricing.py). docs/test_time.md.
    trajectories: int = Field(1, ge=1, le=MAX_TRAJECTORIES, description="noisy trajectories per augmented test "
                              "input, each one a vote (K x the prediction work; trajectory 0 runs without noise)")
    trajectory_noise: float = Field(0.0, ge=0.0, le=MAX_TRAJECTORY_NOISE, allow_inf_nan=False,
                                    description="noise between supervision steps, as a fraction of each position's "
                                    "RMS (needs trajectories >= 2)")
    trajectory_select: Optional[TrajectorySelect] = Field(None, description="first_halt: trajectories stop at "
                                                          "their first q_halt > 0 (ARC votes with every trajectory "
                                                          "either way) (default: q_halt; a choice needs trajectories "
                                                          ">= 2)")
    test_depth: Optional[int] = Field(None, ge=1, le=MAX_TEST_DEPTH, description="ACT steps of prediction alone, "
                                      "fine-tuning keeping halt_max_steps (default: halt_max_steps)")
    fallback: Literal["input", "blank"] = Field("input", description="attempts for tasks the model does not answer: "
                                                "the test input (then its transpose), or blank grids")
    device: Literal["auto", "cpu", "cuda", "mps", "xla"] = Field("auto", description="where workers run")
    threads: Optional[int] = Field(None, ge=1, le=4096, description="CPU threads per worker (default: "
                                                                    "OMP_NUM_THREADS if set, else the free cores / "
                                                                    "workers)")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="random seed (augmentations, fine-tuning)")
    progress: bool = Field(True, description="show progress bars")

    @model_validator(mode="before")
    @classmethod
    def _work_dir_beside_output(cls, data):
        if isinstance(data, dict) and data.get("work_dir") is None:
            output = data.get("output") or "submission.json"
            if isinstance(output, bytes):  # read as the field reads it (UTF-8), as the other paths' bytes are
                try:
                    output = output.decode()
                except UnicodeDecodeError:
                    return data  # the field's own check names `output`
            if isinstance(output, (str, os.PathLike)):  # else (5: pathlib's TypeError here) the field's check names it
                data = {**data, "work_dir": default_work_dir(os.fspath(output))}
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

    @field_validator("finetune_steps")
    @classmethod
    def _finetune_steps_bound(cls, v):
        if v != "auto" and v > MAX_FINETUNE_STEPS:
            raise ValueError(f"must be at most {MAX_FINETUNE_STEPS:,} or 'auto'")
        return v

    @model_validator(mode="after")
    def _auto_needs_a_budget(self) -> "SolveConfig":
        auto = [n for n in ("num_aug", "finetune_steps") if getattr(self, n) == "auto"]
        if auto and self.time_budget is None:
            raise ValueError(f"{' and '.join(auto)}='auto' is chosen to fit the time budget: set time_budget")
        return self

    @model_validator(mode="after")
    def _trajectories_consistent(self) -> "SolveConfig":
        problem = trajectory_problem(self.trajectories, self.trajectory_noise, self.trajectory_select)
        if problem:
            raise ValueError(problem)
        return self

    def recursion(self) -> dict[str, int]:
        """The test-time recursion settings that differ from the export's (H_cycles, L_cycles, halt_max_steps)."""
        return {k: getattr(self, k) for k in RECURSION_FIELDS if getattr(self, k) is not None}

    def run_arch(self, arch: ArchConfig) -> ArchConfig:
        """What the solve runs of an export's `arch`: its test-time recursion, in its forward dtype."""
        return arch.with_recursion(**self.recursion()).for_inference(self.forward_dtype)

    def evaluation(self) -> EvaluateConfig:
        """The solve's prediction settings as an evaluation's (`trm_kaggle.evaluate.pipeline.evaluate`): the same
        shape as `trm-kaggle evaluate`'s, under the solve's names."""
        return EvaluateConfig(batch_size=self.eval_batch_size, device=self.device, early_exit=self.early_exit,
                              dtype=self.forward_dtype, compile=self.compile, trajectories=self.trajectories,
                              trajectory_noise=self.trajectory_noise, trajectory_select=self.trajectory_select,
                              # the run's seed draws the trajectories' noise; one trajectory draws none
                              trajectory_seed=self.seed if self.trajectories > 1 else 0, test_depth=self.test_depth)


class PipelineConfig(_Config):
    """`trm-kaggle pipeline`: every stage on embedded defaults, offline, in minutes on a CPU."""

    work_dir: str = Field("runs/pipeline", description="where everything is written")
    num_aug: int = Field(4, ge=1, le=MAX_NUM_AUG, description="augmentations per task")
    train_seconds: float = Field(180.0, gt=0, le=YEAR_S, allow_inf_nan=False,
                                 description="training time limit in seconds")
    # At upstream's 30 a CPU manages too few steps in a few minutes to learn anything visible; at 12 it learns
    # within the budget (docs/benchmarks.md).
    canvas: int = Field(12, ge=1, le=30, description="canvas side: only tasks whose grids fit it (30 is upstream's, "
                                                     "far slower on a CPU)")
    eval_tasks: int = Field(3, ge=1, description="ARC-AGI-2 evaluation tasks (fitting the canvas) in the test split")
    unseen_tasks: int = Field(2, ge=1, description="further ARC-AGI-2 evaluation tasks (fitting the canvas) used as "
                                                   "unseen challenges")
    seed: int = Field(42, ge=0, le=MAX_SEED, description="random seed")
    threads: Optional[int] = Field(None, ge=1, le=4096, description="CPU threads of training, evaluation and "
                                   "submission (default: OMP_NUM_THREADS, else the cores other work leaves free)")
    progress: bool = Field(True, description="show progress bars")
