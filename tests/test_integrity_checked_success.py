"""Nothing reports a success it did not check.

* A bundle's weights are loaded into the model their config.json describes before anything is built: an
  export without the record of its config (older ones) whose config.json says another hidden size,
  vocabulary, depth or width is refused in one line, as `submit` and the kernel would fail on it.
* `--execute` fails (status 1, one `error:` line) when the kernel's model answered no task, however valid the
  fallback submission it left.
* `score` validates first, as `validate-submission` does (extra keys, extra or missing task ids, counts,
  grids), and scores nothing Kaggle would refuse.
* A command whose results cannot reach stdout (closed, a gone reader, a full device) fails in one line, with
  no traceback, instead of exiting 0 having shown nothing; so does a help, usage or version text.
* `submit` on challenges that hold no task (`{}`) is refused as bad input (nothing to answer), as
  `validate-submission` and `score` refuse them: one check.
* The bundle's `--notebook` must be a submission kernel this package can run (its parameters cell sets what
  the bundle and the sandbox set, and it calls the package's fallback-first `solve`), or nothing is built.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B, rehearsal, sandbox
from trm_kaggle.model.export import check_export

from conftest import make_export, make_notebook

REPO = Path(__file__).resolve().parents[1]


def unbound_export(path: Path, **changes) -> Path:
    """A tiny export whose weights carry no record of their config (as exports of older versions), its
    config.json then edited: {"hidden_size": 32} changes arch, {"vocab_size": 20} the top level."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    make_export(path)
    with safe_open(str(path / "weights.safetensors"), framework="pt") as f:
        meta = {k: v for k, v in (f.metadata() or {}).items() if k != "config"}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(path / "weights.safetensors"), metadata=meta)
    config = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        (config if key in config else config["arch"])[key] = value
    (path / "config.json").write_text(json.dumps(config))
    return path


# ---------------------------------------------------------------------------
# the bundle's weights
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("changes, words", [
    ({"hidden_size": 32}, "embed_tokens.weight (12, 16) in the file, (12, 32) in the model"),
    ({"vocab_size": 20}, "embed_tokens.weight (12, 16) in the file, (20, 16) in the model"),
    ({"L_layers": 2}, "missing keys layers.1."),
    ({"expansion": 40.0}, "tensor shapes do not match: layers.0.mlp"),  # an inner width of 512, not 256
])
def test_a_bundle_refuses_weights_their_config_does_not_describe(tmp_path, capsys, changes, words):
    export = unbound_export(tmp_path / "exp", **changes)
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(export),
                 "--notebook", str(make_notebook(tmp_path / "nb.ipynb"))])
    line = one_error_line(capsys, rc)
    assert f"{export / 'weights.safetensors'}: weights do not match the model config" in line and words in line
    assert not (tmp_path / "out").exists()  # refused before any part was built


def test_the_bundle_check_passes_what_loads(tmp_path):
    assert check_export(unbound_export(tmp_path / "a"))["arch"]["hidden_size"] == 16  # no record, config intact
    assert check_export(make_export(tmp_path / "b"))["vocab_size"] == 12
    assert check_export(REPO / "weights" / "arc2-cpu-tiny")["format"] == "trm_kaggle.inference"


def test_the_bundle_refuses_what_submit_cannot_run(tmp_path, capsys):
    """The same export through `submit`: the model could not run on any task (status 3), with the same words."""
    export = unbound_export(tmp_path / "exp", hidden_size=32)
    (tmp_path / "c.json").write_text('{"t1": {"train": [{"input": [[1]], "output": [[2]]}], '
                                     '"test": [{"input": [[1]]}]}}')
    rc = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(export), "--output",
               str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w"), "--device", "cpu", "--no-progress"])
    assert rc == 3 and "weights do not match the model config" in capsys.readouterr().err
    with pytest.raises(TRMError, match="weights do not match the model config"):
        check_export(export)


# ---------------------------------------------------------------------------
# --execute's verdict
# ---------------------------------------------------------------------------


def layout_with_report(tmp_path: Path, report: dict | None) -> sandbox.SandboxLayout:
    layout = sandbox.SandboxLayout(tmp_path / "sandbox", sandbox.BundleIds())
    if report is not None:
        (layout.working / "ttt_work").mkdir(parents=True)
        (layout.working / "ttt_work" / "solve_report.json").write_text(json.dumps(report))
    return layout


