"""`trm-kaggle regress`: run the regression notebooks, compare what they record with the committed baselines.

    notebooks/regression/                 (--notebooks DIR)
      <name>.py + <name>.ipynb            a small deterministic CPU experiment that records its metrics
                                          (`trm_kaggle.experiments.recorded.record`)
      baselines.json                      per notebook and metric: value, tolerance, direction, and the commit
                                          and date of the run that set the value
      golden/                             the files the `golden` notebook compares against
    OUT/                                  (--out, default runs/regression)
      report.md                           this run: metric, baseline, now, verdict; errors; seconds per notebook
      history.jsonl                       one line per run, appended: commit, time, every recorded metric
      history/<notebook>.<metric>.png     each compared metric over the runs of history.jsonl, with its baseline
                                          band (at most PLOTS_PER_RUN a run, regressed and improved ones first)
      executed/<name>.ipynb               the executed notebooks (their outputs and records)

Notebooks run with papermill, several at once where cores allow (each pins its own threads), each in a
kernel of this Python with the notebook's folder as working directory (the same as opening it in Jupyter)
and two parameters when its `parameters` cell declares them: WORK_DIR (a fresh scratch folder, removed
after a successful run), UPDATE_GOLDEN (True with --update-baselines) and GOLDEN_OUT (where an update writes its
golden files: a staging folder under OUT, moved into golden/ with baselines.json, never by a failed or stopped run).

Verdicts, for a baseline `value` with `tolerance` and `direction`:
  higher: regressed below value - tolerance, improved above value + tolerance
  lower:  regressed above value + tolerance, improved below value - tolerance
  equal:  regressed outside value +- tolerance
Exit status: 0 when every comparison holds (improvements are reported, so the baseline can be raised);
1 when a metric regressed; 2 when a comparison could not be made (an unknown notebook, a baselines file
that does not parse or lacks a metric, a notebook that failed or did not record a metric). Every problem
is one line naming the notebook and the metric; no comparison is ever skipped in silence.

`--update-baselines` is the only way baselines.json changes: it sets the value of each metric of the
notebooks that ran to what they recorded, with the commit (suffixed `+dirty` when files other than the
baselines and golden files differ from it) and the date. Tolerance and direction are a person's decision:
a metric that baselines.json does not list yet is refused until someone adds it (value null).

One writer per folder (`trm_kaggle.locks`): an update holds the notebooks folder from before it reads
baselines.json until it has saved it, so a second update (or a comparison, which would read half an update)
is refused in one line instead of saving over the first one's values; comparisons share the folder with one
another. Two runs on one --out are refused the same way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence

import pydantic
from pydantic import Field

from trm_kaggle.atomic import append_line, atomic_write_bytes, atomic_write_text, check_log
from trm_kaggle.config import number_argument, path_argument, texts_argument, validation_line, whole_argument
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.hardware import usable_cores
from trm_kaggle.interrupts import FirstStopOnly
from trm_kaggle.experiments.recorded import Recorded, finite_number, read_recorded
from trm_kaggle.jsonio import read_json, read_json_lines
from trm_kaggle.locks import directory_lock
from trm_kaggle.names import file_in
from trm_kaggle.outputs import Input, Output, check_kept, is_run_folder, kept_by_problem, writable_problem
from trm_kaggle.wording import command_line, count, one_line, shown

BASELINES = "baselines.json"
BASELINES_FORMAT = "trm_kaggle.regression-baselines"
GOLDEN = "golden"  # a notebook's golden files live in <notebooks>/golden (ignored by the dirty check)
HISTORY = "history.jsonl"
OUT_FOLDERS = ("executed", "history", "work")  # what a run writes into below --out (with report.md, HISTORY)
KERNEL = "python3"  # the kernel every notebook runs on, whatever kernelspec the notebook names (or none)
PARAMETERS = ("WORK_DIR", "UPDATE_GOLDEN", "GOLDEN_OUT")
#: A notebook's time limit, the whole notebook's (`--timeout`): one that runs past it is stopped and is its failure
#: alone, the others run on. papermill's own limit is per cell and none by default: a cell that waited for ever held
#: CI for ever. An hour is many times what each of the suite's notebooks takes on two cores.
TIMEOUT_S = 3600.0  # what the runner passes, to the notebooks that declare them
Verdict = Literal["ok", "improved", "regressed", "new"]  # new: no value yet (--update-baselines)


def regress_outputs(out: str | os.PathLike, what: str = "--out") -> list[Output]:
    """What a regression run writes: `out`, whose folders (executed notebooks, metric plots, the notebooks' work
    folders) are never written through a link (an executed notebook once replaced a user's file through a planted
    `executed/` link)."""
    return [Output(out, what, "folder", (*OUT_FOLDERS, HISTORY, "report.md"))]


def regress_io(notebook_dir: str | os.PathLike, out: str | os.PathLike, notebooks_what: str = "--notebooks",
               out_what: str = "--out") -> tuple[list[Input], list[Output]]:
    """What a regression run reads (the notebooks folder, every file of it an input) and writes (`regress_outputs`),
    as the command and `regress` both check them: `out` holding the notebooks folder (`out/executed`) replaced a
    notebook with its executed copy."""
    return [Input(notebook_dir, notebooks_what, tree=True)], regress_outputs(out, out_what)


def default_notebook_dir() -> Path:
    """notebooks/regression of the checkout this package runs from."""
    return Path(__file__).resolve().parents[2] / "notebooks" / "regression"


# ---------------------------------------------------------------------------
# baselines.json
# ---------------------------------------------------------------------------


class Baseline(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    # strict: a number written as one (an int or a float), never `true` taken as 1 nor the text "0.8" as 0.8
    # None: not measured yet (--update-baselines)
    value: Optional[float] = Field(None, allow_inf_nan=False, strict=True)
    tolerance: float = Field(ge=0, allow_inf_nan=False, strict=True)
    direction: Literal["higher", "lower", "equal"]  # which way is better ("equal": neither)
    commit: Optional[str] = None  # the commit whose run set `value`
    date: Optional[str] = None

    def describe(self) -> str:
        better = {"higher": "higher is better", "lower": "lower is better", "equal": "must stay equal"}[self.direction]
        return f"{'none' if self.value is None else f'{self.value:g}'} ({better}, tolerance {self.tolerance:g})"


class BaselinesFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    format: Literal["trm_kaggle.regression-baselines"] = BASELINES_FORMAT
    version: Literal[1] = 1
    baselines: dict[str, dict[str, Baseline]]


def load_baselines(path: Path) -> BaselinesFile:
    raw = read_json(path, "baselines file", hint="it lists each notebook's metrics: value, tolerance, direction")
    try:
        return BaselinesFile.model_validate(raw)
    except pydantic.ValidationError as e:
        raise TRMError(f"{path}: not a baselines file: {validation_line(e)}") from None


def save_baselines(path: Path, baselines: BaselinesFile) -> None:
    atomic_write_text(path, json.dumps(baselines.model_dump(), indent=2) + "\n")


def verdict(baseline: Baseline, now: float) -> Verdict:
    if baseline.value is None:
        return "new"
    lo, hi = baseline.value - baseline.tolerance, baseline.value + baseline.tolerance
    if baseline.direction == "higher":
        return "regressed" if now < lo else "improved" if now > hi else "ok"
    if baseline.direction == "lower":
        return "regressed" if now > hi else "improved" if now < lo else "ok"
    return "ok" if lo <= now <= hi else "regressed"


# ---------------------------------------------------------------------------
# running the notebooks
# ---------------------------------------------------------------------------


def list_notebooks(notebook_dir: Path) -> list[str]:
    return sorted(p.stem for p in notebook_dir.glob("*.ipynb"))


@dataclass
class NotebookRun:
    name: str
    executed: Path
    metrics: dict[str, Recorded] = field(default_factory=dict)
    error: str | None = None  # why no metrics could be read
    seconds: float = 0.0
    staged: Path | None = None  # with --update-baselines: the golden files it wrote, moved in with the baselines


class Kernels:
    """The kernels one regress started, so that a stop ends them: a notebook's thread waits on its kernel, and a
    stopped regress once waited for every running notebook to finish (minutes) before its `interrupted` line, and
    a second signal in that wait ended it without a word, the notebooks half run."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.started: list = []
        self.ended: list = []  # the running kernels a stop signalled
        self.stopped = False

    def add(self, manager) -> None:
        with self.lock:
            self.started.append(manager)
            stopped = self.stopped
        if stopped:  # started while the stop ended the others
            with self.lock:
                self.ended.append(manager)
            self._end(manager)

    def finished(self, managers: list) -> bool:
        """The kernels of a notebook that has ended, which a later stop no longer signals (their process ids are
        reaped); whether a stop signalled one of them."""
        with self.lock:
            self.started = [m for m in self.started if m not in managers]
            return any(m in self.ended for m in managers)

    def stop(self) -> None:
        """End every running kernel, and any started from now on (SIGTERM: its cell fails, its thread returns)."""
        with self.lock:
            self.stopped = True
            managers = list(self.started)
            self.ended += managers
        for manager in managers:
            self._end(manager)

    @staticmethod
    def _end(manager, sig: int = signal.SIGTERM) -> None:
        """Send `sig` to the kernel and every process it started (a training, a `subprocess.Popen` in a cell: left
        running with parent 1 when only the kernel was ended): the kernel's process group, which jupyter_client
        starts it at the head of (a session of its own), and each of its descendants (`_KernelTree`), also those in
        a session or group of their own (a sweep's children, torchrun's workers). Never a group that is not the
        kernel's (regress's own, its shell's), nor a process that is not the kernel's descendant."""
        tree = _KernelTree.of(manager)
        if tree is not None:
            tree.signal(sig)


