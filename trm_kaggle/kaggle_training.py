"""One session of the Kaggle training kernel (notebooks/kaggle_train.py): resume, train to the time budget, save.

A Kaggle session lasts at most 12 hours; a long run is a chain of sessions, each given the previous one's
output (`/kaggle/working` of the kernel's previous version) as an input. A session:

1. checks and unpacks the packed datasets under the input root (the data, and a run's state attached as a
   dataset: an archive and a manifest of every file in it, `trm_kaggle.kaggle.packed`) into a scratch folder
   outside the working folder (`/kaggle/temp` on Kaggle); a file missing or changed is one error line; a run's
   state is unpacked and carried (4.) first, so that the data's refusal, a stop or an UNPACK_DIR that cannot be
   used still passes it on;
2. finds the dataset among the inputs (the folder holding `identifiers.json` and `train/`);
3. finds the newest complete train state in the previous output: every `state_step*.pt` among the inputs,
   the newest of each folder that loads (a truncated or corrupt one is skipped with a warning and the one
   before it used, as `trm-kaggle train` resumes); a folder whose newest state cannot be read (no permission,
   a FIFO) or whose every state is damaged, the states of two runs, a folder of the inputs that cannot be
   listed, and a state of another model or config, or of another dataset, are refused with one line and nothing
   is trained (a run is never silently restarted);
4. copies that state and the metrics log to `<working>/run/` (the inputs are read-only and stay untouched)
   and resumes there, with `time_limit` set to what is left of the budget minus a margin for the final
   save, export and picture, and a train state saved every `save_every_s` seconds (a session killed outright
   loses at most that much); an evaluation that would end after the limit is skipped; SIGINT or SIGTERM
   save a state and end the session (status "interrupted"); training stops at a step boundary with a full
   train state;
5. writes `<working>/weights/` (an export the submission bundle takes as `--weights`),
   `<working>/training_curve.png` and `<working>/session.json` (what the session did, in figures).

A SIGTERM, SIGHUP or SIGINT (Jupyter's interrupt) is the session's stop wherever it lands (`_SessionStops`): before
the training it ends the session "interrupted" with nothing trained; once the training has ended, the export and the picture (seconds of
work on a state already saved) are finished first and the stop is noted in the report.

A run that had reached its last step says so and only exports. Every problem is one line starting with
`error:` in the kernel log and a `session.json` with `"ok": false`; `run_session` never raises (the notebook
must finish, so that its output, the previous state included, becomes the next session's input).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping, Sequence


from trm_kaggle.atomic import atomic_write_json, replace_problem
from trm_kaggle.config import (MAX_SAVE_EVERY_S, TrainConfig, path_argument, seconds_argument, sequence_argument,
                               texts_argument, whole_argument)
from trm_kaggle.errors import TRMError
from trm_kaggle.outputs import SESSION_RECORD
# the watch of the notebook's runner (the kernel's; its private names stay reachable here for the session's tests)
from trm_kaggle.runner_watch import training
from trm_kaggle.wording import clipped, escaped_echo, one_line, type_name

log = logging.getLogger(__name__)

RUN = "run"  # the run directory under the working folder
WEIGHTS = "weights"  # the export
CURVE = "training_curve.png"
SESSION = SESSION_RECORD  # the session's record (`outputs.SESSION_RECORD`: a pipeline refuses a folder holding one)
DEFAULT_BUDGET = 11.5 * 3600  # seconds: Kaggle stops a session at 12 h
MAX_SESSION_SECONDS = 10**7  # a budget or margin past 115 days is a slip (a number printed in 301 digits)
MAX_SESSION_STEPS = 10**9  # a cap on the steps of one session (a Kaggle session of 12 hours makes far fewer)
DEFAULT_MARGIN = 600.0  # seconds kept for the final save, the export and the picture
DEFAULT_SAVE_EVERY = 300.0  # seconds between timed train states: a session killed outright loses at most this
MAX_RECORD_BYTES = 1 << 20  # an earlier kernel run's record over this is not read (one this version writes is small)
# what a session passes on where the only word of the run's state among its inputs is a record that cannot be read
# (the notebook's first cell writes the same words): the next session refuses too, as for a state named
UNREAD_RECORD = "the state named in {}, a record that cannot be read"
SCRATCH = "trm-kaggle-inputs"  # the unpacked datasets, under /kaggle/temp (never in the kernel's output)
UNPACKED_ENTRIES = "*-" + "[0-9a-f]" * 16 + "*"  # what unpacking writes there: <name>-<digest>, its temporaries


@dataclass
class SessionReport:
    ok: bool = False
    status: str = ""  # trained | done | refused | error
    message: str = ""
    start_step: int = 0
    step: int = 0
    target_step: int = 0
    resumed_from: str | None = None
    stopped_by: str = ""
    seconds: float = 0.0
    weights: str | None = None
    curve: str | None = None
    notes: list[str] = field(default_factory=list)
    # the newest train state among the inputs, which the session passes on (copied into its run folder); a
    # session stopped before the copy still names it, and the next one refuses rather than start the run over (where
    # the inputs held no state and an earlier kernel run's record that cannot be read: `UNREAD_RECORD`, naming it)
    previous_state: str | None = None


class _SessionStops:
    """SIGINT (Jupyter's interrupt), SIGTERM and SIGHUP for the whole session; the training takes them itself while
    it runs (and saves). Before it, the first one raises (`Terminated`, or KeyboardInterrupt for SIGINT) once the
    previous state is carried into the session's output (`carried`: a stop in the session's first second passed
    no state on) (the session ends "interrupted", nothing trained; the inputs are read-only and the run folder is
    written atomically); once the training has ended (`trained()`), a stop is noted and the export and the picture
    go on: in a Jupyter kernel such a signal was left to its default and ended the kernel, leaving session.json
    saying the session never finished while its run was done. An ignored SIGINT or SIGHUP stays ignored. Only
    the main thread can take a handler: elsewhere nothing changes."""

    def __init__(self) -> None:
        self.came: int | None = None  # the first stop this took
        self.late: int | None = None  # the first that came once the training had ended (noted, not raised)
        self.after_training = False
        self.carrying = True  # until the previous train state is copied into the working folder (`carried`)
        self.previous: dict[int, object] = {}

    def __enter__(self) -> "_SessionStops":
        from trm_kaggle import interrupts

        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, *interrupts.TERMINATING):
                if interrupts.taken(signum):
                    self.previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum, frame) -> None:
        from trm_kaggle.interrupts import Terminated

        first = self.came is None
        self.came = self.came or signum
        if self.after_training:
            self.late = self.late or signum
        elif first and not self.carrying:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    def carried(self) -> None:
        """The previous train state is in the working folder (or there is none): a stop that came meanwhile is
        raised now, and later ones at once."""
        self.carrying = False
        if self.came is not None and not self.after_training:
            from trm_kaggle.interrupts import Terminated

            raise KeyboardInterrupt if self.came == signal.SIGINT else Terminated(self.came)

    def trained(self) -> None:
        """The training is over: a stop from here on waits for the export and the picture."""
        self.after_training = True


def default_scratch() -> Path:
    """Where packed datasets are unpacked: /kaggle/temp on Kaggle (scratch, not the kernel's output, which
    becomes the next session's input), else the system's temporary folder."""
    kaggle_temp = Path("/kaggle/temp")
    if kaggle_temp.is_dir() and os.access(kaggle_temp, os.W_OK):
        return kaggle_temp / SCRATCH
    user = f"-{os.getuid()}" if hasattr(os, "getuid") else ""  # one folder per user on a shared machine
    return Path(tempfile.gettempdir()) / f"{SCRATCH}{user}"


def packed_datasets(input_root: Path) -> tuple[list[Path], list[Path]]:
    """The folders of the packed datasets under the input root, in `open_all`'s order (`manifest_folders`), as (those whose manifest
    lists a train state or a session's record: a run-state dataset, `--continue-from`; the others: the data). A
    manifest that cannot be read counts with the others: opening it refuses, once the state is carried."""
    from trm_kaggle.kaggle import ARCHIVE_KEY, manifest_folders, packed_manifest

    holding, others = [], []
    if not input_root.is_dir():
        return holding, others
    for folder in manifest_folders(input_root):
        try:
            manifest = packed_manifest(folder)
        except (TRMError, OSError, RecursionError):
            others.append(folder)
            continue
        if manifest is None:
            continue
        files = manifest[ARCHIVE_KEY].get("files") if isinstance(manifest[ARCHIVE_KEY], dict) else None
        names = [PurePosixPath(rel).name for rel in files if isinstance(rel, str)] if isinstance(files, dict) else []
        state = any(name == SESSION or fnmatch.fnmatchcase(name, "state_step*.pt") for name in names)
        (holding if state else others).append(folder)
    return holding, others


def _unlisted_archive(input_root: Path, packed: list[Path], pattern: str) -> Path | None:
    """The first archive matching `pattern` (`run-state.tar` of `--continue-from`, or any packed dataset's) under
    the input root outside the packed datasets found (`packed`: its manifest missing, unreadable, or not the kind
    looked for), else None."""
    try:
        return next((p for p in sorted(input_root.rglob(pattern)) if p.parent not in packed), None)
    except OSError:  # an input that cannot be walked: the carry has named its problem
        return None


def _unlisted_folder(input_root: Path) -> tuple[Path, str] | None:
    """(the first folder under the input root that cannot be listed, what the system said), or None: the searches
    for states and manifests pass such a folder by without a word (a run-state dataset of mode 000 started the run
    over)."""
    failed: list[OSError] = []
    for _ in os.walk(input_root, onerror=lambda e: failed.append(e) if not isinstance(e, FileNotFoundError) else None):
        if failed:
            break
    if not failed:
        return None
    return Path(failed[0].filename or input_root), failed[0].strerror or str(failed[0])


def find_dataset(roots: Path | Sequence[Path], sources: Mapping[Path, Path] | None = None) -> Path | None:
    """The one dataset folder (identifiers.json + train/dataset.json) under the input roots, or None. `sources`:
    {a packed dataset's folder as unpacked: that dataset among the inputs}, which the refusal of two datasets names
    (the unpacked copies are temporary folders the user never attached)."""
    roots = [roots] if isinstance(roots, Path) else list(roots)
    found = sorted({p.parent.resolve() for root in roots for p in root.rglob("identifiers.json")
                    if (p.parent / "train" / "dataset.json").is_file()})
    if len(found) > 1:
        shown = ", ".join(_input_of(p, sources or {}) for p in found[:4])
        raise TRMError(f"{len(found)} datasets among the inputs ({shown}): set DATA_DIR to the one to train on, or "
                       "detach the others")
    return found[0] if found else None


def _input_of(dataset: Path, sources: Mapping[Path, Path]) -> str:
    """`dataset` (resolved) as the user attached it: the packed dataset it was unpacked from, else itself."""
    for unpacked, packed in sources.items():
        at = unpacked.resolve()
        if dataset == at:
            return f"{packed} (packed)"
        if at in dataset.parents:
            return f"{dataset.relative_to(at)} in the packed dataset {packed}"
    return str(dataset)


def previous_state(roots: Path | Sequence[Path], exclude: Path, skip: Sequence[Path] = ()
                   ) -> tuple[Path, dict[str, Any]] | None:
    """(path, state) of the newest train state that loads among the run folders under the input roots (None
    when there is none), read as `trm-kaggle train` resumes (`load_newest_state`: a damaged newer state is
    skipped for the one before it). A folder with states of which none can be used (the newest unreadable: no
    permission, a FIFO; or every one damaged) is TRMError: a new run from step 0 would throw its steps away; so
    are the newest states of two runs (their run ids differ): which one the user meant is not for the session to
    guess, and the newer one of another config once replaced the good one in the output. States under a folder of
    `skip` (a packed dataset's, which Kaggle may have unpacked in place) are read only from a root inside it: that
    dataset's folder once checked against its manifest (`open_packed`), never before."""
    from trm_kaggle.train import checkpoint as ckpt

    roots = [roots] if isinstance(roots, Path) else list(roots)

    def skipped(path: Path, root: Path) -> bool:
        return any(s in path.parents and not (root == s or s in root.parents) for s in skip)

    found = [(p, root) for root in roots for p in root.rglob("state_step*.pt") if not skipped(p, root)]
    for p, root in found:  # as build_bundle.py --continue-from packs a downloaded output: its own files only
        top, target = os.path.realpath(root), os.path.realpath(p)
        if os.path.commonpath([top, target]) != top:
            raise TRMError(f"the previous output cannot be resumed: {p}: a symbolic link to {target}, outside the "
                           f"inputs {root}: a train state is read from the inputs' own files only; copy the file "
                           "in, or remove the link")
    folders = sorted({p.parent.resolve() for p, _ in found} - {exclude.resolve()})
    best, runs = None, {}
    for folder in folders:
        try:
            path, state = ckpt.load_newest_state(folder)  # never quarantines: the inputs are read-only
        except TRMError as e:
            raise TRMError(f"the previous output cannot be resumed: {e}; refusing to start a new run over it "
                           "(make the state readable, or detach that output to start afresh)") from None
        if isinstance(owner := state.get("run_id"), str):
            runs.setdefault(owner, path)
        if best is None or int(state["step"]) > int(best[1]["step"]):
            best = (path, state)
    if len(runs) > 1:
        (a, pa), (b, pb) = list(runs.items())[:2]
        raise TRMError(f"the inputs hold the train states of {len(runs)} runs ({pa}, run id {clipped(a, 16)}; {pb}, "
                       f"run id {clipped(b, 16)}): refusing to guess which one to resume; detach the outputs of "
                       "the run not to continue")
    return best


def refuse_other_run(path: Path, state: dict[str, Any], cfg: TrainConfig) -> None:
    """TRMError when the previous state belongs to another model or config (or holds settings this version cannot
    read), or was trained on other data."""
    from trm_kaggle.train import checkpoint as ckpt, config_differences

    saved = ckpt.saved_config(path, state)  # a newer version's settings: named, as `trm-kaggle train` names them
    if said := config_differences(saved, cfg):
        raise TRMError(f"the previous output {path} holds a run of another model or config ({said}); refusing "
                       "to resume it or to start over: detach that output, or build the kernel with its settings")
    fingerprint = ckpt.dataset_fingerprint(cfg.data_paths)
    if state.get("dataset_fingerprint") != fingerprint:
        raise TRMError(f"the previous output {path} was trained on another dataset (fingerprint "
                       f"{state.get('dataset_fingerprint')} != {fingerprint} of {cfg.data_paths[0]}); refusing to "
                       "resume it: attach the dataset it was trained on")


def copy_state(path: Path, run_dir: Path) -> Path:
    """The state file (and the run's metrics.jsonl, config.json) copied into run_dir, each renamed into place
    whole (a copy cut short leaves a temporary the next start removes, never a truncated state). A state that is no
    file is TRMError naming it (a missing one returned its would-be copy, nothing copied)."""
    if not Path(path).is_file():
        raise TRMError(f"copy_state: the train state {path} is not a file (missing, or a folder): nothing to copy")
    run_dir.mkdir(parents=True, exist_ok=True)
    for src in (path, path.parent / "metrics.jsonl", path.parent / "config.json"):
        if src.is_file():
            tmp = run_dir / f".{src.name}.copy.tmp"
            shutil.copyfile(src, tmp)
            os.replace(tmp, run_dir / src.name)
    return run_dir / path.name


def schedule_end(cfg: TrainConfig) -> int:
    """The step a run of `cfg` ends at: max_steps, or the end of its schedule (upstream's formula)."""
    from trm_kaggle.data import PuzzleLoader
    from trm_kaggle.train import total_train_steps

    loader = PuzzleLoader(cfg.data_paths, "train", cfg.global_batch_size, seed=cfg.seed)
    total = total_train_steps(cfg.epochs, loader.total_groups, loader.metadata.mean_puzzle_examples,
                              cfg.global_batch_size)
    return min(total, cfg.max_steps) if cfg.max_steps else total


def _seconds(value: object) -> float | None:
    """`value` as a finite float when it is a real number (no bool: True is no time), else None: the config's one
    rule (an integer too large for a float, 10**400, is none either: its OverflowError ended a call that never
    raises), said here in the session's own line."""
    try:
        return seconds_argument("seconds", value)
    except ValueError:
        return None


def _seconds_or(value: object, default: float) -> float:
    """`_seconds(value)`, or `default` where it is None (0.0 is a time: `or` would take it for none)."""
    number = _seconds(value)
    return default if number is None else number


def run_session(*, input_root: str | os.PathLike, working: str | os.PathLike, preset: Sequence[str] | str = (),
                overrides: Any = (), data_dir: str | os.PathLike | None = None,
                time_budget: float | None = DEFAULT_BUDGET, margin: float = DEFAULT_MARGIN,
                session_steps: int | None = None, started: float | None = None,
                save_every_s: float | None = DEFAULT_SAVE_EVERY, scratch: str | os.PathLike | None = None,
                stopped: Sequence[int] = (), device: str | None = None,
                echo: Callable[[str], None] = print) -> SessionReport:
    """One session (see the module docstring); never raises. `session_steps` caps the steps this Kaggle session
    trains (a deterministic stand-in for the time budget); `started` is when the kernel started (time.time(),
    default now): the install before this call counts against the budget. `save_every_s` (None: off; a
    `save_every_s=` in `overrides` wins) spaces the timed train states; `scratch` is where packed datasets are
    unpacked (default `default_scratch()`). `stopped` holds the stop signals that came before this call (the
    notebook's first cell notes them during the install): read once the session's own handler is in place, the
    first one ends the session "interrupted" as soon as the previous state is carried. `overrides` takes each
    form `train.override_list` reads (the notebook's OVERRIDES as it is: read after the carry, so that one it cannot
    read still passes the state on); `device` (None or "auto": the preset's) is set after them. An argument of the
    wrong type is status "error" with one line naming it (`_arguments`): a `working` or `input_root` of the wrong
    type writes nothing, the others are said in the record once the working folder is checked; a wrong `echo`'s
    line is printed, and an `echo` that raises is noted in the record (`_kept_going`)."""
    started = time.time() if started is None else started
    report = SessionReport()
    try:  # where the session writes and what it reads first: one of the wrong type, and nothing is written
        working = Path(path_argument("working", working, "the working folder"))
        input_root = Path(path_argument("input_root", input_root, "the folder of the inputs"))
    except (TypeError, TRMError) as e:  # of the wrong type, or empty (taken as the current folder)
        report.status, report.message = "error", str(e)
        escaped_echo(echo if callable(echo) else print)(f"error: {e}")
        return report
    try:  # the other arguments of the wrong type: refused once the working folder is checked (`_session`)
        presets, data_dir, scratch, first_stop = _arguments(preset, data_dir, scratch, stopped, echo)
        wrong = None
    except (TypeError, ValueError, TRMError) as e:  # TRMError: an empty path
        presets, scratch, first_stop, wrong = [], None, None, TRMError(str(e))
    # a folder found below the inputs may hold an escape sequence or a newline; a wrong echo: its line still said
    echo = escaped_echo(_kept_going(echo, report) if callable(echo) else print)
    stops = _SessionStops()
    nowhere = False
    # the whole session, its record included: a stop never ends the kernel mid-way, nor does its runner's end
    with training(), stops:
        if first_stop is not None and stops.came is None:  # after the handler is in place: no signal between the two
            stops.came = first_stop
        def settings() -> tuple[list[str], int | None]:
            """The timed saves' override and the step cap, or TRMError: asked after the previous state is carried,
            so that a setting refused here still passes the state on (refused before the carry, the record named
            no state and the next session started the run over from step 0)."""
            # NaN would mean "no limit"; a margin of None is none (it is kept whether or not a budget is set)
            for name, value in (("time_budget", time_budget), ("margin", margin)):
                if (value is not None or name == "margin") and not 0 <= _seconds_or(value, -1.0) <= MAX_SESSION_SECONDS:
                    raise TRMError(f"{name} {clipped(value, 40)}: a number of seconds from 0 to {MAX_SESSION_SECONDS:,}"
                                   + (", or None for no limit" if name == "time_budget" else ""))
            # when the kernel started: NaN made the budget no limit at all, a time to come stretched it
            if (when := _seconds(started)) is None or when > time.time() + 1:
                raise TRMError(f"started {clipped(started, 40)}: the time the kernel started (time.time(), not later "
                               "than now), or None for now")
            if save_every_s is not None and not 0 < _seconds_or(save_every_s, 0.0) <= MAX_SAVE_EVERY_S:
                raise TRMError(f"save_every_s {clipped(save_every_s, 40)}: a number of seconds above 0 and at most "
                               f"{MAX_SAVE_EVERY_S:,}, or None for no timed saves")
            if session_steps is None:
                return ([] if save_every_s is None else [f"save_every_s={float(save_every_s)}"]), None
            try:  # -1 once blamed a budget that was not set; numpy's 3 was refused
                steps = whole_argument("session_steps", session_steps, 1, MAX_SESSION_STEPS)
            except ValueError as e:
                raise TRMError(f"{e}, or None for no cap") from None
            return ([] if save_every_s is None else [f"save_every_s={float(save_every_s)}"]), steps

        try:
            _session(report, input_root, working, presets, (settings, overrides, device, wrong), data_dir,
                     time_budget, margin, started, scratch, echo, stops)
        except KeyboardInterrupt as e:  # SIGINT/SIGTERM (TrainingInterrupted): the state is saved; the next session
            stops.trained()  # resumes from it; a later stop waits for the export and this record
            report.ok, report.status = False, "interrupted"
            if hasattr(e, "step"):
                report.step, report.stopped_by = e.step, signal.Signals(e.signum).name
                report.message = (f"stopped by {report.stopped_by} at step {e.step}: train state saved to {e.path}; "
                                  "run the kernel again (a new version) to continue from it")
                _export_interrupted(report, working, echo)
                report.notes.append("no training curve: the session was stopped (its weights come first; the next "
                                    "session draws the curve)")
            else:  # before the training (Terminated), or a second stop (at once): the newest state saved stands
                report.stopped_by = signal.Signals(e.signum).name if hasattr(e, "signum") else "SIGINT"
                report.message = f"stopped by {report.stopped_by} before it finished: " + (
                    "the next session resumes from the newest state saved in this output"
                    if any((working / RUN).glob("state_step*.pt")) else
                    f"the train state {report.previous_state} was not passed on (the next session refuses to start "
                    "the run over)" if report.previous_state else "it had no train state to pass on")
            echo(report.message)
        except TRMError as e:
            report.ok, report.status, report.message = False, report.status or "error", str(e)
            echo(f"error: {e}")
            nowhere = isinstance(e, _NowhereToWrite)  # not even the record goes where the session may not write
        except Exception as e:  # noqa: BLE001 (the kernel must finish: its output is the next session's input)
            report.ok, report.status = False, "error"
            report.message = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
            if _is_out_of_memory(e):
                report.message = (f"out of memory ({report.message}): the preset does not fit this device; set "
                                  "auto_batch=True, a smaller global_batch_size or another preset")
            echo(f"error: {report.message}")
            log.debug("%s", traceback.format_exc())
        stops.trained()  # (after an error too: the record below is written whatever comes)
        if stops.late is not None:
            late = signal.Signals(stops.late).name
            report.notes.append(f"{late} came once the training had ended: the export and the session's record were "
                                "finished first")
            echo(f"{late} came once the training had ended: export and record finished")
        report.seconds = round(time.time() - _seconds_or(started, time.time()), 1)  # a refused start: 0 s
        try:
            if nowhere:
                return report
            working.mkdir(parents=True, exist_ok=True)
            atomic_write_json(working / SESSION, asdict(report), indent=2)
        except OSError as e:
            echo(f"error: could not write {working / SESSION}: {e}")
    return report


def _arguments(preset: object, data_dir: object, scratch: object, stopped: object, echo: object
               ) -> tuple[list[str], str | os.PathLike | None, Path | None, int | None]:
    """run_session's presets, data_dir, scratch (None: `default_scratch()`, asked once the working folder is
    checked) and the first of `stopped`, or the TypeError or ValueError naming the argument of the wrong type
    (None and 5 as a path, a preset None, a stop 'x' or 999 reached pathlib, iter() or int() with no name)."""
    from trm_kaggle.interrupts import TERMINATING

    if not callable(echo):
        raise TypeError(f"echo: expected a function taking one line of text (print), got {type_name(echo)}")
    presets = texts_argument("preset", preset, "a preset name")
    data_dir = path_argument("data_dir", data_dir, "the dataset's folder", optional=True)
    scratch = path_argument("scratch", scratch, "the folder to unpack into", optional=True)
    stops = [whole_argument(f"stopped[{i}]", s, 1, signal.NSIG - 1)
             for i, s in enumerate(sequence_argument("stopped", stopped, "signal numbers"))]
    for i, signum in enumerate(stops):
        if signum not in (signal.SIGINT, *TERMINATING):
            raise ValueError(f"stopped[{i}]={signum}: expected the number of a stop signal the session takes "
                             f"({', '.join(signal.Signals(s).name for s in (signal.SIGINT, *TERMINATING))})")
    return presets, data_dir, None if scratch is None else Path(scratch), stops[0] if stops else None


def _kept_going(echo: Callable[[str], None], report: SessionReport) -> Callable[[str], None]:
    """`echo`, whose first exception is noted in the report and ends its lines, never the session: raised on the
    line of the weights, it left the run and the export without a session.json."""
    broken: list[str] = []

    def say(line: str) -> None:
        if broken:
            return
        try:
            echo(line)
        except Exception as e:  # noqa: BLE001 (run_session never raises: its record is the next session's word)
            broken.append(f"echo raised {type(e).__name__}: {one_line(str(e)[:200])}; its later lines were not said")
            report.notes.append(broken[0])

    return say


class _NowhereToWrite(TRMError):
    """The working folder is refused (an input, or inside one; inside a folder this package builds whole): the
    session writes nothing there, its record included."""


def _export_interrupted(report: SessionReport, working: Path, echo: Callable[[str], None]) -> None:
    """An interrupted session's weights, exported from the state it just saved (the last thing it does: the
    stop may be followed by a kill)."""
    from trm_kaggle.train import checkpoint as ckpt

    try:
        report.weights = str(ckpt.export_run(working / RUN, working / WEIGHTS))
        echo(f"weights: {report.weights} (exported from the saved state)")
    except (TRMError, OSError) as e:
        report.notes.append(f"export skipped: {e}")


def named_state(input_root: Path) -> str | None:
    """The newest train state file among the inputs by its name, else the one an attached output's record
    (`session.json`) names as the state it had to pass on, else, where a record cannot be read (larger than
    `MAX_RECORD_BYTES`, not UTF-8 JSON, not a regular file), `UNREAD_RECORD` naming the first such, or None. A
    record that names a state in an output that holds none was left by a kernel run stopped before it copied the
    state (killed during its install, its runner gone): the run must not start over from step 0; one that cannot
    be read may be such a record (of another version, or damaged). The notebook's first cell (`state_to_pass_on`)
    answers the same, with the standard library alone."""
    return _passed_on(input_root)[0]


def _passed_on(roots: Path | Sequence[Path]) -> tuple[str | None, str | None]:
    """(`named_state`'s answer, and where it is `UNREAD_RECORD` the line that says why that record cannot be read),
    for the input root as mounted or with the folders of its unpacked run-state datasets: a run-state dataset
    carries the previous kernel run's record in its archive."""
    from trm_kaggle.jsonio import parse_json, read_bytes
    from trm_kaggle.train import checkpoint as ckpt

    roots = [roots] if isinstance(roots, Path) else list(roots)
    try:
        states = [(step, p) for root in roots for p in root.rglob("state_step*.pt")
                  if (step := ckpt.state_step(p)) is not None]
        if states:
            return str(max(states)[1]), None
        unread = None
        for record in [r for root in roots for r in sorted(root.rglob(SESSION))]:
            try:
                named = parse_json(read_bytes(record, "session record", max_bytes=MAX_RECORD_BYTES), str(record),
                                   "session record")
            except (TRMError, OSError) as e:  # it may name the state: said unless a readable record names one
                unread = unread or (record, str(e))
                continue
            if isinstance(named, dict) and isinstance(named.get("previous_state"), str):
                return named["previous_state"], None
        if unread is not None:
            return UNREAD_RECORD.format(unread[0]), unread[1]
    except (OSError, RecursionError):  # an input that cannot be walked: the carry names its problem
        pass
    return None, None


def working_folder_problem(working: str | os.PathLike, what: str = "working") -> str | None:
    """Why `working` may not take a session's run/, weights/ and session.json (None when it may), asked before
    anything is written there: it is, or lies inside, a training run folder, a sweep's folder or a submit's work
    folder, or it is a pipeline's or a launch's folder (the session trained beside their files and replaced a
    pipeline's weights/ export), the command folder rules of `solve.others_folder_problem` and
    `outputs.command_folder_problem`; or it cannot be written (refused then, its record included: the one line
    says why)."""
    from trm_kaggle.outputs import Output, command_folder_problem, in_a_work_dir_problem, writable_problem
    from trm_kaggle.solve import others_folder_problem

    return (others_folder_problem(working, what) or command_folder_problem(working, what)
            or in_a_work_dir_problem(working, what) or writable_problem(Output(working, what, "folder")))


def _refuse_link(folder: Path) -> None:
    """TRMError when the session's run or export folder is a symbolic link: written through, the states went where
    it points and the output (the next session's input) held only the link."""
    if folder.is_symlink():
        raise TRMError(f"{folder} is a symbolic link to {os.path.realpath(folder)}: the session's run and export are "
                       "never written through a link (only the working folder is kept); remove the link")


def _is_out_of_memory(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def _session(report: SessionReport, input_root: Path, working: Path, presets: list[str], given: tuple,
             data_dir, time_budget, margin, started, scratch, echo, stops: _SessionStops) -> None:
    from trm_kaggle.kaggle import RUN_STATE_ARCHIVE, open_packed, packed_manifest
    from trm_kaggle.pipeline import write_training_curve
    from trm_kaggle.train import checkpoint as ckpt, load_train_config, override_list, train

    from trm_kaggle.kaggle.bundle import check_kernel_overrides
    from trm_kaggle.interrupts import stops_held
    from trm_kaggle.locks import refuse_if_held
    from trm_kaggle.outputs import Input, Output, check_kept

    run_dir = working / RUN
    settings, overrides, device, wrong = given
    try:  # where the session writes, before any data is opened or step trained: a KAGGLE_WORKING inside a dataset
        # or a folder this package builds whole trained a whole session there, then refused only its export
        try:
            check_kept([Input(input_root, "KAGGLE_INPUT", tree=True)],  # a previous output as the working folder
                       [Output(run_dir, "run folder", "folder"),  # was trained in and its record replaced
                        Output(working / WEIGHTS, "weights", "replaced"), Output(working / SESSION, "session record")])
            if problem := working_folder_problem(working):
                raise TRMError(problem)
            # another session training here (the notebook run twice at once): its record is its own, and so is
            # its run folder (the carry copied states into it); the refusal is said on the console alone
            refuse_if_held(run_dir)
        except TRMError as e:
            raise _NowhereToWrite(str(e)) from None
        _refuse_link(run_dir)  # before the carry, which writes there (weights/: after it, the state passed on)
        if wrong is not None:  # an argument of the wrong type (`_arguments`): said in the working folder's record
            report.status = "error"
            raise wrong
    except TRMError:
        report.status = report.status or "refused"
        if not isinstance(report.previous_state, str):  # named in the record: the next session never starts over
            report.previous_state = named_state(Path(input_root))
        raise
    scratch = default_scratch() if scratch is None else scratch
    in_place = bool(ckpt.list_states(run_dir))  # this Kaggle session already trained (the notebook run again)

    def carry(where: Path | list[Path], carried=None) -> tuple[Path, dict[str, Any]] | None:
        """The previous output's newest state (when newer than `carried`), copied into the working folder
        before anything can refuse (its data not attached yet or damaged, other settings) or stop it: the next
        session resumes from it (an output of no state made the next one start from step 0). A stop during the
        copy waits for its end."""
        try:
            found = previous_state(where, run_dir, skip=holding)
        except TRMError:  # the record names a state there: the next session refuses too, never starts over
            report.status = "refused"
            report.previous_state = report.previous_state or _passed_on(where)[0]
            raise
        if found is None or (carried is not None and int(found[1]["step"]) <= int(carried[1]["step"])):
            return carried
        report.previous_state = str(found[0])
        with stops_held():
            copy_state(found[0], run_dir)
        report.start_step = report.step = int(found[1]["step"])
        echo(f"previous output: {found[0]} (step {report.step}) copied to {run_dir}")
        return found

    # the attached outputs first, as they are (an earlier kernel run's output is a plain folder), before the packed
    # datasets are checked and unpacked (a changed data.tar, or a stop during its unpacking, would pass no state);
    # a SIGTERM before the state is carried waits for it (one in the kernel run's first second passed none on)
    unread = None  # why an earlier kernel run's record cannot be read, where that record is what this run passes on
    # the packed datasets: a run-state dataset Kaggle unpacked in place is read as one once its manifest passed
    holding, others = packed_datasets(Path(input_root))
    if not in_place:  # named in the record first: a refused or stopped kernel run still passes the name on
        report.previous_state, unread = _passed_on(Path(input_root))
    carried = None if in_place else carry(Path(input_root))

    def check_unpack_dir(where: Path = scratch, name: str = "UNPACK_DIR") -> None:
        """Unpacked into an input, or into the working folder (the next session's input): two datasets there."""
        try:
            check_kept([Input(input_root, "KAGGLE_INPUT", tree=True),
                        Input(working, "working folder (KAGGLE_WORKING, the next session's input)", tree=True)],
                       [Output(where, name, "folder", writes=(UNPACKED_ENTRIES,))])
            made = next(p for p in (where, *where.parents) if p.exists() or p.is_symlink())  # "/" always is
            if not made.is_dir() or not os.access(made, os.W_OK | os.X_OK):
                raise TRMError(f"{name} {where}: {made} is " + ("a folder this process may not write in" if
                               made.is_dir() else "not a folder") + ": nothing can be unpacked there")
        except TRMError:
            report.status = "refused"
            raise

    # a run-state dataset (--continue-from: the previous output packed) is unpacked and carried next, before the
    # data dataset is (its archive cut or changed) or anything else can refuse, and before a stop is let through:
    # unpacked after them, a refused or stopped session passed no state on. An UNPACK_DIR it cannot be unpacked
    # into is refused after the carry, the state unpacked into a fresh temporary folder of the session's own
    # (removed once the state is copied); only its own archive damaged leaves the state nowhere to be read.
    refused, own = None, None
    if holding:
        try:
            check_unpack_dir()  # before anything is written there
        except TRMError as e:
            refused, own = e, Path(tempfile.mkdtemp(prefix="trm-kaggle-run-state-"))
            try:
                check_unpack_dir(own, "a temporary folder for the run-state dataset")
            except TRMError:
                shutil.rmtree(own, ignore_errors=True)
                raise refused from None
    unopened: tuple[Path, TRMError] | None = None  # the first run-state dataset that cannot be opened, and why
    sources: dict[Path, Path] = {}  # {a packed dataset as unpacked: that dataset among the inputs}
    try:
        opened = []
        for folder in holding:  # one damaged dataset never keeps the state of a good one beside it from the carry
            try:
                opened.append(open_packed(folder, own or scratch, say=echo))
                sources[opened[-1]] = folder
            except TRMError as e:
                unopened = unopened or (folder, e)
        state_roots = [Path(input_root), *opened]
        if not in_place and opened:
            carried = carry(state_roots, carried)
            if carried is None and not report.previous_state:  # its record, read as an attached output's is: one
                report.previous_state, unread = _passed_on(state_roots)  # naming a state it holds no more refuses
    finally:
        if own is not None:  # ours, made above: the state is copied into the run folder (or nothing was carried)
            shutil.rmtree(own, ignore_errors=True)
    if not in_place and unopened is None and \
            (stray := _unlisted_archive(Path(input_root), holding, RUN_STATE_ARCHIVE)) is not None:
        unopened = (stray, TRMError(
            f"{stray}: a packed run state whose folder has no manifest of a packed dataset "
            f"({stray.parent / 'manifest.json'} missing, unreadable, or without its 'archive' entry): its train state "
            "cannot be checked, and the run is never started over without a word; attach the run-state dataset as "
            "build_bundle.py --continue-from built it, or detach it to start afresh"))
    if not in_place and unopened is None and (hidden := _unlisted_folder(Path(input_root))) is not None:
        unopened = (hidden[0], TRMError(
            f"{hidden[0]}: a folder among the inputs that cannot be listed ({hidden[1]}): it may hold the run's train "
            "state, and the run is never started over without a word; make it readable, or detach it"))
    if unopened is not None:  # named in the record when nothing was carried: the next session refuses to start over
        report.status = "refused"
        if not in_place:
            report.previous_state = report.previous_state or str(unopened[0])
        raise unopened[1]
    if refused is not None:
        raise refused
    stops.carried()
    timed, session_steps = settings()  # the budget, the cap, the timed saves: an error once the state is here
    try:  # each refused after the carry: the refused session's output holds the state
        _refuse_link(working / WEIGHTS)
        overrides = [*timed, *override_list(overrides),
                     *([f"device={device}"] if device not in (None, "auto") else [])]
        # the session's own data and run folder must win (KERNEL_OWNED_KEYS); weights only from its own inputs
        check_kernel_overrides(overrides, input_root)
        if problem := replace_problem(working / WEIGHTS, "export", "weights"):  # a folder export_run won't replace
            raise TRMError(problem)
    except TRMError:
        report.status = "refused"
        raise
    check_unpack_dir()
    unpacked = [open_packed(folder, scratch, say=echo) for folder in others]
    sources.update(zip(unpacked, others))
    roots = [*state_roots, *unpacked]
    if not in_place and carried is None and report.previous_state:
        report.status = "refused"
        if unread is not None:  # a newer version's record, or one cut short, may name the state the run needs
            raise TRMError(f"no train state among the inputs, and an earlier kernel run's record cannot be read "
                           f"({unread}): it may name a state this run had to pass on; refusing to start the run "
                           "over; attach an output that holds the run's train state, or detach the output holding "
                           "that record to start a new run")
        raise TRMError(f"no train state among the inputs, yet an earlier kernel run's record names "
                       f"{report.previous_state}, which it had to pass on (it was stopped or refused before it "
                       "copied it): "
                       "refusing to start the run over; attach an output that holds that state (an earlier "
                       "version's output, as a dataset), or detach the previous output to start afresh")
    data = Path(data_dir) if data_dir else find_dataset(roots, sources)
    if data_dir and packed_manifest(data) is not None:  # DATA_DIR names the attached (packed) data dataset
        data = open_packed(data, scratch, say=echo)
    if data is None and (stray := _unlisted_archive(Path(input_root), [*holding, *others], "*.tar")) is not None:
        raise TRMError(f"no dataset under {input_root}: {stray} has no manifest of a packed dataset beside it "
                       f"({stray.parent / 'manifest.json'} missing, unreadable, or without its 'archive' entry), so it "
                       "cannot be checked or unpacked; attach the data dataset as build_bundle.py --dataset built it, "
                       "or set DATA_DIR")
    if data is None or not (data / "train" / "dataset.json").is_file():
        raise TRMError(f"no dataset under {input_root if data is None else data}: attach the data dataset "
                       "(build_bundle.py --dataset DIR) or set DATA_DIR")
    cfg = load_train_config(presets=presets, values={"data_paths": [str(data)], "checkpoint_path": str(run_dir)},
                            overrides=overrides)  # the folders as they are, never read as override text
    target = schedule_end(cfg)
    report.target_step = target
    echo(f"dataset: {data}; the run ends at step {target}")

    if in_place:  # the record says where the state came from, as it does for one carried from the inputs
        path, state = ckpt.load_newest_state(run_dir)
        start = int(state["step"])
        report.resumed_from = str(path)
        report.previous_state = report.previous_state or str(path)
        echo(f"resuming the states already in {run_dir} (step {start}: {path.name})")
    elif carried is None:
        start = 0
        echo(f"no previous train state under {input_root}: starting a new run")
    else:
        path, state = carried
        try:
            refuse_other_run(path, state, cfg)
        except TRMError:
            report.status = "refused"
            raise
        start = int(state["step"])
        report.resumed_from = str(path)
        echo(f"resuming from step {start}")
    report.start_step = report.step = start

    if start >= target:
        stops.trained()
        report.status = "done"
        if start > target:  # a previous output trained further (another max_steps): never "step 37 of 10"
            report.message = (f"already at step {start}, past step {target} where this kernel's settings end the "
                              "run (max_steps or the schedule): nothing to train; exporting only")
            echo(report.message)
        else:
            echo(f"the run is done: step {start} of {target}; exporting only")
    else:
        changes = {}
        if session_steps is not None:
            changes["max_steps"] = min(target, start + int(session_steps))
        if time_budget is not None:
            left = float(time_budget) - (time.time() - started) - float(margin)
            if left <= 0:
                raise TRMError(f"the time budget ({time_budget:.0f} s, {margin:.0f} s of it kept for the final save) "
                               f"leaves no time to train: raise TIME_BUDGET or lower SAVE_MARGIN; the previous "
                               "state is kept as it was")
            changes["time_limit"] = left
        cfg = cfg.model_copy(update=changes)
        echo(f"training from step {start} to step {min(cfg.max_steps or target, target)}"
             + (f", at most {changes['time_limit']:.0f} s" if "time_limit" in changes else "")
             + (f", a train state every {cfg.save_every_s:g} s" if cfg.save_every_s else ""))
        result = train(cfg, signals=True)
        stops.trained()
        report.step, report.stopped_by = result.step, result.stopped_by
        if result.new_steps == 0 and not result.already_done:
            raise TRMError(f"the time budget ended before one training step (step {start}): raise TIME_BUDGET "
                           "or lower SAVE_MARGIN; the previous state is kept as it was")
        for line in result.summary_lines():  # each said as one (the run folder's name may hold a newline)
            echo(line)
        report.status = "done" if result.step >= target else "trained"
        if report.status == "done":
            echo(f"the run is done: step {result.step} of {target}")
        else:
            echo(f"stopped at step {result.step} of {target} ({result.stopped_by or 'the session step budget'}); "
                 "run the kernel again (a new version) to continue")

    export = ckpt.export_run(run_dir, working / WEIGHTS)
    report.weights = str(export)
    echo(f"weights: {export} (build_bundle.py --weights takes this folder)")
    try:
        line = write_training_curve(run_dir, working / CURVE)
        # only a curve drawn just now: a file already there (older, or planted) is not it
        report.curve = str(working / CURVE) if line.startswith("training curve: ") else None
        echo(line)
    except (OSError, ValueError, TRMError) as e:  # a picture is never worth the session
        report.notes.append(f"training curve skipped: {e}")
    report.ok = True
