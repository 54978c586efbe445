"""Interrupts: `python build_bundle.py` stopped by Ctrl-C says `interrupted` in one line (status 130), as
`trm-kaggle bundle` does, never a traceback, at whatever stage it was: building a part, creating the
sandbox, or running the kernel offline (whose notebook run, in a session of its own that the terminal's
Ctrl-C does not reach, is stopped with it instead of running on). SIGTERM (`kill`, a scheduler's stop) does
the same with `interrupted: stopped by SIGTERM` and status 143.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import rehearsal, sandbox

from conftest import make_export, make_notebook

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def ctrl_c_reaches_python():
    """A run started in the background of a shell without job control inherits SIGINT ignored (and so would every
    process it starts): these tests deliver Ctrl-C, so they give this process, and through it their children,
    Python's own handler for the test's length."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)


def interrupted_once(capsys, rc: int) -> None:
    err = capsys.readouterr().err
    assert rc == 130 and err == "interrupted\n", err


def ctrl_c(*_args, **_kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("stage", ["build_bundle", "execute", "push"])
def test_build_bundle_interrupted_at_any_stage_says_one_line(tmp_path, capsys, monkeypatch, stage):
    monkeypatch.setattr(B, stage, ctrl_c)
    monkeypatch.setattr(B, "push_unavailable", lambda: None)  # as with credentials: the push stage is reached
    args = [str(tmp_path / "out"), "--no-download", "--weights", str(make_export(tmp_path / "exp")),
            "--notebook", str(make_notebook(tmp_path / "nb.ipynb"))]
    rc = B.main(args + {"build_bundle": [], "execute": ["--execute"], "push": ["--push"]}[stage])
    interrupted_once(capsys, rc)


def test_trm_kaggle_bundle_says_the_same(tmp_path, capsys, monkeypatch):
    from trm_kaggle.cli import main

    monkeypatch.setattr(B, "build_bundle", ctrl_c)
    interrupted_once(capsys, main(["bundle", str(tmp_path / "out"), "--no-download", "--weights",
                                   str(make_export(tmp_path / "exp"))]))


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_an_interrupted_notebook_run_stops_its_process_group(tmp_path):
    """The notebook runs in its own session (papermill and its kernel): Ctrl-C reaches only this process, which
    stops the whole group before it says `interrupted`."""
    if not Path("/proc").is_dir():
        pytest.skip("needs Linux /proc")
    pids = tmp_path / "pids"
    cmd = ["sh", "-c", f"sleep 300 & echo $! > {pids}; echo started; wait"]
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        rehearsal._run_logged(cmd, env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log", timeout=60,
                            echo=lambda _: None)
    timer.cancel()
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild), "the notebook run outlived the interrupted command"
    assert time.monotonic() - t0 < 30


