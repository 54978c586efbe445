"""`trm-kaggle sweep`: a grid of training runs, one `trm-kaggle train` process each, under one directory.

    SWEEP_DIR/
      sweep.json            the grid, the base settings, and per run: variant, seed, settings, command,
                            state (pending/running/done/failed), error line, attempts, timings (atomic writes)
      .trm_kaggle.lock      held while a sweep process works here (the lock `train` takes too)
      <variant>_s<seed>/    a run directory: run_config.yaml (from the sweep), train.log, and train's
                            config.json, metrics.jsonl, state_step*.pt; its .trm_kaggle.lock is held by the
                            sweep from its start to its end and handed down to the run's train process, so
                            no other command trains in a run folder of a running sweep, started or not

A run's settings: the base (the command line's and the grid's presets, the `--config` file, the grid's
and the command line's overrides), then its variants' presets and overrides on top, then its seed and
directory. The sweep resolves and checks every run's settings before any starts, and each run's process
reads them from `<run>/run_config.yaml` (`trm-kaggle train --config`). Runs go one after another, or
`parallel` at a time: one GPU each (CUDA_VISIBLE_DEVICES) where the runs use CUDA, the cores split
between them on CPU.

Running the same command again skips done runs and starts the others: `train` resumes each from the
newest train state in its directory. A run whose settings changed is refused, unless only settings a
resumed run may change did (a larger `max_steps` re-opens a done run, which then continues). A failing
run is recorded with its error line and the sweep goes on. Ctrl-C (or SIGTERM) stops the running
children, marks them pending and leaves sweep.json consistent; a second Ctrl-C waits for that. A run's train.log
is appended to through `open_log`: a link, a hard link or a FIFO in its place is refused, never followed or waited on.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

import pydantic

from trm_kaggle.atomic import atomic_write_json, atomic_write_text, open_log
from trm_kaggle.config import (MAX_SEED, SAFE_NAME_PATTERN, SweepGrid, TrainConfig, path_argument, seconds_argument,
                               sequence_argument, texts_argument, validation_line, whole_argument)
from trm_kaggle.data import load_metadata
from trm_kaggle.errors import TRMError, describe
from trm_kaggle.hardware import usable_cores, visible_cuda_ids
from trm_kaggle.interrupts import FirstStopOnly, Terminated
from trm_kaggle.jsonio import is_regular, open_regular, read_json
from trm_kaggle.lifetime import PARENT_ENV
from trm_kaggle.locks import LOCK_FILE, HeldLock, directory_lock, hand_down, refuse_if_held
from trm_kaggle.outputs import (SWEEP_RECORD, Input, Output, check_kept, in_a_work_dir_problem, overlap_problem,
                                writable_problem)
from trm_kaggle.progress import tqdm
from trm_kaggle.train import (RESUMABLE_CHANGES, apply_overrides, dump_config, load_train_config, parse_override,
                              read_config_file, repeated_keys, training_io)
from trm_kaggle.wording import clipped, command_line, escaped_echo, one_line, path_word, type_name

log = logging.getLogger(__name__)

SWEEP_FORMAT = "trm_kaggle.sweep"
SWEEP_FILE = SWEEP_RECORD
LOG_FILE = "train.log"
RUN_CONFIG = "run_config.yaml"  # a run's resolved settings, written by the sweep, read by its train process

#: The study's grids (the TPU guide's e2 ablations and e3 scaling), to combine with a base recipe and data.
BUILTIN_GRIDS: dict[str, SweepGrid] = {
    "tn": SweepGrid(name="tn", description="recursion depth T (arch.H_cycles) x n (arch.L_cycles)",
                    axes=[["T2n2", "T2n6", "T3n4", "T3n6", "T4n6"]]),
    "ablations": SweepGrid(name="ablations", description="the base recipe, without EMA, with attention, with 8 "
                           "supervision steps", axes=[["baseline", "no-ema", "attention", "act-8"]]),
    "batch": SweepGrid(name="batch", description="global batch size 512, 1024, 2048",
                       axes=[["batch512", "batch1024", "batch2048"]]),
}


def describe_grids() -> str:
    """One line per built-in grid (for `--list-grids`)."""
    lines = ["Built-in grids (combine with a base: --preset RECIPE and data_paths=[...]):"]
    for name, grid in BUILTIN_GRIDS.items():
        variants = " | ".join(" x ".join(v.name for v in combo) for combo in itertools.product(*grid.axes))
        lines.append(f"  {name:<10} {grid.description}: {variants}")
    lines.append("A YAML file describes any other grid (docs/experiments.md; `SweepGrid` in trm_kaggle/config/experiments.py).")
    return "\n".join(lines)


def load_grid(spec: str) -> SweepGrid:
    """A built-in grid by name, or a grid from a YAML file (its name defaults to the file's stem)."""
    path_argument("spec", spec, "a built-in grid's name or a grid file's path")
    if spec in BUILTIN_GRIDS:
        return BUILTIN_GRIDS[spec].model_copy(deep=True)
    path = Path(spec)
    if not is_regular(path, "grid file"):
        raise TRMError(f"{spec}: neither a built-in grid ({', '.join(BUILTIN_GRIDS)}) nor a grid file")
    data = read_config_file(path)  # the one YAML reader; one line for an unreadable file or a non-mapping
    data.setdefault("name", path.stem)
    try:
        return SweepGrid.model_validate(data)
    except pydantic.ValidationError as err:
        raise TRMError(f"{path}: bad grid: {validation_line(err)}") from None


def with_seeds(grid: SweepGrid, seeds: Sequence[int]) -> SweepGrid:
    """The grid with its seeds axis replaced (validated: no repeats)."""
    grid_argument(grid)
    seeds = sequence_argument("seeds", seeds, "whole numbers")  # '10' was the seeds [1, 0]
    try:
        return SweepGrid.model_validate({**grid.model_dump(), "seeds": seeds})
    except pydantic.ValidationError as err:
        raise TRMError(f"--seeds: {validation_line(err)}") from None


def grid_argument(grid: object) -> SweepGrid:
    """`grid` when it is a SweepGrid; else a TypeError naming it (a dict was 'no attribute overrides')."""
    if not isinstance(grid, SweepGrid):
        raise TypeError(f"grid: expected a SweepGrid (load_grid reads one; SweepGrid.model_validate makes one of a "
                        f"dict), got {type_name(grid)}")
    return grid


def _setting_arguments(sweep_dir: object, presets: object, config_file: object,
                       overrides: object) -> tuple[list[str], list[str]]:
    """(presets, overrides) as lists, each argument of `plan_sweep` and `run_sweep` checked for its type (a str's
    characters were taken for presets and overrides, 'unknown preset s')."""
    path_argument("sweep_dir", sweep_dir, "the sweep folder's path")
    path_argument("config_file", config_file, "a config file's path", optional=True, blank_said_later=True)
    return (texts_argument("presets", presets, "a preset's name"),
            texts_argument("overrides", overrides, "a key=value override"))


# ---------------------------------------------------------------------------
# The plan: one resolved TrainConfig per (variant combination, seed)
# ---------------------------------------------------------------------------


@dataclass
class PlannedRun:
    name: str  # the run directory's name: <variant>_s<seed>
    variant: str  # the variants' names joined by "_" (runs of one variant differ only in their seed)
    seed: int
    presets: list[str]  # the variants' presets and overrides, applied on top of the base
    overrides: list[str]
    config: TrainConfig  # everything resolved; the run's process reads it from RUN_CONFIG

    def command(self, run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
        """`trm-kaggle train` on this run's resolved settings, as a module call of this interpreter. The settings'
        path is a `path_word`: a `--sweep-dir ./-sw` gave `--config -sw/...`, which train's argparse read as an
        option."""
        return [sys.executable, "-m", "trm_kaggle", "train", "--config", path_word(run_dir / RUN_CONFIG), *extra]

    def describe(self) -> str:
        return " ".join([*(f"--preset {p}" for p in self.presets), *self.overrides]) or "(the base)"


def plan_sweep(grid: SweepGrid, sweep_dir: str | os.PathLike, *, presets: Sequence[str] = (),
               config_file: str | None = None, overrides: Sequence[str] = ()) -> list[PlannedRun]:
    """Every run of the grid with its settings resolved and checked (a bad one stops the sweep before it starts).

    The base is the command line's and the grid's presets, the config file, the grid's and the command line's
    overrides; each variant's presets and overrides then apply on top of it, so a variant always changes what
    it names (`no-ema` turns EMA off even on a base with `ema=True`)."""
    grid_argument(grid)
    presets, overrides = _setting_arguments(sweep_dir, presets, config_file, overrides)
    for where, texts in (("the grid's and the command line's settings", [*grid.overrides, *overrides]),
                         *((f"variant {v.name}", v.overrides) for axis in grid.axes for v in axis)):
        _refuse_run_owned(grid.name, where, texts)
    for where, texts in (("the grid's overrides", grid.overrides),
                         *((f"variant {v.name}", v.overrides) for axis in grid.axes for v in axis)):
        if repeated := repeated_keys(texts):  # in a file: a slip, and only the later would be used (two axes alike)
            key, earlier, later = repeated[0]
            raise TRMError(f"sweep {grid.name}, {where}: {key} is set twice ({clipped(earlier)}, then "
                           f"{clipped(later)}): set it once")
    try:
        base = load_train_config(config_file, [*presets, *grid.presets], [*grid.overrides, *overrides])
    except TRMError as err:
        raise TRMError(f"sweep {grid.name}: the base settings: {err}") from None
    except pydantic.ValidationError as err:
        raise TRMError(f"sweep {grid.name}: the base settings: {validation_line(err)}") from None
    in_file = read_config_file(config_file) if config_file is not None else {}
    if owned := [k for k in _RUN_OWNED if in_file.get(k) not in (None, "")]:
        # refused when typed; a file (an upstream all_config.yaml holds all three) is said once and not used
        log.warning("sweep %s: %s sets %s, which the sweep sets for each run (%s): the file's are not used", grid.name,
                    config_file, ", ".join(owned), "; ".join(_RUN_OWNED[k] for k in owned))
        base = base.model_copy(update={"run_name": None})  # each run is named by its folder, as without the file
    plan = []
    made: dict[str, str] = {}  # variant name -> the axes' names it joins: `a`+`b_c` and `a_b`+`c` are both a_b_c
    for combo in itertools.product(*grid.axes):
        variant = "_".join(v.name for v in combo) or "baseline"
        if (joined := " + ".join(v.name for v in combo)) != made.setdefault(variant, joined):
            raise TRMError(f"sweep {grid.name}: the variants {made[variant]} and {joined} both name their runs "
                           f"{variant}_s<seed>: rename one (a variant's name without '_' never collides)")
        set_by: dict[str, str] = {}  # a key two axes both set: the later variant's value would win unsaid
        for v in combo:
            for key in dict.fromkeys(parse_override(o)[0] for o in v.overrides):
                if set_by.setdefault(key, v.name) != v.name:
                    raise TRMError(f"sweep {grid.name}: the variants {set_by[key]} and {v.name} (two axes) both set "
                                   f"{key}, and run {variant} would train with the second only: set each key on one "
                                   "axis")
        run_presets = [p for v in combo for p in v.presets]
        run_overrides = [o for v in combo for o in v.overrides]
        try:
            cfg = apply_overrides(base, run_overrides, presets=run_presets)
        except TRMError as err:
            raise TRMError(f"sweep {grid.name}, variant {variant}: {err}") from None
        except pydantic.ValidationError as err:
            raise TRMError(f"sweep {grid.name}, variant {variant}: {validation_line(err)}") from None
        for seed in grid.seeds:
            name = f"{variant}_s{seed}"
            if not is_safe_name(name):
                raise TRMError(f"sweep {grid.name}: run name {name[:60]}... is too long; give the variants short names")
            run_cfg = TrainConfig.model_validate({**cfg.model_dump(), "seed": seed,
                                                  "checkpoint_path": str(Path(sweep_dir) / name)})
            plan.append(PlannedRun(name, variant, seed, run_presets, run_overrides, run_cfg))
    return plan


#: What the sweep sets for each run itself: a setting of these in its overrides would be replaced without a word.
_RUN_OWNED = {"seed": "its seeds are the grid's `seeds` list, or --seeds",
              "checkpoint_path": "each run's folder is <sweep-dir>/<variant>_s<seed>",
              "run_name": "each run is named <variant>_s<seed>"}


def owned_override(overrides: Sequence[str], owned: Mapping[str, str]) -> tuple[str, str] | None:
    """The first of `overrides` that sets a key of `owned` (a setting the caller gives each run itself, which would
    replace the user's without a word), as (its text, its key); None when none does. The sweep's rule, and the
    recipes benchmark's (benchmarks/bench_recipes.py)."""
    for text in overrides:
        key = parse_override(text)[0]
        if key in owned:
            return text, key
    return None


def _refuse_run_owned(grid_name: str, where: str, overrides: Sequence[str]) -> None:
    """TRMError naming an override of a setting the sweep gives each run itself (`_RUN_OWNED`)."""
    if found := owned_override(overrides, _RUN_OWNED):
        text, key = found
        raise TRMError(f"sweep {grid_name}, {where}: {clipped(text)}: the sweep sets {key} for each run "
                       f"({_RUN_OWNED[key]}); leave it out")


def check_data(grid: SweepGrid, plan: Sequence[PlannedRun]) -> None:
    """Every run names data, every dataset it names has a readable training split, and no run folder lies
    inside a dataset or holds the checkpoint it loads (`training_io`, as `train` checks it): a sweep that
    would fail each of its runs the same way stops before the first one starts."""
    checked: set[str] = set()
    for run in plan:
        if not run.config.data_paths:
            raise TRMError(f"sweep {grid.name}, run {run.name}: no data: set data_paths=[DIR] on the sweep's command "
                           f"line (a dataset built with trm-kaggle build-*)")
        problem = overlap_problem(*training_io(run.config, run.config.checkpoint_path))
        if problem:
            raise TRMError(f"sweep {grid.name}, run {run.name}: {problem}")
        for path in run.config.data_paths:
            if path not in checked:
                checked.add(path)
                try:
                    load_metadata(path, "train")
                except TRMError as err:
                    raise TRMError(f"sweep {grid.name}, run {run.name}: data_paths: {err}") from None


def check_run_folders(grid: SweepGrid, plan: Sequence[PlannedRun], sweep_dir: Path) -> None:
    """Every run's folder can be written where it stands, and none is a symbolic link (to a folder or to nothing):
    written through, a run's states, log and lock landed where the link points, outside the sweep folder (another
    sweep's run trained past the steps its record says). A read-only one is named now, not when its turn comes
    after the runs before it trained."""
    names = tuple(run.name for run in plan)  # plain names (SAFE_NAME_PATTERN): each checked as one entry
    if problem := writable_problem(Output(sweep_dir, "sweep folder", "folder", names)):  # one linked to a folder
        raise TRMError(f"sweep {grid.name}: {problem}")
    for run in plan:  # one linked to nothing, a file in its place, a read-only one
        if problem := writable_problem(Output(sweep_dir / run.name, "run folder", "folder")):
            raise TRMError(f"sweep {grid.name}, run {run.name}: {problem}")


def repeated_variants(plan: Sequence[PlannedRun]) -> list[list[str]]:
    """Groups of variants whose runs have the same settings (a variant that changes nothing on this base)."""
    by_settings: dict[str, list[str]] = {}
    for run in plan:
        settings = run.config.model_dump(mode="json", exclude={"seed", "checkpoint_path", "run_name"})
        names = by_settings.setdefault(json.dumps(settings, sort_keys=True), [])
        if run.variant not in names:
            names.append(run.variant)
    return [names for names in by_settings.values() if len(names) > 1]


# ---------------------------------------------------------------------------
# sweep.json
# ---------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


_SWEEP_REMEDY = "fix the record or choose another --sweep-dir"  # the sweep command's way out of a damaged record


def read_sweep(sweep_dir: str | os.PathLike, remedy: str = "fix the record") -> dict | None:
    """The sweep.json of `sweep_dir` (checked: format and run names), or None when there is none.

    `remedy` ends the refusal of a damaged record: each command names only its own options there (`sweep` adds
    "or choose another --sweep-dir"; compare, which has no such option, says "fix the record")."""
    path = Path(sweep_dir) / SWEEP_FILE
    if not path.exists():
        return None
    doc = read_json(path, "sweep.json")
    if not isinstance(doc, dict) or doc.get("format") != SWEEP_FORMAT or not isinstance(doc.get("runs"), list):
        raise TRMError(f"{path}: not a trm-kaggle sweep file")
    for rec in doc["runs"]:
        # a name read from a file becomes a directory: only plain names
        if not isinstance(rec, dict) or not is_safe_name(rec.get("name")):
            raise TRMError(f"{path}: a run record without a plain directory name: {str(rec)[:120]}")
        if problem := _record_problem(rec):  # a value no sweep writes: never kept, nor written back
            raise TRMError(f"{path}: run {rec['name']}: {problem}; {remedy}")
    names = [rec["name"] for rec in doc["runs"]]
    if twice := next((n for k, n in enumerate(names) if n in names[:k]), None):  # a sweep writes one record a run
        raise TRMError(f"{path}: run {twice} is recorded twice; {remedy}")
    return doc


RUN_STATES = ("pending", "running", "done", "failed")


def _record_problem(rec: dict) -> str | None:
    """Why a run record holds a value no sweep writes (a hand edit, another program), or None."""
    if rec.get("state") not in RUN_STATES:
        return f"state {clipped(rec.get('state'))} is none of {', '.join(RUN_STATES)}"
    for key in ("attempts", "returncode", "pid", "seed"):
        value = rec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                                  (key != "returncode" and value < 0)):
            return f"{key} {clipped(value)} is no {'' if key == 'returncode' else 'non-negative '}whole number"
    seed, variant = rec.get("seed"), rec.get("variant")
    if isinstance(seed, int) and seed > MAX_SEED:
        return f"seed {clipped(seed)} is past the largest a grid holds ({MAX_SEED})"
    if (seed is not None or variant is not None) and rec["name"] != f"{variant}_s{seed}":
        # what compare groups and labels the run by, and what a rerun matches it with: its name says both
        return f"variant {clipped(variant)} and seed {clipped(seed)} do not make its name (<variant>_s<seed>)"
    seconds = rec.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not math.isfinite(seconds) or seconds < 0):
        return f"seconds {clipped(seconds)} is no finite number of seconds"
    return None