@pytest.mark.parametrize("report, answered, words", [
    (None, 0, "no report of the model's work"),
    ({"answered": 0, "model_tasks": 3, "model_failed": "weights do not match the model config"}, 0,
     "0 of the 3 tasks it was given: weights do not match the model config"),
    ({"answered": 0, "model_tasks": 3, "model_failed": None, "errors": []}, 0, "the time budget ran out"),
    ({"answered": 0, "model_tasks": 0}, 0, "it was given none"),
    ({"answered": "2", "model_tasks": 3}, 0, "0 of the 3 tasks"),  # not a count: nothing is taken on trust
    ({"answered": 2, "model_tasks": 3}, 2, None),
    # it ran and predicted, but decoded no valid grid: that proves the model ran, and says why nothing counts
    ({"answered": 0, "ran": 2, "model_tasks": 3}, 0, "it predicted 2, but decoded no valid grid"),
])
def test_the_execute_verdict_reads_what_the_model_answered(tmp_path, report, answered, words):
    got = rehearsal.model_answers(layout_with_report(tmp_path, report))
    assert got["answered"] == answered
    assert got["ran"] == max(answered, report.get("ran", 0) if report else 0)
    assert (got["model_problem"] is None) if words is None else (words in got["model_problem"])


def test_an_execute_whose_model_answered_nothing_fails(tmp_path, capsys, monkeypatch):
    """bundle's --execute with a kernel run that left a valid fallback submission and a report of 0 answers:
    status 1 and one `error:` line, never "submission valid" alone."""
    notebook = make_notebook(tmp_path / "nb.ipynb")

    def executed(out_dir, **_):
        return {"notebook_s": 1.0, "papermill_rc": 0, "submission_valid": True, "tasks": 4, "answered": 0,
                "model_tasks": 3, "trm_kaggle_file": "x", "trm_kaggle_in_venv": True, "log": "papermill.log",
                "executed_notebook": "executed.ipynb", "ok": False,
                "problems": ["the model answered no task: 0 of the 3 tasks it was given: weights do not match"]}

    monkeypatch.setattr(B, "execute", executed)
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(make_export(tmp_path / "exp")),
                 "--notebook", str(notebook), "--execute"])
    cap = capsys.readouterr()
    assert rc == 1 and "the model answered 0 of the 3 tasks it was given" in cap.out
    errors = [line for line in cap.err.splitlines() if line.startswith("error:")]
    assert errors == ["error: the model answered no task: 0 of the 3 tasks it was given: weights do not match"]


