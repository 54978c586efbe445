"""The evaluations' configs: an ARC evaluation (`trm-kaggle evaluate`, `trm_kaggle.evaluate.pipeline.evaluate`)
and a code-repair one (`trm-kaggle evaluate-repair`). Each field's description is also its option's `--help`."""

from __future__ import annotations

import re
import shlex
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from trm_kaggle.config.common import MAX_BATCH_SIZE, MAX_SEED, CompileSetting, _Config, compile_setting, revalidated
from trm_kaggle.config.model import InferenceDtype

# Test-time trajectories and depth (docs/test_time.md). The trajectories of an example take rows of the same
# prediction batch, so memory does not grow with K; time does (K x the forward work), and the bounds keep a solve's
# plan within reach: 32 x the work at most, noise at most the states' own size, depth 1,024 ACT steps.
MAX_TRAJECTORIES = 32
MAX_TRAJECTORY_NOISE = 1.0
MIN_TRAJECTORY_NOISE = 1e-6  # of the state's own size: float32 (7 digits) rounds a smaller one away
MAX_TEST_DEPTH = 1024
TrajectorySelect = Literal["q_halt", "first_halt"]
#: The rule that answers when none is chosen (`trajectory_select` None): a choice given at all, even this one, is
#: a setting of the trajectories, refused with one trajectory as any other is.
DEFAULT_TRAJECTORY_SELECT = "q_halt"


def trajectory_problem(trajectories: int, noise: float, select: str | None = None, seed: int = 0) -> str | None:
    """Why K trajectories with this noise, choice and seed contradict each other (None: they do not). A setting
    of the trajectories given for one trajectory is refused: nothing would read it (`select` None: none chosen)."""
    if trajectories > 1 and noise == 0:
        return (f"trajectories {trajectories} need a trajectory_noise above 0: without noise every trajectory is "
                "the same")
    if trajectories > 1 and noise < MIN_TRAJECTORY_NOISE:
        return (f"trajectory_noise {noise!r} is below {MIN_TRAJECTORY_NOISE:g} of the state's size: float32 rounds "
                f"so small a noise away, and the {trajectories} trajectories would all be the same")
    if trajectories == 1:
        given = [f"{name} {value!r}" for name, value, default in (("trajectory_noise", noise, 0.0),
                                                                   ("trajectory_select", select, None),
                                                                   ("trajectory_seed", seed, 0)) if value != default]
        if given:
            return (f"{', '.join(given)} need{'s' if len(given) == 1 else ''} trajectories of 2 or more: with one, "
                    "trajectory 0 runs alone and without noise")
    return None


TaskIdMode = Literal["own", "blank", "random", "mean"]  # `evaluate --task-ids` (trm_kaggle.model.export.task_id_table)
#: A device by name, as `trm_kaggle.hardware.pick_device` takes it (cuda:N picks one GPU of several).
DEVICE_PATTERN = r"^(auto|cpu|mps|xla|cuda(:[0-9]{1,3})?)$"


