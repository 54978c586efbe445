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
# # TRM on ARC Prize: offline submission kernel
#
# The competition kernel (internet off). Its first code cell uses the standard library alone: it checks the
# parameters, finds the challenges file and writes a valid fallback `submission.json` (both attempts for every
# test input of every task), so that whatever fails afterwards (a missing wheel, an offline install that cannot
# resolve, an image without pydantic or torch, damaged weights) the kernel still leaves a submission, and it
# never raises. Then it installs `trm_kaggle` from the attached wheels dataset without network and calls
# `trm_kaggle.solve.job.solve`: every task is solved on its own by one worker process per GPU (the tasks are
# sharded across them): its demonstration pairs become an augmented dataset, the pretrained weights are
# fine-tuned on it (new puzzle embeddings start from the mean trained row) until the worker's time plan says
# stop, every augmented test input is predicted, and the votes become its answer. Each worker prints its plan at
# the start and a line per task with the time elapsed and left. The merged submission lists every task and is
# checked at the end (against `sample_submission.json` too when the competition has one).
#
# Kaggle runs a competition notebook twice: the interactive "Save Version" run and, once submitted, the scored
# rerun on the hidden test set (`KAGGLE_IS_COMPETITION_RERUN` is set there). With `MODE = "auto"` the save run is
# a short check (the model works on `SAVE_MAX_TASKS` tasks within `SAVE_TIME_BUDGET` seconds; every task is
# still submitted) and the rerun uses the whole plan; explicit `TIME_BUDGET` / `MAX_TASKS` override both.
#
# Attach: the wheels dataset (`trm_kaggle*.whl`), the weights dataset (`weights.safetensors` + `config.json`)
# and the ARC competition (any year, either mount layout: `/kaggle/input/<slug>/` or
# `/kaggle/input/competitions/<slug>/`, datasets at `/kaggle/input/<slug>/` or
# `/kaggle/input/datasets/<owner>/<slug>/`). Locally, point `KAGGLE_INPUT` / `KAGGLE_WORKING` at a tree shaped
# like `/kaggle/input` and a writable directory.

# %% tags=["parameters"]
KAGGLE_INPUT = "/kaggle/input"  # attached datasets and the competition data (read-only on Kaggle)
KAGGLE_WORKING = "/kaggle/working"  # writable; submission.json and the work directory go here
WHEELS_DIR = None  # None: the first directory under KAGGLE_INPUT holding a trm_kaggle*.whl (trm-kaggle-wheels)
WEIGHTS_DIR = None  # None: the first directory under KAGGLE_INPUT holding weights.safetensors (trm-kaggle-weights)
CHALLENGES = None  # None: the one */arc-agi_test_challenges.json (or */*/...) under KAGGLE_INPUT
COMPETITION = "arc-prize-2026-arc-agi-2"  # this kernel's competition: its challenges file wins when several are found
MODE = "auto"  # auto: "save" in Kaggle's interactive Save Version run, "full" in the scored rerun and elsewhere
TIME_BUDGET = "auto"  # seconds for everything, or "auto": 11.5 h (full) / SAVE_TIME_BUDGET (save); None: no limit
FINETUNE_STEPS = "auto"  # fine-tuning steps per task, or "auto": what the time plan fits
NUM_AUG = "auto"  # augmentations per task (fine-tuning and voting), or "auto": what the time plan fits
MAX_TASKS = "auto"  # the model works on the first N tasks only, or "auto": all (full) / SAVE_MAX_TASKS (save)
SAVE_MAX_TASKS = 4  # the save run's check: this many tasks ...
SAVE_TIME_BUDGET = 900  # ... within this many seconds
WORKERS = None  # None: one worker process per visible GPU (1 on CPU)
DEVICE = "auto"  # auto (cuda > mps > cpu), cpu, cuda, mps
STRICT = False  # True: the interactive Save Version run fails at its end when the model did not run (never the rerun)
TRAJECTORIES = 1  # noisy trajectories per augmented test input, each one a vote (K x the prediction work); 1: off
TRAJECTORY_NOISE = 0.0  # their noise, as a share of the RMS of the hidden state (for 2 or more trajectories)
TEST_DEPTH = None  # ACT steps of prediction; None: the trained halt_max_steps (docs/test_time.md)