#: Seconds between the SIGTERM that stops a notebook's processes and the SIGKILL to those still running: the
#: package's own commands stop cleanly in that time (a sweep forwards the stop to its runs, which save their state,
#: and writes sweep.json: about 2.5 s; a SIGKILL in the middle left sweep.json saying "running").
STOP_GRACE_S = 10.0


def _process(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a running process from /proc (None: gone, a zombie, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), fields[19].decode()


class _KernelTree:
    """A kernel's process and its descendants, found by parent pid in /proc (Linux; elsewhere the kernel's group
    only). Each one found is kept with its start time: one whose parent ended (reparented to init) is still
    signalled, and a pid reused by a process that is no descendant never is. A process that left the tree before
    it was looked at (a double fork: reparented to init at once) cannot be found."""

    def __init__(self, pid: int, pgid: object) -> None:
        self.pid, self.pgid = pid, pgid
        self.known: dict[int, str] = {}  # pid -> start time, the kernel's descendants seen so far
        self.first_signal: float | None = None  # time.monotonic() of the first signal sent

    @classmethod
    def of(cls, manager) -> "_KernelTree | None":
        provisioner = getattr(manager, "provisioner", None)
        pid, pgid = getattr(provisioner, "pid", None), getattr(provisioner, "pgid", None)
        tree = getattr(manager, "_trm_tree", None)
        if not (isinstance(pid, int) and pid > 0):
            return tree if isinstance(tree, cls) else None
        if not (isinstance(tree, cls) and tree.pid == pid):
            tree = cls(pid, pgid)
            with contextlib.suppress(AttributeError):
                manager._trm_tree = tree
        return tree

    def _same(self, pid: int) -> bool:
        seen = _process(pid)
        return seen is not None and seen[1] == self.known[pid]

    def alive(self) -> list[int]:
        """The kernel's descendants seen so far that still run (the same processes, not a reused pid)."""
        return [pid for pid in self.known if self._same(pid)]

    def look(self) -> None:
        """Add the descendants of the kernel and of those seen before (a process a reparented one started since)."""
        if not os.path.isdir("/proc/self"):
            return
        roots = {self.pid, *self.alive()}
        children: dict[int, list[tuple[int, str]]] = {}
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if entry.name.isdigit() and (seen := _process(int(entry.name))) is not None:
                    children.setdefault(seen[0], []).append((int(entry.name), seen[1]))
        todo = list(roots)
        while todo:
            for child, start in children.pop(todo.pop(), []):
                if child != os.getpid():
                    self.known.setdefault(child, start)
                    todo.append(child)

    def signal(self, sig: int) -> None:
        """Send `sig` to the kernel, its group and every descendant found (this one's look and every earlier one)."""
        if self.first_signal is None:
            self.first_signal = time.monotonic()
        self.look()
        with contextlib.suppress(OSError):  # gone already (its group too)
            if self.pgid == self.pid and hasattr(os, "killpg") and self.pgid != os.getpgrp():
                os.killpg(self.pgid, sig)
            else:
                os.kill(self.pid, sig)
        for pid in self.alive():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def finish(self) -> None:
        """Once the kernel has ended: wait until the processes signalled end, at most STOP_GRACE_S from the first
        signal, then SIGKILL those still running (a process that ignores SIGTERM)."""
        start = self.first_signal if self.first_signal is not None else time.monotonic()
        self.look()
        while self.alive() and time.monotonic() < start + STOP_GRACE_S:
            time.sleep(0.1)
            self.look()
        self.signal(getattr(signal, "SIGKILL", signal.SIGTERM))


def _kernel_manager_class(kernels: Kernels | None = None, mine: list | None = None):
    """A kernel manager that starts this very interpreter, whatever kernel specs PATH or Jupyter know of; each
    kernel it starts is noted in `kernels` and in `mine` (the one notebook's), and keeps how its process ended
    (`exit_status`: a kernel that died is said with it)."""
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec

    class ThisPython(AsyncKernelManager):  # nbclient drives kernels asynchronously
        async def start_kernel(self, **kwargs):
            if kernels is not None and kernels.stopped:
                raise TRMError("regress was stopped before this notebook's kernel started")
            await super().start_kernel(**kwargs)
            if mine is not None:
                mine.append(self)
            if kernels is not None:
                kernels.add(self)

        async def cleanup_resources(self, *args, **kwargs):
            # nbclient's last call, also for a kernel that died (it shuts down only a live one): its process is
            # still there to ask how it ended
            process = getattr(self.provisioner, "process", None)
            self.exit_status = process.poll() if process is not None else None
            await super().cleanup_resources(*args, **kwargs)

        @property
        def kernel_spec(self):
            # the kernel's own log (not the notebook's output) stays quiet: no note about TCP at each start, no
            # "KeyboardInterrupt caught" at each stop; a kernel that dies is reported by `run_notebook`
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                                    "--IPKernelApp.log_level=CRITICAL"],
                              display_name="trm-kaggle regress", language="python")

    return ThisPython