def is_safe_name(name: object) -> bool:
    """True for a plain directory name (SAFE_NAME_PATTERN: no separators, no leading dot)."""
    return isinstance(name, str) and re.fullmatch(SAFE_NAME_PATTERN, name) is not None


def _merge_plan(doc: dict | None, grid: SweepGrid, base: dict, plan: Sequence[PlannedRun], sweep_dir: Path) -> dict:
    """sweep.json's document with the plan's runs added or checked against their records."""
    doc = doc or {"format": SWEEP_FORMAT, "version": 1, "created": _now(), "runs": []}
    doc["grid"], doc["base"] = grid.model_dump(mode="json"), base
    records = {rec["name"]: rec for rec in doc["runs"]}
    beyond = []  # done runs that trained further than these settings ask: kept, and said ("2 of 2 done" alone hid it)
    for run in plan:
        rec = records.get(run.name)
        if rec is None:
            rec = {"name": run.name, "variant": run.variant, "seed": run.seed, "state": "pending", "error": None,
                   "attempts": 0, "started": None, "finished": None, "seconds": 0.0, "returncode": None}
            doc["runs"].append(rec)
            records[run.name] = rec
        else:
            rec.setdefault("attempts", 0)
            rec["seconds"] = float(rec.get("seconds") or 0.0)
            try:
                before = TrainConfig.model_validate(rec.get("settings") or {})
            except pydantic.ValidationError:
                raise TRMError(f"{sweep_dir / SWEEP_FILE}: run {run.name} has unreadable settings") from None
            changed = [k for k in TrainConfig.model_fields if getattr(before, k) != getattr(run.config, k)]
            fixed = [k for k in changed if k not in RESUMABLE_CHANGES]
            if fixed:
                raise TRMError(f"{sweep_dir}: run {run.name} was started with other settings ({', '.join(fixed)}); "
                               "run the sweep with its settings or choose another --sweep-dir")
            if rec["state"] == "running":
                _refuse_if_still_running(rec, sweep_dir)
                rec["state"], rec["error"] = "pending", "interrupted"
            # (the states' names, not train.list_states: that module brings torch to a dry run that needs none)
            if rec["state"] == "done" and not any((sweep_dir / run.name).glob("state_step*.pt")):  # deleted:
                # "done" would be reported over nothing, and compare would list a run without data
                log.warning("sweep %s: run %s is recorded done but %s holds no train state (deleted?): it is trained "
                            "again", grid.name, run.name, sweep_dir / run.name)
                rec["state"], rec["error"] = "pending", "its folder held no train state"
            if rec["state"] == "done":
                if not _trains_further(before, run.config):  # e.g. a lower max_steps, another log_interval: the
                    if _trains_further(run.config, before):  # finished run stays as it is, its record the settings
                        beyond.append(run.name)  # it ran with
                    continue
                rec["state"] = "pending"  # e.g. a larger max_steps: train continues from the run's last state
        rec.update(variant_presets=run.presets, variant_overrides=run.overrides,
                   settings=run.config.model_dump(mode="json"))
    if beyond:
        log.warning("sweep %s: %s trained further than asked (a lower max_steps or time_limit): kept as done, their "
                    "records keep the settings they ran with", grid.name,
                    f"run {beyond[0]}" if len(beyond) == 1 else f"{len(beyond)} runs ({', '.join(beyond[:3])}"
                    f"{', ...' if len(beyond) > 3 else ''})")
    return doc


