"""`trm-kaggle regress`: recorded metrics, baselines, verdicts, reports, bad input, and proof that the guard fails.

Small stand-in notebooks (no model, a kernel each) check the runner; the planted-change tests run the real
`golden` notebook against a temporary copy of the package in which one thing was broken on purpose, and check
that `regress` names the notebook and the metric; the last test runs the whole suite on this checkout.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.experiments import recorded as R, regression as G

nbformat = pytest.importorskip("nbformat", reason="regress needs the notebooks extra: pip install -e '.[notebooks]'")
pytest.importorskip("papermill", reason="regress needs the notebooks extra: pip install -e '.[notebooks]'")

REPO = Path(__file__).resolve().parents[1]
REGRESSION = REPO / "notebooks" / "regression"
NAMES = ["code_repair_small", "golden", "learn_arc_small", "learn_sudoku4", "ttt_gain"]
GOLDEN_FOLDER = G.GOLDEN


# ---------------------------------------------------------------------------
# recorded metrics
# ---------------------------------------------------------------------------


def output(name, value, detail=""):
    return {"output_type": "display_data", "metadata": {},
            "data": {R.MIME: {"name": name, "value": value, "detail": detail}, "text/plain": f"metric {name}"}}


def test_records_are_read_back_in_cell_order():
    nb = {"cells": [{"cell_type": "code", "outputs": [output("a", 1), {"output_type": "stream", "text": "x"}]},
                    {"cell_type": "markdown"}, {"cell_type": "code", "outputs": [output("b", 0.25, "why")]}]}
    got = R.read_recorded(nb, "nb")
    assert list(got) == ["a", "b"] and got["b"] == R.Recorded("b", 0.25, "why")


@pytest.mark.parametrize("outputs, message", [
    ([output("a", 1), output("a", 2)], "recorded twice"),
    ([output("a", float("nan"))], "not finite"),
    ([output("a", "high")], "not a number"),
    ([output("a b", 1)], "metric name"),
    ([output("a", 10**400)], r"^metric a: .* is not finite \(as a float\)$"),  # was Python's OverflowError line
    ([output("a", True)], "True is not a number"),  # was compared as 1.0
])
def test_a_bad_record_is_one_error(outputs, message):
    with pytest.raises(TRMError, match=message):
        R.read_recorded({"cells": [{"cell_type": "code", "outputs": outputs}]}, "nb")


@pytest.mark.parametrize("cell, message", [
    ({"cell_type": "code", "outputs": [{"output_type": "display_data", "data": ["x"]}]}, "an output's data is not"),
    ({"cell_type": "code", "outputs": None}, "its outputs are not a list"),
])
def test_a_malformed_output_is_one_error_naming_the_notebook(cell, message):
    """An output whose data is a list, or outputs that are null, were an AttributeError or TypeError naming no
    notebook: one TRMError naming it and the cell."""
    with pytest.raises(TRMError, match=f"^nb.ipynb: cell 1: {message}"):
        R.read_recorded({"cells": [{"cell_type": "markdown"}, cell]}, "nb.ipynb")


def test_a_records_detail_is_printed_escaped(capsys):
    """The detail reached the terminal raw (an escape sequence recoloured it, a bell rang): escaped."""
    R.record("a", 1, "\x1b[31mred\x07")
    assert capsys.readouterr().out == "metric a = 1 (\\x1b[31mred\\x07)\n"


def test_record_outside_a_kernel_prints_a_line_and_checks_the_value(capsys):
    assert R.record("exact", 0.5, "3 of 6") is None
    assert capsys.readouterr().out == "metric exact = 0.5 (3 of 6)\n"
    for bad in (math.inf, float("nan"), "0.5", None):
        with pytest.raises(TRMError):
            R.record("exact", bad)


# ---------------------------------------------------------------------------
# verdicts and the baselines file
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("direction, now, expected", [
    ("higher", 0.80, "ok"), ("higher", 0.74, "regressed"), ("higher", 0.86, "improved"), ("higher", 0.75, "ok"),
    ("lower", 0.80, "ok"), ("lower", 0.86, "regressed"), ("lower", 0.74, "improved"),
    ("equal", 0.84, "ok"), ("equal", 0.86, "regressed"), ("equal", 0.74, "regressed"),
])
def test_verdict(direction, now, expected):
    assert G.verdict(G.Baseline(value=0.8, tolerance=0.05, direction=direction), now) == expected


def test_zero_tolerance_catches_any_change():
    b = G.Baseline(value=0, tolerance=0, direction="lower")
    assert G.verdict(b, 0) == "ok" and G.verdict(b, 1) == "regressed"


@pytest.mark.parametrize("text, message", [
    ("{not json", "unreadable baselines file"),
    ('{"format": "trm_kaggle.regression-baselines", "version": 1}', "baselines: Field required"),
    ('{"baselines": {"nb": {"m": {"value": 1, "tolerance": -1, "direction": "higher"}}}}', "tolerance"),
    ('{"baselines": {"nb": {"m": {"value": 1, "tolerance": 0, "direction": "up"}}}}', "direction"),
    ('{"baselines": {"nb": {"m": {"value": NaN, "tolerance": 0, "direction": "lower"}}}}', "value"),
    # a number written as one: `true` was a baseline of 1, the text "0.8" one of 0.8
    ('{"baselines": {"nb": {"m": {"value": true, "tolerance": 0, "direction": "higher"}}}}',
     r"baselines\.nb\.m\.value: Input should be a valid number"),
    ('{"baselines": {"nb": {"m": {"value": "0.8", "tolerance": 0, "direction": "higher"}}}}', r"nb\.m\.value"),
    ('{"baselines": {"nb": {"m": {"value": 1, "tolerance": "0.05", "direction": "higher"}}}}', r"nb\.m\.tolerance"),
    ('{"baselines": {"nb": {"m": {"value": 1, "tolerance": false, "direction": "higher"}}}}', r"nb\.m\.tolerance"),
])
def test_a_bad_baselines_file_is_one_error_naming_it(tmp_path, text, message):
    path = tmp_path / "baselines.json"
    path.write_text(text)
    with pytest.raises(TRMError, match=message) as e:
        G.load_baselines(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------
# the runner, on stand-in notebooks
# ---------------------------------------------------------------------------


def write_notebook(folder: Path, name: str, code: str, parameters: str = "WORK_DIR = None\n") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {name}"),
                nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("from trm_kaggle.experiments.recorded import record\n" + code)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder / f"{name}.ipynb"


def write_baselines(folder: Path, entries: dict) -> Path:
    path = folder / "baselines.json"
    path.write_text(json.dumps({"format": "trm_kaggle.regression-baselines", "version": 1, "baselines": entries}))
    return path


def b(value, tolerance=0.05, direction="higher"):
    return {"value": value, "tolerance": tolerance, "direction": direction, "commit": "abc", "date": "2026-01-01"}


@pytest.fixture
def suite(tmp_path):
    """Two stand-in notebooks: `acc` records an accuracy of 0.8 (and checks its WORK_DIR), `count` a count."""
    folder = tmp_path / "nbs"
    write_notebook(folder, "acc", "import os\nassert os.path.isdir(WORK_DIR), WORK_DIR\nrecord('accuracy', 0.8)\n")
    write_notebook(folder, "count", "record('changed', 0, 'nothing changed')\n")
    write_baselines(folder, {"acc": {"accuracy": b(0.8)}, "count": {"changed": b(0, 0, "lower")}})
    return folder


def regress(capsys, folder, out, *args):
    rc = main(["regress", "--notebooks", str(folder), "--out", str(out), *args])
    o = capsys.readouterr()
    return rc, o.out, o.err


def test_a_run_that_holds_writes_report_history_and_plots(suite, tmp_path, capsys):
    out = tmp_path / "out"
    rc, stdout, stderr = regress(capsys, suite, out)
    assert rc == 0, stderr
    assert "2 comparisons: 0 regressed, 0 improved, 0 not compared" in stdout
    report = (out / "report.md").read_text()
    assert "| acc | accuracy | 0.8 (higher is better, tolerance 0.05) | 0.8 | ok |" in report
    assert "| count | changed | 0 (lower is better, tolerance 0) | 0 | ok |" in report
    assert "count.changed: nothing changed" in report
    rc, _, _ = regress(capsys, suite, out)  # a second run appends to the history
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == 2 and history[1]["metrics"] == {"acc": {"accuracy": 0.8}, "count": {"changed": 0}}
    assert (out / "history" / "acc.accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "history" / "count.changed.png").is_file()
    assert json.loads((out / "executed" / "acc.ipynb").read_text())["cells"]
    assert not (out / "work").exists(), "the scratch folders of successful runs are removed, and their folder"


def test_a_history_line_whose_metric_is_too_large_for_a_float_is_no_point(suite, tmp_path, capsys):
    """A history.jsonl line holding a metric of 400 digits ended the report at its plots in a traceback, exit 1."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "history.jsonl").write_text(json.dumps({"time": "x", "commit": "c", "metrics": {
        "acc": {"accuracy": 10**400}}, "seconds": {"acc": 10**400}}) + "\n")
    rc, stdout, stderr = regress(capsys, suite, out)
    assert rc == 0 and "Traceback" not in stderr, stderr
    assert (out / "history" / "acc.accuracy.png").is_file() and len((out / "history.jsonl").read_text().splitlines()) == 2


