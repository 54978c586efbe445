"""Reading a run's metrics.jsonl (written by the training loop's MetricLog), also while the run writes it.

Each line is one JSON record: training records carry `loss` (and `elapsed_s`, seconds since the
process started training), evaluation records carry `eval_*` keys. The averages over the rows that halted
in the interval (`HALTED_ROW_METRICS`: accuracies, ACT steps, the loss terms) are left out of a record whose
interval had none (`halted_examples` 0): no data, never a 0. The reader drops the zeros older versions
wrote there. A resumed run first drops the
records past the step it resumes from (`drop_metrics_after`; a start with no state to resume from, after a
process killed before its first state, drops them all), then appends; its `elapsed_s` starts
again from zero. The reader adds `wall_s`: wall-clock seconds of training up to each step, counted
across resumptions (the time an interrupted process spent on steps that were trained again is not
counted), and keeps one record per step (the last process's) also in a file written before
resumptions dropped records, or by another program.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
from pathlib import Path

from trm_kaggle.atomic import atomic_write_text, check_log
from trm_kaggle.jsonio import read_json_lines

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"

#: Averages over the rows that halted in a log interval: a record of an interval in which no row halted (early
#: in training, or with halt_max_steps above the interval's steps) has no value for them, and leaves them out.
HALTED_ROW_METRICS = ("lm_loss", "q_halt_loss", "token_accuracy", "exact_accuracy", "q_halt_accuracy", "act_steps")
#: How a metric without a value is shown.
NO_DATA = "no data"


def shown(value: float | None, spec: str = ".3f") -> str:
    """A metric for people: formatted, or NO_DATA where it has no value (None, or NaN or inf: a skipped step's
    loss, a hand-edited record, never shown as a number)."""
    return NO_DATA if value is None or not math.isfinite(value) else format(value, spec)


def _records(path: Path) -> list[tuple[str, object]]:
    """(line, parsed record or None when the line is not JSON: a line cut off by a kill, bytes that are not
    UTF-8) of each non-empty line."""
    return [(text, value) for _, text, value in read_json_lines(path, METRICS_FILE)]


def drop_metrics_after(path: Path, step: int, interval_open: bool = False) -> None:
    """On resume at `step`: keep the records of steps <= step, atomically. The steps after it are
    trained again, so metrics.jsonl holds each step once. With `interval_open` (the state keeps the sums of a log
    interval it stopped inside) the training record of `step` itself goes too: the resumed run's next record
    averages those steps with the rest of the interval, as an unbroken run's does. A line cut off by a kill is
    dropped too. Anything but a regular file in its place (a FIFO the appends would wait on, a link they would
    follow) is refused here, before training starts."""
    if not os.path.lexists(path):
        return
    check_log(path)
    records = _records(path)
    kept = [line for line, r in records if isinstance(r, dict) and isinstance(r.get("step"), int) and (
        r["step"] < step or r["step"] == step and not (interval_open and "loss" in r))]
    if len(kept) < len(records):
        atomic_write_text(path, "".join(line + "\n" for line in kept))
        log.info("metrics.jsonl: dropped %d records after step %d (those steps run again)",
                    len(records) - len(kept), step)


def _new_process(last: tuple, step: int, elapsed: float, start: object) -> bool:
    """Whether a training record comes from another process than the record before it."""
    last_step, last_elapsed, last_start = last
    if isinstance(start, int) and isinstance(last_start, int):
        return start != last_start
    return step <= last_step or elapsed < last_elapsed  # older files: the step or the clock went back


def _follows(last: tuple, step: int, start: object) -> bool:
    """Whether a training record can follow `last` in a run's log. A process logs steps after the one it began at.
    Records that name their process's start are written by versions that cut the file back to the resumed step
    before appending (`drop_metrics_after`): after one of them the steps only increase, and each names its start.
    Only older files (no start) hold steps that go back, to be read as resumptions."""
    last_step, _, last_start = last
    if isinstance(start, int) and step <= start:
        return False
    return not isinstance(last_start, int) or (isinstance(start, int) and step > last_step)


#: The most a record's time (elapsed_s: ten years of one process) and memory (a `*_gb` figure: a million GB) can
#: be. Beyond them, below 0 or not finite, a record was edited or damaged: a negative elapsed_s was summed into the
#: wall time and examples/s of `compare`, and a peak memory of 1e308 printed in 309 digits.
MAX_ELAPSED_S = 3.2e8
MAX_MEMORY_GB = 1e6


def _too_large(value: object) -> bool:
    """A whole number too large for a float (10**400 in a JSON file): every sum, format or plot of it raised
    OverflowError."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _not_written_by_a_run(record: object) -> str | None:
    """What in a record no training logs, or None: an object with a whole step >= 0 whose values are all numbers
    (or null; a loss that is text or a list was a traceback of `compare`, and `true` a loss of 1.0 no run had),
    none too large for a float, a time (elapsed_s) from 0 to MAX_ELAPSED_S, a memory figure from 0 to
    MAX_MEMORY_GB, an accuracy from 0 to 1. (A non-finite loss can be logged: XLA's runs check it per interval;
    readers show it as no data.)"""
    if not isinstance(record, dict):
        return "not a JSON object"
    if type(record.get("step")) is not int or record["step"] < 0:
        return f"step {_number(record.get('step'))} is no whole number from 0"
    for key, value in record.items():
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{key} {_number(value)} is no number"
        if _too_large(value):
            return f"{key} is a number too large for a float"
        bound = (MAX_ELAPSED_S if key == "elapsed_s" else MAX_MEMORY_GB if key.endswith("_gb")
                 else 1.0 if key.endswith("accuracy") else None)
        if bound is not None and not (math.isfinite(value) and 0 <= value <= bound):
            return f"{key} {_number(value)} is not a value from 0 to {bound:g}"
    return None