# %% [markdown]
# ## Fallback first (standard library only)
#
# A bad parameter falls back to its default with a warning. The challenges file is found one or two folders
# below `KAGGLE_INPUT` (the same file reachable twice, e.g. through a link, counts once, and so do copies with the
# same bytes: one competition mounted in both layouts), and a valid `submission.json` is written before anything
# can fail: each test input and its transpose, as solve writes.

# %%
import hashlib
import json
import os
import stat
import sys
from pathlib import Path

READY = True  # False once a step fails: the later cells skip, the fallback submission stands
NO_MODEL = None  # why the model did not run, once something stops it (the last line says it)
FULL_BUDGET = 11.5 * 3600  # the kernel's hard limit is 12 h
CHALLENGES_NAME = "arc-agi_test_challenges.json"


def say(line):
    """One line of the log, control characters escaped: a task id read from a file, or a path found below
    KAGGLE_INPUT (a folder's name), may hold an escape sequence or a newline."""
    print("".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(line)), flush=True)


def warn(line):
    say(f"WARNING: {line}")


def checked(name, value, default, *, auto=False, none=False, number=False, least=1, most=10**9):
    """`value` when it is a valid setting of `name` (from `least` to `most`), else `default` with a warning (never
    an exception: a whole number too large for a float, 10**400, is out of bounds too)."""
    if (auto and value == "auto") or (none and value is None):
        return value
    if isinstance(value, str) and value.strip() and value.isascii():  # float() reads any script's digits ('２')
        try:
            value = float(value) if number else int(value)
        except ValueError:
            pass
    good = (isinstance(value, (int, float)) and not isinstance(value, bool) and least <= value <= most
            and (number or value == int(value)))  # comparisons of ints and floats never overflow; nan fails
    if good:
        return float(value) if number else int(value)
    try:
        shown = repr(value)
    except ValueError:  # an int of more digits than Python prints
        shown = f"<a whole number of about {value.bit_length() * 0.30103:,.0f} digits>"
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    allowed = " or ".join([*(['"auto"'] if auto else []), *(["None"] if none else []),
                           f"a {'number' if number else 'whole number'} from {least} to "
                           + (f"{most:,.0f}" if most == int(most) else f"{most:g}")])
    warn(f"{name}={shown} is not {allowed}: using {default!r}")
    return default


def checked_choice(name, value, choices, default):
    if value in choices:
        return value
    warn(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}: using {default!r}")
    return default


def checked_dir(name, value, default):
    # a NUL byte is in no path the system can open: such a value would cost the submission, not fall back
    if value is None or (isinstance(value, (str, os.PathLike)) and str(value) and "\0" not in str(value)):
        return value if value is not None else default
    warn(f"{name}={value!r} is not a path: using {default!r}")
    return default


KAGGLE_ROOT = Path(os.sep, "kaggle")  # Kaggle's own folders, the defaults of the two paths below
KAGGLE_INPUT = checked_dir("KAGGLE_INPUT", KAGGLE_INPUT, str(KAGGLE_ROOT / "input"))
KAGGLE_WORKING = checked_dir("KAGGLE_WORKING", KAGGLE_WORKING, str(KAGGLE_ROOT / "working"))
WHEELS_DIR, WEIGHTS_DIR, CHALLENGES, COMPETITION = (checked_dir(n, v, None) for n, v in (
    ("WHEELS_DIR", WHEELS_DIR), ("WEIGHTS_DIR", WEIGHTS_DIR), ("CHALLENGES", CHALLENGES),
    ("COMPETITION", COMPETITION)))
