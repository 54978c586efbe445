"""A stop signal to the notebook's runner reaches the training: papermill runs the Jupyter kernel in a session of
its own, so Kaggle's SIGTERM to the runner never reaches it, and ipykernel ends a kernel whose parent is gone at
once (`os._exit`). `trm_kaggle.runner_watch.stop_when_the_runner_exits` turns the runner's end into a SIGTERM to
the training, which saves while `training()` holds the kernel; an interrupted session exports its weights
(tests/test_kaggle_training.py runs a session; tests/test_notebooks.py stops papermill running the train notebook)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trm_kaggle import runner_watch as RW

# the runner: starts the "kernel" in its own session, as jupyter_client does, then waits to be signalled
RUNNER = textwrap.dedent("""
    import subprocess, sys, time
    kernel = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], start_new_session=True)
    time.sleep(600)
""")
# the "kernel": a training loop that saves when SIGTERM reaches it
KERNEL = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from trm_kaggle.runner_watch import stop_when_the_runner_exits
    out = Path(sys.argv[1])
    def save(signum, frame):
        out.write_text("saved")
        sys.exit(0)
    signal.signal(signal.SIGTERM, save)
    assert stop_when_the_runner_exits(poll_s=0.1)
    out.with_suffix(".ready").write_text("ready")
    for _ in range(6000):
        time.sleep(0.01)
""")


def test_a_sigterm_to_the_runner_reaches_the_training(tmp_path):
    out = tmp_path / "state.txt"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, KERNEL, str(out)])
    try:
        deadline = time.monotonic() + 60
        while not out.with_suffix(".ready").exists():
            assert time.monotonic() < deadline and runner.poll() is None, "the kernel did not start"
            time.sleep(0.05)
        runner.send_signal(signal.SIGTERM)  # Kaggle's stop, to the runner alone
        runner.wait(10)
        while not out.exists():
            assert time.monotonic() < deadline, "the training never saved"
            time.sleep(0.05)
        assert out.read_text() == "saved"
    finally:
        runner.kill()


# a kernel as ipykernel runs one: its parent poller (which ends it at once when the runner is gone) and a training
# of any kind, whose save on SIGTERM takes longer than the poller's next look (a second)
POLLED_KERNEL = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from ipykernel.parentpoller import ParentPollerUnix
    from trm_kaggle.runner_watch import stop_when_the_runner_exits, training
    out = Path(sys.argv[1])
    stopped = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    ParentPollerUnix(parent_pid=os.getppid()).start()
    assert stop_when_the_runner_exits(poll_s=0.1)
    out.with_suffix(".ready").write_text(str(os.getpid()))
    try:
        with training():
            while not stopped:
                time.sleep(0.01)
            time.sleep(2.5)  # the save
            out.write_text("saved")
            raise KeyboardInterrupt(f"stopped by SIGTERM at step 7: train state saved to {out}")
    except KeyboardInterrupt:  # the cell's error; the kernel idles until its poller ends it
        time.sleep(60)
""")


def test_a_kernel_whose_runner_is_gone_exits_once_its_training_has_saved(tmp_path):
    pytest.importorskip("ipykernel.parentpoller")
    out = tmp_path / "state.txt"
    with open(tmp_path / "stderr", "wb") as stderr:  # the runner's, which the kernel inherits
        runner = subprocess.Popen([sys.executable, "-c", RUNNER, POLLED_KERNEL, str(out)], stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        while not out.with_suffix(".ready").exists() or not out.with_suffix(".ready").read_text():
            assert time.monotonic() < deadline and runner.poll() is None, "the kernel did not start"
            time.sleep(0.05)
        kernel = int(out.with_suffix(".ready").read_text())
        runner.send_signal(signal.SIGTERM)
        runner.wait(10)
        while not out.exists():
            assert _alive(kernel) or out.exists(), "the kernel ended before its training saved"
            assert time.monotonic() < deadline, "the training never saved"
            time.sleep(0.05)
        wait_for_exit(kernel, deadline, "the kernel outlived its saved training")
    finally:
        runner.kill()
    said = (tmp_path / "stderr").read_text()
    assert f"KeyboardInterrupt: stopped by SIGTERM at step 7: train state saved to {out}" in said, said
    assert said.count("the notebook's runner is gone") == 1, said  # the poller and the watch: one stop


def wait_for_exit(pid: int, deadline: float, why: str) -> None:
    """Until process `pid` has ended; failing with `why` once time.monotonic() passes `deadline`."""
    while _alive(pid):
        assert time.monotonic() < deadline, why
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (an ended process nobody has reaped yet, a zombie, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.fixture
def fresh_watch(monkeypatch):
    """The watch's once-per-kernel state, new for the test and put back after it (the stop is sent once a process)."""
    monkeypatch.setattr(RW, "_runner_stop", RW.threading.Lock())
    monkeypatch.setattr(RW, "_runner_gone", RW.threading.Event())
    monkeypatch.setattr(RW, "_at_work", [0])
    monkeypatch.setattr(RW, "_watches", {})
    monkeypatch.setattr(RW.threading.Thread, "start", lambda self: None)  # no watcher thread here


