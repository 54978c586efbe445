"""Atomic writes: a reader sees the old content or the complete new one, never a half.

Files are written to a temporary sibling and renamed over the target (rename is
atomic on POSIX within one filesystem). A symbolic link in the target's place is replaced itself, never
written through: an entry of an output folder (a run's config.json, a report's report.json) may be a link
someone planted, and following it would overwrite a file outside every folder named. Only a file the user
named (`--output`) is written where its link points (`through_link`). A log appended to (`append_line`)
is refused when it is a link or has other names. Directories are built in a temporary
sibling named `<target>.partial-<pid>` and renamed into place at the end, so a
killed build leaves only a `.partial-*` directory that no loader mistakes for a
dataset; the next build removes such leftovers when their process is gone and the record written beside each
proves it ours. Each finished
directory holds an owner record (`OWNER_RECORD`: its kind and every entry written), the
only proof on which an existing directory is ever replaced.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from trm_kaggle.errors import TRMError, as_os_error, with_path
from trm_kaggle.jsonio import is_regular, not_regular, read_json
from trm_kaggle.names import ascii_number
from trm_kaggle.outputs import OWNER_RECORD, Output, link_problem, refuse_nul, special_kind, writable_problem
from trm_kaggle.wording import one_line

log = logging.getLogger(__name__)

PARTIAL_MARK = ".partial-"
OLD_MARK = ".old-"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def shared_file_mode() -> int:
    """The mode of a file this package writes: what the user's umask leaves of 0666 (as `open` would give), for a
    file a library wrote private (mkstemp's, safetensors' 0600)."""
    return 0o666 & ~_UMASK


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, through_link: bool = False) -> None:
    atomic_write(path, lambda f: f.write(data), mode="wb", through_link=through_link)


def atomic_write_text(path: str | os.PathLike, text: str, *, through_link: bool = False) -> None:
    atomic_write(path, lambda f: f.write(text), mode="w", through_link=through_link)


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = None, *,
                      through_link: bool = False) -> None:
    # json.dumps runs the C encoder; json.dump to a file would take the slow pure-Python path
    text = json.dumps(obj, indent=indent)
    atomic_write(path, lambda f: f.write(text), mode="w", through_link=through_link)


class _Recorder:
    """A file object that remembers the first OSError of its writes.

    torch's archive writer turns a failed write (a full disk, a file size limit) into
    "RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos", which names neither
    the file nor the cause; the OSError recorded here restores both."""

    def __init__(self, f: Any):
        self._f, self.error = f, None

    def write(self, data: Any) -> Any:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def atomic_write(path: str | os.PathLike, write: Callable[[Any], Any], mode: str = "wb", *,
                 through_link: bool = False) -> None:
    """Call `write(fileobj)` on a temporary sibling, fsync it, then rename it over `path`.

    A symbolic link at `path` is itself replaced and its target left as it is, unless `through_link`: a path
    the user named, whose link is then written through (`written_path`). Any OSError of the write (a full
    disk, a file size limit) names `path`, also when the writer (torch, numpy) reported it in its own words."""
    refuse_nul(path, "output")
    path = written_path(path) if through_link else Path(path)
    if kind := special_kind(path):  # a FIFO or a device someone put there is not ours to replace
        raise TRMError(f"{path} is {kind}, not a file: it is not replaced (choose another path)")
    if path.is_dir() and not path.is_symlink():  # said before a temporary file exists (the rename names that one)
        raise TRMError(f"{path} is a folder, not a file: it is not replaced (remove it or choose another path)")
    path.parent.mkdir(parents=True, exist_ok=True)
    # the folder as the system reaches it: mkstemp shortens `link/..` as text (abspath), elsewhere than the rename
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=os.path.realpath(path.parent))
    except OSError as e:  # a read-only folder: named, never the random name of a temporary that was not made
        raise OSError(e.errno, e.strerror, str(path.parent)) from None
    try:
        os.fchmod(fd, shared_file_mode())  # mkstemp makes files private (0600); outputs are meant to be shared
        # text: UTF-8 whatever the locale; a path holding bytes that are not UTF-8 (a surrogate escape) is
        # written escaped ("\udce9"), so the file stays UTF-8 and the write never fails on it
        binary = "b" in mode
        f = os.fdopen(fd, mode, encoding=None if binary else "utf-8", errors=None if binary else "backslashreplace")
        recorder = _Recorder(f)
        try:
            with f:  # closing flushes too: its error is caught here as well
                write(recorder)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise with_path(recorder.error or e, path) from None
        except RuntimeError:
            if recorder.error is None:
                raise
            raise with_path(recorder.error, path) from None
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


_LINKED_LOG = ("{path}: a log must be a regular file, not a symbolic link (never followed: its target would be "
               "written); remove the link")
_SHARED_LOG = "{path}: the log has {n} names (a hard link: its lines would go to another file too); remove it"


def check_log(path: str | os.PathLike) -> None:
    """TRMError when the log `path` is a symbolic link or a hard link: appending would write to another file,
    outside the folder; or a file this user cannot append to (a resumed training once trained a whole log
    interval, then failed at its first line and lost those steps). Checked before work starts; `open_log` refuses
    each again when it opens the file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise TRMError(_LINKED_LOG.format(path=path))
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise TRMError(_SHARED_LOG.format(path=path, n=st.st_nlink))
    if stat.S_ISREG(st.st_mode):
        try:  # opened for appending and closed: nothing written
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOFOLLOW", 0)))
        except OSError as e:
            raise with_path(e, path) from None