def _trains_further(before: TrainConfig, now: TrainConfig) -> bool:
    """Whether a finished run given `now` instead of `before` has more to train: a limit raised or lifted
    (max_steps, time_limit), or other data. Any other resumable change would start a training that trains
    nothing."""
    def raised(old, new) -> bool:
        return old is not None and (new is None or new > old)

    return (raised(before.max_steps, now.max_steps) or raised(before.time_limit, now.time_limit)
            or before.data_paths != now.data_paths)


def _refuse_if_still_running(rec: dict, sweep_dir: Path) -> None:
    """A record left `running` by a sweep that was killed outright: its child may still be at work."""
    pid = rec.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return  # gone (or no /proc: nothing to check against)
    if "trm_kaggle" in cmdline and rec["name"] in cmdline:
        raise TRMError(f"{sweep_dir}: run {rec['name']} is still being trained by process {pid} of an earlier "
                       f"sweep; wait for it or stop it (kill {pid}) first")


def _holds_only_locks(sweep_dir: Path) -> bool:
    """Whether `sweep_dir` holds nothing but what a sweep writes before its first sweep.json: its lock file and
    run folders holding only theirs. A sweep whose first sweep.json could not be written (a full disk, `ulimit -f`)
    leaves just that, and the same command then continues there instead of refusing a folder it made itself."""
    for p in sweep_dir.iterdir():
        if p.name != LOCK_FILE and (p.is_symlink() or not p.is_dir() or any(q.name != LOCK_FILE for q in p.iterdir())):
            return False
    return True


