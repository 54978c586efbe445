"""Batched inference over every example of a dataset's test split.

The test split of an ARC dataset holds every test input under every augmentation
(see `trm_kaggle.data.arc.build`); `predict_split` runs the model on all of them, in
dataset order, and keeps per example the argmax token grid, the q_halt logit, the
puzzle it belongs to and the number of ACT steps it ran.

Steps: like upstream, evaluation runs `halt_max_steps` ACT steps on every example;
with `early_exit=True` an example stops as soon as its q_halt logit is > 0. The examples
run through a fixed batch of `batch_size` rows (fewer when that evens out the last batch),
each stopped row taking the next example of the split at once
(`trm_kaggle.model.rollout.ContinuousRollout`: no batch ever changes shape). On XLA the
batches run one after the other, each padded to the same shape, and early exit masks rows
instead: one compiled program serves them all.

Test-time trajectories (`trajectories` K > 1 with `noise`; docs/test_time.md): every example runs as K rows,
each a trajectory, and every trajectory is kept: the result has K rows per example, example-major (row
i * K + k is trajectory k of example i), so that each trajectory's prediction votes. `track_settled` counts,
per row, whether its prediction stopped changing (`Predictions.settled`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trm_kaggle import xla
from trm_kaggle.config import (MAX_BATCH_SIZE, MAX_HALT_STEPS, MAX_SEED, MAX_TRAJECTORIES, MAX_TRAJECTORY_NOISE,
                               number_argument, seconds_argument, whole_argument)
from trm_kaggle.data import DatasetMetadata, PuzzleLoader, load_identifiers
from trm_kaggle.errors import TRMError
from trm_kaggle.hardware import place_model
from trm_kaggle.model import ContinuousRollout, balanced_slots, token_dtype
from trm_kaggle.progress import tqdm


@dataclass
class Predictions:
    """Model outputs for every test-split example, in dataset order (row i = example i)."""

    tokens: np.ndarray  # (N, seq_len) argmax of the logits: uint8 (int16 for vocabularies over 256 tokens)
    q_halt: np.ndarray  # (N,) float32: q_halt logit at the step the example stopped
    steps: np.ndarray  # (N,) int32: ACT steps run
    puzzle_index: np.ndarray  # (N,) int64: puzzle of the split the example belongs to
    puzzle_identifier: np.ndarray  # (N,) int64: index into identifiers.json
    identifiers: list[str]  # identifiers.json of the dataset
    dataset_dir: str = ""
    max_steps: int = 0
    early_exit: bool = False
    forward_rows: int = 0  # sum over model calls of the rows passed (every call passes the batch's slots)
    seconds_model: float = 0.0  # time spent in the rollout, the loader's time left out (device synchronised)
    seconds_total: float = 0.0  # the whole of predict_split, data loading included
    device: str = "cpu"
    dtype: str = ""  # the activations' dtype (the model's forward dtype on `device`)
    extra: dict = field(default_factory=dict)
    logits: np.ndarray | None = None  # (N, seq_len, vocab) float32 at the step each example stopped (keep_logits)
    trajectories: int = 1  # rows per example (row i * trajectories + k: trajectory k of example i)
    noise: float = 0.0  # the trajectories' noise scale
    settled: np.ndarray | None = None  # (N,) bool: its last SETTLE_STEPS predictions equal (track_settled)

    def __len__(self) -> int:
        return len(self.tokens)

    def puzzle_name(self, i: int) -> str:
        return self.identifiers[int(self.puzzle_identifier[i])]

    @property
    def examples_per_second(self) -> float:
        return len(self) / self.seconds_total if self.seconds_total > 0 else float("nan")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # pragma: no cover - no MPS here
        torch.mps.synchronize()
    elif device.type == "xla":
        xla.wait()


def _halt_max_steps(model: torch.nn.Module) -> int:
    arch = getattr(model, "arch", None)
    if arch is None or not hasattr(arch, "halt_max_steps"):
        raise TRMError("predict_split needs a TinyRecursiveModel (an object with .arch.halt_max_steps)")
    return int(arch.halt_max_steps)


def check_model_fits(model: torch.nn.Module, dataset_dir: str | os.PathLike, meta: DatasetMetadata) -> None:
    """TRMError where the model's embedding table or sequence length does not fit the dataset."""
    n_model = getattr(model, "num_puzzle_identifiers", None)
    if n_model is not None and meta.num_puzzle_identifiers > n_model:
        raise TRMError(f"{dataset_dir} has {meta.num_puzzle_identifiers} puzzle identifiers but the model's "
                       f"embedding table only {n_model}: load the model with num_puzzle_identifiers="
                       f"{meta.num_puzzle_identifiers} (new rows start from the mean embedding)")
    seq_len_model = getattr(model, "seq_len", meta.seq_len)
    if seq_len_model != meta.seq_len:
        raise TRMError(f"the model was built for seq_len {seq_len_model}, {dataset_dir} has {meta.seq_len}")
    # a token past the model's vocabulary was an IndexError deep in the embedding (exit 1), mid-evaluation
    vocab_model = getattr(model, "vocab_size", None)
    if isinstance(vocab_model, int) and meta.vocab_size > vocab_model:
        raise TRMError(f"the model was built for a vocabulary of {vocab_model} tokens, {dataset_dir} has "
                       f"{meta.vocab_size}: it is another kind of data (evaluate it with a model trained on it)")


