"""Outputs against inputs, before any work: an output never replaces, holds or lies inside an input.

Every command that writes names what it reads (`Input`) and what it writes (`Output`), and
`check_io` compares them once, before the first byte is read or written. Paths are compared
resolved (symbolic links followed, `..` removed) and, where both exist, by identity (a hard link
or a bind mount is the same file under another name). An output is refused when:

* it is an input (same path, or the same file through a link);
* it would replace or hold an input: the input lies inside an output folder (a folder replaced
  as a whole, or one the command writes into, where the entries it writes are known: one of them);
* it lies inside an input folder whose every file is an input (a dataset, an export, a corpus);
* two outputs are one path, or one lies where another output folder writes its own entries;
* a folder it writes into (a run folder, a work folder) is, or lies inside, a dataset or an export, whether or
  not this command reads it (`input_kind`), or another folder this package builds whole (a report, a
  comparison: `OWNER_RECORD`); so is a file that is one of theirs or lies in a dataset's split.

Then each output must be writable where it will be written: a file is not a folder and a folder
not a file, no part of the path is a file, and the folder that receives it (the output folder
itself, or the nearest existing parent) accepts writes. A read-only mount, a missing permission
or a file in the way is said now, not after an hour of work.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal

from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import not_regular, open_regular
from trm_kaggle.names import blank_path_problem

#: An output written whole (a file, a replaced folder) is built beside itself under its name and a suffix of at
#: most this many bytes (`trm_kaggle.atomic`: `.<name>.<random>.tmp`, `<name>.partial-<pid>.record`).
BUILT_BESIDE_BYTES = 24

#: Under this much free space on an output's disk a command is refused before it starts: an empty lock file or
#: folder still fits on a full disk, and a run that began there lost every answer it could not store.
MIN_FREE_BYTES = 1 << 20


@dataclass(frozen=True)
class Input:
    """A path a command reads. `tree`: a folder all of whose contents are inputs (nothing may be written
    inside it); otherwise only the path itself (a run folder whose comparison table may go inside it)."""

    path: str | os.PathLike
    what: str
    tree: bool = False


@dataclass(frozen=True)
class Output:
    """A path a command writes: `file` (replaced atomically), `folder` (written into, e.g. a run folder)
    or `replaced` (a folder built beside and renamed over the old one)."""

    path: str | os.PathLike
    what: str
    kind: Literal["file", "folder", "replaced"] = "file"
    writes: tuple[str, ...] | None = None  # a folder: the entries it writes (glob patterns); None: any

    def could_replace(self, inside: Path) -> bool:
        """Whether writing this folder may replace `inside`, a path inside it (relative)."""
        return self.writes is None or any(fnmatch.fnmatchcase(inside.parts[0], p) for p in self.writes)


def nul_problem(path: str | os.PathLike, what: str = "path") -> str | None:
    """Why `path` names no file when it holds a NUL byte (the system's "embedded null byte" named neither the path
    nor what it was for), else None."""
    if "\0" in os.fspath(path):
        return f"{what} {os.fspath(path)!r} holds a NUL byte, which no file name can"
    return None


def utf8_problem(path: str | os.PathLike, what: str = "path") -> str | None:
    """Why an output `path` cannot be written, when its name holds bytes that are not UTF-8 (Python hands them over
    as surrogate escapes), else None: the records name their outputs in UTF-8, and a reader such as safetensors
    refused the export written there as a damaged file."""
    text = os.fspath(path)
    if isinstance(text, str) and not text.isascii():
        try:
            os.fsencode(text).decode("utf-8")
        except UnicodeError:
            return f"{what} {text!r} holds bytes that are not UTF-8 text: outputs are named in UTF-8; rename it"
    return None


def refuse_nul(path: str | os.PathLike, what: str = "path") -> None:
    """TRMError when `path` holds a NUL byte (every writer asks this first; readers: `jsonio.open_regular`)."""
    if problem := nul_problem(path, what):
        raise TRMError(problem)


def _resolved(path: str | os.PathLike) -> Path:
    refuse_nul(path)
    return Path(os.path.realpath(os.fspath(path)))


def _plain(path: str | os.PathLike) -> Path:
    """The absolute path as written (links not followed)."""
    return Path(os.path.abspath(os.fspath(path)))


def _inside(child: Path, parent: Path) -> bool:
    return child != parent and parent in child.parents


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _shown(item: Input | Output) -> str:
    return f"{item.what} {os.fspath(item.path)}"


def overlap_problem(inputs: Iterable[Input], outputs: Iterable[Output]) -> str | None:
    """Why an output may not be written where it is (the first reason), or None."""
    inputs, outputs = list(inputs), list(outputs)
    for out in outputs:
        o, o_plain = _resolved(out.path), _plain(out.path)
        if problem := _name_length_problem(out, o):  # before the system is asked about it ("File name too long")
            return problem
        for inp in inputs:
            i, i_plain = _resolved(inp.path), _plain(inp.path)
            if o == i or (o.exists() and i.exists() and _same(o, i)):
                via = "" if o_plain == i_plain else " (through a link)" if o == i else \
                    " (the same file: a hard link)" if o.is_file() and os.stat(o).st_nlink > 1 else \
                    " (the same file by another path: a mount)" if o.is_file() else " (the same folder)"
                return f"{_shown(out)} is also the input {_shown(inp)}{via}: an output never overwrites an input"
            holder = o if _inside(i, o) else next((p for p in i.parents if p.exists() and _same(p, o)), None) \
                if i.exists() else None
            if holder is not None and out.could_replace(i.relative_to(holder)):
                via = "" if _inside(i_plain, o_plain) else " (through a link)" if _inside(i, o) else \
                    " (the same folder by another path: a mount)"
                return (f"{_shown(out)} holds the input {_shown(inp)}{via}: writing it could replace the input; "
                        "choose an output outside the inputs")
            if inp.tree and (_inside(o, i) or any(_same(p, i) for p in o.parents if p.exists())):
                via = "" if _inside(o_plain, i_plain) else " (through a link)" if _inside(o, i) else \
                    " (the same folder by another path: a mount)"
                return (f"{_shown(out)} is inside the input {_shown(inp)}{via}: an input folder is never "
                        "written into; choose an output outside it")
    for k, a in enumerate(outputs):
        for b in outputs[k + 1:]:
            if _resolved(a.path) == _resolved(b.path):
                return f"{_shown(a)} and {_shown(b)} are one path: give each output its own"
            for inner, folder in ((a, b), (b, a)):  # one written where the other folder writes its own entries
                i, f = _resolved(inner.path), _resolved(folder.path)
                if folder.kind != "file" and _inside(i, f) and folder.could_replace(i.relative_to(f)):
                    return (f"{_shown(inner)} lies inside {_shown(folder)}, which writes that entry itself: give "
                            "each output its own path")
                if folder.kind == "file" and _inside(i, f):  # `--work-dir sub.json/wd` made the output a folder
                    return (f"{_shown(inner)} lies inside {_shown(folder)}, a file this command writes: give each "
                            "output its own path")
    return None


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def special_kind(path: str | os.PathLike) -> str | None:
    """What `path` is when it is neither a regular file nor a folder (a FIFO, a device, a socket), else None."""
    try:
        return not_regular(os.stat(path).st_mode)
    except OSError:
        return None


def link_problem(path: str | os.PathLike, what: str = "output") -> str | None:
    """Why `path` cannot be written through: a symbolic link to nothing (None for anything else)."""
    path = Path(path)
    try:
        if not path.is_symlink():
            return None
    except OSError:  # a name past the file system's length: `_name_length_problem` says so
        return None
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{what} {os.fspath(path)} is a loop of symbolic links (a dangling link): remove the link"
        if e.errno == errno.EACCES:  # what it points to may be there: a folder on the way keeps this user out
            return (f"{what} {os.fspath(path)} is a symbolic link to {os.path.realpath(path)}, which this user "
                    "cannot reach (Permission denied on a folder on its way): make that folder searchable")
        return (f"{what} {os.fspath(path)} is a symbolic link to {os.path.realpath(path)}, which does not exist "
                "(a dangling link): create what it points to, or remove the link")
    return None


#: What `atomic.atomic_directory` leaves in each folder it builds whole (a dataset, an export, an evaluation report,
#: a comparison, a bundle's part): its kind and every entry it wrote. Such a folder is replaced whole by its
#: command, which refuses one holding anything else: nothing else is written into it.
OWNER_RECORD = ".trm_kaggle_output.json"
#: The lock a command holds on the folder it writes (`locks.directory_lock`): the next command there rewrites it.
LOCK_FILE = ".trm_kaggle.lock"
#: `launch`'s record of the job files it wrote in its folder (`launch.files`).
JOBS_RECORD = ".trm_kaggle_jobs"
#: Names this package keeps for its own records: a file output of that name would be replaced by the next command
#: in its folder (`submit --output run/.trm_kaggle.lock` was, by the run's next training).
RESERVED_NAMES = (LOCK_FILE, OWNER_RECORD, JOBS_RECORD)
#: A sweep's record in its folder (`experiments.sweep`).
SWEEP_RECORD = "sweep.json"
#: A Kaggle training session's record in its working folder (`kaggle_training`), beside its run/ and weights/.
SESSION_RECORD = "session.json"
#: The records other commands keep in their folders, by name: written over, that command could no longer read its
#: folder (`submit --output SWEEP/sweep.json` lost the sweep: compare and its rerun refused the folder).
_FOLDER_RECORDS = {SWEEP_RECORD: "the record of a sweep", "solve_report.json": "the record of a submit's work folder"}


def _record_field(path: Path, key: str, what: str):
    """`key` of the small JSON record at `path`, or None where there is none or it cannot be read (a FIFO or a /proc
    file planted there is never waited on: only the wording of a refusal depends on it)."""
    if not path.is_file():
        return None
    try:
        with open_regular(path, what) as f:
            return json.loads(f.read(1 << 20)).get(key)
    except (TRMError, OSError, ValueError, AttributeError):
        return None


def built_whole(folder: Path) -> str | None:
    """The kind recorded in `folder`'s owner record ("report", "comparison", ...), or None when it has none."""
    if not (folder / OWNER_RECORD).is_file():
        return None
    kind = _record_field(folder / OWNER_RECORD, "kind", "owner record")
    return kind if isinstance(kind, str) and kind.isprintable() and len(kind) < 80 else "output"


