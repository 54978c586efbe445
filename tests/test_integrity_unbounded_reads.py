"""Unbounded reads: a device, a FIFO or a socket is never read as an input, and JSON reads are capped.

`/dev/zero` never ends, `/dev/urandom` neither, a FIFO blocks until a writer comes: each would hang
a command (or fill the memory). The one JSON reader checks the opened descriptor before reading a
byte and reads at most `MAX_BYTES`; the weights file is checked the same way before safetensors opens it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import one_error_line
import trm_kaggle.jsonio as J
from trm_kaggle.cli import main
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.model.export import read_export

from conftest import make_export


@pytest.fixture
def specials(tmp_path):
    """Every kind of file that is not a regular file, by name, and what the message calls it."""
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "urandom.json").symlink_to("/dev/urandom")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.json"))
    yield {"/dev/zero": (Path("/dev/zero"), "a character device"),
           "urandom link": (tmp_path / "urandom.json", "a character device (it links to /dev/urandom)"),
           "fifo": (tmp_path / "fifo.json", "a pipe (FIFO)")}
    sock.close()


@pytest.mark.parametrize("name", ["/dev/zero", "urandom link", "fifo"])
def test_the_json_reader_refuses_what_is_not_a_regular_file(specials, name):
    path, kind = specials[name]
    t0 = time.perf_counter()
    for read in (lambda: J.read_json(path, "challenges file"), lambda: J.read_text(path, "config file")):
        with pytest.raises(DataError) as e:
            read()
        assert f"must be a regular file, not {kind}" in str(e.value) and str(path) in str(e.value)
        assert "\n" not in str(e.value)
    assert time.perf_counter() - t0 < 5  # refused at once: nothing was read (a FIFO did not block)


def test_a_socket_is_one_line(tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.json"))
    try:
        with pytest.raises(DataError) as e:  # a socket cannot even be opened: one line all the same
            J.read_json(tmp_path / "s.json")
        assert str(tmp_path / "s.json") in str(e.value) and "\n" not in str(e.value)
    finally:
        sock.close()


def test_the_bytes_read_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(J, "MAX_BYTES", 1000)
    (tmp_path / "big.json").write_text("[" + "1," * 600 + "1]")
    with pytest.raises(DataError, match=r"big.json: challenges file of 1,203 bytes is larger than the 1,000 bytes"):
        J.read_json(tmp_path / "big.json", "challenges file")
    (tmp_path / "small.json").write_text("[" + "1," * 400 + "1]")
    assert len(J.read_json(tmp_path / "small.json")) == 401


def test_commands_refuse_special_files_at_once(tmp_path, capsys, specials):
    """Through the command line: challenges, a submission, a settings file, an export's config.json."""
    make_export(tmp_path / "exp")
    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    fifo = str(specials["fifo"][0])
    runs = {
        "submit --challenges /dev/zero": ["submit", "--challenges", "/dev/zero", "--weights", str(tmp_path / "exp"),
                                          "--output", str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w")],
        "validate-submission FIFO": ["validate-submission", fifo, "--challenges", str(tmp_path / "c.json")],
        "score FIFO": ["score", str(tmp_path / "c.json"), "--solutions", fifo],
        "train --config FIFO": ["train", "--config", fifo, "--print-config"],
    }
    for name, args in runs.items():
        t0 = time.perf_counter()
        line = one_error_line(capsys, main(args))
        assert "must be a regular file" in line, (name, line)
        assert time.perf_counter() - t0 < 10, name
    assert not (tmp_path / "s.json").exists()


def test_an_export_whose_files_are_devices_or_fifos(tmp_path):
    make_export(tmp_path / "a")
    (tmp_path / "a" / "config.json").unlink()
    (tmp_path / "a" / "config.json").symlink_to("/dev/urandom")
    with pytest.raises(TRMError, match="config.json must be a regular file, not a character device"):
        read_export(tmp_path / "a")
    make_export(tmp_path / "b")
    (tmp_path / "b" / "weights.safetensors").unlink()
    os.mkfifo(tmp_path / "b" / "weights.safetensors")
    with pytest.raises(TRMError, match="weights must be a regular file, not a pipe"):
        read_export(tmp_path / "b")  # a FIFO would block safetensors forever


def test_a_command_with_a_config_linked_to_urandom_ends_in_one_line(tmp_path):
    """In a process of its own, with a time limit: the command ends (no endless read) with one line."""
    make_export(tmp_path / "exp")
    (tmp_path / "exp" / "config.json").unlink()
    (tmp_path / "exp" / "config.json").symlink_to("/dev/urandom")
    r = subprocess.run([sys.executable, "-m", "trm_kaggle", "estimate", "--weights", str(tmp_path / "exp"),
                        "--tasks", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ") and "config.json must be a regular file, not a character device" in r.stderr
