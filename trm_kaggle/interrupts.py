"""A stop is one line: SIGTERM (and SIGHUP) taken as Ctrl-C is taken, and the line and status either ends a
command with.

Python ends a process on SIGTERM or SIGHUP at once and without a word (a build's partial folder left behind);
here it raises `Terminated`, a KeyboardInterrupt whose status is 128 + the signal's number, so that what runs
is stopped as by Ctrl-C (children, locks and partial files included) and `interrupted` prints its one line.
`trm_kaggle.console` installs the handler before a command's first import; a command that answers a stop in its
own way (a training saves its state, a sweep stops its trainings) installs its own for its length and puts the
previous one back. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator


#: The signals that stop a command as Ctrl-C does: a scheduler's or `kill`'s SIGTERM, the SIGHUP of a closed
#: terminal or SSH session (left alone where it is ignored: `nohup`), and the warnings schedulers send before they
#: kill: SIGUSR1 and SIGUSR2 (SLURM's `--signal=USR1@90`), SIGXCPU (a CPU-time limit's soft end, `ulimit -t`).
#: Python's default ended the process on each without a word, a training without its state.
TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU")
                    if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, `kill`) or SIGHUP (a closed terminal), taken as Ctrl-C is: whatever runs is
    stopped, with one line and status 128 + the signal's number."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.exit_status = signum, 128 + signum


_OWNER = [0]  # the pid that installed the handler (`take_sigterm`)

#: A stop signal this soon after the first is that stop said twice, and dropped: `timeout` forwards a Ctrl-C or
#: SIGTERM its process group already received, a scheduler signals each process of a job. A later one (a person
#: pressing Ctrl-C again) ends the process by the signal.
REPEAT_S = 0.25
_FIRST_AT: list[float | None] = [None]  # when this process took its first stop (time.monotonic)


def repeated(first_at: float | None) -> bool:
    """Whether a stop signal now repeats the first one, taken at `first_at` (None: none taken yet)."""
    return first_at is not None and time.monotonic() - first_at < REPEAT_S


def taken(signum: int) -> bool:
    """Whether a command takes `signum` as a stop: SIGTERM always; SIGINT and SIGHUP unless ignored from the
    start (a background job of a shell without job control, `nohup`), which stays so for the command's length."""
    return signum == signal.SIGTERM or signal.getsignal(signum) is not signal.SIG_IGN


def take_sigterm() -> None:
    """SIGTERM and SIGHUP raise `Terminated` in this process from now on, and SIGINT KeyboardInterrupt as
    Python's own handler does; each of them once (see `raise_terminated`). A forked child ends by the signal, and
    a SIGINT ignored at the start (a background job of a shell without job control) stays ignored."""
    _OWNER[0] = os.getpid()
    hold_terminations()
    if taken(signal.SIGINT):
        signal.signal(signal.SIGINT, raise_interrupt)
    if not getattr(sys.unraisablehook, "takes_dropped_stops", False):
        sys.unraisablehook = _stop_raised_where_python_drops_it(sys.unraisablehook)
    if not any(isinstance(f, _StopsHeldWhileLoading) for f in sys.meta_path):
        sys.meta_path.insert(0, _StopsHeldWhileLoading())


#: Packages whose first import runs C++ that calls back into Python (pybind11: torch.distributed's set-up): an
#: exception a signal handler raises there cannot unwind through the C++ frames, and the process aborts
#: (std::terminate, SIGABRT, a C++ dump) instead of saying `interrupted`.
HELD_WHILE_LOADING = ("torch",)


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """A stop signal (SIGINT, SIGTERM, SIGHUP) that comes inside the block is noted, not raised, and raised by
    its handler once the block is done, in plain Python. Only the main thread takes handlers: elsewhere, and for
    a signal ignored or left to its default, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, *TERMINATING):
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = signal.signal(signum, lambda s, _frame: came.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if came:
            previous[came[0]](came[0], None)  # a repeat of it within the block said nothing more


class _StopsHeldWhileLoading:
    """A finder (first on `sys.meta_path`) that loads `HELD_WHILE_LOADING` as the other finders would, its
    module's code run inside `stops_held`."""

    def __init__(self) -> None:
        self.finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in HELD_WHILE_LOADING or self.finding:
            return None
        self.finding = True
        try:
            spec = next((s for f in sys.meta_path if f is not self and hasattr(f, "find_spec")
                         and (s := f.find_spec(fullname, path, target)) is not None), None)
        finally:
            self.finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            with stops_held():
                run(module)

        spec.loader.exec_module = exec_module
        return spec


def hold_terminations() -> dict[int, object]:
    """`raise_terminated` for each of `TERMINATING` (an ignored SIGHUP stays ignored); the handlers it replaced,
    for `give_back` (only the main thread can take a signal handler)."""
    previous = {}
    for signum in TERMINATING:
        if taken(signum):
            previous[signum] = signal.signal(signum, raise_terminated)
    return previous


