"""trm_kaggle/lifetime.py: a pool's worker ends with its parent and leaves a terminal's Ctrl-C to it."""

from __future__ import annotations

import subprocess
import sys

import pytest

CTRL_C_AT_A_WORKER = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job inherits Ctrl-C ignored\n"
    "from trm_kaggle.lifetime import exit_with_parent\n"
    "exit_with_parent(ctrl_c={ctrl_c})\n"
    "os.kill(os.getpid(), signal.SIGINT)  # what a terminal's Ctrl-C to the process group does to a worker\n"
    "time.sleep(0.2)\n"
    "print('still working')\n")


@pytest.mark.parametrize("ctrl_c", [True, False])
def test_a_worker_leaves_ctrl_c_to_its_parent_when_told(ctrl_c):
    """A build's pool worker (`ctrl_c=False`) printed its own KeyboardInterrupt traceback before its parent's one
    `interrupted` line; it now ignores the group's Ctrl-C, and the parent, which answers it, ends the pool."""
    p = subprocess.run([sys.executable, "-c", CTRL_C_AT_A_WORKER.format(ctrl_c=ctrl_c)], capture_output=True,
                       text=True, timeout=60)
    if ctrl_c:
        assert p.returncode != 0 and "KeyboardInterrupt" in p.stderr
    else:
        assert p.returncode == 0 and p.stdout == "still working\n" and not p.stderr, p.stderr


SIGTERM_AT_A_HELD_WORKER = (
    "import multiprocessing, os, signal, sys, time\n"
    "from trm_kaggle.interrupts import stops_held, take_sigterm\n"
    "from trm_kaggle.lifetime import exit_with_parent\n"
    "take_sigterm()  # what every command does first: its workers inherit the handlers\n"
    "def work(ready):\n"
    "    exit_with_parent(ctrl_c=False)\n"
    "    with stops_held():  # a Python handler that cannot run now: as one blocked in C (a queue's lock)\n"
    "        ready.set()\n"
    "        time.sleep(30)\n"
    "ready = multiprocessing.get_context('fork').Event()\n"
    "p = multiprocessing.get_context('fork').Process(target=work, args=(ready,))\n"
    "p.start()\n"
    "ready.wait(20)\n"
    "p.terminate()  # what Pool.terminate() sends each worker, and then joins it\n"
    "p.join(10)\n"
    "print(p.exitcode)\n")


def test_a_worker_ends_by_sigterm_whatever_it_is_doing():
    """A pool's worker inherited the command's Python SIGTERM handler, which runs only between bytecodes: a
    SIGTERM landing just before the worker blocked on the pool's queue lock was noted, never handled, and the
    build's Pool.terminate() joined that worker for ever. The worker now takes the signal's default."""
    p = subprocess.run([sys.executable, "-c", SIGTERM_AT_A_HELD_WORKER], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "-15", (p.stdout, p.stderr)