def _number(value: object) -> str:
    """A value read from a file, shown short: 1e+308, never its 309 digits; text clipped."""
    from trm_kaggle.wording import clipped

    if isinstance(value, (int, float)) and not isinstance(value, bool) and not _too_large(value):
        return format(value, ".6g")
    return clipped(value, 20)


def read_metrics(run_dir: str | Path) -> tuple[list[dict], list[dict]]:
    """(training records, evaluation records) of a run, one per step in step order, each with `wall_s`.

    A last line that is not a JSON record (the half-written line of a running run) is skipped quietly; a record no
    run writes (`_not_written_by_a_run`: a step below 0, a value that is no number or one no run can have; a
    training step that does not follow the one before it in its process; a line that is no JSON record with lines
    after it) with one warning naming the first such line and what is wrong in it. A run without metrics.jsonl
    yet has none."""
    path = Path(run_dir) / METRICS_FILE
    if not os.path.lexists(path):  # a FIFO or a folder in its place is named by the reader, not taken for none
        return [], []
    train: list[dict] = []
    evals: dict[int, dict] = {}
    offset, last, cut, foreign, first = 0.0, None, 0, 0, None
    lines = read_json_lines(path, METRICS_FILE)
    for n, _, record in lines:
        if record is None:  # the last line: cut off by a kill, or being written; one with lines after it is
            if n == lines[-1][0]:  # no write under way, and is said as a record no run writes
                cut += 1
            else:
                foreign += 1
                first = first or (n, "not a JSON record")
            continue
        why = _not_written_by_a_run(record)
        if why is None and "loss" in record and record.get("elapsed_s", 0.0) is None:
            why = "elapsed_s is null"  # a run writes a number here: null (allowed elsewhere) ended compare in float()
        if why is None and "loss" in record and last is not None \
                and not _follows(last, record["step"], record.get("start_step")):
            # appended by hand or another program: taken as a resumption, it once dropped the run's later records
            why = f"step {record['step']} does not follow the one before it"
        if why is not None:
            foreign += 1
            first = first or (n, why)
            continue
        step = record["step"]
        if record.get("halted_examples") == 0:  # older versions wrote 0.0 for the averages over no rows
            record = {k: v for k, v in record.items() if k not in HALTED_ROW_METRICS}
        if "loss" in record:
            elapsed = float(record.get("elapsed_s", 0.0))
            start = record.get("start_step")  # the step its process began at (files of older versions lack it)
            if last is not None and _new_process(last, step, elapsed, start):
                # resumed at `start` (else somewhere before `step`): its records replace the old ones from there on
                resumed_at = start if isinstance(start, int) else step - 1
                train = [r for r in train if r["step"] <= resumed_at]
                evals = {s: r for s, r in evals.items() if s <= resumed_at}
                offset = train[-1]["wall_s"] if train else 0.0
            train.append({**record, "wall_s": offset + elapsed})
            last = (step, elapsed, start)
        elif any(key.startswith("eval_") for key in record):
            evals[step] = dict(record)
    if cut:
        log.info("%s: skipped %d line(s) that are no JSON record (cut off, or being written)", path, cut)
    if foreign:
        log.warning("%s: skipped %d record(s) no run writes (first: line %d: %s)", path, foreign, *first)
    steps = [r["step"] for r in train]
    for step, record in evals.items():  # an evaluation follows the training record of its step
        i = bisect.bisect_right(steps, step) - 1
        record["wall_s"] = train[i]["wall_s"] if i >= 0 else 0.0
    return train, [evals[s] for s in sorted(evals)]