MODE = checked_choice("MODE", MODE, ("auto", "save", "full"), "auto")
# The bounds are the package's own (SolveConfig's; tests/test_kernel_fallback.py holds them equal); a budget
# is at most a week, far past Kaggle's 12 h.
WEEK = 7 * 24 * 3600.0
TIME_BUDGET = checked("TIME_BUDGET", TIME_BUDGET, "auto", auto=True, none=True, number=True, most=WEEK)
FINETUNE_STEPS = checked("FINETUNE_STEPS", FINETUNE_STEPS, "auto", auto=True, least=0, most=10_000_000)
NUM_AUG = checked("NUM_AUG", NUM_AUG, "auto", auto=True, least=0, most=100_000)
MAX_TASKS = checked("MAX_TASKS", MAX_TASKS, "auto", auto=True, none=True)
SAVE_MAX_TASKS = checked("SAVE_MAX_TASKS", SAVE_MAX_TASKS, 4)
SAVE_TIME_BUDGET = checked("SAVE_TIME_BUDGET", SAVE_TIME_BUDGET, 900.0, number=True, most=WEEK)
WORKERS = checked("WORKERS", WORKERS, None, none=True, most=1024)
DEVICE = checked_choice("DEVICE", DEVICE, ("auto", "cpu", "cuda", "mps", "xla"), "auto")
STRICT = checked_choice("STRICT", STRICT, (False, True), False)
TRAJECTORIES = checked("TRAJECTORIES", TRAJECTORIES, 1, most=32)
TRAJECTORY_NOISE = checked("TRAJECTORY_NOISE", TRAJECTORY_NOISE, 0.0, number=True, least=0, most=1.0)
TEST_DEPTH = checked("TEST_DEPTH", TEST_DEPTH, None, none=True, most=1024)

# Save Version run or scored rerun: Kaggle sets KAGGLE_KERNEL_RUN_TYPE in its kernels, and
# KAGGLE_IS_COMPETITION_RERUN only in the rerun on the hidden test set
on_kaggle = bool(os.environ.get("KAGGLE_KERNEL_RUN_TYPE") or os.environ.get("KAGGLE_URL_BASE"))
rerun = bool(os.environ.get("KAGGLE_IS_COMPETITION_RERUN"))
if MODE == "auto":
    MODE = "save" if on_kaggle and not rerun else "full"
    why = ("the scored rerun (KAGGLE_IS_COMPETITION_RERUN is set)" if rerun else
           "Kaggle's interactive Save Version run (KAGGLE_IS_COMPETITION_RERUN is unset)" if on_kaggle else
           "not on Kaggle")
else:
    why = "set by the MODE parameter"
budget_from_save = TIME_BUDGET == "auto" and MODE == "save"
# the parameter the budget came from, named in every line about it: in a Save Version run that left TIME_BUDGET
# alone it is SAVE_TIME_BUDGET (raising TIME_BUDGET would change the scored rerun's budget too)
BUDGET_SETTING = "SAVE_TIME_BUDGET" if budget_from_save else "TIME_BUDGET"
if TIME_BUDGET == "auto":
    TIME_BUDGET = SAVE_TIME_BUDGET if MODE == "save" else FULL_BUDGET
if MAX_TASKS == "auto":
    MAX_TASKS = SAVE_MAX_TASKS if MODE == "save" else None
if on_kaggle and (TIME_BUDGET is None or TIME_BUDGET > FULL_BUDGET):  # Kaggle stops every kernel at 12 h
    said = "None (no limit)" if TIME_BUDGET is None else f"{TIME_BUDGET:.0f} s"
    warn(f"{BUDGET_SETTING}={said} is past a Kaggle kernel's 12 h: using {FULL_BUDGET:.0f} s")
    TIME_BUDGET = FULL_BUDGET
if TIME_BUDGET is None and "auto" in (FINETUNE_STEPS, NUM_AUG):
    warn(f"TIME_BUDGET=None with 'auto' counts: the counts are fitted to a budget, using {FULL_BUDGET:.0f} s")
    TIME_BUDGET = FULL_BUDGET
print(f"mode: {MODE} ({why}): " + ("the model works on " + (f"the first {MAX_TASKS} tasks" if MAX_TASKS else
                                                             "every task")
                                   + (f" within {TIME_BUDGET:.0f} s" if TIME_BUDGET else " without a time limit")
                                   + "; every task is submitted"), flush=True)