def _locked(sweep_dir: Path):
    """One sweep process per directory (the package's directory lock, released when the process ends)."""
    return directory_lock(sweep_dir, "sweep")


def _room_for_open_files(runs: int) -> None:
    """The sweep holds every run's folder, one open lock file each: the soft limit of open files raised toward
    the hard one where a large grid needs it, else one line before anything is written."""
    try:
        import resource
    except ImportError:  # no such limit to raise here
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = runs + 256  # the runs' locks, and room for everything else the sweep opens
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise TRMError(f"the sweep holds each of its {runs} runs' folders (one open file each), and this process may "
                       f"open at most {hard} files: raise `ulimit -n` or split the grid")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


# ---------------------------------------------------------------------------
# Running the plan
# ---------------------------------------------------------------------------


def _uses_cuda(cfg: TrainConfig) -> bool:
    if cfg.device not in ("auto", "cuda"):
        return False
    import torch

    return torch.cuda.is_available()


def _visible_gpus() -> list[str]:
    import torch

    return visible_cuda_ids(torch.cuda.device_count())


def error_line(log_path: Path, returncode: int) -> str:
    """The line that says why a run failed: its `error:` line, else the last line of its log (a traceback's)."""
    try:
        with open_regular(log_path, "log") as f:  # a FIFO put in its place is not waited on
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except (OSError, TRMError):
        lines = []
    # only this attempt's lines: after the last header the sweep wrote
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("--- sweep attempt"):
            lines = lines[i + 1:]
            break
    status = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0 and
              -returncode in signal.Signals._value2member_map_ else f"exit status {returncode}")
    said = next((ln for ln in reversed(lines) if ln.startswith("error:")), lines[-1] if lines else "")
    return f"{status}: {said}"[:500] if said else status


