"""`trm-kaggle compare`: a table and two plots from run directories and sweep directories.

    compare DIR... -> OUT/table.md, OUT/table.csv, OUT/curves.png, OUT/final.png

A DIR is a run directory (config.json, metrics.jsonl), a sweep directory (sweep.json lists its runs with
their state, pending and running ones included: a sweep may still be running), or a directory whose
subdirectories are runs or sweeps. Runs whose settings differ only in their seed form a group.

* table.csv: one row per run: final and best exact accuracy (on the test split when the run evaluated,
  and on its training batches), token accuracy, loss, steps, wall time, examples/s, parameters (with and
  without the puzzle-embedding table), peak training memory where the run logged it, then the settings
  that differ between runs. A text cell a spreadsheet would read as a formula (one starting with = + - @, a
  tab or a carriage return: a run folder named `=HYPERLINK(...)`) is written after a `'`; numbers as they are.
* table.md: the same per group (mean ± standard deviation over seeds) and per run.
* curves.png: the metric and the training loss against step and against wall time, one line per group
  (the mean over its seeds at each logged step, the band spanning their min to max).
* final.png: the metric's final value per group (bar: mean; dots: the runs).

The default metric is `eval_exact_accuracy` when any run evaluated (`eval_interval`), else the training
batches' `exact_accuracy`. Plots use matplotlib's Agg canvas directly, never a global backend.

A training interval in which no row halted has no accuracy (`HALTED_ROW_METRICS`): the table says "no data"
where a run has none, a curve breaks there instead of dropping to 0, and a group without any value is named
"no data" on the plots, never drawn as a zero.

One bad run costs that run alone: a run whose metrics.jsonl cannot be read at all (a FIFO, a folder, a missing
permission) is left out with one warning line saying why and a note in table.md, and the others are compared
(exit status 0); when no run can be read, compare fails in one line (exit status 2). One bad record costs that
record alone: one no run writes (`train.read_metrics`: a negative or non-finite time, a memory figure below 0 or
beyond a million GB, an accuracy outside 0 to 1, a number too large for a float) is never summed into the table;
one warning line names the file and the first such line.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pydantic

from trm_kaggle.atomic import atomic_directory, atomic_write_bytes, atomic_write_text, found_at
from trm_kaggle.config import TrainConfig, path_argument, sequence_argument, validation_line
from trm_kaggle.errors import TRMError, os_error_line, resource_line
from trm_kaggle.experiments.recorded import finite_number
from trm_kaggle.experiments.sweep import SWEEP_FILE, read_sweep
from trm_kaggle.jsonio import is_regular, read_json
from trm_kaggle.names import blank_path_problem
from trm_kaggle.outputs import input_kind, special_kind
from trm_kaggle.train import HALTED_ROW_METRICS, METRICS_FILE, NO_DATA, dotted, read_metrics
from trm_kaggle.wording import clipped, one_line, shown, type_name

log = logging.getLogger(__name__)

#: Settings that never change what a run learns: left out of "settings that differ" and of grouping.
BOOKKEEPING = {"seed", "checkpoint_path", "run_name", "project_name", "progress", "threads", "log_interval",
               "tensorboard", "wandb", "checkpoint_keep", "checkpoint_every_eval", "load_checkpoint"}

#: The state of a run no sweep records (a plain run folder): the tables' own placeholder, no text read from a file.
NO_STATE = "-"


@dataclass
class RunData:
    label: str  # unique among the compared runs
    path: Path
    source: str  # the sweep it belongs to ("" for a plain run)
    variant: str | None  # the sweep's variant name
    seed: int | None
    state: str  # the sweep's record, else NO_STATE
    settings: dict[str, Any]  # flattened config: {"arch.L_cycles": 6, ...}
    train: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    parameters: tuple[int, int] | None = None  # (weights, weights + puzzle table)
    group: str = ""


def _config(run_dir: Path, recorded: dict | None) -> dict:
    """The run's config.json (what train ran), else the sweep's record of its settings (a run not started yet,
    or a config.json that cannot be read: one run's bad file costs that run its settings columns alone)."""
    path = run_dir / "config.json"
    if recorded is not None:  # sweep.json is a file like any other: a record no sweep wrote (a string as `lr`, an
        try:                  # escape sequence as a value) is read as config.json is, never shown unchecked
            TrainConfig.model_validate(recorded)
        except pydantic.ValidationError as err:
            log.warning("%s: the sweep's record of its settings is not settings this trm_kaggle can read (%s)",
                        run_dir, validation_line(err))
            recorded = None
    instead = ("its settings are taken from the sweep's record" if recorded else
               "its settings columns are left empty")  # what the warning says is what the tables then show
    if path.exists():
        try:
            data = read_json(path, "run config")
        except TRMError as err:
            log.warning("%s", err)
            data = None
        if isinstance(data, dict):
            try:  # values no run writes (`lr: Infinity`, a seed that is an object) would reach the tables
                TrainConfig.model_validate(data)
                return data
            except pydantic.ValidationError as err:
                log.warning("%s: not settings this trm_kaggle can read (%s): %s", path, validation_line(err), instead)
                return recorded or {}
        if data is not None:  # valid JSON, but not settings: said, as an unreadable file is
            log.warning("%s: not a run config (a JSON object expected, found %s): %s", path, type(data).__name__,
                        instead)
    return recorded or {}


def parameter_counts(config: dict) -> tuple[int, int] | None:
    """(trainable weights, weights + puzzle-embedding table) of the run's model, built on the meta device
    from its architecture and its dataset's shape; None when the dataset is not readable here."""
    import torch

    from trm_kaggle.data import load_metadata
    from trm_kaggle.model import TinyRecursiveModel

    try:
        cfg = TrainConfig.model_validate(config)
        metas = [load_metadata(p, "train") for p in cfg.data_paths]
    except (TRMError, pydantic.ValidationError) as err:  # a run from elsewhere: its dataset may not be here
        log.info("no parameter count: %s", err)
        return None
    if not metas:
        return None
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = TinyRecursiveModel(cfg.arch, metas[0].seq_len, metas[0].vocab_size,
                                   sum(m.num_puzzle_identifiers for m in metas))
    count = model.parameter_count()
    return count.weights, count.total


def _is_run(path: Path) -> bool:
    """A training run's folder: its settings or its metrics; an export (config.json beside its weights) is none."""
    return ((path / "config.json").is_file() or (path / METRICS_FILE).is_file()) and input_kind(path) != "an export"


def _sweep_runs(path: Path) -> list[RunData]:
    doc = read_sweep(path)
    runs = []
    for rec in doc["runs"]:  # read_sweep checked every name: a plain directory name
        run_dir = path / rec["name"]
        state = str(rec.get("state", NO_STATE))
        if state != "pending" and not run_dir.is_dir():  # deleted, or a record no run of the sweep wrote: never
            log.warning("sweep %s: run %s is recorded %s but %s is no folder (deleted?): shown as missing",
                        path, rec["name"], state, run_dir)  # counted done over nothing
            state = "missing"
        elif state == "done" and not os.path.lexists(run_dir / METRICS_FILE):  # its columns empty, said so: a
            log.warning("sweep %s: run %s is recorded done but has no %s (deleted?): its columns are empty",
                        path, rec["name"], METRICS_FILE)  # pending run has none yet, a done one had one
        config = _config(run_dir, rec.get("settings"))
        runs.append(RunData(rec["name"], run_dir, path.name, rec.get("variant"), rec.get("seed"), state,
                            dotted(config)))
    return runs


def _plain_run(path: Path) -> RunData:
    config = _config(path, None)
    return RunData(path.name, path, "", None, config.get("seed"), NO_STATE, dotted(config))


def _not_a_folder(path: Path) -> str:
    """What stands at `path` instead of a directory, named as what it is (never "no such directory" for a FIFO)."""
    if not os.path.lexists(path):
        return "no such directory"
    try:
        os.stat(path)
    except OSError as e:  # a link loop, a dangling link
        return f"not a directory ({e.strerror.lower() if e.strerror else e})"
    return f"not a directory ({special_kind(path) or 'a file'})"


def _dirs_argument(dirs: object) -> list[str | os.PathLike]:
    """`dirs` as a list of paths: one given as a str is one folder (papermill's `-p DIRS runs/x`), not its letters;
    a TypeError naming the argument for anything else that is no list of paths (None or 5 was pathlib's)."""
    if isinstance(dirs, (str, os.PathLike)):
        return [dirs]
    dirs = sequence_argument("dirs", dirs, "folders' paths")
    for i, d in enumerate(dirs):
        path_argument(f"dirs[{i}]", d, "a folder's path")
    return dirs


#: `compare`'s output folder inside the one folder it reads, when --out is not given.
COMPARE_FOLDER = "compare"


def default_out(dirs: Sequence[str]) -> str:
    """`compare`'s --out when none is given: DIR/compare for one DIR, else `compare` here. One DIR that is no folder
    is named now, as the input it is (its compare/ below was blamed on the --out nobody typed); an empty one is left
    to the commands' check of empty names, which names it."""
    if len(dirs) != 1:
        return COMPARE_FOLDER
    if not blank_path_problem(dirs[0]) and not os.path.isdir(dirs[0]):
        raise TRMError(f"{dirs[0]}: {_not_a_folder(Path(dirs[0]))}; compare reads run, sweep or parent directories")
    return os.path.join(dirs[0], COMPARE_FOLDER)


def own_in_a_live_sweep(out: str | os.PathLike, held: Path) -> bool:
    """Whether `out`, a comparison's folder, is compare's own although `held`, a folder above it, is held by a live
    sweep: `out` is the sweep folder's `compare` (the default --out of `compare SWEEP`), a name no run of a sweep
    takes (each is <variant>_s<seed>) and no record of it. The comparison is built beside and renamed into place
    (`atomic_directory`), never among the runs' files, which stay the sweep's."""
    from trm_kaggle.locks import holder_kind

    path = Path(os.path.abspath(out))
    return (path.name == COMPARE_FOLDER and path.parent == Path(os.path.abspath(held))
            and is_regular(held / SWEEP_FILE, "sweep record") and holder_kind(held) == "sweep")


def find_runs(dirs: Sequence[str | Path]) -> list[RunData]:
    """Every run under `dirs` (run, sweep, or parent directories; one given as a str is one), with unique labels."""
    runs: list[RunData] = []
    dirs = _dirs_argument(dirs)
    if not dirs:
        raise TRMError(f"compare needs run, sweep or parent directories, got {clipped(dirs)}")
    for d in map(Path, dirs):
        if is_regular(d / SWEEP_FILE, "sweep record"):  # a FIFO there is one line, not a folder of runs
            runs += _sweep_runs(d)
        elif _is_run(d):
            runs.append(_plain_run(d))
        elif input_kind(d) == "an export":  # its config.json is a model's, not a run's settings and metrics
            raise TRMError(f"{d}: an export (config.json beside weights.safetensors), not a training run; compare "
                           "reads run, sweep or parent directories")
        elif d.is_dir():
            found = []
            for child in sorted(p for p in d.iterdir() if p.is_dir()):
                if (child / SWEEP_FILE).is_file():
                    found += _sweep_runs(child)
                elif _is_run(child):
                    found.append(_plain_run(child))
            if not found:
                raise TRMError(f"{d}: no runs here (a run directory has config.json or metrics.jsonl, a sweep "
                               f"directory {SWEEP_FILE})")
            runs += found
        else:
            raise TRMError(f"{d}: {_not_a_folder(d)}; compare reads run, sweep or parent directories")
    where: dict[str, Path] = {}
    for r in runs:  # counted twice, one run would be a second seed with no spread
        if (real := os.path.realpath(r.path)) in where:
            raise TRMError(f"the run {r.path} is named twice (also as {where[real]}): each run is counted once")
        where[real] = r.path
    for r in runs:  # folder names read from the disk: an escape sequence in one is shown, never sent to the terminal
        r.label, r.source = one_line(r.label), one_line(r.source) if r.source else r.source
    sources = {r.source for r in runs if r.source}
    if len(sources) > 1:  # runs of several sweeps: the sweep's name keeps their labels apart
        for r in runs:
            if r.source:
                r.label = f"{r.source}/{r.label}"
    seen: dict[str, int] = {}
    for r in runs:
        n = seen[r.label] = seen.get(r.label, 0) + 1
        if n > 1:
            r.label = f"{r.label} ({n})"
    return runs


def load_runs(dirs: Sequence[str | Path]) -> list[RunData]:
    """find_runs + each run's metrics, parameter counts and group (runs whose metrics cannot be read left out)."""
    return _read_runs(dirs)[0]


def _read_runs(dirs: Sequence[str | Path]) -> tuple[list[RunData], list[tuple[str, str]]]:
    """(the runs, [(label, why) of each run left out]). A run whose metrics.jsonl cannot be read at all (a FIFO,
    a folder, a missing permission) costs that run alone: it is left out with one warning line saying why (its
    bad lines alone cost nothing: `read_metrics` skips them, a record holding a number no run writes among
    them); TRMError when no run is left."""
    runs, left_out = [], []
    for r in find_runs(dirs):
        try:
            r.train, r.evals = read_metrics(r.path)
        except (TRMError, OSError) as err:
            why = os_error_line(err) if isinstance(err, OSError) else str(err)
            log.warning("run %s left out of the comparison: %s", r.label, why)
            left_out.append((r.label, why))
            continue
        runs.append(r)
    if not runs:
        more = f" (and {len(left_out) - 1} more runs)" if len(left_out) > 1 else ""
        raise TRMError(f"no run could be read: {left_out[0][0]}: {left_out[0][1]}{more}")
    counts: dict[str, tuple[int, int] | None] = {}
    for r in runs:
        key = json.dumps({k: v for k, v in r.settings.items() if k.startswith("arch.") or k == "data_paths"},
                         sort_keys=True, default=str)
        if key not in counts:
            counts[key] = parameter_counts(_unflatten(r.settings)) if r.settings else None
        r.parameters = counts[key]
    _assign_groups(runs)
    return runs, left_out


def _unflatten(flat: dict[str, Any]) -> dict:
    tree: dict = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def differing_settings(runs: Sequence[RunData]) -> list[str]:
    """The settings (dotted keys) whose values are not the same in every run, bookkeeping left out."""
    keys = sorted({k for r in runs for k in r.settings if k not in BOOKKEEPING})
    return [k for k in keys if len({json.dumps(r.settings.get(k), default=str) for r in runs}) > 1]


def _assign_groups(runs: Sequence[RunData]) -> None:
    """A group: the runs of one sweep variant, or plain runs whose settings differ only in bookkeeping (seeds)."""
    groups: dict[tuple[str, str], list[RunData]] = {}
    for r in runs:
        if r.variant is not None:
            key = r.variant
        else:
            key = json.dumps({k: v for k, v in r.settings.items() if k not in BOOKKEEPING}, sort_keys=True, default=str)
        groups.setdefault((r.source, key), []).append(r)
    several_sources = len({r.source for r in runs}) > 1
    differ = differing_settings(runs)
    for (source, key), members in groups.items():
        if members[0].variant is not None:
            label = f"{source}/{key}" if several_sources else key
        elif len(members) == 1:
            label = members[0].label
        else:
            label = ", ".join(f"{k}={members[0].settings[k]}" for k in differ if k in members[0].settings) \
                or members[0].label
        for r in members:
            r.group = one_line(label)  # settings read from files, shown as one line


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------

#: (key, heading, format) of the metric columns, in order.
COLUMNS = [
    ("steps", "steps", "int"),
    ("wall_s", "wall time", "time"),
    ("examples_per_s", "examples/s", ".1f"),
    ("parameters", "parameters", "int"),
    ("parameters_with_puzzle_table", "+ puzzle table", "int"),
    ("peak_memory_gb", "peak memory (GB)", ".2f"),
    ("loss", "final loss", ".4f"),
    ("eval_exact_accuracy", "final exact (test)", ".3f"),
    ("best_eval_exact_accuracy", "best exact (test)", ".3f"),
    ("eval_token_accuracy", "final token (test)", ".3f"),
    ("exact_accuracy", "final exact (train)", ".3f"),
    ("best_exact_accuracy", "best exact (train)", ".3f"),
    ("token_accuracy", "final token (train)", ".3f"),
]


def _best(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return max(values) if values else None


def summarise(run: RunData) -> dict[str, Any]:
    """The metric columns of one run (None where it has no value yet)."""
    last = run.train[-1] if run.train else {}
    out: dict[str, Any] = {key: None for key, _, _ in COLUMNS}
    if last:
        batch = run.settings.get("global_batch_size")
        out.update(steps=last["step"], wall_s=last["wall_s"], loss=last.get("loss"),
                   exact_accuracy=last.get("exact_accuracy"), token_accuracy=last.get("token_accuracy"),
                   best_exact_accuracy=_best(run.train, "exact_accuracy"))
        if batch and last["wall_s"] > 0:  # training examples per second of wall time, evaluations included
            out["examples_per_s"] = float(last["step"]) * batch / last["wall_s"]  # a float: inf, never an overflow
        # the training loop's per-interval peaks: CUDA's max_memory_allocated, else the process's RSS
        out["peak_memory_gb"] = _best(run.train, "cuda_max_allocated_gb") or _best(run.train, "peak_rss_gb")
    if run.evals:
        out.update(eval_exact_accuracy=run.evals[-1].get("eval_exact_accuracy"),
                   eval_token_accuracy=run.evals[-1].get("eval_token_accuracy"),
                   best_eval_exact_accuracy=_best(run.evals, "eval_exact_accuracy"))
    if run.parameters:
        out["parameters"], out["parameters_with_puzzle_table"] = run.parameters
    return out


#: The metric columns averaged over halted rows: a run with training records but no value shows NO_DATA there.
_HALTED_COLUMNS = {"exact_accuracy", "best_exact_accuracy", "token_accuracy"}


def _has_records(run: RunData, key: str) -> bool:
    """Whether a missing value of column `key` is "no data" (the run logged records for it) rather than "-"."""
    return bool(run.evals) if key.startswith(("eval_", "best_eval_")) else bool(run.train) and key in _HALTED_COLUMNS


def _fmt(value: Any, how: str, no_data: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NO_DATA if no_data else "-"
    if abs(value) >= 1e15:  # a diverged loss of 1e300, a huge step count: four digits, never hundreds of them
        return format(float(value), ".4g")
    if how == "int":
        return f"{int(round(value)):,}"
    if how == "time":
        if value < 60:
            return f"{value:.1f} s"
        s = int(round(value))
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    return format(value, how)


def _fmt_spread(values: list[float], how: str, no_data: bool = False) -> str:
    if not values:
        return NO_DATA if no_data else "-"
    if len(values) == 1 or how in ("int", "time"):
        return _fmt(statistics.mean(values), how)
    return f"{_fmt(statistics.mean(values), how)} ± {_fmt(statistics.stdev(values), how)}"


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


#: What a spreadsheet reads as the start of a formula (`=HYPERLINK(...)`, `+x-y`, `@SUM`), or a tab or carriage
#: return before one: a text cell of table.csv starting with one is written after a `'`, which shows it as text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    """A cell of table.csv: a text (a run's folder name, a group, a setting read from a file) that a spreadsheet
    would run as a formula, neutralised with a leading `'`; a number (-0.5) as it is."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value


def comparison_tables(runs: Sequence[RunData]) -> tuple[str, str]:
    """(Markdown, CSV) of the runs: per group and per run in Markdown, per run in CSV."""
    rows = [summarise(r) for r in runs]
    # drop what no run has; an accuracy no interval had data for stays, saying so
    columns = [c for c in COLUMNS if any(row[c[0]] is not None or _has_records(r, c[0]) for r, row in zip(runs, rows))]
    differ = differing_settings(runs)

    csv_out = io.StringIO()
    writer = csv.writer(csv_out, lineterminator="\n")
    writer.writerow([_csv_cell(k) for k in ["run", "group", "seed", "state"] + [k for k, _, _ in columns] + differ])
    for r, row in zip(runs, rows):
        settings = [json.dumps(r.settings.get(k), default=str) if isinstance(r.settings.get(k), (list, dict))
                    else one_line(r.settings[k]) if isinstance(r.settings.get(k), str)  # as in table.md
                    else r.settings.get(k) for k in differ]
        # a number that is not finite is no data, as table.md's "-": never "inf" or "nan" in a file others read
        cells = [_csv_cell(cell) for cell in [r.label, r.group, r.seed, r.state]
                 + ["" if isinstance(row[k], float) and not math.isfinite(row[k]) else row[k]
                    for k, _, _ in columns] + settings]
        if r.state == NO_STATE:  # the tables' own placeholder, written bare: `'-` showed a quote where no data is (a
            cells[3] = NO_STATE  # run folder named `-` is text read from the disk, and keeps its `'`)
        writer.writerow(cells)

    def setting(r: RunData, k: str) -> str:
        if k not in r.settings:  # a run whose settings could not be read: empty, as the warning said (None is a
            return ""            # value some settings take)
        v = r.settings[k]  # read from a file: a string setting (run_name, data_paths) may hold anything
        return one_line(json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v))

    groups: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(r.group, []).append(i)
    group_rows = []
    for name, idx in groups.items():
        states = [runs[i].state for i in idx]
        state = (", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states)) if states[0] != NO_STATE
                 else NO_STATE)
        cells = [_fmt_spread([rows[i][k] for i in idx if finite_number(rows[i][k])], how,  # NaN: no data, as per run
                             any(_has_records(runs[i], k) for i in idx)) for k, _, how in columns]
        group_rows.append([name, str(len(idx)), state] + cells + [setting(runs[idx[0]], k) for k in differ])
    run_rows = [[r.label, str(r.seed if r.seed is not None else "-"), r.state]
                + [_fmt(row[k], how, _has_records(r, k)) for k, _, how in columns] + [setting(r, k) for k in differ]
                for r, row in zip(runs, rows)]
    heads = [h for _, h, _ in columns]
    md = ("## By group (mean ± standard deviation over seeds)\n\n"
          + _markdown_table(["group", "runs", "state"] + heads + differ, group_rows)
          + "\n\n## By run\n\n" + _markdown_table(["run", "seed", "state"] + heads + differ, run_rows) + "\n")
    return md, csv_out.getvalue()


# ---------------------------------------------------------------------------
# The plots
# ---------------------------------------------------------------------------


def default_metric(runs: Sequence[RunData]) -> str:
    return "eval_exact_accuracy" if any(r.evals for r in runs) else "exact_accuracy"


def _series(run: RunData, metric: str, gaps: bool = False) -> list[tuple[int, float, float]]:
    """(step, wall_s, value) of `metric` in the run's evaluation or training records; with `gaps`, a training
    interval without a value for an average over halted rows is a NaN point (a curve breaks there)."""
    records = run.evals if metric.startswith("eval_") else run.train
    gaps = gaps and records is run.train and metric in HALTED_ROW_METRICS
    return [(r["step"], r["wall_s"], float(r[metric]) if finite_number(r.get(metric)) else math.nan) for r in records
            if finite_number(r.get(metric)) or (gaps and r.get(metric) is None)]


def group_curves(runs: Sequence[RunData], metric: str) -> dict[str, list[tuple[int, float, float, float, float]]]:
    """Per group: (step, mean wall_s, mean, min, max) of `metric` over the group's runs at each logged step; NaN
    where none of them has a value there (no row halted). A group with no value at all is left out."""
    by_group: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for r in runs:
        points = by_group.setdefault(r.group, {})
        for step, wall, value in _series(r, metric, gaps=True):
            points.setdefault(step, []).append((wall, value))

    def point(step: int, pts: list[tuple[float, float]]) -> tuple[int, float, float, float, float]:
        values = [v for _, v in pts if math.isfinite(v)]
        if not values:
            return step, statistics.mean(w for w, _ in pts), math.nan, math.nan, math.nan
        return step, statistics.mean(w for w, _ in pts), statistics.mean(values), min(values), max(values)

    curves = {g: [point(s, pts) for s, pts in sorted(points.items())] for g, points in by_group.items()}
    return {g: pts for g, pts in curves.items() if any(math.isfinite(p[2]) for p in pts)}


#: A legend of the curves: at most this many lines a column and this many columns (40 lines in one column stood
#: taller than the plot, 200 in 17 columns wider, and the layout gave up with a warning each time).
LEGEND_ROWS, LEGEND_COLUMNS = 12, 3


def _legend(ax) -> None:
    """The groups' lines of `ax` named in columns of LEGEND_ROWS; past what LEGEND_COLUMNS hold, the rest counted
    ("and 5 more": table.md names every group)."""
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    most = LEGEND_ROWS * LEGEND_COLUMNS
    if len(handles) > most:
        handles = [*handles[:most - 1], Line2D([], [], linestyle="none")]
        labels = [*labels[:most - 1], f"and {len(labels) - most + 1} more"]
    ax.legend(handles, labels, fontsize=8, loc="best", ncols=math.ceil(len(handles) / LEGEND_ROWS))


def _figure(width: float, height: float, rows: int, cols: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _png(fig) -> bytes:
    """The figure as a PNG of 128 colours: a third of the full-colour file's size, the same to the eye."""
    from PIL import Image  # a dependency of matplotlib

    buf = io.BytesIO()
    with warnings.catch_warnings():  # names too long for any layout (a group of 100 characters): drawn as they are;
        warnings.filterwarnings("ignore", "constrained_layout not applied", UserWarning)  # no console noise
        fig.savefig(buf, format="png", dpi=80)
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(colors=128,
                                                                           method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def plot_curves(runs: Sequence[RunData], metric: str) -> bytes:
    """PNG: `metric` (top) and the training loss (bottom) against step (left) and wall time (right)."""
    fig, axes = _figure(12, 7.5, 2, 2)
    longest = max((r.train[-1]["wall_s"] for r in runs if r.train), default=0.0)
    unit, per = ("minutes", 60.0) if longest > 180 else ("seconds", 1.0)
    groups = list(dict.fromkeys(r.group for r in runs))
    for row, (name, log_scale) in enumerate(((metric, False), ("loss", True))):
        curves = group_curves(runs, name)
        missing = [g for g in groups if g not in curves]
        for col, x_of in enumerate((lambda p: p[0], lambda p: p[1] / per)):
            ax = axes[row][col]
            for group, pts in curves.items():
                xs = [x_of(p) for p in pts]
                line, = ax.plot(xs, [p[2] for p in pts], label=group, linewidth=1.4,
                                marker="o" if len(pts) <= 30 else None, markersize=3)
                if any(p[3] != p[4] for p in pts if math.isfinite(p[2])):
                    ax.fill_between(xs, [p[3] for p in pts], [p[4] for p in pts], color=line.get_color(), alpha=0.18,
                                    linewidth=0)
            if missing:  # said, not drawn: a group without a value is no curve at 0
                ax.text(0.5, 0.5, f"{NO_DATA}: " + ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else ""),
                        transform=ax.transAxes, ha="center", va="center", fontsize=9, color="#555")
            ax.set_xlabel("step" if col == 0 else f"wall time ({unit})")
            ax.set_ylabel(name)
            if log_scale and curves:
                ax.set_yscale("log")
            elif "accuracy" in name:
                ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
    axes[0][0].set_title(metric if len(runs) == 1 else f"{metric} (line: mean over seeds, band: min to max)",
                         fontsize=10)
    axes[1][0].set_title("training loss", fontsize=10)
    for row, name in enumerate((metric, "loss")):  # each row's lines named: the loss lines as well as the metric's
        if any(group_curves(runs, name).values()):
            _legend(axes[row][1])
    return _png(fig)


def plot_final(runs: Sequence[RunData], metric: str) -> bytes:
    """PNG: the last value of `metric` per group (bar: mean over its runs; dots: each run)."""
    finals: dict[str, list[float]] = {r.group: [] for r in runs}  # a group without a value: named, no bar
    for r in runs:
        series = _series(r, metric)
        if series:
            finals[r.group].append(series[-1][2])
    fig, axes = _figure(max(5.0, 1.1 * len(finals) + 2), 4.2, 1, 1)
    ax = axes[0][0]
    names = list(finals)
    means = [statistics.mean(v) if v else math.nan for v in finals.values()]
    ax.bar(range(len(names)), means, color="#8fb3d9", edgecolor="#345")
    for i, values in enumerate(finals.values()):
        if not values:
            ax.annotate(NO_DATA, (i, 0), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=8,
                        color="#555")
            continue
        ax.scatter([i] * len(values), values, color="#222", s=14, zorder=3)
        ax.annotate(f"{means[i]:.3f}", (i, max(values)), textcoords="offset points", xytext=(0, 5), ha="center",
                    fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=20 if len(names) > 4 else 0, ha="right" if len(names) > 4
                  else "center", fontsize=8)
    ax.set_ylabel(f"final {metric}")
    if "accuracy" in metric:
        ax.set_ylim(0, 1.05)
    ax.set_title(f"final {metric} per group (bar: mean; dots: runs)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def write_comparison(dirs: Sequence[str | Path], out_dir: str | Path, metric: str | None = None) -> dict[str, Any]:
    """Write table.md, table.csv, curves.png and final.png into `out_dir`; returns their paths and the Markdown
    (and `left_out`: the runs that could not be read, each named in table.md too). A comparison another command
    wrote into `out_dir` while this one read the runs and drew the plots stands; this one ends with one line."""
    dirs = _dirs_argument(dirs)
    path_argument("out_dir", out_dir, "the output folder's path")
    if metric is not None and not isinstance(metric, str):  # 5 was 'no attribute strip'
        raise TypeError(f"metric: expected a metric's name (a str), or None, got {type_name(metric)}")
    if metric is not None and not metric.strip():  # an empty --metric (an unset shell variable) is no default
        raise TRMError("--metric is empty: name a logged metric, or leave --metric out for the default")
    for what, given in (("the output folder", out_dir), ("the runs", dirs)):  # '' was the current folder: the
        if problem := blank_path_problem(given):  # report replaced it (a notebook's OUT_DIR '' swapped papermill's
            raise TRMError(f"{what}: {problem}")  # working folder away)
    found = found_at(out_dir)  # before the work: what the comparison replaces
    runs, left_out = _read_runs(dirs)
    metric = metric or default_metric(runs)
    no_data = not any(_series(r, metric) for r in runs)
    if no_data and any(r.train for r in runs) and metric not in HALTED_ROW_METRICS:
        names = sorted({k for r in runs for rec in r.train[-1:] + r.evals[-1:] for k in rec
                        if isinstance(rec[k], (int, float))} - {"step", "wall_s"})
        raise TRMError(f"--metric {shown(metric)}: no run logged it; logged metrics: {', '.join(names)}")
    out = Path(out_dir)
    md, table_csv = comparison_tables(runs)
    done = sum(r.state == "done" for r in runs)
    header = (f"# Comparison of {len(runs)} runs"
              + (f" ({done} done)" if any(r.state != NO_STATE for r in runs) else "")
              + f"\n\nMetric of the plots: `{metric}`"
              + (f" ({NO_DATA} yet: no row halted in any logged interval)" if no_data and any(r.train for r in runs)
                 else "") + ".\n\n"
              + "".join(f"Left out: {label}: {why}\n\n" for label, why in left_out))
    paths: dict[str, Any] = {"markdown": out / "table.md", "csv": out / "table.csv", "markdown_text": header + md,
                             "metric": metric, "runs": runs, "left_out": left_out}
    try:
        import matplotlib  # noqa: F401
        plots = {"curves": plot_curves(runs, metric), "bars": plot_final(runs, metric)}
    except ImportError as e:  # not installed; or no memory left to load it (`ulimit -v`): said as which
        log.warning("plots skipped: %s", resource_line(e) or "they need matplotlib (pip install matplotlib)")
        plots = {}
    # everything made first, then the folder replaced as one: a full disk or a Ctrl-C midway once left the new
    # tables beside the old plots
    with atomic_directory(out, kind="comparison", found=found) as tmp:
        atomic_write_text(tmp / "table.md", header + md)
        atomic_write_text(tmp / "table.csv", table_csv)
        for key, name in (("curves", "curves.png"), ("bars", "final.png")):
            if key in plots:
                atomic_write_bytes(tmp / name, plots[key])
                paths[key] = out / name
    return paths