def input_kind(folder: Path) -> str | None:
    """What input of other commands `folder` is, by the files that make one: "a dataset" (a split's
    dataset.json) or "an export" (config.json beside weights.safetensors); None for any other folder."""
    if any((folder / split / "dataset.json").is_file() for split in ("train", "test")):
        return "a dataset"
    if (folder / "config.json").is_file() and (folder / "weights.safetensors").exists():
        return "an export"
    return None


def _input_problem(out: Output, path: Path) -> str | None:
    """A folder written into (`folder` outputs: a run folder, a work folder) that is, or lies inside, a dataset or
    an export, whether or not this command reads it: its files would mix with the input's (a rebuild of the
    dataset is then refused) and the only way back is deleting the input. A `replaced` folder (a dataset, an
    export, a report) is refused inside one; in the place of one, `atomic_directory` replaces only its own kind."""
    for at in ((path, *path.parents) if out.kind == "folder" else path.parents):
        kind = input_kind(at) if at.is_dir() else None
        whole = None if kind or not at.is_dir() else built_whole(at)
        if kind or whole:
            where = "is" if at == path else f"lies inside {at}, which is"
            link = " (through a link)" if _plain(out.path) != path else ""
            if kind:
                return (f"{_shown(out)}{link} {where} {kind}: its files would mix with the input's; choose a folder "
                        "of its own")
            article = "an" if whole[:1].lower() in "aeiou" else "a"
            folder = "" if whole.endswith("folder") else " folder"
            return (f"{_shown(out)}{link} {where} {article} {whole}{folder} this package builds whole "
                    f"({OWNER_RECORD}): written into, it could no longer be replaced by its command; choose a folder "
                    "of its own")
    return None


