"""The kernels: the submission notebook, its parameters cell pointed at the bundle's datasets, and
kernel-metadata.json (`build_kernel`); the optional adam-atan2 wheel kernel (`build_wheel_kernel`).
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Callable

from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import is_regular, read_json
from trm_kaggle.wording import clipped, one_line
from trm_kaggle.kaggle import adam_atan2_wheel
from trm_kaggle.kaggle.metadata import (
    COMPETITION, DEFAULT_MACHINE_SHAPE, DEFAULT_PREFIX, KERNEL_META, BundleIds, kernel_metadata,
    notebook_kaggle_block, publishable_modes, wheel_kernel_metadata,
)

DEFAULT_NOTEBOOK = Path("notebooks") / "kaggle_submission.ipynb"

#: Names of the notebook's papermill `parameters` cell that the sandbox sets.
PARAMETER_NAMES = ("KAGGLE_INPUT", "KAGGLE_WORKING", "TIME_BUDGET", "FINETUNE_STEPS", "NUM_AUG", "MAX_TASKS",
                   "WORKERS", "DEVICE", "WHEELS_DIR", "WEIGHTS_DIR")
WHEEL_SCRIPT = "build_adam_atan2_wheel.py"
#: The package's fallback-first entry a submission kernel calls (`from trm_kaggle.solve import solve`, its face).
SOLVE_MODULE, SOLVE_NAME = "trm_kaggle.solve", "solve"


def read_notebook(path: Path) -> dict:
    """The notebook JSON at `path`, or TRMError saying why it is not one."""
    if not is_regular(path, "notebook"):
        if os.path.isdir(path):  # was said "does not exist yet"
            raise TRMError(f"notebook {path} is a folder; a notebook file (.ipynb) is expected: pass one with "
                           "--notebook")
        raise TRMError(f"notebook {path} does not exist yet (it is written separately: "
                       f"{DEFAULT_NOTEBOOK}); pass another one with --notebook")
    nb = read_json(path, "notebook")
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise TRMError(f"{path}: not a Jupyter notebook (no 'cells' list)")
    return nb


def read_kernel_notebook(path: Path) -> dict:
    """`read_notebook`, refused in one line unless it is a submission kernel this package can run
    (`kernel_notebook_problem`): checked before a bundle does any work."""
    nb = read_notebook(path)
    if problem := kernel_notebook_problem(nb):
        raise TRMError(f"{path}: not a submission kernel this package can run: {problem} (start from "
                       f"{DEFAULT_NOTEBOOK})")
    return nb


def kernel_notebook_problem(nb: dict) -> str | None:
    """Why a notebook is not a submission kernel the bundle can ship and run (None when it is one): a Python
    notebook whose code cell tagged `parameters` sets every name the bundle and the sandbox set
    (PARAMETER_NAMES), and which calls the package's `solve` (it writes a valid submission before anything
    can fail, then the model's answers)."""
    if nb.get("nbformat") != 4:  # shipped as it was, Kaggle (and papermill) refused it after the push
        return f"its nbformat is {clipped(nb.get('nbformat'), 20)}, not 4 (the notebook format Jupyter writes)"
    if problem := _format_problem(nb):
        return problem
    kernelspec = (nb.get("metadata") or {}).get("kernelspec") or {}
    language = kernelspec.get("language") if isinstance(kernelspec, dict) else None
    if language not in (None, "python"):
        return f"its kernel language is {str(language)[:40]!r}, not python"
    cell = parameters_cell(nb)
    if cell is None:
        return "no code cell is tagged 'parameters'"
    missing = _unset_parameters(_cell_source(cell))
    if missing:
        return f"its parameters cell does not set {', '.join(missing)}"
    if not _calls_solve(nb):
        return f"no code cell calls {SOLVE_NAME}() imported from {SOLVE_MODULE}"
    return None


def _format_problem(nb: dict) -> str | None:
    """What nbformat's schema finds wrong in the notebook (a `tags` that is a string, not a list), in one line, or
    None; nothing where nbformat is not installed (a bundle built without the notebooks extra)."""
    try:
        import nbformat
    except ImportError:
        return None
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        where = "/".join(map(str, getattr(e, "absolute_path", []) or [])) or "the notebook"
        return f"{where}: {one_line(str(e.message) if hasattr(e, 'message') else str(e).splitlines()[0])[:200]}"
    except Exception as e:  # noqa: BLE001 - a schema nbformat lacks (another minor version): said as it is
        return f"nbformat cannot check it ({type(e).__name__}: {one_line(e)[:120]})"
    return None


def _calls_solve(nb: dict) -> bool:
    """Whether the notebook's code imports the package's `solve` and calls it (in any cells)."""
    imported, called = set(), set()
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = re.sub(r"^(\s*)[!%].*$", r"\1pass", _cell_source(cell), flags=re.M)  # shell and magic lines
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == SOLVE_MODULE:
                imported |= {a.asname or a.name for a in node.names if a.name == SOLVE_NAME}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called.add(node.func.id)
    return bool(imported & called)


def _unset_parameters(src: str) -> list[str]:
    """The names of PARAMETER_NAMES a parameters cell's source does not set."""
    return [n for n in PARAMETER_NAMES if not re.search(rf"^\s*{n}\s*[:=]", src, re.M)]


