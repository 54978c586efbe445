"""Atomic writes: a reader sees the old content or the complete new one, never a half.

Files are written to a temporary sibling and renamed over the target (rename is
atomic on POSIX within one filesystem). Directories are built in a temporary
sibling named `<target>.partial-<pid>` and renamed into place at the end, so a
killed build leaves only a `.partial-*` directory that no loader mistakes for a
dataset; the next build removes such leftovers when their process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from trm_kaggle.errors import TRMError

PARTIAL_MARK = ".partial-"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data), mode="wb")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda f: f.write(text), mode="w")


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = None) -> None:
    # json.dumps runs the C encoder; json.dump to a file would take the slow pure-Python path
    text = json.dumps(obj, indent=indent)
    atomic_write(path, lambda f: f.write(text), mode="w")


def atomic_write(path: str | os.PathLike, write: Callable[[Any], Any], mode: str = "wb") -> None:
    """Call `write(fileobj)` on a temporary sibling, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes files private (0600); outputs are meant to be shared
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(target: Path) -> list[Path]:
    """Delete `<target>.partial-<pid>` directories whose building process is gone."""
    removed = []
    for p in target.parent.glob(target.name + PARTIAL_MARK + "*"):
        suffix = p.name[len(target.name + PARTIAL_MARK):]
        if suffix.isdigit() and not _pid_alive(int(suffix)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, *, is_replaceable: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success move it to `target`.

    An existing `target` is replaced only when `is_replaceable(target)` says it is
    something we built before (for example a dataset); anything else is refused so
    that a typo never deletes unrelated files. The old directory is removed only
    after the new one is in place.
    """
    target = Path(target).absolute()
    if target.exists():
        if not target.is_dir():
            raise TRMError(f"{target} exists and is not a directory")
        if any(target.iterdir()) and not (is_replaceable and is_replaceable(target)):
            raise TRMError(
                f"{target} exists, is not empty and does not look like output of this command; "
                "refusing to replace it (choose another output directory or remove it)"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(target)
    tmp = target.parent / f"{target.name}{PARTIAL_MARK}{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.parent / f"{target.name}.old-{os.getpid()}"
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
