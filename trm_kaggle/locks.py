"""One writer per directory: the lock `train`, `submit` and `sweep` take on the folder they write.

Two processes writing one run directory interleave its metrics.jsonl and rotate each other's train
states; two submits on one work dir race on the same task folders. Each of these commands holds an
advisory lock on a file inside its directory for as long as it writes there; a second one is refused
with one line that names the holder.

The lock is `flock` on `<directory>/<name>`: the kernel drops it when its process ends, however it ends
(`kill -9` included), so a lock left by a dead process is never an obstacle: the next writer simply takes
it (stale-lock detection costs nothing). The holder's pid, host and command are written into the file,
for the message only. Where `flock` is not available (no `fcntl`, or a file system that refuses it), the
recorded pid decides: a lock whose process is gone on this host is stale and taken over.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Iterator

from trm_kaggle.atomic import pid_alive
from trm_kaggle.errors import TRMError

TRAIN_LOCK = ".train.lock"
SUBMIT_LOCK = ".submit.lock"

log = logging.getLogger(__name__)


def _holder_record() -> str:
    command = " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]])[:200]
    return f"{os.getpid()} {socket.gethostname()} {command}\n"


def _read_holder(path: Path) -> tuple[int | None, str, str]:
    """(pid, host, command) recorded in a lock file; (None, '', '') when unreadable."""
    try:
        pid, host, *command = path.read_text(encoding="utf-8", errors="replace").split(" ", 2)
        return int(pid), host, " ".join(command).strip()
    except (OSError, ValueError):
        return None, "", ""


def _busy(directory: Path, path: Path, what: str) -> TRMError:
    pid, host, command = _read_holder(path)
    who = f"process {pid}" + (f" on {host}" if host and host != socket.gethostname() else "") if pid else "a process"
    doing = f" ({command})" if command else ""
    stop = f"stop it (kill {pid})" if pid and (not host or host == socket.gethostname()) else "stop it"
    return TRMError(f"{directory}: another {what} is running in this directory: {who}{doing}; wait for it or "
                    f"{stop}, or choose another directory")


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike, name: str, what: str, required: bool = True) -> Iterator[None]:
    """Hold the lock `name` of `directory` (created if missing) while the block runs.

    `what` names the writer in the refusal ("training", "submit", "sweep"). Raises TRMError at once when
    another live process holds it. `required=False`: a directory where no lock file can be made (read-only,
    full) runs the block unlocked, with a warning (a submit must still write its fallback answer)."""
    directory = Path(directory)
    path = directory / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+", encoding="utf-8")
    except OSError as e:
        if required:
            raise
        log.warning("%s: no lock taken (%s); make sure no other %s uses this directory", directory,
                    e.strerror or e, what)
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
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                raise _busy(directory, path, what) from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
        if not locked:  # no flock here: a recorded live process on this host holds it; a dead one's is stale
            pid, host, _ = _read_holder(path)
            if pid and pid != os.getpid() and host == socket.gethostname() and pid_alive(pid):
                raise _busy(directory, path, what)
        with contextlib.suppress(OSError):  # the record only serves the messages: a full disk costs it alone
            f.seek(0)
            f.truncate()
            f.write(_holder_record())
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
