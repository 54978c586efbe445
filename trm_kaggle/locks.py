"""One writer per directory: the one lock every command takes on the folder it writes.

Two processes writing one folder interleave its files: two trainings rotate each other's train states, a
training inside a sweep's folder mixes with the sweep's record, two submits race on the same task folders,
two `regress --update-baselines` each rewrite baselines.json from what they read first (one update is lost).
So every command that writes into a folder it keeps (`train` its run folder, `submit` its --work-dir,
`sweep` its --sweep-dir, `pipeline` its --work-dir, `regress` its --out and, updating baselines, its
notebooks folder, `launch` its --out) holds the same lock, the file `LOCK_FILE` in that folder, for as long
as it writes there; whichever command comes second is refused with one line naming the command that holds
the folder. Readers that must not see a folder half rewritten (`regress` comparing with the baselines an
update is rewriting) take it shared: any number of readers, or one writer.

The lock is `flock` on `<directory>/LOCK_FILE`: the kernel drops it when its process ends, however it ends
(`kill -9` included), so a lock left by a dead process is never an obstacle: the next writer simply takes
it (stale-lock detection costs nothing). The holder's pid, host, what it does and its command are written
into the file, for the message only (a reader's line is added to those of the other live readers sharing it). Where `flock` is not available (no `fcntl`, or a file system that
refuses it: ENOLCK on some NFS mounts), the recorded pid decides: a lock whose process is gone on this host is
stale and taken over; one recorded by another host is refused (whether that process lives cannot be seen from
here: the message says to remove the file once it has ended), never guessed stale.

A command that checks its inputs before it writes calls `refuse_if_held` first (a busy folder is refused at
once, and nothing is created) and takes the lock where it writes its first byte. A command that starts
children to write under its lock (a sweep's trainings, each in a run folder the sweep holds from its start)
hands the lock down (`hand_down`): the child's `directory_lock` of that folder goes through, everyone else's
is still refused, and the folder stays held until the parent and the child have both ended.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, MutableMapping

from trm_kaggle.atomic import pid_alive
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import not_regular
from trm_kaggle.outputs import LOCK_FILE  # the lock's name, kept with the other names reserved for records

#: The environment variable naming the lock files' descriptors a child was handed (`hand_down`).
HANDED_DOWN = "TRM_KAGGLE_HELD_LOCKS"

log = logging.getLogger(__name__)


_RECORD_BYTES = 1 << 16  # a record line is short (its command is cut at 200 characters); readers add one each


def _holder_record(what: str) -> str:
    command = " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]])[:200]
    command = command.encode("utf-8", "backslashreplace").decode("utf-8")  # bytes that are not UTF-8, escaped
    return f"{os.getpid()} {socket.gethostname()} {what}\t{command}\n".replace("\n", " ").rstrip() + "\n"


Holder = tuple[int | None, str, str, str]  # (pid, host, what, command) of one record line
_NO_HOLDER: Holder = (None, "", "", "")


def _read_holders(path: Path) -> list[Holder]:
    """Every (pid, host, what, command) recorded in a lock file, one a line (a writer's, or each reader's that
    shares it); [] when unreadable. A line that does not parse is skipped."""
    try:  # a lock file grown huge is read no further than _RECORD_BYTES
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:  # non-blocking: a FIFO put there meanwhile is never waited on
            lines = f.read(_RECORD_BYTES).split(b"\n")
    except OSError:
        return []
    holders = []
    for line in lines:
        try:
            pid, host, rest = line.decode("utf-8", errors="replace").split(" ", 2)
            what, _, command = rest.partition("\t")
            if int(pid) > 0:  # a pid of 0 or below would name a process group to os.kill
                holders.append((int(pid), host, what.strip(), command.strip()))
        except ValueError:
            continue
    return holders


def _may_live(holder: Holder) -> bool:
    """Whether the process of a record line may still hold the lock: alive on this host, or on another host
    (which cannot be seen from here)."""
    pid, host = holder[0], holder[1]
    return bool(pid) and (bool(host) and host != socket.gethostname() or pid_alive(pid))


def _read_holder(path: Path) -> Holder:
    """The holder a lock file records: its first line whose process may live (a reader that has ended leaves its
    line, and a refusal must name the reader that still holds the folder, not "a process"), else its first line
    (the last holder); (None, '', '', '') when unreadable."""
    holders = _read_holders(path)
    return next((h for h in holders if _may_live(h)), holders[0] if holders else _NO_HOLDER)


def holder_kind(directory: str | os.PathLike) -> str:
    """What the command holding (or last holding) `directory`'s lock said it does there ("submit", "pipeline",
    ...), or '' when no lock record can be read."""
    return _read_holder(Path(directory) / LOCK_FILE)[2]


def holder_pid(directory: str | os.PathLike) -> int | None:
    """The process recorded as holding (or last holding) `directory`'s lock, or None when no record can be read."""
    return _read_holder(Path(directory) / LOCK_FILE)[0]


