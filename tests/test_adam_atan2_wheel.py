"""The adam-atan2 wheel kernel's script, run here with a stand-in pip and nvcc (it needs a Kaggle GPU machine
for real; it has not run on Kaggle from these tests): its steps, its output and its manifest."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from trm_kaggle.kaggle import adam_atan2_wheel

SCRIPT = Path(adam_atan2_wheel.__file__)

FAKE_PIP = textwrap.dedent('''
    import json, os, sys, zipfile
    from pathlib import Path
    args = sys.argv[1:]
    with open(os.environ["PIP_CALLS"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    if args[0] == "wheel":  # pip wheel ... --wheel-dir DIR adam-atan2==0.0.3
        out = Path(args[args.index("--wheel-dir") + 1])
        with zipfile.ZipFile(out / "adam_atan2-0.0.3-cp311-cp311-linux_x86_64.whl", "w") as z:
            z.writestr("adam_atan2_backend.py", "LOADED = True\\n")
            z.writestr("adam_atan2-0.0.3.dist-info/METADATA", "Name: adam-atan2\\nVersion: 0.0.3\\n")
    elif args[0] == "install":  # pip install ... --target DIR WHEEL
        zipfile.ZipFile(args[-1]).extractall(args[args.index("--target") + 1])
''')


def run_script(tmp_path, with_nvcc: bool = True, pip: str | None = None, working: str | None = None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "pip.py").write_text(FAKE_PIP)
    if with_nvcc:
        nvcc = bin_dir / "nvcc"
        nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
        nvcc.chmod(0o755)
    env = {**os.environ, "KAGGLE_WORKING": str(tmp_path / "working"), "PIP_CALLS": str(tmp_path / "calls.jsonl"),
           "TRM_KAGGLE_PIP": f"{sys.executable} {tmp_path / 'pip.py'}", "CUDA_HOME": str(tmp_path / "no-cuda"),
           "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"}
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    if pip is not None:
        env["TRM_KAGGLE_PIP"] = pip
    if working is not None:
        env["KAGGLE_WORKING"] = working
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_builds_checks_and_describes_the_wheel(tmp_path):
    res = run_script(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    # built against the image's torch (no isolated build with another torch), without dependencies
    assert calls[0][0] == "wheel" and {"--no-deps", "--no-build-isolation"} <= set(calls[0])
    assert calls[0][-1] == adam_atan2_wheel.PACKAGE == "adam-atan2==0.0.3"
    assert calls[1][0] == "install" and "--target" in calls[1]  # a private directory for the import check
    working = tmp_path / "working"
    wheel = working / "wheels" / "adam_atan2-0.0.3-cp311-cp311-linux_x86_64.whl"
    assert zipfile.is_zipfile(wheel) and not list(working.glob("import-check*"))
    assert "adam_atan2_backend loads beside torch" in res.stdout
    manifest = json.loads((working / "manifest.json").read_text())
    assert manifest["wheel"] == wheel.name and manifest["size"] == wheel.stat().st_size
    import torch

    assert manifest["built_on"]["torch"] == torch.__version__
    assert manifest["built_on"]["nvcc"].startswith("Cuda compilation tools, release 12.4")
    assert manifest["built_on"]["arch_list"] == adam_atan2_wheel.ARCH_LIST  # every GPU Kaggle lends
    assert "--extra-wheel" in res.stdout


def test_without_nvcc_it_stops_clearly(tmp_path):
    res = run_script(tmp_path, with_nvcc=False)
    assert res.returncode == 2 and "error: no nvcc" in res.stderr and "GPU accelerator" in res.stderr
    assert not (tmp_path / "calls.jsonl").exists() and not (tmp_path / "working" / "manifest.json").exists()


def test_the_script_uses_the_standard_library_only():
    import ast

    tree = ast.parse(SCRIPT.read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules


@pytest.mark.parametrize("pip,words", [('pip "x', "cannot be read as a command line"), ("", "TRM_KAGGLE_PIP is empty"),
                                       ("/nonexistent/pip", "could not start '/nonexistent/pip'")])
def test_a_pip_command_that_cannot_run_is_one_line(tmp_path, pip, words):
    res = run_script(tmp_path, pip=pip)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: ") and words in res.stderr, res.stderr


@pytest.mark.parametrize("working", ["", "  "])
def test_an_empty_working_folder_is_named_not_taken_for_the_current_one(tmp_path, working):
    """KAGGLE_WORKING='' made ./wheels in the current folder and said "expected one adam_atan2 wheel in wheels,
    found []", naming no variable."""
    res = run_script(tmp_path, working=working)
    assert res.returncode == 2 and "error: KAGGLE_WORKING is empty" in res.stderr, res.stderr
    assert not (tmp_path / "wheels").exists() and not (tmp_path / "calls.jsonl").exists()


