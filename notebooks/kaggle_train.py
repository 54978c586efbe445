# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # TRM training on Kaggle: one session of a run that spans several
#
# A Kaggle session lasts at most 12 hours. This kernel trains one run across as many sessions as it needs: each
# new version of the kernel gets the previous version's output as an input, finds the newest complete train
# state there, copies it to `/kaggle/working/run/` and resumes; it trains until its time budget (minus a margin
# for the final save), saves a train state every `SAVE_EVERY_S` seconds on the way (a session killed outright
# loses at most that much) and stops at a step boundary with a full train state, `metrics.jsonl`,
# `training_curve.png` and `weights/` (an export the submission bundle takes as `--weights`). A run that has
# reached its last step says so and only exports. The previous state is never overwritten or deleted (the inputs
# are read-only; the copy lives in working).
#
# The first code cell uses the standard library alone: it checks the parameters and writes `session.json`
# saying the session has not finished, so that whatever fails afterwards (no wheel, an offline install that
# cannot resolve, an image without pydantic or torch) the output says why. Problems are one `error:` line; the
# notebook never raises.
#
# Attach: the wheels dataset (`trm_kaggle*.whl`), the data dataset (`data.tar` + `manifest.json`, which the
# session checks and unpacks into `/kaggle/temp`) and this kernel's own output (`kernel_sources`), or a run-state
# dataset. `python build_bundle.py OUT --train-kernel --preset P` writes this notebook with its metadata; see
# docs/kaggle-training.md.

# %% tags=["parameters"]
KAGGLE_INPUT = "/kaggle/input"  # attached datasets and the previous Kaggle session's output (read-only on Kaggle)
KAGGLE_WORKING = "/kaggle/working"  # writable; the run, the export and the curve go here (the kernel's output)
WHEELS_DIR = None  # None: the first directory under KAGGLE_INPUT holding a trm_kaggle*.whl (trm-kaggle-wheels)
DATA_DIR = None  # None: the one dataset under KAGGLE_INPUT (trm-kaggle-data, unpacked), or a folder to train on
PRESET = "sudoku-mlp"  # the training preset(s), e.g. "sudoku-mlp" or "arc2 no-ema" (trm-kaggle train --preset)
OVERRIDES = {}  # settings on top of the preset, e.g. {"global_batch_size": 256} (docs/notebooks.md: other forms)
TIME_BUDGET = 11.5 * 3600  # seconds this Kaggle session may use in all (Kaggle stops a session at 12 h); None: no limit
SAVE_MARGIN = 600  # seconds of TIME_BUDGET kept for the final save, the export and the curve
SAVE_EVERY_S = 300  # seconds between train states saved on the way (a killed session loses at most this); None: off
SESSION_STEPS = None  # None: train until the budget; N: at most N steps this Kaggle session (a quick, exact stop)
UNPACK_DIR = None  # None: /kaggle/temp (else the system's temporary folder); where packed datasets are unpacked
DEVICE = "auto"  # auto (cuda > mps > cpu), cpu, cuda

# %% [markdown]
# ## Parameters checked, `session.json` written first (standard library only)
#
# A bad parameter falls back to its default with a warning. `session.json` says "not finished" until the session
# rewrites it with what it did; a session stopped by an error says why there too.

# %%
import codecs
import json
import math
import os
import signal
import time
from pathlib import Path

STARTED = time.time()  # the install counts against the budget
READY = True  # False once a step fails: the later cells skip, session.json keeps the reason
# A stop signal before the session takes its own handler (during the install, torch's import) is noted here, not
# left to the default that ended the kernel: the session then carries the previous state and ends "interrupted".
STOPPED = []


def _note_stop(signum, frame):
    STOPPED.append(signum)


# the package's stop signals (`interrupts.TERMINATING`, not importable before the install): SIGTERM, a closed
# terminal's SIGHUP and the schedulers' warnings before a kill (SIGUSR1, SIGUSR2, SIGXCPU)
for _name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU"):
    _signum = getattr(signal, _name, None)
    if _signum is not None and signal.getsignal(_signum) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
        signal.signal(_signum, _note_stop)


