"""The progress bar off a terminal: whole lines at each tenth and every LINE_EVERY_S seconds, never a redraw."""

from __future__ import annotations

import io

import pytest

from trm_kaggle import progress
from trm_kaggle.progress import LineTqdm


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_bar_prints_a_line_per_tenth_and_its_end():
    out = io.StringIO()
    bar = LineTqdm(total=1000, desc="steps", file=out, mininterval=0)
    for i in range(1000):
        bar.update()
        bar.set_postfix(loss=f"{i:.3f}")  # a refresh per step, as the training bar's notes
        bar.refresh()
    bar.close()
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text  # no redraw, no cursor movement
    assert 11 <= len(lines) <= 12, lines  # the start, each tenth, the end
    assert lines[0].startswith("steps:   0%") and "1000/1000" in lines[-1]
    assert [f"{10 * t}%" in line for t, line in enumerate(lines[:11])] == [True] * 11


def test_on_a_terminal_the_bar_redraws_as_tqdm_does():
    out = Terminal()
    bar = LineTqdm(total=100, file=out, mininterval=0)
    for _ in range(100):
        bar.update()
    bar.close()
    assert out.getvalue().count("\r") >= 100 and out.getvalue().count("\n") == 1


def test_a_slow_or_unbounded_bar_prints_a_line_every_line_every_s_seconds(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    bar = LineTqdm(desc="rows", file=out, mininterval=0)  # no total: no tenths
    for _ in range(100):
        clock[0] += 1.0
        bar.update()
    bar.close()
    lines = out.getvalue().splitlines()
    # at 0 s, then at 30, 60 and 90 s, then the end (100 rows)
    assert len(lines) == 5 and "100 rows" in " ".join(lines[-1].split()).replace("100it", "100 rows"), lines


def test_closing_adds_no_line_that_repeats_the_last_one():
    out = io.StringIO()
    bar = LineTqdm(total=4, file=out, mininterval=0)
    bar.update(4)  # the 100 % line
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "0/4" in lines[0] and "4/4" in lines[1], lines


SPAWNED_BAR = """
import multiprocessing, os, sys
from trm_kaggle.progress import bars_of_this_process_only, tqdm

def child(thread_lock):
    if thread_lock:
        bars_of_this_process_only()
    for _ in tqdm(range(3), disable=False, file=sys.stdout):
        pass
    sys.stdout.flush()
    os._exit(0)  # as submit's worker ends: no teardown

if __name__ == "__main__":
    p = multiprocessing.get_context("spawn").Process(target=child, args=(sys.argv[1] == "1",), daemon=True)
    p.start()
    p.join()
"""


@pytest.mark.parametrize("thread_lock", [False, True])
def test_a_worker_process_drawing_bars_leaves_no_semaphore_behind(tmp_path, thread_lock):
    """tqdm's default lock is a semaphore shared between processes; a spawned worker (submit's) that drew a bar
    left it to the resource tracker, whose warning ("leaked semaphore objects") followed a clean run's last line."""
    import subprocess
    import sys

    script = tmp_path / "spawned_bar.py"
    script.write_text(SPAWNED_BAR)
    p = subprocess.run([sys.executable, str(script), "1" if thread_lock else "0"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert ("leaked semaphore" in p.stderr) is not thread_lock, p.stderr