def test_a_command_line_or_output_holding_control_characters_reaches_no_terminal_raw(tmp_path):
    """TRM_KAGGLE_PIP (or KAGGLE_WORKING) holding an escape sequence was echoed raw in the `$ ...` line before the
    command ran: it cleared the screen. The echo, pip's output and the error line are escaped."""
    res = run_script(tmp_path, pip="/nonexistent/pip\x1b[2J")
    assert "\x1b" not in res.stdout + res.stderr and "\\x1b[2J" in res.stdout, res.stdout + res.stderr
    assert res.returncode == 2


def test_the_output_folder_takes_nothing_of_the_users_and_writes_through_no_link(tmp_path):
    """The kernel removed a user's `import-check` folder in KAGGLE_WORKING, installed through one planted as a link
    (outside the folder), wrote manifest.json through a link, and a KAGGLE_WORKING that is a file was a
    traceback. It installs into a folder it makes new and removes alone, replaces the manifest whole, and refuses
    what it cannot use in one line."""
    working = tmp_path / "working"
    (working / "import-check").mkdir(parents=True)
    (working / "import-check" / "mine.txt").write_text("precious")
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    (working / "manifest.json").symlink_to(outside)
    res = run_script(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (working / "import-check" / "mine.txt").read_text() == "precious" and outside.read_text() == "kept"
    assert not (working / "manifest.json").is_symlink() and json.loads((working / "manifest.json").read_text())
    assert sorted(p.name for p in working.iterdir()) == ["import-check", "manifest.json", "wheels"]
    shutil.rmtree(working)
    working.write_text("a file")
    res = run_script(tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(f"error: KAGGLE_WORKING {working}: cannot hold"), res.stderr


def _unprivileged():
    """Root writes into read-only folders: the commands of a permission test run without those capabilities."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0:
        return []
    if setpriv is None:
        pytest.skip("root without setpriv: a read-only folder cannot be tried")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]


@pytest.mark.parametrize("case", ["manifest folder", "older wheel", "read-only with wheels"])
def test_an_output_folder_the_kernel_cannot_finish_in_is_refused_before_the_build(tmp_path, case, monkeypatch):
    """A manifest.json that is a folder, or a read-only KAGGLE_WORKING that already held `wheels/`, ended the kernel
    in a traceback (IsADirectoryError, PermissionError); a wheels folder holding an older wheel was refused only
    after the build (minutes of nvcc on Kaggle). Each is one `error:` line, status 2, before pip runs."""
    working = tmp_path / "working"
    (working / "wheels").mkdir(parents=True)
    said = {"manifest folder": "manifest.json is a folder",
            "older wheel": "already holds ['adam_atan2-0.0.2-cp311-cp311-linux_x86_64.whl']",
            "read-only with wheels": "cannot hold the kernel's output"}[case]
    if case == "manifest folder":
        (working / "manifest.json").mkdir()
    elif case == "older wheel":
        (working / "wheels" / "adam_atan2-0.0.2-cp311-cp311-linux_x86_64.whl").write_bytes(b"old")
    else:
        prefix = _unprivileged()
        working.chmod(0o555)
        real_run = subprocess.run
        monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: real_run([*prefix, *cmd], **kw))
    try:
        res = run_script(tmp_path)
    finally:
        working.chmod(0o755)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert said in res.stderr.strip().splitlines()[-1], res.stderr
    assert not (tmp_path / "calls.jsonl").exists()  # pip never ran
    assert not [p for p in working.iterdir() if p.name.startswith("import-check")]
