"""The kernels' offline install, proven against an image with an unmet requirement, and the submission kernel's
last line.

The image is a fresh venv that sees this interpreter's packages (torch, numpy, pydantic, ...) but not
trm_kaggle (the sandbox's venv), plus one installed distribution whose own requirement is unmet: a `tqdm` 99.0
that requires a package nobody ships, as Kaggle's image once held a torch whose setuptools requirement its
setuptools did not meet. An install that re-resolves what the image has fails there (pip cannot reach the missing
package offline); the kernels' install step (their own cells, run in that venv) installs the wheel without
re-resolving, and names a requirement of trm_kaggle that neither the image nor the wheels dataset has.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from trm_kaggle.kaggle import offline_install, sandbox
from trm_kaggle.kaggle.metadata import BundleIds, REPO_ROOT
from trm_kaggle.kaggle.wheels import build_pure_wheel, copy_project_sources

NOTEBOOKS = REPO_ROOT / "notebooks"


def code_cells(name: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / name).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def install_cell(cells: list[str]) -> int:
    (index,) = [i for i, c in enumerate(cells) if "def offline_installer(" in c]
    return index


@pytest.fixture
def image(tmp_path):
    """(the venv's python, a wheels dir holding the trm_kaggle wheel alone): a fresh one per test."""
    root = tmp_path / "image"
    layout = sandbox.SandboxLayout(root / "sandbox", BundleIds())
    layout.root.mkdir(parents=True)
    python = sandbox.create_sandbox_venv(layout)
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    info = purelib / "tqdm-99.0.dist-info"  # before the base's own tqdm on sys.path: pip sees this one
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tqdm\nVersion: 99.0\n"
                                   "Requires-Dist: trm-unmet-requirement>=1\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    wheels = root / "wheels"
    build_pure_wheel(copy_project_sources(REPO_ROOT, root / "src"), wheels)
    return python, wheels


def run_install(python: Path, tmp_path: Path, notebook: str, wheels: Path) -> subprocess.CompletedProcess:
    """The notebook's cells up to its install step, in the image's python (its parameters pointed here)."""
    cells = code_cells(notebook)
    upto = install_cell(cells)
    (tmp_path / "input" / "comp").mkdir(parents=True)
    (tmp_path / "input" / "comp" / "arc-agi_test_challenges.json").write_text(json.dumps(
        {"00000000": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1, 2]]}]}}))
    params = (f"KAGGLE_INPUT = {str(tmp_path / 'input')!r}\nKAGGLE_WORKING = {str(tmp_path / 'working')!r}\n"
              f"WHEELS_DIR = {str(wheels)!r}\n")
    script = "\n\n".join([cells[0], params, *cells[1:upto + 1],
                          "print('READY', READY)\nimport trm_kaggle, sys\nprint('FROM', trm_kaggle.__file__)"])
    (tmp_path / "cells.py").write_text(script)
    env = sandbox.sandbox_env(sandbox.SandboxLayout(python.parents[2], BundleIds()))
    return subprocess.run([str(python), str(tmp_path / "cells.py")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


@pytest.mark.slow
def test_the_install_does_not_re_resolve_the_image(image, tmp_path):
    python, wheels = image
    # the image is as described: a plain resolving install of the same wheel fails on the unmet requirement
    plain = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                            "--dry-run", "--disable-pip-version-check", "trm_kaggle"], capture_output=True, text=True,
                           env=sandbox.sandbox_env(sandbox.SandboxLayout(python.parents[2], BundleIds())))
    assert plain.returncode != 0 and "trm-unmet-requirement" in plain.stderr, plain.stderr[-2000:]
    for notebook in ("kaggle_submission.ipynb", "kaggle_train.ipynb"):
        res = run_install(python, tmp_path / notebook, notebook, wheels)
        out = res.stdout + res.stderr
        assert res.returncode == 0 and "READY True" in out, out[-3000:]
        assert f"FROM {python.parents[2]}" in out, out[-3000:]  # the wheel's copy, installed into the venv
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "trm_kaggle"], check=True,
                       capture_output=True)