def copies_of(paths):
    """`paths` (sorted) grouped by their bytes, each group in path order: byte-identical copies (one competition
    mounted in both layouts) are one file. A file that cannot be read is a copy of none."""
    groups = {}
    for path in paths:
        try:
            key = hashlib.sha256(read_regular(path)).hexdigest()
        except (OSError, ValueError):  # unreadable: its own group, named as one of the different files
            key = path
        groups.setdefault(key, []).append(path)
    return list(groups.values())


def first_copy(copies, competition, root, quiet):
    """Of byte-identical `copies`, the first by path in the folder named for `competition` (else the first by
    path); the others are said in one line (unless `quiet`)."""
    chosen = next((p for p in copies if p.parent.name == competition), copies[0])
    if len(copies) > 1 and not quiet:
        say(f"{len(copies)} copies of {CHALLENGES_NAME} with the same bytes below {root}: one file, using {chosen} "
            f"(not {', '.join(str(p) for p in copies if p != chosen)})")
    return chosen


def find_challenges(root, competition, quiet=False):
    """(the one challenges file one or two folders below `root`, None): files are told apart by resolved path and
    by their bytes (copies are one file, the first by path taken); of several, the one in the folder named for
    `competition` (said in a line). Else (None, why) with a warning (none when `quiet`): the RESULT line says why."""
    root = Path(root)
    found, special = {}, []
    for pattern in (f"*/{CHALLENGES_NAME}", f"*/*/{CHALLENGES_NAME}"):
        for path in sorted(root.glob(pattern)):
            if path.is_file():
                found.setdefault(path.resolve(), path)
            elif not path.is_dir():  # a FIFO, a device, a socket, a dangling link: named, never read
                special.append(str(path))
    if not found:
        why = (f"no {CHALLENGES_NAME} one or two folders below {root}"
               + (f" that is a regular file ({', '.join(special)} is not)" if special else "")
               + ": attach the ARC competition or set CHALLENGES")
        if not quiet:
            warn(why)
        return None, why
    paths = sorted(found.values())
    groups = copies_of(paths) if len(paths) > 1 else [paths]
    if len(groups) == 1:
        return first_copy(groups[0], competition, root, quiet), None
    own = [g for g in groups if any(p.parent.name == competition for p in g)]
    if len(own) == 1:
        chosen = first_copy(own[0], competition, root, quiet)
        others = [str(g[0]) for g in groups if g is not own[0]]
        if not quiet:
            say(f"{len(groups)} different {CHALLENGES_NAME} files below {root}: using {chosen}, the one of this "
                f"kernel's competition {competition} (not {', '.join(others)})")
        return chosen, None
    why = (f"{len(groups)} different {CHALLENGES_NAME} files below {root}, none of them the competition "
           f"{competition}'s alone: {', '.join(str(g[0]) for g in groups)}; set CHALLENGES to the one to solve")
    if not quiet:
        warn(why)
    return None, why


def is_grid(grid):
    return (isinstance(grid, list) and 1 <= len(grid) <= 30 and all(isinstance(row, list) for row in grid)
            and 1 <= len(grid[0]) <= 30 and all(len(row) == len(grid[0]) for row in grid)
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 9 for row in grid for v in row))


def fallback_submission(challenges):
    """The answers the package's solve writes first: each test input, then its transpose (where it differs;
    else [[0]], or [[1]]); [[0]] and [[1]] where the input is not a valid grid."""
    out = {}
    for task_id, task in challenges.items():
        tests = task.get("test") if isinstance(task, dict) else None
        out[task_id] = []
        for test in tests if isinstance(tests, list) else []:
            grid = test.get("input") if isinstance(test, dict) else None
            chain = ([grid, [list(col) for col in zip(*grid)]] if is_grid(grid) else []) + [[[0]], [[1]]]
            first = chain[0]
            second = next(g for g in chain[1:] if g != first)
            out[task_id].append({"attempt_1": first, "attempt_2": second})
    return out