def test_history_plots_show_file_text_escaped_and_leave_out_what_cannot_be_drawn(tmp_path):
    """A commit holding an escape sequence, a BEL, a character the font lacks or `$\\x$` reached the plot raw:
    matplotlib's "Glyph 27 missing" warning on the terminal (with the raw byte), or a mathtext error; a value of
    1e308 overflowed the tick locator (numpy's RuntimeWarning), and NaN was kept without a word. Such values are
    skipped by the reader, each line counted in one warning."""
    import warnings

    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps({"commit": c, "metrics": {"acc": {"accuracy": v, "other": 1}}})
                              for c, v in (("c\x1b[31mred", 0.8), ("c\x1b]0;x\x07", 0.75), ("\u4f60\u597d", 0.7),
                                           ("$\\x$", 0.65), ("big", 1e308), ("nan", math.nan), ("neg", -1e308),
                                           ("text", "0.5"))) + "\n")
    said = []
    history = G.read_history(path, said.append)
    assert said == [f"warning: {path}: 4 values on 4 lines skipped (not a finite number, or too large to plot; "
                    "first: line 5); the lines' other values are kept"]
    assert len(history) == 8 and history[4]["metrics"]["acc"] == {"other": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any library warning fails the test
        for baseline in (None, G.Baseline(value=1e308, tolerance=1e308, direction="higher")):
            assert G.plot_history(history, "acc", "accuracy", baseline)[:8] == b"\x89PNG\r\n\x1a\n"
    assert G._label("c\x1b[31m\u4f60$") == "c\\x1b[31m\\u4f60\\$"


def test_only_compared_metrics_are_plotted_and_at_most_so_many(suite, tmp_path, capsys, monkeypatch):
    """A notebook recording 3,001 metrics kept regress drawing a plot of each (about six a second) before its verdict,
    silent for minutes: a metric without a baseline is a problem said at once, not a plot, and the plots of one run
    are bounded, those left out said in one line."""
    write_notebook(suite, "acc", "record('accuracy', 0.8)\nfor i in range(5):\n    record(f'm{i}', i)\n")
    monkeypatch.setattr(G, "PLOTS_PER_RUN", 1)
    write_baselines(suite, {"acc": {"accuracy": b(0.7)}, "count": {"changed": b(0, 0, "lower")}})
    out = tmp_path / "out"
    rc, stdout, stderr = regress(capsys, suite, out)
    assert rc == 2 and stderr.count("has no entry in") == 5, stderr
    assert sorted(p.name for p in (out / "history").iterdir()) == ["acc.accuracy.png"]  # the improved one first
    assert f"note: 1 history plot not drawn (at most 1 a run, regressed and improved metrics first); " \
           f"{out / 'history.jsonl'} holds every value" in stderr
    assert stderr.index("has no entry in") < stderr.index("note: 1 history plot"), "the problems come first"
    assert "m4" in (out / "history.jsonl").read_text()


def test_an_executed_notebook_planted_as_a_link_is_replaced_not_written_through(suite, tmp_path, capsys):
    """papermill writes where it is told, through a link: the notebook is executed in the work folder and renamed
    into executed/, so a link planted there is replaced and its target keeps its bytes."""
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    out = tmp_path / "out"
    (out / "executed").mkdir(parents=True)
    (out / "executed" / "acc.ipynb").symlink_to(precious)
    rc, _, stderr = regress(capsys, suite, out)
    assert rc == 0, stderr
    assert precious.read_text() == "precious" and not (out / "executed" / "acc.ipynb").is_symlink()
    assert json.loads((out / "executed" / "acc.ipynb").read_text())["cells"]


@pytest.mark.parametrize("text", ["[1, 2]", '{"cells": "abc", "nbformat": 4, "nbformat_minor": 5, "metadata": {}}'])
def test_a_file_that_is_no_notebook_is_said_so(suite, tmp_path, capsys, text):
    (suite / "acc.ipynb").write_text(text)
    rc, stdout, stderr = regress(capsys, suite, tmp_path / "out")
    assert rc != 0 and f"{suite / 'acc.ipynb'} is not a notebook papermill can read" in stdout + stderr


def test_a_notebook_paired_as_the_docs_say_runs_without_a_kernelspec(tmp_path, capsys):
    """The reproducer: a .py in percent format without a jupytext header, paired by `jupytext --to ipynb`
    (docs/regression.md, "Adding a notebook"), has no kernelspec: papermill's inspect_notebook refused it ("No kernel
    name found"), although the runner names the kernel itself."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    (folder / "x.py").write_text("# %% [markdown]\n# guards x\n\n# %% tags=[\"parameters\"]\nWORK_DIR = None\n\n"
                                 "# %%\nfrom trm_kaggle.experiments.recorded import record\n"
                                 "import os\nassert os.path.isdir(WORK_DIR)\nrecord('a', 1.0)\n")
    subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb", str(folder / "x.py")], check=True,
                   capture_output=True)
    assert "kernelspec" not in json.loads((folder / "x.ipynb").read_text())["metadata"]
    write_baselines(folder, {"x": {"a": b(1.0, 0)}})
    rc, stdout, stderr = regress(capsys, folder, tmp_path / "out")
    assert rc == 0, stdout + stderr
    assert "1 comparison" in stdout


def test_a_notebook_past_its_time_limit_is_its_failure_alone(suite, tmp_path, capsys):
    """A cell that never ends held regress (and CI) for ever: papermill has no limit by default, and its own is per
    cell. `--timeout` limits each whole notebook; the one past it is stopped and said in one line, the others run."""
    import time

    write_notebook(suite, "count", "import time\nrecord('changed', 0)\ntime.sleep(600)\n")
    t0 = time.monotonic()
    rc, stdout, stderr = regress(capsys, suite, tmp_path / "out", "--timeout", "8", "--jobs", "2")
    assert time.monotonic() - t0 < 120
    assert rc == 2, stdout + stderr
    said = [line for line in stderr.splitlines() if "time limit" in line]
    assert len(said) == 1 and "error: count: ran past its time limit of 8 s (--timeout): stopped in cell [3]" in \
        said[0], stdout + stderr
    assert "| acc | accuracy | 0.8 (higher is better, tolerance 0.05) | 0.8 | ok |" in \
        (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("timer", ["fires after the end", "never fires"])
def test_a_notebook_that_ends_past_its_time_limit_fails_every_time(suite, tmp_path, capsys, monkeypatch, timer):
    """The reproducer: with `--timeout 0.001`, 2 runs of 3 passed: the limit had expired, but the notebook ended
    before its kernel was killed. Here the timer's kill never lands (it fires once the notebook has ended, or not
    at all, as a loaded machine may schedule it): the notebook ran past its limit, and that is its failure."""
    def late(managers, seconds, done, expired):
        done.wait()
        if timer == "fires after the end":
            expired.append(True)

    monkeypatch.setattr(G, "_time_limit", late)
    rc, stdout, stderr = regress(capsys, suite, tmp_path / "out", "--timeout", "0.001", "acc")
    assert rc == 2, stdout + stderr
    assert "error: acc: ran past its time limit of 0.001 s (--timeout): it took " in stderr, stderr
    assert "acc: 1 metric" not in stdout and "| acc | accuracy |" not in (tmp_path / "out" / "report.md").read_text()


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting for its new parent to reap it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists() or not hasattr(os, "killpg"), reason="Linux /proc")
@pytest.mark.parametrize("stop", ["--timeout", "SIGTERM", "SIGINT"])
def test_a_stopped_notebook_ends_the_processes_its_kernel_started(tmp_path, stop):
    """The reproducer: a cell's `subprocess.Popen(['sleep', '41'])` outlived the notebook's time limit and a stop
    of regress, running on with parent 1 (and one that ignores SIGTERM too): only the kernel was ended, not its
    process group. Then those in a session or process group of their own (as a sweep's children and torchrun's
    workers are) ran on the same way: only the kernel's group was ended, not its descendants. Now all are gone
    when regress returns."""
    import signal
    import time

    folder, out, pids = tmp_path / "nbs", tmp_path / "out", tmp_path / "pids"
    write_notebook(folder, "child", "import os, subprocess, time\n"
                   "kids = [subprocess.Popen(['sleep', '41']), subprocess.Popen(['bash', '-c', \"trap '' TERM; exec "
                   "sleep 42\"]), subprocess.Popen(['sleep', '43'], start_new_session=True), "
                   "subprocess.Popen(['setsid', 'bash', '-c', \"trap '' TERM; exec sleep 44\"]), "
                   "subprocess.Popen(['sleep', '45'], process_group=0)]\ntime.sleep(0.5)\n"
                   f"open({str(pids)!r} + '.part', 'w').write(' '.join(str(k.pid) for k in kids))\n"
                   f"import os\nos.replace({str(pids)!r} + '.part', {str(pids)!r})\ntime.sleep(40)\n"
                   "record('m', 1.0)\n")
    write_baselines(folder, {"child": {"m": b(1.0)}})
    command = [sys.executable, "-m", "trm_kaggle", "regress", "--notebooks", str(folder), "--out", str(out),
               "--no-progress"] + (["--timeout", "10"] if stop == "--timeout" else [])
    # regress's output in files: a pipe would stay open as long as any process holding it (the kernel's children)
    log = (tmp_path / "stdout").open("w"), (tmp_path / "stderr").open("w")
    p = subprocess.Popen(command, stdout=log[0], stderr=log[1])
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert pids.exists(), (tmp_path / "stderr").read_text()
        kids = [int(pid) for pid in pids.read_text().split()]
        assert len(kids) == 5 and all(map(_alive, kids))
        if stop != "--timeout":
            p.send_signal(getattr(signal, stop))
        p.wait(timeout=60)
        err = (tmp_path / "stderr").read_text()
        assert p.returncode == {"--timeout": 2, "SIGTERM": 143, "SIGINT": 130}[stop], err
        if stop == "--timeout":
            assert "error: child: ran past its time limit of 10 s (--timeout): stopped in cell [3]" in err, err
        deadline = time.monotonic() + 5  # reaped by their new parent
        while any(map(_alive, kids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in kids if _alive(pid)], "a process the kernel started outlived regress"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for f in log:
            f.close()
        for pid in kids:  # ours, should the test fail
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or not hasattr(os, "killpg"), reason="Linux /proc")
def test_a_stopped_notebook_s_processes_have_time_to_stop_cleanly(tmp_path, capsys):
    """A `trm-kaggle sweep` in a notebook needs about 2.5 s after SIGTERM to stop its runs and write sweep.json; the
    SIGKILL came 1 s after the SIGTERM (at once, for a process in a session of its own, when the kernel ended) and
    left sweep.json saying "running". Here a process in a session of its own takes 3 s to stop: it finishes."""
    import signal

    folder, done, pid = tmp_path / "nbs", tmp_path / "done", tmp_path / "pid"
    slow_stop = (f"import signal, sys, time\ndef stop(*_):\n    time.sleep(3)\n    open({str(done)!r}, 'w').write('clean')"
                 "\n    sys.exit(0)\nsignal.signal(signal.SIGTERM, stop)\ntime.sleep(60)\n")
    write_notebook(folder, "slow", "import subprocess, sys, time\n"
                   f"kid = subprocess.Popen([sys.executable, '-c', {slow_stop!r}], start_new_session=True)\n"
                   f"open({str(pid)!r}, 'w').write(str(kid.pid))\ntime.sleep(60)\nrecord('m', 1.0)\n")
    write_baselines(folder, {"slow": {"m": b(1.0)}})
    try:
        rc, stdout, stderr = regress(capsys, folder, tmp_path / "out", "--timeout", "4")
        assert rc == 2 and "error: slow: ran past its time limit of 4 s (--timeout)" in stderr, stdout + stderr
        assert done.exists() and done.read_text() == "clean", "its process was killed before it stopped"
        assert not _alive(int(pid.read_text()))
    finally:
        if pid.exists() and _alive(int(pid.read_text())):  # ours, should the test fail
            os.kill(int(pid.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("value", ["nan", "0", "-5"])
def test_a_bad_timeout_is_refused_before_any_notebook(suite, tmp_path, capsys, value):
    rc, stdout, stderr = regress(capsys, suite, tmp_path / "out", "--timeout", value)
    assert rc == 2 and "--timeout=" in stderr and ": expected a number from 0.001 to" in stderr
    assert not (tmp_path / "out" / "executed").exists()


def test_each_kernel_starts_in_the_notebooks_folder_whatever_the_process_folder(tmp_path, capsys, monkeypatch):
    """Notebooks read paths relative to their folder. papermill's `cwd` changes the whole process's folder, which
    notebooks run at once on threads undo for one another; the kernel's own start folder does not depend on it
    (here papermill's chdir does nothing, as when another thread has just changed the folder back)."""
    import contextlib

    import papermill.execute

    folder = tmp_path / "nbs"
    (folder / "beside.txt").parent.mkdir(parents=True)
    (folder / "beside.txt").write_text("next to the notebooks")
    code = ("import os\nfrom pathlib import Path\n"
            f"assert Path.cwd().resolve() == Path({str(folder.resolve())!r}), os.getcwd()\n"
            "record('found', float(Path('beside.txt').is_file()))\n")
    for name in ("a", "b", "c"):
        write_notebook(folder, name, code)
    write_baselines(folder, {n: {"found": b(1.0, 0)} for n in ("a", "b", "c")})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(papermill.execute, "chdir", lambda path: contextlib.nullcontext())
    rc, stdout, stderr = regress(capsys, folder, tmp_path / "out", "--jobs", "3")
    assert rc == 0, stdout + stderr
    assert "3 comparisons: 0 regressed" in stdout
    assert Path.cwd() == elsewhere


def test_a_regression_exits_1_naming_notebook_and_metric(suite, tmp_path, capsys):
    write_baselines(suite, {"acc": {"accuracy": b(0.9)}, "count": {"changed": b(0, 0, "lower")}})
    rc, stdout, stderr = regress(capsys, suite, tmp_path / "out", "acc")
    assert rc == 1 and "running 1 regression notebook (acc)" in stdout
    assert "regression: acc.accuracy = 0.8, baseline 0.9 (higher is better, tolerance 0.05)" in stderr
    assert "| acc | accuracy | 0.9 (higher is better, tolerance 0.05) | 0.8 | **regressed** |" in \
        (tmp_path / "out" / "report.md").read_text()


def test_the_update_hint_pastes_for_any_name_and_names_the_notebooks_folder(tmp_path, capsys, monkeypatch):
    """The printed `trm-kaggle regress -x --update-baselines` was refused when pasted (`-x` read as an option), and
    named no --notebooks: pasted, it updated the default folder, not the one that was checked. Pasted now (the shell
    splitting it), it updates that notebook in that folder."""
    import shlex

    monkeypatch.chdir(tmp_path)
    folder = Path("-n b")
    write_notebook(folder, "-x", "record('m', 1.0)\n")
    write_baselines(folder, {"-x": {"m": {"value": None, "tolerance": 0.1, "direction": "higher"}}})
    rc = main(["regress", "--notebooks", "./-n b", "--out", "out"])
    stderr = capsys.readouterr().err
    assert rc == 2 and "-x.m has no baseline value yet: run `" in stderr, stderr
    words = shlex.split(stderr.split("run `", 1)[1].split("`", 1)[0])
    assert words[:2] == ["trm-kaggle", "regress"], words
    rc = main(["regress", "--out", "out", *words[2:]])
    assert rc == 0, capsys.readouterr()
    assert json.loads((folder / "baselines.json").read_text())["baselines"]["-x"]["m"]["value"] == 1.0


def test_an_improvement_is_reported_and_passes(suite, tmp_path, capsys):
    write_baselines(suite, {"acc": {"accuracy": b(0.7)}, "count": {"changed": b(0, 0, "lower")}})
    rc, stdout, _ = regress(capsys, suite, tmp_path / "out")
    assert rc == 0
    assert "improved: acc.accuracy = 0.8, baseline 0.7 (higher is better, tolerance 0.05) (beyond the tolerance: " \
           "raise the baseline with --update-baselines)" in stdout


def test_update_baselines_sets_values_and_commit_only_when_asked(suite, tmp_path, capsys):
    before = (suite / "baselines.json").read_text()
    write_baselines(suite, {"acc": {"accuracy": {"value": None, "tolerance": 0.1, "direction": "higher"}},
                            "count": {"changed": b(0, 0, "lower")}})
    rc, _, stderr = regress(capsys, suite, tmp_path / "out")  # no value yet, no flag: refused before running
    assert rc == 2 and "acc.accuracy has no baseline value yet" in stderr
    assert not (tmp_path / "out").exists()
    rc, stdout, _ = regress(capsys, suite, tmp_path / "out", "acc", "--update-baselines")
    assert rc == 0 and "baseline acc.accuracy: none -> 0.8" in stdout
    data = json.loads((suite / "baselines.json").read_text())["baselines"]
    assert data["acc"]["accuracy"]["value"] == 0.8 and data["acc"]["accuracy"]["tolerance"] == 0.1
    assert data["acc"]["accuracy"]["commit"] == "unknown"  # not a git checkout
    assert data["count"] == json.loads(before)["baselines"]["count"]  # not run: untouched


@pytest.mark.parametrize("code, message", [
    ("record('accuracy', 0.8)\nrecord('extra', 1)\n", "acc: metric extra has no entry in"),
    ("accuracy = 0.8\n", "acc: metric accuracy was not recorded"),
    ("raise ValueError('the data is gone')\n", "acc: the notebook failed in cell [3]: ValueError: the data is gone"),
    ("record('accuracy', float('nan'))\n", "acc: the notebook failed in cell [3]: TRMError: metric accuracy: nan is"),
    # a kernel that died: the cell, how, and the notebook kept (nbclient's own log line was a second, bare one)
    ("import os\nos._exit(3)\n", "acc: the notebook's kernel died in cell [3] (exit status 3) (see "),
])
def test_a_metric_that_cannot_be_compared_exits_2_naming_it(suite, tmp_path, capsys, caplog, code, message):
    write_notebook(suite, "acc", code)
    rc, stdout, stderr = regress(capsys, suite, tmp_path / "out")
    assert rc == 2
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and message in lines[0], stderr
    assert not [r for r in caplog.records if r.levelno >= 30], "no library log line besides the error"
    assert "count: 1 metric in" in stdout  # the other notebook still ran and was compared
    assert "| count | changed |" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("saved, count, message", [
    # the kernel's record of the cell was saved: its own execution count
    ({"execution": {"iopub.execute_input": "t"}, "papermill": {"start_time": "t", "status": "completed"}}, 7,
     " in cell [7]"),
    # only papermill's record of the cell's start (the kernel died before its own record was saved; papermill marks
    # the cell "completed" as it stops): counted, the blank code cell and the markdown one not among them, as
    # nbclient never sends them
    ({"papermill": {"start_time": "t", "status": "completed"}}, None, " in cell [3]"),
    # never started (a notebook saved before papermill reached it): the last cell papermill started is named
    ({"papermill": {"start_time": None, "status": "completed"}}, None, " in cell [2]"),
])
def test_the_cell_a_kernel_died_in_is_named_whichever_record_was_saved(tmp_path, saved, count, message):
    started = {"papermill": {"start_time": "t", "status": "completed"}}
    cells = [nbformat.v4.new_code_cell("x = 1", execution_count=1, metadata=started),
             nbformat.v4.new_markdown_cell("# m"), nbformat.v4.new_code_cell("  \n"),
             nbformat.v4.new_code_cell("y = 2", execution_count=2, metadata=started),
             nbformat.v4.new_code_cell("import os\nos._exit(3)"), nbformat.v4.new_markdown_cell("# after")]
    cells[-2].metadata.update(saved)
    cells[-2].execution_count = count
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    assert G._dying_cell(path) == message


def test_no_cell_is_named_where_papermill_started_none(tmp_path):
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), str(path))
    assert G._dying_cell(path) == ""