def give_back(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def raise_terminated(signum, frame) -> None:
    """A SIGTERM or SIGHUP handler: `Terminated` raised where the main thread is. A process forked from the one
    that installed it (a pool's worker, a data loader's) inherits it; there it ends as Python's default would, by
    the signal and without a word: its parent says what stopped."""
    if repeated(_FIRST_AT[0]):  # another signal's first stop unwinds: this one says it again
        return
    _first_stop(signum)
    raise Terminated(signum)


def raise_interrupt(signum, frame) -> None:
    """The SIGINT handler of a command: KeyboardInterrupt, once (as `raise_terminated`)."""
    if repeated(_FIRST_AT[0]):
        return
    _first_stop(signum)
    raise KeyboardInterrupt


def _first_stop(signum: int) -> None:
    """The signal's later arrivals end the process as the signal's default does: a second signal while the
    first unwinds (workers stopped, partial files removed, a data loader's prefetch thread joined) would
    otherwise be a second exception inside that cleanup, printed as a traceback after the command's last line.
    One within `REPEAT_S` of the first is that stop said twice, and dropped."""
    _FIRST_AT[0] = time.monotonic()
    signal.signal(signum, _later_stop)
    if _OWNER[0] and os.getpid() != _OWNER[0]:  # a forked child: ended by the signal, its parent says what stopped
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _stop_raised_where_python_drops_it(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """A `sys.unraisablehook`: a stop our handler raised inside a finalizer (a weakref callback of the garbage
    collector, a `__del__`) is printed and dropped by Python, and the command ran on to exit 0. Such a stop is
    taken back (never said) and its signal sent again, to land outside the finalizer; anything else goes to
    `previous`."""
    def hook(info) -> None:
        exc, signum = info.exc_value, None
        if isinstance(exc, Terminated):
            signum, handler = exc.signum, raise_terminated
        elif isinstance(exc, KeyboardInterrupt):
            signum, handler = signal.SIGINT, raise_interrupt
        if signum is None or os.getpid() != _OWNER[0] or signal.getsignal(signum) is not _later_stop:
            previous(info)
            return
        _FIRST_AT[0] = None
        signal.signal(signum, handler)
        # sent from a thread a moment later: sent here, its handler would raise inside this hook, dropped again
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()

    hook.takes_dropped_stops = True
    return hook


def _later_stop(signum, frame) -> None:
    """A stop signal after the first: dropped as a repeat within `REPEAT_S`, else the signal's default."""
    if repeated(_FIRST_AT[0]):
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def disarm(first_at: float | None = None) -> None:
    """After a command took a stop in its own handler (a training saving its state, a sweep stopping its
    trainings) at `first_at` (time.monotonic) and put this module's back: a later signal ends the process by the
    signal, as after a first stop taken here (a repeat within `REPEAT_S` of it dropped). Handlers that are not
    this module's (a notebook's, a test's) are left as they are."""
    if first_at is not None and _FIRST_AT[0] is None:
        _FIRST_AT[0] = first_at
    for signum in (signal.SIGINT, *TERMINATING):
        if signal.getsignal(signum) in (raise_interrupt, raise_terminated, _later_stop):
            signal.signal(signum, _later_stop)


class FirstStopOnly:
    """SIGINT, SIGTERM and SIGHUP (an ignored SIGHUP stays ignored) while a command stops what it started: the first
    raises (KeyboardInterrupt, or `Terminated`) where the main thread is; from then on, or from `hold()`, any later
    one is dropped, so that a second Ctrl-C 50 ms after the first cannot cut the cleanup that records what was
    stopped (a sweep's records left saying "running" with no process behind them). The cleanup's own waits must
    be bounded. `give_back()` puts the previous handlers back (only the main thread can take a handler: elsewhere
    nothing is installed)."""

    def __init__(self) -> None:
        import threading

        self.held = self.taken = False
        self.first_at: float | None = None
        self.previous: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, *TERMINATING):
                if taken(signum):
                    self.previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if not self.taken:
            self.first_at = time.monotonic()
        self.taken = True
        if self.held:
            return
        self.held = True
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    def hold(self) -> None:
        self.held = True

    def give_back(self) -> None:
        give_back(self.previous)
        self.previous = {}
        if self.taken:
            disarm(self.first_at)


@contextlib.contextmanager
def pool_breaks_quietly() -> Iterator[list[BaseException]]:
    """While a process pool runs: a stop signal sent to the process group (`timeout`, a scheduler) kills its
    workers too, and CPython's pool then fails, in its manager thread, the futures the stop already cancelled: an
    InvalidStateError, which threading prints as a traceback before the stop's one line. That error is dropped.
    Any other error of the pool's threads (a thread or a pipe the system refused: `ulimit -v`, `ulimit -n`) is
    kept in the yielded list, not printed: such a pool never completes its futures, and its user raises the error
    as its own line instead of waiting for ever (it printed a thread's traceback, then hung)."""
    from concurrent.futures import InvalidStateError

    previous = threading.excepthook
    failed: list[BaseException] = []

    def hook(args) -> None:
        if not issubclass(args.exc_type, InvalidStateError):
            failed.append(args.exc_value if args.exc_value is not None else args.exc_type())

    threading.excepthook = hook
    try:
        yield failed
    finally:
        threading.excepthook = previous


def quiet_teardown() -> None:
    """From here on SIGINT, SIGTERM and SIGHUP end the process by the signal, without a word: the command has
    said its last line, and a signal during the interpreter's teardown (multiprocessing joining its children) must
    not add a traceback after it."""
    for signum in (signal.SIGINT, *TERMINATING):
        if taken(signum):
            signal.signal(signum, signal.SIG_DFL)


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line of a stop (`interrupted`, or `interrupted: <why>`) and return its exit status. The why
    may name a run folder read from a config file: its newline or escape sequence is escaped (`one_line`). A stop
    marked `quiet` (a torchrun rank other than rank 0, whose line stands for the group) prints nothing."""
    from trm_kaggle.wording import one_line

    if not getattr(e, "quiet", False):
        print(one_line(f"interrupted: {e}") if str(e) else "interrupted", file=sys.stderr)
    return getattr(e, "exit_status", 130)
