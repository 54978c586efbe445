"""Datasets -> batches: the training and evaluation data loader.

`PuzzleLoader` reads one or more dataset directories (ours or upstream's: the format
is the same, see `trm_kaggle.data.format`) and yields batches of torch tensors:

    inputs              int32 (local_batch, seq_len)
    labels              int32 (local_batch, seq_len), the dataset's ignore label -> IGNORE_LABEL_ID
    puzzle_identifiers  int32 (local_batch,)

Training sampling follows upstream's loader (`trm_kaggle.data.sampler`): an epoch visits
every group once, in a shuffled order, one random puzzle of each group filling the global
batch; the incomplete batch at the end of an epoch is dropped.

Where we differ from upstream:
* Identifiers of dataset k are offset by the identifier counts of datasets 0..k-1,
  so puzzles of different datasets never share an embedding row (blank stays blank).
  Upstream sums the counts but does not offset, so dataset 1's puzzle 5 and dataset
  0's puzzle 5 train the same row.
* Every random draw comes from generators seeded by (seed, epoch) and
  (seed, epoch, batch) (`sampler.py`): the batch stream is a pure function of the
  seed, so a resume continues it exactly from a state of a few integers.
* Test iteration walks the test examples of all datasets as one concatenated
  sequence (upstream yields each dataset separately) and reports, for every row, the
  global example and puzzle index, so predictions can be mapped back to puzzles.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
import torch

from trm_kaggle.config import MAX_BATCH_SIZE, MAX_SEED, flag_argument, path_argument, whole_argument
from trm_kaggle.data.format import (SET_NAME, DatasetMetadata, Split, check_token_range, load_identifiers,
                                    load_split)
from trm_kaggle.data.sampler import GroupSampler
from trm_kaggle.data.verify import check_split
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.wording import clipped, type_name

# The label value the losses ignore. Upstream's batches replace the dataset's ignore label
# (0 in ARC datasets) by -100; the model's losses import it from here.
IGNORE_LABEL_ID = -100

STATE_VERSION = 1

# Metadata fields every merged dataset must agree on.
_MUST_AGREE = ("seq_len", "vocab_size", "pad_id", "ignore_label_id", "blank_identifier_id")

# The counts of the stream's position (epoch, step, ...) stay below it: a train state's loader state is checked
# against the same bound when it is read (`train.checkpoint`), so that a count always has room to go on.
_COUNT_END = 2**62
MAX_WORLD_SIZE = 1 << 20
MAX_PREFETCH = 1024


class EvalBatch(NamedTuple):
    """One batch of test-split iteration (a tuple, so `batch, n, ex, pz, _ = item` works)."""

    batch: dict[str, torch.Tensor]  # inputs / labels / puzzle_identifiers, padded to the local batch size
    num_real: int  # rows of this rank's slice that are real examples (the rest is padding)
    example_indices: torch.Tensor  # int64 (local_batch,): global example index of each row, -1 for padding
    puzzle_indices: torch.Tensor  # int64 (local_batch,): global puzzle index of each row, -1 for padding
    global_real: int  # real rows in the whole global batch (all ranks together)


def _as_path_list(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The dataset folders, in order. A list or tuple of paths, or one path: bytes were iterated as integers (each
    taken for an open file descriptor), and a set's order, which decides the identifier offsets, changes with each
    process's string hashing."""
    if isinstance(paths, (str, os.PathLike)):
        return [Path(path_argument("dataset_paths", paths))]  # '' was read as the current folder
    if not isinstance(paths, (list, tuple)):
        raise TypeError(f"dataset_paths: expected a dataset folder's path or a list of them, got {type_name(paths)}")
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"dataset_paths: expected dataset folders' paths, got a {type_name(paths)} holding "
                            f"{type_name(p)}")
    if not paths:
        raise TRMError("no dataset paths given")
    return [Path(path_argument(f"dataset_paths[{k}]", p)) for k, p in enumerate(paths)]


def _check_structure(path: Path, split: Split) -> None:
    """The split's dataset.json against its arrays as `trm-kaggle verify` checks it (`check_split`: counts, index
    arrays, identifiers, mean_puzzle_examples, which sizes the schedule), and every token inside the vocabulary."""
    check_split(path, split)
    check_token_range(path / split.name, split)  # a token past the vocabulary is an IndexError deep in the model
    _check_identifier_room(path, split)