#: The files of a dataset's root and of an export (a dataset's split folders hold nothing but its own files).
_DATASET_ROOT_FILES = ("identifiers.json", "build_info.json", "contents.json", "tokenizer.json", "test_puzzles.json")
_EXPORT_FILES = ("config.json", "weights.safetensors")
#: A training run folder's own files (`train.checkpoint`, `train.metrics`): a submission written over
#: `state_step00000005.pt` lost the run. A run folder holds run.json or a train state.
_RUN_FILES = ("state_step*.pt", "run.json", "config.json", "metrics.jsonl")
#: A pipeline's own files at the top of its work folder (`pipeline`; one holds train/run.json): `submit --output
#: PIPE/summary.md` replaced its summary.
PIPELINE_FILES = ("summary.md", "training_curve.png", "submission.json", "unseen_challenges.json",
                  "unseen_solutions.json")
PIPELINE_RUN_DIR = "train"  # a pipeline's run folder in its work folder (it holds train/run.json)


def is_work_dir(at: str | os.PathLike) -> bool:
    """Whether the folder `at` is a submit's work folder (it holds solve_report.json, or units/ and workers/)."""
    at = Path(at)
    return (at / "solve_report.json").is_file() or ((at / "units").is_dir() and (at / "workers").is_dir())


def kept_by_problem(folder: str | os.PathLike, what: str, owns: Callable[[Path], bool], kind: str, holds: str,
                    whose: str) -> str | None:
    """Why `folder` may not be written: it is, or lies inside, a folder another command keeps (`owns(at)` says so;
    `kind`, holding `holds`, whose files are `whose`): our files would mix with that command's, and it reads its
    folder whole. None when it may."""
    path = Path(folder).absolute()
    for at in (path, *path.parents):
        try:
            if not owns(at):
                continue
        except OSError:  # a name too long to hold an entry: no folder of another's (its own write says what fails)
            continue
        where = "is" if at == path else f"lies inside {at}, which is"
        return (f"{what} {os.fspath(folder)} {where} {kind} (it holds {holds}): its files would mix with the {whose}; "
                "choose a folder of its own")
    return None