class EvaluateConfig(_Config):
    """How an evaluation runs: the batch, the ACT steps and the vote (`evaluate()`; a Sudoku or Maze dataset is
    scored per example: `trm_kaggle.evaluate.dataset`), the test-time levers (docs/test_time.md), and how the
    export is loaded for it (`device`, `dtype`, `compile`: `trm_kaggle.evaluate.run.evaluate_export`;
    `evaluate()` runs the model it is given as it is). `submit` predicts under the same settings by its own
    names: eval_batch_size, early_exit, forward_dtype, compile, device, trajectories... (`SolveConfig`)."""

    batch_size: int = Field(256, ge=1, le=MAX_BATCH_SIZE, description="examples per model call")
    device: str = Field("auto", description="where the model runs: auto (XLA when "
                        "torch_xla and PJRT_DEVICE are set, else CUDA, MPS, CPU), cpu, cuda, cuda:N, mps or xla")
    early_exit: bool = Field(False, description="an example stops at its first q_halt > 0 and its row takes the "
                                                "next example")
    max_steps: Optional[int] = Field(None, ge=1, le=4096, description="ACT steps (default: the model's "
                                                                      "halt_max_steps)")
    dtype: InferenceDtype = Field("auto", description="activation dtype: auto decides per device (bfloat16 on GPUs "
                                  "with native bf16, float32 on most CPUs: trm-kaggle doctor says why), whatever "
                                  "the weights were trained in; export keeps the export's forward_dtype")
    compile: CompileSetting = Field("auto", description="torch.compile the model's regions (one block for every "
                                    "layer, the ACT step): a one-off compile, then fused element-wise work; auto = "
                                    "on CUDA only, where it pays; on (on CPU it needs a C++ compiler; "
                                    "benchmarks/bench_evaluate.py --compile measures both on your machine); off")
    weighting: Literal["count", "q_halt"] = Field("count", description="vote by count or sigmoid(q_halt)")
    max_tasks: Optional[int] = Field(None, ge=1, description="only the first N tasks of the test split (a dataset "
                                     "without test_puzzles.json: its first N examples), for a quick run; scores are "
                                     "over them (default: every task)")
    keep_logits: bool = Field(False, description="also keep each example's logits at the step it stopped "
                                                 "(`result.predictions.logits`)")
    progress: bool = Field(False, description="show a progress bar")
    trajectories: int = Field(1, ge=1, le=MAX_TRAJECTORIES, description="noisy trajectories per example (PTRM): "
                              "K rows of the batch each, K x the forward work; trajectory 0 runs without noise; "
                              "ARC: every trajectory votes, other datasets: one is selected (trajectory_select)")
    trajectory_noise: float = Field(0.0, ge=0.0, le=MAX_TRAJECTORY_NOISE, allow_inf_nan=False,
                                    description="Gaussian noise added to both latent states between supervision "
                                    "steps, as a fraction of each position's RMS (needs trajectories >= 2)")
    trajectory_select: Optional[TrajectorySelect] = Field(None, description="which trajectory answers (ARC: all "
                                                          "vote, first_halt only stops them early): q_halt = the "
                                                          "highest q_halt logit where it stopped; first_halt = the "
                                                          "first to stop with q_halt > 0 (trajectories stop at their "
                                                          "first q_halt > 0), else the highest q_halt (default: "
                                                          "q_halt; a choice needs trajectories >= 2)")
    trajectory_seed: int = Field(0, ge=0, le=MAX_SEED, description="seed of the trajectories' noise")
    test_depth: Optional[int] = Field(None, ge=1, le=MAX_TEST_DEPTH, description="ACT (supervision) steps at test "
                                      "time, beyond the trained halt_max_steps if asked, and count the rows whose "
                                      "prediction settled (its last 3 steps' predictions equal) (default: the "
                                      "model's halt_max_steps, settling not counted)")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_spelling(cls, v):
        return compile_setting(v)

    @model_validator(mode="after")
    def _consistent(self) -> "EvaluateConfig":
        problem = trajectory_problem(self.trajectories, self.trajectory_noise, self.trajectory_select,
                                     self.trajectory_seed)
        if problem:
            raise ValueError(problem)
        if self.test_depth is not None and self.max_steps is not None and self.test_depth != self.max_steps:
            raise ValueError(f"max_steps {self.max_steps} and test_depth {self.test_depth} disagree: give one")
        return self

    @property
    def steps(self) -> Optional[int]:
        """ACT steps to run: test_depth, else max_steps (None: the model's halt_max_steps)."""
        return self.test_depth if self.test_depth is not None else self.max_steps

    @property
    def stops_at_first_halt(self) -> bool:
        """Whether examples stop at their first q_halt > 0: early_exit, or first-to-halt selection."""
        return self.early_exit or (self.trajectories > 1 and self.trajectory_select == "first_halt")

    @property
    def selection(self) -> str:
        """The rule that answers: trajectory_select, else its default (q_halt)."""
        return self.trajectory_select or DEFAULT_TRAJECTORY_SELECT

    def updated(self, **changes) -> "EvaluateConfig":
        """This config with `changes`, checked like any EvaluateConfig (`model_copy(update=...)` checks nothing: a
        config copied that way is checked here too), or one TRMError line naming the setting (an unknown keyword
        was pydantic's text of several lines and a link)."""
        return revalidated(self, **changes)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(DEVICE_PATTERN, v):
            raise ValueError(f"{v[:40]!r} is not a device: auto, cpu, cuda, cuda:N, mps or xla")
        return v


class RepairEvalConfig(_Config):
    """`trm-kaggle evaluate-repair`: exact-fix rates of a model on a code-repair test split.

    `doctests` and `test_command` run the code the model wrote (and the reference fix) in
    a subprocess, in a temporary directory, each run stopped after `time_limit` seconds.
    """

    weights: str = Field(description="export directory (trm-kaggle train --export / export)")
    data: str = Field(description="code-repair dataset directory")
    batch_size: int = Field(64, ge=1, le=MAX_BATCH_SIZE, description="examples per model call")
    device: Literal["auto", "cpu", "cuda", "mps"] = Field("auto", description="where the model runs")
    max_runs: Optional[int] = Field(None, ge=1, description="run code for the first N chosen pairs only (default: "
                                                            "every chosen pair)")
    max_examples: Optional[int] = Field(None, ge=1, description="only the first N pairs of the test split, for a "
                                                                "quick run (default: every pair)")
    doctests: bool = Field(False, description="run the doctests of pairs whose fix has some, on the fix and on the "
                                              "prediction")
    test_command: Optional[str] = Field(None, description="command run in the directory of snippet.py ({file} is "
                                                          "its path), e.g. 'python {file}' (default: none)")
    time_limit: float = Field(10.0, gt=0, le=86400, description="seconds per run (at most a day)")
    report: Optional[str] = Field(None, description="write metrics and every pair's outcome here (JSON) (default: "
                                                    "not written)")
    progress: bool = Field(True, description="show progress bars")

    @field_validator("test_command")
    @classmethod
    def _one_command_line(cls, v):
        if v is None:
            return v
        try:  # split as run_code splits it, so that a bad line is refused before any pair runs
            words = shlex.split(v)
        except ValueError as e:
            raise ValueError(f"{v!r} is no command line: {e}") from None
        if not words:
            raise ValueError("is empty: give a command, e.g. 'python {file}'")
        return v

    @model_validator(mode="after")
    def _runs_need_code_to_run(self) -> "RepairEvalConfig":
        if not self.doctests and self.test_command is None:  # max_runs and time_limit bound the code runs alone
            given = [n for n in ("max_runs", "time_limit") if n in self.model_fields_set]
            if given:
                raise ValueError(f"{' and '.join(given)} bound the code runs, and none is asked for: add doctests or "
                                 "a test_command, or drop them")
        return self