@pytest.mark.parametrize("args, baselines, message", [
    (["nosuch"], None, "unknown regression notebook 'nosuch'; the notebooks in"),
    ([], "{oops", "unreadable baselines file"),
    ([], {"acc": {"accuracy": b(0.8)}}, "has no metrics for notebook 'count'"),
    ([], {"acc": {"accuracy": b(0.8)}, "count": {"changed": b(0)}, "gone": {"x": b(1)}}, "lists notebook 'gone'"),
    (["--jobs", "0"], None, "--jobs=0: expected a whole number from 1 to 1,024"),
])
def test_bad_requests_fail_before_any_notebook_runs(suite, tmp_path, capsys, args, baselines, message):
    if isinstance(baselines, str):
        (suite / "baselines.json").write_text(baselines)
    elif baselines is not None:
        write_baselines(suite, baselines)
    rc, _, stderr = regress(capsys, suite, tmp_path / "out", *args)
    assert rc == 2 and stderr.count("\n") == 1 and stderr.startswith("error: ") and message in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_out_inside_the_notebooks_folder_is_refused(suite, capsys):
    rc, _, stderr = regress(capsys, suite, suite / "out")
    assert rc == 2 and "is inside" in stderr


def test_an_update_of_a_read_only_baselines_file_is_refused_before_any_notebook(suite, tmp_path, capsys,
                                                                                 monkeypatch):
    """It ran every notebook first, then was refused, leaving --out holding only executed/."""
    monkeypatch.setattr(G, "_run_all", lambda *a: pytest.fail("a notebook ran"))
    (suite / "baselines.json").chmod(0o444)
    access = os.access  # read-only to root as well
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if os.fspath(path).endswith("baselines.json")
                        else access(path, mode, **kw))
    rc, _, stderr = regress(capsys, suite, tmp_path / "out", "--update-baselines")
    assert rc == 2 and stderr.count("\n") == 1 and "baselines.json is read-only" in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_out_in_a_training_run_folder_is_refused(suite, tmp_path, capsys, monkeypatch):
    """`regress --out RUN` wrote its report, history and executed notebooks among a run's states."""
    monkeypatch.setattr(G, "_run_all", lambda *a: pytest.fail("a notebook ran"))
    run = tmp_path / "run1"
    run.mkdir()
    (run / "state_step00000002.pt").write_bytes(b"state")
    for out in (run, run / "regression"):
        rc, _, stderr = regress(capsys, suite, out)
        assert rc == 2 and stderr.count("\n") == 1 and "a training run folder" in stderr, stderr
    assert [p.name for p in run.iterdir()] == ["state_step00000002.pt"]


