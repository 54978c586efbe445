"""Inference with ACT: run examples through their supervision steps until every one has stopped.

Like upstream's evaluation, an example runs `max_steps` steps. With `early_exit=True` it
stops as soon as its q_halt logit is > 0 and keeps the prediction of that step.

`ContinuousRollout` is what inference runs: a FIXED batch of `slots` rows fed from a queue
of examples not yet started (continuous batching, as the training carry restarts its
halted rows on new data). After every ACT step the rows that stopped are decoded
(`lm_head` for them alone: `TinyRecursiveModel.decode`) and their slots restart from
H_init/L_init on the next examples of the queue. While examples wait, the batch never
changes shape: no recompiles of a compiled network, no new attention plans, and one graph
could serve every step. Once the queue is empty, slots without an example idle until the
last rows stop (CUDA), or the stopped rows leave the batch (CPU and MPS, where a new shape
costs nothing: `shrink_at_end`). The host reads one (slots,) bool mask per ACT step (which
rows stopped: it decides what to decode and refill) and copies the finished rows' results
once per `slots` finished rows. Without early exit every slot finishes at the same step, so
it runs the examples batch after batch, as before (`balanced_slots` keeps the last batch
as full as the others).
Every inference path runs it: evaluation (`trm_kaggle.evaluate.predict`), the test-split
check during training (`trm_kaggle.train.evaluation.evaluate_split`) and the demonstration
accuracy of the Kaggle solver (`trm_kaggle.solve.task.demo_accuracy`). Callers choose the
grad mode and put the model in eval mode.

Test-time trajectories (`trajectories=K`, `noise=S`; docs/test_time.md): every example runs as K rows of the
batch. Between two supervision steps of a row (after step s, before step s + 1), Gaussian noise is added to
both latent states of trajectories 1..K-1, per position scaled to that position's RMS over the hidden size:
z <- z + S * rms(z) * N(0, 1); trajectory 0 runs without noise, so the K candidates always hold the
prediction of a plain rollout. A row's draw is its own: a generator seeded, for that row and step alone, from
numpy's SeedSequence of (`seed`, the example's key, its trajectory, the row's own ACT step s) gives z_H's and
z_L's noise (two draws), so the batch size, the examples beside it and when it started change nothing (the
key: the example's number in the source, or what `run`'s `keys` says, as its index in the whole split). The
same settings draw the same noise on the same kind of device (CPU and CUDA generators differ). `select` picks
one trajectory per example: "q_halt" the highest q_halt logit where it stopped, "first_halt" the one that
stopped earliest with q_halt > 0 (none: the highest q_halt), "all" keeps every trajectory (ARC: each one
votes). Noise 0 runs one trajectory: K identical ones would be K copies of today's rollout. `track_settled`
decodes every row at every step to count the rows whose prediction no longer changes (`settled`: the
predictions of its last `SETTLE_STEPS` steps are identical).

`act_rollout` runs ONE batch and is the reference the continuous rollout is tested against.
With early exit it *compacts*: stopped rows leave the carry and the batch, so later steps
run on fewer rows (a new shape at each step where rows stop, and a host read of the stop
mask at every step). Both keep the logits on request (`keep_logits`).

On XLA (`compact=False`, its default there) shapes must not change and a host read cuts the
step's graph: stopped rows stay in the batch and their results are frozen by masks, each ACT
step ends at a step boundary (so one compiled program serves every step), and the loop ends
when every row has stopped. The continuous rollout runs XLA batch after batch on this path,
each batch padded to `slots` rows.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from trm_kaggle import xla
from trm_kaggle.config import (MAX_BATCH_SIZE, MAX_HALT_STEPS, MAX_SEED, MAX_TRAJECTORIES, MAX_TRAJECTORY_NOISE,
                               number_argument, whole_argument)
from trm_kaggle.data import IGNORE_LABEL_ID
from trm_kaggle.errors import TRMError
from trm_kaggle.model.trm import Carry, check_batch
from trm_kaggle.wording import clipped

SELECTIONS = ("q_halt", "first_halt", "all")  # how one of an example's trajectories is chosen (module docstring)
SETTLE_STEPS = 3  # a row has settled when the predictions of its last SETTLE_STEPS steps are identical


def counts_settled(test_depth: int | None) -> bool:
    """Whether a run of `test_depth` ACT steps counts settled rows: a test depth under SETTLE_STEPS can never see
    that many equal predictions (its "0 of 8 settled" measured nothing)."""
    return test_depth is not None and test_depth >= SETTLE_STEPS
#: the totals `ContinuousRollout.score` returns, in order (sums over the scored examples)
SCORE_FIELDS = ("examples", "exact", "token_accuracy", "token_accuracy_sq", "steps", "settled", "noisy_chosen")


@dataclass
class Rollout:
    """What one batch's rollout produced; row i is row i of the batch given."""

    tokens: torch.Tensor  # (B, seq_len) argmax of the logits at the step the row stopped: uint8, or int16
    #                       for a vocabulary wider than a byte (see `token_dtype`)
    q_halt: torch.Tensor  # float32 (B,): q_halt logit at that step
    steps: torch.Tensor  # int32 (B,): ACT steps the row ran
    carry: Carry  # the carry after the last model call (rows still running then; all rows without early exit)
    outputs: dict[str, torch.Tensor]  # the model outputs of the last call (same rows as `carry`)
    rows_forwarded: int  # sum over model calls of the rows passed (compaction shows here)
    calls: int  # model calls
    logits: torch.Tensor | None = None  # float32 (B, seq_len, vocab) at the step the row stopped (keep_logits)


