"""trm_kaggle/console.py: a stop that lands while a command is still importing is one line, never a traceback
(Ctrl-C) nor a silent death (SIGTERM: Python's default ends the process without a word)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# A command whose first import is where the signal lands: a finder that sends it when the command's package is
# looked up (the window in which a real `trm-kaggle train` spends a second or two).
STOPPED_WHILE_IMPORTING = r"""
import importlib.abc, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's: a background job inherits it ignored
from trm_kaggle import console

class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[2]:
            os.kill(os.getpid(), int(sys.argv[1]))
        return None

sys.meta_path.insert(0, SignalOnImport())
sys.exit(console.run(sys.argv[3]))
"""


@pytest.mark.parametrize("command, module", [("trm-kaggle", "trm_kaggle.cli"),
                                             ("build_bundle.py", "trm_kaggle.kaggle")])
@pytest.mark.parametrize("signum, status, line", [(signal.SIGTERM, 143, "interrupted: stopped by SIGTERM"),
                                                  (signal.SIGINT, 130, "interrupted")])
def test_a_stop_while_the_command_loads_is_one_line_and_its_status(command, module, signum, status, line):
    p = subprocess.run([sys.executable, "-c", STOPPED_WHILE_IMPORTING, str(int(signum)), module, command],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == status and p.stderr.strip().splitlines() == [line], p.stderr


def test_sigterm_to_a_command_at_work_stops_it_as_ctrl_c_does(tmp_path):
    """Past its imports the handler stays for a command that does not answer SIGTERM itself: a dataset being
    generated is stopped as by Ctrl-C (one line, status 143) and leaves no dataset behind."""
    import os
    import time

    out = tmp_path / "sudoku"
    p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "build-sudoku", "--output-dir", str(out), "--size", "9",
                          "--num-train", "1000000", "--num-test", "10", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        time.sleep(4)  # imports done, puzzles being generated (a million take hours)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143 and err.strip().splitlines()[-1] == "interrupted: stopped by SIGTERM", err
    assert "Traceback" not in err and not out.exists()
