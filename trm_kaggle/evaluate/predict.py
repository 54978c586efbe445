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

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import torch

from trm_kaggle import xla
from trm_kaggle.config import (MAX_BATCH_SIZE, MAX_HALT_STEPS, MAX_SEED, MAX_TRAJECTORIES, MAX_TRAJECTORY_NOISE,
                               EvaluateConfig, number_argument, seconds_argument, whole_argument)
from trm_kaggle.data import DatasetMetadata, PuzzleLoader, load_identifiers, whole_indices
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.hardware import place_model
from trm_kaggle.jsonio import directory_problem
from trm_kaggle.model import ContinuousRollout, balanced_slots, first_nonfinite, token_dtype
from trm_kaggle.progress import tqdm
from trm_kaggle.wording import clipped, count


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


def activation_dtype(model: torch.nn.Module, device: torch.device) -> str:
    """The dtype `model` computes in on `device` (its forward dtype, `auto` and `export` resolved), as a report
    records it: "float32", "bfloat16"...; "" for a model that does not say."""
    return str(model.compute_dtype(device)).removeprefix("torch.") if hasattr(model, "compute_dtype") else ""


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


def model_argument(model: object) -> torch.nn.Module:
    """`model`, the model argument of a call that runs one (`predict_split`, `evaluate`, `score_dataset`), checked
    before any work: a path or any other object is a TypeError naming the argument (a path reached
    `model.parameters()` as an AttributeError), and weights holding NaN or inf a TRMError naming the tensor (they
    answered a valid-looking 0.0 score). One pass over the weights, on the device they are on."""
    if isinstance(model, (str, bytes, os.PathLike)):
        raise TypeError(f"model={clipped(os.fspath(model), 80)} is a path, not a model: load the export first, "
                        "trm_kaggle.model.load_model_for_dataset(path, dataset_dir)[0]")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a TinyRecursiveModel (a torch.nn.Module), got {type(model).__name__}")
    state = model.state_dict()
    if empty := next((name for name, t in state.items() if isinstance(t, torch.Tensor) and t.is_meta), None):
        raise TRMError(f"model: tensor {empty} is on the meta device: it holds no weights to run (load them first)")
    if found := first_nonfinite(state):
        name, bad = found
        raise TRMError(f"model: tensor {name} holds {count(bad, 'non-finite value')} (NaN or inf): weights of a "
                       "diverged training run answer nonsense that looks like a score")
    return model


def evaluate_config(cfg: object, settings: Mapping[str, object]) -> EvaluateConfig:
    """The `EvaluateConfig` a call runs under: `cfg` (an EvaluateConfig, or a dict of its fields as
    `EvaluateConfig.model_validate` takes them; None: the defaults) with `settings`, its fields given one by one,
    over it. A field's bad value is one TRMError line naming it (`EvaluateConfig.updated`); another kind of `cfg`
    a TypeError naming the argument (a dict was an AttributeError about `updated`)."""
    if cfg is None:
        cfg = EvaluateConfig()
    elif isinstance(cfg, Mapping):
        if not all(isinstance(k, str) for k in cfg):
            raise TypeError("cfg: a dict of EvaluateConfig fields is keyed by their names (strings)")
        settings, cfg = {**cfg, **settings}, EvaluateConfig()
    elif not isinstance(cfg, EvaluateConfig):
        raise TypeError(f"cfg: expected an EvaluateConfig or a dict of its fields, got {type(cfg).__name__}")
    return cfg.updated(**settings)


def dataset_argument(dataset_dir: str | os.PathLike) -> None:
    """DataError when no dataset folder is at `dataset_dir` (a folder that does not exist was said as its first
    missing file, "test_puzzles.json not found"); TypeError when it is no path. A NUL byte in it is the readers'
    to name (`jsonio.open_regular`)."""
    if not isinstance(dataset_dir, (str, os.PathLike)):  # an int was stat'ed as an open file descriptor
        raise TypeError(f"dataset_dir: expected a dataset folder's path, got {type(dataset_dir).__name__}")
    if "\0" not in os.fspath(dataset_dir) and (problem := directory_problem(dataset_dir, "dataset folder")):
        raise DataError(problem)


def _device_type(device: str | torch.device | None) -> str | None:
    """The kind of device `device` names as torch reads it ("cpu", "meta", ...), None where torch reads no device
    from it ("auto", or none given): `place_model` resolves those, and says what is wrong with a bad one."""
    if device is None or isinstance(device, torch.device):
        return None if device is None else device.type
    try:
        return torch.device(device).type
    except (RuntimeError, TypeError, ValueError):
        return None


@contextlib.contextmanager
def placed(model: torch.nn.Module, device: str | torch.device | None) -> Iterator[torch.device]:
    """The model on `device` (`hardware.place_model`) for a call that runs it; the device is yielded. The model
    stays there when the call returns (documented: a CPU model run with device="cuda" is on the GPU after) and is
    put back where it was when the call fails, so that a failed call leaves the caller's model as it was. A device
    that holds no data (meta) is refused before anything moves: the model moved there lost its weights."""
    if _device_type(device) == "meta":
        raise TRMError(f"device={clipped(device, 40)}: a meta device holds no data (the model moved there would "
                       "lose its weights): name cpu, cuda, mps or xla, or leave device out")
    homes = {t.device for t in (*model.parameters(), *model.buffers())}
    home = next(iter(homes)) if len(homes) == 1 else None  # a model on several devices is not put back
    target = None  # a move that failed half way is put back too
    try:
        target = place_model(model, device)
        yield target
    except BaseException:
        if home is not None and target != home:
            with contextlib.suppress(RuntimeError, NotImplementedError):  # the call's own error is the one to say
                model.to(home)
        raise


