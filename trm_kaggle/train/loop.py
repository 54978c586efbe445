"""The training loop: a short driver over a train state and a step.

    prepare (check, build, resume, compile)                                   train/setup.py
    while the schedule lasts:
        poll (a stop signal, the deadline, a timed save)                      train/stops.py
        step: batch -> forward/backward per micro-batch -> optimizer or skip  train/step.py
        log: once per interval, one host read                                 train/metric_log.py
        maybe evaluate (every eval_interval epochs, if it fits the deadline)  train/evaluation.py
        maybe save (at an evaluation)                                         train/state.py
    (a resumed state whose evaluation a stop signal cut short runs that evaluation before its first step)
    save the last step's state

Everything that decides the run (loader position, carries, RNG, optimizer moments, EMA shadow) is in the
train state, so a resumed CPU run reproduces the uninterrupted one. A recipe changes the step through
`StepRules` (schedule, model configuration, loss), never this file.

On XLA (TPUs) the same loop runs with a step boundary per optimizer step, batches moved to the device ahead
of use and compile metrics in the log; the calls into `trm_kaggle.xla` are marked "XLA:".
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import time
from typing import Callable

import numpy as np

from trm_kaggle import xla
from trm_kaggle.config import TrainConfig, revalidated, seconds_argument
from trm_kaggle.errors import TRMError
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.evaluation import Evaluations
from trm_kaggle.train.memory import MemoryWatch
from trm_kaggle.train.metrics import shown
from trm_kaggle.train.progress import TrainProgress
from trm_kaggle.train.result import TrainResult
from trm_kaggle.train.runtime import torch_settings_kept
from trm_kaggle.train.schedules import RuleRefused
from trm_kaggle.train.setup import Run, prepare
from trm_kaggle.train.step import StepRules, train_step
from trm_kaggle.train.stops import StopControl
from trm_kaggle.wording import clipped, type_name

log = logging.getLogger(__name__)


def train(cfg: TrainConfig, *, on_step: Callable[[int, dict], None] | None = None,
          on_eval: Callable[[int, dict], bool | None] | None = None, deadline: float | None = None,
          banner: bool = True, signals: bool = False, rules: StepRules | None = None) -> TrainResult:
    """Train (or resume) the run in `default_run_dir(cfg)`, as its only writer; returns the last metrics.

    `on_step(step, metrics)` is called at every log interval (what it returns is not read: a warning says so once);
    `on_eval(step, eval_metrics)` after each
    evaluation, and training stops (saving its state) when it returns True. `deadline` (a time.monotonic()
    value: a step of the wall clock neither cuts nor stretches the run) stops training before a step that would
    start after it, saving the state as usual. `banner`: print the device and model lines first (with
    `progress`); a caller that trains many small runs in a row (test-time training, one per task) prints them
    once itself. `rules`: a recipe's changes to the step (`StepRules`; upstream's by default).
    A train state is saved every `cfg.save_every_s` seconds and when the run ends. With `signals` (the
    `train` command, the Kaggle session) SIGINT and SIGTERM save a state and end the run with
    `TrainingInterrupted` (see `trm_kaggle.train.stops`); an evaluation that would end after the deadline is
    skipped, with a warning. A run that had already reached its last step is left as it is
    (`TrainResult.already_done`)."""
    _check_arguments(cfg, rules, on_step=on_step, on_eval=on_eval)
    cfg = revalidated(cfg)  # a config built around its validators (model_copy, model_construct) is checked here
    deadline = seconds_argument("deadline", deadline)  # NaN compared false with every clock: no deadline at all
    with contextlib.ExitStack() as held:
        held.enter_context(torch_settings_kept())  # the caller's deterministic mode and threads, back at the end
        run = prepare(cfg, held, deadline=deadline, banner=banner, rules=rules)
        if isinstance(run, TrainResult):
            return run
        control = held.enter_context(StopControl(
            run.rt, save_every_s=cfg.save_every_s, deadline=run.deadline, every=cfg.log_interval, signals=signals,
            deadline_name="the time limit" if cfg.time_limit is not None else "the deadline"))
        return _drive(run, control, on_step, on_eval)


def _check_arguments(cfg, rules, **callbacks) -> None:
    """TypeError naming the argument of `train` that is of the wrong kind, before anything is read or made: a dict
    for `cfg` was "type object 'dict' has no attribute 'model_validate'", one for `rules` an AttributeError at the
    first step."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg: expected a TrainConfig (load_train_config(values={{...}}) makes one from a dict), got "
                        f"a {type_name(cfg)}")
    if rules is not None and not isinstance(rules, StepRules):
        raise TypeError(f"rules: expected a StepRules (StepRules(loss=...) replaces one rule), got a {type_name(rules)}")
    callables = {**callbacks, **({f"rules.{f.name}": getattr(rules, f.name) for f in dataclasses.fields(rules)}
                                 if rules is not None else {})}
    for name, value in callables.items():
        if not callable(value) and (value is not None or name.startswith("rules.")):  # the callbacks may be None
            raise TypeError(f"{name}: expected a function, got a {type_name(value)}")


