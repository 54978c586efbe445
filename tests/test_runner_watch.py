"""trm_kaggle.runner_watch's arguments (tests/test_kaggle_runner_stop.py stops a runner; tests/test_notebooks.py
stops papermill running the train notebook)."""

from __future__ import annotations

import errno
import logging
import threading

import pytest

from trm_kaggle import runner_watch as RW


@pytest.mark.parametrize("poll_s", [float("nan"), float("inf"), -1, 0, "1", 1e308, True, None])
def test_a_wrong_poll_period_is_refused_before_the_watch_starts(monkeypatch, poll_s):
    """The reproducer: NaN, -1, '1' or 1e308 returned True ("watched") and the watch thread died in time.sleep with
    a traceback, the runner no longer watched; 0 busy-polled."""
    started = []
    monkeypatch.setattr(RW.threading.Thread, "start", lambda self: started.append(self))
    monkeypatch.setattr(RW, "_watches", {})
    with pytest.raises(ValueError, match=r"^poll_s=.*: expected a number from 0\.01 to 3600$"):
        RW.stop_when_the_runner_exits(poll_s)
    assert started == []


def test_a_poll_period_in_range_starts_one_watch(monkeypatch):
    started = []
    monkeypatch.setattr(RW.threading.Thread, "start", lambda self: started.append(self))
    monkeypatch.setattr(RW, "_watches", {})
    monkeypatch.setattr(RW.os, "getppid", lambda: 4242)  # a runner, whatever ran the tests
    poller = pytest.importorskip("ipykernel.parentpoller")
    monkeypatch.setattr(poller, "os", poller.os)  # the call replaces it: put back after the test
    assert RW.stop_when_the_runner_exits(0.5) is True
    assert len(started) == 1 and isinstance(started[0], threading.Thread) and started[0].name == "trm-runner-watch"


class _Alive:
    def is_alive(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch):
    """The module's process-wide state as a fresh kernel holds it: another test in this worker may have seen its
    runner go (`_runner_gone` is set once, for the process's life) or left a block counted."""
    monkeypatch.setattr(RW, "_runner_gone", threading.Event())
    monkeypatch.setattr(RW, "_at_work", [0])


def test_a_stop_under_a_watched_runner_is_said_on_the_kernels_own_stderr(monkeypatch):
    """The reproducer: papermill's Ctrl-C interrupts the kernel, whose TrainingInterrupted line (the state it saved)
    reached the executed notebook alone; the terminal showed ipykernel's ZMQError traceback and papermill's
    "Aborted!". The line is said on the kernel's stderr (the runner's terminal), and the traceback of the reply to
    the closed sockets is dropped from the kernel's log."""
    said = []
    monkeypatch.setattr(RW, "_say", said.append)
    monkeypatch.setattr(RW, "_watches", {4242: _Alive()})
    log = logging.getLogger("trm-test-kernel")
    monkeypatch.setattr(RW, "_quiet_replies_to_no_one", lambda: log.addFilter(RW._RepliesToNoOne()))
    with pytest.raises(KeyboardInterrupt):
        with RW.training():
            with RW.training():  # the outermost block says it, once
                raise KeyboardInterrupt("stopped by SIGINT at step 4: train state saved to run/state.pt")
    assert said == ["KeyboardInterrupt: stopped by SIGINT at step 4: train state saved to run/state.pt"]

    class ZMQError(Exception):  # zmq's, as ipykernel logs it: by its name and errno
        errno = errno.ENOTSOCK

    def record(e: BaseException) -> logging.LogRecord:
        return log.makeRecord(log.name, logging.ERROR, __file__, 1, "Exception in message handler:", (),
                              (type(e), e, None))

    assert not log.filter(record(ZMQError("Socket operation on non-socket")))
    assert log.filter(record(ValueError("another error"))) and log.filter(log.makeRecord(
        log.name, logging.ERROR, __file__, 1, "no exception", (), None))
    for f in list(log.filters):
        log.removeFilter(f)


def test_an_error_is_said_only_once_the_runner_is_gone(monkeypatch):
    """Not a stop (a ValueError), with the runner still there: the cell's error says it, the kernel's stderr not."""
    said = []
    monkeypatch.setattr(RW, "_say", said.append)
    monkeypatch.setattr(RW, "_watches", {4242: _Alive()})
    with pytest.raises(ValueError):
        with RW.training():
            raise ValueError("bad")
    assert said == []
