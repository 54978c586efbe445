"""Training's config (`trm-kaggle train`): upstream's `config/cfg_pretrain.yaml` names and defaults, plus ours
(hardware, run control, the recursion and data curricula). `trm-kaggle train --list-settings` prints every field
with its bounds and description."""

from __future__ import annotations

import os
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from trm_kaggle.config.common import (MAX_BATCH_SIZE, MAX_EPOCHS, MAX_LR, MAX_SAVE_EVERY_S, MAX_SEED, YEAR_S,
                                      CompileSetting, _Config, compile_setting)
from trm_kaggle.config.evaluate import EvaluateConfig
from trm_kaggle.config.model import ArchConfig
from trm_kaggle.names import blank_path_problem, name_problem


class DepthStage(_Config):
    """One stage of a staged depth curriculum (CGAR's): until `until` of the curriculum, the recursion runs at
    `depth` times the arch's H_cycles and L_cycles (rounded half up, at least 1)."""

    until: float = Field(gt=0, lt=1, allow_inf_nan=False, description="where the stage ends, as a share of the "
                         "curriculum's length (curriculum.epochs, or the whole schedule when that is 0)")
    depth: float = Field(gt=0, le=1, allow_inf_nan=False, description="H_cycles and L_cycles of the stage as a "
                         "share of the arch's")


class CurriculumConfig(_Config):
    """Recursion curriculum, either a linear ramp of the cycle counts from start values to the arch's over
    `epochs`, or stages (CGAR's progressive depth: shallow first, the arch's depth after the last stage)."""

    start_H_cycles: Optional[int] = Field(None, ge=1, le=256, description="H_cycles at the start; None = the arch's")
    start_L_cycles: Optional[int] = Field(None, ge=1, le=256, description="L_cycles at the start; None = the arch's")
    epochs: int = Field(0, ge=0, description="epochs of the ramp (0 = off) or of the stages (0 = the whole "
                                             "schedule)")
    stages: list[DepthStage] = Field(default_factory=list, max_length=64,
                                     description="staged depth, in order of `until` (empty = no stages); "
                                                 "the arch's depth after the last")

    @model_validator(mode="after")
    def _one_kind(self) -> "CurriculumConfig":
        ends = [s.until for s in self.stages]
        if any(b <= a for a, b in zip(ends, ends[1:])):
            raise ValueError(f"curriculum.stages must end in increasing order of until, got {ends}")
        if self.stages and (self.start_H_cycles is not None or self.start_L_cycles is not None):
            raise ValueError("curriculum: a ramp (start_H_cycles, start_L_cycles) or stages, not both")
        return self


class RSMConfig(_Config):
    """RSM's training contract (docs/recipes.md): each step takes fresh examples, runs a random number of
    gradient-free supervision steps (the warm-up), then one supervision step with the gradient and the loss."""

    enabled: bool = Field(False, description="train with RSM's contract instead of upstream's ACT carry")
    min_warmup: int = Field(0, ge=0, le=4095, description="fewest gradient-free supervision steps before the "
                                                          "step with the loss")
    max_warmup: Optional[int] = Field(None, ge=0, le=4095, description="most of them (drawn uniformly per step "
                                      "from the seed and the step); None = arch.halt_max_steps - 1, so that "
                                      "training never recurses deeper than evaluation")

    @model_validator(mode="after")
    def _ordered(self) -> "RSMConfig":
        if self.max_warmup is not None and self.max_warmup < self.min_warmup:
            raise ValueError(f"rsm.max_warmup {self.max_warmup} is below rsm.min_warmup {self.min_warmup}")
        return self


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
    # bounded: the shares are summed to normalise them, and two of 1e308 sum to inf
    share: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False, description="the stage's part of the run "
                                                                             "(normalised)")

    @model_validator(mode="after")
    def _one_lr(self) -> "TrainStage":
        if self.lr is not None and self.lr_scale != 1.0:
            raise ValueError("a stage sets lr or lr_scale, not both")
        return self


# the settings only optimizer=muon reads
MUON_SETTINGS = ("muon_lr_ratio", "muon_lr", "muon_momentum", "muon_ns_steps", "muon_scale", "muon_weight_decay")


