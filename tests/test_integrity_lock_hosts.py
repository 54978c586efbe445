"""Where flock is unavailable (ENOLCK on some NFS mounts) the lock file's record decides, and a holder recorded
by another host is never taken for stale: whether it lives cannot be seen from here, so the command is refused
in one line that says to remove the file once that process has ended. A dead holder of this host is stale."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import fcntl
import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.locks import LOCK_FILE, directory_lock, refuse_if_held


@pytest.fixture
def no_flock(monkeypatch):
    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)


def test_a_holder_on_another_host_is_refused_not_taken(tmp_path, no_flock):
    (tmp_path / LOCK_FILE).write_text(f"{os.getpid() + 1} node-b.cluster training\ttrm-kaggle train x\n")
    for attempt in (lambda: refuse_if_held(tmp_path), lambda: directory_lock(tmp_path, "training").__enter__()):
        with pytest.raises(TRMError) as refused:
            attempt()
        line = str(refused.value)
        assert "cannot lock files" in line and "node-b.cluster" in line and f"remove {tmp_path / LOCK_FILE}" in line
        assert "\n" not in line
    assert "node-b.cluster" in (tmp_path / LOCK_FILE).read_text()  # the record was not overwritten


def test_a_dead_holder_of_this_host_is_stale_and_taken(tmp_path, no_flock):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / LOCK_FILE).write_text(f"{gone.pid} {socket.gethostname()} training\ttrm-kaggle train x\n")
    with directory_lock(tmp_path, "training") as held:
        assert held is not None and str(os.getpid()) in (tmp_path / LOCK_FILE).read_text()