def _first_line(text: object) -> str:
    lines = [s for s in str(text).strip().splitlines() if s.strip()]
    return lines[0] if lines else ""


def _dying_cell(executed: Path) -> str:
    """" in cell [N]" for the cell the kernel died in, else "" (no notebook kept, or no cell started). papermill
    records each cell's start time as it starts it and stops at the first cell whose kernel died, so that cell is the
    last one started (it marks every cell "completed" at the end, the dying one too: its status says nothing).
    Whether the kernel's own record of the cell (its input received, its execution count) was saved too depends on
    how long the kernel lived, so the count is taken from that record when there is one, else counted: nbclient runs
    every non-blank code cell once, in order, in a fresh kernel."""
    try:
        cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
        code = [c for c in cells if c.get("cell_type") == "code" and "".join(c.get("source") or "").strip()]
        for i in range(len(code) - 1, -1, -1):
            meta = code[i].get("metadata", {})
            timing = meta.get("execution", {})
            unanswered = "iopub.execute_input" in timing and "shell.execute_reply" not in timing
            if unanswered or (meta.get("papermill") or {}).get("start_time"):
                n = code[i].get("execution_count")
                return f" in cell [{n if type(n) is int else i + 1}]"
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # a notebook cut short: no cell named
        pass
    return ""


def _how_it_ended(managers: list) -> str:
    """How the notebook's kernel process ended ("exit status 1", "killed by SIGSEGV"), or "" when not known."""
    status = getattr(managers[-1], "exit_status", None) if managers else None
    if not isinstance(status, int) or status == 0:
        return ""
    if status > 0:
        return f" (exit status {status})"
    with contextlib.suppress(ValueError):
        return f" (killed by {signal.Signals(-status).name})"
    return f" (killed by signal {-status})"


