"""Reading a run's metrics.jsonl (written by the training loop's MetricLog), also while the run writes it.

Each line is one JSON record: training records carry `loss` (and `elapsed_s`, seconds since the
process started training), evaluation records carry `eval_*` keys. A resumed run appends to the
same file, so steps between the state it resumed from and the interruption appear twice, and
`elapsed_s` starts again from zero. The reader keeps one record per step (the last attempt's),
and adds `wall_s`: wall-clock seconds of training up to that step, counted across resumptions
(the time lost to an interrupted attempt's redone steps is not counted).
"""

from __future__ import annotations

import bisect
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: str | Path) -> tuple[list[dict], list[dict]]:
    """(training records, evaluation records) of a run, one per step in step order, each with `wall_s`.

    A line that is not a JSON record (the half-written last line of a running run) is skipped.
    A run without metrics.jsonl yet has none."""
    path = Path(run_dir) / METRICS_FILE
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return [], []
    train: list[dict] = []
    evals: dict[int, dict] = {}
    offset, last_step, last_elapsed, skipped = 0.0, None, None, 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            skipped += 1
            continue
        step = record["step"]
        if "loss" in record:
            elapsed = float(record.get("elapsed_s", 0.0))
            if last_step is not None and (step <= last_step or elapsed < last_elapsed):
                # a new process, resumed before `step`: its records replace the old ones from there on
                train = [r for r in train if r["step"] < step]
                evals = {s: r for s, r in evals.items() if s < step}
                offset = train[-1]["wall_s"] if train else 0.0
            train.append({**record, "wall_s": offset + elapsed})
            last_step, last_elapsed = step, elapsed
        elif any(key.startswith("eval_") for key in record):
            evals[step] = dict(record)
    if skipped:
        log.info("%s: skipped %d unreadable line(s)", path, skipped)
    steps = [r["step"] for r in train]
    for step, record in evals.items():  # an evaluation follows the training record of its step
        i = bisect.bisect_right(steps, step) - 1
        record["wall_s"] = train[i]["wall_s"] if i >= 0 else 0.0
    return train, [evals[s] for s in sorted(evals)]