def read_regular(path, most=1 << 30):
    """The bytes of `path`, a regular file of at most `most` bytes: a FIFO (which would wait for a writer
    forever), a device such as /dev/zero (which never ends) or a socket is refused before a byte is read; so is a
    file of Linux's /proc or /sys (they call themselves regular, and /proc/kmsg's read waits for the next message)."""
    if os.path.realpath(path).split(os.sep)[1:2] in (["proc"], ["sys"]):
        raise ValueError(f"{path} is a file of the kernel's /proc or /sys, not a challenges file; it is not read")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file (a folder, FIFO, device or socket); it is not read")
        if st.st_size > most:
            raise ValueError(f"{path} holds {st.st_size:,} bytes, more than the {most:,} a challenges file may")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = None
            # the size it had when opened, no more: a kernel file calls itself empty (a procfs mounted anywhere
            # else than /proc), and is then read as empty, never waited on
            data = f.read(st.st_size)
    finally:
        if fd is not None:
            os.close(fd)
    return data


def is_file(path):
    """Path.is_file() that answers False where the system cannot even look (a name too long, a NUL byte)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


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


def write_atomically(path, text):
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with open_new(tmp) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written stays behind
        raise


WRITTEN = False  # this run wrote SUBMISSION: a file an earlier run left there is never called this run's answers
SUBMISSION = Path(KAGGLE_WORKING) / "submission.json"


def working_problem():
    """Why this kernel may write nothing in KAGGLE_WORKING, or None: it lies in an input (KAGGLE_INPUT, the
    weights or wheels folder named), where the fallback replaced a file it did not write, or in a folder the
    package builds whole (a bundle part holds `.trm_kaggle_output.json`), which its command could then no longer
    replace. Said before the fallback is written: the solve would refuse the folder only after it."""
    working = os.path.realpath(KAGGLE_WORKING)
    for name, folder in (("KAGGLE_INPUT", KAGGLE_INPUT), ("WEIGHTS_DIR", WEIGHTS_DIR), ("WHEELS_DIR", WHEELS_DIR)):
        if folder is not None and os.path.commonpath([working, os.path.realpath(folder)]) == os.path.realpath(folder):
            return f"KAGGLE_WORKING {KAGGLE_WORKING} lies in {name} {folder}: an input is never written into"
    for at in (Path(working), *Path(working).parents):
        try:
            if (at / ".trm_kaggle_output.json").is_file():
                return (f"KAGGLE_WORKING {KAGGLE_WORKING} lies in {at}, a folder the package builds whole "
                        "(.trm_kaggle_output.json): nothing is written there")
        except OSError:  # a part this user cannot look into: not one of ours to protect
            pass
    return None


def read_challenges(path):
    """The tasks of the challenges file `path`; ValueError or OSError naming it when it cannot be one."""
    # an output never replaces an input. The submission replaces what stands at its path (a link planted
    # there is replaced, never written through), so only a challenges file at that very place is in the way
    written = os.path.join(os.path.realpath(KAGGLE_WORKING), SUBMISSION.name)
    if written in (os.path.realpath(path),
                   os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))):
        raise ValueError(f"the challenges file {path} is {SUBMISSION}, the file this kernel writes its "
                         f"submission to; it is left as it is: put the challenges elsewhere")
    raw = read_regular(path)
    if not raw.strip():
        raise ValueError(f"{path} is empty")
    try:
        tasks = json.loads(raw)  # bytes: json reads UTF-8/16/32, with a BOM too
    except ValueError as e:  # the file's fault, named with it
        raise ValueError(f"{path} is not JSON ({e})") from None
    except RecursionError:  # '[' * 200000: Python's parser recurses once per level; the file's fault too
        raise ValueError(f"{path} is not JSON (nested too deeply)") from None
    if not isinstance(tasks, dict):
        raise ValueError(f"{path} does not hold a JSON object of tasks")
    return tasks


try:
    if (problem := working_problem()) is not None:
        CHALLENGES = None  # nothing is answered: the RESULT line says why
        READY = False
        NO_MODEL = f"{problem}; choose a folder of its own"
        warn(NO_MODEL)
    elif CHALLENGES is None:
        CHALLENGES, NO_MODEL = find_challenges(KAGGLE_INPUT, COMPETITION)  # None: why none was taken
    if CHALLENGES is None:
        READY = False
        NO_MODEL = NO_MODEL or "no challenges file was found"
    else:
        try:
            challenge_data = read_challenges(CHALLENGES)
        except (OSError, ValueError) as e:
            # a CHALLENGES parameter that names no challenges file (a typo, a folder) would cost the whole
            # submission: the competition's own file, found as with CHALLENGES=None, is answered instead
            found, _ = find_challenges(KAGGLE_INPUT, COMPETITION, quiet=True)
            if found is None or os.path.realpath(found) == os.path.realpath(CHALLENGES):
                raise
            warn(f"CHALLENGES: {type(e).__name__}: {e}; answering {found}, the challenges file found below "
                 f"{KAGGLE_INPUT}, instead")
            CHALLENGES, challenge_data = found, read_challenges(found)
        Path(KAGGLE_WORKING).mkdir(parents=True, exist_ok=True)
        write_atomically(SUBMISSION, json.dumps(fallback_submission(challenge_data)))
        WRITTEN = True
        say(f"fallback: {SUBMISSION} answers all {len(challenge_data)} tasks of {CHALLENGES}")
except Exception as e:  # noqa: BLE001 - the notebook never raises: say what failed
    READY = False
    NO_MODEL = f"the fallback submission could not be written ({type(e).__name__}: {e})"
    warn(f"the fallback submission could not be written ({type(e).__name__}: {e}); nothing else can run")

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


def first_dir_with(pattern, beside=None, parameter=None):
    """The directory of the first file under KAGGLE_INPUT whose name matches `pattern`, or None (also when the
    search fails: a folder a thousand levels deep, a path too long for the system). Folders that also hold
    `beside` come first (a weights file without its config.json is no export), and when several folders are
    found the one taken is said: another dataset's weights sorted first were taken without a word."""
    try:
        folders = {}  # one folder reached twice (through a link) counts once
        for p in sorted(Path(KAGGLE_INPUT).rglob(pattern)):
            folders.setdefault(os.path.realpath(p.parent), p.parent)
        # the folders holding `beside` first (a stable sort keeps their order); is_file() may raise too
        found = sorted(folders.values(), key=lambda d: not (beside and (d / beside).is_file()))
    except (OSError, RecursionError, ValueError) as e:
        warn(f"searching {KAGGLE_INPUT} for {pattern} failed ({type(e).__name__}: {e})")
        return None
    if len(found) > 1:
        warn(f"{len(found)} folders under {KAGGLE_INPUT} hold {pattern}; taking {found[0]}"
             + (f" (set {parameter} to choose another)" if parameter else ""))
    return str(found[0]) if found else None


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
        wheels = WHEELS_DIR or first_dir_with("trm_kaggle*.whl", parameter="WHEELS_DIR")
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
        why = (f"its installer exited with status {e.code}" if isinstance(e, SystemExit) else str(e)
               if isinstance(e, Exception) else f"{type(e).__name__}: {e}".rstrip(": "))
        READY = False
        NO_MODEL = f"installing trm_kaggle failed: {why}"
        warn(f"installing trm_kaggle failed ({why}); the fallback submission.json stands")