class _KernelDeathSaid(logging.Filter):
    """papermill logs "Kernel died while waiting for execute reply." as it raises: the notebook's error line says it
    (with the cell and the executed notebook), so the log's line, a second and bare one, is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Kernel died")


def declared_parameters(source: Path) -> set[str]:
    """The names the notebook's `parameters` cell assigns, read as papermill reads them for `KERNEL`, the kernel every
    notebook runs on: papermill's own `inspect_notebook` asks the notebook's kernelspec, which a notebook made from
    its .py by `jupytext --to ipynb` (docs/regression.md) has none of ("No kernel name found")."""
    from papermill.iorw import load_notebook_node
    from papermill.translators import PythonTranslator
    from papermill.utils import find_first_tagged_cell_index

    nb = load_notebook_node(os.path.abspath(source))  # papermill reads a path starting with - from stdin
    at = find_first_tagged_cell_index(nb, "parameters")
    return set() if at < 0 else {p.name for p in PythonTranslator.inspect(nb.cells[at])}


def _time_limit(managers: list, seconds: float | None, done, expired: list) -> None:
    """Wait for `done` (an Event) at most `seconds`, then end the notebook's kernels (`managers`: SIGTERM, then
    after STOP_GRACE_S SIGKILL every second for one that stays) until it is set; `expired` gets True when the limit
    was reached."""
    if seconds is None or done.wait(seconds):
        return
    expired.append(True)
    for manager in list(managers):
        Kernels._end(manager, signal.SIGTERM)
    if done.wait(STOP_GRACE_S):
        return
    while not done.is_set():
        for manager in list(managers):
            Kernels._end(manager, getattr(signal, "SIGKILL", signal.SIGTERM))
        done.wait(1.0)


def run_notebook(name: str, notebook_dir: Path, out: Path, update_golden: bool = False,
                 kernels: Kernels | None = None, made: list[Path] | None = None,
                 timeout: float | None = TIMEOUT_S, replaced: list | None = None) -> NotebookRun:
    """Execute one notebook with papermill and read its records (a failure becomes `error`, never raises). Its
    kernel is noted in `kernels`, its work folder in `made` (for a stop to end and remove); one still running after
    `timeout` seconds (None: no limit) is ended, and that is its error. With `replaced`, the executed notebook it
    replaces is kept aside, noted there as (executed, aside or None) for `_put_back` (a stop after this notebook
    ended)."""
    import threading

    import papermill
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    executed = out / "executed" / f"{name}.ipynb"
    run = NotebookRun(name, executed)
    source = notebook_dir / f"{name}.ipynb"
    t0 = time.perf_counter()
    work = None
    managers: list = []  # this notebook's kernel manager
    done, expired = threading.Event(), []
    limit = threading.Thread(target=_time_limit, args=(managers, timeout, done, expired), daemon=True,
                             name=f"regress-timeout-{name}")
    started = time.monotonic()  # the limit's own start: a run it outlasted is past it, whatever the timer saw
    limit.start()
    try:
        try:
            declared = declared_parameters(source)
        except Exception as e:  # noqa: BLE001 - JSON that is no notebook (a list, cells that are text): said so
            raise TRMError(f"{source} is not a notebook papermill can read ({type(e).__name__}: "
                           f"{_first_line(e)})") from None
        executed.parent.mkdir(parents=True, exist_ok=True)
        (out / "work").mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=os.path.realpath(out / "work")))  # `link/..` as reached
        if made is not None:
            made.append(work)
        given = {"WORK_DIR": str(work.resolve()), "UPDATE_GOLDEN": update_golden}
        if update_golden and "GOLDEN_OUT" in declared:  # staged, never written into the notebooks folder mid-run: a
            # stopped or failed update had rewritten the golden files while baselines.json named the run before
            run.staged = Path(tempfile.mkdtemp(prefix=f".{name}-{GOLDEN}-", dir=os.path.realpath(out)))
            if made is not None:
                made.append(run.staged)
            given["GOLDEN_OUT"] = str(run.staged.resolve())
        # the kernel starts in the notebook's folder (its relative paths are written from there) through the
        # client's resources, not papermill's `cwd`: that one changes the whole process's folder, and two
        # notebooks run at once on threads would each start their kernel in the other's (or in neither)
        # papermill writes where it is told, through a link: it writes into our work folder, and the notebook is
        # renamed into executed/ (a link planted there is replaced, its target never written)
        written = work / f"{name}.ipynb"
        whole = True
        try:
            papermill.execute_notebook(os.path.abspath(source), str(written), parameters={k: v for k, v in given.items()
                                                                              if k in declared},
                                       kernel_name=KERNEL, language="python", progress_bar=False,
                                       resources={"metadata": {"path": str(notebook_dir.resolve())}},
                                       kernel_manager_class=_kernel_manager_class(kernels, managers))
        except OSError:  # the notebook's file not written whole (a full disk, `ulimit -f`): a cut file is no notebook,
            whole = False  # kept neither as executed nor in the work folder
            written.unlink(missing_ok=True)
            raise
        finally:
            # a failed run's notebook too: it shows the failing cell; never a stopped one's, which would replace an
            # earlier run's notebook with a half-run one that the report and the history do not describe
            if whole and written.exists() and not (kernels is not None and kernels.stopped):
                aside = None
                if replaced is not None and os.path.lexists(executed):
                    aside = Path(tempfile.mkdtemp(prefix=f".{name}-previous-", dir=executed.parent)) / executed.name
                    os.replace(executed, aside)
                if replaced is not None:
                    replaced.append((executed, aside))
                os.replace(written, executed)
        run.metrics = read_recorded(json.loads(executed.read_text(encoding="utf-8")), f"{name} ({executed})")
    except TRMError as e:
        run.error = str(e)
    except PapermillExecutionError as e:
        run.error = (f"the notebook failed in cell [{e.exec_count}]: {e.ename}: {_first_line(e.evalue)} "
                     f"(see {executed})")
    except DeadKernelError:  # os._exit in a cell, a crash, the memory killer: where, how, and what it left
        seen = f" (see {executed})" if executed.is_file() else ""
        run.error = f"the notebook's kernel died{_dying_cell(executed)}{_how_it_ended(managers)}{seen}"
    except OSError as e:  # its path and what was needed (`ulimit -f` for a file too large), not a bare errno
        run.error = os_error_line(e)
    except Exception as e:  # noqa: BLE001 - a notebook papermill cannot read: this one's loss
        run.error = f"{type(e).__name__}: {_first_line(e)}"
    finally:
        ended = time.monotonic()
        done.set()
    limit.join()
    stopped = kernels.finished(managers) if kernels is not None else False
    if expired or stopped:  # what survived the SIGTERM (a process that ignores it) is killed once STOP_GRACE_S has
        # passed: the kernel's group and its descendants stand while any of them lives
        for manager in managers:
            if (tree := _KernelTree.of(manager)) is not None:
                tree.finish()
    seconds = ended - started
    if expired or (timeout is not None and seconds > timeout):  # past its limit, it fails, also when it ended
        # before the kill landed; how the kernel's end was said (it died, a cell failed) is ours
        how = f"stopped{_dying_cell(executed)}" if run.error is not None else f"it took {seconds:.3g} s"
        run.error = (f"ran past its time limit of {timeout:g} s (--timeout): {how}"
                     + (f" (see {executed})" if executed.is_file() else ""))
    run.seconds = time.perf_counter() - t0
    if work is not None and (run.error is None or not _holds_anything(work)):
        shutil.rmtree(work, ignore_errors=True)  # ours; a failed run keeps it for a look, when there is one
    return run


# ---------------------------------------------------------------------------
# comparison, report, history
# ---------------------------------------------------------------------------


@dataclass
class Row:
    notebook: str
    metric: str
    baseline: Baseline
    now: float
    verdict: Verdict
    detail: str = ""

    @property
    def line(self) -> str:
        # names read from files (a notebook's, a metric's in baselines.json) and the detail a notebook recorded:
        # escaped, so that an escape sequence never reaches the terminal nor a newline fakes a line
        text = f"{shown(self.notebook)}.{shown(self.metric)} = {self.now:g}, baseline {self.baseline.describe()}"
        return text + (f": {one_line(self.detail)}" if self.detail else "")


def compare(run: NotebookRun, expected: dict[str, Baseline], baselines_path: Path) -> tuple[list[Row], list[str]]:
    """Rows for every expected metric, and one problem line for each that could not be compared."""
    if run.error:
        return [], [f"{run.name}: {run.error}"]
    rows, problems = [], []
    for metric, b in expected.items():
        got = run.metrics.get(metric)
        if got is None:
            problems.append(f"{run.name}: metric {metric} was not recorded ({baselines_path} expects it; "
                            f"executed notebook: {run.executed})")
        else:
            rows.append(Row(run.name, metric, b.model_copy(), got.value, verdict(b, got.value), got.detail))
    for metric in sorted(set(run.metrics) - set(expected)):
        problems.append(f"{run.name}: metric {metric} has no entry in {baselines_path}: add it with its tolerance "
                        f"and direction (value null), then set it with --update-baselines")
    return rows, problems


def git_commit(notebook_dir: Path) -> str:
    """HEAD of the checkout holding the notebooks (+dirty when files besides the baselines differ)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=notebook_dir, capture_output=True, text=True, timeout=30,
                              check=True, encoding="utf-8", errors="replace").stdout

    try:
        sha = git("rev-parse", "--short=12", "HEAD").strip()
        top = Path(git("rev-parse", "--show-toplevel").strip())
        ours = notebook_dir.resolve().relative_to(top.resolve()).as_posix()
        changed = [line[3:] for line in git("status", "--porcelain").splitlines()]  # untracked files too
    except (OSError, subprocess.SubprocessError, ValueError):
        return "unknown"
    mine = (f"{ours}/{BASELINES}", f"{ours}/{GOLDEN}/")
    dirty = [p for p in changed if not (p == mine[0] or p.startswith(mine[1]))]
    return sha + ("+dirty" if dirty else "")