def ancestor_pids() -> set[int]:
    """The processes this one descends from (its parent, the parent's parent, ...; Linux's /proc, else the parent
    alone): a command that one of them runs works under that one's locks."""
    pids, pid = set(), os.getppid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:  # "pid (name) state ppid ...": the name may hold spaces and parentheses, the last ')' ends it
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _busy(directory: Path, path: Path) -> TRMError:
    pid, host, what, command = _read_holder(path)
    here = not host or host == socket.gethostname()
    if pid and here and not pid_alive(pid):  # the record of a reader that is gone: another one holds it
        pid, what, command = None, "", ""
    who = f"process {pid}" + ("" if here else f" on {host}") if pid else "a process"
    doing = f" ({command})" if command else ""
    stop = f"stop it (kill {pid})" if pid and here else "stop it"
    return TRMError(f"{directory}: another {what or 'trm-kaggle command'} is running in this directory: {who}{doing}; "
                    f"wait for it or {stop}, or choose another directory")


def _open_lock_file(path: Path, create: bool = True, writable: bool = True):
    """The lock file, opened for reading and writing (created if missing, with `create`; read only, never
    created, without `writable`). Its record is rewritten, so only a plain file of its own is ever opened: a
    symbolic link (never followed: its target would be overwritten), a file with other names (a hard link: the
    same), a FIFO or a device is one TRMError, never a hang."""
    flags = ((os.O_RDWR | (os.O_CREAT if create else 0)) if writable else os.O_RDONLY) \
        | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise TRMError(f"{path}: the lock file is a symbolic link; a lock file is never followed (its target "
                           "would be overwritten): remove the link") from None
        try:  # a socket cannot be opened (ENXIO, "No such device or address"): say what stands there
            kind = not_regular(os.lstat(path).st_mode)
        except (OSError, ValueError):
            kind = None
        if kind:
            raise TRMError(f"{path}: the lock file is {kind}, not a regular file; remove it") from None
        raise
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"has {st.st_nlink} names (a hard link: its record would overwrite another file)"
               if st.st_nlink > 1 else None)
    if problem:
        os.close(fd)
        raise TRMError(f"{path}: the lock file {problem}; remove it")
    return os.fdopen(fd, "r+" if writable else "r", encoding="utf-8")


def _read_only_lock_file(path: Path):
    """The lock file opened for reading, where this user may not write it (another user's, mode 444, a
    read-only folder), or None when it cannot be opened at all: flock takes a read-only file all the same, so a
    live holder is still seen and refused, never run beside."""
    try:
        return _open_lock_file(path, create=False, writable=False)
    except (OSError, TRMError):
        return None