def _stop_asked(verdict, run: Run, control: StopControl) -> bool:
    """Whether `on_eval`'s answer asks the run to stop: True stops, False or None goes on. Anything else (a NaN, a
    word, a metric returned by mistake) stopped the run as if it were True, without a word: the state is saved and
    the answer named."""
    # numpy's bool too (`acc > 0.99` on numpy numbers): its type is named `bool` under numpy 2, not `bool_`, and a
    # check by that name refused np.False_ as neither True nor False
    if verdict is None or isinstance(verdict, (bool, np.bool_)):
        return bool(verdict)
    _save(run, control)
    raise TRMError(f"on_eval returned {clipped(verdict)} at step {run.state.step}: it returns True to stop the run, "
                   f"False or None to go on (the state at step {run.state.step} is saved)")


def _drive(run: Run, control: StopControl, on_step, on_eval) -> TrainResult:
    cfg, rt, state = run.cfg, run.rt, run.state
    state.model.train()
    result = TrainResult(run.run_dir, state.step, 0.0, parameters=state.model.parameter_count(),
                         is_main=rt.is_main, start_step=state.step)
    clock = _Clock(state.step)
    evaluations = Evaluations(cfg, rt, run.run_dir, run.steps_per_epoch, state.step, run.deadline, run.total_steps,
                              run.stop_at)  # before the bar: its warnings are the run's first lines
    bar = TrainProgress(run.stop_at, state.step, run.deadline, enabled=cfg.progress and rt.is_main)
    memory_watch = MemoryWatch(rt.device, log if rt.is_main else None)
    window = state.log_window  # the sums of an interval a resumed state stopped inside are back in it
    batches, compile_watch = iter(run.loader), None
    rewinds = not rt.distributed and rt.device.type != "xla"  # a refused rule's step: the state before it is saved
    if rt.device.type == "xla":  # XLA: batches go to the device ahead of use; compilations are counted per step
        batches = state.position = xla.DeviceBatches(run.loader, rt.device)
        compile_watch = xla.CompileWatch(warn=rt.is_main)

    answered: list[int] = []  # the step where on_step first returned something (said once)
    logged = [state.step]  # the step of the last record (a timed save reads an interval's steps without one)

    def publish(lr: float) -> None:
        """The log window's record, once it has one: written and shown, kept as the last metrics, given to on_step.
        One of a step inside an interval (a stop: a signal, the deadline, max_steps) leaves the interval's sums in
        the window, for the state saved there."""
        closes = state.step % cfg.log_interval == 0
        record = window.record(state.step, state.step / run.steps_per_epoch, lr, cfg.global_batch_size, closes)
        if record is not None:
            logged[0] = state.step
            _log(run, control, record, clock, memory_watch, compile_watch, bar, lr)
            result.metrics = record
            if on_step and on_step(state.step, record) is not None and not answered:
                # an answer read by nothing (True meant as a stop) went unsaid, and the run trained on to its end
                answered.append(state.step)
                log.warning("on_step returned a value at step %d: it is not read (on_step only watches; on_eval's "
                            "True, a deadline or time_limit stop a run)", state.step)

    def evaluate() -> bool:
        """The evaluation of this step (`Evaluations.run`), then its record, a state with checkpoint_every_eval and
        on_eval; whether the run stops here (a stop signal cut it short, or on_eval asked). One cut short is noted
        in the state saved at this step, so that a resume runs it before its first step, as an unbroken run did."""
        outcome = evaluations.run(state.model, state.ema, control, state.step, clock.seconds_per_step(state.step))
        state.evaluation_due = outcome == "cut"  # a skipped one (the deadline) stays skipped, as in an unbroken run
        if outcome != "done":
            return outcome == "cut"
        result.eval_metrics = evaluations.metrics
        _write_record(run, control, {"step": state.step, "epoch": state.step / run.steps_per_epoch,
                                     **evaluations.metrics, "evaluation_s": round(evaluations.seconds, 3),
                                     **(compile_watch.record() if compile_watch is not None else {})})
        if cfg.checkpoint_every_eval:
            _save(run, control)
        if on_eval is not None and _stop_asked(on_eval(state.step, evaluations.metrics), run, control):
            result.stopped_by = "the evaluation callback"
            return True
        return False

    try:
        stopping = False
        if state.evaluation_due:  # resumed from a state whose evaluation a stop signal cut short: it runs first
            if rt.is_main:
                log.info("step %d: running the evaluation a stop signal cut short before the run stopped", state.step)
            stopping = evaluate()
        while not stopping and state.step < run.stop_at:
            decision = control.poll(state.step)
            if decision.stop:
                result.stopped_by = decision.stop
                if control.signum is None:
                    log.info("time budget reached at step %d: stopping training", state.step)
                break
            if decision.save:  # a timed save: a kill loses at most save_every_s of training
                _save(run, control)
                log.info("step %d: train state saved (save_every_s=%g)", state.step, cfg.save_every_s)
            if compile_watch is not None:
                compile_watch.begin_step()
            position = run.loader.state_dict() if rewinds else None  # before the step's batch: see _refused
            batch = next(batches)  # the training stream is endless; the loader counts epochs
            batch = {k: batch[k].to(rt.device, non_blocking=True) for k in ("inputs", "labels", "puzzle_identifiers")}

            try:
                schedule = run.schedule()
                applied, metrics = train_step(state, batch, schedule, run.step_setup)
            except RuleRefused as refused:
                raise _refused(run, control, position, result.start_step, refused) from None
            if not applied.counted:  # skipped on the host: the next batch takes this step again
                continue
            if compile_watch is not None:
                compile_watch.end_step(state.step)  # XLA: the step boundary; warns when a step after warm-up compiled

            # bookkeeping (a host read waits for the device: once per log interval, not per step)
            window.add(state.step - 1, metrics, applied.verdict)
            if (state.step % cfg.log_interval == 0 or state.step == run.stop_at
                    or (run.deadline is not None and time.monotonic() >= run.deadline)):  # the deadline's last too
                window.read(run.step_setup.policy.replay)
            publish(schedule.lr)
            bar.advance(state.step)

            if evaluations.due(state.step) and evaluate():
                break
        if window.open and logged[0] != state.step:  # stopped between log intervals (a signal, a cut evaluation):
            # its last steps are logged (the window keeps their sums for the state saved below)
            window.read(run.step_setup.policy.replay)
            publish(schedule.lr)
    finally:
        bar.close()
        memory_watch.close()
        # the loader's prefetch thread stops now, whatever ended the loop: an error's traceback keeps this frame, and
        # with it the thread, alive to the interpreter's exit, where a daemon thread inside torch aborted the process
        # ("terminate called without an active exception", exit 134) after the error was printed
        batches.close()
    # the rate the last record says, when it is of the last step: taken after the final save, the run's closing
    # line (and the pipeline's summary) said 11.9 where the records said 12.1, and taken again a moment later, it
    # still differed on a loaded machine
    result.examples_per_second = clock.closing_rate(state.step, cfg.global_batch_size)
    if control.saved_step != state.step:  # the state of the last step (a stop, the deadline, the schedule's end)
        _save(run, control)
    run.metric_log.close()
    result.step, result.epoch = state.step, state.step / run.steps_per_epoch
    if not result.eval_metrics and evaluations.unevaluated:
        result.not_evaluated = evaluations.unevaluated
    if control.signalled():  # SIGINT or SIGTERM: saved above; the caller stops as after Ctrl-C
        raise control.interrupted(state.step, ckpt.state_path(run.run_dir, state.step))
    return result