def in_a_work_dir_problem(folder: str | os.PathLike, what: str) -> str | None:
    """`kept_by_problem` of a submit's work folder (`is_work_dir`): a run folder, a sweep or a pipeline there
    could no longer be resumed by that submit, and its record could be replaced."""
    return kept_by_problem(folder, what, is_work_dir, "a submit's work folder", "units/ or solve_report.json",
                           "solve's")


def run_folder_problem(folder: str | os.PathLike, what: str = "work_dir") -> str | None:
    """`kept_by_problem` of a training run folder (it holds run.json): a solve's units/ and report, a pipeline's
    data or a bundle went in among the run's states, and `train` then refused to resume the run."""
    return kept_by_problem(folder, what, lambda at: (at / "run.json").is_file(), "a training run folder", "run.json",
                           "run's")


def sweep_folder_problem(folder: str | os.PathLike, what: str = "work_dir") -> str | None:
    """`kept_by_problem` of a sweep's folder (it holds sweep.json): `submit --work-dir SWEEP` made the sweep's rerun
    refuse each of its runs as lying inside a submit's work folder. A sweep's runs are the sweep's to write."""
    return kept_by_problem(folder, what, lambda at: (at / SWEEP_RECORD).is_file(), "a sweep's folder", SWEEP_RECORD,
                           "sweep's")


def session_output_problem(folder: str | os.PathLike, what: str = "work_dir") -> str | None:
    """Why `folder` may not take another command's files: it is, or lies inside, a folder holding session.json, a
    Kaggle training session's record (its run/ and weights/ are the session's, and the whole folder is the next
    session's input: a pipeline's rerun replaced the weights/ a session had trained there, a bundle built there, or
    in a folder below it, became a second dataset among the next session's inputs)."""
    path = Path(folder).absolute()
    for at in (path, *path.parents):
        try:
            if not (at / SESSION_RECORD).is_file():
                continue
        except OSError:  # a name too long to hold an entry: no session's folder (its own write says what fails)
            continue
        where = "" if at == path else f" lies inside {at}, which"
        return (f"{what} {os.fspath(folder)}{where} holds {SESSION_RECORD}, the record of a Kaggle training session "
                "(`run_session`), whose run/ and weights/ are the session's and the whole folder the next session's "
                f"input: a session's output is no other command's; choose another {what}")
    return None