class TrainConfig(_Config):
    """`trm-kaggle train`: upstream's `cfg_pretrain.yaml` names and defaults, then ours (hardware and run control).

    Every field carries its bounds and a description: `trm-kaggle train --list-settings` prints them."""

    arch: ArchConfig = Field(default_factory=ArchConfig, description="the network")
    data_paths: list[str] = Field(default_factory=list, description="dataset directories to train on (mixed)")
    data_paths_test: list[str] = Field(default_factory=list, description="datasets whose test split is evaluated; "
                                                                        "empty = data_paths")
    evaluators: list = Field(default_factory=list, description="upstream's evaluators list; accepted and ignored "
                                                               "(ARC scoring is `trm-kaggle evaluate`)")

    global_batch_size: int = Field(768, ge=1, le=MAX_BATCH_SIZE, description="examples per optimizer step, over all "
                                                                             "ranks")
    epochs: int = Field(100000, ge=1, le=MAX_EPOCHS, description="passes over the training groups; sets the "
                                                                 "schedule's length")
    eval_interval: Optional[int] = Field(10000, ge=1, description="epochs between test-split evaluations (and "
                                                                  "train states); None = once, at the schedule's "
                                                                  "end (upstream: every `epochs`)")
    # upstream's pretrain.py: `if _iter_id >= min_eval_interval: evaluate`, _iter_id counting eval intervals from 0
    min_eval_interval: Optional[int] = Field(0, ge=0, description="evaluation intervals that pass before the first "
                                             "evaluation: the test split is evaluated at the end of interval i "
                                             "(counted from 0, eval_interval epochs each) once i >= "
                                             "min_eval_interval, as upstream; 0 = at every interval")
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
    # muon: Muon for the recursive blocks' 2-D matrices, AdamATan2 for the rest (trm_kaggle.optim.muon, torch 2.9+)
    optimizer: Literal["adam_atan2", "adamw", "lion", "muon"] = Field("adam_atan2",
                                                                      description="optimizer of the weights")
    # Muon's update is scaled to the RMS of an AdamW update (torch's adjust_lr_fn="match_rms_adamw"), so 1.0 reuses
    # the lr tuned for AdamATan2
    muon_lr_ratio: float = Field(1.0, gt=0, le=100, allow_inf_nan=False,
                                 description="optimizer=muon: the hidden matrices' learning rate as a multiple of "
                                             "lr (the schedule's); the other weights take lr itself")
    # or the matrices' own peak rate, whatever lr is: a recipe's Muon rate that does not move with the base's lr
    # (the `muon-sic` preset's 0.02); the schedule's warm-up and decay shape it as they shape lr
    muon_lr: Optional[float] = Field(None, gt=0, le=MAX_LR, allow_inf_nan=False,
                                     description="optimizer=muon: the hidden matrices' peak learning rate; None = lr "
                                                 "x muon_lr_ratio")
    muon_momentum: float = Field(0.95, ge=0, lt=1, description="optimizer=muon: momentum of the matrices' buffers")
    muon_ns_steps: int = Field(5, ge=1, le=20, description="optimizer=muon: Newton-Schulz iterations per update")
    # match_rms_adamw: 0.2 * sqrt(max(A, B)) (Moonshot's; lr carries over from AdamW); original: sqrt(max(1, A / B))
    # (Keller Jordan's, with Muon's own, larger rates)
    muon_scale: Literal["match_rms_adamw", "original"] = Field(
        "match_rms_adamw", description="optimizer=muon: how a matrix's update is scaled by its shape (A, B)")
    muon_weight_decay: Optional[float] = Field(None, ge=0, allow_inf_nan=False,
                                               description="optimizer=muon: the matrices' decoupled weight decay "
                                                           "(each step scales them by 1 - rate x it); None = "
                                                           "weight_decay")

    # CGAR's hierarchical supervision weighting: a row's loss at its ACT step t weighs decay^(t-1), scaled so that
    # the weights average 1 over halt_max_steps steps (1.0 = every step alike, upstream's)
    supervision_decay: float = Field(1.0, gt=0, le=1, allow_inf_nan=False,
                                     description="loss weight of each later ACT supervision step relative to the "
                                                 "one before (weights averaging 1 over halt_max_steps); 1 = off")

    ema: bool = Field(False, description="keep an exponential moving average of the weights (evaluated and "
                                         "exported)")
    # 1 would keep the first weights for ever: evaluations and the export would hold an untrained model
    ema_rate: float = Field(0.999, ge=0, lt=1, description="EMA decay per step")
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
    micro_batch_size: Optional[int] = Field(None, ge=1, le=MAX_BATCH_SIZE, description="per-rank examples per forward (gradient "
                                                                    "accumulation); None = the whole local batch")
    auto_batch: bool = Field(False, description="pick micro_batch_size from free memory (CPU, MPS); halve it on "
                                                "out-of-memory (CUDA)")
    # recompute the grad-carrying recursion cycle's activations in backward instead of keeping them: less memory,
    # more time (benchmarks/bench_grad_checkpointing.py). Here, not in ArchConfig: it changes neither the function
    # nor the weights, so exports and upstream configs never carry it and a run may resume with it toggled.
    grad_checkpointing: bool = Field(False, description="recompute the recursion's activations in backward: less "
                                                        "memory, more time")
    threads: Optional[int] = Field(None, ge=1, le=4096, description="CPU threads (None: OMP_NUM_THREADS if set, else the cores the load average leaves free; a value here overrides OMP_NUM_THREADS)")
    deterministic: bool = Field(False, description="torch deterministic algorithms (CPU runs reproduce bit for bit)")
    max_steps: Optional[int] = Field(None, ge=1, description="stop after this many optimizer steps (the schedule "
                                                             "keeps its length)")
    time_limit: Optional[float] = Field(None, gt=0, le=YEAR_S, allow_inf_nan=False,
                                        description="seconds of training after which the run saves and stops")
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

    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig, description="recursion-depth ramp "
                                                                                       "or stages")
    rsm: RSMConfig = Field(default_factory=RSMConfig, description="RSM's training contract (warm-up steps without "
                                                                  "gradient, the loss at the last step)")
    halt_schedule: HaltScheduleConfig = Field(default_factory=HaltScheduleConfig,
                                              description="halting-exploration decay")
    # data curriculum: stages in order over the run's steps (empty = sample everything throughout)
    stages: list[TrainStage] = Field(default_factory=list, description="data curriculum stages, in order (empty "
                                                                       "= sample everything throughout)")

    @field_validator("data_paths", "data_paths_test")
    @classmethod
    def _each_dataset_once(cls, v: list[str]) -> list[str]:
        """One dataset named twice (`D` and `D/`, `x/../D`, a link to it) would be mixed with itself: its puzzles
        drawn twice as often and given a second embedding row each, without a word."""
        seen: dict[str, str] = {}
        for path in v:
            key = os.path.realpath(path) if isinstance(path, str) and path else path
            if key in seen:
                same = "" if seen[key] == path else f" (as {seen[key]!r} and {path!r})"
                raise ValueError(f"names the dataset {path!r} twice{same}: each dataset is read once")
            seen[key] = path
        return v

    @field_validator("run_name", "checkpoint_path", "project_name", mode="before")
    @classmethod
    def _empty_is_not_given(cls, v):
        # `+run_name=` (or `checkpoint_path=`) means the default, and is recorded as not given: recorded as '', a
        # rerun without it was refused as a run with another config
        return None if v == "" else v

    @field_validator("load_checkpoint", mode="before")
    @classmethod
    def _weights_to_start_from(cls, v):
        # an input: `load_checkpoint=$CKPT` with CKPT unset trained from fresh weights, exit 0, without a word (a
        # fine-tune whose checkpoint was lost); leaving it out, or null, starts fresh
        wanted = "a train state, an upstream step_<N> file or an export"
        if isinstance(v, str) and (problem := blank_path_problem(v, wanted, "leave it out, or null, to start afresh")):
            raise ValueError(problem)
        return v

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (problem := name_problem(v) or (not v.strip() and "a name of blanks")):
            # runs/<run_name> must stay inside runs/
            raise ValueError(f"{problem}: a run name is one folder name inside runs/ (checkpoint_path names a run "
                             "folder anywhere)")
        return v

    @model_validator(mode="after")
    def _levers_fit_the_arch(self) -> "TrainConfig":
        c, a = self.curriculum, self.arch
        for name, start, end in (("H", c.start_H_cycles, a.H_cycles), ("L", c.start_L_cycles, a.L_cycles)):
            if start is not None and start > end:
                raise ValueError(f"curriculum.start_{name}_cycles {start} is deeper than arch.{name}_cycles {end}: "
                                 "a curriculum grows the recursion up to the arch's")
        if self.muon_lr is not None and self.muon_lr_ratio != 1.0:
            raise ValueError(f"muon_lr {self.muon_lr} and muon_lr_ratio {self.muon_lr_ratio} both set the matrices' "
                             "rate: set one of them")
        if self.optimizer != "muon":  # Muon's settings under another optimizer would be dropped without a word
            fields = type(self).model_fields
            moved = [f"{k} {getattr(self, k)}" for k in MUON_SETTINGS if getattr(self, k) != fields[k].default]
            if moved:
                raise ValueError(f"{', '.join(moved)}: Muon's settings, but optimizer is {self.optimizer}: set "
                                 "optimizer=muon, or leave them at their defaults")
        r = self.rsm
        if r.enabled:
            most = a.halt_max_steps - 1 if r.max_warmup is None else r.max_warmup
            if r.min_warmup > most:
                raise ValueError(f"rsm.min_warmup {r.min_warmup} is above the most warm-up steps {most} "
                                 f"(rsm.max_warmup, or arch.halt_max_steps - 1 = {a.halt_max_steps - 1})")
            if self.supervision_decay != 1.0:
                raise ValueError("supervision_decay weights the ACT carry's supervision steps; rsm trains one "
                                 "supervision step per example: set one of them")
            h = self.halt_schedule
            if h.start_prob is not None or h.end_prob is not None or h.epochs != 0:  # no halting is explored
                raise ValueError("halt_schedule decays the ACT carry's halting exploration; rsm trains without "
                                 "halting (a drawn warm-up, then one step with the loss): set one of them")
        elif r.min_warmup != 0 or r.max_warmup is not None:  # read by nothing while RSM is off
            raise ValueError("rsm.min_warmup and rsm.max_warmup are RSM's settings, but rsm.enabled is false: set "
                             "rsm.enabled=true (or the rsm preset), or leave them at their defaults")
        if self.freeze_weights and (a.puzzle_emb_ndim == 0 or self.puzzle_emb_lr == 0):  # once a traceback at the
            # first step (no tensor to train), or a run that trained nothing and said it trained
            why = "arch.puzzle_emb_ndim is 0 (no puzzle table)" if a.puzzle_emb_ndim == 0 else "puzzle_emb_lr is 0"
            raise ValueError(f"freeze_weights trains the puzzle embeddings alone, but {why}: nothing would train; "
                             "set freeze_weights=false, or give the model a puzzle table and a rate")
        h = self.halt_schedule  # with no decay the probability is end_prob from the start: start_prob is unread
        if h.epochs == 0 and h.start_prob is not None:
            raise ValueError("halt_schedule.start_prob starts a decay over halt_schedule.epochs, which is 0 (no "
                             "decay: end_prob holds throughout): set halt_schedule.epochs, or leave it unset")
        if h.epochs > 0 and h.start_prob is None and h.end_prob is None:  # from the arch's probability to itself
            raise ValueError("halt_schedule.epochs is the length of a decay from start_prob to end_prob, and neither "
                             "is set (both default to arch.halt_exploration_prob): set them, or leave epochs at 0")
        ramp = c.start_H_cycles is not None or c.start_L_cycles is not None
        if not c.stages and c.epochs == 0 and ramp:  # the ramp ends before it starts: the arch's depth throughout
            raise ValueError("curriculum.start_H_cycles/start_L_cycles start a ramp over curriculum.epochs, which is "
                             "0 (off): set curriculum.epochs, or leave them unset")
        if not c.stages and c.epochs > 0 and not ramp:  # a ramp from the arch's depth to itself
            raise ValueError("curriculum.epochs is the length of a ramp (start_H_cycles, start_L_cycles) or of stages "
                             "(curriculum.stages), and neither is set: set one, or leave epochs at 0")
        return self

    @property
    def muon_ratio(self) -> float:
        """optimizer=muon: the matrices' rate over the schedule's lr (muon_lr / lr, or muon_lr_ratio)."""
        return self.muon_lr / self.lr if self.muon_lr is not None else self.muon_lr_ratio

    def evaluation(self) -> EvaluateConfig:
        """The test-split check's settings in the shape `trm-kaggle evaluate` and submit take: the global batch
        (within an evaluation's bound), every ACT step."""
        return EvaluateConfig(batch_size=min(self.global_batch_size, MAX_BATCH_SIZE),
                              max_steps=self.arch.halt_max_steps)

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_spelling(cls, v):
        return compile_setting(v)
