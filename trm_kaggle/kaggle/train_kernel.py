"""Training on Kaggle: a built dataset as its own Kaggle dataset (`build_data`), and the training kernel
(`build_train_kernel`): notebooks/kaggle_train.ipynb with its parameters set, plus kernel-metadata.json.

Both datasets with folders (the data, and a run's state with `--continue-from`) are packed: an archive and a
manifest of every file inside it (`trm_kaggle.kaggle.packed`), which the kernel checks and unpacks; an upload
to Kaggle sends a folder's files, not its subfolders.

The kernel's sessions are run by `trm_kaggle.kaggle_training.run_session`; each new version of the kernel
attaches the previous version's output through `kernel_sources`, or, with `--continue-from USER/KERNEL`, as
a run-state dataset downloaded with `kaggle kernels output` (`fetch_run_state`; see docs/kaggle-training.md).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Sequence

from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text, scratch_folder
from trm_kaggle.errors import TRMError, UnreadableFile
from trm_kaggle.kaggle.kernel import read_notebook, set_parameters
from trm_kaggle.kaggle.metadata import (
    DATASET_META, KERNEL_META, TRAIN_MACHINE_SHAPE, BundleIds, client_error, data_id, dataset_metadata, id_problem,
    publishable_modes, run_state_id, train_kernel_id, train_kernel_metadata,
    train_kernel_metadata_problems, raise_problems, write_manifest,
)
from trm_kaggle.kaggle.packed import ARCHIVE_KEY, pack
from trm_kaggle.train import override_mapping, parse_override, warn_repeated
from trm_kaggle.wording import one_line

TRAIN_NOTEBOOK = Path("notebooks") / "kaggle_train.ipynb"


DATA_ARCHIVE = "data.tar"
RUN_STATE_ARCHIVE = "run-state.tar"


def _top_level_visible(rel: str) -> bool:
    """Not a hidden file or folder at the top (bookkeeping, editors' files)."""
    return not rel.startswith(".")


def _run_state_file(rel: str) -> bool:
    """What a run-state dataset carries of a session's output: not the old session's lock file (a later
    session's run folder must not start with it) nor the client's log of that session (`<kernel>.log` at the
    top, which `kaggle kernels output` adds), nor hidden files at the top."""
    from trm_kaggle.locks import LOCK_FILE

    parts = rel.split("/")
    return _top_level_visible(rel) and parts[-1] != LOCK_FILE and not (len(parts) == 1 and rel.endswith(".log"))


def build_data(out_dir: str | os.PathLike, dataset_dir: str | os.PathLike, *, ids: BundleIds,
               log: Callable[[str], None] = print) -> dict:
    """`out_dir`: the verified dataset packed as `data.tar`, `manifest.json` (sha256 and size of the archive and
    of every file in it) and `dataset-metadata.json` for `<user>/<prefix>-data`; replaced atomically, the source
    is only read."""
    from trm_kaggle.data import verify_dataset
    from trm_kaggle.evaluate import check_test_split

    src = Path(dataset_dir)
    summary = verify_dataset(src)  # DataError (a TRMError) naming the first problem
    check_test_split(src)  # an ARC test split the evaluation would refuse: refused before it is published
    if Path(out_dir).resolve() == src.resolve() or src.resolve() in Path(out_dir).resolve().parents:
        raise TRMError(f"--dataset {src}: the output {out_dir} lies inside it; choose another OUT_DIR")
    with atomic_directory(out_dir, kind="kaggle data dataset") as tmp:
        log(f"packing the dataset {src} ({summary['bytes'] / 1e6:.1f} MB) as {DATA_ARCHIVE}")
        linked: list[tuple[str, str]] = []
        entry = pack(src, tmp, DATA_ARCHIVE, keep=_top_level_visible, linked_in=lambda *link: linked.append(link))
        if linked:  # published with the dataset: never without a word (a link to /etc/passwd would be)
            log(f"packed {len(linked)} file(s) linked in from outside {src}, as the files they point to: "
                + ", ".join(f"{one_line(rel)} -> {one_line(target)}" for rel, target in linked[:3])
                + (", ..." if len(linked) > 3 else ""))
        atomic_write_json(tmp / DATASET_META, dataset_metadata(data_id(ids)), indent=2)
        # the folder's name, never the builder's local path (the manifest is published with the dataset)
        write_manifest(tmp, {"id": data_id(ids), "source": src.resolve().name, ARCHIVE_KEY: entry,
                             BATCH_MOST_KEY: _batch_most(src)})
    return {"id": data_id(ids), "source": str(src), "files": len(entry["files"]), "bytes": summary["bytes"],
            "examples": {k: v["examples"] for k, v in summary["splits"].items()}}


def _batch_most(dataset: Path) -> int:
    """The largest global batch one epoch of `dataset`'s train split fills (the sampler's own count)."""
    from trm_kaggle.data import PuzzleLoader

    return PuzzleLoader([dataset], "train", 1, prefetch=0).max_examples_per_epoch


def check_continue_from(kernel: str, runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> None:
    """TRMError unless `kernel` is a kernel id and the `kaggle` command (or a given runner) can fetch its output:
    done before anything is built, so that a refused bundle leaves nothing behind."""
    if (problem := id_problem(kernel)):
        raise TRMError(f"--continue-from: {problem}")
    if shutil.which("kaggle") is None and runner is subprocess.run:
        raise TRMError("--continue-from needs the `kaggle` command (pip install kaggle) and Kaggle credentials: "
                       f"it runs `kaggle kernels output {kernel} -p DIR`")


def fetch_run_state(out_dir: str | os.PathLike, kernel: str, *, ids: BundleIds,
                    runner: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                    log: Callable[[str], None] = print) -> dict:
    """`out_dir`: the latest output of `kernel` (`kaggle kernels output`) as dataset `<user>/<prefix>-run-state`,
    for a training kernel that resumes from a dataset instead of `kernel_sources`. The output must hold a train
    state that loads (the newest such state is what the next session resumes from); replaced atomically."""

    check_continue_from(kernel, runner)
    beside = Path(out_dir).absolute().parent
    beside.mkdir(parents=True, exist_ok=True)
    # the folder as the system reaches it: tempfile shortens `link/..` as text
    with atomic_directory(out_dir, kind="kaggle run-state dataset") as tmp, \
            scratch_folder(".download-", dir=os.path.realpath(beside)) as download:
        log(f"downloading the output of {kernel}")
        res = runner(["kaggle", "kernels", "output", kernel, "-p", str(download)], capture_output=True, text=True)
        if res.returncode != 0:
            raise TRMError(f"`kaggle kernels output {kernel}` failed with status {res.returncode}: "
                           f"{client_error(res.stderr or res.stdout)}")
        # only the states the archive carries (not in a hidden top folder): a newer one left out was said and
        # recorded as the step the next session resumes from, which then resumed from an older one
        carried = {p.parent for p in Path(download).rglob("state_step*.pt")
                   if _run_state_file(p.relative_to(download).as_posix())}
        try:
            steps = [_newest_step(f) for f in sorted(carried)]
        except UnreadableFile as e:  # as `trm-kaggle train` and the training session refuse it ("holds no train
            # state that loads" hid the cause): named as a path inside the output, not the download folder
            said = str(e).split("; no train state of ")[0].replace(f"{download}{os.sep}", "")
            raise TRMError(f"the output of {kernel} cannot be continued from: {said} (a training session refuses a "
                           "newest state it cannot read rather than resume from an older one): continue from an "
                           "output whose train states are readable files") from None
        if not any(s is not None for s in steps):
            raise TRMError(f"the output of {kernel} holds no train state that loads (state_step*.pt, outside "
                           "hidden folders): nothing to continue from")
        if None in steps:  # a folder of states none of which loads: the session refuses the whole output
            folder = sorted(carried)[steps.index(None)].relative_to(download)
            raise TRMError(f"the output of {kernel} cannot be continued from: its folder {one_line(folder)} holds "
                           "train states none of which loads (damaged or renamed copies), and a training session "
                           "refuses such an output rather than guess which run to resume: remove that folder from "
                           "the output (a new kernel version) or continue from another output")
        step = max(s for s in steps if s is not None)
        log(f"packing it as {RUN_STATE_ARCHIVE} (newest state: step {step})")
        try:  # a link out of the output refused: what it points to on this machine is no part of the run
            entry = pack(download, tmp, RUN_STATE_ARCHIVE, keep=_run_state_file)
        except TRMError as e:  # named inside the output, never by the download folder (gone when the line is read)
            said = str(e).replace(f"{download}{os.sep}", "").replace(str(download), "the output")
            raise TRMError(f"the output of {kernel} cannot be continued from: {said}") from None
        atomic_write_json(tmp / DATASET_META, dataset_metadata(run_state_id(ids)), indent=2)
        write_manifest(tmp, {"id": run_state_id(ids), "kernel": kernel, "step": step, ARCHIVE_KEY: entry})
    return {"id": run_state_id(ids), "kernel": kernel, "step": step, "files": len(entry["files"])}


def _newest_step(folder: Path) -> int | None:
    """The step of the newest state in `folder` that loads, or None (every state damaged). UnreadableFile when the
    newest cannot be read at all (a folder named like a state, a FIFO, no permission), which is not damage."""
    from trm_kaggle.train import checkpoint as ckpt

    try:
        return int(ckpt.load_newest_state(folder)[1]["step"])
    except UnreadableFile:
        raise
    except TRMError:
        return None


#: Settings the training session sets itself: the attached data, and a run folder inside the kernel's working
#: folder (only /kaggle/working outlives a session, so a run written elsewhere is lost with it).
KERNEL_OWNED_KEYS = ("data_paths", "checkpoint_path")
KAGGLE_INPUT = "/kaggle/input"  # where a session finds its attached datasets (both mount layouts)


def check_kernel_overrides(overrides: Sequence[str], input_root: str | os.PathLike = KAGGLE_INPUT) -> None:
    """TRMError when an override would replace (or reset) a setting the training kernel owns, or would load weights
    from outside `input_root`: the session's attached datasets (/kaggle/input on Kaggle; the folder KAGGLE_INPUT
    names where the notebook runs elsewhere)."""
    for text in overrides:
        key = str(text).partition("=")[0].strip().lstrip("+~").strip()  # as parse_override reads the key
        if key.split(".")[0] in KERNEL_OWNED_KEYS:
            raise TRMError(f"override {str(text)[:80]!r}: the training kernel sets {key.split('.')[0]} itself (the "
                           "attached data dataset, and a run inside its working folder, the only folder kept "
                           "between sessions); leave it out")
        value = str(text).partition("=")[2].strip()
        if key == "load_checkpoint" and value and parse_override(str(text))[1] is None:  # null: no weights, its default
            continue
        value = value.strip("'\"")
        if key == "load_checkpoint" and value and not _under(value, prefix := _inputs_prefix(input_root)):
            # a path of the building machine (the session would fail on Kaggle, after the push), or one that
            # leaves the inputs by `..` (`/kaggle/input/../../etc/passwd`)
            raise TRMError(f"override {str(text)[:80]!r}: a training session reads only its attached datasets; give "
                           f"load_checkpoint a path under {one_line(prefix)} (attach the weights as a dataset)")


def _inputs_prefix(input_root: str | os.PathLike) -> str:
    """What every path inside the inputs starts with: Kaggle's `/kaggle/input/` as a POSIX path whatever system
    builds the kernel; a session's own folder (the notebook run locally, KAGGLE_INPUT pointed elsewhere) as this
    system reaches it."""
    root = os.fspath(input_root)
    return KAGGLE_INPUT + "/" if root == KAGGLE_INPUT else os.path.abspath(root).rstrip(os.sep) + os.sep


def _under(value: str, prefix: str) -> bool:
    """`value` starts with `prefix` once `..` and `.` are resolved as text (`/kaggle/input/../../etc` does not)."""
    if prefix == KAGGLE_INPUT + "/":
        return posixpath.normpath(value).startswith(prefix)
    return os.path.abspath(value).startswith(prefix)


def check_training_settings(presets: Sequence[str], overrides: Sequence[str], warn: bool = True) -> None:
    """The kernel's settings must make a training config (the data path is the kernel's to find); `warn`: say a key
    set twice (False where the build already checked the same settings and said so)."""
    from trm_kaggle.train import load_train_config

    if not presets:
        raise TRMError("--train-kernel needs --preset NAME (trm-kaggle train --help lists the presets)")
    check_kernel_overrides(overrides)
    if warn:
        warn_repeated(overrides)  # the kernel's OVERRIDES keep the later, as `train` does: said at the build
    load_train_config(presets=list(presets), overrides=list(overrides))


#: The data manifest's record of the largest global batch one epoch of the packed train split fills, so that a
#: later build without --dataset checks its batch against the data it keeps.
BATCH_MOST_KEY = "train_batch_most"


def check_batch_fills(presets: Sequence[str], overrides: Sequence[str], dataset: str | os.PathLike | None = None,
                      packed: str | os.PathLike | None = None) -> None:
    """The kernel's global batch against the dataset it is built with (`dataset`), or the packed data dataset a
    build keeps (`packed`: its manifest's record): a batch one epoch cannot fill was found out by the Kaggle session
    ("status": "error"), after the push; now at build time, by train's own check."""
    from trm_kaggle.data import PuzzleLoader
    from trm_kaggle.kaggle.packed import packed_manifest
    from trm_kaggle.train import load_train_config

    cfg = load_train_config(presets=list(presets), overrides=list(overrides))
    if dataset is not None:
        PuzzleLoader([dataset], "train", cfg.global_batch_size, seed=cfg.seed, prefetch=0).check_batch_fills()
        return
    manifest = packed_manifest(Path(packed)) if packed is not None and Path(packed).is_dir() else None
    most = manifest.get(BATCH_MOST_KEY) if manifest else None
    if isinstance(most, int) and not isinstance(most, bool) and 0 <= most < cfg.global_batch_size:
        raise TRMError(f"global_batch_size {cfg.global_batch_size} is larger than the at most {most} examples one "
                       f"epoch of the data dataset {packed} (train) provides: no batch could ever be filled")


#: The training kernel's SAVE_MARGIN default (notebooks/kaggle_train.py; `kaggle_training.DEFAULT_MARGIN`)
DEFAULT_MARGIN = 600.0
MIN_TRAIN_S = 60.0  # the least a built session may train (600.5 s once built a kernel that trained 0.5 s)


def check_train_budget(time_budget: float | None) -> None:
    """TRMError unless a session's TIME_BUDGET (`--train-budget`; None: the notebook's 11.5 h) leaves time to
    train after the kernel's save margin (SAVE_MARGIN, kept for the final save, the export and the curve): a
    kernel that cannot train is refused at build time, not found out after a push."""
    import math

    least = DEFAULT_MARGIN + MIN_TRAIN_S
    if time_budget is not None and not (math.isfinite(time_budget) and time_budget >= least):
        raise TRMError(f"--train-budget {time_budget:g} s leaves no time to train: the training kernel keeps "
                       f"{DEFAULT_MARGIN:g} s of each session's budget for the final save, the export and the curve "
                       f"(SAVE_MARGIN), and a session trains at least {MIN_TRAIN_S:g} s; give at least {least:g} s")


def build_train_kernel(out_dir: str | os.PathLike, *, ids: BundleIds, presets: Sequence[str],
                       overrides: Sequence[str] = (), notebook: str | os.PathLike | None = None,
                       repo: Path | None = None, machine_shape: str = TRAIN_MACHINE_SHAPE,
                       previous: str | None = None, run_state: bool = False,
                       time_budget: float | None = None) -> dict:
    """`out_dir`: the training notebook with PRESET and OVERRIDES set, and its kernel-metadata.json."""
    from trm_kaggle.kaggle.metadata import REPO_ROOT

    check_training_settings(presets, overrides, warn=False)  # build_bundle checked them first, and said repeats
    check_train_budget(time_budget)
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