def launch_folder_problem(folder: str | os.PathLike, what: str = "work_dir") -> str | None:
    """`kept_by_problem` of a launch's folder (it holds its job-files record): a bundle or a pipeline's files went
    in among the job files, which `kubectl apply -f DIR` reads whole, and a Kaggle training session refuses that
    folder as its working folder."""
    return kept_by_problem(folder, what, lambda at: (at / JOBS_RECORD).is_file(), "a launch's folder", JOBS_RECORD,
                           "job files")


def others_output_problem(folder: str | os.PathLike, what: str = "work_dir") -> str | None:
    """Why `folder` may not be a folder a command builds its own files in, because another command keeps its files
    there (None when it may): it is, or lies inside, a submit's work folder, a training run folder, a sweep's
    folder, a launch's folder or a Kaggle training session's output. One rule, one wording: `pipeline --work-dir`
    (`solve.check_pipeline_work_dir`) and `build_bundle.py OUT_DIR` (both bundles) ask it before writing."""
    return (in_a_work_dir_problem(folder, what) or run_folder_problem(folder, what)
            or sweep_folder_problem(folder, what) or launch_folder_problem(folder, what)
            or session_output_problem(folder, what))


def command_folder_problem(folder: str | os.PathLike, what: str) -> str | None:
    """Why `folder` may not be a training's run folder because it is another command's own folder, found by its
    record: a sweep's (sweep.json), a launch's (its job-files record) or a pipeline's (train/run.json). `train
    checkpoint_path=SWEEP` wrote run.json, a state and metrics.jsonl beside sweep.json. Their runs inside them
    (SWEEP/<run>, PIPE/train) are theirs."""
    at = Path(folder)
    for record, kind in ((SWEEP_RECORD, "a sweep's folder"), (JOBS_RECORD, "a launch's folder"),
                         (f"{PIPELINE_RUN_DIR}/run.json", "a pipeline's work folder")):
        if (at / record).is_file():
            return (f"{what} {os.fspath(folder)} is {kind} (it holds {record}): its files would mix with that "
                    "command's; choose a folder of its own")
    return None


def _launch_files(folder: Path) -> set[str]:
    """The job files `launch` recorded in `folder` (none where it keeps no record, or one it cannot read)."""
    files = _record_field(folder / JOBS_RECORD, "files", "job-files record")
    return {name for name in files if isinstance(name, str)} if isinstance(files, dict) else set()


def is_run_folder(folder: Path) -> bool:
    """Whether `folder` is a training run's folder: it holds run.json or a train state."""
    return (folder / "run.json").is_file() or any(folder.glob("state_step*.pt"))


def _input_file_problem(out: Output, path: Path) -> str | None:
    """A file output that is one of a dataset's, an export's or a training run's own files, or lies in a dataset's
    split folder, whether or not this command reads it: written there it breaks that input (`verify` then refuses the
    dataset), as a folder written into one would (`_input_problem`)."""
    parent = path.parent
    if path.name in RESERVED_NAMES:
        return (f"{_shown(out)}: {path.name} is a name this package keeps for its own records (a lock, an owner "
                "record), which the next command in that folder replaces; choose another name")
    if path.name in _FOLDER_RECORDS and path.is_file():
        return (f"{_shown(out)} is {_FOLDER_RECORDS[path.name]} ({parent}): written over, that folder could no "
                "longer be read by its command; choose a path of its own")
    if path.name in _launch_files(parent):
        return (f"{_shown(out)} is a job file `launch` wrote in {parent} (listed in its {JOBS_RECORD}); choose a path "
                "of its own")
    if parent.parent.is_dir() and input_kind(parent.parent) == "a dataset" and (parent / "dataset.json").is_file():
        at = f"lies in the split folder {parent} of the dataset {parent.parent}"
    elif path.name in _DATASET_ROOT_FILES and parent.is_dir() and input_kind(parent) == "a dataset":
        at = f"is a file of the dataset {parent}"
    elif path.name in _EXPORT_FILES and parent.is_dir() and input_kind(parent) == "an export":
        at = f"is a file of the export {parent}"
    elif any(fnmatch.fnmatchcase(path.name, p) for p in _RUN_FILES) and parent.is_dir() and is_run_folder(parent):
        at = f"is a file of the training run folder {parent}"
    else:
        return None
    link = " (through a link)" if _plain(out.path) != path else ""
    return f"{_shown(out)}{link} {at}: writing it would break that input; choose a path of its own"


