"""trm_kaggle.runner_watch's arguments (tests/test_kaggle_runner_stop.py stops a runner; tests/test_notebooks.py
stops papermill running the train notebook)."""

from __future__ import annotations

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