class _ExampleStream:
    """The examples to predict, one loader batch at a time (CPU tensors, `batches`), with the bookkeeping of
    every example walked: its puzzle, its identifier and, in the order they are queued, its result row
    (`examples`: the picked rows, whose place in the result is their rank; None: every example)."""

    def __init__(self, loader: PuzzleLoader, examples: np.ndarray | None, n: int):
        self.loader, self.examples = loader, examples
        self.puzzle_index = np.zeros(n, dtype=np.int64)
        self.puzzle_identifier = np.zeros(n, dtype=np.int64)
        self.stream_rows = np.zeros(n, dtype=np.int64)  # the result row of each example, in the order queued
        self.queued = 0
        self.walk_only = False  # after the rollout: the rest of the split is walked for its bookkeeping alone
        self.seconds = 0.0  # spent producing the batches the rollout took

    def split_index(self, queued: np.ndarray) -> np.ndarray:
        """The index in the whole split of the examples queued `queued`-th: the key of their noise, so that a
        part of the split (`examples`) draws what the whole split draws for them."""
        rows = self.stream_rows[queued]
        return rows if self.examples is None else self.examples[rows]

    def batches(self):
        examples = self.examples
        t = time.perf_counter()
        for item in self.loader:
            n = item.num_real
            if n == 0:
                continue
            rows = item.example_indices[:n].numpy()
            take = np.arange(n)  # the batch's rows that are predicted
            if examples is not None:  # keep the picked rows; their place in the result is their rank
                if len(examples) == 0 or rows[0] > examples[-1]:
                    break  # the split is walked in order: nothing picked is left
                at = np.minimum(np.searchsorted(examples, rows), len(examples) - 1)
                take = np.flatnonzero(examples[at] == rows)
                if len(take) == 0:
                    continue
                rows = at[take]
            self.puzzle_index[rows] = item.puzzle_indices[:n].numpy()[take]
            self.puzzle_identifier[rows] = item.batch["puzzle_identifiers"][:n].numpy()[take]
            if self.walk_only:
                continue
            batch = {k: v[:n] for k, v in item.batch.items()}
            if len(take) < n:
                index = torch.from_numpy(take)
                batch = {k: v[index] for k, v in batch.items()}
            self.stream_rows[self.queued:self.queued + len(rows)] = rows
            self.queued += len(rows)
            self.seconds += time.perf_counter() - t
            yield batch
            t = time.perf_counter()
        self.seconds += time.perf_counter() - t