# %%
import logging

if READY:
    try:
        from trm_kaggle.hardware import quiet_openmp_waits

        print(f"OpenMP waits: {quiet_openmp_waits()}")  # before torch loads OpenMP; the solve's workers inherit it
        import torch

        import trm_kaggle
        from trm_kaggle.config import SolveConfig, validation_line
        from trm_kaggle.evaluate import check_submission, expected_counts
        from trm_kaggle.solve import solve
        from trm_kaggle.wording import log_one_line_each

        print(f"trm_kaggle {trm_kaggle.__version__} from {trm_kaggle.__file__}")
        # the count only: naming the GPUs here would start CUDA in this process, on a GPU a worker needs whole
        print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, {torch.cuda.device_count()} GPU(s) "
              f"visible")
        log_one_line_each(logging.INFO, force=True)  # a name from the inputs never reaches the log raw
    except BaseException as e:  # noqa: BLE001 - an image without torch or pydantic, a damaged install
        READY = False
        NO_MODEL = f"importing trm_kaggle failed ({type(e).__name__}: {e})"
        warn(f"importing trm_kaggle failed ({type(e).__name__}: {e}); the fallback submission.json stands")

# %% [markdown]
# ## Weights

# %%
if READY:
    weights = WEIGHTS_DIR or first_dir_with("weights.safetensors", beside="config.json", parameter="WEIGHTS_DIR")
    if weights is None:  # solve() still writes a valid fallback submission, and reports the error
        warn(f"no weights.safetensors under {KAGGLE_INPUT}: attach the weights dataset or set WEIGHTS_DIR")
        weights = str(Path(KAGGLE_INPUT) / "weights-not-found")
    say(f"weights: {weights}")
    say(f"challenges: {CHALLENGES}")