@pytest.mark.slow
def test_a_requirement_nobody_has_is_named_in_one_line(image, tmp_path):
    python, wheels = image
    import zipfile

    own = tmp_path / "wheels"  # a trm_kaggle wheel (its package a stub) whose requirements name one nobody has
    own.mkdir()
    meta = ("Metadata-Version: 2.1\nName: trm_kaggle\nVersion: 99.0\nRequires-Dist: numpy>=1\n"
            "Requires-Dist: trm-missing-dependency>=1\nRequires-Dist: trm-extra-only>=1; extra == \"x\"\n")
    with zipfile.ZipFile(own / "trm_kaggle-99.0-py3-none-any.whl", "w") as z:
        z.writestr("trm_kaggle/__init__.py", "")
        z.writestr(offline_install.WHEEL_PATH, Path(offline_install.__file__).read_text())
        z.writestr("trm_kaggle-99.0.dist-info/METADATA", meta)
        z.writestr("trm_kaggle-99.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("trm_kaggle-99.0.dist-info/RECORD", "")
    res = run_install(python, tmp_path / "nb", "kaggle_submission.ipynb", own)
    lines = [line for line in res.stdout.splitlines() if "installing trm_kaggle failed" in line]
    assert len(lines) == 1, res.stdout[-3000:]
    assert "trm_kaggle needs trm-missing-dependency>=1, which neither this image nor the wheels dataset" in lines[0]
    assert "numpy" not in lines[0] and "trm-extra-only" not in lines[0] and "READY False" in res.stdout


def test_the_last_line_says_the_model_did_not_run_and_strict_fails_only_the_save_run(capsys, tmp_path,
                                                                                      monkeypatch):
    cells = code_cells("kaggle_submission.ipynb")
    last = cells[-1]
    assert "RESULT:" in last
    monkeypatch.chdir(tmp_path)
    helpers: dict = {}  # the first cell's definitions (`is_file`), not its run
    exec(cells[0], helpers)
    exec(cells[1][:cells[1].index("SUBMISSION = Path(")], helpers)
    base = {**helpers, "NO_MODEL": "installing trm_kaggle failed:\n  simulated", "SUBMISSION": Path("submission.json"),
            "report": None, "CHECK_FAILED": None}  # the cell before sets CHECK_FAILED whatever happens
    exec(last, {**base, "STRICT": False, "rerun": False})  # no file: no fallback answers to speak of
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "RESULT: no submission was written (submission.json): installing trm_kaggle failed: simulated")
    Path("submission.json").write_text("{}")
    exec(last, {**base, "STRICT": False, "rerun": False})  # an earlier run's file: never this run's answers
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "RESULT: no submission was written (submission.json, which holds an earlier run's file): installing "
        "trm_kaggle failed: simulated")
    base["WRITTEN"] = True  # the fallback cell wrote it
    exec(last, {**base, "STRICT": False, "rerun": False})
    assert capsys.readouterr().out.strip().splitlines()[-1] == (  # one line, whatever the cause's text held
        "RESULT: submission.json holds the fallback answers (the model did not run), which score 0: installing "
        "trm_kaggle failed: simulated")
    exec(last, {**base, "STRICT": True, "rerun": True})  # the scored rerun never fails
    with pytest.raises(RuntimeError, match="STRICT: the model did not run"):
        exec(last, {**base, "STRICT": True, "rerun": False})
    exec(last, {**base, "NO_MODEL": None, "STRICT": True, "rerun": False,
                "report": {"ran": 2, "answered": 1}})
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("RESULT: the model ran: 2 tasks predicted")
    # a solve that predicted nothing is a model that did not run, in the cell before
    before = textwrap.dedent(cells[-2])
    assert 'if report is not None and not report.get("ran"):' in before


def test_the_notebooks_fallback_is_the_one_submit_writes():
    """The kernel's standard-library fallback answers as `make_submission` without candidates does: the input,
    then its transpose (or [[0]], [[1]]), [[0]] and [[1]] for an unusable input."""
    import numpy as np

    from conftest import random_task
    from trm_kaggle.evaluate.submission import make_submission

    scope: dict = {}
    cells = code_cells("kaggle_submission.ipynb")
    exec(cells[0], scope)
    src = cells[1]
    exec(src[:src.index("SUBMISSION = Path(")], scope)  # its definitions, not the run
    rng = np.random.default_rng(3)
    tasks = {f"t{i}": random_task(rng, n_train=1, n_test=2, max_side=4)[0] for i in range(20)}
    tasks["square"] = {"train": [], "test": [{"input": [[1, 2], [2, 1]]}, {"input": [[0]]}]}
    tasks["bad"] = {"train": [], "test": [{"input": [[1, 2], [3]]}, {}]}
    assert scope["fallback_submission"](tasks) == make_submission(tasks, {}).submission


