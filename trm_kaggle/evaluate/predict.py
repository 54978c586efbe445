"""Batched inference over every example of a dataset's test split.

The test split of an ARC dataset holds every test input under every augmentation
(see `trm_kaggle.data.arc.build`); `predict_split` runs the model on all of them, in
dataset order, and keeps per example the argmax token grid, the q_halt logit, the
puzzle it belongs to and the number of ACT steps it ran.

Steps: like upstream, evaluation runs `halt_max_steps` ACT steps on every example;
with `early_exit=True` an example stops as soon as its q_halt logit is > 0 and leaves
the batch (`trm_kaggle.model.rollout.act_rollout` runs each batch). On XLA the last
batch keeps its padding rows and early exit masks rows instead: every batch has the
same shape, so one compiled program serves them all.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trm_kaggle import xla
from trm_kaggle.data.format import load_identifiers
from trm_kaggle.data.loader import PuzzleLoader
from trm_kaggle.errors import TRMError
from trm_kaggle.hardware import place_model
from trm_kaggle.model.rollout import act_rollout, token_dtype
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
    forward_rows: int = 0  # sum over model calls of the rows passed (compaction shows here)
    forward_calls: int = 0
    seconds_model: float = 0.0  # time spent inside the model calls (device synchronised)
    seconds_total: float = 0.0  # the whole of predict_split, data loading included
    device: str = "cpu"
    extra: dict = field(default_factory=dict)

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


def predict_split(model: torch.nn.Module, dataset_dir: str | os.PathLike, batch_size: int = 256,
                  device: str | torch.device | None = None, early_exit: bool = False, *,
                  max_steps: int | None = None, progress: bool = False, prefetch: int = 1,
                  deadline: float | None = None, examples: np.ndarray | None = None,
                  always: int = 0) -> Predictions:
    """Predict every example of `dataset_dir`'s test split (or the rows `examples` picks).

    model       a `TinyRecursiveModel` (anything with initial_carry/forward and .arch)
    batch_size  examples per model call (the last batch is not padded)
    device      where to run; default: where the model's weights are. The model is moved there
                (`hardware.place_model`; a device this machine lacks is refused in one line)
    early_exit  stop each example at its first step with q_halt > 0 (batch compaction)
    max_steps   ACT steps to run (default: arch.halt_max_steps)
    deadline    a time.time() value: batches that would start after it are skipped; their examples
                keep steps == -1 ("not predicted") and cast no votes
    always      the first `always` examples are predicted whatever the deadline says (a task whose time ran
                out still gets the votes of its un-augmented copies, which come first)
    examples    increasing example indices of the split to predict (quick runs on part of a split);
                row i of the result is example examples[i]. Default: every example

    The model is put in eval mode for the call (its previous mode is restored after).
    """
    t_start = time.perf_counter()
    device = place_model(model, device)
    steps_max = _halt_max_steps(model) if max_steps is None else int(max_steps)
    if steps_max < 1:
        raise TRMError(f"max_steps must be >= 1, got {steps_max}")
    if batch_size < 1:
        raise TRMError(f"batch_size must be >= 1, got {batch_size}")

    identifiers = load_identifiers(dataset_dir)
    loader = PuzzleLoader(dataset_dir, split="test", global_batch_size=batch_size, test_mode=True, prefetch=prefetch)
    meta = loader.metadata
    n_model = getattr(model, "num_puzzle_identifiers", None)
    if n_model is not None and meta.num_puzzle_identifiers > n_model:
        raise TRMError(f"{dataset_dir} has {meta.num_puzzle_identifiers} puzzle identifiers but the model's "
                       f"embedding table only {n_model}: load the model with num_puzzle_identifiers="
                       f"{meta.num_puzzle_identifiers} (new rows start from the mean embedding)")
    seq_len_model = getattr(model, "seq_len", meta.seq_len)
    if seq_len_model != meta.seq_len:
        raise TRMError(f"the model was built for seq_len {seq_len_model}, {dataset_dir} has {meta.seq_len}")

    if examples is not None:
        examples = np.asarray(examples, dtype=np.int64)
        if len(examples) and (np.any(np.diff(examples) <= 0) or examples[0] < 0 or examples[-1] >= loader.num_examples):
            raise TRMError(f"examples must be increasing indices below {loader.num_examples}")
    N, L = (loader.num_examples if examples is None else len(examples)), meta.seq_len
    tokens = np.zeros((N, L), dtype=np.int16 if token_dtype(model) == torch.int16 else np.uint8)
    q_halt = np.zeros(N, dtype=np.float32)
    steps_run = np.full(N, -1, dtype=np.int32)  # -1: not predicted (deadline)
    puzzle_index = np.zeros(N, dtype=np.int64)
    puzzle_identifier = np.zeros(N, dtype=np.int64)
    forward_rows = forward_calls = 0
    seconds_model = 0.0

    was_training = model.training
    model.eval()
    bar = tqdm(total=N, desc="predict", unit="ex", disable=not progress, dynamic_ncols=True)
    try:
        with xla.no_grad_for(device):
            for item in loader:
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
                puzzle_index[rows] = item.puzzle_indices[:n].numpy()[take]
                if deadline is not None and rows[0] >= always and time.time() >= deadline:
                    continue  # out of time: keep walking the split (cheap) to fill the bookkeeping only
                puzzle_identifier[rows] = item.batch["puzzle_identifiers"][:n].numpy()[take]
                static = device.type == "xla"  # keep the padding rows: one batch shape for every batch
                if static:
                    batch = item.batch
                else:
                    batch = {k: v[:n] for k, v in item.batch.items()}
                    if len(take) < n:
                        index = torch.from_numpy(take)
                        batch = {k: v[index] for k, v in batch.items()}
                n_run = len(take)
                t0 = time.perf_counter()
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                r = act_rollout(model, batch, steps_max, early_exit)
                pick = take if static else slice(0, n_run)  # a static batch ran every row; keep the picked
                out_tok, out_q, out_steps = (r.tokens.cpu().numpy()[pick], r.q_halt.cpu().numpy()[pick],
                                             r.steps.cpu().numpy()[pick])
                _sync(device)
                seconds_model += time.perf_counter() - t0
                tokens[rows], q_halt[rows], steps_run[rows] = out_tok, out_q, out_steps
                forward_rows += r.rows_forwarded
                forward_calls += r.calls
                bar.update(n_run)
    finally:
        bar.close()
        model.train(was_training)

    return Predictions(tokens=tokens, q_halt=q_halt, steps=steps_run, puzzle_index=puzzle_index,
                       puzzle_identifier=puzzle_identifier, identifiers=identifiers,
                       dataset_dir=str(Path(dataset_dir)), max_steps=steps_max, early_exit=early_exit,
                       forward_rows=forward_rows, forward_calls=forward_calls, seconds_model=seconds_model,
                       seconds_total=time.perf_counter() - t_start, device=str(device))