def token_dtype(model: torch.nn.Module) -> torch.dtype:
    """uint8 holds every vocabulary of ARC, Sudoku and Maze; a BPE code-repair model needs int16."""
    return torch.int16 if getattr(model, "vocab_size", 0) > 256 else torch.uint8


def act_rollout(model: torch.nn.Module, batch: dict[str, torch.Tensor], max_steps: int,
                early_exit: bool = False, compact: bool | None = None, keep_logits: bool = False) -> Rollout:
    """Run `batch` for up to `max_steps` ACT steps (see the module docstring).

    compact: stopped rows leave the batch (default) or stay, masked (default on XLA).
    keep_logits: also return each row's float32 logits at the step it stopped (`Rollout.logits`).
    A batch the model cannot run (`check_batch`) or a max_steps that is no whole number from 1 is one TypeError
    or ValueError naming it (max_steps=0 ran no step and failed on its missing result)."""
    check_batch(model, batch)
    max_steps = whole_argument("max_steps", max_steps, 1, MAX_HALT_STEPS)
    B, L = batch["inputs"].shape
    device = batch["inputs"].device
    if compact is None:
        compact = device.type != "xla"
    if not compact:
        return _masked_rollout(model, batch, max_steps, early_exit, keep_logits)
    tokens = torch.empty(B, L, dtype=token_dtype(model), device=device)
    kept = None
    q_out = torch.empty(B, dtype=torch.float32, device=device)
    steps_out = torch.empty(B, dtype=torch.int32, device=device)
    active = torch.arange(B, device=device)  # original row of each row still running
    carry = model.initial_carry(batch)
    rows = calls = 0
    for step in range(1, max_steps + 1):
        carry, out = model(carry, batch)
        rows += int(active.shape[0])
        calls += 1
        q = out["q_halt_logits"].float()
        last = step == max_steps
        if last:
            done = torch.ones_like(q, dtype=torch.bool)
        elif early_exit:
            done = q > 0
        else:
            done = None
        if done is not None:
            all_done = last or bool(done.all())
            idx = active if all_done else active[done]
            logits = out["logits"] if all_done else out["logits"][done]
            tokens[idx] = logits.argmax(-1).to(tokens.dtype)
            if keep_logits:
                if kept is None:
                    kept = torch.empty((B,) + tuple(logits.shape[1:]), dtype=torch.float32, device=device)
                kept[idx] = logits.float()
            q_out[idx] = q if all_done else q[done]
            steps_out[idx] = step
            if all_done:
                break
            keep = ~done
            if not bool(keep.all()):
                # compact: the stopped rows leave the carry and the batch
                active = active[keep]
                batch = {k: v[keep] for k, v in batch.items()}
                carry = replace(carry, z_H=carry.z_H[keep], z_L=carry.z_L[keep], steps=carry.steps[keep],
                                halted=carry.halted[keep],
                                current_data={k: v[keep] for k, v in carry.current_data.items()})
        # rows still running continue from their state: never let the model restart them
        # (a model built with early_exit=True marks q_halt > 0 rows halted itself)
        carry = replace(carry, halted=torch.zeros_like(carry.halted))
    return Rollout(tokens, q_out, steps_out, carry, out, rows, calls, kept)


