"""A command's results reach standard output, or the command fails: never a silent success.

Python sets `sys.stdout` to None when the process starts with it closed (`trm-kaggle score ... >&-`), and
`print` then writes nothing: the command would exit 0 having shown nothing. A reader that went away
(`... | head -0`) or a device that refuses writes (`> /dev/full`) fail a write, or only the flush at exit,
where Python prints "Exception ignored ..." and exits 120. `checked_stdout` makes each of these one
`error:` line (TRMError), and leaves nothing for the interpreter to report at exit.

Help, usage and `--version` go through `parse_checked`: argparse prints them itself and swallows a failed
write, so `--help > /dev/full` would exit 0 having shown nothing; there it is one `error:` line and status 2.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Callable, Iterator, Sequence, TextIO, TypeVar

from trm_kaggle.errors import TRMError
from trm_kaggle.wording import one_line

Parsed = TypeVar("Parsed")

_WHY = {errno.EPIPE: "its reader closed the pipe", errno.ENOSPC: "its device is full",
        errno.EBADF: "it is closed, or open for reading only"}


class StdoutError(TRMError):
    """Standard output could not take the results."""


def _discard(stream: TextIO) -> None:
    """Point a failed stream's descriptor at /dev/null: what it still buffers goes nowhere, silently (the
    interpreter's flush at exit has nothing left to report)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream without a descriptor: nothing to do
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)


class _Checked:
    """sys.stdout as it was, whose failed writes and flushes are StdoutError (once: the stream is discarded)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def _failed(self, e: OSError) -> StdoutError:
        _discard(self._stream)
        why = _WHY.get(e.errno or 0, e.strerror or str(e) or type(e).__name__)
        return StdoutError(f"the results could not be printed: standard output failed ({why}); send it to a file "
                           "or to /dev/null instead")

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            raise self._failed(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise self._failed(e) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


CLOSED = ("standard output is closed, so the results could not be printed; send it to a file or to /dev/null "
          "instead of closing it")


class _Closed:
    """Stands for a closed sys.stdout (None) while argparse runs: the help or version text it prints is StdoutError,
    where argparse would have sent it to stderr and exited 0."""

    def write(self, text: str) -> int:
        raise StdoutError(CLOSED)

    def flush(self) -> None:
        pass


@contextlib.contextmanager
def checked_stdout() -> Iterator[None]:
    """Run a command whose results go to stdout: StdoutError before it starts when stdout is closed, and when
    a write or the last flush fails."""
    stream = sys.stdout
    if stream is None:
        raise StdoutError(CLOSED)
    sys.stdout = checked = _Checked(stream)
    try:
        yield
        checked.flush()  # what is still buffered: a full device or a gone reader is said now, not at exit
    finally:
        sys.stdout = stream


def parse_checked(parse: Callable[[Sequence[str] | None], Parsed], argv: Sequence[str] | None) -> Parsed:
    """`parse(argv)` (an argparse parser's `parse_args`), whose help, usage and version text reach standard
    output or fail: when argparse has printed one and exits, what it wrote is flushed, and a write or flush that
    fails (a full device, a reader that went away) is one `error:` line on stderr and SystemExit(2) (argparse
    itself swallows the error and exits 0). With stdout closed the same (argparse sent them to stderr, status 0)."""
    stream = sys.stdout
    sys.stdout = checked = _Closed() if stream is None else _Checked(stream)
    try:
        try:
            return parse(argv)
        except SystemExit:
            checked.flush()  # the help argparse printed: its failure is said now, not lost at exit
            raise
    except StdoutError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        sys.stdout = stream


class _Tolerant:
    """sys.stderr as it was, whose failed writes and flushes are dropped (the stream is discarded): stderr carries
    progress, warnings and the error line, never the results."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            _discard(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            _discard(self._stream)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def tolerant_stderr() -> None:
    """A command runs whatever becomes of its standard error: closed (`2>&-`), a full device (`2>/dev/full`), a
    reader that went away. Each failed the command's first progress bar or warning with an OSError that the
    error line, on the same stream, could not say: status 1 and no word, a `submit` whose valid submission was
    written thus said invalid. A closed stderr is pointed at /dev/null (the descriptor too: a child would take
    descriptor 2 for the first file it opens), and a write that fails later is dropped."""
    if sys.stderr is None or not _open_descriptor(2):
        with contextlib.suppress(OSError):
            fd = os.open(os.devnull, os.O_WRONLY)
            if fd != 2:
                os.dup2(fd, 2)
                os.close(fd)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, errors="backslashreplace")
    if not isinstance(sys.stderr, _Tolerant):
        sys.stderr = _Tolerant(sys.stderr)


def _open_descriptor(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