def test_the_commit_is_marked_dirty_by_changes_other_than_baselines_and_golden_files(tmp_path):
    repo, plain = tmp_path / "repo", tmp_path / "plain"
    plain.mkdir()
    assert G.git_commit(plain) == "unknown"  # not a checkout

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                       capture_output=True)

    nbs = repo / "notebooks" / "regression"
    (nbs / "golden").mkdir(parents=True)
    for path in (nbs / "baselines.json", nbs / "golden" / "votes.json", repo / "code.py"):
        path.write_text("1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "files")
    clean = G.git_commit(nbs)
    assert len(clean) == 12 and "+" not in clean
    (nbs / "baselines.json").write_text("2\n")
    (nbs / "golden" / "votes.json").write_text("2\n")
    assert G.git_commit(nbs) == clean  # what --update-baselines itself writes
    (repo / "code.py").write_text("2\n")
    assert G.git_commit(nbs) == clean + "+dirty"
    git("checkout", "code.py")
    (repo / "new.py").write_text("")  # an untracked file counts too
    assert G.git_commit(nbs) == clean + "+dirty"


# ---------------------------------------------------------------------------
# the regression notebooks themselves
# ---------------------------------------------------------------------------


def test_the_regression_notebooks_are_pairs_in_sync_without_outputs():
    from test_notebooks import pair_differences, parameters_cells

    assert G.list_notebooks(REGRESSION) == NAMES and sorted(p.stem for p in REGRESSION.glob("*.py")) == NAMES
    for name in NAMES:
        assert pair_differences(REGRESSION / f"{name}.py", REGRESSION / f"{name}.ipynb") == [], \
            f"run `jupytext --sync notebooks/regression/{name}.py`"
        nb = json.loads((REGRESSION / f"{name}.ipynb").read_text())
        assert all(c.get("outputs", []) == [] and c.get("execution_count") is None for c in nb["cells"])
        cells = parameters_cells(nbformat.reads(json.dumps(nb), as_version=4))
        assert len(cells) == 1 and "WORK_DIR = None" in cells[0].source, name
        assert "torch.set_num_threads(1)" in (REGRESSION / f"{name}.py").read_text(), f"{name}: pin the threads"


def run_until_work(name: str, monkeypatch, where: Path, **parameters) -> dict:
    """The regression notebook's code cells run here, in `where`, with `parameters` set after its parameters cell,
    up to the cell that makes its scratch folder `work` (that one run too); torch's thread count is left alone."""
    import jupytext
    import torch

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.chdir(where)
    space: dict = {}
    for cell in jupytext.read(REGRESSION / f"{name}.py").cells:
        if cell.cell_type != "code":
            continue
        exec(compile(cell.source, f"{name}.py", "exec"), space)
        if "parameters" in cell.metadata.get("tags", []):
            space.update(parameters)
        if "work" in space:
            return space
    raise AssertionError(f"{name} makes no `work` folder")


@pytest.mark.parametrize("name", NAMES)
def test_a_regression_notebooks_work_dir_is_never_the_notebooks_folder(tmp_path, monkeypatch, name):
    """The reproducer: learn_sudoku4 with WORK_DIR=notebooks/regression/scratch wrote its dataset, run and weights
    among the notebooks; each regression notebook refuses it in one line naming WORK_DIR, before any work, and
    takes the folder `regress` passes (under its --out)."""
    before = sorted(p.name for p in REGRESSION.iterdir())
    for inside in (REGRESSION / "scratch", REGRESSION, REGRESSION / GOLDEN_FOLDER / "x"):
        with pytest.raises(TRMError, match=r"^WORK_DIR .*: lies in the notebooks folder "):
            run_until_work(name, monkeypatch, tmp_path, WORK_DIR=str(inside))
    assert sorted(p.name for p in REGRESSION.iterdir()) == before
    assert run_until_work(name, monkeypatch, tmp_path, WORK_DIR=str(tmp_path / "w"))["work"] == tmp_path / "w"


def test_every_baseline_is_set_from_a_recorded_run():
    baselines = G.load_baselines(REGRESSION / G.BASELINES).baselines
    assert sorted(baselines) == NAMES
    for name, metrics in baselines.items():
        for metric, base in metrics.items():
            assert base.value is not None and base.commit and base.date, f"{name}.{metric}"
            assert not base.commit.endswith("+dirty"), f"{name}.{metric}: set from uncommitted code"
    assert all(b.value == 0 and b.tolerance == 0 for b in baselines["golden"].values())


# ---------------------------------------------------------------------------
# planted changes: the guard fails, naming the notebook and the metric
# ---------------------------------------------------------------------------


def planted_copy(tmp_path: Path, edit) -> Path:
    """A copy of the package, the regression notebooks and the shipped weights, with `edit` applied."""
    root = tmp_path / "repo"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    shutil.copytree(REPO / "trm_kaggle", root / "trm_kaggle", ignore=skip)
    shutil.copytree(REGRESSION, root / "notebooks" / "regression", ignore=skip)
    shutil.copytree(REPO / "weights" / "arc2-cpu-tiny", root / "weights" / "arc2-cpu-tiny")
    edit(root)
    return root


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: the planted change no longer applies (the code moved): {old!r}"
    path.write_text(text.replace(old, new))


def perturb_weight(root: Path) -> None:
    from safetensors.torch import load_file, save_file

    path = root / "weights" / "arc2-cpu-tiny" / "weights.safetensors"
    tensors = load_file(path)
    tensors["layers.0.mlp.down_proj.weight"][0, 0] += 1e-3  # about 2 % of the layer's mean magnitude
    save_file(tensors, path, metadata={"format": "pt"})


def swap_rotations(root: Path) -> None:
    """Augmentation: rot90 and rot270 trade places (the data builder and the decoder both use `dihedral`)."""
    path = root / "trm_kaggle" / "data" / "augment.py"
    replace_once(path, "    if t == 1:  # rot90 counter-clockwise", "    if t == 3:  # rot90, planted")
    replace_once(path, "    if t == 3:  # rot270", "    if t == 1:  # rot270 (planted)")


def wrong_tie_break(root: Path) -> None:
    """Votes: ties broken by the lowest mean confidence instead of the highest."""
    replace_once(root / "trm_kaggle" / "evaluate" / "vote.py", "np.lexsort((first, -mean_q, -score, cand_slot))",
                 "np.lexsort((first, mean_q, -score, cand_slot))")


@pytest.mark.slow
@pytest.mark.parametrize("edit, caught, unchanged", [
    (perturb_weight, {"tasks_changed_logits"}, set()),
    (swap_rotations, {"tasks_changed_logits"}, set()),
    (wrong_tie_break, {"tasks_changed_votes", "tasks_changed_submission"},
     {"tasks_changed_predictions", "tasks_changed_logits"}),
], ids=["perturbed-weight", "swapped-augmentation", "wrong-vote-tie-break"])
def test_regress_catches_a_planted_change(tmp_path, edit, caught, unchanged):
    root = planted_copy(tmp_path, edit)
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy's package, in this process and in the kernel
    r = subprocess.run([sys.executable, "-m", "trm_kaggle", "regress", "golden", "--out", str(tmp_path / "out")],
                       cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "running 1 regression notebook (golden)" in r.stdout
    regressed = {line.split(" = ")[0].removeprefix("regression: golden.") for line in r.stderr.splitlines()
                 if line.startswith("regression: golden.")}
    assert caught <= regressed, r.stderr
    assert not regressed & unchanged, f"{regressed & unchanged} changed too: more changed than the planted change"
    report = (tmp_path / "out" / "report.md").read_text()
    assert all(f"| golden | {m} |" in report and "**regressed**" in report for m in caught)
    assert "first: " in report  # the first task that changed is named


# ---------------------------------------------------------------------------
# the whole suite on this checkout (what CI runs)
# ---------------------------------------------------------------------------


@pytest.mark.slow(s=220)  # every regression notebook, two at a time
def test_the_regression_suite_holds(tmp_path, capsys):
    rc, stdout, stderr = regress(capsys, REGRESSION, tmp_path / "out")
    assert rc == 0, stdout + stderr
    report = (tmp_path / "out" / "report.md").read_text()
    baselines = G.load_baselines(REGRESSION / G.BASELINES).baselines
    for name, metrics in baselines.items():
        for metric in metrics:
            assert f"| {name} | {metric} |" in report
            assert (tmp_path / "out" / "history" / f"{name}.{metric}.png").is_file()


def test_notebooks_that_name_a_file_or_nothing_are_said_as_such(tmp_path, capsys):
    (tmp_path / "nb.txt").write_text("x")
    for given, said in ((tmp_path / "nb.txt", "a file, not a folder of regression notebooks"),
                        (tmp_path / "none", "no such folder of regression notebooks")):
        rc, _, stderr = regress(capsys, given, tmp_path / "out")
        assert rc == 2 and f"{given}: {said}" in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_a_stop_ends_the_running_notebooks_and_a_second_one_waits_for_its_line(tmp_path):
    """A SIGTERM waited for the running notebook to finish (its whole length) before `interrupted`; a second SIGTERM
    in that wait ended regress without a word, and each stop left OUT/work/<name>-XXXX/ behind. Now the kernels
    are ended at once, the second signal is dropped, and the stopped run's work folders are removed; its half-run
    notebook never replaces the executed notebook of the run before."""
    import signal
    import time

    folder, out, started = tmp_path / "nbs", tmp_path / "out", tmp_path / "started"
    write_notebook(folder, "slow", "record('m', 1.0)\n")
    write_baselines(folder, {"slow": {"m": b(1.0)}})
    assert main(["regress", "--notebooks", str(folder), "--out", str(out), "--no-progress"]) == 0
    finished = (out / "executed" / "slow.ipynb").read_bytes()
    write_notebook(folder, "slow", f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(120)\n"
                                   "record('m', 1.0)\n")
    p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "regress", "--notebooks", str(folder), "--out", str(out),
                          "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    assert started.exists(), p.communicate()
    p.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143 and err.strip().splitlines() == ["interrupted: stopped by SIGTERM"], (p.returncode, err)
    assert time.monotonic() - stopped_at < 30  # not the notebook's 120 s
    assert not (out / "work").exists() or not list((out / "work").iterdir()), list((out / "work").iterdir())
    # the finished run's notebook stands: a half-run one would disagree with report.md and history.jsonl
    assert (out / "executed" / "slow.ipynb").read_bytes() == finished


def test_a_stopped_run_keeps_the_executed_notebooks_of_the_run_before(tmp_path):
    """Ctrl-C to `regress --jobs 2` once `fast` had ended, while `slow` ran: executed/fast.ipynb was this stopped
    run's, which report.md and history.jsonl (of the run before) do not describe. Now it is the run before's."""
    import signal
    import time

    folder, out, started = tmp_path / "nbs", tmp_path / "out", tmp_path / "started"
    for name in ("fast", "slow"):
        write_notebook(folder, name, "record('m', 1.0)\n")
    write_baselines(folder, {"fast": {"m": b(1.0)}, "slow": {"m": b(1.0)}})
    assert main(["regress", "--notebooks", str(folder), "--out", str(out), "--no-progress"]) == 0
    before = {n: (out / "executed" / f"{n}.ipynb").read_bytes() for n in ("fast", "slow")}
    write_notebook(folder, "fast", "print('this run')\nrecord('m', 1.0)\n")
    write_notebook(folder, "slow", f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(120)\n"
                                   "record('m', 1.0)\n")
    p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "regress", "--notebooks", str(folder), "--out", str(out),
                          "--no-progress", "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None and not (
                started.exists() and (out / "executed" / "fast.ipynb").read_bytes() != before["fast"]):
            time.sleep(0.1)
        assert started.exists() and b"this run" in (out / "executed" / "fast.ipynb").read_bytes(), p.communicate()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert {n: (out / "executed" / f"{n}.ipynb").read_bytes() for n in ("fast", "slow")} == before
    assert sorted(os.listdir(out / "executed")) == ["fast.ipynb", "slow.ipynb"]


def test_names_read_from_the_baselines_reach_the_console_and_the_report_escaped(tmp_path, capsys):
    """A metric named "m\\x1b[31mRED\\nFAKE: line" in baselines.json reached the terminal raw (colours, a faked line)
    and split report.md's rows; a notebook's file name alike."""
    folder = tmp_path / "nbs"
    write_notebook(folder, "nb\x1b[2J", "record('ok', 1.0)\n")
    write_baselines(folder, {"nb\x1b[2J": {"ok": b(1.0), "m\x1b[31mRED\nFAKE: line": b(1.0)}})
    rc, out, err = regress(capsys, folder, tmp_path / "out")
    assert rc == 2 and not any(c in out + err for c in "\x1b"), out + err
    assert "FAKE: line" not in [line.strip() for line in (out + err).splitlines()]
    assert "nb\\x1b[2J" in out and "m\\x1b[31mRED\\nFAKE: line" in err, out + err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "\x1b" not in report and "\\x1b[31mRED\\nFAKE: line" in report
    assert not any(line.startswith("FAKE") for line in report.splitlines())


@pytest.mark.parametrize("kind", ["file", "fifo", "nul"])
def test_the_regress_library_checks_its_out_folder_as_the_command_does(suite, tmp_path, kind):
    """`regress(out=FILE)` was mkdir's FileExistsError; a NUL byte Python's bare "embedded null byte"."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.experiments.regression import regress as regress_library

    out = {"file": tmp_path / "f", "fifo": tmp_path / "p", "nul": str(tmp_path / "a\x00b")}[kind]
    made = {"file": lambda: out.write_text("x"), "fifo": lambda: os.mkfifo(out), "nul": lambda: None}
    made[kind]()
    with pytest.raises(TRMError, match="^out "):
        regress_library(out=out, notebook_dir=suite)


@pytest.mark.parametrize("folder", ["executed", "history"])
def test_the_regress_library_refuses_notebooks_inside_its_out_folder_as_the_command_does(suite, tmp_path, folder,
                                                                                          monkeypatch):
    """`regress(out=X, notebook_dir=X/executed)` replaced a notebook with its executed copy (X/history: a plot
    written into the notebooks folder); the command refused the same call."""
    from trm_kaggle.experiments import regress

    notebooks = tmp_path / "out" / folder
    notebooks.parent.mkdir()
    shutil.move(suite, notebooks)
    before = {p.name: p.read_bytes() for p in notebooks.iterdir()}
    monkeypatch.setattr(G, "_run_all", lambda *a: pytest.fail("a notebook ran"))
    with pytest.raises(TRMError, match=rf"^out .*out holds the input notebook_dir .*{folder}: writing it could "):
        regress(out=tmp_path / "out", notebook_dir=notebooks, say=lambda _: None)
    assert {p.name: p.read_bytes() for p in notebooks.iterdir()} == before


@pytest.mark.parametrize("jobs", [float("nan"), 1.5, True, 2**63])
def test_the_regress_librarys_job_count_is_checked_before_any_notebook(suite, tmp_path, jobs):
    """`regress(jobs=nan)` ran "3 at a time" (NaN passed `jobs < 1`), 1.5 and True likewise."""
    from trm_kaggle.experiments import regress

    with pytest.raises(TRMError, match=r"^--jobs=.*: expected a whole number from 1 to 1,024$"):
        regress(["acc"], out=tmp_path / "out", notebook_dir=suite, jobs=jobs, say=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_a_notebook_file_cut_by_a_size_limit_is_never_kept_as_executed(suite, tmp_path, capsys, monkeypatch):
    """Under `ulimit -f` papermill's file was cut at 1 KiB and renamed into executed/ (no JSON), its empty work
    folder left behind, the line `OSError: [Errno 27] File too large` naming no file."""
    import errno

    import papermill

    def cut(source, written, **kw):
        Path(written).write_text('{"cells": [')
        raise OSError(errno.EFBIG, "File too large", written)

    monkeypatch.setattr(papermill, "execute_notebook", cut)
    out = tmp_path / "out"
    rc, stdout, stderr = regress(capsys, suite, out)
    assert rc != 0
    assert not (out / "executed" / "acc.ipynb").exists() and not list(out.glob("work/*/*.ipynb"))
    assert "File too large" in stdout + stderr and "ulimit" in stdout + stderr, stdout + stderr


GOLDEN_PARAMETERS = "WORK_DIR = None\nUPDATE_GOLDEN = False\nGOLDEN_OUT = None\n"
WRITES_GOLDEN = ("import json, pathlib\n"
                 "if UPDATE_GOLDEN:\n"
                 "    out = pathlib.Path(GOLDEN_OUT or 'golden')\n"
                 "    out.mkdir(exist_ok=True)\n"
                 "    (out / 'v.json').write_text(json.dumps({'v': 'new'}))\n"
                 "    (out / 'w.json').write_text(json.dumps({'w': 'new'}))\n")


@pytest.mark.parametrize("ends", ["cleanly", "failing after the golden files", "stopped after the golden files",
                                  "with a golden file's place a folder"])
def test_golden_files_change_only_with_the_baselines_they_go_with(tmp_path, capsys, ends):
    """A `regress golden --update-baselines` stopped (status 130) or failing after its notebook wrote the golden
    files had already rewritten them in the notebooks folder, while baselines.json still named the run before.
    They are staged and moved in with the baselines, or not at all."""
    import signal
    import time

    folder, out, started = tmp_path / "nbs", tmp_path / "out", tmp_path / "started"
    tail = {"cleanly": "", "with a golden file's place a folder": "",
            "failing after the golden files": "raise RuntimeError('later cell')\n",
            "stopped after the golden files": f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(120)\n"}
    write_notebook(folder, "gold", WRITES_GOLDEN + tail[ends] + "record('changed', 0.0)\n", GOLDEN_PARAMETERS)
    write_baselines(folder, {"gold": {"changed": b(0.0, 0.0, "lower")}})
    (folder / "golden").mkdir()
    (folder / "golden" / "v.json").write_text('{"v": "old"}')
    if ends == "with a golden file's place a folder":  # v.json would be written, then w.json refused
        (folder / "golden" / "w.json").mkdir()
    before = (folder / "baselines.json").read_text()
    args = ["regress", "--notebooks", str(folder), "--out", str(out), "--update-baselines", "--no-progress"]
    if ends == "stopped after the golden files":
        p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert started.exists(), p.communicate()
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130, p.communicate()
    else:
        rc = main(args)
        err = capsys.readouterr().err
        assert rc == (0 if ends == "cleanly" else 2), err
        if ends == "with a golden file's place a folder":
            assert f"{folder / 'golden' / 'w.json'} is a folder" in err, err
    if ends == "cleanly":
        assert json.loads((folder / "golden" / "v.json").read_text()) == {"v": "new"}
        assert (folder / "baselines.json").read_text() != before
    else:
        assert json.loads((folder / "golden" / "v.json").read_text()) == {"v": "old"}
        assert (folder / "baselines.json").read_text() == before
    assert not list(out.glob(".gold-golden-*")) and not (folder / "golden" / "v.json.partial").exists()


def test_a_stop_while_an_update_is_saved_lets_it_land_and_says_so(tmp_path, capsys, monkeypatch):
    """A SIGTERM while `--update-baselines` wrote the golden files and baselines.json (stops held) was let through
    before the `updated` lines: the committed files were rewritten, and all the run said was `interrupted`."""
    import signal

    folder, out = tmp_path / "nbs", tmp_path / "out"
    write_notebook(folder, "gold", WRITES_GOLDEN + "record('changed', 0.0)\n", GOLDEN_PARAMETERS)
    write_baselines(folder, {"gold": {"changed": b(0.0, 0.0, "lower")}})
    real = G.save_baselines

    def stopped_while_saving(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # held until the update is saved and said
        return real(*args)

    monkeypatch.setattr(G, "save_baselines", stopped_while_saving)
    from trm_kaggle.interrupts import raise_terminated

    signal.signal(signal.SIGTERM, raise_terminated)  # as `trm-kaggle` takes it (put back after the test)
    rc = main(["regress", "--notebooks", str(folder), "--out", str(out), "--update-baselines", "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 143, cap.err
    assert f"updated {folder / 'golden' / 'v.json'}" in cap.out and f"updated {folder / 'baselines.json'}: 1 baseline" \
        in cap.out, cap.out
    assert cap.err.strip().splitlines()[-1] == "interrupted: stopped by SIGTERM"
    assert json.loads((folder / "golden" / "v.json").read_text()) == {"v": "new"}