class _Clock:
    """Training seconds of this process, from its first step."""

    def __init__(self, step: int):
        self.t0, self.step0 = time.perf_counter(), step
        self.recorded: tuple[int, float] | None = None  # (step, examples/s) of the last record

    def record_rate(self, step: int, global_batch: int) -> float:
        """The rate a record of `step` says, kept for the run's closing line."""
        rate = self.examples_per_second(step, global_batch)
        self.recorded = (step, rate)
        return rate

    def closing_rate(self, step: int, global_batch: int) -> float:
        """The last record's rate when it is of `step`, else the rate now."""
        if self.recorded is not None and self.recorded[0] == step:
            return self.recorded[1]
        return self.examples_per_second(step, global_batch)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def seconds_per_step(self, step: int) -> float:
        return self.elapsed() / max(1, step - self.step0)

    def examples_per_second(self, step: int, global_batch: int) -> float:
        return (step - self.step0) * global_batch / max(self.elapsed(), 1e-9)


def _save(run: Run, control: StopControl) -> None:
    run.state.log_window.read(run.step_setup.policy.replay)  # the interval's steps so far go into the state
    path = ckpt.state_path(run.run_dir, run.state.step)
    run.save(settled=lambda: control.settled(run.state.step, path))  # once written, a signal ends any wait at once
    control.saved(run.state.step)
    run.keep_compiled()  # after the state, never before: on a nearly full disk the state is what must fit