@contextlib.contextmanager
def _closed_quietly(f) -> Iterator[None]:
    """Close the lock file when the block ends. A holder record a full disk refused is still in the file's buffer
    and is flushed again at close: that error costs the record alone, never the command's result (a submit that
    wrote its answer ended with status 2 and a line naming no file)."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # the descriptor is closed even when the flush fails
            f.close()


@dataclass
class HeldLock:
    """A folder's lock this process holds (what `directory_lock` yields): `fd` is its lock file's descriptor;
    `handed_down` once a child shares it."""

    directory: Path
    fd: int
    handed_down: bool = False


def hand_down(lock: HeldLock, env: MutableMapping[str, str]) -> tuple[int, ...]:
    """Let a child process work under `lock`: adds the lock file's descriptor to the child's environment `env`
    and returns the descriptors to pass it (`subprocess.Popen(..., env=env, pass_fds=...)`). The child's
    `directory_lock` of that folder then goes through without taking a lock of its own (parent and child hold
    one open lock file: the folder stays held until both have ended, and its record keeps naming the parent)."""
    env[HANDED_DOWN] = ",".join(dict.fromkeys([*filter(None, env.get(HANDED_DOWN, "").split(",")), str(lock.fd)]))
    lock.handed_down = True
    return (lock.fd,)


def _handed_down(path: Path) -> int | None:
    """The descriptor of `path` this process was handed by the holder of its lock (`hand_down`), else None:
    a descriptor named in HANDED_DOWN that is open here on that very file (the same device and inode)."""
    names = os.environ.get(HANDED_DOWN, "")
    if not names:
        return None
    try:
        here = os.lstat(path)
    except OSError:
        return None
    for name in names.split(","):
        try:
            fd = int(name)
            held = os.fstat(fd)
        except (ValueError, OSError, OverflowError):  # not a number (or none a descriptor can be), or not open
            continue  # in this process (a grandchild)
        if (held.st_dev, held.st_ino) == (here.st_dev, here.st_ino):
            return fd
    return None


def _take(f, directory: Path, path: Path, shared: bool):
    """Lock the open lock file `f` (non-blocking) or raise `_busy`; returns fcntl when flock holds it, else None
    (no flock here: a live recorded holder on this host was refused, a dead one's record is stale)."""
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): the recorded pid decides
        fcntl = None
    if fcntl is not None:
        try:
            fcntl.flock(f.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return fcntl
        except BlockingIOError:
            raise _busy(directory, path) from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
    pid, host, what, command = _read_holder(path)
    if not pid or pid == os.getpid():
        return None
    if host == socket.gethostname():
        if pid_alive(pid):
            raise _busy(directory, path)
        return None  # its process is gone: a stale record
    # another host's process (a shared file system): whether it lives cannot be seen from here, so no guess
    raise TRMError(f"{directory}: this file system cannot lock files (flock refused), and {path} records "
                   f"{what or 'a trm-kaggle command'} as process {pid} on {host}"
                   + (f" ({command})" if command else "") + f", which cannot be checked from {socket.gethostname()}: "
                   f"if that process has ended, remove {path}; otherwise wait for it, or choose another directory")


def refuse_if_held(directory: str | os.PathLike) -> None:
    """TRMError naming the holder when another live process holds `directory`'s lock; creates and writes
    nothing. A command that checks its inputs before its first write calls this first (a busy folder is refused
    at once) and takes `directory_lock` where it writes its first byte (which decides: the check is no lock)."""
    path = Path(directory) / LOCK_FILE
    if not os.path.lexists(path) or _handed_down(path) is not None:
        return
    try:
        f = _open_lock_file(path, create=False)
    except FileNotFoundError:
        return
    except OSError:  # cannot be opened for writing here (another user's, a read-only folder): read it
        if (f := _read_only_lock_file(path)) is None:
            return
    with f:
        if (locker := _take(f, Path(directory), path, shared=False)) is not None:
            locker.flock(f.fileno(), locker.LOCK_UN)


def _others_sharing(path: Path, shared: bool) -> str:
    """The record lines a reader taking the lock keeps: those of the other readers that may still hold it (a second
    comparison once overwrote the first one's line, and when it ended an update was refused naming "a process"
    though the first still held the folder). A writer holds it alone: its line replaces the file's. Two readers
    taking it at the same instant may each drop the other's line: the record serves the messages only."""
    if not shared:
        return ""
    return "".join(f"{pid} {host} {what}\t{command}\n" for pid, host, what, command in _read_holders(path)
                   if pid != os.getpid() and _may_live((pid, host, what, command)))


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike, what: str, *, required: bool = True,
                   shared: bool = False) -> Iterator[HeldLock | None]:
    """Hold the lock of `directory` (created if missing) while the block runs; yields it (None when unlocked).

    `what` names this command in the holder record ("training", "submit", "sweep", ...), which is what a
    refused one reads. Raises TRMError at once when another live process holds it (`shared`: when a
    writer holds it; readers share it). `required=False`: a directory where no lock file can be made
    (read-only, full, something else than a plain file in its place) runs the block unlocked, with a warning
    for a writer (a submit must still write its fallback answer; a reader of a read-only folder has no writer
    to fear). A lock handed down by the parent that holds it (`hand_down`) is used as it is."""
    directory = Path(directory)
    path = directory / LOCK_FILE
    if (fd := _handed_down(path)) is not None:
        yield HeldLock(directory, fd)
        return
    try:
        if not shared:
            directory.mkdir(parents=True, exist_ok=True)
        f = _open_lock_file(path)
    except (OSError, TRMError) as e:  # TRMError: a link, FIFO or hard link in the lock file's place
        # a lock file this user may only read is locked all the same (its holder record stays as it is): a second
        # submit once warned "no lock taken" and ran beside the live one that had made it
        only_read = getattr(e, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS)
        f = _read_only_lock_file(path) if only_read else None
        if f is None:
            if required:
                raise
            if not shared:
                log.warning("%s: no lock taken (%s); make sure no other command writes in this directory",
                            directory, getattr(e, "strerror", None) or e)
            yield None
            return
    with _closed_quietly(f):
        locker = _take(f, directory, path, shared)
        with contextlib.suppress(OSError):  # the record only serves the messages: a full disk costs it alone
            record = _others_sharing(path, shared) + _holder_record(what)  # read before the truncation
            f.seek(0)
            f.truncate()
            f.write(record)
            f.flush()
        held = HeldLock(directory, f.fileno())
        try:
            yield held
        finally:
            if locker is None:  # no flock: the record was the lock
                with contextlib.suppress(OSError):
                    f.seek(0)
                    f.truncate()
            elif not held.handed_down:  # a child may still hold it: closing ours leaves it held until it ends
                locker.flock(f.fileno(), locker.LOCK_UN)