@dataclass
class _Job:
    rec: dict
    proc: subprocess.Popen
    slot: int
    t0: float
    log: object


@dataclass
class SweepSummary:
    sweep_dir: Path
    total: int
    done: int
    failed: int
    skipped: int  # done before this command started
    seconds: float
    failures: list[tuple[str, str]] = field(default_factory=list)

    def describe(self) -> str:
        text = (f"sweep {one_line(self.sweep_dir)}: {self.done} of {self.total} runs done ({self.skipped} before this "
                f"command), {self.failed} failed, in {self.seconds:.0f} s")
        text += "".join(f"\n  FAILED {one_line(name)}: {one_line(err)}" for name, err in self.failures)
        return text + f"\ncompare them: {command_line('trm-kaggle', 'compare', self.sweep_dir)}"


#: Runs at once, at most: each is a training process with its own memory (a value past any machine's cores or
#: GPUs was taken once as a list of a billion slots).
MAX_PARALLEL = 1024


#: The longest wait between two looks at a sweep's running trainings (seconds).
MAX_POLL_S = 60.0


def sweep_io(sweep_dir: str | os.PathLike | None, config_file: str | os.PathLike | None = None,
             grid_file: str | os.PathLike | None = None, sweep_what: str = "--sweep-dir",
             config_what: str = "--config") -> tuple[list[Input], list[Output]]:
    """What a sweep reads (its grid and config files) and writes (the sweep folder, any entry of it), as the command
    and `run_sweep` both check them: a config file inside the sweep folder (a run's own run_config.yaml) was
    rewritten by that run. A sweep folder that is, or lies inside, a submit's work folder is refused here (TRMError,
    one line naming it as `sweep_what`), for both."""
    if sweep_dir and (problem := in_a_work_dir_problem(sweep_dir, sweep_what)):
        raise TRMError(problem)
    inputs = [Input(p, what) for p, what in ((grid_file, "grid file"), (config_file, config_what))
              if p and Path(p).is_file()]
    return inputs, [Output(sweep_dir, sweep_what, "folder")] if sweep_dir is not None else []