def _refused(run: Run, control: StopControl, position: dict | None, start: int, refused: RuleRefused) -> RuleRefused:
    """`refused` (a `StepRules` rule's answer, refused before it changed the weights, the optimizers or the carries),
    said after the state before its step is saved: the steps since the last save were lost. The data position goes
    back to before the step's batch, so that a resume takes that batch again, as an unbroken run would. One process
    alone, never on XLA (`position` None: its batches are ahead on the device, and a group saves together)."""
    step = run.state.step
    if position is None or step in (start, control.saved_step):  # nothing trained since the last state
        return refused
    try:
        run.loader.load_state_dict(position)
        _save(run, control)
    except Exception:  # the refusal is what the caller must read; a failed save leaves the older states
        return refused
    return RuleRefused(f"{refused} (the state at step {step} is saved)")


def _write_record(run: Run, control: StopControl, record: dict) -> None:
    """One record (a log interval's, an evaluation's) into the metrics log. A refused write (a link or a folder
    planted in its place, a full disk) ends the run, after the steps it logs are saved: they are whole, and a
    refusal at an evaluation once cost every step since the last state. One process alone: a group saves together
    or not at all."""
    try:
        run.metric_log.write(record)
    except (TRMError, OSError):
        if not run.rt.distributed and control.saved_step != run.state.step:
            with contextlib.suppress(Exception):
                _save(run, control)
        raise


def _log(run: Run, control: StopControl, record: dict, clock: _Clock, memory_watch: MemoryWatch, compile_watch,
         bar: TrainProgress, lr: float) -> None:
    """Complete an interval's record (pace, memory, loss scale, compilations), write it and show it."""
    step = run.state.step
    run.step_setup.policy.logged(record, step)  # XLA: a non-finite loss is seen here, once per interval
    if run.stages is not None:
        record["stage"] = run.stages.index_at(step - 1) + 1  # the stage of the step just taken
    record["examples_per_s"] = clock.record_rate(step, run.cfg.global_batch_size)
    record["elapsed_s"] = clock.elapsed()
    record["start_step"] = clock.step0  # where this process began: readers join resumed runs' clocks
    record.update(memory_watch.sample())
    record.update(run.state.scaler.record())
    if compile_watch is not None:  # XLA: compilations so far, compile and execute seconds
        record.update(compile_watch.record())
        if run.rt.is_main and run.cfg.progress:
            bar.write(compile_watch.describe(step, record), file=sys.stderr)
    _write_record(run, control, record)
    mem = record.get("cuda_max_allocated_gb", record.get("peak_rss_gb", 0.0))
    bar.note(loss=f"{record['loss']:.3f}", exact=shown(record.get("exact_accuracy")), lr=f"{lr:.1e}",
             ex_s=f"{record['examples_per_s']:.0f}", mem=f"{mem:.2f}G")
