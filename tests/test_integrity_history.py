"""A log appended to (regress's history.jsonl, a run's metrics.jsonl) loses only its bad lines.

Both are read line by line by one reader (`trm_kaggle.jsonio.read_json_lines`): a line that is not UTF-8
(bytes such as 0x00 0xff), not JSON or cut off by a kill is skipped, the others are kept, and `regress`
says how many it skipped; its next entry is appended as a line of its own. The file itself is opened like
every input (a FIFO or a folder in its place: one line, before any notebook runs). A run whose metrics.jsonl
cannot be read at all costs `compare` that run alone: the others are compared, one warning line per run left
out says why (table.md too), and the status is 0; a compare of only such runs is one `error:` line.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from conftest import write_run
from integrity_helpers import build_sudoku4, train_args
from test_regress import b, write_baselines, write_notebook
from trm_kaggle.cli import main
from trm_kaggle.experiments.regression import read_history
from trm_kaggle.jsonio import read_json_lines
from trm_kaggle.train.metrics import read_metrics

GOOD = {"time": "2026-01-01 00:00:00 UTC", "commit": "abc", "metrics": {"acc": {"accuracy": 0.8}},
        "seconds": {"acc": 1.0}}


@pytest.fixture
def suite(tmp_path):
    folder = tmp_path / "nbs"
    write_notebook(folder, "acc", "record('accuracy', 0.8)\n")
    write_baselines(folder, {"acc": {"accuracy": b(0.8)}})
    return folder


def test_regress_with_a_history_holding_bytes_that_are_not_utf8(suite, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    history = out / "history.jsonl"
    history.write_bytes(json.dumps(GOOD).encode() + b"\n\x00\xff\x00\xff\n" + b'{"time": "cut' + b"\n\xff\xfe")
    rc = main(["regress", "--notebooks", str(suite), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "Traceback" not in captured.err and "UnicodeDecodeError" not in captured.err
    assert "history.jsonl: 3 of 4 lines skipped" in captured.err, captured.err
    entries = read_history(history)
    assert len(entries) == 2 and entries[0] == GOOD and entries[1]["metrics"] == {"acc": {"accuracy": 0.8}}
    assert history.read_bytes().endswith(b"\xff\xfe\n" + json.dumps(entries[1]).encode() + b"\n")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_history_that_cannot_be_read_stops_before_any_notebook(suite, tmp_path, capsys, kind):
    out = tmp_path / "out"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / "history.jsonl")
    else:
        (out / "history.jsonl").mkdir()
    t0 = time.perf_counter()
    line = one_error_line(capsys, main(["regress", "--notebooks", str(suite), "--out", str(out)]))
    assert time.perf_counter() - t0 < 30 and "history.jsonl" in line
    assert not (out / "executed").exists()


def test_the_one_reader_of_json_lines(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n\n  \n\x00\xff\n{"b": 2}\n[1, 2\n{"c": 3}')
    got = read_json_lines(path)
    assert [(n, v) for n, _, v in got] == [(1, {"a": 1}), (4, None), (5, {"b": 2}), (6, None), (7, {"c": 3})]
    assert got[1][1] == ""  # not UTF-8: no text either


def test_a_metrics_log_with_bytes_that_are_not_utf8_resumes(tmp_path):
    data = build_sudoku4(tmp_path / "data")
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b"\x00\xff\x00\xff\n")
    assert [r["step"] for r in read_metrics(run)[0]] == [1, 2]  # the bad line is skipped, the records are read
    assert main(train_args(data, run, "max_steps=3")) == 0
    assert [r["step"] for r in read_metrics(run)[0]] == [1, 2, 3]
    assert b"\xff" not in (run / "metrics.jsonl").read_bytes()  # dropped when the resume rewrote the log


def test_history_values_that_are_not_finite_are_left_out_of_the_plot(tmp_path):
    from trm_kaggle.experiments.regression import plot_history

    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps({"commit": c, "metrics": {"acc": {"accuracy": v}}})
                              for c, v in (("a", 0.8), ("b", 1e999), ("c", float("nan")), ("d", 0.7))) + "\n")
    history = read_history(path)
    assert len(history) == 4
    assert plot_history(history, "acc", "accuracy", None)[:8] == b"\x89PNG\r\n\x1a\n"


def spoil(run: Path, how: str, monkeypatch) -> None:
    """Make `run`'s metrics.jsonl unreadable as a whole: a FIFO, a folder, or a missing permission (simulated at
    the one gate: root reads whatever the mode says)."""
    metrics = run / "metrics.jsonl"
    if how == "fifo":
        metrics.unlink()
        os.mkfifo(metrics)
    elif how == "folder":
        metrics.unlink()
        metrics.mkdir()
    else:
        import trm_kaggle.jsonio as J

        real = os.open

        def forbidden(path, flags, *args, **kwargs):
            if Path(path) == metrics:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real(path, flags, *args, **kwargs)

        monkeypatch.setattr(J.os, "open", forbidden)


@pytest.mark.parametrize("how, words", [("fifo", "not a pipe (FIFO)"), ("folder", "found a directory"),
                                        ("permission", "Permission denied")])
def test_compare_leaves_out_a_run_whose_metrics_cannot_be_read(tmp_path, capsys, caplog, monkeypatch, how, words):
    """The reproducer: one run's metrics.jsonl a FIFO made `compare` fail as a whole."""
    runs = three_runs(tmp_path)
    spoil(runs / "b", how, monkeypatch)
    assert main(["compare", str(runs), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("run b left out of the comparison: ") \
        and str(runs / "b" / "metrics.jsonl") in warnings[0] and words in warnings[0], warnings
    assert "| a |" in out and "| c |" in out and "| b |" not in out
    assert "Left out: b: " in (tmp_path / "out" / "table.md").read_text()


def three_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    for name, seed in (("a", 0), ("b", 1), ("c", 2)):
        write_run(runs / name, [f"seed={seed}"], train=[(10, 4.0, 1.2, 0.1, 0.5), (20, 8.0, 0.8, 0.3, 0.7)])
    return runs


def test_compare_from_the_command_line_says_one_line_per_run_left_out(tmp_path):
    import subprocess
    import sys

    runs = three_runs(tmp_path)
    spoil(runs / "b", "fifo", None)
    r = subprocess.run([sys.executable, "-m", "trm_kaggle", "compare", str(runs), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 0 and len(lines) == 1, r.stderr
    assert lines[0].startswith("WARNING: run b left out of the comparison: ") and "FIFO" in lines[0]


def test_a_compare_of_only_unreadable_runs_is_an_error(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        write_run(runs / name, train=[(10, 4.0, 1.2, 0.1, 0.5)])
        spoil(runs / name, "fifo", monkeypatch)
    rc = main(["compare", str(runs), "--out", str(tmp_path / "out")])
    line = one_error_line(capsys, rc)
    assert line.startswith("error: no run could be read: a: ") and "(and 1 more runs)" in line
    assert not (tmp_path / "out").exists()