def test_ipykernels_parent_poller_stops_the_training_instead_of_exiting(monkeypatch, fresh_watch):
    poller = pytest.importorskip("ipykernel.parentpoller")
    monkeypatch.setattr(poller, "os", poller.os)  # restored after the test
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        assert RW.stop_when_the_runner_exits()
        assert isinstance(poller.os, RW._SaveBeforeExit) and poller.os.getpid() == os.getpid()
        with RW.training():
            poller.os._exit(1)  # the poller's call once the parent is gone: a SIGTERM, not an exit
            poller.os._exit(1)  # again within the grace while the training saves: still no exit
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_kernel_exits_once_the_training_block_ends_and_says_how_it_ended(monkeypatch, fresh_watch):
    """Any training, not only a Kaggle session, holds the kernel of a gone runner (the train notebook's kernel
    exited at once, its state unsaved); the line it ends with goes to the kernel's own stderr (ipykernel's copy of
    descriptor 2), not to the runner's stream, and escaped."""
    exits, sent = [], []
    monkeypatch.setattr(RW.os, "_exit", exits.append)
    monkeypatch.setattr(RW.os, "kill", lambda pid, signum: sent.append(signum))
    said_fd, kernel_stderr = os.pipe()

    class OutStream:  # ipykernel's sys.stderr: what reaches it goes to the runner, gone
        _original_stdstream_copy = kernel_stderr
        got = []

        def write(self, text):
            self.got.append(text)

        def flush(self):
            pass

    monkeypatch.setattr(RW.sys, "stderr", OutStream())
    poller = RW._SaveBeforeExit()
    with pytest.raises(KeyboardInterrupt):
        with RW.training(), RW.training():  # nested: the outer one still holds the kernel
            poller._exit(1)
            assert sent == [signal.SIGTERM] and exits == []
            raise KeyboardInterrupt("stopped by SIGTERM at step 3: train state saved to run/\x1b[2Jstate.pt")
    os.close(kernel_stderr)
    with os.fdopen(said_fd) as said:
        lines = said.read().splitlines()
    assert lines == ["the notebook's runner is gone: stopping the training (SIGTERM) so that it saves",
                     "KeyboardInterrupt: stopped by SIGTERM at step 3: train state saved to run/\\x1b[2Jstate.pt"], lines
    assert OutStream.got == []
    poller._exit(1)  # the poller's next look: no training runs now
    assert exits == [1] and sent == [signal.SIGTERM]
    assert RW._stop_for_the_gone_runner() is False  # the watch thread's look: the stop was sent already


def test_the_grace_ends_a_training_that_never_ends(monkeypatch, fresh_watch):
    exits = []
    monkeypatch.setattr(RW.os, "_exit", exits.append)
    monkeypatch.setattr(RW.os, "kill", lambda pid, signum: None)
    poller = RW._SaveBeforeExit()
    with RW.training():
        poller._exit(1)
        poller._exit(1)
        assert exits == []
        poller.first -= RW.RUNNER_GRACE_S + 1
        poller._exit(1)
        assert exits == [1]


def test_a_notebook_run_again_watches_its_runner_with_one_thread(monkeypatch, fresh_watch):
    started = []
    monkeypatch.setattr(RW.threading.Thread, "start", lambda self: started.append(self))
    monkeypatch.setattr(RW.threading.Thread, "is_alive", lambda self: self in started)
    assert RW.stop_when_the_runner_exits() and RW.stop_when_the_runner_exits()
    assert len(started) == 1