def _md(text: str) -> str:
    """A table cell or a list item of report.md: one line, control characters escaped, no column break."""
    return one_line(str(text)).replace("|", "\\|")


def report_markdown(rows: list[Row], problems: list[str], runs: list[NotebookRun], commit: str, when: str,
                    updated: bool) -> str:
    lines = [f"# Regression notebooks: {when}", "",
             f"Commit {commit}; {count(len(runs), 'notebook')}; "
             + ("baselines updated from this run." if updated else "compared with the committed baselines."), "",
             "| notebook | metric | baseline | now | verdict |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {_md(r.notebook)} | {_md(r.metric)} | {_md(r.baseline.describe())} | {r.now:g} | "
                     f"{'**' + r.verdict + '**' if r.verdict != 'ok' else 'ok'} |")
    notes = [r for r in rows if r.detail]
    if notes:
        lines += ["", "## Details", ""] + [f"* {_md(r.notebook)}.{_md(r.metric)}: {_md(r.detail)}" for r in notes]
    if problems:
        lines += ["", "## Not compared", ""] + [f"* {_md(p)}" for p in problems]
    lines += ["", "## Notebooks", "", "| notebook | seconds | executed notebook |", "|---|---|---|"]
    lines += [f"| {_md(r.name)} | {r.seconds:.0f} | {_md(r.executed)} |" for r in runs]
    return "\n".join(lines) + "\n"


def append_history(path: Path, commit: str, when: str, runs: list[NotebookRun]) -> None:
    """One line per run of `regress`: the commit and every metric that was recorded."""
    entry = {"time": when, "commit": commit,
             "metrics": {r.name: {m: rec.value for m, rec in r.metrics.items()} for r in runs if not r.error},
             "seconds": {r.name: round(r.seconds, 1) for r in runs}}  # for the order of the next run, not a metric
    # a file that does not end a line (a run killed while writing, bytes appended by something else) gets one
    # first: the new entry is a whole line of its own, never glued to the broken one
    broken = path.is_file() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
    # appending a whole line: earlier lines stay as they were (a link in its place is refused, never followed)
    append_line(path, ("\n" if broken else "") + json.dumps(entry))


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)


#: The largest magnitude a history plot draws: matplotlib's tick locator multiplies the axis span by up to ten, and
#: near the float limit (1e308) it overflowed with numpy's RuntimeWarning on the terminal.
PLOTTABLE = 1e300


def plottable(value: object) -> bool:
    """Whether a history value is a number a plot can draw: finite and at most PLOTTABLE in size."""
    return finite_number(value) and abs(value) <= PLOTTABLE