def predict_split(model: torch.nn.Module, dataset_dir: str | os.PathLike, batch_size: int = 256,
                  device: str | torch.device | None = None, early_exit: bool = False, *,
                  max_steps: int | None = None, progress: bool = False, prefetch: int = 1,
                  deadline: float | None = None, examples: np.ndarray | None = None,
                  always: int = 0, always_until: float | None = None, keep_logits: bool = False,
                  trajectories: int = 1, noise: float = 0.0, seed: int = 0, track_settled: bool = False
                  ) -> Predictions:
    """Predict every example of `dataset_dir`'s test split (or the rows `examples` picks).

    model       a `TinyRecursiveModel` (anything with initial_carry/forward and .arch)
    batch_size  rows per model call (at most: fewer when that evens out the last batch)
    device      where to run; default: where the model's weights are. The model is moved there
                (`hardware.place_model`; a device this machine lacks is refused in one line)
    early_exit  stop each example at its first step with q_halt > 0 (its row takes the next example)
    max_steps   ACT steps to run (default: arch.halt_max_steps)
    deadline    a time.monotonic() value: batches that would start after it are skipped; their examples
                keep steps == -1 ("not predicted") and cast no votes
    always      the first `always` examples are predicted whatever the deadline says (a task whose time ran
                out still gets the votes of its un-augmented copies, which come first) ...
    always_until ... until this later time.monotonic() value (a worker's own deadline: thousands of test
                inputs must not carry a task past it), when every row still running is cut at its next ACT
                step (those keep steps == -1); None: whatever the time
    examples    increasing example indices of the split to predict (quick runs on part of a split);
                row i of the result is example examples[i]. Default: every example
    keep_logits also return the logits (`Predictions.logits`: N x seq_len x vocab float32, zero for examples
                not predicted); the tokens are their argmax
    trajectories, noise, seed
                K noisy trajectories per example, all kept: K rows per example (module docstring); noise 0
                runs one (`ContinuousRollout`)
    track_settled
                count the rows whose prediction settled (`Predictions.settled`)

    The model is put in eval mode for the call (its previous mode is restored after).
    """
    t_start = time.perf_counter()
    # counts and times where they are given: 2**31 steps wrapped round to one, a NaN deadline predicted nothing
    batch_size = whole_argument("batch_size", batch_size, 1, MAX_BATCH_SIZE)
    max_steps = None if max_steps is None else whole_argument("max_steps", max_steps, 1, MAX_HALT_STEPS)
    always = whole_argument("always", always, 0, 2**62)
    deadline, always_until = seconds_argument("deadline", deadline), seconds_argument("always_until", always_until)
    trajectories = whole_argument("trajectories", trajectories, 1, MAX_TRAJECTORIES)
    noise = number_argument("noise", noise, 0.0, MAX_TRAJECTORY_NOISE)
    seed = whole_argument("seed", seed, 0, MAX_SEED)
    prefetch = whole_argument("prefetch", prefetch, 0, 1024)  # batches prepared ahead: NaN failed in int()
    device = place_model(model, device)
    steps_max = _halt_max_steps(model) if max_steps is None else max_steps

    identifiers = load_identifiers(dataset_dir)
    loader = PuzzleLoader(dataset_dir, split="test", global_batch_size=batch_size, test_mode=True, prefetch=prefetch)
    meta = loader.metadata
    check_model_fits(model, dataset_dir, meta)

    if examples is not None:
        examples = np.asarray(examples, dtype=np.int64)
        if len(examples) and (np.any(np.diff(examples) <= 0) or examples[0] < 0 or examples[-1] >= loader.num_examples):
            raise TRMError(f"examples must be increasing indices below {loader.num_examples}")
    N, L = (loader.num_examples if examples is None else len(examples)), meta.seq_len
    K = trajectories if noise > 0 else 1  # rows per example (noise 0: the trajectories would all be the same)
    tokens = np.zeros((N * K, L), dtype=np.int16 if token_dtype(model) == torch.int16 else np.uint8)
    q_halt = np.zeros(N * K, dtype=np.float32)
    steps_run = np.full(N * K, -1, dtype=np.int32)  # -1: not predicted (deadline)
    settled = np.zeros(N * K, dtype=bool) if track_settled else None
    logits = (np.zeros((N * K, L, getattr(model, "vocab_size", meta.vocab_size)), dtype=np.float32) if keep_logits
              else None)
    src = _ExampleStream(loader, examples, N)

    def may_start(i: int) -> bool:
        """Examples that would start after the deadline are skipped (the first `always` are not, until
        `always_until`)."""
        if deadline is None or time.monotonic() < deadline:
            return True
        return src.stream_rows[i] < always and (always_until is None or time.monotonic() < always_until)

    # XLA: one shape for every run
    slots = batch_size if device.type == "xla" else balanced_slots(N * K, batch_size)
    rollout = ContinuousRollout(model, slots, steps_max, early_exit, device=device, keep_logits=keep_logits,
                                trajectories=K, noise=noise, select="all", seed=seed, track_settled=track_settled)
    was_training = model.training
    model.eval()
    bar = tqdm(total=N, desc="predict", unit="ex", disable=not progress, dynamic_ncols=True)
    t0 = time.perf_counter()
    stream = src.batches()
    try:
        with xla.no_grad_for(device):
            for done in rollout.run(stream, may_start, stop_at=always_until, keys=src.split_index):
                rows = src.stream_rows[done.ids]
                if K > 1:
                    rows = rows * K + done.trajectory
                if settled is not None:
                    settled[rows] = done.settled.cpu().numpy()
                tokens[rows] = done.tokens.cpu().numpy()
                q_halt[rows] = done.q_halt.cpu().numpy()
                steps_run[rows] = done.steps.cpu().numpy()
                if logits is not None:
                    logits[rows] = done.logits.cpu().numpy()
                bar.update(len(rows))
        _sync(device)
        seconds_model = time.perf_counter() - t0 - src.seconds
        src.walk_only = True
        for _ in stream:  # skipped at the deadline: their bookkeeping still
            pass
    finally:
        bar.close()
        model.train(was_training)

    return Predictions(tokens=tokens, q_halt=q_halt, steps=steps_run, puzzle_index=np.repeat(src.puzzle_index, K),
                       puzzle_identifier=np.repeat(src.puzzle_identifier, K), identifiers=identifiers,
                       dataset_dir=str(Path(dataset_dir)), max_steps=steps_max, early_exit=early_exit,
                       forward_rows=rollout.rows_forwarded, seconds_model=seconds_model,
                       seconds_total=time.perf_counter() - t_start, device=str(device),
                       dtype=str(model.compute_dtype(device)).removeprefix("torch.")
                       if hasattr(model, "compute_dtype") else "", logits=logits, trajectories=K,
                       noise=noise if K > 1 else 0.0, settled=settled)