def open_log(path: str | os.PathLike) -> int:
    """A log file (metrics.jsonl, a worker's log) opened for appending: its descriptor, blocking. Anything but a
    regular file in its place is refused, never waited on (a FIFO's open for writing waits for a reader), and
    never followed or shared: a symbolic link or a file with other names (a hard link) would carry the lines to
    a file outside the folder, as a lock file's record would (`trm_kaggle.locks`)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO without a reader
            raise TRMError(f"{path}: a log must be a regular file, not a pipe (FIFO)") from None
        if e.errno == errno.ELOOP or os.path.islink(path):
            raise TRMError(_LINKED_LOG.format(path=path)) from None
        raise with_path(e, path) from None
    try:
        st = os.fstat(fd)
        kind = not_regular(st.st_mode)  # a directory cannot be opened for writing at all
        if kind:
            raise TRMError(f"{path}: a log must be a regular file, not {kind}")
        if st.st_nlink > 1:
            raise TRMError(_SHARED_LOG.format(path=path, n=st.st_nlink))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line to a log file (`open_log`), UTF-8; an OSError names the file."""
    fd = open_log(path)
    try:
        with os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(line + "\n")
    except OSError as e:
        raise with_path(e, path) from None


def pid_alive(pid: int) -> bool:
    """Whether a process of this pid runs on this machine (one we may not signal counts as running; one that has
    exited and waits for its parent to reap it, a zombie, does not: it writes nothing any more)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether /proc says `pid` has exited (state Z or X) and is only waiting to be reaped; False without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows its last ")"
    state = stat[stat.rfind(b")") + 1:].split()[:1]
    return state in ([b"Z"], [b"X"])


#: Beside each `<target>.partial-<pid>` folder while it is built, and each `<target>.old-<pid>` one while the output
#: it holds is replaced: the proof that we made it (a folder of that name without one, such as a user's
#: `exp.partial-1999` or a backup `cp -r exp exp.old-2023`, is never removed). Beside, not inside: the folder's
#: contents are the output's own.
PARTIAL_RECORD_SUFFIX = ".record"
PARTIAL_FORMAT = "trm_kaggle.partial"
_HOST = socket.gethostname()  # a pid is a process of this host only: another host's partial folder is never stale


def _partial_record(tmp: Path) -> Path:
    return tmp.with_name(tmp.name + PARTIAL_RECORD_SUFFIX)


def _partial_of_ours(p: Path) -> bool:
    """Whether `p`, a `.partial-<pid>` or `.old-<pid>` folder, has the record of this host that `atomic_directory`
    writes beside it."""
    record = _partial_record(p)
    try:
        if not is_regular(record, "partial record"):
            return False
        value = read_json(record, "partial record")
    except TRMError:
        return False
    return isinstance(value, dict) and value.get("format") == PARTIAL_FORMAT and value.get("host") == _HOST


def _write_partial_record(record: Path) -> None:
    """The record beside a partial or put-aside folder, created afresh (never over a file someone else put
    there)."""
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"format": PARTIAL_FORMAT, "host": _HOST, "pid": os.getpid()}, f)


def remove_tree(path: str | os.PathLike) -> bool:
    """Remove the folder `path`, which this package made; whether it is gone. shutil's rmtree holds a file
    descriptor per level of depth: under an open-file limit (`ulimit -n`) it failed on a deep tree, and each failed
    bundle build left its 3 MB copy of the sources behind. What it leaves is then removed by path, with one
    descriptor at a time (a link inside is removed, never followed)."""
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path) and not os.path.islink(path):
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files + dirs:
                entry = os.path.join(root, name)
                with contextlib.suppress(OSError):
                    os.rmdir(entry) if os.path.isdir(entry) and not os.path.islink(entry) else os.unlink(entry)
        with contextlib.suppress(OSError):
            os.rmdir(path)
    return not os.path.lexists(path)


@contextlib.contextmanager
def scratch_folder(prefix: str, dir: str | os.PathLike | None = None) -> Iterator[Path]:
    """A new folder of this package's own (in `dir`, default the system's temporary folder) for the block's work,
    removed after it whatever happened (`remove_tree`); one that cannot be removed is named in a warning."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    try:
        yield path
    finally:
        if not remove_tree(path):
            log.warning("%s: a scratch folder of this package could not be removed; remove it by hand", path)


