"""A notebook's runner gone is a stop of its training, not the end of its kernel.

papermill (Kaggle's runner, or one started in a terminal) starts the Jupyter kernel in a session of its own: a
stop signal to the runner (Kaggle's SIGTERM at its 12-hour limit, a `kill` of papermill) ends the runner and never
reaches the kernel, and ipykernel's parent poller would then end the kernel at once (`os._exit`), the training's
steps since its last save lost without a word. `stop_when_the_runner_exits` turns the runner's end into one SIGTERM to
the kernel, which a training run with `signals=True` (or a Kaggle session) takes as its stop: it saves its state.
`training()` marks the work the kernel waits for (at most `RUNNER_GRACE_S`) before it exits, and says how that work
ended on the kernel's own stderr, the one reader left once the runner is gone (or shutting the kernel down: its
Ctrl-C). Standard library only (and
`wording`; `config` when watching starts): the train notebook and the Kaggle session both use it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import threading
import time
from typing import Iterator

from trm_kaggle.wording import one_line

RUNNER_GRACE_S = 300.0  # once the runner is gone, how long the kernel may go on saving before it exits
POLL_S_RANGE = (0.01, 3600.0)  # the watch's polling period: 0 busy-polled, an hour notices the runner's end late
_runner_stop = threading.Lock()  # taken by the first to see the runner gone: that one stop is sent once
_runner_gone = threading.Event()  # set with that stop: from then on only the kernel's own stderr is read
_at_work = [0]  # how many `training()` blocks run now (a gone runner's kernel waits for them)
_at_work_counted = threading.Lock()
_watches: dict[int, threading.Thread] = {}  # the watch thread of each runner (a notebook run again starts none)


@contextlib.contextmanager
def training() -> Iterator[None]:
    """While this block runs (a training, a Kaggle session), a kernel whose runner is gone waits for it to end,
    within `RUNNER_GRACE_S`, instead of exiting at once; an exception that ends it once the runner is gone (the
    training's `TrainingInterrupted`, naming the state it saved) is said on the kernel's own stderr, since the
    cell's output goes to the runner. So is a stop (a KeyboardInterrupt) under a watched runner: papermill's
    Ctrl-C interrupts the kernel and ends it, and the cell's error reached the executed notebook alone."""
    with _at_work_counted:
        _at_work[0] += 1
    try:
        yield
    except BaseException as e:
        stopped = isinstance(e, KeyboardInterrupt) and any(w.is_alive() for w in list(_watches.values()))
        if (_runner_gone.is_set() or stopped) and _at_work[0] == 1:  # the outermost block says it, once
            _say(f"{type(e).__name__}: {e}")
            _quiet_replies_to_no_one()
        raise
    finally:
        with _at_work_counted:
            _at_work[0] -= 1


class _RepliesToNoOne(logging.Filter):
    """Drops ipykernel's traceback of a message sent on a socket already closed (ZMQError ENOTSOCK): papermill's
    Ctrl-C interrupts the kernel and shuts it down at once, its sockets closed while the stopped cell's reply is
    sent; its runner reads nothing more, and the traceback on the terminal hid the line that says the state was
    saved."""

    def filter(self, record: logging.LogRecord) -> bool:
        e = record.exc_info[1] if record.exc_info else None
        return not (type(e).__name__ == "ZMQError" and getattr(e, "errno", None) == errno.ENOTSOCK)


def _quiet_replies_to_no_one() -> None:
    """`_RepliesToNoOne` on this kernel's log (ipykernel's), once a stop has been said: nothing outside a kernel."""
    try:
        from IPython import get_ipython

        log = getattr(getattr(get_ipython(), "kernel", None), "log", None)
    except ImportError:
        return
    if isinstance(log, logging.Logger) and not any(isinstance(f, _RepliesToNoOne) for f in log.filters):
        log.addFilter(_RepliesToNoOne())


def _working() -> bool:
    return _at_work[0] > 0


def _say(line: str) -> None:
    """`line` (escaped) on the kernel's own stderr, which the runner's log or terminal holds: ipykernel sends what
    the kernel writes to `sys.stderr` to the runner, gone, and its descriptor 2 too where it watches it (then it
    keeps a copy of the original); else the process's own `sys.__stderr__`. Nothing left to write to is no error:
    the saved state stands."""
    text = one_line(line) + "\n"
    original = getattr(sys.stderr, "_original_stdstream_copy", None)  # ipykernel's OutStream watching fd 2
    try:
        if isinstance(original, int):
            os.write(original, text.encode("utf-8", "backslashreplace"))
        elif sys.__stderr__ is not None:
            sys.__stderr__.write(text)
            sys.__stderr__.flush()
    except (OSError, ValueError):
        pass


def _stop_for_the_gone_runner() -> bool:
    """SIGTERM to this kernel, once whoever notices the runner gone (the watch thread, ipykernel's poller): two of
    them more than `interrupts.REPEAT_S` apart were a second stop, which ended the training without its record."""
    if not _runner_stop.acquire(blocking=False):
        return False
    _runner_gone.set()
    _say("the notebook's runner is gone: stopping the training (SIGTERM) so that it saves")
    os.kill(os.getpid(), signal.SIGTERM)
    return True


class _SaveBeforeExit:
    """Stands in for the `os` module of ipykernel's parent poller, whose thread ends the kernel at once
    (`os._exit`) when its parent, the notebook's runner, is gone: the first such call stops the training with
    SIGTERM instead (it saves its state), a later one exits once no `training()` block runs or `RUNNER_GRACE_S`
    has passed."""

    def __init__(self) -> None:
        self.first: float | None = None

    def __getattr__(self, name: str):
        return getattr(os, name)

    def _exit(self, status: int) -> None:
        if self.first is None:
            self.first = time.monotonic()
            _stop_for_the_gone_runner()
        elif not _working() or time.monotonic() - self.first > RUNNER_GRACE_S:
            os._exit(status)


def stop_when_the_runner_exits(poll_s: float = 1.0) -> bool:
    """In a Jupyter kernel run by papermill: a stop signal to the runner ends the runner, not the kernel, which
    runs in its own session; from here on the runner's end stops the training with SIGTERM, so it saves and says
    so whichever process was signalled. A thread notices the kernel's parent change (polled every `poll_s`
    seconds), and ipykernel's own parent poller, which would end the kernel at once, stops the training instead
    (`_SaveBeforeExit`). Returns whether the runner is watched (not when the parent is already init); called again
    for the same runner (a notebook's cells run again in one kernel), it starts no second thread. A `poll_s` that is
    no number within `POLL_S_RANGE` is a ValueError naming it: it ended the watch thread in `time.sleep`, after
    this call had said the runner was watched."""
    from trm_kaggle.config import number_argument

    poll_s = number_argument("poll_s", poll_s, *POLL_S_RANGE)  # before the thread: its death was said by no one
    parent = os.getppid()
    if parent <= 1:
        return False
    try:
        import ipykernel.parentpoller as poller

        if not isinstance(poller.os, _SaveBeforeExit):
            poller.os = _SaveBeforeExit()
    except ImportError:  # not in a Jupyter kernel: only the thread below
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        _stop_for_the_gone_runner()

    if parent not in _watches or not _watches[parent].is_alive():
        _watches[parent] = threading.Thread(target=watch, name="trm-runner-watch", daemon=True)
        _watches[parent].start()
    return True
