"""A sweep's trainings run in sessions of their own (a terminal's Ctrl-C reaches the sweep alone, which stops
them itself), so a SIGKILL of the sweep's process group never reaches them: each watches the sweep
(`trm_kaggle.lifetime.stop_with_parent`, told its pid by the sweep) and stops by SIGTERM (saving its state) once
the sweep is gone, instead of training on unwatched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from trm_kaggle.lifetime import PARENT_ENV

CHILD = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from trm_kaggle.lifetime import stop_with_parent
    signal.signal(signal.SIGTERM, lambda s, f: (Path(sys.argv[1]).write_text("SIGTERM"), sys.exit(143)))
    stop_with_parent()
    Path(sys.argv[1] + ".started").write_text("")
    time.sleep(60)
""")

PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    env = {**os.environ, %r: str(os.getpid())}
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(60)
""" % PARENT_ENV)


def test_a_child_in_its_own_session_stops_when_its_parent_is_killed(tmp_path):
    mark = tmp_path / "child"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(mark)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 60
    while not (tmp_path / "child.started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(parent.pid, signal.SIGKILL)  # the sweep's process group: the child is not in it
    parent.wait()
    deadline = time.monotonic() + 20
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert mark.exists() and mark.read_text() == "SIGTERM", "the child outlived its parent"
    finally:
        try:
            os.kill(child_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_sweep_tells_each_training_its_pid(monkeypatch, tmp_path):
    from trm_kaggle.experiments import sweep as S

    seen = {}

    class Stop(Exception):
        pass

    def popen(cmd, env=None, **kw):
        seen.update(env)
        raise Stop

    monkeypatch.setattr(S.subprocess, "Popen", popen)
    monkeypatch.setattr(S, "dump_config", lambda cfg: "")
    try:
        S._launch(_Run(), {"attempts": 0, "seconds": 0.0}, 0, tmp_path, [], 1, _Lock(tmp_path))
    except Stop:
        pass
    assert seen[PARENT_ENV] == str(os.getpid())


class _Run:
    name = "r"

    class config:
        threads = 1
        device = "cpu"

    def command(self, run_dir, extra):
        return ["true"]


class _Lock:
    def __init__(self, folder):
        (folder / "r").mkdir()
        self.fd, self.directory, self.handed_down = os.open(folder, os.O_RDONLY), folder, False