def test_the_installer_is_standard_library_only_and_one_copy_serves_both_notebooks():
    """The notebooks run offline_install.py before trm_kaggle can be imported: it may import nothing else, and
    neither notebook carries its own copy of what it does."""
    import ast
    import sys

    tree = ast.parse(Path(offline_install.__file__).read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert roots - {"pip"} <= set(sys.stdlib_module_names), roots
    for notebook in ("kaggle_submission.ipynb", "kaggle_train.ipynb"):
        cell = code_cells(notebook)[install_cell(code_cells(notebook))]
        assert "--no-deps" not in cell and "def missing_requirements" not in cell  # the module's job alone
        assert 'installer["prepare"](wheels, warn=warn)' in cell and offline_install.WHEEL_PATH in cell


def test_the_installer_names_an_unmet_requirement_and_warns_on_a_version(monkeypatch):
    reqs = ["numpy>=1", "numpy<0.1", "trm-missing-dependency>=1", 'trm-extra-only>=1; extra == "x"',
            'trm-other-platform>=1; sys_platform == "nonexistent"']
    monkeypatch.setattr(offline_install.importlib.metadata, "requires", lambda dist: reqs)
    said: list[str] = []
    assert offline_install.missing_requirements("anything", warn=said.append) == ["trm-missing-dependency>=1"]
    assert len(said) == 1 and "numpy<0.1" in said[0] and "kept: installed as it is" in said[0]
    with pytest.raises(RuntimeError, match=r"^trm_kaggle needs trm-missing-dependency>=1, which neither"):
        offline_install.prepare(None, warn=said.append)  # trm_kaggle is importable here: the check alone


def test_a_pip_that_crashes_is_named_by_its_exception(monkeypatch, tmp_path):
    """pip's crash prints `ERROR: Exception:` and then its traceback: the reason said was that header alone."""
    crash = "ERROR: Exception:\nTraceback (most recent call last):\n  File \"x.py\", line 1\nDeprecationWarning: boom\n"
    monkeypatch.setattr(offline_install.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 2, "", crash))
    with pytest.raises(RuntimeError, match=r"failed \(status 2\): ERROR: Exception: DeprecationWarning: boom$"):
        offline_install.install_offline(tmp_path)
    refused = "ERROR: Could not find a version that satisfies the requirement trm_kaggle\nERROR: No matching dist\n"
    monkeypatch.setattr(offline_install.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", refused))
    with pytest.raises(RuntimeError, match=r"failed \(status 1\): ERROR: No matching dist$"):
        offline_install.install_offline(tmp_path)


def test_a_wheel_without_the_installer_is_one_line_and_no_install(tmp_path):
    """The kernel's cell, in a process where trm_kaggle is not importable, given a wheel built before the
    installer existed: READY False with one line naming the wheel, nothing installed."""
    import sys
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "trm_kaggle-0.1-py3-none-any.whl", "w") as z:
        z.writestr("trm_kaggle/__init__.py", "")
    cells = code_cells("kaggle_submission.ipynb")
    params = (f"KAGGLE_INPUT = {str(tmp_path / 'input')!r}\nKAGGLE_WORKING = {str(tmp_path / 'working')!r}\n"
              f"WHEELS_DIR = {str(wheels)!r}\n")
    (tmp_path / "input" / "comp").mkdir(parents=True)
    (tmp_path / "input" / "comp" / "arc-agi_test_challenges.json").write_text(json.dumps(
        {"00000000": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1, 2]]}]}}))
    hide = ("import importlib.util as _u\n_f = _u.find_spec\n"  # trm_kaggle not importable, as in a fresh image
            "_u.find_spec = lambda n, *a: None if n == 'trm_kaggle' else _f(n, *a)\n")
    script = "\n\n".join([hide, cells[0], params, *cells[1:install_cell(cells) + 1], "print('READY', READY)"])
    (tmp_path / "cells.py").write_text(script)
    res = subprocess.run([sys.executable, str(tmp_path / "cells.py")], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    lines = [line for line in (res.stdout + res.stderr).splitlines() if "installing trm_kaggle failed" in line]
    assert res.returncode == 0 and "READY False" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    assert len(lines) == 1 and "has no trm_kaggle/kaggle/offline_install.py" in lines[0], lines
    assert "rebuild the wheels dataset" in lines[0]


@pytest.mark.parametrize("raised, said", [("sys.exit(3)", "its installer exited with status 3"),
                                          ("raise GeneratorExit", "(GeneratorExit)")])
@pytest.mark.parametrize("notebook", ["kaggle_submission.ipynb", "kaggle_train.ipynb"])
def test_a_wheel_whose_installer_exits_is_one_line_and_the_kernel_goes_on(tmp_path, notebook, raised, said):
    """A foreign trm_kaggle wheel whose installer calls sys.exit(3): SystemExit is no Exception, and it once ended
    the kernel with status 3 before its last line (the fallback stood, unsaid)."""
    import sys
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "trm_kaggle-0.1-py3-none-any.whl", "w") as z:
        z.writestr(offline_install.WHEEL_PATH, f"import sys\n{raised}\n")  # neither raises an Exception
    cells = code_cells(notebook)
    params = (f"KAGGLE_INPUT = {str(tmp_path / 'input')!r}\nKAGGLE_WORKING = {str(tmp_path / 'working')!r}\n"
              f"WHEELS_DIR = {str(wheels)!r}\n")
    (tmp_path / "input" / "comp").mkdir(parents=True)
    (tmp_path / "input" / "comp" / "arc-agi_test_challenges.json").write_text(json.dumps(
        {"00000000": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1, 2]]}]}}))
    hide = ("import importlib.util as _u\n_f = _u.find_spec\n"
            "_u.find_spec = lambda n, *a: None if n == 'trm_kaggle' else _f(n, *a)\n")
    script = "\n\n".join([hide, cells[0], params, *cells[1:install_cell(cells) + 1], "print('READY', READY)"])
    (tmp_path / "cells.py").write_text(script)
    res = subprocess.run([sys.executable, str(tmp_path / "cells.py")], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    out = res.stdout + res.stderr
    lines = [line for line in out.splitlines() if "installing trm_kaggle failed" in line]
    assert res.returncode == 0 and "READY False" in res.stdout, out[-2000:]
    assert len(lines) == 1 and said in lines[0], lines


def test_the_kernels_reason_when_every_task_it_worked_on_was_refused():
    """Malformed tasks taking every MAX_TASKS place: the last line blamed the time budget ("it predicted no task
    within the time budget") 0 s into 200; `submit` names the refusal, and so does the kernel now."""
    before = code_cells("kaggle_submission.ipynb")[-2]
    start = before.index('if report is not None and not report.get("ran"):')
    block = before[start:before.index("if WRITTEN and is_file(SUBMISSION)")]
    refused = {"t\x1b0": "challenges: task t0: test pair 0 input: not rectangular", "t1": "no train pairs"}
    scope = {"report": {"ran": 0, "model_tasks": 0, "left_out": refused, "errors": []}, "NO_MODEL": None}
    exec(block, scope)
    assert scope["NO_MODEL"] == ("every task was refused before the model: task t\\x1b0: challenges: task t0: test "
                                 "pair 0 input: not rectangular (and 1 other task)")
    scope = {"report": {"ran": 0, "model_tasks": 2, "left_out": {}, "errors": []}, "NO_MODEL": None}
    exec(block, scope)
    assert scope["NO_MODEL"] == "it predicted no task within the time budget"


def test_a_wheels_folder_name_and_pips_output_are_said_escaped(monkeypatch, tmp_path, capsys):
    """A wheels folder found below KAGGLE_INPUT named with an escape sequence and a newline cleared the kernel's
    log and forged a line in it, in the `wheels:` line, pip's output and pip's refusal."""
    wheels = tmp_path / "wh\x1b[2J\nINJ"
    wheels.mkdir()
    (wheels / "trm_kaggle-0.1-py3-none-any.whl").write_bytes(b"")
    said = "Processing ./wh\x1b[2J\nINJ/trm_kaggle-0.1-py3-none-any.whl\nSuccessfully installed trm_kaggle-0.1\n"
    monkeypatch.setattr(offline_install.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, said, ""))
    monkeypatch.setattr(offline_install.importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(offline_install, "missing_requirements", lambda **k: [])
    offline_install.prepare(wheels)
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.splitlines() == [
        f"wheels: {tmp_path}/wh\\x1b[2J\\nINJ", "Processing ./wh\\x1b[2J", "INJ/trm_kaggle-0.1-py3-none-any.whl",
        "Successfully installed trm_kaggle-0.1"], out
    refused = "ERROR: Could not find \x1b[31mtrm_kaggle\n"
    monkeypatch.setattr(offline_install.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", refused))
    with pytest.raises(RuntimeError) as e:
        offline_install.install_offline(wheels)
    assert e.value.args[0] == (f"pip install --no-index --no-deps --find-links {tmp_path}/wh\\x1b[2J\\nINJ trm_kaggle "
                               "failed (status 1): ERROR: Could not find \\x1b[31mtrm_kaggle")


def test_only_files_named_as_wheels_are_named_to_pip(monkeypatch, tmp_path):
    """A stray `notes.whl` failed the whole install ("not a valid wheel filename"), and `.-1.0-py3-none-any.whl`
    asked pip to install the current folder: pip is given only distributions of files named as wheels."""
    for name in ("notes.whl", ".-1.0-py3-none-any.whl", "-1.0-py3-none-any.whl", "x y-1.0-py3-none-any.whl",
                 "trm_kaggle-0.1-py3-none-any.whl", "trm_extra.pkg-2.0-1-cp311-cp311-manylinux_2_17_x86_64.whl",
                 "trm_other-1.0+local-py2.py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    ran = []
    monkeypatch.setattr(offline_install.subprocess, "run",
                        lambda cmd, **k: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    offline_install.install_offline(tmp_path)
    assert ran[0][ran[0].index("--no-color") + 1:] == ["trm_kaggle", "trm_extra.pkg", "trm_other"], ran
