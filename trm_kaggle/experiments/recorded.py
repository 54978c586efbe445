"""Metrics a notebook records for `trm-kaggle regress`, and reading them back from the executed notebook.

    from trm_kaggle.experiments.recorded import record
    record("test_exact_accuracy", 0.93)                     # in a notebook cell
    record("tasks_changed_votes", 1, "first: 00576224 test 0")

`record` displays the metric as one output of the cell, under its own MIME type (`MIME`) beside a
text line a reader sees; papermill keeps every output in the executed notebook, where `read_recorded`
finds them. The metric lives in the notebook file itself: no side file to lose or mix up between runs.
(papermill's old companion `scrapbook` works the same way, but it is unmaintained since 2020, declares
neither its `six` import nor a modern nbformat, and pulls pandas and pyarrow in; a display output needs
nothing but IPython, which every kernel has.)

A value must be a finite number (an int, a float or a bool): NaN or infinity raises at once, in the cell
that computed it. Names are plain (letters, digits, `_`, `-`, `.`), and a notebook records each name once.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from trm_kaggle.errors import TRMError
from trm_kaggle.wording import clipped, one_line

MIME = "application/vnd.trm-kaggle.metric+json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")


@dataclass(frozen=True)
class Recorded:
    """One metric as a notebook recorded it."""

    name: str
    value: float
    detail: str = ""  # what a reader needs when it changes (e.g. the first task that differs)


def finite_number(value: object) -> bool:
    """Whether `value` is a real number, never a bool, that is finite as a float: NaN, the infinities and a whole
    number too large for a float (10**400 in a JSON file, on which math.isfinite raises) are not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_metric(name: object, value: object) -> float:
    """The value as a float, or TRMError naming the metric and what is wrong with it."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise TRMError(f"metric name {name!r}: use letters, digits, '_', '-' and '.' (at most 100)")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # True once compared as 1.0
        raise TRMError(f"metric {name}: {clipped(value, 40)} is not a number")
    if not finite_number(value):
        raise TRMError(f"metric {name}: {clipped(value, 40)} is not finite (as a float)")
    return float(value)


def record(name: str, value: float, detail: str = "") -> None:
    """Record a metric: a display output the runner reads back (in plain Python: one printed line).

    Returns nothing, so that a cell ending with it shows the one line only."""
    metric = Recorded(name, check_metric(name, value), str(detail))
    # the detail as one line, control characters escaped: it is printed, and a reader's terminal shows it
    text = f"metric {name} = {metric.value:g}" + (f" ({one_line(metric.detail)})" if metric.detail else "")
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python without IPython: a reader still sees the line
        print(text)
        return
    if get_ipython() is None:
        print(text)
        return
    display({MIME: {"name": name, "value": metric.value, "detail": metric.detail}, "text/plain": text}, raw=True)


def read_recorded(nb: dict, where: str) -> dict[str, Recorded]:
    """Every metric recorded in an executed notebook (nbformat 4 as a dict), in cell order.

    `where` names the notebook in errors: a malformed record or a name recorded twice is a TRMError."""
    found: dict[str, Recorded] = {}
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise TRMError(f"{where}: not a notebook (no list of cells)")
    for i, cell in enumerate(cells):
        outputs = cell.get("outputs", []) if isinstance(cell, dict) else []
        if not isinstance(outputs, list):  # null was "'NoneType' object is not iterable", naming no notebook
            raise TRMError(f"{where}: cell {i}: its outputs are not a list (not a notebook as papermill writes it)")
        for out in outputs:
            data = out.get("data", {}) if isinstance(out, dict) else {}
            if not isinstance(data, dict):  # a list was "'list' object has no attribute 'get'"
                raise TRMError(f"{where}: cell {i}: an output's data is not an object (not a notebook as papermill "
                               "writes it)")
            payload = data.get(MIME)
            if payload is None:
                continue
            if not isinstance(payload, dict):
                raise TRMError(f"{where}: cell {i}: a metric record that is not an object")
            name = payload.get("name")
            value = check_metric(name, payload.get("value"))
            if name in found:
                raise TRMError(f"{where}: metric {name} is recorded twice (cell {i} again); record each name once")
            found[name] = Recorded(name, value, str(payload.get("detail", "")))
    return found
