"""When a training run saves or stops besides its schedule: a timer, a deadline, SIGINT, SIGTERM and SIGHUP.

`StopControl.poll(step)` runs before every optimizer step and answers whether to save a train state now (every
`save_every_s` seconds, on the monotonic clock, counted from the last save) and whether to stop (the deadline
passed, or a signal came). A stop saves before it ends (the loop's final save), so a run stopped by a signal
or its deadline loses nothing, and a run killed outright (SIGKILL, a machine lost) loses at most the steps of
one interval.

Signals (`signals=True`, only in the main thread): the first SIGINT, SIGTERM or SIGHUP (a closed terminal; not
when nohup ignores it) asks the run to stop at the end of the step under way, after saving; in a single process
a second one stops at once, without saving
(`StoppedAtOnce`, a KeyboardInterrupt whose exit status is 128 + the signal's number too). During an evaluation
of a single-process run the first one cuts the evaluation short too (it changes no weight), and once a state is
written (while older states rotate away) it ends the run at once: no wait of a save outlasts a signal.
The run then ends with `TrainingInterrupted` (a KeyboardInterrupt: callers that stop on Ctrl-C still do),
whose message is the one line to show and whose `exit_status` is 128 + the signal's number.

Under torchrun every rank must save and stop at the same step (a save gathers every rank's carries): the
ranks decide together, every `log_interval` steps, in one small all-reduce of their flags (any rank's signal,
deadline or due save counts for all), so a signal or a due save waits at most `log_interval` steps there. Only
the summed flags decide: a signal landing while they are summed counts at the next decision, and one after the
last decision of a run that ends on its schedule leaves it ending as the others do. A second signal changes
nothing there (torchrun's launcher sends its own SIGTERM after a Ctrl-C reached every process), and every rank
waits until rank 0 has written the state before it ends (the launcher stops the others when one rank exits).

`eval_fits(seconds)` says whether an evaluation expected to take that long ends before the deadline; under
torchrun rank 0's answer holds for every rank.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass
from time import monotonic
from typing import Iterator

import torch

from trm_kaggle import interrupts, xla
from trm_kaggle.train.runtime import Runtime, all_reduce_

# SIGHUP (a closed terminal or SSH session) stops a run as SIGTERM does, unless it is ignored (nohup); so do the
# schedulers' warnings before a kill (SIGUSR1, SIGUSR2, SIGXCPU: `interrupts.TERMINATING`): the state is saved.
STOP_SIGNALS = (signal.SIGINT, *interrupts.TERMINATING)


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after saving its state; str(e) is the line to show, unless `quiet`: a
    rank of a group other than rank 0, which says it for all (a line per rank said it N times, interleaved)."""

    def __init__(self, message: str, signum: int, step: int = 0, path=None, quiet: bool = False):
        super().__init__(message)
        self.signum, self.step, self.path, self.quiet = signum, step, path, quiet
        self.exit_status = 128 + signum


class StoppedAtOnce(KeyboardInterrupt):
    """A second stop signal: the run ends at once, without saving; `exit_status` is 128 + the signal's number."""

    def __init__(self, signum: int, first: int | None = None):
        again = ("a second time" if first in (None, signum) else
                 f"after {signal_name(first)}")  # SIGTERM then SIGHUP is no SIGHUP "a second time"
        super().__init__(f"stopped by {signal_name(signum)} {again}: stopped at once, without saving (the newest "
                         "train state on disk is where a rerun resumes)")
        self.signum, self.exit_status = signum, 128 + signum


class EvaluationCut(Exception):
    """Raised inside an evaluation of a single-process run by the first stop signal."""


@dataclass
class Decision:
    save: bool = False
    stop: str = ""  # why the run stops now ("" = it goes on)


