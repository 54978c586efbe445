"""The progress bar class every module uses: tqdm's notebook widget where it can be drawn, else the text bar.

`tqdm.auto` makes the same choice, but inside a Jupyter kernel without ipywidgets (a papermill run, a
sandboxed kernel) it warns with a TqdmWarning before falling back to the text bar. Here the fallback is
chosen without the warning: a text bar is the right bar there, not a problem to report.

Off a terminal (a log file, a pipe, a notebook's captured stderr) a redrawn bar is one ever-growing line of
carriage returns: tens of kilobytes for one training run. There the text bar prints whole lines instead, one at
each tenth of its total and at least one every `LINE_EVERY_S` seconds, and its final state when it closes.
"""

from __future__ import annotations

import importlib.util
import sys
import time

from tqdm.std import tqdm as _text_tqdm

#: Off a terminal: the longest wait between two lines of a bar that is moving.
LINE_EVERY_S = 30.0


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LineTqdm(_text_tqdm):
    """tqdm's text bar; off a terminal it prints a line at each tenth of the total (and every LINE_EVERY_S
    seconds, and when it closes) instead of redrawing in place. On a terminal it is tqdm's bar unchanged."""

    def __init__(self, *args, **kwargs):
        self._lines = not _is_terminal(kwargs.get("file") or sys.stderr)
        self._line_at: tuple[float, int] | None = None  # (monotonic time, tenth) of the last line printed
        self._line_counts: tuple | None = None  # (n, total) the last line showed
        self._closing = False
        super().__init__(*args, **kwargs)

    def display(self, msg=None, pos=None):
        if not self._lines:
            return super().display(msg, pos)
        if msg is not None:  # a clear ('') or an override: a log has nothing to clear
            return False
        now = time.monotonic()
        total = self.total or 0
        tenth = min(10, int(10 * self.n / total)) if total > 0 else -1
        due = (self._closing or self._line_at is None or tenth > self._line_at[1]
               or now - self._line_at[0] >= LINE_EVERY_S)
        counts = (self.n, self.total)
        if not due or counts == self._line_counts:  # nothing moved since the last line
            return False
        self.fp.write(self.__str__() + "\n")
        self.fp.flush()
        self._line_at, self._line_counts = (now, tenth), counts
        return True

    def clear(self, nolock=False):
        if not self._lines:
            super().clear(nolock)

    def close(self):
        if self._lines and not self.disable:
            self._closing = True
            self.display()  # the final state, unless the last line already shows it
            self._closing, self.leave = False, False  # the line is written: nothing to clear or add
        super().close()


if "ipykernel.zmqshell" in sys.modules and importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    tqdm = LineTqdm

__all__ = ["LINE_EVERY_S", "LineTqdm", "tqdm"]


def bars_of_this_process_only() -> None:
    """Progress bars lock with a thread lock, not tqdm's default interprocess one: a worker process that draws
    bars of its own then leaves no semaphore behind (the resource tracker's "leaked semaphore objects" warning
    when it ends)."""
    import threading

    _text_tqdm.set_lock(threading.RLock())