def _masked_rollout(model: torch.nn.Module, batch: dict[str, torch.Tensor], max_steps: int,
                    early_exit: bool, keep_logits: bool = False) -> Rollout:
    """act_rollout with fixed shapes: a stopped row keeps running, but its results are frozen."""
    B, L = batch["inputs"].shape
    xla_device = batch["inputs"].device.type == "xla"
    carry = model.initial_carry(batch)
    tokens = torch.zeros(B, L, dtype=token_dtype(model), device=carry.steps.device)
    q_out = torch.zeros(B, dtype=torch.float32, device=carry.steps.device)
    steps_out = torch.zeros(B, dtype=torch.int32, device=carry.steps.device)
    stopped = torch.zeros(B, dtype=torch.bool, device=carry.steps.device)
    kept = None
    calls = 0
    for step in range(1, max_steps + 1):
        carry, out = model(carry, batch)
        calls += 1
        q = out["q_halt_logits"].float()
        last = step == max_steps
        new = ~stopped if last else (q > 0) & ~stopped if early_exit else None
        if new is not None:
            tokens = torch.where(new.view(-1, 1), out["logits"].argmax(-1).to(tokens.dtype), tokens)
            if keep_logits:
                logits = out["logits"].float()
                kept = logits if kept is None else torch.where(new.view(-1, 1, 1), logits, kept)
            q_out = torch.where(new, q, q_out)
            steps_out = torch.where(new, carry.steps, steps_out)  # the model's step count: equal to `step` here
            stopped = stopped | new
        all_stopped = stopped.all() if early_exit and not last else None
        if xla_device:
            xla.step_boundary()  # one program per ACT step (the first differs: it starts from the initial carry)
        if last or (all_stopped is not None and bool(all_stopped)):
            break
        # rows continue from their state: never let the model restart them
        carry = replace(carry, halted=torch.zeros_like(carry.halted))
    return Rollout(tokens, q_out, steps_out, carry, out, B * calls, calls, kept)


@dataclass
class Finished:
    """Examples a continuous rollout finished; row i is the `ids[i]`-th example its source gave (from 0)."""

    ids: np.ndarray  # int64 (n,)
    tokens: torch.Tensor  # (n, seq_len) argmax of the logits at the step the example stopped (`token_dtype`)
    q_halt: torch.Tensor  # float32 (n,): q_halt logit at that step
    steps: torch.Tensor  # int32 (n,): ACT steps the example ran
    data: dict[str, torch.Tensor]  # the examples' batch entries as the model saw them (labels, for accuracy)
    logits: torch.Tensor | None = None  # float32 (n, seq_len, vocab) at that step (`keep_logits`)
    trajectory: np.ndarray | None = None  # int64 (n,): the trajectory of the row (None: one trajectory each)
    settled: torch.Tensor | None = None  # bool (n,): its last SETTLE_STEPS predictions equal (`track_settled`)

    def __len__(self) -> int:
        return len(self.ids)


