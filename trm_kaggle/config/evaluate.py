"""The evaluations' configs: an ARC evaluation (`trm-kaggle evaluate`, `trm_kaggle.evaluate.pipeline.evaluate`)
and a code-repair one (`trm-kaggle evaluate-repair`). Each field's description is also its option's `--help`."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, field_validator

from trm_kaggle.config.common import MAX_BATCH_SIZE, CompileSetting, _Config, compile_setting
from trm_kaggle.config.model import InferenceDtype

TaskIdMode = Literal["own", "blank", "random", "mean"]  # `evaluate --task-ids` (trm_kaggle.model.export.task_id_table)
#: A device by name, as `trm_kaggle.hardware.pick_device` takes it (cuda:N picks one GPU of several).
DEVICE_PATTERN = r"^(auto|cpu|mps|xla|cuda(:[0-9]{1,3})?)$"


class EvaluateConfig(_Config):
    """How an ARC evaluation runs: the batch, the ACT steps and the vote (`evaluate()`), and how the export is
    loaded for it (`device`, `dtype`, `compile`: `trm_kaggle.evaluate.run.evaluate_export`; `evaluate()` runs the
    model it is given as it is). `submit` predicts under the same settings by its own names: eval_batch_size,
    early_exit, forward_dtype, compile, device (`SolveConfig`)."""

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
    max_tasks: Optional[int] = Field(None, ge=1, description="only the first N tasks of the test split, for a quick "
                                                             "run; scores are over them (default: every task)")
    keep_logits: bool = Field(False, description="also keep each example's logits at the step it stopped "
                                                 "(`result.predictions.logits`)")
    progress: bool = Field(False, description="show a progress bar")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_spelling(cls, v):
        return compile_setting(v)

    def updated(self, **changes) -> "EvaluateConfig":
        """This config with `changes`, checked like any EvaluateConfig (`model_copy(update=...)` checks nothing)."""
        return type(self)(**{**self.model_dump(), **changes}) if changes else self

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
    time_limit: float = Field(10.0, gt=0, description="seconds per run")
    report: Optional[str] = Field(None, description="write metrics and every pair's outcome here (JSON) (default: "
                                                    "not written)")
    progress: bool = Field(True, description="show progress bars")