def expected_eval_seconds(measured: float | None, test_batches: int | None, halt_max_steps: int,
                          step_s: float) -> float:
    """How long the next evaluation should take: the last one's time (plus a tenth), else an upper estimate:
    each of its ACT steps on a test batch costs at most one training step (a forward without backward)."""
    if measured is not None:
        return 1.1 * measured
    return float(test_batches or 0) * halt_max_steps * step_s


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class StopControl:
    """Timed saves, the deadline and stop signals of one training run (see the module docstring)."""

    def __init__(self, rt: Runtime, *, save_every_s: float | None, deadline: float | None, deadline_name: str,
                 every: int = 1, signals: bool = False):
        self.rt = rt
        self.save_every_s = save_every_s
        self.deadline, self.deadline_name = deadline, deadline_name
        self.every = max(1, int(every)) if rt.distributed else 1  # steps between joint decisions (torchrun)
        self.signals = signals and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None  # the first stop signal received
        self._first_at: float | None = None  # when (monotonic): a repeat within interrupts.REPEAT_S is dropped
        self.stopped_by_signal = False  # a decision stopped the run for a signal (under torchrun: every rank's)
        self.last_save = monotonic()
        self.saved_step: int | None = None
        self._cuttable = False  # inside an evaluation a signal may cut short
        self._settled: tuple[int, object] | None = None  # (step, path) of a state on disk whose save goes on
        self._previous: dict[int, object] = {}

    # -- signals ---------------------------------------------------------------------------------------------

    def __enter__(self) -> "StopControl":
        if self.signals:
            for s in STOP_SIGNALS:
                if interrupts.taken(s):  # an ignored SIGINT (a shell's background job) or SIGHUP stays so
                    self._previous[s] = signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
        if self.signum is not None:  # the stop is taken: a later signal ends a command's process at once
            interrupts.disarm(self._first_at)

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:  # the second: in a single process, stop now without saving
            if not self.rt.distributed and not interrupts.repeated(self._first_at):  # (`timeout` says it twice)
                raise StoppedAtOnce(signum, self.signum)
            return
        self.signum, self._first_at = signum, time.monotonic()  # the clock of `interrupts.repeated`
        if self._cuttable:
            raise EvaluationCut(signal_name(signum))
        if self._settled is not None:  # the state is on disk: stop now, whatever the save still waits on
            raise self.interrupted(*self._settled)

    @contextlib.contextmanager
    def cuttable(self) -> Iterator[None]:
        """A region a stop signal may cut short (an evaluation; single-process runs only)."""
        self._cuttable = not self.rt.distributed
        try:
            yield
        finally:
            self._cuttable = False

    @contextlib.contextmanager
    def settled(self, step: int, path) -> Iterator[None]:
        """What follows a state's write (the rotation of older states): a stop signal there ends the run at once,
        since the state it would save is already on disk (single-process runs; a signal already received waits
        for the end of the save as before)."""
        self._settled = (step, path) if self.signals and not self.rt.distributed and self.signum is None else None
        try:
            yield
        finally:
            self._settled = None

    # -- decisions -------------------------------------------------------------------------------------------

    def poll(self, step: int) -> Decision:
        """Before the optimizer step `step + 1`: save now? stop now?"""
        if self.rt.distributed and step % self.every:
            return Decision()
        # The signal is read once: under torchrun one that lands while the flags are being summed was not in
        # this decision on the other ranks, so it counts at the next one here too (a rank that stopped alone
        # would wait in the final save's gather while the others train on).
        signum = self.signum
        past_deadline = self.deadline is not None and monotonic() >= self.deadline
        due = self.save_every_s is not None and monotonic() - self.last_save >= self.save_every_s
        # a flag per stop signal: another rank's stop is said by its own signal's name and status (a SIGUSR1 to one
        # worker was said as a SIGTERM by rank 0, exit status 143, and the launcher took the 138 of the worker it
        # reached for a failed training)
        flags = [past_deadline, due, *(signum == s for s in STOP_SIGNALS)]
        if self.rt.distributed:
            flags = [v > 0 for v in self._sum(flags)]
            others = [s for s, flag in zip(STOP_SIGNALS, flags[2:]) if flag]
            if signum is None and others:  # another rank's signal stops this one too (SIGINT first, if any)
                signum = others[0]
                if self.signum is None:
                    self.signum = signum
        past_deadline, due = flags[:2]
        if signum is not None:
            self.stopped_by_signal = True
            return Decision(stop=signal_name(self.signum or signum))
        if past_deadline:
            return Decision(stop=self.deadline_name)
        return Decision(save=due)

    def saved(self, step: int) -> None:
        self.last_save, self.saved_step = monotonic(), step

    def eval_fits(self, seconds: float) -> bool:
        """Whether an evaluation of about `seconds` ends before the deadline (rank 0's answer on every rank)."""
        fits = self.deadline is None or monotonic() + seconds <= self.deadline
        if self.rt.distributed:
            fits = self._sum([fits if self.rt.is_main else False])[0] > 0
        return fits

    def _sum(self, flags: list[bool]) -> list[int]:
        total = torch.tensor([int(f) for f in flags], dtype=torch.int64).to(self.rt.device)
        all_reduce_([total])
        if self.rt.device.type == "xla":
            xla.step_boundary()  # XLA: run the reduction before the host reads it
        return [int(v) for v in total.tolist()]

    def signalled(self) -> bool:
        """Whether the run ends as interrupted: a signal came (in one process, even after the last decision, as
        Ctrl-C during the last step); under torchrun only when the ranks decided so together (a signal after the
        last joint decision reached this rank alone: the run ends as the others do)."""
        return self.signum is not None and (self.stopped_by_signal or not self.rt.distributed)

    def interrupted(self, step: int, path) -> TrainingInterrupted:
        """The exception that ends a run stopped by a signal, saved at `step` in `path` (under torchrun once
        every rank is there: rank 0 has written the state)."""
        assert self.signum is not None
        if self.rt.distributed:
            self._sum([False])
        return TrainingInterrupted(f"stopped by {signal_name(self.signum)} at step {step}: train state saved to "
                                   f"{path}; run the same command again to resume from it", self.signum, step, path,
                                   quiet=not self.rt.is_main)
