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
into the file, for the message only. Where `flock` is not available (no `fcntl`, or a file system that
refuses it), the recorded pid decides: a lock whose process is gone on this host is stale and taken over.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Iterator

from trm_kaggle.atomic import pid_alive
from trm_kaggle.errors import TRMError

LOCK_FILE = ".trm_kaggle.lock"

log = logging.getLogger(__name__)


def _holder_record(what: str) -> str:
    command = " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]])[:200]
    return f"{os.getpid()} {socket.gethostname()} {what}\t{command}\n".replace("\n", " ").rstrip() + "\n"


def _read_holder(path: Path) -> tuple[int | None, str, str, str]:
    """(pid, host, what, command) recorded in a lock file; (None, '', '', '') when unreadable."""
    try:
        pid, host, rest = path.read_text(encoding="utf-8", errors="replace").split(" ", 2)
        what, _, command = rest.partition("\t")
        return int(pid), host, what.strip(), command.strip()
    except (OSError, ValueError):
        return None, "", "", ""


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


def _open_lock_file(path: Path):
    """The lock file, opened for reading and writing (created if missing). Its record is rewritten, so only a
    plain file of its own is ever opened: a symbolic link (never followed: its target would be overwritten), a
    file with other names (a hard link: the same), a FIFO or a device is one TRMError, never a hang."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise TRMError(f"{path}: the lock file is a symbolic link; a lock file is never followed (its target "
                           "would be overwritten): remove the link") from None
        raise
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"has {st.st_nlink} names (a hard link: its record would overwrite another file)"
               if st.st_nlink > 1 else None)
    if problem:
        os.close(fd)
        raise TRMError(f"{path}: the lock file {problem}; remove it")
    return os.fdopen(fd, "r+", encoding="utf-8")


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike, what: str, *, required: bool = True,
                   shared: bool = False) -> Iterator[None]:
    """Hold the lock of `directory` (created if missing) while the block runs.

    `what` names this command in the holder record ("training", "submit", "sweep", ...), which is what a
    refused one reads. Raises TRMError at once when another live process holds it (`shared`: when a
    writer holds it; readers share it). `required=False`: a directory where no lock file can be made
    (read-only, full) runs the block unlocked, with a warning for a writer (a submit must still write its
    fallback answer; a reader of a read-only folder has no writer to fear)."""
    directory = Path(directory)
    path = directory / LOCK_FILE
    try:
        if not shared:
            directory.mkdir(parents=True, exist_ok=True)
        f = _open_lock_file(path)
    except OSError as e:
        if required:
            raise
        if not shared:
            log.warning("%s: no lock taken (%s); make sure no other command writes in this directory", directory,
                        e.strerror or e)
        yield
        return
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): the recorded pid decides
        fcntl = None
    with f:
        locked = False
        if fcntl is not None:
            try:
                fcntl.flock(f.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                raise _busy(directory, path) from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
        if not locked:  # no flock here: a recorded live process on this host holds it; a dead one's is stale
            pid, host, _, _ = _read_holder(path)
            if pid and pid != os.getpid() and host == socket.gethostname() and pid_alive(pid):
                raise _busy(directory, path)
        with contextlib.suppress(OSError):  # the record only serves the messages: a full disk costs it alone
            f.seek(0)
            f.truncate()
            f.write(_holder_record(what))
            f.flush()
        try:
            yield
        finally:
            if locked:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            else:
                with contextlib.suppress(OSError):
                    f.seek(0)
                    f.truncate()