def _check_identifier_room(path: Path, split: Split) -> None:
    """num_puzzle_identifiers sizes the puzzle table before anything else: an inflated one is gigabytes of
    table. identifiers.json is not read here (for upstream's 1000-augmentation ARC it is a million names); its
    size bounds how many names it can hold (each takes at least 3 bytes: two quotes and a comma), which catches
    a count no names back (`trm-kaggle verify` compares the count exactly)."""
    names = path / "identifiers.json"
    try:
        size = os.stat(names).st_size
    except OSError:  # no names at all (a dataset without them): nothing to compare
        return
    n = split.metadata.num_puzzle_identifiers
    if n > size // 3 + 1:
        raise DataError(f"{path / split.name / 'dataset.json'}: num_puzzle_identifiers is {n:,}, but {names} "
                        f"({size:,} bytes) cannot list that many names; `trm-kaggle verify {path}` compares them")


def _merge_metadata(paths: list[Path], metas: list[DatasetMetadata], num_puzzles: int,
                    num_groups: int) -> DatasetMetadata:
    first = metas[0]
    for path, meta in zip(paths[1:], metas[1:]):
        for field in _MUST_AGREE:
            a, b = getattr(first, field), getattr(meta, field)
            if a != b:
                raise DataError(f"datasets disagree on {field}: {a!r} in {paths[0]} but {b!r} in {path}; "
                                "only datasets with the same seq_len, vocab_size, pad_id, ignore_label_id "
                                "and blank_identifier_id can be trained together")
    return DatasetMetadata(
        pad_id=first.pad_id, ignore_label_id=first.ignore_label_id, blank_identifier_id=first.blank_identifier_id,
        vocab_size=first.vocab_size, seq_len=first.seq_len,
        num_puzzle_identifiers=sum(m.num_puzzle_identifiers for m in metas),
        # upstream's arithmetic (the schedule's length truncates a product of this value)
        total_groups=num_groups, mean_puzzle_examples=sum(m.mean_puzzle_examples * m.total_puzzles for m in metas)
        / max(1, sum(m.total_puzzles for m in metas)),
        total_puzzles=num_puzzles, sets=[SET_NAME],
    )


def whole_indices(given: object, name: str) -> np.ndarray:
    """`given` (a list, a numpy array or a tensor of indices) as a 1-D int64 array; TRMError naming `name` for
    anything but whole numbers (0.5 and 1.7 were taken as rows 0 and 1). The range is the caller's to check."""
    if isinstance(given, torch.Tensor):
        given = given.detach().cpu()
    array = np.asarray(given)
    if array.size == 0:  # [] reads as float64: no rows, whatever its type
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        got = f"{array.ndim}-D" if array.ndim != 1 else f"values of dtype {array.dtype}"
        raise TRMError(f"{name}: expected a list of whole-number example indices, got {got}")
    return array.astype(np.int64)


