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