def say(text):
    """`text` printed as one line, its control characters escaped: a name read from the inputs (a folder, a
    previous record's state) may hold a newline or an escape sequence, which would forge or colour a line."""
    print("".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)),
          flush=True)


def warn(line):
    say(f"WARNING: {line}")


def checked_number(name, value, default, *, none=False, least=0.0, most=math.inf, whole=False):
    """`value` when it is a valid setting of `name`, else `default` with a warning (never an exception)."""
    if none and value is None:
        return None
    if isinstance(value, str) and value.strip() and value.isascii():  # float() reads any script's digits ('２')
        try:
            value = float(value)
        except ValueError:
            pass
    # comparisons of ints and floats never overflow (math.isfinite(10**400) does); nan and inf fail them
    good = (isinstance(value, (int, float)) and not isinstance(value, bool) and least <= value <= min(most, 1e300)
            and (not whole or value == int(value)))
    if good:
        return int(value) if whole else float(value)
    try:
        shown = repr(value)
    except ValueError:  # an int of more digits than Python prints
        shown = f"<a whole number of about {value.bit_length() * 0.30103:,.0f} digits>"
    shown = shown if len(shown) <= 40 else shown[:40] + "..."
    def said(bound):  # a whole number's bound in its digits (4,611,686,018,427,387,904, never 4.61169e+18)
        return f"{bound:,}" if whole and bound == int(bound) else f"{bound:g}"

    bounds = f">= {said(least)}" if most == math.inf else f"from {said(least)} to {said(most)}"
    warn(f"{name}={shown} is not {'None or ' if none else ''}a {'whole ' if whole else ''}number {bounds}: "
         f"using {default!r}")
    return default


def checked_text(name, value, default, *, none=False):
    # a NUL byte is in no path or name: such a value would stop the session, not fall back
    if (none and value is None) or (isinstance(value, (str, os.PathLike)) and str(value).strip()
                                    and "\0" not in str(value)):
        return value
    warn(f"{name}={value!r} is not {'None or ' if none else ''}a non-empty text: using {default!r}")
    return default


KAGGLE_ROOT = Path(os.sep, "kaggle")  # Kaggle's own folders, the defaults of the two paths below
KAGGLE_INPUT = checked_text("KAGGLE_INPUT", KAGGLE_INPUT, str(KAGGLE_ROOT / "input"))
KAGGLE_WORKING = checked_text("KAGGLE_WORKING", KAGGLE_WORKING, str(KAGGLE_ROOT / "working"))
WHEELS_DIR, DATA_DIR, UNPACK_DIR = (checked_text(n, v, None, none=True) for n, v in (
    ("WHEELS_DIR", WHEELS_DIR), ("DATA_DIR", DATA_DIR), ("UNPACK_DIR", UNPACK_DIR)))
PRESET = checked_text("PRESET", PRESET, "sudoku-mlp")
if not (OVERRIDES is None or isinstance(OVERRIDES, (str, dict))
        or (isinstance(OVERRIDES, (list, tuple)) and all(isinstance(o, str) for o in OVERRIDES))):
    warn(f"OVERRIDES={OVERRIDES!r} is not a mapping, key=value texts or JSON: using {{}}")
    OVERRIDES = {}
TIME_BUDGET = checked_number("TIME_BUDGET", TIME_BUDGET, 11.5 * 3600, none=True, least=1, most=365 * 24 * 3600)
SAVE_MARGIN = checked_number("SAVE_MARGIN", SAVE_MARGIN, 600.0, most=24 * 3600)
SAVE_EVERY_S = checked_number("SAVE_EVERY_S", SAVE_EVERY_S, 300.0, none=True, least=0.001, most=7 * 24 * 3600)
SESSION_STEPS = checked_number("SESSION_STEPS", SESSION_STEPS, None, none=True, least=1, most=2**62, whole=True)
if DEVICE not in ("auto", "cpu", "cuda", "mps"):
    warn(f"DEVICE={DEVICE!r} is not one of 'auto', 'cpu', 'cuda', 'mps': using 'auto'")
    DEVICE = "auto"

