"""A stop signal to the notebook's runner reaches the training: papermill runs the Jupyter kernel in a session of
its own, so Kaggle's SIGTERM to the runner never reaches it, and ipykernel ends a kernel whose parent is gone at
once (`os._exit`). `stop_when_the_runner_exits` turns the runner's end into a SIGTERM to the training, which
saves; an interrupted session exports its weights (tests/test_kaggle_training.py runs a session)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trm_kaggle import kaggle_training as KT

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
    from trm_kaggle.kaggle_training import stop_when_the_runner_exits
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


def test_ipykernels_parent_poller_stops_the_training_instead_of_exiting(monkeypatch):
    poller = pytest.importorskip("ipykernel.parentpoller")
    monkeypatch.setattr(poller, "os", poller.os)  # restored after the test
    monkeypatch.setattr(KT.threading.Thread, "start", lambda self: None)  # no watcher thread here
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        assert KT.stop_when_the_runner_exits()
        assert isinstance(poller.os, KT._SaveBeforeExit) and poller.os.getpid() == os.getpid()
        KT._session_running.set()
        poller.os._exit(1)  # the poller's call once the parent is gone: a SIGTERM, not an exit
        poller.os._exit(1)  # again within the grace while the session saves: still no exit
        assert got == [signal.SIGTERM]
    finally:
        KT._session_running.clear()
        signal.signal(signal.SIGTERM, previous)