def test_a_stop_while_the_notebook_run_starts_stops_it_too(tmp_path, monkeypatch):
    """A SIGTERM landing as the run's process was made (after the fork, before `proc` was assigned and the stop's
    cleanup could name its group) left the run going: a CI run on a loaded machine saw the notebook outlive the
    terminated command. The stop is held while the group starts, then stops it."""
    if not Path("/proc").is_dir():
        pytest.skip("needs Linux /proc")
    pids = tmp_path / "pids"
    real = subprocess.Popen

    def started_then_stopped(*args, **kw):
        proc = real(*args, **kw)
        deadline = time.monotonic() + 30
        while not (pids.is_file() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # before Popen has returned to its caller
        return proc

    monkeypatch.setattr(rehearsal.subprocess, "Popen", started_then_stopped)
    with pytest.raises(KeyboardInterrupt):
        rehearsal._run_logged(["sh", "-c", f"sleep 300 & echo $! > {pids}; wait"], env=dict(os.environ), cwd=tmp_path,
                              log_path=tmp_path / "log", timeout=60, echo=lambda _: None)
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 30
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(grandchild)
    if alive:
        os.kill(grandchild, signal.SIGKILL)
    assert not alive, "the notebook run outlived the stop"


# A notebook run whose group ignores SIGTERM (so that it is stopped by the SIGKILL that follows), run by a process
# that takes signals as a command does: what a second Ctrl-C met while the first stopped that group.
TWICE = r"""
import sys
from pathlib import Path
from trm_kaggle import interrupts
from trm_kaggle.kaggle import rehearsal

pids = Path(sys.argv[1])
rehearsal.STOP_WAIT_S = 2.0
interrupts.take_sigterm()
try:
    rehearsal._run_logged(["sh", "-c", f"trap '' TERM; sleep 300 & echo $! > {pids}; wait"], env=None,
                          cwd=pids.parent, log_path=pids.parent / "log", timeout=600, echo=lambda _: None)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_a_second_interrupt_waits_while_the_notebook_run_is_stopped(tmp_path):
    """`timeout`'s SIGINT reaches the command twice (to it, then to its group): the second, 0.3 s later, ended the
    command by the signal's default while it waited for the notebook's group, which then ran on alone and wrote
    into the bundle. Now a second stop waits for that group (SIGKILL after STOP_WAIT_S)."""
    if not Path("/proc").is_dir():
        pytest.skip("needs Linux /proc")
    pids = tmp_path / "pids"
    p = subprocess.Popen([sys.executable, "-c", TWICE, str(pids)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not (pids.is_file() and pids.read_text().strip()):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        grandchild = int(pids.read_text())
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        assert p.returncode == 130
        assert not _alive(grandchild), "the notebook run outlived the interrupted command"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if pids.is_file() and pids.read_text().strip() and _alive(int(pids.read_text())):
            os.kill(int(pids.read_text()), signal.SIGKILL)


# A bundle command in a process of its own whose build is a stand-in and whose --execute runs a stand-in notebook
# run through the sandbox's runner (a session of its own with a child that would outlive it): what SIGTERM meets.
TERMINATED = r"""
import sys
from pathlib import Path
from trm_kaggle.kaggle import bundle as B, rehearsal

entry, stage, out, export, notebook = sys.argv[1:6]
pids = Path(out).parent / "pids"

def build_bundle(out_dir, **kw):
    if stage == "build":
        pids.write_text("")
        import time
        time.sleep(300)
    return {"out_dir": out_dir, "wheels": {"id": "w", "trm_kaggle_wheel": "t.whl", "shipped": {}, "total_bytes": 0,
                                           "install": "pip"},
            "weights": {"id": "x", "files": []}, "kernel": {"id": "k", "code_file": "nb.ipynb", "competition": "c",
                                                            "enable_gpu": False, "machine_shape": None}}

def execute(out_dir, **kw):
    rehearsal._run_logged(["sh", "-c", f"sleep 300 & echo $! > {pids}; wait"], env=None, cwd=Path(out_dir).parent,
                          log_path=Path(out_dir).parent / "log", timeout=600, echo=lambda _: None)

B.build_bundle, B.execute = build_bundle, execute
args = [out, "--no-download", "--user", "tester", "--weights", export, "--notebook", notebook, "--execute"]
if entry == "trm-kaggle bundle":
    from trm_kaggle.cli import main
    sys.exit(main(["bundle", *args]))
sys.exit(B.main(args))
"""


@pytest.mark.parametrize("stage", ["build", "execute"])
@pytest.mark.parametrize("entry", ["build_bundle.py", "trm-kaggle bundle"])
def test_sigterm_stops_the_bundle_and_its_notebook_run(tmp_path, entry, stage):
    """The reproducer: SIGTERM to `build_bundle.py --execute` (to its pid, as `kill` sends it) ended it and left
    the notebook run (its own process group) running. Now it stops that group, says one line and exits 143."""
    if not Path("/proc").is_dir():
        pytest.skip("needs Linux /proc")
    p = subprocess.Popen([sys.executable, "-c", TERMINATED, entry, stage, str(tmp_path / "out"),
                          str(make_export(tmp_path / "exp")), str(make_notebook(tmp_path / "nb.ipynb"))],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    pids = tmp_path / "pids"
    try:
        deadline = time.monotonic() + 120
        while not (pids.is_file() and (stage == "build" or pids.read_text().strip())):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == 143 and lines == ["interrupted: stopped by SIGTERM"], err
    if stage == "execute":
        grandchild = int(pids.read_text())
        deadline = time.monotonic() + 30
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(grandchild), "the notebook run outlived the terminated command"


@pytest.mark.slow  # a bundle built and its kernel started offline in a sandbox: ~1-2 min on a loaded machine
@pytest.mark.parametrize("signum, status, line", [(signal.SIGINT, 130, "interrupted"),
                                                  (signal.SIGTERM, 143, "interrupted: stopped by SIGTERM")])
def test_build_bundle_execute_interrupted_while_the_kernel_runs(tmp_path, signum, status, line):
    """The reproducer: `python build_bundle.py OUT --execute` and Ctrl-C (SIGINT to its process group, as a
    terminal sends it), or SIGTERM to its process alone (`kill PID`), while the notebook runs."""
    pytest.importorskip("papermill")
    try:
        sandbox.probe_netns()
    except TRMError as e:
        pytest.skip(f"no network namespace on this machine: {e}")
    (tmp_path / "c.json").write_text(json.dumps({"t1": {"train": [{"input": [[1]], "output": [[2]]}],
                                                        "test": [{"input": [[1]]}]}}))
    p = subprocess.Popen([sys.executable, str(REPO / "build_bundle.py"), str(tmp_path / "out"), "--no-download",
                          "--weights", str(make_export(tmp_path / "exp")), "--execute", "--challenges",
                          str(tmp_path / "c.json"), "--time-budget", "600", "--finetune-steps", "100000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = []
    try:
        for printed in p.stdout:
            seen.append(printed)
            if "with papermill, offline" in printed:
                break
        assert p.poll() is None, "".join(seen) + p.stderr.read()
        time.sleep(3)  # papermill and its kernel are starting
        if signum == signal.SIGINT:
            os.killpg(p.pid, signum)
        else:
            p.send_signal(signum)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == status and err.strip().splitlines()[-1] == line, err
    assert "Traceback" not in err
    sandbox_dir = str(tmp_path / "out" / "sandbox")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [d.name for d in Path("/proc").iterdir() if d.name.isdigit() and _cmdline_has(d, sandbox_dir)]
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"processes of the notebook run still running: {left}"


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes() and _alive(int(proc.name))
    except OSError:
        return False


@pytest.mark.parametrize("signum, status", [(signal.SIGHUP, 129), (signal.SIGTERM, 143)])
def test_a_closed_terminal_stops_a_build_as_sigterm_does(tmp_path, signum, status):
    """SIGHUP (a closed terminal or SSH session) once ended `build-sudoku` by Python's default, without a word
    and leaving its `.partial-<pid>` folder beside the output; now it is stopped as SIGTERM stops it."""
    out = tmp_path / "s9"
    p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "build-sudoku", "--output-dir", str(out), "--size",
                          "9", "--num-train", "100000", "--num-test", "10", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))  # as a terminal starts it
    try:  # whatever fails below, the build does not outlive the test (it would take a core from the next ones)
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("s9.partial-*")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, "the build ended before it could be stopped"
        p.send_signal(signum)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == status and f"interrupted: stopped by {signal.Signals(signum).name}" in err, err
    assert sorted(q.name for q in tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_stop_raises_and_later_ones_wait_for_the_cleanup(signum):
    """`interrupts.FirstStopOnly` (a sweep's stop): the first signal raises where the main thread is; a second one,
    during the cleanup that records what was stopped, is dropped; the previous handlers come back."""
    from trm_kaggle.interrupts import FirstStopOnly, Terminated

    expected = KeyboardInterrupt if signum == signal.SIGINT else Terminated
    before = signal.getsignal(signum)
    stops = FirstStopOnly()
    with pytest.raises(KeyboardInterrupt) as e:
        os.kill(os.getpid(), signum)
        time.sleep(1)  # the handler runs between bytecodes: it raises before this ends
    assert type(e.value) is expected
    os.kill(os.getpid(), signum)  # held: nothing raised
    time.sleep(0.05)
    stops.give_back()
    assert signal.getsignal(signum) is before


FINALIZER_STOP = """
import os, signal, sys, weakref
from trm_kaggle.interrupts import Terminated, take_sigterm
take_sigterm()
class Held: pass
held = Held()
def finalizer(_):  # the garbage collector's weakref callback: Python prints and drops what is raised here
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    for _ in range(1000): pass
ref = weakref.ref(held, finalizer)
try:
    del held
    for _ in range(10**7): pass
    print("ran on")
except KeyboardInterrupt as e:
    print("stopped", type(e).__name__)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_raised_inside_a_finalizer_still_stops(tmp_path, name):
    """A SIGTERM whose handler ran inside a weakref callback (pipeline's stage 4, 0.1 s in): Python printed
    "Exception ignored ... Terminated" and the pipeline ran on to exit 0."""
    done = subprocess.run([sys.executable, "-c", FINALIZER_STOP, name], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("stopped") and "Exception ignored" not in done.stderr, (done.stdout, done.stderr)


def test_the_stop_line_escapes_the_run_folder_it_names(capsys):
    """`train --config c.yaml` with `checkpoint_path: "rn\\n\\e[31mX"` stopped by SIGINT printed "train state saved to
    rn" and a second line starting with a raw escape sequence: the finished summary was escaped, the stop line not."""
    from trm_kaggle.interrupts import interrupted
    from trm_kaggle.train.stops import TrainingInterrupted

    stop = TrainingInterrupted("stopped by SIGINT at step 19: train state saved to rn\n\x1b[31mX/state_step00000019.pt",
                               signal.SIGINT, 19)
    assert interrupted(stop) == 130
    err = capsys.readouterr().err
    assert err == "interrupted: stopped by SIGINT at step 19: train state saved to rn\\n\\x1b[31mX/state_step00000019.pt\n"