SESSION = Path(KAGGLE_WORKING) / "session.json"


BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def read_record(record):
    """An earlier kernel run's record as the package reads it: a regular file (a FIFO there would wait for a writer
    forever) of at most 1 MiB, UTF-8 (or the encoding its byte-order mark names) JSON in which no key repeats.
    ValueError or OSError otherwise."""
    def unrepeated(pairs):
        if len({k for k, _ in pairs}) < len(pairs):
            raise ValueError("a key repeats")
        return dict(pairs)

    if not record.is_file() or record.stat().st_size > 1 << 20:
        raise ValueError("not a regular file of at most 1 MiB")
    data = record.read_bytes()
    text = data.decode(next((enc for bom, enc in BOMS if data.startswith(bom)), "utf-8"))
    return json.loads(text, object_pairs_hook=unrepeated)


def state_to_pass_on():
    """The newest train state among the inputs (`state_step<N>.pt`, by N), else the one an earlier kernel run's
    record names, else, where a record cannot be read (over 1 MiB, not JSON: another version's, or damaged), words
    naming the first such, or None. Every record this kernel writes names it, so that a kernel run killed before
    it copies the state into its output (during the install) still passes the name on, and the next one refuses
    rather than start the run over; a record that cannot be read may name such a state, and is passed on so too
    (`trm_kaggle.kaggle_training.named_state` is the package's side of this rule: the same answer)."""
    try:
        found = Path(KAGGLE_INPUT).rglob("state_step*.pt")
        steps = {p: int(p.name[10:-3]) for p in found  # state_step<N>.pt, N in ASCII digits ('²' is no int)
                 if p.name[10:-3].isascii() and p.name[10:-3].isdigit()}
        if steps:
            return str(max(steps, key=steps.get))
        unread = None
        for record in sorted(Path(KAGGLE_INPUT).rglob("session.json")):
            try:
                named = read_record(record)
            except (OSError, ValueError, RecursionError):  # it may name the state: passed on unless another does
                unread = unread or record
                continue
            if isinstance(named, dict) and isinstance(named.get("previous_state"), str):
                return named["previous_state"]
        if unread is not None:  # the package's UNREAD_RECORD
            return f"the state named in {unread}, a record that cannot be read"
    except (OSError, RecursionError, ValueError):  # an input that cannot be walked: the session names its problem
        pass
    return None


PREVIOUS_STATE = state_to_pass_on()


def open_new(tmp):
    """`tmp`, a temporary name of this kernel's, created new for writing: whatever stands there is removed first
    (a link is removed, never followed), and a link planted again before the create is refused, never written
    through (open(tmp, "w") overwrote the file a planted link pointed to, outside KAGGLE_WORKING)."""
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    return os.fdopen(fd, "w")


def write_session(status, message):
    """session.json (atomically): what stopped this kernel run, for `kaggle kernels output` readers."""
    record = {"ok": False, "status": status, "message": message, "seconds": round(time.time() - STARTED, 1),
              "previous_state": PREVIOUS_STATE}
    tmp = SESSION.with_name(f".{SESSION.name}.partial-{os.getpid()}")
    try:
        with open_new(tmp) as f:
            json.dump(record, f, indent=2)
        os.replace(tmp, SESSION)
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written stays behind
        raise


def fail(message):
    """The reason this kernel run stops, as one error line and in session.json (never an exception)."""
    global READY
    READY = False
    say(f"error: {message}")
    try:
        write_session("error", message)
    except OSError as e:
        say(f"error: could not write {SESSION}: {e}")


def built_whole_above(folder):
    """The folder at or above `folder` that the package built whole (a dataset, a bundle part: it holds
    `.trm_kaggle_output.json`), or None: written into, its command could no longer replace it."""
    for at in (Path(folder).absolute(), *Path(folder).absolute().parents):
        try:
            if (at / ".trm_kaggle_output.json").is_file():
                return at
        except OSError:  # a part this user cannot look into: not one of ours to protect
            pass
    return None