def _pipeline_file_problem(out: Output, path: Path) -> str | None:
    """A command's file output that is one of a pipeline's own files (`submit --output PIPE/summary.md` replaced its
    summary). Asked of commands only (`check_io`): the pipeline writes them through the library's writers."""
    if path.name in PIPELINE_FILES and (path.parent / PIPELINE_RUN_DIR / "run.json").is_file():
        return (f"{_shown(out)} is a file of the pipeline's work folder {path.parent}: writing it would break that "
                "folder's record; choose a path of its own")
    return None


def _name_length_problem(out: Output, path: Path) -> str | None:
    """A name in the output's path longer than its file system takes, or a last name that leaves no room for the
    suffix it is built beside under: said now, naming the path as typed (a lock, the fallback or a parent folder
    were written first, and the error named a path nobody typed)."""
    try:
        most = os.pathconf(_nearest_existing(path), "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    for name in path.parts[1:]:
        if len(os.fsencode(name)) > most:
            return (f"{_shown(out)}: the name {name[:40]}... is {len(os.fsencode(name))} bytes, past the {most} its "
                    "file system takes")
    if out.kind != "folder" and len(os.fsencode(path.name)) + BUILT_BESIDE_BYTES > most:
        return (f"{_shown(out)}: its name is {len(os.fsencode(path.name))} bytes, and it is built beside itself under "
                f"that name and up to {BUILT_BESIDE_BYTES} more, past the {most} its file system takes: give a name of "
                f"at most {most - BUILT_BESIDE_BYTES} bytes")
    return None


def _device_link(path) -> tuple[str, ...] | None:
    """The first two parts of the first place in /dev, /proc or /sys that the chain of links of `path`, or of a
    folder on its way (`lnk/r.json`, lnk -> /sys/kernel: blamed on a full disk), passes through, or None. Each link
    is read as written, before the system follows it on: /dev/stdout reaches a plain file when stdout is one."""
    start = Path(os.path.abspath(os.fspath(path)))
    top = Path(os.path.realpath(start)).parts[1:3]
    if _in_system_trees(top):
        return top
    return next(filter(None, (_chain_top(p) for p in (start, *start.parents))), None)


def _chain_top(where: str | os.PathLike) -> tuple[str, ...] | None:
    """The first two parts of the first place in the system's trees that `where`'s own chain of links reaches."""
    where = os.fspath(where)
    for _ in range(40):  # the system's own bound on a chain of links
        try:
            target = os.readlink(where)
        except (OSError, ValueError):
            return None
        where = os.path.abspath(os.path.join(os.path.dirname(where), target))
        top = Path(where).parts[1:3]
        if _in_system_trees(top):
            return top
    return None


def _in_system_trees(top: tuple[str, ...]) -> bool:
    """Whether a path's first two parts lie in the system's device and process trees (/dev/shm, a memory file
    system, takes outputs)."""
    return top[:1] in (("dev",), ("proc",), ("sys",)) and top != ("dev", "shm")


def writable_problem(out: Output) -> str | None:
    """Why `out` cannot be written (a dangling link, a file in the way, a read-only, immutable or forbidden
    folder), or None. Through a symbolic link, where it points is checked: the output is written there."""
    if problem := (nul_problem(out.path, out.what) or utf8_problem(out.path, out.what)
                   or link_problem(out.path, out.what)):
        return problem
    shown = _shown(out)
    # a folder on the way that is a link to nothing (or a loop): said as such, never "File exists" once the work is
    # done (votes saved under it were lost after the whole evaluation)
    for above in Path(os.path.abspath(os.fspath(out.path))).parents:
        if problem := link_problem(above, f"{shown}: the folder"):
            return problem
    path = Path(os.path.realpath(os.fspath(out.path)))
    if out.kind == "file" and os.fspath(out.path).endswith(("/", os.sep)):  # `--save-votes newdir/`
        return f"{shown} ends with a slash, which names a folder; a file is written there (drop the slash)"
    if problem := _name_length_problem(out, path):
        return problem
    if path.exists():
        if problem := _shape_problem(out, path):
            return problem
        # a folder every user writes in, sticky (/tmp, /var/tmp) as the folder a command writes into: its lock held
        # every command out of all of /tmp, and its entries are anyone's to plant first
        if out.kind == "folder" and path.is_dir() and os.stat(path).st_mode & 0o1002 == 0o1002:
            return (f"{shown} is a folder every user may write in (as /tmp is), not one of this command's own: name a "
                    "folder inside it")
        if out.kind == "file" and (kind := special_kind(path)):
            return f"{shown} is {kind}, not a file: it is not replaced (choose another path)"
        if out.kind == "file" and not os.access(path, os.W_OK):  # protected on purpose: not ours to replace
            return f"{shown} is read-only; make it writable or choose another path"
        # replacing a folder renames it: an immutable one (chattr +i) or a read-only mount refuses that, even
        # to root, after the whole new output was built; access() reports both
        if out.kind == "replaced" and not os.access(path, os.W_OK):
            return (f"{shown} is read-only or immutable (see lsattr) and cannot be replaced; make it writable or "
                    "choose another path")
    if problem := _in_an_input_problem(out, path):
        return problem
    if out.kind == "folder" and out.writes and path.is_dir():  # a folder of ours planted as a link to another
        for name in out.writes:  # (`units/` -> elsewhere): everything the command put there would land there
            entry = path / name
            if not any(c in name for c in "*?[") and entry.is_symlink() and entry.is_dir():
                return (f"{shown}: {entry} is a symbolic link to the folder {os.path.realpath(entry)}; what this "
                        "command writes there is never written through a link: remove the link")
    existing = _receiving_folder(out, path)
    if not existing.is_dir():
        return f"{shown}: {existing} is {special_kind(existing) or 'a file'}, not a folder"
    # before the folder's permissions (a link to /proc/self was "not writable"): `--output /dev/stdout` passed the
    # checks (a link to whatever stdout was), put its work folder in /dev and ended, after the whole solve, blaming
    # "another process": the system's device and process trees take no output (/dev/shm, a memory file system, does)
    top = Path(os.path.abspath(os.fspath(out.path))).parts[1:3]
    if not _in_system_trees(top) and (through := _device_link(out.path)) is not None:
        top = through  # a link to /dev/stdout replaced what the command printed, or "its disk is full"
    if not top:  # `/` itself (the library's launch wrote its job files and lock there, as root)
        return f"{shown} is the file system's root, not a place for a {'file' if out.kind == 'file' else 'folder'} " \
               "of this package: choose a path of its own"
    if _in_system_trees(top):
        return (f"{shown} is in /{top[0]}, the system's own device and process files, not a place for a "
                f"{'file' if out.kind == 'file' else 'folder'} of this package: choose a path of its own")
    if not os.access(existing, os.W_OK | os.X_OK):
        return (f"{shown}: {existing} is not writable (read-only, or no permission); choose an output where this "
                "user can write")
    return None


def _shape_problem(out: Output, path: Path) -> str | None:
    """A folder where a file is written, or anything else where a folder is (`path`: `out` resolved, existing)."""
    if out.kind == "file" and path.is_dir():
        return f"{_shown(out)} is a folder; a file is written there"
    if out.kind != "file" and not path.is_dir():
        return f"{_shown(out)} is {special_kind(path) or 'a file'}; a folder is written there"
    return None


def _in_an_input_problem(out: Output, path: Path) -> str | None:
    return _input_problem(out, path) if out.kind != "file" else _input_file_problem(out, path)


def place_problem(out: Output) -> str | None:
    """Why `out`'s place is no place for it whoever writes it, or None: a file where a folder is written (or the
    reverse), a folder inside a dataset or an export, one of an input's own files. Not whether this user may write
    there: `launch` asks it of the paths its nodes will write, as another user on another machine
    (`writable_problem` asks both)."""
    path = Path(os.path.realpath(os.fspath(out.path)))
    return (_shape_problem(out, path) if path.exists() else None) or _in_an_input_problem(out, path)


def _receiving_folder(out: Output, path: Path) -> Path:
    """The nearest existing folder that receives `out` (at its real `path`): the folder itself, else its parent's."""
    return _nearest_existing(path if (out.kind == "folder" and path.is_dir()) else path.parent)


def full_disk_problem(out: Output) -> str | None:
    """Why `out` cannot start: its disk has under `MIN_FREE_BYTES` free. Asked once, before any work (never of
    a later part of the same command: its own earlier parts took that space)."""
    existing = _receiving_folder(out, Path(os.path.realpath(os.fspath(out.path))))
    free = shutil.disk_usage(existing).free if existing.is_dir() else MIN_FREE_BYTES
    if free < MIN_FREE_BYTES:
        return (f"{_shown(out)}: the disk of {existing} is full ({free:,} bytes free; needed: free space on its "
                f"disk, at least {MIN_FREE_BYTES >> 20} MiB)")
    return None


def kept_problem(inputs: Iterable[Input], outputs: Iterable[Output]) -> str | None:
    """Why an output would overwrite, hold or break an input (`overlap_problem`, then a folder written into a
    dataset or an export, a file that is one of theirs), or None; nothing about whether it can be written."""
    inputs = [i for i in inputs if i.path not in (None, "")]
    outputs = [o for o in outputs if o.path not in (None, "")]
    if problem := overlap_problem(inputs, outputs):
        return problem
    for out in outputs:
        path = _resolved(out.path)
        if problem := (_input_problem(out, path) if out.kind != "file" else _input_file_problem(out, path)):
            return problem
    return None


def check_kept(inputs: Iterable[Input], outputs: Iterable[Output]) -> None:
    """Raise TRMError (one line) when an output would overwrite, hold or break an input: what a library function
    that writes checks itself, before any work (a command checks that and more, `check_io`, before it calls one)."""
    if problem := kept_problem(inputs, outputs):
        raise TRMError(problem)


#: The notebooks folder of the checkout this package runs from (absent where the package is installed alone).
NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_output(name: str, value: str | os.PathLike | None, default: str | os.PathLike | None = None
                    ) -> str | os.PathLike:
    """A notebook's output parameter `name` (`value`; None: `default`) as the notebook will write it, or one TRMError
    line naming the parameter: an empty or blank text (it became the default, or the current folder, without a
    word), and a path in the notebooks folder (`NOTEBOOKS_DIR`: a dataset or a report written among the notebooks
    dirtied the checkout and broke the notebooks' pair checks)."""
    path = default if value is None else value
    if not isinstance(path, (str, os.PathLike)):
        raise TRMError(f"{name}: expected a path (a str), got {type(path).__name__}")
    if problem := blank_path_problem(path):
        raise TRMError(f"{name} {problem}")
    refuse_nul(path, name)
    folder, resolved = _resolved(NOTEBOOKS_DIR), _resolved(path)
    if resolved == folder or _inside(resolved, folder):
        raise TRMError(f"{name} {os.fspath(path)!r}: lies in the notebooks folder {folder}: a notebook never writes "
                       f"there; name a folder outside it")
    return path


def check_io(inputs: Iterable[Input], outputs: Iterable[Output]) -> None:
    """Raise TRMError (one line) when an input is a broken link, an output overlaps an input or cannot be written;
    before any work. An empty or blank path is refused, named: the system would take it as the current folder."""
    inputs, outputs = list(inputs), list(outputs)
    blank = next(((item, p) for item in (*inputs, *outputs) if (p := blank_path_problem(item.path))), None)
    if blank:
        raise TRMError(f"{blank[0].what} {blank[1]}")
    inputs = [i for i in inputs if i.path is not None]
    outputs = [o for o in outputs if o.path is not None]
    # an input that is a loop of links or a dangling link, named as one (each reader said "not a directory", "no such
    # directory" or "not an export" of its own)
    problem = next(filter(None, (link_problem(i.path, i.what) for i in inputs)), None)
    problem = problem or overlap_problem(inputs, outputs)
    if problem is None:
        problem = next(filter(None, (writable_problem(o) or full_disk_problem(o) for o in outputs)), None)
    if problem is None:  # asked of commands alone: the pipeline writes its own files through the library
        problem = next(filter(None, (_pipeline_file_problem(o, _resolved(o.path)) for o in outputs
                                     if o.kind == "file")), None)
    if problem:
        raise TRMError(problem)