class PuzzleLoader:
    """Batches from one or more datasets' `split`, for training or evaluation.

    dataset_paths      one dataset directory or a list of them (mixed, identifiers offset)
    split              "train" or "test"
    global_batch_size  examples per optimizer step over all ranks
    seed               the batch stream is a pure function of (seed, dataset, batch size)
    rank, world_size   DDP: rank r receives rows [r*local : (r+1)*local] of every global batch
    test_mode          None = (split == "test"): True walks every example once in order, padded;
                       False samples training batches epoch after epoch
    prefetch           batches prepared ahead by a background thread (0 = none)
    pin_memory         batches in page-locked memory (CUDA training): a `non_blocking` copy of such a batch
                       to the GPU runs beside the host instead of making it wait

    Training: iterate `loader` (endless) or `loader.iterate(until_epoch=N)`; `state_dict()`
    after any number of consumed batches, `load_state_dict()` on a fresh loader, and the
    stream continues exactly. Test mode: iterating yields `EvalBatch` tuples.
    """

    def __init__(self, dataset_paths: str | os.PathLike | Sequence[str | os.PathLike], split: str = "train",
                 global_batch_size: int = 768, seed: int = 0, rank: int = 0, world_size: int = 1,
                 test_mode: bool | None = None, prefetch: int = 1, pin_memory: bool = False):
        self.dataset_paths = _as_path_list(dataset_paths)
        self.split = split
        # each number a whole one, each flag a bool: 2.7 was cut to 2 and test_mode="no" was test mode
        self.test_mode = (split == "test") if test_mode is None else flag_argument("test_mode", test_mode)
        self.seed = whole_argument("seed", seed, 0, MAX_SEED)
        self.global_batch_size = whole_argument("global_batch_size", global_batch_size, 1, MAX_BATCH_SIZE)
        self.world_size = whole_argument("world_size", world_size, 1, MAX_WORLD_SIZE)
        self.rank = whole_argument("rank", rank, 0, MAX_WORLD_SIZE - 1)
        self.prefetch = whole_argument("prefetch", prefetch, 0, MAX_PREFETCH)
        self.pin_memory = flag_argument("pin_memory", pin_memory)

        if not self.rank < self.world_size:
            raise TRMError(f"rank {rank} is not in 0..world_size-1 (world_size {world_size})")
        if self.global_batch_size % self.world_size:
            raise TRMError(f"global_batch_size {self.global_batch_size} is not divisible by the number of "
                           f"processes {self.world_size}: every rank must get the same local batch size")
        self.local_batch_size = self.global_batch_size // self.world_size

        # --- load every dataset (inputs/labels stay memory-mapped) ---
        self.splits: list[Split] = []
        for path in self.dataset_paths:
            s = load_split(path, split)
            _check_structure(path, s)
            self.splits.append(s)
        metas = [s.metadata for s in self.splits]

        # --- global numbering: examples, puzzles and groups of dataset k follow those of 0..k-1 ---
        n_ex = [s.num_examples for s in self.splits]
        n_pz = [len(s.puzzle_indices) - 1 for s in self.splits]
        n_gr = [len(s.group_indices) - 1 for s in self.splits]
        self.example_offsets = [0, *np.cumsum(n_ex).tolist()]  # length K+1
        self.puzzle_offsets = [0, *np.cumsum(n_pz).tolist()]
        self.group_offsets = [0, *np.cumsum(n_gr).tolist()]
        self.identifier_offsets = [0, *np.cumsum([m.num_puzzle_identifiers for m in metas]).tolist()][:-1]
        self.metadata = _merge_metadata(self.dataset_paths, metas, self.puzzle_offsets[-1], self.group_offsets[-1])

        # Merged index arrays, int64, in memory (they are small: one entry per puzzle or group).
        # puzzle p owns global examples [_puzzle_starts[p], _puzzle_starts[p+1]);
        # group g owns global puzzles [group_starts[g], group_starts[g+1]).
        self._puzzle_starts = np.concatenate(
            [s.puzzle_indices[:-1].astype(np.int64) + off for s, off in zip(self.splits, self.example_offsets)]
            + [np.array([self.example_offsets[-1]], dtype=np.int64)])
        group_starts = np.concatenate(
            [s.group_indices[:-1].astype(np.int64) + off for s, off in zip(self.splits, self.puzzle_offsets)]
            + [np.array([self.puzzle_offsets[-1]], dtype=np.int64)])
        self.sampler = GroupSampler(self.seed, self.global_batch_size, self._puzzle_starts, group_starts)
        blank = self.metadata.blank_identifier_id
        self._identifiers = np.concatenate(
            [np.where(s.puzzle_identifiers == blank, blank, s.puzzle_identifiers.astype(np.int64) + off)
             for s, off in zip(self.splits, self.identifier_offsets)]).astype(np.int32)

        self._metas = metas  # identifier_names reads identifiers.json on first use
        # ... and names the dataset opened here, or none: what identifiers.json is now is checked then
        self._names_at_open = [_identity(path / "identifiers.json") for path in self.dataset_paths]
        # the memory-mapped arrays' sizes at open: a file shrunk under the loader is named, not a SIGBUS (`_gather`)
        self._mapped = [[(path / split / f"{SET_NAME}__{name}.npy", getattr(s, name)) for name in ("inputs", "labels")]
                        for path, s in zip(self.dataset_paths, self.splits)]

        # --- iteration state: what the consumer has received so far (never what is prefetched) ---
        self._state = {"epoch": 0, "position": 0, "batch_in_epoch": 0, "step": 0}
        self._generation = 0  # bumped by load_state_dict; a live iterator of an older generation stops
        self._group_mask_at: Callable[[int], np.ndarray | None] | None = None
        self._mask_memo: tuple[Any, np.ndarray] | None = None

    # ------------------------------------------------------------------
    # Metadata helpers
    # ------------------------------------------------------------------

    @functools.cached_property
    def identifier_names(self) -> list[str] | None:
        """Concatenated identifiers.json lists (index = merged identifier), or None if any is missing.

        Read on first use, not when the loader opens: training never needs the names, and for
        upstream's 1000-augmentation ARC datasets they are a million Python strings (~120 MB)."""
        names: list[str] = []
        for path, meta, at_open in zip(self.dataset_paths, self._metas, self._names_at_open):
            if _identity(path / "identifiers.json") != at_open:
                # a dataset rebuilt in place: its new names beside the rows this loader still reads
                raise DataError(f"{path / 'identifiers.json'} was replaced or changed after this loader opened "
                                f"{path}: its names may not be those of the rows read; open a new PuzzleLoader")
            if at_open is None:
                return None
            ids = load_identifiers(path)
            if len(ids) != meta.num_puzzle_identifiers:
                raise DataError(f"{path / 'identifiers.json'}: {len(ids)} names but "
                                f"{path / self.split / 'dataset.json'} says num_puzzle_identifiers "
                                f"{meta.num_puzzle_identifiers}")
            names.extend(ids)
        return names

    @property
    def num_examples(self) -> int:
        return self.example_offsets[-1]

    @property
    def total_groups(self) -> int:
        return self.group_offsets[-1]

    def locate_puzzle(self, puzzle_index: int) -> tuple[int, int]:
        """(dataset number, puzzle index inside that dataset's split) of a global puzzle index."""
        puzzle_index = self._puzzle_index(puzzle_index)
        k = int(np.searchsorted(self.puzzle_offsets, puzzle_index, side="right")) - 1
        return k, int(puzzle_index - self.puzzle_offsets[k])

    def puzzle_identifier(self, puzzle_index: int) -> int:
        """Merged (offset) identifier of a global puzzle index."""
        return int(self._identifiers[self._puzzle_index(puzzle_index)])  # -1 was the last puzzle's

    def _puzzle_index(self, value: object) -> int:
        """IndexError unless `value` is a whole number naming a puzzle (0.5 was puzzle 0)."""
        try:
            return whole_argument("puzzle_index", value, 0, self.puzzle_offsets[-1] - 1)
        except ValueError as e:
            raise IndexError(f"{e} (the puzzles of the {self.split} split)") from None

    # ------------------------------------------------------------------
    # Progress
    # ------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the consumed batches have reached (0-based)."""
        return self._state["epoch"]

    @property
    def epoch_progress(self) -> float:
        """epoch + fraction of its groups consumed (e.g. 2.5 = half way through the third epoch)."""
        return self._state["epoch"] + self._state["position"] / max(1, self.total_groups)

    @property
    def step(self) -> int:
        """Global batches consumed since the start (survives state_dict/load_state_dict)."""
        return self._state["step"]

    @property
    def batches_per_epoch(self) -> float:
        """Upstream's estimate: total_groups * mean_puzzle_examples / global_batch_size.

        Upstream plans a run's total steps as epochs * this. The true count of an epoch
        varies (one puzzle per group is drawn, the last partial batch is dropped): see
        `exact_batches_in_epoch`.
        """
        return self.total_groups * self.metadata.mean_puzzle_examples / self.global_batch_size

    def exact_batches_in_epoch(self, epoch: int | None = None) -> int:
        """The exact number of batches `epoch` (default: the current one) yields (replayed, cached)."""
        return self.sampler.batches_in_epoch(self.epoch if epoch is None else
                                             whole_argument("epoch", epoch, 0, _COUNT_END - 1))

    # ------------------------------------------------------------------
    # Resume
    # ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the consumed batch stream stands: a small JSON-serialisable dict of ints.

        epoch, position (groups of this epoch's order already used), batch_in_epoch
        (batches of this epoch already yielded: it keys the per-batch random stream),
        step (global batches since the start), plus seed, global_batch_size and
        total_groups, which `load_state_dict` checks so that a resume cannot silently
        continue a different stream.
        """
        if self.test_mode:
            return {"version": STATE_VERSION, "test_mode": True}
        return {"version": STATE_VERSION, "test_mode": False, **self._state, "seed": self.seed,
                "global_batch_size": self.global_batch_size, "total_groups": self.total_groups}

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Continue from `state` (from `state_dict()`). Iterators created earlier stop working.

        strict=False accepts a state saved with another seed, batch size or dataset (the
        position is clipped to the dataset); the stream then is no longer the one that
        the saved run would have seen. Strict, a position no stream of this loader reaches
        (beyond its groups, more batches than groups used, an epoch count its step cannot
        hold) is refused, naming the count and its range.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state: expected the dict state_dict() returned, got {type_name(state)}")
        if state.get("version") != STATE_VERSION:
            raise TRMError(f"data loader state of version {clipped(state.get('version'))}, expected {STATE_VERSION}")
        if bool(state.get("test_mode")) != self.test_mode:
            raise TRMError("data loader state of a test-mode loader given to a training loader, or the reverse")
        if self.test_mode:
            return
        if strict:
            for key, mine in (("seed", self.seed), ("global_batch_size", self.global_batch_size),
                              ("total_groups", self.total_groups)):
                if state.get(key) != mine:
                    raise TRMError(f"cannot resume the data stream exactly: the saved state has {key}="
                                   f"{clipped(state.get(key))}, this loader {mine!r}")
        counts = {key: _state_count(state, key) for key in ("epoch", "position", "batch_in_epoch", "step")}
        if strict and (problem := self._position_problem(**counts)):
            raise TRMError(f"cannot resume the data stream exactly: the saved state's {problem}")
        self._state = {**counts, "position": min(counts["position"], self.total_groups)}
        self._generation += 1

    def _position_problem(self, epoch: int, position: int, batch_in_epoch: int, step: int) -> str | None:
        """What no stream of this loader reaches in a saved position (a hand-edited state re-signed), or None: a
        position beyond the epoch's groups was clipped to them without a word, and a resume took another stream.
        Every batch uses at least one group of its epoch; every epoch before this one yielded a batch at least
        when even the smallest puzzles of all the groups fill one (else an epoch may yield none)."""
        if position > self.total_groups:
            return f"position {position} is outside 0..{self.total_groups} (the groups of an epoch)"
        if batch_in_epoch > position or (position and not batch_in_epoch):
            return (f"batch_in_epoch {batch_in_epoch} is outside {min(1, position)}..{position} (position {position}: "
                    "each batch of an epoch uses at least one of its groups)")
        if step < batch_in_epoch:
            return f"step {step} is below batch_in_epoch {batch_in_epoch} (step counts every batch since the start)"
        if epoch > step - batch_in_epoch and self._min_examples_per_epoch() >= self.global_batch_size:
            return (f"epoch {epoch} is outside 0..{step - batch_in_epoch} (step {step} counts a batch at least of "
                    f"every epoch before it, and batch_in_epoch {batch_in_epoch} of this one)")
        return None

    def _min_examples_per_epoch(self) -> int:
        """Examples an epoch yields at least (every group's smallest puzzle)."""
        if not self.total_groups:
            return 0
        sampler = self.sampler
        return int(np.sum(np.minimum.reduceat(sampler.puzzle_sizes, sampler.group_starts[:-1])))

    # ------------------------------------------------------------------
    # Sampling filter (a data curriculum sets it)
    # ------------------------------------------------------------------

    def set_group_filter(self, mask_at: Callable[[int], np.ndarray | None] | None) -> None:
        """Sample training batches only from some groups: `mask_at(step)` is a boolean mask over all
        groups (global numbering) for the batch drawn at global step `step`, or None for every group.

        A batch draws from the allowed groups of the epoch's shuffled order. When the mask changes
        from one step to the next, the epoch ends there and the next batch opens a new epoch, so
        every batch honours the mask of its own step. `mask_at` must be a pure function of the step
        (and thread-safe: the prefetch thread calls it): then a resumed stream is the same stream.
        Set it before iterating.

        The mask may also be given as the allowed groups' indices (integers from 0 to total_groups - 1). A 0/1
        integer array as long as the groups are many reads either way and is refused: pass it as bool.
        """
        if mask_at is not None and not callable(mask_at):
            raise TypeError(f"set_group_filter: mask_at must be a function of the step or None, got "
                            f"{type_name(mask_at)}")
        self._group_mask_at = mask_at
        self._mask_memo = None  # (what mask_at returned, its bool mask)

    def groups_where(self, example_mask: np.ndarray) -> np.ndarray:
        """Group mask from a mask over all examples: a group passes when every example in it does
        (a group's puzzle is drawn at random, so a partly allowed group could yield the rest)."""
        return self.sampler.groups_where(example_mask)

    def _mask(self, step: int) -> np.ndarray | None:
        if self._group_mask_at is None or step < 0:
            return None
        given = self._group_mask_at(step)
        memo = self._mask_memo  # read once: the prefetch thread may replace it
        if given is None or (memo is not None and memo[0] is given):
            return None if given is None else memo[1]  # the same object, the same mask (group_order caches by it)
        mask = _group_mask(given, self.total_groups, step)
        self._mask_memo = (given, mask)
        return mask

    # ------------------------------------------------------------------
    # Gathering
    # ------------------------------------------------------------------

    def _gather(self, example_ids: np.ndarray, puzzle_ids: np.ndarray) -> dict[str, torch.Tensor]:
        """Rows of the memory-mapped datasets as int32 tensors; ids < 0 give padding rows."""
        n, seq_len = len(example_ids), self.metadata.seq_len
        # numpy views of the tensors handed out: filled in place, in pinned memory when asked for (torch's
        # pinned allocator reuses a block only after the copies recorded on it have finished); on the host even
        # under a caller's `with torch.device("cuda")` (upstream's habit), which would place them on the GPU
        host = {"dtype": torch.int32, "device": "cpu", "pin_memory": self.pin_memory}
        out = {"inputs": torch.empty((n, seq_len), **host), "labels": torch.empty((n, seq_len), **host),
               "puzzle_identifiers": torch.empty(n, **host)}
        inputs, labels, identifiers = (out[k].numpy() for k in ("inputs", "labels", "puzzle_identifiers"))

        real = np.flatnonzero(example_ids >= 0)
        # Read in ascending order (sequential access to the memory maps), write back in batch order.
        order = real[np.argsort(example_ids[real], kind="stable")]
        sorted_ids = example_ids[order]
        bounds = np.searchsorted(sorted_ids, self.example_offsets)
        for k, s in enumerate(self.splits):
            a, b = bounds[k], bounds[k + 1]
            if a < b:
                self._check_mapped(k)
                local = sorted_ids[a:b] - self.example_offsets[k]
                inputs[order[a:b]] = s.inputs[local]  # converts uint8/uint16 tokens to int32
                labels[order[a:b]] = s.labels[local]
        ignore = self.metadata.ignore_label_id
        if ignore is not None:
            # labels[labels == ignore] = -100, written as arithmetic: several times faster than a masked store
            labels += (labels == ignore) * np.int32(IGNORE_LABEL_ID - ignore)
        identifiers[real] = self._identifiers[puzzle_ids[real]]

        if len(real) < n:  # padding rows (test iteration only)
            pad = np.flatnonzero(example_ids < 0)
            inputs[pad] = self.metadata.pad_id
            labels[pad] = IGNORE_LABEL_ID
            identifiers[pad] = self.metadata.blank_identifier_id
        return out

    def _check_mapped(self, k: int) -> None:
        """DataError naming an array file of dataset k that shrank since the loader opened it (truncated or
        rewritten in place): reading its memory map past the new end is a SIGBUS that kills the process without a
        word, or rows of zeros within the last page. One fstat of each file per batch; a file replaced by another
        (a builder's rebuild) keeps its old contents mapped and is not affected."""
        for path, array in self._mapped[k]:
            mapped = getattr(array, "_mmap", None)  # numpy's memmap keeps the mmap, which keeps the file open
            if mapped is not None and mapped.size() < array.offset + array.nbytes:
                raise DataError(f"{path}: the file shrank to {mapped.size():,} bytes after this loader opened it "
                                f"({array.offset + array.nbytes:,} were there): a dataset must not be rewritten "
                                "in place while it is read; rebuild it and open a new PuzzleLoader")

    def examples(self, example_indices: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """One batch holding the given global example indices, in that order (any split, any mode)."""
        example_ids = self._example_indices(example_indices)
        return self._gather(example_ids, self._puzzle_of(example_ids))

    def _example_indices(self, given: object) -> np.ndarray:
        """`given` as int64 example indices: whole numbers from 0 to num_examples - 1 (-1 was a padding row, 0.9
        example 0, and one past the end an IndexError about puzzles)."""
        array = whole_indices(given, "example_indices")
        bad = (array < 0) | (array >= self.num_examples)
        if bad.any():
            raise TRMError(f"example_indices: index {int(array[np.argmax(bad)])} is outside 0.."
                           f"{self.num_examples - 1} (the {self.num_examples} examples of the {self.split} split)")
        return array

    def _puzzle_of(self, example_ids: np.ndarray) -> np.ndarray:
        """Global puzzle index of each global example index."""
        return np.searchsorted(self._puzzle_starts, example_ids, side="right") - 1

    # ------------------------------------------------------------------
    # Iteration
    # ------------------------------------------------------------------

    def __iter__(self):
        return self.iterate_test() if self.test_mode else self.iterate()

    def __len__(self) -> int:
        """Test mode: the number of batches of one pass. Training streams have no length."""
        if not self.test_mode:
            raise TypeError("a training PuzzleLoader is endless; see batches_per_epoch / exact_batches_in_epoch")
        return -(-self.num_examples // self.global_batch_size)

    def iterate(self, until_epoch: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Training batches from the current state on, stopping when epoch `until_epoch` is reached.

        With until_epoch=None the stream never ends. After the loop `self.epoch`
        equals until_epoch (the dropped tail of the last epoch has been skipped).
        """
        if self.test_mode:
            raise TRMError("iterate() samples training batches; this loader is in test mode (use iterate_test)")
        if until_epoch is not None:  # 1.5 ran two epochs, NaN and -1 none, without a word
            until_epoch = whole_argument("until_epoch", until_epoch, 0, _COUNT_END - 1)
        start = dict(self._state)
        lo, hi = self.rank * self.local_batch_size, (self.rank + 1) * self.local_batch_size
        self.check_batch_fills()

        def produce():
            epoch, position, b, step = start["epoch"], start["position"], start["batch_in_epoch"], start["step"]
            while until_epoch is None or epoch < until_epoch:
                mask = self._mask(step)
                if position and not _same_mask(mask, self._mask(step - 1)):
                    # the filter changed: close this epoch so the next batch draws under the new mask
                    epoch, position, b = epoch + 1, 0, 0
                    yield None, {"epoch": epoch, "position": 0, "batch_in_epoch": 0, "step": step}
                    continue
                order = self.sampler.group_order(epoch, mask)
                sampled = self.sampler.sample_batch(order, position, epoch, b)
                if sampled is None and position == 0 and mask is not None:
                    raise TRMError(f"the sampling filter of step {step} allows {len(order)} groups, too few "
                                   f"to fill a batch of {self.global_batch_size}")
                if sampled is None:
                    # Drop-last: the rest of this epoch's groups cannot fill a batch. Report the
                    # rollover as a state-only item so `epoch` advances when it is consumed.
                    epoch, position, b = epoch + 1, 0, 0
                    yield None, {"epoch": epoch, "position": 0, "batch_in_epoch": 0, "step": step}
                    continue
                example_ids, puzzle_ids, used = sampled
                position, b, step = position + used, b + 1, step + 1
                batch = self._gather(example_ids[lo:hi], puzzle_ids[lo:hi])
                yield batch, {"epoch": epoch, "position": position, "batch_in_epoch": b, "step": step}

        return self._consume(produce)

    def iterate_test(self) -> Iterator[EvalBatch]:
        """Every example of the split once, in order, as `EvalBatch`es (see the class docstring)."""
        N, B, L = self.num_examples, self.global_batch_size, self.local_batch_size

        def produce():
            for start in range(0, N, B):
                end = min(N, start + B)
                lo, hi = min(start + self.rank * L, end), min(start + (self.rank + 1) * L, end)
                example_ids = np.full(L, -1, dtype=np.int64)
                example_ids[:hi - lo] = np.arange(lo, hi)
                puzzle_ids = np.full(L, -1, dtype=np.int64)
                puzzle_ids[:hi - lo] = self._puzzle_of(example_ids[:hi - lo])
                batch = self._gather(example_ids, puzzle_ids)
                yield EvalBatch(batch, hi - lo, torch.from_numpy(example_ids), torch.from_numpy(puzzle_ids),
                                end - start), None

        return self._consume(produce)

    @property
    def max_examples_per_epoch(self) -> int:
        """The largest global batch an epoch can fill (the sum of every group's largest puzzle)."""
        return self.sampler.max_examples_per_epoch()

    def check_batch_fills(self) -> None:
        """TRMError when one epoch cannot fill a training batch (`iterate` checks it; `train` before it writes)."""
        max_one_epoch = self.sampler.max_examples_per_epoch()
        if max_one_epoch < self.global_batch_size:
            raise TRMError(f"global_batch_size {self.global_batch_size} is larger than the at most "
                           f"{max_one_epoch} examples one epoch of {', '.join(map(str, self.dataset_paths))} "
                           f"({self.split}) provides: no batch could ever be filled")

    def _consume(self, produce: Callable[[], Iterator[tuple[Any, dict | None]]]) -> Iterator[Any]:
        """Run `produce` (inline or on a prefetch thread); record each state when its item is consumed."""
        generation = self._generation

        def deliver(items):
            try:
                for item, state in items:
                    if self._generation != generation:
                        raise RuntimeError("load_state_dict() was called: start a new iteration over the loader")
                    if state is not None:
                        self._state = state
                    if item is not None:
                        yield item
            finally:
                items.close()  # stops the prefetch thread at once when the consumer stops early

        if self.prefetch == 0:
            return deliver(produce())
        return deliver(_prefetched(produce, self.prefetch))


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """(device, inode, size, change time) of the file at `path`, None where none is: a file rebuilt or edited
    since differs."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns


def _state_count(state: dict[str, Any], key: str) -> int:
    """A count of a saved stream position: a whole number from 0 (epoch 1.7 was taken as 1, position -3 skipped
    groups of epoch 0, and a missing count was a KeyError)."""
    if key not in state:
        raise TRMError(f"data loader state: no {key!r}; give the dict state_dict() returned")
    return whole_argument(f"data loader state's {key}", state[key], 0, _COUNT_END - 1)


def _group_mask(given: object, total_groups: int, step: int) -> np.ndarray:
    """What a sampling filter returned for `step` as a bool mask over the groups: a bool mask of their length, or the
    allowed groups' indices. A 0/1 integer array was taken as indices (groups 0 and 1 only), silently."""
    where = f"the sampling filter (set_group_filter) at step {step}"
    array = np.asarray(given)
    if array.ndim != 1:
        raise TRMError(f"{where} gave a {array.ndim}-D {type_name(given)}: expected a bool mask over the "
                       f"{total_groups} groups or a list of group indices")
    if array.dtype.kind == "b":
        if len(array) != total_groups:
            raise TRMError(f"{where} gave a bool mask of {len(array)} entries for {total_groups} groups")
        return array
    if array.size == 0:
        return np.zeros(total_groups, dtype=bool)  # no group allowed: iterate says so
    if array.dtype.kind not in "iu":
        raise TRMError(f"{where} gave values of dtype {array.dtype}: expected a bool mask over the {total_groups} "
                       "groups or a list of group indices")
    if len(array) == total_groups and np.isin(array, (0, 1)).all():
        raise TRMError(f"{where} gave a 0/1 integer array as long as the groups are many ({total_groups}): a mask "
                       "or group indices? pass a bool mask (mask.astype(bool)) or the allowed groups' indices")
    bad = (array < 0) | (array >= total_groups)
    if bad.any():
        raise TRMError(f"{where} gave group index {int(array[np.argmax(bad)])}, outside 0..{total_groups - 1}")
    mask = np.zeros(total_groups, dtype=bool)
    mask[array] = True
    return mask


def _same_mask(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is b or (a is not None and b is not None and np.array_equal(a, b))


_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _prefetched(produce: Callable[[], Iterator[Any]], depth: int) -> Iterator[Any]:
    """Items of `produce()` computed by a daemon thread, at most `depth` ahead of the consumer.

    When the consumer stops early (break, garbage collection, exception) the thread is told
    to stop and exits after the item it is working on.
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            for item in produce():
                if not put(item):
                    return
            put(_DONE)
        except BaseException as e:  # handed to the consumer, raised there
            put(_Failure(e))

    thread = threading.Thread(target=work, name="PuzzleLoader-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=5.0)
