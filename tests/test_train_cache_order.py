"""A train state comes before any compile cache: a compiled run saves its cache only after a state was written,
and not at all when the disk would then lack the room for the next state (a cache saves minutes of compiling,
a state hours of training)."""

from __future__ import annotations

import logging
import shutil
from collections import namedtuple

from integrity_helpers import train_args
from trm_kaggle.cli import main
from trm_kaggle.train import setup


class _Regions:  # a compiled run's regions, without compiling anything
    def region(self, fn, eager=None, **extra):
        return fn


def _compiled_run(monkeypatch, events: list):
    graphs = iter(range(1, 10**6))
    monkeypatch.setattr(setup, "apply_compile", lambda *a, **k: _Regions())
    monkeypatch.setattr(setup, "load_compile_cache", lambda *a, **k: False)
    monkeypatch.setattr(setup, "compiled_graphs", lambda: next(graphs))  # something new compiled at every look
    monkeypatch.setattr(setup, "save_compile_cache", lambda folder, device: events.append("cache"))
    real_save = setup.save_state
    monkeypatch.setattr(setup, "save_state", lambda *a, **k: (events.append("state"), real_save(*a, **k))[1])


def test_the_state_is_written_before_the_cache_and_the_cache_yields_to_a_full_disk(data, tmp_path, monkeypatch,
                                                                                    caplog):
    events: list[str] = []
    _compiled_run(monkeypatch, events)
    assert main(train_args(data, tmp_path / "run", "max_steps=3")) == 0
    assert events and events[0] == "state" and "cache" in events, events

    events.clear()  # a nearly full disk: a few KiB free, less than the next state needs
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, (1 << 30) - 4096, 4096))
    # filled after the start's check of every output (`outputs.MIN_FREE_BYTES`, tested of its own)
    monkeypatch.setattr("trm_kaggle.outputs.MIN_FREE_BYTES", 0)
    with caplog.at_level(logging.WARNING):
        assert main(train_args(data, tmp_path / "full", "max_steps=3")) == 0
    assert events == ["state"], events
    assert "compile cache not saved" in caplog.text and "the next train state needs" in caplog.text
    assert list((tmp_path / "full").glob("state_step*.pt"))