def run_sweep(grid: SweepGrid, sweep_dir: str | os.PathLike, *, presets: Sequence[str] = (),
              config_file: str | None = None, overrides: Sequence[str] = (), parallel: int = 1,
              progress: bool = True, dry_run: bool = False, poll_seconds: float = 0.5) -> SweepSummary:
    """Run (or continue) the grid's runs under `sweep_dir`; returns what became of them."""
    grid_argument(grid)  # every argument before the sweep folder is made (1.5 runs at once failed after it was)
    presets, overrides = _setting_arguments(sweep_dir, presets, config_file, overrides)
    try:  # 1.5 and True were taken, "2" a TypeError of a comparison
        parallel = whole_argument("parallel", parallel, 1, MAX_PARALLEL)
    except ValueError:
        raise TRMError(f"--parallel {clipped(parallel, 40)}: must be from 1 to {MAX_PARALLEL} (a whole number)") from None
    # how often the runs are looked at: -1 or NaN raised in time.sleep after a training had started, 1e6 waited on
    # a finished run for days
    if not (seconds_argument("poll_seconds", poll_seconds) and 0 < poll_seconds <= MAX_POLL_S):
        raise ValueError(f"poll_seconds={poll_seconds!r}: expected a number of seconds above 0, at most {MAX_POLL_S:g}")
    if problem := writable_problem(Output(sweep_dir, "sweep folder", "folder")):  # as `sweep` checks it, whoever
        raise TRMError(problem)  # calls (a sweep was made in /dev; a file on the path was a raw OSError)
    check_kept(*sweep_io(sweep_dir, config_file, sweep_what="sweep folder", config_what="config_file"))
    sweep_dir = Path(sweep_dir)
    plan = plan_sweep(grid, sweep_dir, presets=presets, config_file=config_file, overrides=overrides)
    base = {"presets": [*presets, *grid.presets], "config": config_file, "overrides": [*grid.overrides, *overrides]}
    for names in repeated_variants(plan):
        log.warning("variants %s give the same settings on this base: their runs repeat each other",
                    " and ".join(names))
    cuda = any(_uses_cuda(run.config) for run in plan)
    gpus = _visible_gpus() if cuda else []
    if cuda and parallel > len(gpus):
        raise TRMError(f"--parallel {parallel}: {len(gpus)} GPU(s) visible and each run takes one")
    threads = max(1, usable_cores() // parallel)
    # refused in a dry run too: its plan listed every run as new in a folder the real run then refused
    if sweep_dir.exists() and not (sweep_dir / SWEEP_FILE).exists() and not _holds_only_locks(sweep_dir):
        raise TRMError(f"{sweep_dir} exists, is not empty and holds no {SWEEP_FILE}; choose another --sweep-dir")
    if dry_run:
        return _print_plan(grid, plan, sweep_dir, base)
    check_run_folders(grid, plan, sweep_dir)
    check_data(grid, plan)
    for run in plan:  # a run folder another command works in: refused before anything is made
        refuse_if_held(sweep_dir / run.name)
    for run in plan:  # a log in the way (a link, a FIFO, a hard link): one line before any run, as at its start
        if os.path.lexists(log_path := sweep_dir / run.name / LOG_FILE):
            os.close(open_log(log_path))
    _room_for_open_files(len(plan))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    with _locked(sweep_dir), contextlib.ExitStack() as runs_held:
        doc = _merge_plan(read_sweep(sweep_dir, _SWEEP_REMEDY), grid, base, plan, sweep_dir)
        # every run's folder, held from now to the end (each run's train process is handed its own)
        held = {run.name: runs_held.enter_context(directory_lock(sweep_dir / run.name, "sweep")) for run in plan}
        path = sweep_dir / SWEEP_FILE

        def save() -> None:
            doc["updated"] = _now()
            atomic_write_json(path, doc, indent=1)

        save()
        by_name = {rec["name"]: rec for rec in doc["runs"]}
        todo = [(run, by_name[run.name]) for run in plan if by_name[run.name]["state"] != "done"]
        skipped = len(plan) - len(todo)
        failures: list[tuple[str, str]] = []
        running: list[_Job] = []
        free = list(range(min(parallel, max(1, len(todo)))))  # a slot per run at most: more would idle
        bar = tqdm(total=len(plan), initial=skipped, disable=not progress, unit="run", desc=f"sweep {grid.name}",
                   dynamic_ncols=True)
        # a run's error holds its log's last line and the grid's text: one escaped line each
        say = escaped_echo(bar.write if progress else (lambda text: print(text, file=sys.stderr, flush=True)))

        def start(run: PlannedRun, rec: dict, slot: int) -> None:
            job = _launch(run, rec, slot, sweep_dir, gpus, threads, held[run.name])
            if job is not None:
                running.append(job)
                return
            free.append(slot)
            failures.append((rec["name"], rec["error"]))
            say(f"FAILED  {rec['name']}: {rec['error']}")
            bar.update()

        stops = FirstStopOnly()  # a later signal waits for the records
        try:
            while todo or running:
                while todo and free:
                    start(*todo.pop(0), free.pop(0))
                    save()
                time.sleep(poll_seconds)
                for job in list(running):
                    rc = job.proc.poll()
                    if rc is None:
                        continue
                    running.remove(job)
                    free.append(job.slot)
                    line = _finish(job, rc, sweep_dir)
                    if job.rec["state"] == "failed":
                        failures.append((job.rec["name"], job.rec["error"]))
                    say(line)
                    bar.update()
                    save()
                bar.set_postfix_str(", ".join(j.rec["name"] for j in running), refresh=False)
        except BaseException as err:  # Ctrl-C, SIGTERM, or anything else: no child outlives the sweep
            stops.hold()  # a second Ctrl-C waits for the records: none is left saying "running"
            _put_back(running)
            save()
            if isinstance(err, Terminated):  # said as SIGTERM (status 143) or SIGHUP (129)
                raise Terminated(err.signum) from None
            if isinstance(err, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            raise
        finally:
            stops.give_back()
            bar.close()
        done = sum(by_name[run.name]["state"] == "done" for run in plan)
        return SweepSummary(sweep_dir, len(plan), done, len(failures), skipped, time.perf_counter() - t_start,
                            failures)


def _print_plan(grid: SweepGrid, plan: Sequence[PlannedRun], sweep_dir: Path, base: dict) -> SweepSummary:
    """--dry-run: the base and each run's state and settings, printed; nothing is started or written. The records
    are read as the sweep would take them (`_merge_plan`: a run started with other settings refused, a finished
    one with more to train pending), in memory."""
    doc = read_sweep(sweep_dir, _SWEEP_REMEDY) if sweep_dir.is_dir() else None
    known = {rec["name"] for rec in (doc or {}).get("runs", [])}
    merged = _merge_plan(doc, grid, base, plan, sweep_dir) if doc is not None else {"runs": []}
    states = {rec["name"]: rec["state"] for rec in merged["runs"] if rec["name"] in known}
    print(one_line(f"base: {_describe_base(base)}"))  # a grid file's settings: no raw control characters
    for run in plan:
        print(one_line(f"{run.name:<40} {states.get(run.name, 'new'):<8} {run.describe()}"))
    done = sum(s == "done" for s in states.values())  # done before it, and so done: "0 of 2 done (1 before)" was not
    return SweepSummary(sweep_dir, len(plan), done, 0, done, 0.0)


def _launch(run: PlannedRun, rec: dict, slot: int, sweep_dir: Path, gpus: Sequence[str], threads: int,
            lock: HeldLock) -> _Job | None:
    """Start `run`'s training process in its folder (GPU `gpus[slot]`, or `threads` CPU threads), its log
    appended to and its record updated; None when it cannot start (the record says why)."""
    env = dict(os.environ)
    env[PARENT_ENV] = str(os.getpid())  # in a session of its own: it stops itself when the sweep is gone (kill -9)
    extra = ["progress=False"]
    if _uses_cuda(run.config):
        env["CUDA_VISIBLE_DEVICES"] = gpus[slot]
    elif run.config.threads is None:
        extra.append(f"threads={threads}")
        env["OMP_NUM_THREADS"] = str(threads)
    run_dir = sweep_dir / run.name
    cmd = run.command(run_dir, extra)
    atomic_write_text(run_dir / RUN_CONFIG, dump_config(run.config))
    try:  # never a link followed nor a FIFO waited on: something put there since the sweep's check fails this run
        logf = os.fdopen(open_log(run_dir / LOG_FILE), "ab")
    except (OSError, TRMError) as err:
        rec.update(state="failed", error=f"cannot open its log: {describe(err)}", finished=_now())
        return None
    rec["attempts"] += 1
    logf.write(f"--- sweep attempt {rec['attempts']} {_now()}: {shlex.join(cmd)}\n".encode())
    logf.flush()
    rec.update(started=_now(), finished=None, returncode=None, command=cmd,
               gpu=env.get("CUDA_VISIBLE_DEVICES") if _uses_cuda(run.config) else None)
    try:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                pass_fds=hand_down(lock, env),  # its folder's lock, shared
                                start_new_session=True)  # Ctrl-C reaches the sweep only; it stops children
    except OSError as err:
        logf.close()
        rec.update(state="failed", error=f"cannot start {cmd[0]}: {err.strerror or err}", finished=_now())
        return None
    rec.update(state="running", error=None, pid=proc.pid)
    return _Job(rec, proc, slot, time.perf_counter(), logf)


def _finish(job: _Job, returncode: int, sweep_dir: Path) -> str:
    """Record how `job` ended (done or failed, its seconds); the line that says so."""
    job.log.close()
    rec = job.rec
    rec.pop("pid", None)
    rec.update(returncode=returncode, finished=_now(), seconds=round(rec["seconds"] + time.perf_counter() - job.t0, 3))
    if returncode == 0:
        rec.update(state="done", error=None)
        attempts = rec.get("attempts") or 1  # its seconds add up every attempt's, this command's and earlier ones
        over = f" over {attempts} attempts" if attempts > 1 else ""
        return f"done    {rec['name']} ({rec['seconds']:.0f} s{over})"
    rec.update(state="failed", error=error_line(sweep_dir / rec["name"] / LOG_FILE, returncode))
    return f"FAILED  {rec['name']}: {rec['error']} (log: {sweep_dir / rec['name'] / LOG_FILE})"


def _put_back(running: Sequence[_Job]) -> None:
    """An interrupted sweep: its running jobs stopped (no child outlives the sweep) and pending again."""
    _stop(running)
    for job in running:
        job.log.close()
        job.rec.pop("pid", None)
        job.rec.update(state="pending", error="interrupted", finished=_now(),
                       seconds=round(job.rec["seconds"] + time.perf_counter() - job.t0, 3))


def _describe_base(base: dict) -> str:
    words = [*(f"--preset {p}" for p in base["presets"]), *([f"--config {base['config']}"] if base["config"] else []),
             *base["overrides"]]
    return " ".join(words) or "(defaults)"


def _stop(jobs: Sequence[_Job], grace_seconds: float = 30.0) -> None:
    """SIGINT to every child's process group (train stops like after Ctrl-C), SIGKILL after the grace period."""
    for job in jobs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_seconds
    for job in jobs:
        try:
            job.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
