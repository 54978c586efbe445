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


# A command's first Ctrl-C unwinds through a generator whose cleanup waits (a data loader joining its prefetch
# thread) and a second Ctrl-C lands in that wait, after the command's last line; or a training took the first
# in its own handler (saved, said so) and gave the command's handler back.
SECOND_CTRL_C_IN_CLEANUP = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's
from trm_kaggle import interrupts
interrupts.take_sigterm()
later = sys.argv[2] == "later"  # the second after REPEAT_S (a person's), or at once (`timeout` saying it again)

def second():
    if later:
        time.sleep(interrupts.REPEAT_S + 0.2)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5 if later else 0.5)  # ended here by the signal, or the repeat dropped and the cleanup goes on
if sys.argv[1] == "own-handler":  # the training's handler takes the first stop, then puts the command's back
    import torch
    from trm_kaggle.train.runtime import Runtime
    from trm_kaggle.train.stops import StopControl

    rt = Runtime(torch.device("cpu"), torch.float32, "")
    with StopControl(rt, save_every_s=None, deadline=None, deadline_name="", signals=True) as control:
        os.kill(os.getpid(), signal.SIGINT)
        assert control.poll(5).stop
    print("interrupted: stopped by SIGINT at step 5", file=sys.stderr, flush=True)
    second()  # as a loader's cleanup joins its thread
    sys.exit(130)

if sys.argv[1] == "sweep-handler":  # a sweep's handler takes the first stop, records it, puts the command's back
    stops = interrupts.FirstStopOnly()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        stops.give_back()
    print("interrupted", file=sys.stderr, flush=True)
    second()
    sys.exit(130)

def batches():
    try:
        yield 1
        yield 2
    finally:
        second()  # while the cleanup waits

it = batches()
next(it)
try:
    os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C, while the command works on a batch
    time.sleep(5)
except KeyboardInterrupt as e:
    status = interrupts.interrupted(e)
del it  # the generator closes after the last line, as a frame of the stopped command is freed
sys.exit(status)
"""


@pytest.mark.parametrize("when", ["later", "repeat"])
@pytest.mark.parametrize("first", ["command-handler", "own-handler", "sweep-handler"])
def test_a_second_ctrl_c_during_the_cleanup_ends_the_process_without_a_traceback(first, when):
    """Two SIGINTs 50 ms apart during `train` or `submit` printed "Exception ignored in ... PuzzleLoader._consume
    ... KeyboardInterrupt" after the "interrupted" line: the second, raised inside the loader's cleanup. As for
    SIGTERM, a later SIGINT ends the process by the signal, without a word after the command's last line. One
    within REPEAT_S of the first is that stop said again (`timeout` forwards what its group got; two 10 ms apart
    ended a bundle by the signal, its partial folder left): dropped, and the cleanup finishes."""
    p = subprocess.run([sys.executable, "-c", SECOND_CTRL_C_IN_CLEANUP, first, when], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == (-signal.SIGINT if when == "later" else 130), (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines()[-1].startswith("interrupted") and "Traceback" not in p.stderr, p.stderr
    assert "Exception ignored" not in p.stderr, p.stderr


def test_disarm_leaves_a_handler_that_is_not_the_commands():
    """A library caller's handler (a notebook's, pytest's) stays as it is after a training took a stop."""
    from trm_kaggle import interrupts

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, *interrupts.TERMINATING)}
    interrupts.disarm()
    assert {s: signal.getsignal(s) for s in before} == before


IGNORED_SIGINT = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a shell without job control
import torch
from trm_kaggle import interrupts
from trm_kaggle.train.runtime import Runtime
from trm_kaggle.train.stops import StopControl

interrupts.take_sigterm()
rt = Runtime(torch.device("cpu"), torch.float32, "")
with StopControl(rt, save_every_s=None, deadline=None, deadline_name="", signals=True) as control:
    os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C meant for the script's foreground command
    time.sleep(0.3)
    assert not control.poll(5).stop, "the training took an ignored SIGINT"
stops = interrupts.FirstStopOnly()
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.3)
stops.give_back()
interrupts.quiet_teardown()
assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
print("ignored")
"""


def test_an_ignored_sigint_stays_ignored_by_the_training_too():
    """`train` in a script's background (SIGINT ignored from the start) stopped at the Ctrl-C meant for the
    foreground command, while `build-arc` kept it ignored: the training's own handler took SIGINT whatever it was."""
    p = subprocess.run([sys.executable, "-c", IGNORED_SIGINT], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ignored", p.stderr


# A stop that lands inside torch's first import: there torch.distributed's set-up runs C++ (pybind11) that calls
# back into Python, and an exception raised by the handler inside it aborted the process (std::terminate, a C++
# dump, status 134). The finder below sends the signal at that point of the import, in plain Python.
STOPPED_INSIDE_TORCH = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from trm_kaggle import interrupts
interrupts.take_sigterm()

class SignalOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == "torch.distributed":
            os.kill(os.getpid(), int(sys.argv[1]))
            os.kill(os.getpid(), int(sys.argv[1]))  # said twice (timeout forwarding its group's): taken once
        return None

sys.meta_path.insert(0, SignalOnImport())
try:
    import torch
except KeyboardInterrupt as e:
    # the import is refused (the stop ends the command), but only once torch's code, C++ included, has run
    print(type(e).__name__, "torch.distributed" in sys.modules, "torch.nn" in sys.modules)
"""


@pytest.mark.parametrize("signum, name", [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "KeyboardInterrupt")])
def test_a_stop_inside_torchs_first_import_is_raised_once_it_has_loaded(signum, name):
    p = subprocess.run([sys.executable, "-c", STOPPED_INSIDE_TORCH, str(int(signum))], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.split() == [name, "True", "True"], p.stdout + p.stderr


def test_an_unknown_option_is_quoted_escaped_by_every_parser(capsys):
    """`trm-kaggle train --x<ESC>[2J` and `build_bundle.py OUT --x<ESC>]0;title<BEL>`: argparse's "unrecognized
    arguments" line held the raw escape sequence (one set the terminal's title)."""
    from trm_kaggle.cli import main
    from trm_kaggle.kaggle.bundle import make_parser

    with pytest.raises(SystemExit) as e:
        main(["train", "--x\x1b[2J"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments: --x\\x1b[2J" in err and "\x1b" not in err, err
    with pytest.raises(SystemExit) as e:
        make_parser().parse_args(["out", "--x\x1b]0;title\x07"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--x\\x1b]0;title\\x07" in err and "\x1b" not in err and "\x07" not in err, err
