"""The training loop. One optimizer step per ACT supervision step, as upstream:

    batch -> (per micro-batch) carry, outputs = model(carry, micro) -> loss / global_batch -> backward
          -> all-reduce gradients (DDP) -> AdamATan2 step (weights) + SignSGD step (touched puzzle rows)
          -> EMA update -> log, evaluate, checkpoint

The ACT carry (latent states of the examples still being worked on) persists from
one batch to the next; rows that halted take fresh examples. Everything that
decides the run (loader position, carries, RNG, optimizer moments, EMA shadow) is
saved in the train state, so a resumed CPU run reproduces the uninterrupted one.

On XLA (TPUs) the same loop runs with a step boundary per optimizer step, batches moved to
the device ahead of use and compile metrics in the log; the calls into `trm_kaggle.xla`
are marked "XLA:".
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from trm_kaggle import xla
from trm_kaggle.config import TrainConfig
from trm_kaggle.data.loader import IGNORE_LABEL_ID, PuzzleLoader
from trm_kaggle.atomic import append_line, atomic_write_text
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import directory_lock, refuse_if_held
from trm_kaggle.model.dtype import DTYPES
from trm_kaggle.model.compiling import compile_model, compiled_graphs, load_compile_cache, save_compile_cache
from trm_kaggle.model.finite import NonFiniteSteps, all_finite, step_is_finite
from trm_kaggle.model.export import PUZZLE_EMB_KEY, fit_state_dict, read_export, resize_puzzle_embedding
from trm_kaggle.model.losses import act_loss
from trm_kaggle.model.rollout import ContinuousRollout, balanced_slots
from trm_kaggle.model.trm import Carry, ParameterCount, TinyRecursiveModel
from trm_kaggle.model.upstream import load_upstream_checkpoint
from trm_kaggle.optim.adam_atan2 import AdamATan2
from trm_kaggle.optim.ema import EMA
from trm_kaggle.optim.lion import Lion
from trm_kaggle.optim.sign_sgd import SignSGD
from trm_kaggle.progress import tqdm
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.amp import LossScaler
from trm_kaggle.train.metrics import METRICS_FILE, drop_metrics_after, read_metrics, shown
from trm_kaggle.train.memory import MemoryWatch, is_out_of_memory, memory_aware_micro_batch, out_of_memory_error
from trm_kaggle.train.runtime import Runtime, all_reduce_, broadcast_model_, dtype_name, setup_runtime
from trm_kaggle.train.schedules import cycles_at, exploration_at, lr_at_step, total_train_steps
from trm_kaggle.train.settings import RESUMABLE_CHANGES, default_run_dir
from trm_kaggle.train.stages import StagePlan
from trm_kaggle.train.stops import EvaluationCut, StopControl, expected_eval_seconds
from trm_kaggle.train.step_guard import StepGuard, keep_carries

log = logging.getLogger(__name__)

# Devices whose steady-state training step runs without a host read: the finite check decided on the device
# (`trm_kaggle.train.step_guard`), exploration draws made there, the puzzle rows' update without `unique()`.
# On a CPU a host read costs nothing, and a skipped step keeps its step number there (as it always has).
SYNC_FREE_DEVICES = ("cuda",)


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    epoch: float
    metrics: dict[str, float] = field(default_factory=dict)
    eval_metrics: dict[str, float] = field(default_factory=dict)
    examples_per_second: float = 0.0
    parameters: ParameterCount | None = None
    is_main: bool = True  # rank 0 (the replica that logs and saves)
    start_step: int = 0  # the step this call began at (> 0: it resumed the run)
    stopped_by: str = ""  # why training ended before its last step ("the time limit", ...); "" when it got there
    already_done: str = ""  # the run had reached its last step before this call: what that step is (nothing trained)

    @property
    def new_steps(self) -> int:
        """Optimizer steps this call took."""
        return self.step - self.start_step

    def summary(self) -> str:
        """What a person wants to read when training ends (metrics under their exact names)."""
        m = self.metrics
        text = f"model: {self.parameters}\n" if self.parameters else ""
        last = (f"loss {m.get('loss', float('nan')):.4f}, exact accuracy (train batches, halted rows) "
                f"{shown(m.get('exact_accuracy'))}")
        if self.already_done:
            text += (f"already done at step {self.step} ({self.epoch:.2f} epochs): {self.already_done}; nothing "
                     f"trained, metrics.jsonl unchanged; last logged {last}; run directory {self.run_dir}")
        else:
            steps = (f"{self.step} steps" if not self.start_step else
                     f"{self.new_steps} new steps, resuming at step {self.start_step}, to step {self.step}")
            text += (f"trained {steps} ({self.epoch:.2f} epochs) at {self.examples_per_second:.1f} examples/s"
                     + (f", stopped by {self.stopped_by}" if self.stopped_by else "")
                     + f"; last {last}; run directory {self.run_dir}")
        if self.eval_metrics:
            text += (f"\ntest split: exact accuracy {self.eval_metrics['eval_exact_accuracy']:.3f} over "
                     f"{self.eval_metrics['eval_examples']} examples (per augmented example; not the ARC Prize score)")
        return text


def build_model(cfg: TrainConfig, loader: PuzzleLoader, rt: Runtime) -> TinyRecursiveModel:
    meta = loader.metadata
    model = TinyRecursiveModel(cfg.arch, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers,
                               forward_dtype=rt.dtype, grad_checkpointing=cfg.grad_checkpointing)
    if cfg.load_checkpoint:
        load_initial_weights(model, cfg.load_checkpoint)
    return model.to(rt.device)


def load_initial_weights(model: TinyRecursiveModel, path: str) -> None:
    """Weights from one of our exports, our train states, or an upstream `step_<N>` file."""
    p = Path(path)
    if p.is_dir():
        _, state = read_export(p)
    elif ckpt.is_state_file(p):
        state = ckpt.load_train_state(p)["model"]
    else:
        load_upstream_checkpoint(model, p)
        return
    key = PUZZLE_EMB_KEY
    if key in state and model.puzzle_emb is not None and state[key].shape != model.puzzle_emb.weights.shape:
        state = dict(state)
        state[key] = resize_puzzle_embedding(state[key], model.puzzle_emb.weights.shape[0])
    fit_state_dict(model, state, str(path))


def make_optimizers(cfg: TrainConfig, model: TinyRecursiveModel, capturable: bool | None = None):
    """The weights' optimizer and the puzzle rows' SignSGD. `capturable`: step counts on the device (no host read
    per step; None: where the optimizer chooses, on the device for CUDA)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.freeze_weights:
        for p in params:
            p.requires_grad_(False)
        dense = None
    elif cfg.optimizer == "adamw":
        dense = torch.optim.AdamW(params, lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                                  capturable=bool(capturable) and bool(params) and params[0].is_cuda)
    elif cfg.optimizer == "lion":
        dense = Lion(params, lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    else:
        dense = AdamATan2(params, lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                          capturable=capturable)
    sparse = None
    if model.puzzle_emb is not None:
        sparse = SignSGD(model.puzzle_emb, lr=0.0, weight_decay=cfg.puzzle_emb_weight_decay)
    return dense, sparse


def optimizer_step(dense, sparse, active: torch.Tensor | None = None) -> None:
    """Apply a step's gradients: the weights' optimizer (its gradients then dropped) and the puzzle rows' (which
    keeps its own sparse gradients). Either may be None (frozen weights; a model without puzzle rows).
    `active` (0-dim bool on the device): False leaves the puzzle rows as they were (see StepGuard)."""
    if dense is not None:
        dense.step()
        dense.zero_grad(set_to_none=True)
    if sparse is not None:
        sparse.step(active=active)


def exploration_draws(seed: int, step: int, global_batch: int, halt_max_steps: int, rows: slice,
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Halting-exploration randomness for the rows `rows` of the global batch at `step`.

    Drawn from a generator keyed by (seed, step) over the whole global batch, so a
    row gets the same draw whatever the number of ranks or micro-batches and after a resume.
    On CUDA the generator is CUDA's and the draws are made there: nothing is copied from the
    host, so the step does not wait for a copy (CUDA's random stream is not the CPU's: the
    same seed draws other values on a CPU, the contract holds on each).
    """
    device = torch.device(device)
    where = device if device.type == "cuda" else torch.device("cpu")
    g = torch.Generator(device=where).manual_seed(seed * 1_000_003 + step)
    u = torch.rand(global_batch, generator=g, device=where)[rows]
    m = torch.randint(2, max(3, halt_max_steps + 1), (global_batch,), generator=g, dtype=torch.int32,
                      device=where)[rows]
    return u.to(device), m.to(device)


def _split(batch: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    n = next(iter(batch.values())).shape[0]
    return [{k: v[i:i + size] for k, v in batch.items()} for i in range(0, n, size)]


def _carry_state(carry: Carry) -> dict[str, Any]:
    return {"z_H": carry.z_H.cpu(), "z_L": carry.z_L.cpu(), "steps": carry.steps.cpu(), "halted": carry.halted.cpu(),
            "current_data": {k: v.cpu() for k, v in carry.current_data.items()}}


def _carry_tensors(carry: Carry) -> list[torch.Tensor]:
    return [carry.z_H, carry.z_L, carry.steps, carry.halted, *carry.current_data.values()]


def _carry_from_tensors(ts: list[torch.Tensor], like: Carry) -> Carry:
    return Carry(ts[0], ts[1], ts[2], ts[3], dict(zip(like.current_data, ts[4:])))


def _carry_from_state(s: dict[str, Any], device: torch.device) -> Carry:
    return Carry(s["z_H"].to(device), s["z_L"].to(device), s["steps"].to(device), s["halted"].to(device),
                 {k: v.to(device) for k, v in s["current_data"].items()})


class MetricLog:
    """metrics.jsonl in the run directory, plus optional TensorBoard / W&B (offline)."""

    def __init__(self, run_dir: Path, cfg: TrainConfig, enabled: bool):
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        self.tb = self.wandb = None
        if not enabled:
            return
        self.check(cfg)
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        if cfg.wandb:
            import os

            import wandb

            os.environ.setdefault("WANDB_MODE", "offline")
            self.wandb = wandb.init(project=cfg.project_name or "trm_kaggle", name=cfg.run_name,
                                    dir=str(run_dir), config=cfg.model_dump())

    @staticmethod
    def check(cfg: TrainConfig) -> None:
        """TRMError when a logger the settings ask for cannot be imported (checked before the run folder is made)."""
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                raise TRMError("tensorboard=True needs the tensorboard package (pip install tensorboard)") from None
        if cfg.wandb:
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise TRMError("wandb=True needs the wandb package (pip install wandb)") from None

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        append_line(self.path, json.dumps(record))
        step = record.get("step", 0)
        for k, v in record.items():
            if isinstance(v, (int, float)) and k != "step":
                if self.tb:
                    self.tb.add_scalar(k, v, step)
        if self.wandb:
            self.wandb.log(record, step=step)

    def close(self) -> None:
        if self.tb:
            self.tb.close()
        if self.wandb:
            self.wandb.finish()


@torch.no_grad()
def evaluate_split(model: TinyRecursiveModel, cfg: TrainConfig, rt: Runtime, batch_size: int | None = None
                   ) -> dict[str, float]:
    """Exact accuracy of the test split's examples after halt_max_steps ACT steps.

    This is per-example accuracy on the (augmented) test split, not the ARC score:
    `trm-kaggle evaluate` votes over augmentations and reports pass@K / the ARC Prize score.
    The examples run through a fixed batch (`ContinuousRollout`); only the last step's logits are decoded.
    """
    loader = PuzzleLoader(cfg.data_paths_test or cfg.data_paths, "test", batch_size or cfg.global_batch_size,
                          seed=cfg.seed, rank=rt.rank, world_size=rt.world_size)
    local_batch = (batch_size or cfg.global_batch_size) // rt.world_size
    slots = local_batch if rt.device.type == "xla" else balanced_slots(
        math.ceil(loader.num_examples / rt.world_size), local_batch)
    rollout = ContinuousRollout(model, slots, cfg.arch.halt_max_steps, device=rt.device)
    source = ({k: item.batch[k][:item.num_real] for k in ("inputs", "labels", "puzzle_identifiers")}
              for item in loader)
    was_training = model.training
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=rt.device)
    for done in rollout.run(source):
        labels = done.data["labels"]
        valid = labels != IGNORE_LABEL_ID
        counts = valid.sum(-1)
        right = (valid & (done.tokens.long() == labels.long())).sum(-1)
        real = counts > 0  # rows with a label to score (padding has none)
        totals += torch.stack([real.sum().double(), (real & (right == counts)).sum().double(),
                               torch.where(real, right / counts.clamp_min(1), 0.0).sum().double(),
                               torch.where(real, done.steps, 0).sum().double()])
    if rt.distributed:
        all_reduce_([totals])
    if rt.device.type == "xla":
        xla.step_boundary()  # XLA: run the reduction before the host reads it
    model.train(was_training)
    count, exact, token, steps = totals.tolist()  # one host read
    n = max(1.0, count)
    return {"eval_examples": int(count), "eval_exact_accuracy": exact / n, "eval_token_accuracy": token / n,
            "eval_steps": steps / n}


class TrainProgress:
    """The training bar. Bounded by steps only, it counts steps. With a deadline (`time_limit`, or the
    kernel's budget) it counts seconds: elapsed against whichever comes first, the deadline or the last step
    at the pace so far, so a time-bounded run never shows the schedule's step total and its ETA."""

    def __init__(self, stop_at: int, step: int, deadline: float | None, enabled: bool):
        self.stop_at, self.step0, self.deadline = stop_at, step, deadline
        self.t0 = time.monotonic()
        self.extra: dict[str, str] = {}
        if deadline is None:
            self.bar = tqdm(total=stop_at, initial=step, disable=not enabled, unit="step", dynamic_ncols=True)
        else:
            self.budget = max(0.0, deadline - self.t0)
            self.bar = tqdm(total=round(self.budget, 1), disable=not enabled, unit="s", dynamic_ncols=True,
                            bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
            self.note(budget=f"{self.budget:.0f} s")

    def note(self, **values: str) -> None:
        """Metrics shown beside the bar."""
        self.extra.update(values)
        self.bar.set_postfix(self.extra, refresh=False)

    def advance(self, step: int) -> None:
        if self.deadline is None:
            self.bar.update()
            return
        elapsed = time.monotonic() - self.t0
        pace = elapsed / max(1, step - self.step0)  # seconds per step so far
        by_steps = pace * (self.stop_at - self.step0)
        self.bar.total = round(min(self.budget, by_steps), 1)
        self.bar.n = round(min(elapsed, self.bar.total), 1)
        # the step total only where the steps, not the deadline, are expected to end the run
        self.note(step=f"{step}/{self.stop_at}" if by_steps <= self.budget else str(step))
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def train(cfg: TrainConfig, *, on_step: Callable[[int, dict], None] | None = None,
          on_eval: Callable[[int, dict], bool | None] | None = None, deadline: float | None = None,
          banner: bool = True, signals: bool = False) -> TrainResult:
    """Train (or resume) the run in `default_run_dir(cfg)`, as its only writer (see `_train`)."""
    with contextlib.ExitStack() as held:
        return _train(cfg, held, on_step=on_step, on_eval=on_eval, deadline=deadline, banner=banner,
                      signals=signals)


def _train(cfg: TrainConfig, held: contextlib.ExitStack, *, on_step: Callable[[int, dict], None] | None = None,
           on_eval: Callable[[int, dict], bool | None] | None = None, deadline: float | None = None,
           banner: bool = True, signals: bool = False) -> TrainResult:
    """Train (or resume) the run in `default_run_dir(cfg)`; returns the last metrics.

    `on_step(step, metrics)` is called at every log interval; `on_eval(step, eval_metrics)` after each
    evaluation, and training stops (saving its state) when it returns True. `deadline` (a time.monotonic()
    value: a step of the wall clock neither cuts nor stretches the run) stops training before a step that would start after it, saving the state as usual.
    `banner`: print the device and model lines first (with `progress`); a caller that trains many small
    runs in a row (test-time training, one per task) prints them once itself.
    A train state is saved every `cfg.save_every_s` seconds and when the run ends. With `signals` (the
    `train` command, the Kaggle session) SIGINT and SIGTERM save a state and end the run with
    `TrainingInterrupted` (see `trm_kaggle.train.stops`); an evaluation that would end after the deadline is
    skipped, with a warning.
    A run that had already reached its last step is left as it is (`TrainResult.already_done`)."""
    if not cfg.data_paths:
        raise TRMError("no data: set data_paths=[DIR] (a dataset built with trm-kaggle build-*)")
    if cfg.time_limit is not None:
        limit = time.monotonic() + cfg.time_limit
        deadline = limit if deadline is None else min(deadline, limit)
    rt = setup_runtime(cfg)
    run_dir = default_run_dir(cfg)
    if rt.is_main:  # a folder another command writes: refused at once (the lock itself is taken below)
        refuse_if_held(run_dir)
    if rt.is_main and cfg.progress and banner:
        print(f"trm-kaggle train: device {rt.device}, {rt.dtype} ({rt.dtype_reason}); "
              f"{rt.world_size} replica(s)", file=sys.stderr, flush=True)
    if rt.restart and rt.local_rank == 0:  # a worker of this node failed: said whatever the progress setting
        log.warning("torchrun restarted this node's worker group (restart %d of --max-restarts); the run resumes "
                    "from its newest train state", rt.restart)

    loader = PuzzleLoader(cfg.data_paths, "train", cfg.global_batch_size, seed=cfg.seed, rank=rt.rank,
                          world_size=rt.world_size, pin_memory=rt.device.type == "cuda")  # copies that do not wait
    local_batch = cfg.global_batch_size // rt.world_size
    meta = loader.metadata
    micro = memory_aware_micro_batch(cfg, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
                                     num_puzzle_identifiers=meta.num_puzzle_identifiers, num_puzzles=meta.total_puzzles,
                                     device=rt.device, dtype=rt.dtype, local_batch=local_batch,
                                     world_size=rt.world_size, log=log if rt.is_main else None)
    if local_batch % micro:
        raise TRMError(f"micro_batch_size {micro} must divide the per-rank batch {local_batch}")
    on_xla = rt.device.type == "xla"
    with xla.one_at_a_time() if on_xla else contextlib.nullcontext():
        if on_xla:  # XLA: thread replicas (TPU v2/v3 cores) share torch's generator; each seeds and draws in turn
            torch.manual_seed(cfg.seed)
        model = build_model(cfg, loader, rt)
    if rt.is_main and cfg.progress and banner:
        print(f"trm-kaggle train: {model.parameter_count()}", file=sys.stderr, flush=True)
    if rt.distributed:
        broadcast_model_(model, rt.rank)
    dense, sparse = make_optimizers(cfg, model, capturable=True if rt.device.type in SYNC_FREE_DEVICES else None)
    ema = EMA(model, cfg.ema_rate) if cfg.ema else None
    fingerprint = ckpt.dataset_fingerprint(cfg.data_paths)
    steps_per_epoch = max(1e-9, loader.batches_per_epoch)
    # the schedule's length (upstream's formula); max_steps only stops early
    total_steps = total_train_steps(cfg.epochs, loader.total_groups, loader.metadata.mean_puzzle_examples,
                                    cfg.global_batch_size)
    stop_at = min(total_steps, cfg.max_steps) if cfg.max_steps else total_steps
    stages = StagePlan.from_config(cfg, loader, stop_at) if cfg.stages else None
    if stages is not None:
        loader.set_group_filter(stages.group_mask_at)
        if rt.is_main:
            log.info("data curriculum: %s", stages.describe())
    loader.check_batch_fills()
    MetricLog.check(cfg)
    if rt.is_main:  # one writer per run directory, taken after every check that can refuse: nothing is made before
        held.enter_context(directory_lock(run_dir, "training"))

    step, carries = 0, None
    if rt.is_main:  # temporaries of a writer killed mid-write (a worker group restarted by torchrun, a kill -9)
        for leftover in ckpt.remove_stale_temporaries(run_dir):
            log.info("removed %s, left by a write that was interrupted", leftover.name)
    newest = _state_to_resume(run_dir, rt)
    if newest is not None:
        path, state = newest
        step, carries = _resume(path, state, cfg, rt, model, dense, sparse, ema, loader, fingerprint)
        if step >= stop_at:  # run again after it ended: nothing to train, and nothing is rewritten
            return _already_done(cfg, run_dir, step, stop_at, total_steps, steps_per_epoch, model, rt)
        if carries is not None and len(carries) != local_batch // micro:  # another micro-batch size now
            carries = _resplit(carries, micro)
        if rt.is_main:
            log.info("resuming %s from step %d", run_dir, step)
            drop_metrics_after(run_dir / METRICS_FILE, step)
    elif rt.is_main:  # a fresh start: records of a process killed before its first state would be duplicates
        drop_metrics_after(run_dir / METRICS_FILE, 0)
    scaler = LossScaler(rt.dtype, rt.device)  # float16: loss scaling (after a resume settled the dtype)
    if newest is not None:
        scaler.load_state_dict(newest[1].get("amp"))
    # torch.compile by region (one block for every layer, the ACT step around it, the loss), never the whole model
    forward, loss_fn = model, act_loss
    if compile_model(model, cfg.compile, rt.device, cfg.cuda_graphs):
        loss_fn = model.compiled(act_loss)
        load_compile_cache(run_dir, rt.device)  # what an earlier process of this run compiled (ours only)
    cache_graphs = compiled_graphs() if model.is_compiled and rt.is_main else None  # saved when this grows
    # the steady-state step without a host read (see SYNC_FREE_DEVICES); float16's loss scaler reads its own
    guard = StepGuard(model, dense, ema) if rt.device.type in SYNC_FREE_DEVICES and not scaler.enabled else None
    metric_log = MetricLog(run_dir, cfg, enabled=rt.is_main)
    if rt.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.json", cfg.model_dump_json(indent=2))
        ckpt.claim_run_id(run_dir, newest[1] if newest is not None else None)  # the id every state records

    model.train()
    sums: dict[str, float] = {}
    result = TrainResult(run_dir, step, 0.0, parameters=model.parameter_count(), is_main=rt.is_main,
                         start_step=step)
    bar = TrainProgress(stop_at, step, deadline, enabled=cfg.progress and rt.is_main)
    t_start, step_start = time.perf_counter(), step
    memory_watch = MemoryWatch(rt.device, log if rt.is_main else None)
    last_eval_epoch = math.floor(step / steps_per_epoch / cfg.eval_interval) if cfg.eval_interval else None
    batches = iter(loader)
    position = loader  # what a train state records of the data stream
    compile_watch = None
    if on_xla:  # XLA: batches go to the device ahead of use; compilations are counted per step
        batches = position = xla.DeviceBatches(loader, rt.device)
        compile_watch = xla.CompileWatch(warn=rt.is_main)
    # per step: (its index, its metrics, its finite verdict when decided on the device), read on the host once per
    # log interval
    pending: list[tuple[int, torch.Tensor, torch.Tensor | None]] = []
    nonfinite = NonFiniteSteps(cfg.max_nonfinite_steps)
    control = held.enter_context(StopControl(
        rt, save_every_s=cfg.save_every_s, deadline=deadline, every=cfg.log_interval, signals=signals,
        deadline_name="the time limit" if cfg.time_limit is not None else "the deadline"))
    last_eval_s = _last_evaluation_seconds(run_dir) if deadline is not None and cfg.eval_interval else None
    test_batches = None  # counted when an evaluation first needs an estimate of its length
    try:
        while step < stop_at:
            decision = control.poll(step)
            if decision.stop:
                result.stopped_by = decision.stop
                if control.signum is None:
                    log.info("time budget reached at step %d: stopping training", step)
                break
            if decision.save:  # a timed save: a kill loses at most save_every_s of training
                _save(run_dir, step, cfg, rt, model, dense, sparse, ema, position, carries, fingerprint, scaler)
                control.saved(step)
                log.info("step %d: train state saved (save_every_s=%g)", step, cfg.save_every_s)
            if compile_watch is not None:
                compile_watch.begin_step()
            batch = next(batches)  # the training stream is endless; the loader counts epochs
            batch = {k: batch[k].to(rt.device, non_blocking=True) for k in ("inputs", "labels", "puzzle_identifiers")}
            epoch = step / steps_per_epoch

            # schedules: lr (of optimizer step `step + 1`, as upstream), recursion curriculum, halting exploration
            # (a data curriculum scales both by its current stage's factor)
            factor = stages.lr_factor(step) if stages is not None else 1.0
            lr = factor * lr_at_step(step, cfg.lr, cfg.lr_warmup_steps, total_steps, cfg.lr_min_ratio)
            emb_lr = factor * lr_at_step(step, cfg.puzzle_emb_lr, cfg.lr_warmup_steps, total_steps, cfg.lr_min_ratio)
            if dense is not None:
                for g in dense.param_groups:
                    g["lr"] = lr
            if sparse is not None:
                for g in sparse.param_groups:
                    g["lr"] = emb_lr
            H_cycles, L_cycles = cycles_at(cfg, epoch)
            if (H_cycles, L_cycles) != (model.H_cycles, model.L_cycles):
                model.set_recursion(H_cycles=H_cycles, L_cycles=L_cycles)
            model.halt_exploration_prob = exploration_at(cfg, epoch)

            # forward/backward over micro-batches; each keeps its own ACT carry
            if carries is None:
                carries = [model.initial_carry(mb) for mb in _split(batch, micro)]
            carries_before = carries  # what a skipped (non-finite) step leaves in place
            while True:
                try:
                    carries, metrics = _accumulate(forward, model, batch, carries, micro, step, cfg, rt, local_batch,
                                                   scaler, loss_fn)
                    break
                except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:  # any device's allocator
                    if not is_out_of_memory(e):
                        raise
                    if not cfg.auto_batch or micro == 1:
                        raise out_of_memory_error(cfg, micro, rt.device, f"in training step {step + 1}") from None
                    # nothing was applied yet: drop the partial gradients, halve the micro-batch, retry
                    micro = _largest_divisor_at_most(local_batch, micro // 2)
                    model.zero_grad(set_to_none=True)
                    if model.puzzle_emb is not None:
                        model.puzzle_emb.clear()
                    if rt.device.type == "cuda":
                        torch.cuda.empty_cache()
                    carries = _resplit(carries, micro)
                    log.warning("out of memory: retrying with micro_batch_size=%d (gradient accumulation keeps "
                                "the global batch)", micro)

            # gradients of all ranks, then the optimizer steps
            if rt.distributed:
                all_reduce_([p.grad for p in model.parameters() if p.grad is not None] + [metrics])
            verdict = None  # the step's finite check when decided on the device
            if scaler.enabled:
                # float16: inf/nan gradients are the loss scale's business (the step is skipped whole and the scale
                # lowered); a loss that is itself not finite is no overflow a lower scale mends: it counts toward
                # max_nonfinite_steps like any non-finite step
                stepped = scaler.step(dense, sparse, model)
                if dense is not None:
                    dense.zero_grad(set_to_none=True)
                if nonfinite.skip(stepped or bool(torch.isfinite(metrics[0])), step):
                    log.warning("step %d: the loss is not finite (%d in a row, the run stops at "
                                "max_nonfinite_steps=%d)", step + 1, nonfinite.in_a_row, nonfinite.limit)
            elif guard is not None and guard.save():
                # decided on the device: the step's updates run, and are undone where it was not finite; the host
                # reads the verdict with the metrics (step_guard.py)
                verdict = all_finite([metrics[0]] + [p.grad for p in model.parameters() if p.grad is not None])
                optimizer_step(dense, sparse, active=verdict)
                if ema is not None:
                    ema.update(model)
                guard.undo_unless(verdict)
                carries = keep_carries(verdict, carries, carries_before if len(carries_before) == len(carries)
                                       else _resplit(carries_before, micro))
                stepped = False  # the EMA has been updated (and undone where it had to be)
            else:
                # a NaN or inf loss or gradient: skip the step, stop after a bounded run of them (XLA: checked on
                # the logged loss, a host read per step would cut its graph)
                if not on_xla and nonfinite.skip(step_is_finite(model, metrics[0]), step):
                    _drop_gradients(model)
                    carries = carries_before if len(carries_before) == len(carries) else _resplit(carries_before,
                                                                                                    micro)
                    log.warning("step %d: the loss or the gradients are not finite; step skipped (%d in a row, the "
                                "run stops at max_nonfinite_steps=%d)", step + 1, nonfinite.in_a_row, nonfinite.limit)
                    continue
                optimizer_step(dense, sparse)
                stepped = True
            if ema is not None and stepped:
                ema.update(model)
            step += 1
            if cache_graphs is not None and compiled_graphs() != cache_graphs:  # something new compiled: keep it
                cache_graphs = compiled_graphs()
                save_compile_cache(run_dir, rt.device)
            if compile_watch is not None:
                compile_watch.end_step(step)  # XLA: the step boundary; warns when a step after the warm-up compiled

            # bookkeeping (a host read waits for the device: once per log interval, not per step)
            pending.append((step - 1, metrics, verdict))
            sums["steps_logged"] = sums.get("steps_logged", 0) + 1
            # the last interval is logged too when the deadline ends the run (the loop stops before the next step)
            if step % cfg.log_interval == 0 or step == stop_at or (deadline is not None and time.monotonic() >= deadline):
                _read_pending(pending, sums, nonfinite)
                pending = []
            if not pending and "loss" in sums:  # just read (an interval whose steps were all skipped joins the next)
                record = _summarise(sums, step, step / steps_per_epoch, lr, cfg.global_batch_size)
                if on_xla and not math.isfinite(record["loss"]):  # XLA reads the loss once per interval
                    nonfinite.in_a_row += 1
                    nonfinite.stop(step - 1)
                if stages is not None:
                    record["stage"] = stages.index_at(step - 1) + 1  # the stage of the step just taken
                elapsed = time.perf_counter() - t_start
                record["examples_per_s"] = (step - step_start) * cfg.global_batch_size / max(elapsed, 1e-9)
                record["elapsed_s"] = elapsed
                record["start_step"] = step_start  # where this process began: readers join resumed runs' clocks
                record.update(memory_watch.sample())
                record.update(scaler.record())
                if compile_watch is not None:  # XLA: compilations so far, compile and execute seconds
                    record.update(compile_watch.record())
                    if rt.is_main and cfg.progress:
                        bar.write(compile_watch.describe(step, record), file=sys.stderr)
                metric_log.write(record)
                result.metrics = record
                mem = record.get("cuda_max_allocated_gb", record.get("peak_rss_gb", 0.0))
                bar.note(loss=f"{record['loss']:.3f}", exact=shown(record.get("exact_accuracy")), lr=f"{lr:.1e}",
                         ex_s=f"{record['examples_per_s']:.0f}", mem=f"{mem:.2f}G")
                sums = {}
                if on_step:
                    on_step(step, record)
            bar.advance(step)

            # evaluation and checkpoint every eval_interval epochs
            if cfg.eval_interval:
                e = math.floor(step / steps_per_epoch / cfg.eval_interval)
                if e > last_eval_epoch:
                    last_eval_epoch = e
                    expected = None
                    if deadline is not None:  # an evaluation must end before the deadline, or not start
                        if last_eval_s is None and test_batches is None:
                            test_batches = len(PuzzleLoader(cfg.data_paths_test or cfg.data_paths, "test",
                                                            cfg.global_batch_size, seed=cfg.seed, prefetch=0))
                        expected = expected_eval_seconds(last_eval_s, test_batches, cfg.arch.halt_max_steps,
                                                         (time.perf_counter() - t_start) / (step - step_start))
                    if expected is not None and not control.eval_fits(expected):
                        log.warning("step %d: evaluation skipped: it would end after %s (about %.0f s needed, "
                                    "%.0f s left)", step, control.deadline_name, expected, deadline - time.monotonic())
                        continue
                    t_eval = time.perf_counter()
                    try:
                        with control.cuttable():  # a stop signal cuts it short (it changes no weight)
                            result.eval_metrics = _evaluate(model, ema, cfg, rt)
                    except EvaluationCut as cut:  # the last complete evaluation's metrics stand
                        model.train()
                        log.warning("step %d: evaluation cut short by %s", step, cut)
                        break
                    last_eval_s = time.perf_counter() - t_eval
                    metric_log.write({"step": step, "epoch": step / steps_per_epoch, **result.eval_metrics,
                                      "evaluation_s": round(last_eval_s, 3),
                                      **(compile_watch.record() if compile_watch is not None else {})})  # XLA: eval compilations
                    if cfg.checkpoint_every_eval:
                        _save(run_dir, step, cfg, rt, model, dense, sparse, ema, position, carries, fingerprint, scaler)
                        control.saved(step)
                    if on_eval is not None and on_eval(step, result.eval_metrics):
                        result.stopped_by = "the evaluation callback"
                        break
    finally:
        bar.close()
        memory_watch.close()
        if on_xla:
            batches.close()
    if control.saved_step != step:  # the state of the last step (a stop, the deadline, the schedule's end)
        _save(run_dir, step, cfg, rt, model, dense, sparse, ema, position, carries, fingerprint, scaler)
        control.saved(step)
    metric_log.close()
    elapsed = time.perf_counter() - t_start
    result.step, result.epoch = step, step / steps_per_epoch
    result.examples_per_second = (step - step_start) * cfg.global_batch_size / max(elapsed, 1e-9)
    if control.signum is not None:  # SIGINT or SIGTERM: saved above; the caller stops as after Ctrl-C
        raise control.interrupted(step, ckpt.state_path(run_dir, step))
    return result


def _last_evaluation_seconds(run_dir: Path) -> float | None:
    """How long the run's last evaluation took (metrics.jsonl's `evaluation_s`), None before the first."""
    evals = read_metrics(run_dir)[1] if (run_dir / METRICS_FILE).is_file() else []
    timed = [r["evaluation_s"] for r in evals if isinstance(r.get("evaluation_s"), (int, float))]
    return float(timed[-1]) if timed else None


def _already_done(cfg, run_dir, step, stop_at, total_steps, steps_per_epoch, model, rt) -> TrainResult:
    """The result of a run that had ended before this call: its last logged metrics, read, not rewritten."""
    records, evals = read_metrics(run_dir)
    if cfg.max_steps and stop_at == cfg.max_steps and stop_at < total_steps:
        why = f"max_steps={cfg.max_steps} (raise it to train further)"
    else:
        why = (f"the end of its schedule ({total_steps} steps for epochs={cfg.epochs}; a longer schedule needs "
               "another checkpoint_path)")
    evals = [r for r in evals if r["step"] == step]
    last = {k: v for k, v in records[-1].items() if k != "wall_s"} if records else {}  # as the run logged it
    return TrainResult(run_dir, step, step / steps_per_epoch, metrics=last,
                       eval_metrics={k: v for k, v in evals[-1].items() if k.startswith("eval_")} if evals else {},
                       parameters=model.parameter_count(), is_main=rt.is_main, start_step=step, already_done=why)


def _accumulate(forward, model, batch, carries, micro, step, cfg, rt, local_batch, scaler=None, loss_fn=act_loss):
    """Forward + backward of every micro-batch of `batch`; returns the new carries and summed metrics."""
    metrics, new_carries = None, []
    for k, mb in enumerate(_split(batch, micro)):
        first = rt.rank * local_batch + k * micro
        expl = exploration_draws(cfg.seed, step, cfg.global_batch_size, cfg.arch.halt_max_steps,
                                 slice(first, first + micro), rt.device)
        carry, out = forward(carries[k], mb, exploration=expl)
        loss, m = loss_fn(out, carry.current_data["labels"], carry.halted, carry.steps, cfg.arch.loss_type)
        scaled = loss / cfg.global_batch_size
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        new_carries.append(carry)
        m = torch.stack([loss.detach().float()] + [m[n].float() for n in _METRIC_NAMES])
        metrics = m if metrics is None else metrics + m
    return new_carries, metrics


def _read_pending(pending: list, sums: dict[str, float], nonfinite: NonFiniteSteps) -> None:
    """Add the pending steps' metrics to `sums` with one host read. A step whose finite check was decided on the
    device carries its verdict: the verdicts are replayed through `nonfinite` in step order (its warning per
    skipped step, its stop), and a skipped step's metrics are left out."""
    if not pending:
        return
    metrics = torch.stack([m for _, m, _ in pending])
    verdicts = [v for _, _, v in pending if v is not None]
    flat = torch.cat([metrics.flatten()] + ([torch.stack(verdicts).to(metrics.dtype)] if verdicts else [])).tolist()
    width = metrics.shape[1]
    decided = iter(flat[len(pending) * width:])
    for i, (at, _, verdict) in enumerate(pending):
        if verdict is not None and nonfinite.skip(next(decided) > 0, at):
            log.warning("step %d: the loss or the gradients were not finite; step skipped (%d in a row, the run "
                        "stops at max_nonfinite_steps=%d)", at + 1, nonfinite.in_a_row, nonfinite.limit)
            sums["steps_logged"] -= 1
            continue
        for key, v in zip(["loss"] + _METRIC_NAMES, flat[i * width:(i + 1) * width]):
            sums[key] = sums.get(key, 0.0) + v


def _drop_gradients(model) -> None:
    """Forget a skipped step's gradients: the weights' and the puzzle rows' (the sparse optimizer's)."""
    model.zero_grad(set_to_none=True)
    if model.puzzle_emb is not None:
        model.puzzle_emb.clear()


def _largest_divisor_at_most(n: int, k: int) -> int:
    return max(d for d in range(1, max(1, k) + 1) if n % d == 0)


def _resplit(carries: list[Carry], size: int) -> list[Carry]:
    """The same rows' carries, cut into micro-batches of `size` rows."""
    z_H = torch.cat([c.z_H for c in carries])
    z_L = torch.cat([c.z_L for c in carries])
    steps = torch.cat([c.steps for c in carries])
    halted = torch.cat([c.halted for c in carries])
    data = {k: torch.cat([c.current_data[k] for c in carries]) for k in carries[0].current_data}
    return [Carry(z_H[i:i + size], z_L[i:i + size], steps[i:i + size], halted[i:i + size],
                  {k: v[i:i + size] for k, v in data.items()}) for i in range(0, len(steps), size)]


_METRIC_NAMES = ["count", "lm_loss", "q_halt_loss", "token_accuracy", "exact_accuracy", "q_halt_accuracy", "steps"]


def _summarise(sums: dict[str, float], step: int, epoch: float, lr: float, global_batch: int) -> dict[str, float]:
    n = sums.get("count", 0.0)  # rows that halted in the interval
    record = {"step": step, "epoch": epoch, "lr": lr,
              "loss": sums["loss"] / max(1, global_batch) / max(1, sums["steps_logged"])}
    if n > 0:  # averages over the halted rows (HALTED_ROW_METRICS): with none, no value rather than a false 0
        record.update({"lm_loss": sums["lm_loss"] / n, "q_halt_loss": sums["q_halt_loss"] / n,
                       "token_accuracy": sums["token_accuracy"] / n, "exact_accuracy": sums["exact_accuracy"] / n,
                       "q_halt_accuracy": sums["q_halt_accuracy"] / n, "act_steps": sums["steps"] / n})
    record["halted_examples"] = int(n)
    return record


def _evaluate(model, ema, cfg, rt) -> dict[str, float]:
    if ema is None:
        return evaluate_split(model, cfg, rt)
    with ema.applied(model):
        metrics = evaluate_split(model, cfg, rt)
    if rt.device.type == "xla":
        xla.step_boundary()  # XLA: restore the live weights now, not inside the next step's graph
    return metrics


def _state_to_resume(run_dir: Path, rt: Runtime) -> tuple[Path, dict[str, Any]] | None:
    """(path, state) every rank resumes from, or None when the run starts fresh.

    Rank 0 (the only writer) picks the newest state that loads, setting aside a corrupt newer one, and every
    rank then reads that very file: ranks never resume from different steps, whatever each of them lists (a
    state being renamed into place, a shared filesystem that shows new files late). On several hosts
    checkpoint_path must be a directory all of them see; a rank that cannot read the chosen state (or finds
    states where rank 0 finds none) stops every rank with the same error instead of training diverged replicas.
    """
    if not rt.distributed:
        return ckpt.load_newest_state(run_dir, quarantine=True) if ckpt.list_states(run_dir) else None
    chosen, problem, code = None, None, 0  # code (rank 0's): the chosen step, -1 for no state, -2 for none readable
    if rt.is_main:
        code = -1
        if ckpt.list_states(run_dir):
            try:
                chosen = ckpt.load_newest_state(run_dir, quarantine=True)
                code = int(chosen[1]["step"])
            except TRMError as err:
                problem, code = str(err), -2
    code = _sum_over_ranks(code, rt)  # every other rank adds 0: rank 0's code, on every rank
    if code == -2:
        problem = problem or f"rank 0 finds no readable train state in {run_dir}"
    elif code == -1:
        if ckpt.list_states(run_dir):
            problem = f"rank {rt.rank} finds train states in {run_dir} where rank 0 finds none"
    elif not rt.is_main:
        try:
            path = ckpt.state_path(run_dir, code)
            chosen = path, ckpt.load_train_state(path)
        except TRMError as err:
            problem = f"rank {rt.rank}: {err}"
    able = _sum_over_ranks(0 if problem else 1, rt)
    if able != rt.world_size:
        raise TRMError((problem + "; " if problem else "") +
                       f"{rt.world_size - able} of {rt.world_size} ranks cannot resume from the state rank 0 chose in "
                       f"{run_dir}: put checkpoint_path on a filesystem every host sees (rank 0 writes the states; "
                       "every rank reads them to resume)")
    return chosen


def _sum_over_ranks(value: int, rt: Runtime) -> int:
    total = torch.tensor([value], dtype=torch.int64).to(rt.device)
    all_reduce_([total])
    if rt.device.type == "xla":
        xla.step_boundary()  # XLA: run the reduction before the host reads it
    return int(total.item())


def _gather_carries(carries: list[Carry], rt: Runtime) -> list[Any]:
    if rt.distributed and rt.device.type == "xla" and not xla.host_collectives():  # XLA: in-graph all-gather
        flat = [t for c in carries for t in _carry_tensors(c)]
        per_rank = xla.gather_to_cpu(flat, rt.world_size)
        n = len(flat) // len(carries)
        return [[_carry_state(_carry_from_tensors(ts[i * n:(i + 1) * n], carries[0])) for i in range(len(carries))]
                for ts in per_rank]
    local = [_carry_state(c) for c in carries]
    if not rt.distributed:
        return [local]
    everyone = [None] * rt.world_size
    dist.all_gather_object(everyone, local)
    return everyone


def _save(run_dir, step, cfg, rt, model, dense, sparse, ema, loader, carries, fingerprint, scaler=None) -> None:
    all_carries = _gather_carries(carries, rt) if carries is not None else None
    if not rt.is_main:
        return
    state = {
        "config": cfg.model_dump_json(),
        "dataset_fingerprint": fingerprint,
        "world_size": rt.world_size,
        "forward_dtype": dtype_name(rt.dtype),  # what "auto" resolved to: a resume keeps it
        "model_shape": {"seq_len": model.seq_len, "vocab_size": model.vocab_size,
                        "num_puzzle_identifiers": model.num_puzzle_identifiers},
        "model": model.state_dict(),
        "ema": ema.state_dict() if ema is not None else None,
        "optimizer": dense.state_dict() if dense is not None else None,
        "sparse_optimizer": sparse.state_dict() if sparse is not None else None,
        "rng_torch": torch.get_rng_state(),
        "loader": json.dumps(loader.state_dict()),
        "carries": all_carries,
        "amp": scaler.state_dict() if scaler is not None else None,  # float16's loss scale
    }
    ckpt.save_train_state(run_dir, step, state, cfg.checkpoint_keep)


def _resume(path, state, cfg, rt, model, dense, sparse, ema, loader, fingerprint):
    saved = TrainConfig.model_validate_json(state["config"])
    diffs = [k for k in TrainConfig.model_fields if k not in RESUMABLE_CHANGES and getattr(saved, k) != getattr(cfg, k)]
    if diffs:
        raise TRMError(f"{path.parent} holds a run with a different config ({', '.join(diffs)}); "
                       "resume with the same settings or choose another checkpoint_path")
    if state["dataset_fingerprint"] != fingerprint:
        raise TRMError(f"{path}: the dataset changed since this checkpoint (fingerprint "
                       f"{state['dataset_fingerprint']} != {fingerprint}); choose another checkpoint_path")
    saved_dtype = state.get("forward_dtype")
    if saved_dtype is not None and saved_dtype != dtype_name(rt.dtype) and cfg.arch.forward_dtype == "auto":
        # "auto" on a CPU is a timing; the run keeps the arithmetic it started with.
        log.info("resuming in the checkpoint's %s (forward_dtype=auto would pick %s here)", saved_dtype,
                 dtype_name(rt.dtype))
        rt.dtype = DTYPES[saved_dtype]
        model.forward_dtype = rt.dtype
    model.load_state_dict(state["model"])
    if ema is not None and state.get("ema") is not None:
        ema.load_state_dict(state["ema"])
    if dense is not None and state.get("optimizer") is not None:
        dense.load_state_dict(state["optimizer"])
    if sparse is not None and state.get("sparse_optimizer") is not None:
        sparse.load_state_dict(state["sparse_optimizer"])
    torch.set_rng_state(state["rng_torch"])
    loader.load_state_dict(json.loads(state["loader"]))
    carries = None
    saved_carries = state.get("carries")
    if saved_carries is not None and state.get("world_size") == rt.world_size:
        carries = [_carry_from_state(c, rt.device) for c in saved_carries[rt.rank]]
    elif saved_carries is not None:
        log.warning("world size changed since the checkpoint: ACT carries restart (results differ slightly)")
    return int(state["step"]), carries
