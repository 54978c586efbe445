"""Everything a training run does before its first step: check, build, resume, compile.

`prepare(cfg, ...)` returns a `Run`: the run's settings and clocks, its `TrainState` (resumed from the newest
train state in the run folder, if any) and the `StepSetup` every step shares. Every check that can refuse
runs before the run folder is made or locked: a refused run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch

from trm_kaggle import xla
from trm_kaggle.atomic import atomic_write_text
from trm_kaggle.config import TrainConfig
from trm_kaggle.data import PuzzleLoader, check_metadata
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import directory_lock, refuse_if_held
from trm_kaggle.model import apply_compile, compiled_graphs, load_compile_cache, save_compile_cache
from trm_kaggle.optim import EMA
from trm_kaggle.outputs import check_kept, writable_problem
from trm_kaggle.train import checkpoint as ckpt, nonfinite
from trm_kaggle.train.amp import LossScaler
from trm_kaggle.train.memory import memory_aware_micro_batch, micro_batch_problem
from trm_kaggle.train.metric_log import LogWindow, MetricLog
from trm_kaggle.train.metrics import METRICS_FILE, drop_metrics_after, read_metrics
from trm_kaggle.train.optimizers import make_optimizers
from trm_kaggle.train.result import TrainResult
from trm_kaggle.train.run_io import training_io
from trm_kaggle.train.runtime import Runtime, broadcast_model_, setup_runtime
from trm_kaggle.train.schedules import StepSchedule, checked_schedule, total_train_steps
from trm_kaggle.train.settings import default_run_dir
from trm_kaggle.train.stages import StagePlan
from trm_kaggle.train.state import TrainState, build_model, restore, save_state, state_to_resume
from trm_kaggle.train.step import StepRules, StepSetup
from trm_kaggle.wording import one_line

log = logging.getLogger(__name__)


@dataclass
class Run:
    """A prepared training run."""

    cfg: TrainConfig
    rt: Runtime
    run_dir: Path
    loader: PuzzleLoader
    state: TrainState
    step_setup: StepSetup  # what every step shares
    metric_log: MetricLog
    steps_per_epoch: float
    total_steps: int  # the schedule's length (upstream's formula)
    stop_at: int  # where this run stops: the schedule's end, or max_steps
    deadline: float | None  # a time.monotonic() value
    stages: StagePlan | None = None
    cache_graphs: int | None = None  # graphs compiled so far, where this process keeps a compile cache

    def schedule(self) -> StepSchedule:
        """The coming step's schedule (a data curriculum scales both rates by its stage's factor)."""
        step = self.state.step
        factor = self.stages.lr_factor(step) if self.stages is not None else 1.0
        return checked_schedule(self.step_setup.rules.schedule(self.cfg, step, step / self.steps_per_epoch,
                                                               self.total_steps, factor), step, self.cfg)

    def save(self, settled: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
        save_state(self.state, self.run_dir, self.cfg, self.rt, settled)

    def keep_compiled(self) -> None:
        """Save the compile cache when something new compiled (rank 0, a compiled run). Called only after a train
        state was saved, and skipped when the disk would then lack the room for the next state: a cache saves
        minutes of compiling, a state hours of training, so on a nearly full disk the state comes first."""
        if self.cache_graphs is None or compiled_graphs() == self.cache_graphs:
            return
        state = ckpt.state_path(self.run_dir, self.state.step)
        try:
            need, free = 2 * state.stat().st_size, shutil.disk_usage(self.run_dir).free
        except OSError:
            need, free = 0, 1
        if free < need:  # the next state (beside this one until the rotation) would not fit once a cache is there
            log.warning("compile cache not saved: %s free in %s, and the next train state needs %s",
                        _mib(free), self.run_dir, _mib(need))
            return
        self.cache_graphs = compiled_graphs()
        save_compile_cache(self.run_dir, self.rt.device)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def check_run_io(cfg: TrainConfig) -> None:
    """TRMError when the run cannot start on its files: no data, a run folder that is, or lies inside, a data path
    (it mixed the run's files into the dataset), or one that cannot be written at all (a file, a dangling link or
    /proc there was Python's own "File exists" or "No such file" once the run had started, naming no setting).
    For every caller (a notebook, the pipeline, test-time training), and `trm-kaggle torchrun` before its launch
    (each rank said it, with the launcher's lines after)."""
    if not cfg.data_paths:
        raise TRMError("no data: set data_paths=[DIR] (a dataset built with trm-kaggle build-*)")
    inputs, outputs = training_io(cfg, default_run_dir(cfg))
    check_kept(inputs, outputs)
    if problem := next(filter(None, map(writable_problem, outputs)), None):
        raise TRMError(problem)


def prepare(cfg: TrainConfig, held: contextlib.ExitStack, *, deadline: float | None, banner: bool,
            rules: StepRules | None = None) -> Run | TrainResult:
    """The run, ready for its first step; or the result of a run that had already ended (nothing to train)."""
    check_run_io(cfg)
    if cfg.time_limit is not None:
        limit = time.monotonic() + cfg.time_limit
        deadline = limit if deadline is None else min(deadline, limit)
    rt = setup_runtime(cfg)
    run_dir = default_run_dir(cfg)
    if rt.is_main:  # a folder another command writes: refused at once (the lock itself is taken below)
        refuse_if_held(run_dir)
    if rt.is_main and banner:  # which dtype and why: printed, or logged under --no-progress (shown with -v)
        line = (f"trm-kaggle train: device {rt.device}, {rt.dtype} ({rt.dtype_reason}); {rt.world_size} replica(s)"
                + (f"; {rt.threads}" if rt.threads else ""))
        if cfg.progress:
            print(line, file=sys.stderr, flush=True)
        else:
            log.info("%s", line)
    if rt.is_main and rt.threads:
        log.info("%s", rt.threads)
    if rt.restart and rt.local_rank == 0:  # a worker of this node failed: said whatever the progress setting
        log.warning("torchrun restarted this node's worker group (restart %d of --max-restarts); the run resumes "
                    "from its newest train state", rt.restart)

    # what `verify` refuses, refused in its words before the run folder is made: the train split's tokens are read by
    # the loader, the test split's here (read at the first evaluation, they would fail the run there, its steps lost)
    for path in cfg.data_paths:
        check_metadata(path, tokens=("test",))
    loader = PuzzleLoader(cfg.data_paths, "train", cfg.global_batch_size, seed=cfg.seed, rank=rt.rank,
                          world_size=rt.world_size, pin_memory=rt.device.type == "cuda")  # copies that do not wait
    for path in cfg.data_paths_test:
        try:  # read at the first evaluation: a path that is no dataset would fail the run there, its steps unsaved
            check_metadata(path, tokens=("test",))
        except TRMError as err:
            raise TRMError(f"data_paths_test: {err}") from None
    local_batch = cfg.global_batch_size // rt.world_size
    meta = loader.metadata
    micro = memory_aware_micro_batch(cfg, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
                                     num_puzzle_identifiers=meta.num_puzzle_identifiers, num_puzzles=meta.total_puzzles,
                                     device=rt.device, dtype=rt.dtype, local_batch=local_batch,
                                     world_size=rt.world_size, log=log if rt.is_main else None)
    if problem := micro_batch_problem(micro, local_batch):
        raise TRMError(problem)
    on_xla = rt.device.type == "xla"
    with xla.one_at_a_time() if on_xla else contextlib.nullcontext():
        if on_xla:  # XLA: thread replicas (TPU v2/v3 cores) share torch's generator; each seeds and draws in turn
            torch.manual_seed(cfg.seed)
        model = build_model(cfg, loader, rt)
    if rt.is_main and cfg.progress and banner:
        print(f"trm-kaggle train: {model.parameter_count()}", file=sys.stderr, flush=True)
    if rt.distributed:
        broadcast_model_(model, rt.rank)
    sync_free = rt.device.type in nonfinite.SYNC_FREE_DEVICES
    dense, sparse = make_optimizers(cfg, model, capturable=True if sync_free else None)
    state = TrainState(model, dense, sparse, EMA(model, cfg.ema_rate) if cfg.ema else None, scaler=None,
                       position=loader, fingerprint=ckpt.dataset_fingerprint(cfg.data_paths), micro=micro,
                       log_window=LogWindow())
    steps_per_epoch = max(1e-9, loader.batches_per_epoch)
    total_steps = total_train_steps(cfg.epochs, loader.total_groups, meta.mean_puzzle_examples, cfg.global_batch_size)
    stop_at = min(total_steps, cfg.max_steps) if cfg.max_steps else total_steps  # max_steps only stops early
    stages = StagePlan.from_config(cfg, loader, stop_at) if cfg.stages else None
    if stages is not None:
        loader.set_group_filter(stages.group_mask_at)
        if rt.is_main:
            log.info("data curriculum: %s", stages.describe())
    loader.check_batch_fills()
    MetricLog.check(cfg)
    if rt.is_main:  # one writer per run directory, taken after every check that can refuse: nothing is made before
        ckpt.refuse_foreign_run_files(run_dir)
        held.enter_context(directory_lock(run_dir, "training"))

    resumed = _resume(state, run_dir, cfg, rt)
    if resumed is not None:
        # run again after it ended: nothing to train, and nothing is rewritten (unless a stop signal cut the last
        # step's evaluation short: the run then goes on to run it)
        if state.step >= stop_at and not state.evaluation_due:
            return _already_done(cfg, run_dir, state.step, stop_at, total_steps, steps_per_epoch, model, rt)
        if rt.is_main:
            log.info("resuming %s from step %d", run_dir, state.step)
            if cfg.load_checkpoint:  # its weights were the first state's; a resume trains on from its own
                log.warning("load_checkpoint %s is not loaded: the run resumes from its own state at step %d",
                            one_line(cfg.load_checkpoint), state.step)
            # a state saved between log steps: the record its stop wrote of them goes, the next one covers them
            drop_metrics_after(run_dir / METRICS_FILE, state.step, interval_open=state.log_window.open)
    state.scaler = LossScaler(rt.dtype, rt.device)  # float16: loss scaling (after a resume settled the dtype)
    if resumed is not None:
        state.scaler.load_state_dict(resumed.get("amp"))

    # torch.compile by region (one block for every layer, the ACT step around it, the loss), never the whole model
    rules = rules or StepRules()
    regions = apply_compile(model, cfg.compile, rt.device, cfg.cuda_graphs)
    if regions is not None:
        load_compile_cache(run_dir, rt.device)  # what an earlier process of this run compiled (ours only)
    policy = nonfinite.nonfinite_policy(state, rt, cfg.max_nonfinite_steps, nonfinite.divergence_advice(cfg))
    metric_log = MetricLog(run_dir, cfg, enabled=rt.is_main)
    if rt.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.json", cfg.model_dump_json(indent=2))
        ckpt.claim_run_id(run_dir, resumed)  # the id every state records
    step_setup = StepSetup(cfg, rt, local_batch, policy, forward=model,
                           loss=regions.region(rules.loss) if regions is not None else rules.loss, rules=rules)
    return Run(cfg, rt, run_dir, loader, state, step_setup, metric_log, steps_per_epoch, total_steps, stop_at, deadline,
               stages, cache_graphs=compiled_graphs() if regions is not None and rt.is_main else None)


def _resume(state: TrainState, run_dir: Path, cfg: TrainConfig, rt: Runtime) -> dict[str, Any] | None:
    """Restore the newest train state of `run_dir` into `state`; what it held, or None when the run starts fresh."""
    if rt.is_main:  # temporaries of a writer killed mid-write (a worker group restarted by torchrun, a kill -9)
        for leftover in ckpt.remove_stale_temporaries(run_dir):
            log.info("removed %s, left by a write that was interrupted", leftover.name)
    newest = state_to_resume(run_dir, rt)
    if newest is None:
        if rt.is_main:  # a fresh start: records of a process killed before its first state would be duplicates
            drop_metrics_after(run_dir / METRICS_FILE, 0)
        return None
    path, saved = newest
    restore(state, path, saved, cfg, rt)
    return saved


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
