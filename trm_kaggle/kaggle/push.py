"""Publishing a built bundle: validate it, then `kaggle datasets create|version` and `kaggle kernels push`
(or print those commands when the `kaggle` CLI or credentials are missing): `push`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from trm_kaggle.kaggle.metadata import (
    DATA_DIR, KERNEL_META, RUN_STATE_DIR, TRAIN_KERNEL_DIR, WHEEL_KERNEL_DIR, train_kernel_metadata_problems, validate_bundle,
    verify_manifest, _raise,
)


def kaggle_credentials() -> str | None:
    """Where the kaggle CLI would find credentials, or None."""
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME/KAGGLE_KEY"
    dirs = [os.environ.get("KAGGLE_CONFIG_DIR"), Path.home() / ".kaggle",
            Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kaggle"]
    for d in dirs:
        if d and (Path(d) / "kaggle.json").is_file():
            return str(Path(d) / "kaggle.json")
    return None


def push_commands(out_dir: str | os.PathLike, version_message: str | None = None) -> list[list[str]]:
    out = Path(out_dir).absolute()
    cmds = []
    for part in ("wheels", "weights"):
        if version_message:
            cmds.append(["kaggle", "datasets", "version", "-p", str(out / part), "-m", version_message])
        else:
            cmds.append(["kaggle", "datasets", "create", "-p", str(out / part)])
    cmds.append(["kaggle", "kernels", "push", "-p", str(out / "kernel")])
    if (out / WHEEL_KERNEL_DIR).is_dir():  # runs on Kaggle when pushed; its output is the adam-atan2 wheel
        cmds.append(["kaggle", "kernels", "push", "-p", str(out / WHEEL_KERNEL_DIR)])
    return cmds


def _shell(cmd: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(c) for c in cmd)


def push(out_dir: str | os.PathLike, version_message: str | None = None, *,
         runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> int:
    """Validate (metadata, and every shipped file against its manifest's sha256), then run the kaggle
    commands. Without the CLI or credentials: print them and return 2, the status of every input or setup
    problem (one `error:` line on stderr)."""
    validate_bundle(out_dir)
    for part in ("wheels", "weights"):
        verify_manifest(Path(out_dir) / part)
    return _run_commands(push_commands(out_dir, version_message), runner)


def _run_commands(cmds: list[list[str]], runner: Callable[..., subprocess.CompletedProcess]) -> int:
    """Run the kaggle commands in order, or print them (status 2) without the CLI or credentials."""
    cli, creds = shutil.which("kaggle"), kaggle_credentials()
    if not cli or not creds:
        why = []
        if not cli:
            why.append("the `kaggle` command is not installed (pip install kaggle)")
        if not creds:
            why.append("no Kaggle credentials (~/.kaggle/kaggle.json, or KAGGLE_USERNAME and KAGGLE_KEY)")
        print("Run these commands to publish the bundle (datasets first; wait until they are processed before "
              "the kernel runs):")
        for c in cmds:
            print("  " + _shell(c))
        print(f"error: not pushed: {'; '.join(why)}", file=sys.stderr)
        return 2
    for c in cmds:
        print("$ " + _shell(c), flush=True)
        res = runner(c)
        if res.returncode != 0:
            print(f"error: `{_shell(c)}` failed with status {res.returncode}", file=sys.stderr)
            return res.returncode or 1
    return 0


def training_push_commands(out_dir: str | os.PathLike, version_message: str | None = None) -> list[list[str]]:
    """The data and wheels datasets that are there, then the training kernel (each push is a new session)."""
    out = Path(out_dir).absolute()
    cmds = []
    for part in (DATA_DIR, "wheels", RUN_STATE_DIR):
        if (out / part).is_dir():
            cmds.append(["kaggle", "datasets", "version", "-p", str(out / part), "-m", version_message]
                        if version_message else ["kaggle", "datasets", "create", "-p", str(out / part)])
    if (out / TRAIN_KERNEL_DIR).is_dir():
        cmds.append(["kaggle", "kernels", "push", "-p", str(out / TRAIN_KERNEL_DIR)])
    return cmds


def push_training(out_dir: str | os.PathLike, version_message: str | None = None, *,
                  runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> int:
    """`push` for training on Kaggle: check the data dataset against its manifest and the training kernel's
    metadata, then run (or print) the kaggle commands."""
    import json

    out = Path(out_dir)
    for part in (DATA_DIR, RUN_STATE_DIR):
        if (out / part).is_dir():
            verify_manifest(out / part)
    meta_path = out / TRAIN_KERNEL_DIR / KERNEL_META
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        _raise(meta_path, train_kernel_metadata_problems(meta, meta_path.parent, meta.get("dataset_sources") or []))
    return _run_commands(training_push_commands(out_dir, version_message), runner)
