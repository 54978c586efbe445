"""A stop is one line: SIGTERM taken as Ctrl-C is taken, and the line and status either ends a command with.

Python ends a process on SIGTERM at once and without a word; here it raises `Terminated`, a KeyboardInterrupt
whose status is 128 + 15, so that what runs is stopped as by Ctrl-C (children, locks and partial files
included) and `interrupted` prints its one line. `trm_kaggle.console` installs the handler before a command's
first import; a command that answers a stop in its own way (a training saves its state, a sweep stops its
trainings) installs its own for its length and puts the previous one back. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, `kill`), taken as Ctrl-C is: whatever runs is stopped, with one line and
    status 128 + 15."""

    exit_status = 128 + signal.SIGTERM

    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM")


_OWNER = [0]  # the pid that installed the handler (`take_sigterm`)


def take_sigterm() -> None:
    """SIGTERM raises `Terminated` in this process from now on (a forked child keeps Python's default)."""
    _OWNER[0] = os.getpid()
    signal.signal(signal.SIGTERM, raise_terminated)


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: `Terminated` raised where the main thread is. A process forked from the one that
    installed it (a pool's worker, a data loader's) inherits it; there it ends as Python's default would, by
    the signal and without a word: its parent says what stopped."""
    if _OWNER[0] and os.getpid() != _OWNER[0]:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    # a second SIGTERM while this one unwinds (workers stopped, partial files removed) ends the process as
    # Python's default does, instead of a second Terminated raised inside that cleanup (a traceback)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated()


def quiet_teardown() -> None:
    """From here on SIGINT and SIGTERM end the process by the signal, without a word: the command has said
    its last line, and a signal during the interpreter's teardown (multiprocessing joining its children) must
    not add a traceback after it."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def interrupted(e: KeyboardInterrupt) -> int:
    """Print the one line of a stop (`interrupted`, or `interrupted: <why>`) and return its exit status."""
    print(f"interrupted: {e}" if str(e) else "interrupted", file=sys.stderr)
    return getattr(e, "exit_status", 130)
