"""The step timer: one fine-tuning or prediction step at a time of the real architecture on this device
(random weights: speed does not depend on their values; random ARC-shaped batches). The kernel's plan
(`trm_kaggle.solve.plan`) and `trm-kaggle estimate` (`trm_kaggle.solve.pricing`) price the work from its
figures.

Timing is bounded, announced and sized for the device (`time_steps`):

* it takes at most `timing_cap` seconds: a share of the time left, at least `TIMING_FLOOR_S` where the time
  left allows it, and never more than `TIMING_MAX_S`. The cap counts the model's construction and every
  call; it leaves out what comes once per process before any timing: the memory estimate on CPU and MPS (its
  first run imports torch's meta kernels: seconds on a busy machine; `StepTimes.sizing_s`) and a device's
  start-up (the first call on CUDA creates the context and loads the kernel libraries: seconds, paid by the
  work too), for which one untimed step of each kind runs before the cap's clock starts
  (`StepTimes.startup_s`). Both are said; the kernel's plan fits the time left after them. A step
  expected to pass the cap is not started: the puzzle-row step is then priced as a step of every weight (an
  upper bound), and without room for a prediction step that step is priced from the fine-tuning step (an upper
  bound too): a slow step is a measurement, not a failure, and the plan prices from it. On XLA the steps a plan needs are timed whatever they cost: their first calls are
  compilations, which the work would pay anyway;
* every figure is one warm-up call (a new batch shape's one-time costs: kernel choice, memory) and then the
  median of up to `REPEATS` timed calls: the repeats stop once the figure has taken `STEP_SHARE` of the cap
  (one timed call at least), and a call that ends past the cap is the last, the calls so far giving it;
* each step is announced before it runs and its time said after (`say`);
* on CPU and MPS the batches are sized here: at most what the memory share holds (`train/memory.py`),
  timed at one row first, then at the largest size whose warm-up and one timed call are expected to take at
  most `STEP_SHARE` of the cap,
  again from there while one fits; the largest size timed is the batch the work then uses. A budget
  generous enough for the configured batch keeps it (so two runs with the same settings agree); a short
  one gets steps short enough that timing them, and fitting several into each task, stays possible.
  CUDA and XLA time the configured batches.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from trm_kaggle import xla
from trm_kaggle.config import ArchConfig, TrainConfig, seconds_argument
from trm_kaggle.model import TinyRecursiveModel, act_loss
from trm_kaggle.train import GB, fitting_batch, make_optimizers, optimizer_step

TIMING_SHARE = 0.1  # timing takes this share of the time left ...
TIMING_FLOOR_S = 10.0  # ... or this much where it is at most FLOOR_SHARE of the time left (fewer seconds price
FLOOR_SHARE = 1 / 8  # a CUDA plan from nothing but warm-up calls) ...
TIMING_MAX_S = 30.0  # ... and never more than this
REPEATS = 3  # timed calls per figure after its warm-up call: the median is kept
STARTUP_DEVICES = ("cuda",)  # the first call in a process starts the device up: done before the cap's clock
MIN_TIMING_S = 2.0  # a cap shorter than this times nothing (the kernel's plan is then the fixed small one)
STEP_SHARE = 1 / 3  # a figure's repeats stop at this share of the cap; CPU/MPS batches grow while its warm-up
LEAST_CALLS = 2  # and one timed call (the least a figure takes) are expected to fit in it
NOISE = 1.25  # a step expected to take t seconds is started only where 1.25 t still fits the cap
SIZED_DEVICES = ("cpu", "mps")  # batches sized here; CUDA and XLA keep the configured ones (and halve on OOM)


@dataclass
class StepTimes:
    """What `time_steps` measured: seconds of one fine-tuning step of `batch` rows training every weight
    (`step_s`) or the puzzle rows alone (`embeddings_step_s`), of one row for one ACT step (`row_step_s`,
    timed on `eval_batch` rows); `spent_s` of the `cap_s` allowed (the sizing and a device's start-up before
    it, not counted); `notes`: how the batches were sized and what was priced instead of timed."""

    device: str
    step_s: float
    embeddings_step_s: float
    row_step_s: float
    batch: int
    eval_batch: int
    spent_s: float
    cap_s: float
    notes: tuple[str, ...] = ()
    sizing_s: float = 0.0  # CPU/MPS: the memory estimate, before the timing (a first one imports meta kernels)
    startup_s: float = 0.0  # CUDA: the untimed first steps, outside the cap
    repeats: int = REPEATS  # timed calls per figure (at most: the cap can end one sooner)


def timing_cap(left_s: float | None) -> float:
    """Seconds the timing may take with `left_s` seconds left (None: no limit; a deadline past: none). NaN or a
    str is one ValueError naming it (NaN gave the longest cap, '5' a TypeError)."""
    left_s = seconds_argument("left_s", left_s)
    if left_s is None:
        return TIMING_MAX_S
    return max(0.0, min(TIMING_MAX_S, max(TIMING_SHARE * left_s, min(TIMING_FLOOR_S, FLOOR_SHARE * left_s))))


def seconds_per_call(fn: Callable[[], object], device: torch.device, repeats: int = REPEATS, *,
                     warm_up: bool = True, stop_at: float | None = None,
                     repeat_until: float | None = None) -> tuple[float, str]:
    """(wall-clock seconds of one call of `fn` on `device`, what that figure is): one warm-up call, then the
    median of `repeats` calls (the median: one call slowed by other work on a shared machine does not move
    it); without `warm_up`, the median of `repeats` calls from the first.

    `stop_at` (a time.perf_counter() value): a call that ends past it is not followed by another, and the
    calls so far give the figure (the warm-up's alone, which carries one-time costs, is an upper bound).
    `repeat_until`: no timed call starts after it once one has run (the figure's own share of the time).
    On XLA the warm-up is the compilation and one timed call always follows it. The step timer of the solver:
    `StepTimer` times training and inference steps with it, for `estimate` and the kernel's plan."""

    def over() -> bool:
        return stop_at is not None and time.perf_counter() >= stop_at

    if warm_up:
        t = time.perf_counter()
        fn()  # on XLA: the compilation
        _wait(device)
        first = time.perf_counter() - t
        if over() and device.type != "xla":
            return first, "the warm-up call alone, the cap was reached: an upper bound"
    times: list[float] = []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        fn()
        if device.type == "xla":
            xla.step_boundary()  # one call, one program (else the repeats would form a new, larger graph)
        _wait(device)
        times.append(time.perf_counter() - t)
        if over() or (repeat_until is not None and time.perf_counter() >= repeat_until):
            break
    n = len(times)
    what = f"median of {n} calls" if n > 1 else ("1 call" if warm_up else "its first call")
    return statistics.median(times), what + (" after a warm-up" if warm_up else ", no warm-up")


def _wait(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "xla":
        xla.wait()


class StepTimer:
    """One step at a time of `arch` on `device` (random weights, random ARC-shaped batches), each announced
    before it runs and reported after it (`say`), inside a cap of `cap_s` seconds from `start` (a
    time.perf_counter() value, default now). Each figure is a warm-up call and the median of `repeats`."""

    def __init__(self, arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device, n_ids: int, *,
                 cap_s: float, repeats: int = REPEATS, say: Callable[[str], None] | None = None,
                 start: float | None = None):
        self.stop_at = (time.perf_counter() if start is None else start) + cap_s
        self.cap_s = cap_s
        self.arch, self.seq_len, self.vocab_size, self.device, self.n_ids = arch, seq_len, vocab_size, device, n_ids
        self.repeats, self.say = repeats, say or (lambda line: None)
        self.startup_s = 0.0
        self._model: TinyRecursiveModel | None = None
        self.optimizers: dict[bool, tuple] = {}

    @property
    def model(self) -> TinyRecursiveModel:
        if self._model is None:  # built at first use: inside the cap (or the start-up, which comes first)
            self._model = TinyRecursiveModel(self.arch, self.seq_len, self.vocab_size, self.n_ids).to(self.device)
        return self._model

    def fits(self, seconds: float) -> bool:
        """Whether `seconds` more of timing are expected to end inside the cap (with a quarter more: the same
        step can take longer the next time on a machine that runs other work)."""
        return time.perf_counter() + NOISE * seconds <= self.stop_at

    def over(self) -> bool:
        return time.perf_counter() >= self.stop_at

    def start_up(self) -> float:
        """On a device that starts up at its first call (CUDA: the context, the kernel libraries), one untimed
        step of each kind at one row, outside the cap: its clock is pushed back by what they took. Seconds."""
        if self.device.type not in STARTUP_DEVICES:
            return 0.0
        self.say(f"starting {self.device} up (one untimed step of each kind, not counted in the cap) ...")
        t = time.perf_counter()
        for fn in (self._train_fn(1, False), self._infer_fn(1)):
            fn()
        _wait(self.device)
        self.startup_s = time.perf_counter() - t
        self.stop_at += self.startup_s
        self.say(f"{self.device} started in {self.startup_s:.3g} s")
        return self.startup_s

    def _batch(self, rows: int) -> dict[str, torch.Tensor]:
        d = self.device
        return {"inputs": torch.randint(0, self.vocab_size, (rows, self.seq_len), device=d, dtype=torch.int32),
                "labels": torch.randint(0, self.vocab_size, (rows, self.seq_len), device=d, dtype=torch.int64),
                "puzzle_identifiers": torch.randint(0, self.n_ids, (rows,), device=d, dtype=torch.int32)}

    def _timed(self, what: str, rows: int, fn: Callable[[], object]) -> float:
        self.say(f"timing {what} at batch {rows} on {self.device} ...")
        seconds, how = seconds_per_call(fn, self.device, self.repeats, stop_at=self.stop_at,
                                        repeat_until=time.perf_counter() + STEP_SHARE * self.cap_s)
        self.say(f"{what} at batch {rows}: {seconds:.3g} s ({how})")
        return seconds

    def _train_fn(self, rows: int, freeze_weights: bool) -> Callable[[], object]:
        """One fine-tuning step of `rows` rows, with the optimizers `trm-kaggle submit` builds for this kind of
        step (frozen: no weight gradients, no AdamATan2)."""
        model, arch = self.model, self.arch
        if freeze_weights not in self.optimizers:
            self.optimizers[freeze_weights] = make_optimizers(TrainConfig(arch=arch, freeze_weights=freeze_weights),
                                                              model)
        dense, sparse = self.optimizers[freeze_weights]
        batch = self._batch(rows)
        model.train()
        carry = model.initial_carry(batch)

        def train_step():
            c, out = model(carry, batch)
            loss, _ = act_loss(out, c.current_data["labels"], c.halted, c.steps, arch.loss_type)
            loss.backward()
            optimizer_step(dense, sparse)

        return train_step

    def _infer_fn(self, rows: int) -> Callable[[], object]:
        """One ACT step of prediction on `rows` rows."""
        model, batch = self.model, self._batch(rows)
        model.eval()
        carry = model.initial_carry(batch)

        def eval_step():
            with xla.no_grad_for(self.device):
                model(carry, batch)

        return eval_step

    def train(self, rows: int, freeze_weights: bool) -> float:
        """Seconds of one fine-tuning step of `rows` rows (`_train_fn`). A frozen step leaves the weights
        frozen: time every unfrozen step first."""
        what = "a fine-tuning step of " + ("the puzzle rows alone" if freeze_weights else "every weight")
        return self._timed(what, rows, self._train_fn(rows, freeze_weights))

    def infer(self, rows: int) -> float:
        """Seconds of one ACT step of prediction on `rows` rows."""
        return self._timed("a prediction step", rows, self._infer_fn(rows))

    def grow(self, step: Callable[[int], float], rows: int, seconds: float, most: int, step_max_s: float,
             after: float) -> tuple[int, float]:
        """(rows, seconds) of the largest batch timed: from `seconds` for a step of `rows` rows, time a larger
        batch (the largest power of two, or `most`) whose step is expected to take at most `step_max_s` and
        whose figure (at least `LEAST_CALLS` steps) to leave room in the cap for `after` more steps as long;
        again from there, while one fits. Expected: the time per row so far, which overstates it (a step's time
        grows slower than its rows)."""
        while rows < most and not self.over():
            per_row = seconds / rows
            sizes = sorted({min(most, 2 ** k) for k in range(most.bit_length() + 1)} - set(range(rows + 1)))
            fitting = [n for n in sizes if per_row * n <= step_max_s
                       and self.fits(per_row * n * (LEAST_CALLS + after))]
            if not fitting:
                break
            rows = fitting[-1]
            seconds = step(rows)
        return rows, seconds


def memory_batches(arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device, batch: int,
                   eval_batch: int, n_ids: int = 2, processes: int = 1) -> tuple[int, int, str]:
    """(fine-tuning batch, prediction batch, a note where they were cut): `batch` and `eval_batch` cut to
    what this process's memory share holds (`train/memory.py`; `processes`: workers sharing the machine)."""
    fit = fitting_batch(arch, seq_len=seq_len, vocab_size=vocab_size, num_puzzle_identifiers=n_ids, device=device,
                        processes=processes)
    if fit is None or fit[0] >= max(batch, eval_batch):
        return batch, eval_batch, ""
    rows, share = max(1, fit[0]), f"the memory share ({fit[1] / GB:.1f} GB)"
    note = (f"{share} holds batches of {rows} rows" if fit[0] else
            f"{share} is expected to be too small even for one row: batches of one row")
    return min(batch, rows), min(eval_batch, rows), note


def time_steps(arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device, *, batch: int,
               eval_batch: int, cap_s: float, n_ids: int = 2, repeats: int = REPEATS, processes: int = 1,
               must_finish: bool = False, say: Callable[[str], None] | None = None) -> StepTimes:
    """Time a fine-tuning step of every weight, a prediction step and a fine-tuning step of the puzzle rows
    alone on `device`, in at most `cap_s` seconds (see the module docstring: the sizing and a device's start-up
    come before the cap's clock). On CUDA and XLA `batch` and `eval_batch` are the sizes timed; on CPU and MPS they are the
    most a batch may have (`processes`: how many workers share this machine's memory).

    The first two are needed: where the second is not expected to fit in the cap it is priced from the first (an
    upper bound: a prediction step costs less than a training step of as many rows), unless `must_finish`,
    which times them whatever they cost. Never None: whatever was measured prices the work. Larger sizes and the puzzle-row step are timed only where the cap leaves room (the
    latter is otherwise priced as a step of every weight, which it never exceeds)."""
    device = torch.device(device)
    t0 = time.perf_counter()
    notes: list[str] = []
    sized = device.type in SIZED_DEVICES
    sizing_s = 0.0
    if sized:  # the memory share first: no timed batch may be larger than what the work could hold
        if say:
            say(f"sizing the batches for {device}: at most {batch} rows (fine-tuning) and {eval_batch} (prediction) "
                "asked for ...")
        batch, eval_batch, note = memory_batches(arch, seq_len, vocab_size, device, batch, eval_batch, n_ids,
                                                 processes)
        notes += [note] if note else []
        sizing_s = time.perf_counter() - t0
        t0 = time.perf_counter()
    # the cap counts the model's construction and every call, but not the sizing nor the device's start-up
    timer = StepTimer(arch, seq_len, vocab_size, device, n_ids, cap_s=cap_s, repeats=repeats, say=say, start=t0)
    timer.start_up()
    calls = LEAST_CALLS  # what a figure takes at least: its warm-up and one timed call
    step_max = STEP_SHARE * cap_s / calls  # those at most a third of the cap
    most, eval_most = batch, eval_batch
    if sized:  # one row of each first: the least a plan needs
        batch = eval_batch = 1
    step_s = timer.train(batch, False)
    if not (must_finish or timer.fits(calls * step_s * eval_batch / batch)):
        # a slow step is a measurement, not a failure: the prediction step is priced from it (an upper bound: one
        # ACT step of prediction costs less than a fine-tuning step of as many rows) and nothing more is timed
        eval_s = step_s * eval_batch / batch
        note = (f"the {cap_s:.3g} s cap left no room for a prediction step: priced as a fine-tuning step of as "
                f"many rows (an upper bound)")
        if say:
            say(note)
        emb_step_s = 0.0 if arch.emb_ndim == 0 else step_s
        return StepTimes(str(device), step_s, emb_step_s, eval_s / eval_batch, batch, eval_batch,
                         time.perf_counter() - t0 - timer.startup_s, cap_s, (*notes, note), sizing_s,
                         timer.startup_s, timer.repeats)
    eval_s = timer.infer(eval_batch)
    if sized:  # larger batches where the cap leaves room: the prediction's growth too, then the puzzle-row step
        batch, step_s = timer.grow(lambda rows: timer.train(rows, False), batch, step_s, most, step_max, after=1)
        if batch < most:
            notes.append(f"fine-tuning batch {batch} of {most} (timing more rows was expected to take over "
                         f"{calls * step_max:.3g} s, a third of the {cap_s:.3g} s cap, or not to fit in what it "
                         f"left)")
        eval_batch, eval_s = timer.grow(timer.infer, eval_batch, eval_s, eval_most, step_max, after=1)
        if eval_batch < eval_most:
            notes.append(f"prediction batch {eval_batch} of {eval_most}")
    if arch.emb_ndim == 0:  # a model without puzzle rows has nothing to train there
        emb_step_s = 0.0
    elif timer.fits(calls * step_s):  # last: it freezes the weights
        emb_step_s = timer.train(batch, True)
        if emb_step_s > step_s:  # a subset of a full step's work: what it measured over that is noise
            notes.append(f"a step of the puzzle rows alone measured {emb_step_s:.3g} s, over a step of every "
                         f"weight: priced as one of every weight")
            emb_step_s = step_s
    else:
        emb_step_s = step_s
        notes.append("the cap was reached: a step of the puzzle rows alone priced as one of every weight (an "
                     "upper bound)")
    return StepTimes(str(device), step_s, emb_step_s, eval_s / eval_batch, batch, eval_batch,
                     time.perf_counter() - t0 - timer.startup_s, cap_s, tuple(notes), sizing_s, timer.startup_s,
                     timer.repeats)