def training_here(folder):
    """The lock file of a training running in `folder`'s run folder (this notebook run twice at once on one
    working folder), or None: that session's session.json is its own record, never replaced by this one's."""
    lock = Path(folder) / "run" / ".trm_kaggle.lock"
    try:
        import fcntl

        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (ImportError, OSError, ValueError):  # no lock there (or no flock here): the session's own check decides
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a training holds it exclusively
        return None
    except OSError:
        return lock
    finally:
        os.close(fd)  # the shared lock, if taken, goes with it


def lies_in(folder, parent):
    """Whether `folder` is `parent` or lies inside it, links followed."""
    folder, parent = os.path.realpath(folder), os.path.realpath(parent)
    return folder == parent or folder.startswith(parent.rstrip(os.sep) + os.sep)


try:
    if (owned := built_whole_above(KAGGLE_WORKING)) is not None:  # said before session.json is written there
        READY = False
        say(f"error: KAGGLE_WORKING {KAGGLE_WORKING} lies in {owned}, a folder the package builds whole "
            "(.trm_kaggle_output.json): nothing is written there; choose a folder of its own")
    elif lies_in(KAGGLE_WORKING, KAGGLE_INPUT):  # a previous output as the working folder: its record replaced
        READY = False
        say(f"error: KAGGLE_WORKING {KAGGLE_WORKING} lies in KAGGLE_INPUT {KAGGLE_INPUT}: an input is never "
            "written into; choose a folder outside it")
    elif (held := training_here(KAGGLE_WORKING)) is not None:  # that session's record stays its own
        READY = False
        say(f"error: KAGGLE_WORKING {KAGGLE_WORKING}: another training is running in this folder (it holds {held}): "
            "nothing is written there; wait for it, or choose another KAGGLE_WORKING")
    else:
        Path(KAGGLE_WORKING).mkdir(parents=True, exist_ok=True)
        write_session("started", "the session has not finished (stopped before it wrote its report)")
except (OSError, ValueError) as e:  # ValueError: a path the system cannot take; the notebook never raises
    READY = False
    if SESSION.is_dir() and not SESSION.is_symlink():  # the folder is writable: what stands in the way is named
        say(f"error: {SESSION} is a folder, where this kernel writes its session record: nothing can run (move "
            "it away)")
    else:
        say(f"error: {KAGGLE_WORKING} is not writable ({e}): nothing can run")

# %% [markdown]
# ## Install `trm_kaggle` offline
#
# Only when it is not importable yet, by the package's own installer (`trm_kaggle/kaggle/offline_install.py`,
# standard library only, read out of the wheel): `pip install --no-index --no-deps --find-links WHEELS_DIR
# trm_kaggle ...` (no network), naming trm_kaggle and each other distribution of the wheels dataset that the image
# lacks. `--no-deps`: what the image already has is never re-resolved, so one unmet requirement of the image's own
# packages cannot fail the install. Then every requirement of trm_kaggle is checked by name: one line names what
# is missing.

# %%
import importlib.util
import zipfile


def first_dir_with(pattern):
    """The directory of the first file under KAGGLE_INPUT whose name matches `pattern`, or None."""
    found = sorted(Path(KAGGLE_INPUT).rglob(pattern))
    return str(found[0].parent) if found else None


def offline_installer():
    """(trm_kaggle/kaggle/offline_install.py's namespace, the wheels folder or None). The installer (standard
    library only) is read from the package where it is importable, else out of the trm_kaggle wheel (a zip) in
    the wheels dataset, and run on its own: the package cannot be imported before it is installed."""
    spec = importlib.util.find_spec("trm_kaggle")
    wheels = None
    if spec is not None:
        where = Path(list(spec.submodule_search_locations)[0]) / "kaggle" / "offline_install.py"
        source = where.read_text(encoding="utf-8")
    else:
        wheels = WHEELS_DIR or first_dir_with("trm_kaggle*.whl")
        found = sorted(Path(wheels).glob("trm_kaggle-*.whl")) if wheels else []
        if not found:
            raise RuntimeError(f"trm_kaggle is not installed and no trm_kaggle*.whl is under "
                               f"{WHEELS_DIR or KAGGLE_INPUT}: attach the wheels dataset or set WHEELS_DIR")
        where = found[-1]
        try:
            with zipfile.ZipFile(where) as wheel:
                if "trm_kaggle/kaggle/offline_install.py" not in wheel.namelist():
                    raise RuntimeError(f"{where} has no trm_kaggle/kaggle/offline_install.py: a wheel older than "
                                       "this notebook (rebuild the wheels dataset)")
                source = wheel.read("trm_kaggle/kaggle/offline_install.py").decode("utf-8")
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as e:  # cut short, unreadable: never installed
            raise RuntimeError(f"{where} is not a readable wheel ({e}): rebuild the wheels dataset") from None
    scope = {"__name__": "trm_kaggle_offline_install"}
    exec(compile(source, str(where), "exec"), scope)
    return scope, wheels