# %% [markdown]
# ## Solve
#
# One line per phase, each with the time elapsed and left. Each worker's plan reserves what inference needs
# (measured on its device, plus a margin) and fine-tunes with the rest; a worker that fails costs only its
# unfinished tasks, which keep the fallback answers written first.

# %%
report = None
if READY:
    try:
        # a compile cache the bundle ships beside the weights (--compile-cache): used when torch and GPU match
        cache = Path(weights) / "compile_cache.bin"
        # the test-time settings, checked by the package's own rule: refused ones cost only themselves
        test_time = dict(trajectories=TRAJECTORIES, trajectory_noise=TRAJECTORY_NOISE, test_depth=TEST_DEPTH)
        try:
            SolveConfig(challenges=str(CHALLENGES), weights=weights, **test_time)
        except ValueError as e:  # pydantic's ValidationError is one: said by the package's rule, in its words
            why = validation_line(e) if hasattr(e, "errors") else " ".join(str(e).split())
            warn(f"test-time settings {test_time} refused ({why}); predicting without them")
            test_time = {}
        work = Path(KAGGLE_WORKING) / "ttt_work"
        if work.is_symlink():  # the kernel's own folder: written through, the work landed where the link points
            raise RuntimeError(f"{work} is a symbolic link to {os.path.realpath(work)}: the kernel never writes "
                               "through a link (remove it)")
        if work.exists() and not work.is_dir():  # said as what it is, not as a lock it could not take
            raise RuntimeError(f"{work} is a file, where the kernel's work folder goes (move it away)")
        report = solve(SolveConfig(challenges=str(CHALLENGES), weights=weights, output=str(SUBMISSION),
                                   work_dir=str(work), time_budget=TIME_BUDGET,
                                   finetune_steps=FINETUNE_STEPS, num_aug=NUM_AUG, max_tasks=MAX_TASKS,
                                   workers=WORKERS, device=DEVICE,
                                   compile_cache=str(cache) if cache.is_file() else None, **test_time),
                       echo=print, budget_setting=BUDGET_SETTING)
        # per task reports, workers and fallback reasons are in ttt_work/solve_report.json (also in the lines above)
        print(json.dumps({k: v for k, v in report.items() if k not in ("task_reports", "workers", "fallback")},
                         indent=2, default=str))
    except Exception as e:  # noqa: BLE001 - the notebook never raises
        NO_MODEL = f"solving failed ({type(e).__name__}: {' '.join(str(e).split())})"  # one line: it ends the run
        warn(f"{NO_MODEL}; the fallback submission.json stands")

# %% [markdown]
# ## Check the submission
#
# Every task of the challenges file, one entry per test input, both attempts present, valid grids; when the
# competition has a `sample_submission.json`, its task ids are compared too (the challenges file's are the ones
# written).