def balanced_slots(total: int, batch_size: int) -> int:
    """The fewest slots that run `total` examples in as many batches as `batch_size` would, evenly: the last
    batch is as full as the others (without early exit no slot idles at the end)."""
    if total <= 0:
        return batch_size
    return math.ceil(total / math.ceil(total / batch_size))


class _Queue:
    """The examples not yet started, in the order the source gives them; chunks are pulled when needed.
    The first example `may_start(i)` (i: its number in the source) refuses ends the queue."""

    def __init__(self, source: Iterable[dict[str, torch.Tensor]], may_start: Callable[[int], bool] | None):
        self.source, self.may_start = iter(source), may_start
        self.chunks: deque = deque()  # [chunk, rows of it taken]
        self.taken = 0  # examples taken so far
        self.ended = False

    def take(self, n: int) -> tuple[np.ndarray, dict[str, torch.Tensor] | None]:
        """Up to `n` next examples: (their numbers, their batch entries), or (empty, None) once ended."""
        parts, first = [], self.taken
        while self.taken - first < n and not self.ended:
            if not self.chunks:
                chunk = next(self.source, None)
                if chunk is None:
                    self.ended = True
                elif len(next(iter(chunk.values()))):
                    self.chunks.append([chunk, 0])
                continue
            chunk, at = self.chunks[0]
            rows = len(next(iter(chunk.values())))
            k = min(n - (self.taken - first), rows - at)
            if self.may_start is not None:
                allowed = next((j for j in range(k) if not self.may_start(self.taken + j)), k)
                self.ended, k = allowed < k, allowed
            if k:
                parts.append({key: v[at:at + k] for key, v in chunk.items()})
                self.taken += k
            if at + k == rows:
                self.chunks.popleft()
            else:
                self.chunks[0][1] = at + k
        if self.ended:
            self.chunks.clear()
        if not parts:
            return np.zeros(0, dtype=np.int64), None
        merged = parts[0] if len(parts) == 1 else {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
        return np.arange(first, self.taken, dtype=np.int64), merged


class ContinuousRollout:
    """Examples through the model in a fixed batch of `slots` rows (see the module docstring).

    run(source) takes the examples as an iterable of batch dicts (CPU or device tensors, any number of rows
    each; inputs and puzzle_identifiers, plus whatever else the caller wants back in `Finished.data`) and
    yields `Finished` groups in the order the examples stop. `calls` and `rows_forwarded` count the model
    calls and the rows they were given.

    shrink_at_end: once the queue is empty no stopped row can be refilled, and with this the stopped rows
    leave the batch (compaction, for the drain only). Default: on CPU and MPS, where a new shape costs nothing
    and an idle row costs as much as a busy one; not on CUDA (compiled graphs and attention plans keep one
    shape) nor XLA.

    keep_logits: each `Finished` also holds the float32 logits its tokens are the argmax of (seq_len x vocab
    floats per example: for analysis and regression checks, not needed to vote).

    trajectories, noise, select, seed, track_settled: test-time trajectories and settling (module docstring).
    The trajectories of an example take K rows of the same `slots`: memory is unchanged, time is K-fold."""

    def __init__(self, model: torch.nn.Module, slots: int, max_steps: int, early_exit: bool = False,
                 device: torch.device | str | None = None, shrink_at_end: bool | None = None,
                 keep_logits: bool = False, trajectories: int = 1, noise: float = 0.0, select: str = "q_halt",
                 seed: int = 0, track_settled: bool = False):
        # checked here, each named, in the bounds evaluation's config gives them (slots="4" failed on a comparison
        # of str and int, slots=2.5 on its first batch)
        slots = whole_argument("slots", slots, 1, MAX_BATCH_SIZE)
        max_steps = whole_argument("max_steps", max_steps, 1, MAX_HALT_STEPS)
        trajectories = whole_argument("trajectories", trajectories, 1, MAX_TRAJECTORIES)
        noise = number_argument("noise", noise, 0.0, MAX_TRAJECTORY_NOISE)
        seed = whole_argument("seed", seed, 0, MAX_SEED)
        if not isinstance(select, str) or select not in SELECTIONS:
            raise ValueError(f"select={clipped(select, 40)}: expected one of {', '.join(SELECTIONS)}")
        self.trajectories = trajectories if noise > 0 else 1  # noise 0: every trajectory would be the same
        self.noise, self.select, self.seed, self.track_settled = float(noise), select, seed, track_settled
        self.generator: torch.Generator | None = None  # made on first use, on the device
        self.model, self.slots, self.max_steps, self.early_exit = model, slots, max_steps, early_exit
        if device is None:
            device = next(iter(model.buffers()), torch.empty(0)).device
        self.device = torch.device(device)
        self.shrink_at_end = self.device.type in ("cpu", "mps") if shrink_at_end is None else shrink_at_end
        self.masked = self.device.type == "xla"  # batch after batch, stopped rows masked (`act_rollout`)
        self.keep_logits = keep_logits
        if self.masked and (self.trajectories > 1 or track_settled):
            raise TRMError("noisy trajectories and --test-depth's settling do not run on XLA (its rollout masks "
                           "rows instead): run them on a CPU or GPU")
        self.calls = self.rows_forwarded = 0

    SCORE_FIELDS = SCORE_FIELDS  # what `score` sums, in order

    def run(self, source: Iterable[dict[str, torch.Tensor]], may_start: Callable[[int], bool] | None = None,
            stop_at: float | None = None, keys: Callable[[np.ndarray], np.ndarray] | None = None
            ) -> Iterator[Finished]:
        """The examples of `source` as they finish. `may_start(i)` False ends the queue at example i; `stop_at`, a
        time.monotonic() value, ends the run at the first ACT step after it, the rows still running unfinished
        (a worker's own deadline: a batch that started before it must not run on past it; XLA's whole batches
        stop only between batches). `keys(i)`, for an array of example numbers, gives the keys their noise is
        drawn from (default: the numbers): a caller running part of a split gives each example's index in the
        whole split, so that it draws the noise a run of the whole split draws for it. Each batch of `source` is
        checked as it is taken (`check_batch`: one TypeError or ValueError naming `source[i]`)."""
        yield from self._examples(self._checked(source, labels=False), may_start, stop_at, keys)

    def _examples(self, source: Iterable[dict[str, torch.Tensor]], may_start: Callable[[int], bool] | None,
                  stop_at: float | None, keys: Callable[[np.ndarray], np.ndarray] | None) -> Iterator[Finished]:
        """`run` of a checked source."""
        K = self.trajectories
        if K == 1:
            yield from self._run(source, may_start, stop_at)
            return
        # every example K times in a row: queue number q is trajectory q % K of example q // K
        source = ({k: v.repeat_interleave(K, 0) for k, v in chunk.items()} for chunk in source)
        allowed = None if may_start is None else (lambda q: may_start(q // K))
        finished = self._run(source, allowed, stop_at, keys)
        yield from (finished if self.select == "all" else self._chosen(finished))

    def score(self, source: Iterable[dict[str, torch.Tensor]], ignore_label_id: int | None = IGNORE_LABEL_ID
              ) -> torch.Tensor:
        """Run `source` (batches with "labels") and sum, on the device, what scoring a split needs (float64,
        `SCORE_FIELDS` in order): examples with a label to score, exact ones (every label token right), their
        token accuracies and its squares (for an interval), ACT steps, settled rows (`track_settled`), rows
        whose chosen trajectory was a noisy one. Rows without any label are left out (padding). One sum for
        every caller: training's test-split check and `trm-kaggle evaluate` on a Sudoku or Maze dataset."""
        totals = torch.zeros(len(SCORE_FIELDS), dtype=torch.float64, device=self.device)
        for done in self._examples(self._checked(source, labels=True), None, None, None):
            labels = done.data["labels"]
            valid = labels != ignore_label_id if ignore_label_id is not None else torch.ones_like(labels, dtype=bool)
            counts = valid.sum(-1)
            right = (valid & (done.tokens.long() == labels.long())).sum(-1)
            real = counts > 0
            token = torch.where(real, right / counts.clamp_min(1), 0.0).double()
            settled = done.settled if done.settled is not None else torch.zeros_like(real)
            noisy = (torch.from_numpy(done.trajectory > 0).to(real.device) if done.trajectory is not None
                     else torch.zeros_like(real))
            totals += torch.stack([real.sum().double(), (real & (right == counts)).sum().double(), token.sum(),
                                   (token * token).sum(), torch.where(real, done.steps, 0).sum().double(),
                                   (real & settled).sum().double(), (real & noisy).sum().double()])
        return totals

    def _checked(self, source: Iterable[dict[str, torch.Tensor]], labels: bool) -> Iterator[dict[str, torch.Tensor]]:
        """The batches of `source`, each one the model can run (`check_batch`, with "labels" where they are scored)
        and with the keys of the first: rows of several batches run together."""
        keys = None
        for i, chunk in enumerate(source):
            check_batch(self.model, chunk, labels=labels, where=f"source[{i}]")
            if keys is None:
                keys = set(chunk)
            elif set(chunk) != keys:
                raise ValueError(f"source[{i}]: keys {clipped(sorted(map(str, chunk)))} differ from source[0]'s "
                                 f"{clipped(sorted(map(str, keys)))}")
            yield chunk

    def _noised(self, carry: Carry, rows: np.ndarray, queued: np.ndarray,
                keys: Callable[[np.ndarray], np.ndarray] | None) -> Carry:
        """`carry` with noise on its rows `rows`, which run the queue numbers `queued`: each row's z_H and z_L plus
        `noise` times each position's RMS times a draw of that row's own (module docstring), the others as they
        are. One generator call per row: a draw over the whole batch made each row's noise depend on its place."""
        K = self.trajectories
        examples = queued // K if keys is None else np.asarray(keys(queued // K), dtype=np.int64)
        at = torch.from_numpy(rows).to(self.device)
        steps = carry.steps[at].tolist()  # the ACT steps the rows have run (a host read, on noisy steps only)
        if self.generator is None:
            self.generator = torch.Generator(device=self.device)
        shape = (2,) + tuple(carry.z_H.shape[1:])  # z_H's draw, then z_L's
        eps = torch.stack([torch.randn(shape, generator=self.generator.manual_seed(noise_seed(self.seed, e, q % K, s)),
                                       device=self.device, dtype=torch.float32)
                           for e, q, s in zip(examples.tolist(), queued.tolist(), steps)])

        def plus(z: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
            zf = z[at].float()
            rms = zf.pow(2).mean(-1, keepdim=True).sqrt()
            return z.index_copy(0, at, (zf + self.noise * rms * eps).to(z.dtype))

        return replace(carry, z_H=plus(carry.z_H, eps[:, 0]), z_L=plus(carry.z_L, eps[:, 1]))

    def _chosen(self, finished: Iterator[Finished]) -> Iterator[Finished]:
        """One row per example: its `select`ed trajectory, once all K have stopped (or the run ended: examples
        the deadline cut short choose among the trajectories that ran)."""
        K, held, seen = self.trajectories, [], {}
        for f in finished:
            held.append(f)
            for i in f.ids.tolist():
                seen[i] = seen.get(i, 0) + 1
            complete = [i for i in np.unique(f.ids).tolist() if seen[i] == K]
            if complete:
                rows = _merge(held)
                whole = np.isin(rows.ids, complete)
                yield self._choose(_take(rows, whole))
                held = [_take(rows, ~whole)] if not whole.all() else []
                for i in complete:
                    del seen[i]
        if held:
            yield self._choose(_merge(held))

    def _choose(self, f: Finished) -> Finished:
        q, steps, traj = f.q_halt.float().cpu().numpy(), f.steps.cpu().numpy(), f.trajectory
        if self.select == "first_halt":  # halted ones first, the earliest first; then the highest q_halt
            halted = q > 0
            order = np.lexsort((traj, -q, np.where(halted, steps, 0), ~halted, f.ids))
        else:  # the highest q_halt; a tie goes to the lower trajectory (0: no noise)
            order = np.lexsort((traj, -q, f.ids))
        ids = f.ids[order]
        first = np.ones(len(ids), dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        return _take(f, order[first])

    def _run(self, source: Iterable[dict[str, torch.Tensor]], may_start: Callable[[int], bool] | None = None,
             stop_at: float | None = None, keys: Callable[[np.ndarray], np.ndarray] | None = None
             ) -> Iterator[Finished]:
        if stop_at is not None:  # no example starts after the stop either
            may_start = _until(may_start, stop_at)
        queue = _Queue(source, may_start)
        if self.masked:
            yield from self._batch_after_batch(queue)
            return
        K, track = self.trajectories, self.track_settled
        model, B, device = self.model, self.slots, self.device
        ids, rows = queue.take(B)
        if rows is None:
            return
        if self.shrink_at_end and queue.ended:
            B = len(ids)  # fewer examples than slots
        batch = {k: torch.zeros((B,) + tuple(v.shape[1:]), dtype=v.dtype, device=device) for k, v in rows.items()}
        slot_id = np.full(B, -1, dtype=np.int64)  # the example each slot runs, -1: idle
        self._load(batch, slot_id, np.arange(len(ids)), ids, rows)
        carry = model.initial_carry(batch)  # every slot halted: the first call loads the examples
        pending: list[Finished] = []
        if track:  # each slot's last prediction and how many steps in a row it stayed the same
            last = torch.zeros(B, batch["inputs"].shape[1], dtype=token_dtype(model), device=device)
            same = torch.zeros(B, dtype=torch.int32, device=device)
        while True:
            carry, out = model(carry, batch, logits=track)
            self.calls += 1
            self.rows_forwarded += B
            q = out["q_halt_logits"].float()
            if track:
                now = out["logits"].argmax(-1).to(last.dtype)
                same = torch.where((now == last).all(-1) & (carry.steps > 1), same + 1, 0)
                last = now
            done = carry.steps >= self.max_steps
            if self.early_exit:
                done = done | (q > 0)
            stopped = np.flatnonzero(done.cpu().numpy() & (slot_id >= 0))  # the host read of this step
            if len(stopped):
                at = torch.from_numpy(stopped).to(device)
                logits = model.decode(carry.z_H[at])
                queued = slot_id[stopped].copy()
                pending.append(Finished(queued // K, logits.argmax(-1).to(token_dtype(model)), q[at],
                                        carry.steps[at], {k: v[at] for k, v in carry.current_data.items()},
                                        logits.float() if self.keep_logits else None,
                                        queued % K if K > 1 else None,
                                        same[at] >= SETTLE_STEPS - 1 if track else None))
                slot_id[stopped] = -1
            free = np.flatnonzero(slot_id < 0)
            if len(free) and not queue.ended:
                ids, rows = queue.take(len(free))
                if rows is not None:
                    self._load(batch, slot_id, free[:len(ids)], ids, rows)
            running = slot_id >= 0
            if pending and (sum(map(len, pending)) >= self.slots or not running.any()):
                yield _merge(pending)
                pending = []
            if not running.any():
                return
            if stop_at is not None and time.monotonic() >= stop_at:  # the rows still running stay unfinished
                if pending:
                    yield _merge(pending)
                return
            # free slots restart: on their new example, or idle on their old one (their state stays bounded);
            # every other row continues from its state (a model built with early_exit=True would halt it)
            halted = np.zeros(B, dtype=bool)
            halted[free] = True
            if self.shrink_at_end and queue.ended and not running.all():
                keep = np.flatnonzero(running)
                at = torch.from_numpy(keep).to(device)
                batch = {k: v[at] for k, v in batch.items()}
                carry = replace(carry, z_H=carry.z_H[at], z_L=carry.z_L[at], steps=carry.steps[at],
                                current_data={k: v[at] for k, v in carry.current_data.items()})
                halted, slot_id, B = halted[keep], slot_id[keep], len(keep)
                if track:
                    last, same = last[at], same[at]
            if K > 1:  # noise on the noisy trajectories that go on to their next step (module docstring)
                noisy = np.flatnonzero((slot_id >= 0) & (slot_id % K != 0) & ~halted)
                if len(noisy):
                    carry = self._noised(carry, noisy, slot_id[noisy], keys)
            carry = replace(carry, halted=torch.from_numpy(halted).to(device))

    def _load(self, batch: dict[str, torch.Tensor], slot_id: np.ndarray, slots: np.ndarray, ids: np.ndarray,
              rows: dict[str, torch.Tensor]) -> None:
        at = torch.from_numpy(slots).to(self.device)
        for k, v in batch.items():
            v[at] = rows[k].to(self.device, non_blocking=True)
        slot_id[slots] = ids

    def _batch_after_batch(self, queue: _Queue) -> Iterator[Finished]:
        """One batch of `slots` rows at a time (the last padded), stopped rows masked: XLA's fixed shapes without
        a host read inside an ACT step (`act_rollout`, compact=False)."""
        while True:
            ids, rows = queue.take(self.slots)
            if rows is None:
                return
            n = len(ids)
            batch = {k: torch.cat([v, v.new_zeros((self.slots - n,) + tuple(v.shape[1:]))]).to(self.device)
                     for k, v in rows.items()}
            # the source's batches were checked: no second host read of each on the device
            r = _masked_rollout(self.model, batch, self.max_steps, self.early_exit, keep_logits=self.keep_logits)
            self.calls += r.calls
            self.rows_forwarded += r.rows_forwarded
            yield Finished(ids, r.tokens[:n], r.q_halt[:n], r.steps[:n], {k: v[:n] for k, v in batch.items()},
                           None if r.logits is None else r.logits[:n])


def noise_seed(seed: int, key: int, trajectory: int, step: int) -> int:
    """The seed of one row's noise after ACT step `step` (module docstring): SeedSequence mixes the four into 64
    bits, so nearby keys, trajectories and steps draw unrelated noise."""
    return int(np.random.SeedSequence((seed, key, trajectory, step)).generate_state(1, np.uint64)[0])


def _until(may_start: Callable[[int], bool] | None, stop_at: float) -> Callable[[int], bool]:
    """`may_start`, and no example at all once time.monotonic() has reached `stop_at`."""
    return lambda i: time.monotonic() < stop_at and (may_start is None or may_start(i))


def _merge(parts: list[Finished]) -> Finished:
    if len(parts) == 1:
        return parts[0]
    return Finished(np.concatenate([p.ids for p in parts]), torch.cat([p.tokens for p in parts]),
                    torch.cat([p.q_halt for p in parts]), torch.cat([p.steps for p in parts]),
                    {k: torch.cat([p.data[k] for p in parts]) for k in parts[0].data},
                    None if parts[0].logits is None else torch.cat([p.logits for p in parts]),
                    None if parts[0].trajectory is None else np.concatenate([p.trajectory for p in parts]),
                    None if parts[0].settled is None else torch.cat([p.settled for p in parts]))


def _take(f: Finished, rows: np.ndarray) -> Finished:
    """The rows `rows` (a bool mask or indices) of `f`."""
    index = np.flatnonzero(rows) if rows.dtype == bool else rows
    at = torch.from_numpy(index).to(f.tokens.device)
    return Finished(f.ids[index], f.tokens[at], f.q_halt[at], f.steps[at], {k: v[at] for k, v in f.data.items()},
                    None if f.logits is None else f.logits[at],
                    None if f.trajectory is None else f.trajectory[index],
                    None if f.settled is None else f.settled[at])