def _discard_partial(tmp: Path) -> None:
    remove_tree(tmp)
    if os.path.lexists(tmp) and not tmp.is_symlink():  # not all of it could go: its record stays, so that it is
        return  # known ours and a later run of this package removes it (`remove_stale_partials`)
    with contextlib.suppress(OSError):
        _partial_record(tmp).unlink()


def _in_the_way(p: Path) -> bool:
    """Whether something we did not make stands at `p` (a `.partial-<pid>` or `.old-<pid>` name of this process) or
    at its record: the user's. One of ours from before (a process of our pid: pids are reused) is removed."""
    if not (os.path.lexists(p) or os.path.lexists(_partial_record(p))):
        return False
    if not _partial_of_ours(p) or (os.path.lexists(p) and (p.is_symlink() or not p.is_dir())):
        return True
    _discard_partial(p)
    return False


def remove_stale_partials(target: Path, kind: str) -> list[Path]:
    """Delete the leftovers of a killed build of `target` that provably are ours: `<target>.partial-<pid>` folders
    whose process is gone and whose record says this host made them, and `<target>.old-<pid>` ones (the previous
    output, put aside while it was replaced) with that record and the owner record of a `kind` we wrote, once the
    replacement is in place (with no `target`, the old one is all there is, and it is kept). A folder or link
    of that name that is not provably ours (a user's backup `exp.old-2023`, even one copied with our owner
    record) is never touched."""
    removed = []
    for mark in (PARTIAL_MARK, OLD_MARK):
        for p in target.parent.glob(glob.escape(target.name + mark) + "*"):
            suffix = p.name[len(target.name + mark):]
            if suffix.endswith(PARTIAL_RECORD_SUFFIX):  # a record whose folder went into
                folder = p.with_name(p.name.removesuffix(PARTIAL_RECORD_SUFFIX))  # place, its process killed then
                number = folder.name[len(target.name + mark):]
                if (pid := ascii_number(number)) is not None and not pid_alive(pid) and not os.path.lexists(folder) \
                        and _partial_of_ours(folder):
                    p.unlink(missing_ok=True)
                continue
            # a name read from the folder: only our own `<pid>` suffix counts ('OUT.old-²' is a user's folder)
            if (pid := ascii_number(suffix)) is None or pid_alive(pid) or p.is_symlink() or not p.is_dir():
                continue
            if mark == OLD_MARK and (not target.is_dir() or owner_problem(p, kind) is not None):
                continue
            if not _partial_of_ours(p):  # a user's copy (`cp -r exp exp.old-2023` carries our owner record too)
                continue
            _discard_partial(p)
            removed.append(p)
    return removed