# %%
def check_against_sample(submission_path, challenges_path):
    sample_path = Path(challenges_path).parent / "sample_submission.json"
    if not os.path.lexists(sample_path):
        return
    try:  # through the one careful reader: a FIFO, a device or a kernel file there is named, never waited on
        sample = json.loads(read_regular(sample_path))
        written = set(json.loads(read_regular(submission_path)))
    except Exception as e:  # noqa: BLE001 - a check, never a reason to raise
        warn(f"{sample_path} could not be read ({type(e).__name__}: {e}): task ids not compared")
        return
    if not isinstance(sample, dict):  # a list of numbers once failed the sort below, blamed on submission.json
        warn(f"{sample_path} is not a JSON object of task ids: task ids not compared")
        return
    sample = set(sample)
    if sample == written:
        say(f"{sample_path.name}: the same {len(sample)} task ids")
    else:
        extra, missing = sorted(written - sample), sorted(sample - written)
        warn(f"task ids differ from {sample_path}: {len(missing)} only there ({', '.join(missing[:5])}), "
             f"{len(extra)} only in the challenges file ({', '.join(extra[:5])}); the challenges file's are written")


if report is not None and not report.get("ran"):
    refused = report.get("left_out") or {}
    if not report.get("model_tasks") and refused:  # nothing reached the model: not the budget's doing
        from trm_kaggle.wording import shown

        first = next(iter(refused))
        NO_MODEL = (f"every task was refused before the model: task {shown(first)}: {refused[first]}"
                    + (f" (and {len(refused) - 1} other task{'s' * (len(refused) > 2)})" if len(refused) > 1 else ""))
    else:
        NO_MODEL = report.get("model_failed") or next(iter(report.get("errors") or []), None) or (
            "it predicted no task within the time budget")
CHECK_FAILED = None  # why the check of what was written failed: the RESULT line says so, never "ran" alone
if WRITTEN and is_file(SUBMISSION) and CHALLENGES:
    try:
        if READY and report is not None:
            check_submission(str(SUBMISSION), str(CHALLENGES))
            counts = expected_counts(str(CHALLENGES))
            say(f"{SUBMISSION}: valid ({len(counts)} tasks, {sum(counts.values())} test inputs, two attempts each); "
                f"{report['answered']} tasks answered by the model, {report['predicted']} test inputs with model "
                f"predictions; {report['elapsed_s']} s")
            for error in report["errors"]:
                say(f"warning: {error}")
        check_against_sample(SUBMISSION, CHALLENGES)
    except Exception as e:  # noqa: BLE001 - the notebook never raises
        CHECK_FAILED = f"checking {SUBMISSION} failed ({type(e).__name__}: {e})"
        warn(CHECK_FAILED)
else:
    NO_MODEL = NO_MODEL or "no submission was written"
    warn(f"no submission was written: {SUBMISSION}")

# %% [markdown]
# ## The result, in the last line
#
# Whether the model ran, said last so that a save run that only wrote the fallback cannot look successful. With
# `STRICT = True` such a save run fails here (the scored rerun never does: it always keeps its valid submission).

# %%
if NO_MODEL is None:
    # a submission the check could not confirm (its challenges file unreadable to the package, a task id written
    # twice) is said in the same line: a run whose last line reads as a success must have passed the check
    unchecked = "" if CHECK_FAILED is None else "; but " + " ".join(CHECK_FAILED.split())
    say(f"RESULT: the model ran: {report['ran']} tasks predicted, {report['answered']} answered; {SUBMISSION}"
        f"{unchecked}")
else:
    NO_MODEL = " ".join(str(NO_MODEL).split())  # the last line is one line, whatever the cause's text held
    if WRITTEN and is_file(SUBMISSION):
        say(f"RESULT: {SUBMISSION} holds the fallback answers (the model did not run), which score 0: {NO_MODEL}")
    else:  # no challenges to answer, or none readable: there is no submission to speak of
        earlier = ", which holds an earlier run's file" if is_file(SUBMISSION) else ""
        say(f"RESULT: no submission was written ({SUBMISSION}{earlier}): {NO_MODEL}")
    if STRICT and not rerun:
        raise RuntimeError(f"STRICT: the model did not run ({NO_MODEL}); the fallback submission.json stands")
