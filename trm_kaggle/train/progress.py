"""The training bar (tqdm on standard error)."""

from __future__ import annotations

import time

from trm_kaggle.progress import tqdm


class TrainProgress:
    """The training bar. Bounded by steps only, it counts steps. With a deadline (`time_limit`, or the
    kernel's budget) it counts seconds: elapsed against whichever comes first, the deadline or the last step
    at the pace so far, so a time-bounded run never shows the schedule's step total and its ETA."""

    def __init__(self, stop_at: int, step: int, deadline: float | None, enabled: bool):
        self.stop_at, self.step0, self.deadline = stop_at, step, deadline
        self.t0 = time.monotonic()
        self.extra: dict[str, str] = {}
        if deadline is None:
            self.bar = tqdm(total=stop_at, initial=step, disable=not enabled, unit="step", dynamic_ncols=True)
        else:
            self.budget = max(0.0, deadline - self.t0)
            self.bar = tqdm(total=round(self.budget, 1), disable=not enabled, unit="s", dynamic_ncols=True,
                            bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
            self.note(budget=f"{self.budget:.0f} s")

    def note(self, **values: str) -> None:
        """Metrics shown beside the bar."""
        self.extra.update(values)
        self.bar.set_postfix(self.extra, refresh=False)

    def advance(self, step: int) -> None:
        if self.deadline is None:
            self.bar.update()
            return
        elapsed = time.monotonic() - self.t0
        pace = elapsed / max(1, step - self.step0)  # seconds per step so far
        by_steps = pace * (self.stop_at - self.step0)
        self.bar.total = round(min(self.budget, by_steps), 1)
        self.bar.n = round(min(elapsed, self.bar.total), 1)
        # the step total only where the steps, not the deadline, are expected to end the run
        self.note(step=f"{step}/{self.stop_at}" if by_steps <= self.budget else str(step))
        self.bar.refresh()

    def write(self, line: str, file=None) -> None:
        self.bar.write(line, file=file)

    def close(self) -> None:
        self.bar.close()
