"""Training on Kaggle: a built dataset as its own Kaggle dataset (`build_data`), and the training kernel
(`build_train_kernel`): notebooks/kaggle_train.ipynb with its parameters set, plus kernel-metadata.json.

The kernel's sessions are run by `trm_kaggle.kaggle_training.run_session`; each new version of the kernel
attaches the previous version's output through `kernel_sources`, or, with `--continue-from USER/KERNEL`, as
a run-state dataset downloaded with `kaggle kernels output` (`fetch_run_state`; see docs/kaggle-training.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Sequence

from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle.kernel import _cell_source, parameters_cell, read_notebook
from trm_kaggle.kaggle.metadata import (
    DATASET_META, KERNEL_META, MANIFEST, TRAIN_MACHINE_SHAPE, BundleIds, data_id, dataset_metadata, id_problem,
    publishable_modes, run_state_id, tail_lines, train_kernel_id, train_kernel_metadata,
    train_kernel_metadata_problems, raise_problems, write_manifest,
)
from trm_kaggle.train.overrides import override_mapping

TRAIN_NOTEBOOK = Path("notebooks") / "kaggle_train.ipynb"


def build_data(out_dir: str | os.PathLike, dataset_dir: str | os.PathLike, *, ids: BundleIds,
               log: Callable[[str], None] = print) -> dict:
    """`out_dir`: a verified copy of the dataset, `manifest.json` (sha256 and size of every file) and
    `dataset-metadata.json` for `<user>/<prefix>-data`; replaced atomically, the source is only read."""
    from trm_kaggle.data.verify import verify_dataset

    src = Path(dataset_dir)
    summary = verify_dataset(src)  # DataError (a TRMError) naming the first problem
    if Path(out_dir).resolve() == src.resolve() or src.resolve() in Path(out_dir).resolve().parents:
        raise TRMError(f"--dataset {src}: the output {out_dir} lies inside it; choose another OUT_DIR")
    with atomic_directory(out_dir, kind="kaggle data dataset") as tmp:
        log(f"copying the dataset {src} ({summary['bytes'] / 1e6:.1f} MB)")
        for p in sorted(src.iterdir()):
            if p.name in (DATASET_META, MANIFEST) or p.name.startswith("."):
                continue
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, tmp / p.name)
        atomic_write_json(tmp / DATASET_META, dataset_metadata(data_id(ids)), indent=2)
        manifest = write_manifest(tmp, {"id": data_id(ids), "source": str(src)})
    return {"id": data_id(ids), "source": str(src), "files": len(manifest["files"]), "bytes": summary["bytes"],
            "examples": {k: v["examples"] for k, v in summary["splits"].items()}}


def fetch_run_state(out_dir: str | os.PathLike, kernel: str, *, ids: BundleIds,
                    runner: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                    log: Callable[[str], None] = print) -> dict:
    """`out_dir`: the latest output of `kernel` (`kaggle kernels output`) as dataset `<user>/<prefix>-run-state`,
    for a training kernel that resumes from a dataset instead of `kernel_sources`. The output must hold a train
    state that loads (the newest such state is what the next session resumes from); replaced atomically."""

    if (problem := id_problem(kernel)):
        raise TRMError(f"--continue-from: {problem}")
    if shutil.which("kaggle") is None and runner is subprocess.run:
        raise TRMError("--continue-from needs the `kaggle` command (pip install kaggle) and Kaggle credentials: "
                       f"it runs `kaggle kernels output {kernel} -p DIR`")
    with atomic_directory(out_dir, kind="kaggle run-state dataset") as tmp:
        log(f"downloading the output of {kernel}")
        res = runner(["kaggle", "kernels", "output", kernel, "-p", str(tmp)], capture_output=True, text=True)
        if res.returncode != 0:
            raise TRMError(f"`kaggle kernels output {kernel}` failed with status {res.returncode}: "
                           f"{tail_lines(res.stderr or res.stdout, 3)}")
        steps = [_newest_step(f) for f in sorted({p.parent for p in tmp.rglob("state_step*.pt")})]
        if not any(s is not None for s in steps):
            raise TRMError(f"the output of {kernel} holds no train state that loads (state_step*.pt): nothing to "
                           "continue from")
        step = max(s for s in steps if s is not None)
        atomic_write_json(tmp / DATASET_META, dataset_metadata(run_state_id(ids)), indent=2)
        manifest = write_manifest(tmp, {"id": run_state_id(ids), "kernel": kernel, "step": step})
    return {"id": run_state_id(ids), "kernel": kernel, "step": step, "files": len(manifest["files"])}


def _newest_step(folder: Path) -> int | None:
    """The step of the newest state in `folder` that loads, or None."""
    from trm_kaggle.train import checkpoint as ckpt

    try:
        return int(ckpt.load_newest_state(folder)[1]["step"])
    except TRMError:
        return None


def check_training_settings(presets: Sequence[str], overrides: Sequence[str]) -> None:
    """The kernel's settings must make a training config (the data path is the kernel's to find)."""
    from trm_kaggle.train.settings import load_train_config

    if not presets:
        raise TRMError("--train-kernel needs --preset NAME (trm-kaggle train --help lists the presets)")
    load_train_config(presets=list(presets), overrides=list(overrides))


def set_parameters(nb: dict, values: dict[str, object]) -> dict:
    """The notebook with `NAME = ...` lines of its parameters cell replaced by `values` (Python literals)."""
    cell = parameters_cell(nb)
    if cell is None:
        raise TRMError("the training notebook has no cell tagged 'parameters'")
    src = _cell_source(cell)
    for name, value in values.items():
        pattern = re.compile(rf"^{name} = .*?(  # .*)?$", re.M)
        if not pattern.search(src):
            raise TRMError(f"the training notebook's parameters cell does not set {name}")
        src = pattern.sub(lambda m, v=value, n=name: f"{n} = {v!r}{m.group(1) or ''}", src, count=1)
    cell["source"] = src.splitlines(keepends=True)
    return nb


def build_train_kernel(out_dir: str | os.PathLike, *, ids: BundleIds, presets: Sequence[str],
                       overrides: Sequence[str] = (), notebook: str | os.PathLike | None = None,
                       repo: Path | None = None, machine_shape: str = TRAIN_MACHINE_SHAPE,
                       previous: str | None = None, run_state: bool = False,
                       time_budget: float | None = None) -> dict:
    """`out_dir`: the training notebook with PRESET and OVERRIDES set, and its kernel-metadata.json."""
    from trm_kaggle.kaggle.metadata import REPO_ROOT

    check_training_settings(presets, overrides)
    if previous and (problem := id_problem(previous)):
        raise TRMError(f"the previous kernel: {problem}")
    notebook = Path(notebook) if notebook else Path(repo or REPO_ROOT) / TRAIN_NOTEBOOK
    # a mapping, as the notebook's default: a parameters line with no `=` inside, which papermill can read
    values: dict[str, object] = {"PRESET": " ".join(presets), "OVERRIDES": override_mapping(overrides)}
    if time_budget is not None:
        values["TIME_BUDGET"] = float(time_budget)
    nb = set_parameters(read_notebook(notebook), values)
    meta = train_kernel_metadata(ids, notebook.name, machine_shape=machine_shape, previous=previous,
                                 run_state=run_state)
    with atomic_directory(out_dir, kind="kaggle training kernel") as tmp:
        atomic_write_text(tmp / notebook.name, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        atomic_write_json(tmp / KERNEL_META, meta, indent=2)
        raise_problems(tmp / KERNEL_META, train_kernel_metadata_problems(meta, tmp, meta["dataset_sources"]))
        publishable_modes(tmp)
    return {"id": train_kernel_id(ids), "code_file": notebook.name, "machine_shape": machine_shape,
            "presets": list(presets), "overrides": list(overrides), "kernel_sources": meta["kernel_sources"],
            "dataset_sources": meta["dataset_sources"]}