if READY:
    try:
        installer, wheels = offline_installer()
        installer["prepare"](wheels, warn=warn)
    except BaseException as e:  # noqa: BLE001 - the notebook never raises; a wheel's code may exit or raise anything
        why = (f"its installer exited with status {e.code}" if isinstance(e, SystemExit) else e
               if isinstance(e, Exception) else f"{type(e).__name__}: {e}".rstrip(": "))
        fail(f"installing trm_kaggle failed ({why})")

# %% [markdown]
# ## Train this Kaggle session
#
# One line per stage: the packed datasets checked and unpacked, the dataset, the previous state (or a new run), the
# training range, the result, the export.

# %%
REPORT = None
if READY:
    try:
        import logging

        from trm_kaggle.hardware import quiet_openmp_waits

        print(f"OpenMP waits: {quiet_openmp_waits()}")  # before torch loads OpenMP
        import trm_kaggle
        from trm_kaggle.kaggle_training import run_session
        from trm_kaggle.runner_watch import stop_when_the_runner_exits
        from trm_kaggle.wording import log_one_line_each

        log_one_line_each(logging.INFO, force=True)  # a name from the inputs never reaches the log raw
        print(f"trm_kaggle {trm_kaggle.__version__}")
    except BaseException as e:  # noqa: BLE001 - an image without torch or pydantic, a damaged install
        fail(f"importing trm_kaggle failed ({type(e).__name__}: {e})")
if READY:
    try:
        # a stop signal to the runner (papermill) ends the runner, not this kernel: its end stops the training,
        # which saves, says "interrupted" and exports, as a signal to this process does
        stop_when_the_runner_exits()
        REPORT = run_session(input_root=KAGGLE_INPUT, working=KAGGLE_WORKING, preset=str(PRESET).split(),
                             overrides=OVERRIDES, device=DEVICE,  # read once the previous state is carried
                             data_dir=DATA_DIR, time_budget=TIME_BUDGET, margin=SAVE_MARGIN,
                             session_steps=SESSION_STEPS, started=STARTED, save_every_s=SAVE_EVERY_S,
                             scratch=UNPACK_DIR, stopped=STOPPED)  # a stop noted above: the state carried, no step
    except BaseException as e:  # noqa: BLE001 - run_session never raises; a second Ctrl-C may
        fail(f"the session stopped ({type(e).__name__}: {e})")

# %% [markdown]
# ## What this Kaggle session left in `/kaggle/working`

# %%
try:
    if REPORT is not None:
        # the run's last step once its config was read (a session refused before that knows none: never "of 0";
        # a run already past it, its message says so: never "37 of 10")
        say(f"status: {REPORT.status}; step {REPORT.start_step} -> {REPORT.step}"
            + (f" of {REPORT.target_step}" if 0 < REPORT.target_step >= REPORT.step else "")
            + f"; {REPORT.seconds:.0f} s" + (f"; {REPORT.message}" if REPORT.message else ""))
    for p in sorted(Path(KAGGLE_WORKING).glob("*")):
        say(f"  {p.name}{' (folder)' if p.is_dir() else ''}")
except Exception as e:  # noqa: BLE001 - the notebook never raises
    warn(f"listing {KAGGLE_WORKING} failed ({type(e).__name__}: {e})")