def read_history(path: Path, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The entries of history.jsonl. A line that is not one (a run killed while writing, bytes that are not UTF-8
    or not JSON) is skipped, and so is a metric's value that cannot be plotted (NaN, an infinity, 1e308, text:
    regress writes none; its line's other values are kept); `warn` is told how many of each were."""
    if not os.path.lexists(path):
        return []
    lines = read_json_lines(path, "history file")
    entries, bad, spoilt, values = [], [], [], 0
    for n, _, v in lines:
        if not (isinstance(v, dict) and isinstance(v.get("metrics"), dict)):
            bad.append(n)
            continue
        metrics = {name: {m: x for m, x in got.items() if plottable(x)} if isinstance(got, dict) else got
                   for name, got in v["metrics"].items()}
        if left := sum(len(got) - len(metrics[name]) for name, got in v["metrics"].items() if isinstance(got, dict)):
            spoilt.append(n)
            values += left
        entries.append({**v, "metrics": metrics})
    if bad and warn is not None:
        warn(f"warning: {path}: {len(bad)} of {count(len(lines), 'line')} skipped (not UTF-8, not JSON, or not a "
             f"history entry; first: line {bad[0]}); the other entries are kept")
    if spoilt and warn is not None:
        warn(f"warning: {path}: {count(values, 'value')} on {count(len(spoilt), 'line')} skipped (not a finite "
             f"number, or too large to plot; first: line {spoilt[0]}); the lines' other values are kept")
    return entries


def last_seconds(history: list[dict]) -> dict[str, float]:
    """Each notebook's seconds in the newest run that recorded them (empty without one)."""
    for entry in reversed(history):
        if isinstance(entry.get("seconds"), dict):
            return {k: float(v) for k, v in entry["seconds"].items() if finite_number(v)}
    return {}


def _label(text: object, limit: int = 60) -> str:
    """Text read from a file as a plot shows it: control characters and what is not ASCII escaped (a glyph the font
    lacks was matplotlib's warning on the terminal, with the raw character in it) and `$` kept from starting
    matplotlib's mathematics (a `$\\x$` in a commit raised at the drawing)."""
    return shown(str(text), limit).encode("ascii", "backslashreplace").decode("ascii").replace("$", r"\$")


def plot_history(history: list[dict], notebook: str, metric: str, baseline: Baseline | None) -> bytes:
    """PNG: the metric over the runs of the history (x: run, labelled by commit), with the baseline band."""
    from trm_kaggle.experiments.compare import _figure, _png  # the package's one figure and PNG helpers

    points = [(i, e["metrics"][notebook][metric], _label(str(e.get("commit", "?"))[:8]))
              for i, e in enumerate(history) if isinstance(e["metrics"].get(notebook), dict)
              and plottable(e["metrics"][notebook].get(metric))]  # a history line may say 1e999, 10**400, NaN
    fig, axes = _figure(max(5.0, 0.35 * len(points) + 3), 3.4, 1, 1)
    ax = axes[0][0]
    if baseline is not None and baseline.value is not None and all(
            plottable(baseline.value + d) for d in (-baseline.tolerance, baseline.tolerance)):
        ax.axhline(baseline.value, color="#2a6", linewidth=1, label=f"baseline {baseline.value:g}")
        ax.axhspan(baseline.value - baseline.tolerance, baseline.value + baseline.tolerance, color="#2a6",
                   alpha=0.15, linewidth=0, label=f"tolerance {baseline.tolerance:g} ({baseline.direction})")
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=4, color="#235",
                linewidth=1.2, label="recorded")
        step = max(1, len(points) // 12)
        ax.set_xticks([p[0] for p in points][::step], [p[2] for p in points][::step], rotation=30, fontsize=7)
    ax.set_xlabel("run (commit)")
    ax.set_ylabel(_label(metric))
    ax.set_title(f"{_label(notebook)}.{_label(metric)} over {len(points)} runs", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _png(fig)


#: History plots drawn by one run, at most: a notebook recording 3,001 metrics once kept regress drawing (about six
#: a second) and silent for minutes before its verdict.
PLOTS_PER_RUN = 100


def plot_compared(out: Path, rows: list[Row], baselines: BaselinesFile, warn: Callable[[str], None]) -> None:
    """history/<notebook>.<metric>.png for each metric compared (a metric without a baseline is a problem to fix,
    not a history to draw), regressed and improved ones first, at most PLOTS_PER_RUN (the others said in one line;
    history.jsonl keeps every value)."""
    history = read_history(out / HISTORY)  # the line just appended included; the reader warned of the rest before
    chosen = sorted(rows, key=lambda row: row.verdict in ("ok", "new"))[:PLOTS_PER_RUN]  # stable: in report order
    if len(rows) > len(chosen):
        warn(f"note: {count(len(rows) - len(chosen), 'history plot')} not drawn (at most {PLOTS_PER_RUN:,} a run, "
             f"regressed and improved metrics first); {out / HISTORY} holds every value")
    for row in chosen:
        if not plottable(row.now):  # recorded (finite), but too large to draw: said, as a history line's would be
            warn(f"warning: {shown(row.notebook)}.{shown(row.metric)} = {row.now:g} is too large to plot: left out "
                 "of its history plot")
        png = file_in(out / "history", f"{row.notebook}.{row.metric}", ".png")
        atomic_write_bytes(png, plot_history(history, row.notebook, row.metric,
                                             baselines.baselines[row.notebook].get(row.metric)))


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def update_command(name: str, notebook_dir: Path) -> str:
    """The command that sets notebook `name`'s baselines, as a person pastes it: `--notebooks DIR` when the folder is
    not the default one (without it, the pasted command updated another folder's), and the name after `--` when it
    starts with `-` (`regress -x --update-baselines` was refused as an unknown option)."""
    where = [] if notebook_dir.resolve() == default_notebook_dir().resolve() else ["--notebooks", Path(notebook_dir)]
    return command_line("trm-kaggle", "regress", *where, "--update-baselines",
                        *(["--", name] if name.startswith("-") else [name]))


def _check_request(names: Sequence[str], notebook_dir: Path, baselines: BaselinesFile, baselines_path: Path,
                   update: bool) -> list[str]:
    """The notebooks to run, after every check that needs no execution (TRMError for the first problem)."""
    known = list_notebooks(notebook_dir)
    if not known:
        raise TRMError(f"{notebook_dir}: no regression notebooks (*.ipynb) here; run from a checkout of the "
                       "repository or pass --notebooks DIR")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise TRMError(f"unknown regression notebook {unknown[0]!r}; the notebooks in {notebook_dir} are: "
                       + ", ".join(known))
    stale = sorted(set(baselines.baselines) - set(known))
    if stale:
        raise TRMError(f"{baselines_path} lists notebook {stale[0]!r}, which {notebook_dir} does not have: "
                       "remove its entry or restore the notebook")
    chosen = list(dict.fromkeys(names)) or known
    for name in chosen:
        expected = baselines.baselines.get(name)
        if not expected:
            raise TRMError(f"{baselines_path} has no metrics for notebook {name!r}: add each metric it records "
                           "with its tolerance and direction (value null), then run --update-baselines")
        missing = [m for m, b in expected.items() if b.value is None]
        if missing and not update:
            raise TRMError(f"{baselines_path}: {name}.{missing[0]} has no baseline value yet: run "
                           f"`{update_command(name, notebook_dir)}`")
    return chosen


def regress(names: Sequence[str] = (), out: str | os.PathLike = "runs/regression", update: bool = False,
            notebook_dir: str | os.PathLike | None = None, jobs: int | None = None,
            say: Callable[[str], None] = print, warn: Callable[[str], None] | None = None,
            timeout: float | None = TIMEOUT_S) -> int:
    """Run the notebooks, compare, report, keep the history; returns the exit status (module docstring)."""
    warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    names = texts_argument("names", names, "a notebook's name")  # 'golden' was the notebooks g, o, l, ...
    path_argument("out", out, "the output folder's path")
    path_argument("notebook_dir", notebook_dir, "the notebooks folder's path", optional=True)
    notebook_dir = Path(notebook_dir) if notebook_dir is not None else default_notebook_dir()
    # where it writes, as the command checks it, whoever calls: a file or a FIFO there was mkdir's FileExistsError
    # and each of its folders, found read-only, a file or a FIFO before any notebook runs (not after, named by a
    # temporary's random path)
    for output in [*regress_outputs(out, "out"), *(Output(Path(out) / n, f"{n}/", "folder") for n in OUT_FOLDERS)]:
        if problem := writable_problem(output):
            raise TRMError(problem)
    # a training run's folder, or a folder inside one: the report, history and executed notebooks would mix with the
    # run's states (as `launch --out` there is refused)
    if problem := kept_by_problem(out, "--out", is_run_folder, "a training run folder", "run.json or a train state",
                                  "run's"):
        raise TRMError(problem)
    out = Path(out)
    if not notebook_dir.is_dir():
        what = "a file, not a folder" if notebook_dir.exists() else "no such folder"
        raise TRMError(f"{notebook_dir}: {what} of regression notebooks (run from a checkout of the repository or "
                       "pass --notebooks DIR)")
    if out.resolve() == notebook_dir.resolve() or notebook_dir.resolve() in out.resolve().parents:
        raise TRMError(f"--out {out} is inside {notebook_dir}: the executed notebooks would mix with the notebooks")
    # and `out` holding the notebooks folder (`out/executed`), as the command checks both
    check_kept(*regress_io(notebook_dir, out, "notebook_dir", "out"))
    if jobs is not None:  # NaN passed `jobs < 1` and ran "nan at a time"
        try:
            jobs = whole_argument("jobs", jobs, 1, 1024)
        except ValueError as e:
            raise TRMError(f"--{e}") from None
    if timeout is not None:  # a notebook's whole time (TIMEOUT_S); NaN, 0 or less would stop none or every one
        try:
            timeout = number_argument("timeout", timeout, 1e-3, 1e9)
        except ValueError as e:
            raise TRMError(f"--{e}") from None
    # one writer per folder (trm_kaggle.locks): an update holds the notebooks folder (baselines.json and golden/
    # are read at the start and written at the end: a second update would drop the first one's values), a
    # comparison shares it with other comparisons; --out is held from its first write
    with contextlib.ExitStack() as held:
        held.enter_context(directory_lock(notebook_dir, "regress --update-baselines" if update else "regress",
                                          shared=not update, required=update))
        return _regress(names, out, update, notebook_dir, jobs, say, warn, held, timeout)


def _run_all(chosen: list[str], notebook_dir: Path, out: Path, update: bool, workers: int,
             timeout: float | None = TIMEOUT_S) -> list[NotebookRun]:
    """Run the notebooks, `workers` at a time. A stop (Ctrl-C, SIGTERM) ends their kernels, waits for their threads
    (a second signal meanwhile is dropped: the first one's line comes) and removes the work folders they made."""
    kernels, made, replaced = Kernels(), [], []
    stops = FirstStopOnly()
    pool = ThreadPoolExecutor(max_workers=workers)
    work_made = not os.path.lexists(out / "work")
    said = _KernelDeathSaid()
    logging.getLogger("papermill").addFilter(said)
    try:
        runs = list(pool.map(lambda n: run_notebook(n, notebook_dir, out, update, kernels, made, timeout, replaced),
                             chosen))
        _put_back(replaced, stopped=False)
        _remove_if_empty(out / "work", work_made)
        return runs
    except BaseException:
        stops.hold()
        level = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # papermill's "Kernel died while waiting for execute reply": ours did it
        try:
            kernels.stop()
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            logging.disable(level)
        for work in made:  # ours, and of a run that did not end: nothing of it is kept
            shutil.rmtree(work, ignore_errors=True)
        _put_back(replaced, stopped=True)
        _remove_if_empty(out / "work", work_made)
        raise
    finally:
        pool.shutdown(wait=True)
        logging.getLogger("papermill").removeFilter(said)
        stops.give_back()


def _put_back(replaced: list, stopped: bool) -> None:
    """The executed notebooks the notebooks of one run replaced (`run_notebook`'s `replaced`): dropped once every
    notebook has ended; put back when the run was stopped (a notebook that ended before the stop replaced the
    previous run's, which report.md and history.jsonl still describe), and the new one removed where there was none."""
    for executed, aside in replaced:
        with contextlib.suppress(OSError):
            if stopped and aside is not None:
                os.replace(aside, executed)
            elif stopped:
                executed.unlink()
        if aside is not None:
            shutil.rmtree(aside.parent, ignore_errors=True)


def _save_update(moves: list[tuple[Path, Path]], baselines_path: Path, baselines: BaselinesFile,
                 say: Callable[[str], None], changed: int = 0) -> None:
    """The golden files clean `--update-baselines` runs staged (`moves`: each staging folder and its golden folder)
    and baselines.json, as one change: every place checked before the first write, stops held while they are
    written, and the golden files written before put back when a later write fails (a folder in the place of
    one, a full disk), so that they and baselines.json always describe one run. A stop that came meanwhile is let
    through once the `updated` lines are said: the update landed, and the `interrupted` line follows them."""
    from trm_kaggle.interrupts import stops_held

    files = [(f, golden / f.name) for staged, golden in moves for f in sorted(staged.iterdir())
             if f.is_file() and not f.is_symlink()]
    for golden in {g for _, g in moves}:
        golden.mkdir(exist_ok=True)
    for path in [dest for _, dest in files] + [baselines_path]:
        if problem := writable_problem(Output(path, "regression file", "file")):
            raise TRMError(problem)
    written: list[tuple[Path, bytes | None]] = []
    with stops_held():
        try:
            for f, dest in files:
                old = dest.read_bytes() if dest.is_file() else None
                atomic_write_bytes(dest, f.read_bytes())
                written.append((dest, old))
            save_baselines(baselines_path, baselines)
            for _, dest in files:  # said before a stop held meanwhile is let through: the update has landed
                say(f"updated {dest}")
            say(f"updated {baselines_path}: {count(changed, 'baseline')}")
        except BaseException:
            for dest, old in reversed(written):  # ours to put back: this command replaced them a moment ago
                with contextlib.suppress(OSError):
                    if old is None:
                        dest.unlink()
                    else:
                        atomic_write_bytes(dest, old)
            raise


def _holds_anything(folder: Path) -> bool:
    try:
        return any(folder.iterdir())
    except OSError:
        return True  # unreadable: left as it is


def _remove_if_empty(folder: Path, made: bool) -> None:
    """The folder of the notebooks' work folders, when this run made it and left it empty (a failed notebook's
    work folder stays in it for a look)."""
    if made:
        with contextlib.suppress(OSError):  # not empty, or gone
            os.rmdir(folder)


def _regress(names: Sequence[str], out: Path, update: bool, notebook_dir: Path, jobs: int | None,
             say: Callable[[str], None], warn: Callable[[str], None], held: contextlib.ExitStack,
             timeout: float | None = TIMEOUT_S) -> int:
    baselines_path = notebook_dir / BASELINES
    baselines = load_baselines(baselines_path)
    chosen = _check_request(names, notebook_dir, baselines, baselines_path, update)
    commit = git_commit(notebook_dir)
    if update:  # what the update replaces at its end, checked before any notebook runs (not after, --out holding
        # only executed/): baselines.json and the golden folder, each with the folder its atomic replace writes in
        for output in (Output(baselines_path, "regression file", "file"), Output(notebook_dir / GOLDEN, "golden/",
                                                                               "folder")):
            if problem := writable_problem(output):
                raise TRMError(problem)
    if update and commit.endswith("+dirty"):
        warn(f"warning: the checkout has uncommitted changes: the baselines record {commit}; commit the code "
             "first so that the commit names what produced them")

    held.enter_context(directory_lock(out, "regress"))
    workers = min(len(chosen), jobs or usable_cores())
    check_log(out / HISTORY)  # a link would have its target appended to: refused before the notebooks
    last = last_seconds(read_history(out / HISTORY, warn))  # before the notebooks: a FIFO or no permission stops
    chosen.sort(key=lambda n: -last.get(n, 0.0))  # longest first: the cores stay busy until the end
    say(f"running {count(len(chosen), 'regression notebook')} ({', '.join(map(shown, chosen))}), {workers} at a time")
    runs = _run_all(chosen, notebook_dir, out, update, workers, timeout)
    for r in runs:
        done = f"{count(len(r.metrics), 'metric')} in {r.seconds:.0f} s"
        say(f"{shown(r.name)}: " + (f"FAILED: {one_line(r.error)}" if r.error else done))

    rows: list[Row] = []
    problems: list[str] = []
    for r in runs:
        got, bad = compare(r, baselines.baselines[r.name], baselines_path)
        rows += got
        problems += bad
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    changed = 0
    updated: set[str] = set()
    try:
        if update:
            for r in runs:
                if r.error or any(p.startswith(f"{r.name}: ") for p in problems):
                    continue
                updated.add(r.name)
                for metric, b in baselines.baselines[r.name].items():
                    old = "none" if b.value is None else f"{b.value:g}"
                    b.value, b.commit, b.date = r.metrics[metric].value, commit, when[:10]
                    changed += 1
                    say(f"baseline {shown(r.name)}.{shown(metric)}: {old} -> {b.value:g}")
            if changed:  # the golden files of the notebooks whose baselines are set, with them
                _save_update([(r.staged, notebook_dir / GOLDEN) for r in runs if r.staged is not None
                              and r.name in updated], baselines_path, baselines, say, changed)
            else:  # never "updated" when nothing was: every notebook failed or missed a metric
                warn(f"note: {baselines_path} is unchanged: no notebook ran cleanly, so no baseline was set")
    finally:
        for r in runs:  # ours: moved in above, or of a run whose baselines were not set
            if r.staged is not None:
                shutil.rmtree(r.staged, ignore_errors=True)
    atomic_write_text(out / "report.md", report_markdown(rows, problems, runs, commit, when, changed > 0))
    append_history(out / HISTORY, commit, when, runs)

    # the verdict first, then the plots: they take a tenth of a second each
    for row in rows:
        if row.verdict == "improved" and not update:
            say(f"improved: {row.line} (beyond the tolerance: raise the baseline with --update-baselines)")
    regressed = [row for row in rows if row.verdict == "regressed"]
    for row in regressed:
        (say if update else warn)(f"{'accepted ' if update else ''}regression: {row.line}")
    for p in problems:
        warn(f"error: {one_line(p)}")
    plot_compared(out, rows, baselines, warn)
    say(f"report: {out / 'report.md'}; {count(len(rows), 'comparison')}: {len(regressed)} regressed, "
        f"{sum(row.verdict == 'improved' for row in rows)} improved, {len(problems):,} not compared")
    if problems:
        return 2
    return 1 if regressed and not update else 0