def _example_indices(examples: object) -> np.ndarray | None:
    """`examples` as int64 indices (`data.whole_indices`), or None: every example."""
    return None if examples is None else whole_indices(examples, "examples")


def _check_outputs_finite(q_halt: np.ndarray, logits: np.ndarray | None, rows: np.ndarray,
                          examples: np.ndarray | None) -> None:
    """TRMError naming the first example whose q_halt logit (or kept logits) came out NaN or inf. The weights were
    finite (`model_argument`): its activations overflowed, and the argmax of NaN logits is a valid-looking answer.
    Read on the host copies of each finished batch (no sync of its own); logits not kept stay on the device, unread.
    `rows`: the result rows of the examples (row i: example i of the split, or examples[i])."""
    bad = ~np.isfinite(q_halt)
    if logits is not None:
        bad |= ~np.isfinite(logits.reshape(len(logits), -1)).all(axis=1)
    if bad.any():
        row = int(rows[np.argmax(bad)])
        example = row if examples is None else int(examples[row])
        raise TRMError(f"example {example} of the test split: the model's q_halt logit or logits came out NaN or inf "
                       "from finite weights (its activations overflowed): run it in float32 (the dtype setting, or "
                       "arch.forward_dtype)")


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

    model       a `TinyRecursiveModel` (a torch.nn.Module with initial_carry/forward and .arch; a path is refused:
                load it with `trm_kaggle.model.load_model_for_dataset`). Weights holding NaN or inf are refused
                before any work, and a q_halt logit (or kept logits) that comes out NaN or inf stops the call
    batch_size  rows per model call (at most: fewer when that evens out the last batch)
    device      where to run; default: where the model's weights are. The model is moved there and stays there
                (`hardware.place_model`; a device this machine lacks, or meta, which holds no data, is refused
                in one line before anything moves); a call that fails puts it back where it was (`placed`)
    early_exit  stop each example at its first step with q_halt > 0 (its row takes the next example)
    max_steps   ACT steps to run (default: arch.halt_max_steps)
    deadline    a time.monotonic() value: batches that would start after it are skipped; their examples
                keep steps == -1 ("not predicted") and cast no votes
    always      the first `always` examples are predicted whatever the deadline says (a task whose time ran
                out still gets the votes of its un-augmented copies, which come first) ...
    always_until ... until this later time.monotonic() value (a worker's own deadline: thousands of test
                inputs must not carry a task past it), when every row still running is cut at its next ACT
                step (those keep steps == -1); None: whatever the time
    examples    increasing example indices of the split to predict (quick runs on part of a split): whole
                numbers (Python's, numpy's or torch's integers; floats are refused); row i of the result is
                example examples[i]. Default: every example
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
    model = model_argument(model)  # before any work: a path, or NaN weights that scored 0.0 without a word
    # counts and times where they are given: 2**31 steps wrapped round to one, a NaN deadline predicted nothing
    batch_size = whole_argument("batch_size", batch_size, 1, MAX_BATCH_SIZE)
    max_steps = None if max_steps is None else whole_argument("max_steps", max_steps, 1, MAX_HALT_STEPS)
    always = whole_argument("always", always, 0, 2**62)
    deadline, always_until = seconds_argument("deadline", deadline), seconds_argument("always_until", always_until)
    trajectories = whole_argument("trajectories", trajectories, 1, MAX_TRAJECTORIES)
    noise = number_argument("noise", noise, 0.0, MAX_TRAJECTORY_NOISE)
    seed = whole_argument("seed", seed, 0, MAX_SEED)
    prefetch = whole_argument("prefetch", prefetch, 0, 1024)  # batches prepared ahead: NaN failed in int()
    examples = _example_indices(examples)
    dataset_argument(dataset_dir)
    with placed(model, device) as target:
        return _predict(model, dataset_dir, batch_size, target, early_exit, max_steps, progress, prefetch, deadline,
                        examples, always, always_until, keep_logits, trajectories, noise, seed, track_settled, t_start)


def _predict(model, dataset_dir, batch_size, device, early_exit, max_steps, progress, prefetch, deadline, examples,
             always, always_until, keep_logits, trajectories, noise, seed, track_settled, t_start) -> Predictions:
    """`predict_split` on its checked arguments, the model on `device`."""
    steps_max = _halt_max_steps(model) if max_steps is None else max_steps

    identifiers = load_identifiers(dataset_dir)
    loader = PuzzleLoader(dataset_dir, split="test", global_batch_size=batch_size, test_mode=True, prefetch=prefetch)
    meta = loader.metadata
    check_model_fits(model, dataset_dir, meta)

    if examples is not None and len(examples) and (np.any(np.diff(examples) <= 0) or examples[0] < 0
                                                   or examples[-1] >= loader.num_examples):
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
                _check_outputs_finite(q_halt[rows], None if logits is None else logits[rows], rows // K, examples)
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
                       dtype=activation_dtype(model, device), logits=logits, trajectories=K,
                       noise=noise if K > 1 else 0.0, settled=settled)