OWNER_FORMAT = "trm_kaggle.output"


def _entries(directory: Path) -> list[str]:
    """Every file and folder under `directory`, as sorted relative POSIX paths."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*"))


def write_owner_record(directory: Path, kind: str) -> None:
    """Record in `directory` that we wrote it, as a `kind`, with exactly the entries it holds now."""
    atomic_write_json(directory / OWNER_RECORD, {"format": OWNER_FORMAT, "kind": kind, "entries": _entries(directory)},
                      indent=1)


def owner_problem(directory: Path, kind: str) -> str | None:
    """Why `directory` is not provably a `kind` this package wrote (None when it is).

    The proof is the owner record `atomic_directory` leaves in each output: it names the
    kind and every entry written. A directory holding anything the record does not list
    (a file the user added, a run's train states) is not ours to replace.
    """
    record_path = directory / OWNER_RECORD
    try:  # a FIFO or a folder in the record's place is named as what it is, never called "no record"
        if not is_regular(record_path, "owner record"):
            if record_path.is_dir():  # named as what stands there, as a FIFO is, never "no record"
                return f"its owner record {record_path} is a folder, not a file"
            if record_path.is_symlink():
                return f"its owner record {record_path} is a link to nothing"
            return "it holds no record that this package wrote it"
        record = read_json(record_path, "owner record")
    except TRMError as e:
        return str(e)
    if not isinstance(record, dict) or record.get("format") != OWNER_FORMAT or not isinstance(record.get("entries"), list):
        return f"{record_path} is not an owner record of this package"
    if record.get("kind") != kind:
        return f"it is {_a(repr(record.get('kind')))} output, not {_a(repr(kind))}"
    foreign = sorted(set(_entries(directory)) - set(record["entries"]) - {OWNER_RECORD})
    if foreign:
        return f"it holds {len(foreign)} entries this package did not write there (e.g. {foreign[0]!r})"
    return None


def _a(noun: str) -> str:
    """The noun with its indefinite article ('an export', 'a dataset'; quotes are looked through)."""
    return ("an " if noun.lstrip("'\"")[:1].lower() in "aeiou" else "a ") + noun


def written_path(path: str | os.PathLike) -> Path:
    """Where an output named `path` is written: through a symbolic link, at the path it points to (the link is
    left as it is, and no `.old-`/`.partial-` file is made beside it); a dangling link is refused with its own
    message (nothing is created at the path it names)."""
    path = Path(path)
    if not path.is_symlink():
        return path
    if problem := link_problem(path):
        raise TRMError(problem)
    return Path(os.path.realpath(path))


def not_ours_problem(target: str | os.PathLike, kind: str) -> str | None:
    """Why `atomic_directory(target, kind=kind)` would refuse what stands at `target` whoever runs it: a non-empty
    folder this package did not write as a `kind` (`owner_problem`); None for anything else. `launch` asks it of
    the folders a job will replace; `replace_problem` asks it with the rest."""
    real = Path(os.path.realpath(target))
    if real.is_dir() and any(real.iterdir()) and (problem := owner_problem(real, kind)):
        return (f"{Path(target).absolute()} exists, is not empty and is not {_a(kind)} written by this package "
                f"({problem}); refusing to replace it (choose another output directory)")
    return None


def replace_problem(target: str | os.PathLike, kind: str, what: str = "output") -> str | None:
    """Why `atomic_directory(target, kind=kind)` would refuse (None when it would not): each refusal, said before
    a byte is written. A dangling link, a file or a read-only (or immutable) folder in the way, a folder that
    cannot receive the new one, or a non-empty folder this package did not write as a `kind`."""
    real = Path(os.path.realpath(target))
    try:
        in_the_way = real.exists() and not real.is_dir()
    except OSError:  # a name past its file system's length: `writable_problem` says so in the package's words
        in_the_way = False
    if in_the_way:
        return f"{Path(target).absolute()} exists and is {special_kind(real) or 'a file'}, not a directory"
    problem = writable_problem(Output(Path(target).absolute(), what, "replaced"))
    if problem:
        return problem
    if problem := not_ours_problem(target, kind):
        return problem
    for folder, _, _ in os.walk(real) if real.is_dir() else ():  # the old one is removed once the new stands: a
        if not os.access(folder, os.W_OK | os.X_OK):  # read-only folder inside it kept its files beside the new
            return (f"{folder} (inside {Path(target).absolute()}) is read-only: the {kind} it holds could not be "
                    "removed once replaced; make it writable or choose another output directory")
    return None


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, change time) of what stands at `path`, None where nothing does: a directory another
    writer put there, or changed, differs."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


class Found:
    """What stood at an output's path when a command started (`found_at`): given to `atomic_directory`, whose swap
    then keeps another command's output that appeared during this one's long work (an evaluation, the plots of a
    comparison) instead of taking it for what stood there before."""

    def __init__(self, identity: tuple[int, int, int] | None):
        self.identity = identity


def found_at(target: str | os.PathLike) -> Found:
    """What stands at `target` now, taken at a command's start, before its long work (through a symbolic link:
    what it points to, as `atomic_directory` replaces it)."""
    try:
        return Found(_identity(Path(target).absolute()))
    except ValueError:  # a NUL in the path: `atomic_directory` refuses it in its own words
        return Found(None)


def taken_problem(target: str | os.PathLike, kind: str, found: Found) -> str | None:
    """Why the `kind` at `target` is no longer this command's to replace (None while it is): another command wrote
    one there since `found` was taken. The first to finish keeps it; the other ends with this line."""
    try:
        now = _identity(Path(target).absolute())
    except ValueError:
        return None
    return None if now == found.identity else _taken_line(target, kind)


def _taken_line(target: str | os.PathLike, kind: str) -> str:
    return (f"{target}: another command wrote this {kind} while this one was built; that one stands and this one is "
            "discarded (run the command again to replace it)")


class RewrittenFile:
    """A file one command writes again and again while it runs (submit's --output: the fallback first, then the
    answers as they come), kept from a second writer.

    Each `write` first checks that what stands at the path is what this command found there at its start or wrote
    there last. Anything else means another process wrote the file meanwhile (two submits naming one --output):
    the write is refused (`OutputTaken`) and that file stands, so two commands never both call one file their
    valid output while it holds only one's answers. The check and the rename hold an `flock` on the folder, so
    two writers cannot both pass the check and then rename in turn."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._expected = _identity(written_path(self.path))
        self.taken: OutputTaken | None = None

    def write(self, write: Callable[[], Any]) -> None:
        """Call `write()` (an atomic write of the path) unless another process wrote the path since."""
        if self.taken is not None:
            raise self.taken
        target = written_path(self.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with _folder_lock(target.parent):
            now = _identity(target)
            if now is None and self._expected is not None:  # removed (no writer removes: each replaces): written
                log.warning("%s was removed while this command ran: written again", one_line(self.path))
            elif now != self._expected:
                self.taken = OutputTaken(f"{self.path}: another process wrote this file while this command ran "
                                         "(two commands writing one output?); it is left as that one wrote it")
                raise self.taken
            write()
            self._expected = _identity(target)


class OutputTaken(TRMError):
    """`RewrittenFile.write` refused: another process wrote the file since this command last did."""


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive `flock` on `folder` for the block: a few milliseconds of a check and a rename. Where the
    folder cannot be opened or locked (no fcntl, a file system without flock) the block runs unlocked."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, *, kind: str, found: Found | None = None) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success move it to `target`.

    `kind` names what is built ("dataset", "export", ...). An existing non-empty `target`
    is replaced only when `owner_problem` proves it is a `kind` we wrote and holds nothing
    else; anything else is refused, so a typo never deletes unrelated files (a run
    directory, a dataset someone added notes to). Every refusal (`replace_problem`) comes before
    the temporary directory exists. Through a symbolic link the output is built and replaced where
    the link points. The old directory is removed only after the new one is in place; whatever
    fails, no `.partial-<pid>` or `.old-<pid>` directory is left behind (the old output is put back
    when the new one could not take its place).

    `found`: what stood at `target` when the command started (`found_at`), for a command whose output is
    built after long work; without it, what stands there when the block is entered. Another output in its place
    at the swap is kept and this one discarded (`taken_problem`): two commands building one output at once never
    both say they succeeded.
    """
    refuse_nul(target, f"output {kind}")
    problem = replace_problem(target, kind)
    if problem:
        raise TRMError(problem)
    target = written_path(Path(target).absolute())
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(target, kind)
    if found is None:  # what stands there now: another writer's output in its place is seen at the swap
        found = Found(_identity(target))
    elif _identity(target) != found.identity:  # taken already: said before anything is built
        raise TRMError(_taken_line(target, kind))
    tmp = target.parent / f"{target.name}{PARTIAL_MARK}{os.getpid()}"
    record = _partial_record(tmp)
    if _in_the_way(tmp):
        raise TRMError(f"{tmp} (or {record.name}) exists and this package did not make it; it is where "
                       f"{target.name} is built: move it away")
    try:
        _write_partial_record(record)
        tmp.mkdir()
        yield tmp
        write_owner_record(tmp, kind)
    except Exception as e:  # a streamed write's error names no file (or only in a library's words): name the output
        _discard_partial(tmp)
        named = as_os_error(e, target)
        if named is None:
            raise
        inside = os.fspath(named.filename or "")
        if inside == os.fspath(tmp) or inside.startswith(os.fspath(tmp) + os.sep):  # a file of the folder just
            # removed: named where it would have been (a report's picture named `rep.partial-<pid>/...`)
            named = OSError(named.errno, named.strerror, os.fspath(target) + inside[len(os.fspath(tmp)):])
        raise named from None
    except BaseException:
        _discard_partial(tmp)
        raise
    raced = TRMError(_taken_line(target, kind))
    # the check and the swap under the folder's lock: two commands finishing at once both passed the check, then
    # each put its output in place in turn (both said done, one silently replaced)
    with _folder_lock(target.parent):
        if _identity(target) != found.identity:  # two commands built one output at once: the first to finish
            _discard_partial(tmp)  # keeps it
            raise raced
        old = target.parent / f"{target.name}{OLD_MARK}{os.getpid()}"
        if _in_the_way(old):
            _discard_partial(tmp)
            raise TRMError(f"{old} exists and this package did not make it; it is where the {kind} it replaces is "
                           "put aside: move it away")
        moved = False
        try:
            if target.exists():
                _write_partial_record(_partial_record(old))  # what proves the put-aside output ours, were we killed
                os.replace(target, old)
                moved = True
            os.replace(tmp, target)
        except BaseException as e:
            if moved and not target.exists():
                os.replace(old, target)  # the old output back where it was
                _discard_partial(old)  # its record
            elif moved:  # another writer's output took its place meanwhile: the old one is superseded
                _discard_partial(old)
                _discard_partial(tmp)
                if isinstance(e, OSError):  # the two swapped at the same instant: said as the check above says it
                    raise raced from None
            else:
                _discard_partial(old)  # its record, written before a move that failed
            _discard_partial(tmp)
            raise
    with contextlib.suppress(OSError):  # in place: the record of the partial folder has served
        _partial_record(tmp).unlink()
    if moved:
        _discard_partial(old)
