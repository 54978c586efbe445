"""The one report writer of the GPU suite: every part fills a `PartReport` stage by stage and writes
`gpu_report.json` + `gpu_report.md` (+ the PNGs it made) into its output folder, after each stage (status
`running`) and at the end (status `stopped` when the command was stopped by Ctrl-C or SIGTERM).

A stage that raises is recorded (its error and the last lines of its traceback) and the part goes on with
the next stage; a part whose set-up raises is recorded as failed. A non-finite number never reaches the JSON
as NaN: it is written as null and listed under `non_finite`, and the part's status says so.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from trm_kaggle.atomic import atomic_write_json, atomic_write_text

REPORT_JSON = "gpu_report.json"
REPORT_MD = "gpu_report.md"
#: A schedule entry's status for a stage the command was stopped before.
NOT_RUN_STOPPED = "not run (the command was stopped)"


class PartTimeout(BaseException):
    """A stage ran past its time (a BaseException: the `except Exception` that keeps one measurement's failure
    to itself must not swallow it)."""


class PartReport:
    def __init__(self, part: int, title: str, smoke: bool, out: Path, budget_s: float):
        self.out = Path(out)
        self.data: dict[str, Any] = {"part": part, "title": title, "smoke": smoke, "status": "running",
                                     "error": None, "budget_s": budget_s, "seconds": None, "schedule": [],
                                     "stages": {}, "results": {}, "tables": [], "figures": [], "skipped": [],
                                     "notes": [], "non_finite": []}
        self._t0 = time.perf_counter()
        self.deadline = time.monotonic() + budget_s

    # -- filling -------------------------------------------------------------------------------------------

    def begin(self, allowance_s: float) -> None:
        """The next stage may use `allowance_s` seconds (`left()` counts them down)."""
        self.deadline = time.monotonic() + allowance_s

    def left(self) -> float:
        """Seconds left of the running stage's allowance."""
        return self.deadline - time.monotonic()

    def set(self, name: str, value: Any) -> None:
        self.data["results"][name] = value

    def table(self, title: str, header: list[str], rows: list[list[Any]], note: str = "") -> None:
        self.data["tables"].append({"title": title, "header": header, "rows": rows, "note": note})

    def skip(self, what: str, why: str, cut: bool = False) -> None:
        """`what` was not measured; `cut`: because the time cap was near (the part is then `partial`)."""
        self.data["skipped"].append({"what": what, "why": why, "cut_by_time_cap": cut})

    def note(self, text: str) -> None:
        self.data["notes"].append(text)

    def figure(self, path: Path, caption: str) -> None:
        self.data["figures"].append({"file": Path(path).name, "caption": caption})

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Run one stage: its time and status are recorded; an exception is recorded and swallowed (the part goes
        on), except a PartTimeout, which ends the part."""
        t = time.perf_counter()
        rec = {"status": "ok", "seconds": None, "error": None}
        self.data["stages"][name] = rec
        try:
            yield
        except PartTimeout as e:
            rec["status"] = "failed"
            rec["error"] = str(e) or "its time ran out"
            raise
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM (`interrupts.Terminated`): the command stops here
            rec["status"] = "stopped"
            rec["error"] = str(e) or "interrupted"
            raise
        except Exception as e:  # noqa: BLE001 - recorded; the other stages still run
            rec["status"] = "failed"
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc().strip().splitlines()[-8:]
        finally:
            rec["seconds"] = round(time.perf_counter() - t, 3)

    def fail(self, error: BaseException) -> None:
        self.data["status"] = "failed"
        self.data["error"] = f"{type(error).__name__}: {error}"
        self.data["traceback"] = traceback.format_exception(error)[-8:]

    def stop(self, why: str) -> dict:
        """The command was stopped (`why`: "stopped by SIGTERM"): the status says so, with the stage it stopped in,
        those that ran and those that did not (the schedule's entries), so that no report says `running` once its
        process is gone. Both files written; returns the report."""
        d = self.data
        d["status"] = "stopped"

        def named(*statuses: str) -> str:
            return ", ".join(e["stage"] for e in d["schedule"] if e["status"] in statuses)

        cut, left = named("stopped"), named(NOT_RUN_STOPPED)
        d["error"] = (why + (f" during stage {cut}" if cut else " between its stages")
                      + f"; stages that ran: {named('ran', 'failed', 'ended at its allowance') or 'none'}"
                      + (f"; not run: {left}" if left else ""))
        return self.write()

    # -- writing -------------------------------------------------------------------------------------------

    def write(self) -> dict:
        """Write both files as they stand (status `running` until `finish`); returns what was written."""
        d = dict(self.data)
        d["seconds"] = round(time.perf_counter() - self._t0, 3)
        d["non_finite"] = list(d["non_finite"])
        d["results"] = _finite(d["results"], "results", d["non_finite"])
        d["tables"] = [{**t, "rows": _finite(t["rows"], f"table {t['title']!r}", d["non_finite"])}
                       for t in d["tables"]]
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.out / REPORT_JSON, d, indent=2)
        atomic_write_text(self.out / REPORT_MD, markdown(d))
        return d

    def finish(self) -> dict:
        """Settle the status, write both files, return the report."""
        d = self.data
        if d["status"] == "running":
            d["status"] = "ok"
        d["non_finite"] = []
        written = self.write()
        if d["status"] == "ok" and (any(s["status"] != "ok" for s in d["stages"].values()) or written["non_finite"]
                                    or any(s["cut_by_time_cap"] for s in d["skipped"])):
            d["status"] = "partial"
            written = self.write()
        return written


def _finite(value: Any, where: str, bad: list[str]) -> Any:
    """`value` with every non-finite float replaced by None (its place appended to `bad`)."""
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(where)
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}", bad) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        return f"{v:.3g}" if a < 1e-2 or a >= 1e5 else (f"{v:.3f}" if a < 10 else f"{v:.1f}")
    return str(v)


def text_table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in header]] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def markdown(d: dict) -> str:
    mode = " (smoke mode: CPU, tiny sizes; the figures prove the code path, not a speed)" if d["smoke"] else ""
    lines = [f"# GPU suite, part {d['part']}: {d['title']}", "",
             f"Status: **{d['status']}**{mode}; {d['seconds']} s since the run began, of a {d['budget_s']:.0f} s "
             f"budget shared by its stages."]
    if d["error"]:
        lines += ["", f"Error: `{d['error']}`"]
    for t in d["tables"]:
        lines += ["", f"## {t['title']}", "", md_table(t["header"], t["rows"])]
        if t["note"]:
            lines += ["", t["note"]]
    for f in d["figures"]:
        lines += ["", f"![{f['caption']}]({f['file']})"]
    if d["schedule"]:
        lines += ["", "## Schedule", "", md_table(["stage", "share s", "allowance s", "seconds", "CPU s", "status"],
                                                  [[e["stage"], e["share_s"], e["allowance_s"], e["seconds"],
                                                    e.get("cpu_s"), e["status"]] for e in d["schedule"]])]
    lines += ["", "## Stages", "", md_table(["stage", "status", "seconds", "error"],
                                            [[k, v["status"], v["seconds"], v["error"] or ""]
                                             for k, v in d["stages"].items()])]
    if d["skipped"]:
        lines += ["", "## Not measured", ""] + [f"* {s['what']}: {s['why']}" for s in d["skipped"]]
    if d["notes"]:
        lines += ["", "## Notes", ""] + [f"* {n}" for n in d["notes"]]
    if d["non_finite"]:
        lines += ["", "Non-finite values (written as null): " + ", ".join(d["non_finite"])]
    return "\n".join(lines) + "\n"


def print_summary(d: dict, say: Callable[[str], None] = print) -> None:
    say(f"== part {d['part']} ({d['title']}): {d['status']} in {d['seconds']} s"
        + (f" -- {d['error']}" if d["error"] else ""))
    for t in d["tables"]:
        say(f"\n{t['title']}\n{text_table(t['header'], t['rows'])}")
    failed = {k: v["error"] for k, v in d["stages"].items() if v["status"] != "ok"}
    for k, e in failed.items():
        say(f"stage {k} FAILED: {e}")
    for s in d["skipped"]:
        say(f"not measured: {s['what']}: {s['why']}")
