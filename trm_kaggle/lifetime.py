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
"""

from __future__ import annotations

import os
import threading

POLL_S = 0.5


def exit_with_parent(parent_pid: int | None = None) -> None:
    """End this process when `parent_pid` (default: the current parent) is no longer its parent."""
    parent = os.getppid() if parent_pid is None else parent_pid
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(POLL_S):
            if os.getppid() != parent:
                os._exit(1)  # no cleanup: the parent's half-built directory is a .partial-* the next run removes

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