@pytest.mark.slow  # a bundle built and its kernel run offline in a sandbox: ~2 min on a loaded 2-core machine
def test_execute_fails_when_the_kernel_answered_no_task(tmp_path, capsys, monkeypatch):
    """The reproducer: the kernel ran (papermill status 0), its fallback submission is valid, its model answered
    0 tasks (the weights dataset's config.json no longer fits its tensors)."""
    pytest.importorskip("papermill")
    try:
        sandbox.probe_netns()
    except TRMError as e:
        pytest.skip(f"no network namespace on this machine, so the offline run cannot be proven: {e}")
    from conftest import random_task
    import numpy as np

    rng = np.random.default_rng(0)
    tasks = {f"{i:08x}": random_task(rng, n_train=2, n_test=1, max_side=5)[0] for i in range(2)}
    (tmp_path / "arc-agi_evaluation_challenges.json").write_text(json.dumps(tasks))

    def foreign_config(layout):  # after the build: the bundle's own check has passed
        path = layout.weights / "config.json"
        config = json.loads(path.read_text())
        config["arch"].update(hidden_size=64, num_heads=4)
        path.write_text(json.dumps(config))

    monkeypatch.setattr(B, "execute", functools.partial(rehearsal.execute, alter=foreign_config, echo=lambda _: None))
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(make_export(tmp_path / "exp")),
                 "--execute", "--challenges", str(tmp_path / "arc-agi_evaluation_challenges.json"), "--max-tasks",
                 "1", "--time-budget", "300", "--finetune-steps", "1", "--num-aug", "1", "--workers", "1"])
    cap = capsys.readouterr()
    assert rc == 1, cap.out + cap.err
    assert "papermill status 0; submission valid against all 2 tasks; the model answered 0 of the 1" in cap.out
    errors = [line for line in cap.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the model answered no task: 0 of the 1 tasks it was given" in errors[0], cap.err
    report = json.loads((tmp_path / "out" / "sandbox" / "execute_report.json").read_text())
    assert report["ok"] is False and report["answered"] == 0


# ---------------------------------------------------------------------------
# score
# ---------------------------------------------------------------------------


GOOD = {"t1": [{"attempt_1": [[1]], "attempt_2": [[2]]}], "t2": [{"attempt_1": [[3]], "attempt_2": [[4]]}]}
SOLUTIONS = {"t1": [[[1]]], "t2": [[[4]]]}


@pytest.mark.parametrize("change, words", [
    (lambda s: s["t1"][0].update(attempt_3=[[5]]), "task t1: test 0: unexpected keys attempt_3"),
    (lambda s: s["t1"].append({"attempt_1": [[1]], "attempt_2": [[2]]}), "task t1: 2 attempt dicts for 1 test input"),
    (lambda s: s["t1"][0].update(attempt_2=[[10]]), "task t1: test 0: attempt_2"),
    (lambda s: s["t1"][0].update(attempt_2=[[True]]), "task t1: test 0: attempt_2"),
    (lambda s: s["t1"][0].pop("attempt_2"), "task t1: test 0: attempt_2 is missing"),
])
def test_score_refuses_what_validate_submission_refuses(tmp_path, capsys, change, words):
    sub = json.loads(json.dumps(GOOD))
    change(sub)
    (tmp_path / "s.json").write_text(json.dumps(sub))
    (tmp_path / "sol.json").write_text(json.dumps(SOLUTIONS))
    rc = main(["score", str(tmp_path / "s.json"), "--solutions", str(tmp_path / "sol.json")])
    out = capsys.readouterr()
    assert rc == 2 and out.out == "" and "Traceback" not in out.err, out
    (line,) = [x for x in out.err.splitlines() if x.strip()]
    assert line.startswith(f"error: {tmp_path / 's.json'}: invalid submission (Kaggle would refuse it, so it is not "
                           "scored): ") and words in line


@pytest.mark.parametrize("command", ["score", "validate-submission"])
def test_a_file_without_tasks_validates_nothing(tmp_path, capsys, command):
    """Against `{}` every submission would pass: "valid" (or a score of 0 over 0 outputs) would check nothing."""
    (tmp_path / "empty.json").write_text("{}")
    flag = "--solutions" if command == "score" else "--challenges"
    line = one_error_line(capsys, main([command, str(tmp_path / "empty.json"), flag, str(tmp_path / "empty.json")]))
    assert "empty.json: holds no task, so a submission checked against it proves nothing" in line


@pytest.mark.parametrize("content", ["{}", "\ufeff{ }\n"])
def test_submit_on_challenges_without_tasks_is_bad_input(tmp_path, capsys, content):
    """The reproducer: `submit` on `{}` wrote an empty "valid" submission and said "0 tasks", status 0."""
    (tmp_path / "empty.json").write_text(content, encoding="utf-8")
    rc = main(["submit", "--challenges", str(tmp_path / "empty.json"), "--weights", str(make_export(tmp_path / "exp")),
               "--output", str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w"), "--no-progress"])
    line = one_error_line(capsys, rc)
    assert f"{tmp_path / 'empty.json'}: holds no task, so there is nothing to answer" in line
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "w").exists()  # nothing written


def test_score_of_a_valid_submission(tmp_path, capsys):
    (tmp_path / "s.json").write_text(json.dumps(GOOD))
    (tmp_path / "sol.json").write_text(json.dumps(SOLUTIONS))
    assert main(["score", str(tmp_path / "s.json"), "--solutions", str(tmp_path / "sol.json")]) == 0
    assert "pass@2): 1.0000" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# regress --update-baselines
# ---------------------------------------------------------------------------


def test_an_update_that_set_no_baseline_does_not_say_updated(tmp_path, capsys):
    nbformat = pytest.importorskip("nbformat", reason="regress needs the notebooks extra")
    pytest.importorskip("papermill", reason="regress needs the notebooks extra")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("WORK_DIR = None\n", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("raise RuntimeError('the data is gone')\n")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, tmp_path / "nbs" / "a.ipynb")
    (tmp_path / "nbs" / "baselines.json").write_text(json.dumps({
        "format": "trm_kaggle.regression-baselines", "version": 1,
        "baselines": {"a": {"m": {"value": None, "tolerance": 0.1, "direction": "higher"}}}}))
    before = (tmp_path / "nbs" / "baselines.json").read_bytes()
    rc = main(["regress", "--notebooks", str(tmp_path / "nbs"), "--out", str(tmp_path / "out"), "--update-baselines"])
    cap = capsys.readouterr()
    assert rc == 2 and "updated" not in cap.out and "baselines.json is unchanged" in cap.err, cap
    assert (tmp_path / "nbs" / "baselines.json").read_bytes() == before
    assert "compared with the committed baselines" in (tmp_path / "out" / "report.md").read_text()


# ---------------------------------------------------------------------------
# results that cannot be printed
# ---------------------------------------------------------------------------


def files(tmp_path: Path) -> list[str]:
    (tmp_path / "s.json").write_text(json.dumps(GOOD))
    (tmp_path / "sol.json").write_text(json.dumps(SOLUTIONS))
    return [str(tmp_path / "s.json"), "--solutions", str(tmp_path / "sol.json")]


def test_a_closed_stdout_is_an_error_before_the_work(tmp_path, capsys, monkeypatch):
    args = files(tmp_path)
    monkeypatch.setattr(sys, "stdout", None)  # what Python makes of a stdout closed at start (`>&-`)
    line = one_error_line(capsys, main(["score", *args]))
    assert "standard output is closed" in line


class Refusing:
    """A stdout whose reader went away: every write fails."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass


def test_a_stdout_that_refuses_writes_is_an_error(tmp_path, capsys, monkeypatch):
    args = files(tmp_path)
    monkeypatch.setattr(sys, "stdout", Refusing())
    line = one_error_line(capsys, main(["score", *args]))
    assert "the results could not be printed: standard output failed (its reader closed the pipe)" in line


@pytest.mark.parametrize("redirect, status, words", [
    (">&-", 2, "standard output is closed"),
    ("> /dev/full", 2, "its device is full"),
    ("| head -c0", 2, "its reader closed the pipe"),
])
@pytest.mark.parametrize("command", ["score", "validate-submission", "score --json"])
def test_the_command_line_with_stdout_gone(tmp_path, redirect, status, words, command):
    if not Path("/dev/full").exists() and "full" in redirect:
        pytest.skip("no /dev/full here")
    s, sol = files(tmp_path)[0], tmp_path / "sol.json"
    (tmp_path / "c.json").write_text(json.dumps({k: {"train": [], "test": [{"input": [[1]]}]} for k in GOOD}))
    what = f"score {s} --solutions {sol}" if command == "score" else \
        f"score {s} --solutions {sol} --json" if command == "score --json" else \
        f"validate-submission {s} --challenges {tmp_path / 'c.json'}"
    shell = f"{sys.executable} -m trm_kaggle {what} {redirect}; echo \"status $?\" >&2" if "|" not in redirect else \
        f"set -o pipefail; {sys.executable} -m trm_kaggle {what} {redirect}; echo \"status $?\" >&2"
    r = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines[-1] == f"status {status}" and len(lines) == 2, r.stderr
    assert lines[0].startswith("error: ") and words in lines[0] and "Traceback" not in r.stderr


def test_build_bundle_with_stdout_closed_builds_nothing(tmp_path):
    r = subprocess.run(["bash", "-c", f"{sys.executable} {REPO / 'build_bundle.py'} {tmp_path / 'out'} --no-download "
                                      f"--weights {make_export(tmp_path / 'exp')} >&-"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: standard output is closed"), r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def parse_with_stdout(monkeypatch, stream, argv):
    from trm_kaggle.cli import build_parser
    from trm_kaggle.stdout import parse_checked

    monkeypatch.setattr(sys, "stdout", stream)
    return parse_checked(build_parser().parse_args, argv)


class Full:
    """A stdout on a full device: writes are buffered, the flush fails."""

    def write(self, text):
        return len(text)

    def flush(self):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("stream, words", [(Refusing(), "its reader closed the pipe"), (Full(), "its device is full")])
@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["--version"]])
def test_a_help_that_cannot_be_printed_is_an_error(monkeypatch, capsys, stream, words, argv):
    """argparse swallows a failed write of its help and exits 0: it is one line and status 2 instead."""
    with pytest.raises(SystemExit) as e:
        parse_with_stdout(monkeypatch, stream, argv)
    assert e.value.code == 2
    line = one_error_line(capsys)
    assert "standard output failed" in line and words in line


def test_a_help_that_is_printed_still_exits_0(capsys):
    from trm_kaggle.cli import build_parser
    from trm_kaggle.stdout import parse_checked

    with pytest.raises(SystemExit) as e:
        parse_checked(build_parser().parse_args, ["score", "--help"])
    assert e.value.code == 0 and "--solutions" in capsys.readouterr().out
    assert parse_checked(build_parser().parse_args, ["doctor"]).command == "doctor"  # parsing as before


@pytest.mark.parametrize("command", ["--help", "train --help", "--version", "bundle --help", "build_bundle.py --help"])
def test_help_on_a_full_device_from_the_command_line(command):
    """The reproducer: `trm-kaggle --help > /dev/full` exited 0."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    run = [sys.executable, str(REPO / "build_bundle.py")] if command.startswith("build_bundle.py") else \
        [sys.executable, "-m", "trm_kaggle"]
    with open("/dev/full", "w") as full:
        r = subprocess.run([*run, *command.split()[command.startswith("build_bundle.py"):]], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "its device is full" in lines[0], r.stderr


# ---------------------------------------------------------------------------
# the bundle's notebook
# ---------------------------------------------------------------------------


def edited_notebook(path: Path, edit) -> Path:
    nb = json.loads(make_notebook(path).read_text())
    edit(nb)
    path.write_text(json.dumps(nb))
    return path


def _source(nb: dict, i: int, text: str) -> None:
    nb["cells"][i]["source"] = text.splitlines(keepends=True)


@pytest.mark.parametrize("notebook, words", [
    ("notebooks/train.ipynb", "its parameters cell does not set KAGGLE_INPUT"),
    ("notebooks/kaggle_train.ipynb", "its parameters cell does not set FINETUNE_STEPS"),
    (lambda nb: nb["cells"][0]["metadata"].update(tags=[]), "no code cell is tagged 'parameters'"),
    (lambda nb: _source(nb, 1, "print('no model here')\n"), "no code cell calls solve() imported from "
                                                            "trm_kaggle.solve"),
    (lambda nb: _source(nb, 1, "def solve(x):\n    pass\n\nsolve(1)\n"), "no code cell calls solve()"),
    (lambda nb: _source(nb, 1, "from trm_kaggle.solve import solve\n"), "no code cell calls solve()"),
    (lambda nb: _source(nb, 0, "KAGGLE_INPUT = '/kaggle/input'\n"),
     "its parameters cell does not set KAGGLE_WORKING, TIME_BUDGET"),
    (lambda nb: nb["metadata"]["kernelspec"].update(language="R", name="ir"), "its kernel language is 'R'"),
])
def test_a_notebook_that_is_no_submission_kernel_is_refused(tmp_path, capsys, notebook, words):
    """The reproducer: `--notebook notebooks/train.ipynb` built a bundle and said "metadata valid"."""
    path = REPO / notebook if isinstance(notebook, str) else edited_notebook(tmp_path / "nb.ipynb", notebook)
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(make_export(tmp_path / "exp")),
                 "--notebook", str(path)])
    line = one_error_line(capsys, rc)
    assert f"{path}: not a submission kernel this package can run: {words}" in line
    assert not (tmp_path / "out").exists()  # refused before any part was built


def test_the_shipped_kernel_and_magics_pass_the_notebook_check(tmp_path):
    from trm_kaggle.kaggle.kernel import kernel_notebook_problem

    assert kernel_notebook_problem(json.loads((REPO / "notebooks" / "kaggle_submission.ipynb").read_text())) is None
    nb = json.loads(edited_notebook(tmp_path / "nb.ipynb", lambda nb: _source(
        nb, 1, "!pip install x\n%time y = 1\nfrom trm_kaggle.solve import solve as run\nreport = run(None)\n"
    )).read_text())
    assert kernel_notebook_problem(nb) is None  # shell and magic lines, an alias


@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full", "2>&1 >/dev/null | true"])
def test_a_command_whose_stderr_is_gone_still_does_its_work(tmp_path, redirect):
    """stderr closed, on a full device or read by nobody: the first progress bar or warning failed the command with
    an OSError the error line (on the same stream) could not say: status 1, nothing built, no word. stderr
    carries no results: the command does its work and says its result on stdout."""
    if "full" in redirect and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    out = tmp_path / "d"
    shell = (f"{sys.executable} -m trm_kaggle build-sudoku --output-dir {out} --size 4 --num-train 20 --num-test 5 "
             f"{redirect}; echo \"status $?\" > {tmp_path / 'status'}")
    r = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (tmp_path / "status").read_text().strip() == "status 0", r.stdout + r.stderr
    assert (out / "dataset.json").is_file() or (out / "train").is_dir()


@pytest.mark.parametrize("argv", [["--version"], ["score", "--help"], ["--help"]])
def test_help_or_version_with_stdout_closed_is_refused_not_sent_to_stderr(argv):
    """`trm-kaggle score --help >&-` exited 0 with the help on stderr (argparse's fallback), where `--help >
    /dev/full` and `build_bundle.py --help >&-` are refused: a closed stdout is refused here too, status 2."""
    res = subprocess.run(["bash", "-c", f'"$0" -m trm_kaggle {" ".join(argv)} >&-', sys.executable],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "error: standard output is closed, so the results could not be printed; send it to a file or to /dev/null "
        "instead of closing it"], res.stderr


def test_a_command_in_a_current_folder_that_was_deleted_is_one_line_before_torch(tmp_path):
    """Started in a folder deleted after the shell entered it, every command that imports torch died in C ("Intel
    oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so"), and a relative path was "No such file or directory
    (needed: it (or its folder) to exist)" naming no file."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && PYTHONPATH="$2" "$0" -m trm_kaggle doctor'
    res = subprocess.run(["bash", "-c", script, sys.executable, str(gone), str(REPO)], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "error: the current folder no longer exists (it was deleted or moved after this shell entered it): cd to an "
        "existing folder and run the command again"], res.stderr


@pytest.mark.parametrize("mask", [0o777, 0o700, 0o177])
def test_a_umask_taking_the_owners_own_permissions_is_one_line_before_any_work(tmp_path, capsys, mask):
    """Under umask 0777 `train` made its run folder mode 000, ended naming the lock it could not write in it, and
    left the folder behind: its next run, under a sane umask, blamed a sweep.json that never existed."""
    import os

    old = os.umask(mask)
    try:
        code = main(["train", "--preset", "cpu-smoke", f"checkpoint_path={tmp_path / 'run'}", "data_paths=[nowhere]"])
    finally:
        os.umask(old)
    assert code == 2 and one_error_line(capsys) == (
        f"error: the umask {mask:04o} takes the owner's own permissions from every file and folder a command makes "
        "(they could not be read back): set one that keeps them (umask 022 or 077) and run it again")
    assert list(tmp_path.iterdir()) == []  # nothing made
    from trm_kaggle.names import umask_problem

    for kept in (0o077, 0o022, 0o000):  # the owner's permissions kept: no refusal, and the umask left as it was
        old = os.umask(kept)
        try:
            assert umask_problem() is None and os.umask(kept) == kept
        finally:
            os.umask(old)


def test_stdout_open_for_reading_only_is_said_as_such(tmp_path):
    """`trm-kaggle --version 1<file` (stdout open read-only) was "standard output failed (it is closed)"."""
    (tmp_path / "f").write_text("")
    res = subprocess.run(["bash", "-c", '"$0" -m trm_kaggle --version 1<"$1"', sys.executable, str(tmp_path / "f")],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "standard output failed (it is closed, or open for reading only)" in res.stderr, \
        res.stderr