def _cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def parameters_cell(nb: dict) -> dict | None:
    for cell in nb["cells"]:
        tags = (cell.get("metadata") or {}).get("tags")
        if cell.get("cell_type") == "code" and isinstance(tags, list) and "parameters" in tags:  # a str: a substring
            return cell
    return None


def set_parameters(nb: dict, values: dict[str, object]) -> dict:
    """The notebook with `NAME = ...` lines of its parameters cell replaced by `values` (Python literals)."""
    cell = parameters_cell(nb)
    if cell is None:
        raise TRMError("the notebook has no cell tagged 'parameters'")
    src = _cell_source(cell)
    for name, value in values.items():
        pattern = re.compile(rf"^{name} = .*?(  # .*)?$", re.M)
        if not pattern.search(src):
            raise TRMError(f"the notebook's parameters cell does not set {name}")
        src = pattern.sub(lambda m, v=value, n=name: f"{n} = {v!r}{m.group(1) or ''}", src, count=1)
    cell["source"] = src.splitlines(keepends=True)
    return nb


def adapt_notebook(nb: dict, ids: BundleIds, competition: str | None = None) -> tuple[dict, list[str]]:
    """Point the parameters cell at this bundle's slugs (when --slug-prefix is not the default) and, where it has
    a COMPETITION parameter, at the competition the kernel attaches; warnings."""
    warnings = []
    cell = parameters_cell(nb)
    if cell is None:
        return nb, ["the notebook has no cell tagged 'parameters': papermill (--execute) adds one at the top"]
    src = _cell_source(cell)
    default = BundleIds(ids.user, DEFAULT_PREFIX)
    for old, new in ((default.wheels_slug, ids.wheels_slug), (default.weights_slug, ids.weights_slug)):
        src = src.replace(old, new)
    cell["source"] = src.splitlines(keepends=True)
    if competition and re.search(r"^COMPETITION = ", src, re.M):  # the kernel prefers its competition's file
        set_parameters(nb, {"COMPETITION": competition})
        src = _cell_source(cell)
    missing = _unset_parameters(src)
    if missing:
        warnings.append(f"the parameters cell does not set {', '.join(missing)}")
    for slug in (ids.wheels_slug, ids.weights_slug):
        if slug not in src:
            warnings.append(f"the parameters cell does not mention the dataset slug {slug!r}: check that the "
                            f"kernel finds /kaggle/input/{slug}")
    return nb, warnings


def build_kernel(out_dir: str | os.PathLike, notebook: str | os.PathLike, *, ids: BundleIds,
                 enable_gpu: bool = True, competition: str = COMPETITION, log: Callable[[str], None] = print,
                 machine_shape: str = DEFAULT_MACHINE_SHAPE, docker_image: str | None = None) -> dict:
    """The submission kernel: the notebook (its parameters pointed at this bundle's datasets, Kaggle's own
    `metadata.kaggle` block for uploads through the web UI) and kernel-metadata.json, whose `machine_shape` asks
    for the accelerator (none on a CPU kernel)."""
    notebook = Path(notebook)
    meta = kernel_metadata(ids, notebook.name, enable_gpu=enable_gpu, competition=competition,
                           machine_shape=machine_shape, docker_image=docker_image)  # checked before any write
    nb, warnings = adapt_notebook(read_kernel_notebook(notebook), ids, competition)
    nb.setdefault("metadata", {})["kaggle"] = notebook_kaggle_block(meta.get("machine_shape"),
                                                                    meta["dataset_sources"])
    for w in warnings:
        log(f"warning: {notebook}: {w}")
    with atomic_directory(out_dir, kind="kaggle kernel") as tmp:
        atomic_write_text(tmp / notebook.name, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        atomic_write_json(tmp / KERNEL_META, meta, indent=2)
        publishable_modes(tmp)
    return {"id": ids.kernel_id, "code_file": notebook.name, "notebook": str(notebook), "warnings": warnings,
            "competition": competition, "enable_gpu": enable_gpu, "machine_shape": meta.get("machine_shape"),
            "docker_image": docker_image}


def build_wheel_kernel(out_dir: str | os.PathLike, *, ids: BundleIds, machine_shape: str = DEFAULT_MACHINE_SHAPE,
                       docker_image: str | None = None) -> dict:
    """The adam-atan2 wheel kernel: `adam_atan2_wheel.py` as a script kernel with its metadata (on the
    submission kernel's accelerator and image: the wheel must match the torch and CUDA it runs with)."""
    meta = wheel_kernel_metadata(ids, WHEEL_SCRIPT, machine_shape=machine_shape, docker_image=docker_image)
    with atomic_directory(out_dir, kind="kaggle adam-atan2 wheel kernel") as tmp:
        atomic_write_text(tmp / WHEEL_SCRIPT, Path(adam_atan2_wheel.__file__).read_text(encoding="utf-8"))
        atomic_write_json(tmp / KERNEL_META, meta, indent=2)
        publishable_modes(tmp)
    return {"id": ids.wheel_kernel_id, "code_file": WHEEL_SCRIPT, "machine_shape": meta.get("machine_shape")}
