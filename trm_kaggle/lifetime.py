"""Worker processes that end when their parent does.

A pool worker waits on a queue for its next job; if the parent is killed (kill -9, the
OOM killer, a Kaggle kernel restart) nobody ever writes to that queue, and the worker
waits forever. `exit_with_parent()`, called first thing in each worker (e.g. as a pool's
initializer), starts a daemon thread that watches `os.getppid()`: it changes when the
parent is gone (the orphan is adopted by init or a subreaper), and the worker then exits
within `POLL_S` seconds.

Linux's prctl(PR_SET_PDEATHSIG) would be immediate, but it fires when the *thread* that
forked the worker ends, which kills healthy workers of a pool started from a short-lived
thread; polling has no such trap and works on every POSIX system.

A worker forked from a command inherits its stop handlers (`interrupts.raise_terminated`), which run in Python
between two bytecodes: a SIGTERM that lands just before the worker blocks in C (a pool's queue lock, after its
`sem_trywait` and before its `sem_wait`) is noted and never handled, and the pool's `terminate()`, which sends
exactly that SIGTERM, then joins the worker for ever. `exit_with_parent()` puts the signals' default back, so
the kernel ends the worker whatever it is doing.
"""

from __future__ import annotations

import os
import signal
import threading

from trm_kaggle.interrupts import TERMINATING
from trm_kaggle.names import ascii_number

POLL_S = 0.5


def exit_with_parent(parent_pid: int | None = None, ctrl_c: bool = True) -> None:
    """End this process when `parent_pid` (default: the current parent) is no longer its parent. `ctrl_c=False`:
    a terminal's Ctrl-C, which reaches the whole process group, is left to the parent (a pool's worker would
    print its own KeyboardInterrupt traceback before the parent's one line; the parent then ends it).
    SIGTERM, SIGHUP and the other stop signals take their default from here on (one ignored stays ignored): the
    worker ends by the signal at once, even blocked in C, and its parent says what stopped."""
    # blocked while the handlers change: pthread_sigmask first runs a handler whose signal already came (its
    # Python handler not run yet: replaced by the default now, that signal would be dropped), and one that comes
    # meanwhile waits in the kernel for the default
    held = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATING)
    try:
        for signum in TERMINATING:
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if not ctrl_c:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid() if parent_pid is None else parent_pid
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(POLL_S):
            if os.getppid() != parent:
                os._exit(1)  # no cleanup: the parent's half-built directory is a .partial-* the next run removes

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


#: The environment variable a parent sets for a child that must stop when it is gone (`stop_with_parent`): the
#: parent's pid. A sweep's trainings run in sessions of their own (a terminal's Ctrl-C reaches the sweep alone),
#: so a SIGKILL of the sweep's process group never reaches them: they watch the sweep instead.
PARENT_ENV = "TRM_KAGGLE_PARENT_PID"


def stop_with_parent(grace_s: float = 120.0) -> None:
    """When PARENT_ENV names this process's parent, watch it: once the parent is gone, this process gets SIGTERM
    (a training saves its state and stops, as on a scheduler's stop), and is ended outright `grace_s` later if it
    has not stopped by then. A process whose parent is someone else (a grandchild that inherited the variable) is
    left alone; one whose named parent is already gone stops at once."""
    parent = ascii_number(os.environ.get(PARENT_ENV, ""))
    if parent is None:
        return
    if os.getppid() != parent:
        try:
            os.kill(parent, 0)
            return  # alive, and not our parent: the variable was inherited from further up
        except ProcessLookupError:
            pass  # gone before we looked: stop now
        except PermissionError:
            return

    def watch() -> None:
        stop = threading.Event()
        while os.getppid() == parent and not stop.wait(POLL_S):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        stop.wait(grace_s)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()
