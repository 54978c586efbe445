"""The compile cache's key and files are read like every other file, and trusted only when private.

The key (`compile-cache.key` under TRM_KAGGLE_CACHE_DIR) signs the caches whose code a later compile runs: it is
read through the package's one reader (a FIFO or a link to /dev/zero is one line, never a wait or a read
without end), and a key of another user or one others may read or write is not trusted (nothing is saved or
loaded under it). A cache torch itself cannot read is one line of ours, never torch's traceback followed by
"compile cache loaded".
"""

from __future__ import annotations

import logging
import os
import threading

import pytest
import torch

from trm_kaggle.model import compiling
from trm_kaggle.model.compiling import CACHE_FILE, load_compile_cache, save_compile_cache


@pytest.fixture
def key_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(compiling.KEY_ENV, str(tmp_path / "keys"))
    monkeypatch.setattr(compiling, "_KEY_SAID", set())
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"compiled code", None))
    (tmp_path / "keys").mkdir()
    return tmp_path / "keys"


def _bounded(fn, *args, **kw):
    """fn's result, failing (not hanging) when it takes more than 20 s (a FIFO's open waits for ever)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kw)), daemon=True)
    t.start()
    t.join(20)
    assert out, "it waited on a special file"
    return out[0]


@pytest.mark.parametrize("plant", ["fifo", "dev_zero", "foreign_0666", "open_0644"])
def test_a_key_that_is_special_or_not_private_is_refused_in_one_line(key_dir, tmp_path, plant, caplog):
    key = key_dir / compiling.KEY_FILE
    if plant == "fifo":
        os.mkfifo(key)
    elif plant == "dev_zero":
        key.symlink_to("/dev/zero")
    else:
        key.write_bytes(os.urandom(32))
        os.chmod(key, 0o666 if plant == "foreign_0666" else 0o644)
        if plant == "foreign_0666":
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(key, 4242, 4242)
    with caplog.at_level(logging.WARNING, logger=compiling.__name__):
        assert _bounded(save_compile_cache, tmp_path / "run", "cpu") is None  # nothing signed with it
        assert not _bounded(load_compile_cache, tmp_path / "run", "cpu")
    said = [r.getMessage() for r in caplog.records if r.name == compiling.__name__]
    assert len(said) == 1 and str(key) in said[0], said  # one line, once
    expected = {"fifo": "pipe (FIFO)", "dev_zero": "character device", "foreign_0666": "belongs to user id 4242",
                "open_0644": "mode 0644"}[plant]
    assert expected in said[0], said
    assert not (tmp_path / "run" / CACHE_FILE).exists()
    if plant != "fifo" and plant != "dev_zero":
        assert key.stat().st_size == 32  # left as it is: not ours to replace


def test_a_cache_torch_cannot_read_is_one_line_not_loaded(key_dir, tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"not torch's format at all", None))
    save_compile_cache(tmp_path / "run", "cpu")  # signed and intact, but torch cannot read its bytes
    lines: list[str] = []
    with caplog.at_level(logging.WARNING):
        assert not load_compile_cache(tmp_path / "run", "cpu", trusted=True, say=lines.append)
    assert len(lines) == 1 and lines[0].startswith("compile cache ignored: ") and "torch could not load it" in lines[0]
    assert not any("Traceback" in r.getMessage() or r.exc_info for r in caplog.records)
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out and "loaded" not in out.err + out.out


@pytest.mark.parametrize("plant", ["file", "fifo", "dangling link"])
def test_a_key_folder_that_cannot_be_one_is_said_naming_the_variable(tmp_path, monkeypatch, plant, caplog):
    """TRM_KAGGLE_CACHE_DIR naming a file, a FIFO or a dangling link: mkdir's FileExistsError was taken for another
    process making the key at the same moment, and a `compile=on` run saved no cache without a word."""
    where = tmp_path / "not a folder"
    if plant == "file":
        where.write_text("x")
    elif plant == "fifo":
        os.mkfifo(where)
    else:
        where.symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv(compiling.KEY_ENV, str(where))
    monkeypatch.setattr(compiling, "_KEY_SAID", set())
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"compiled code", None))
    with caplog.at_level(logging.WARNING, logger=compiling.__name__):
        assert _bounded(save_compile_cache, tmp_path / "run", "cpu") is None
    said = [r.getMessage() for r in caplog.records if r.name == compiling.__name__]
    assert len(said) == 1 and str(where) in said[0] and compiling.KEY_ENV in said[0], said


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch):
    """The XDG base directory rules: a relative XDG_CACHE_HOME is to be ignored (it made the key in ./relcache)."""
    monkeypatch.delenv(compiling.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")
    folder, chosen_by = compiling._key_dir()
    assert folder.is_absolute() and "relcache" not in str(folder) and chosen_by != "XDG_CACHE_HOME"
    monkeypatch.setenv("XDG_CACHE_HOME", "/abs/cache")
    assert compiling._key_dir() == (compiling.Path("/abs/cache/trm_kaggle"), "XDG_CACHE_HOME")
