"""Voting over augmented predictions, and the ARC metrics.

Every test input of a task is predicted once per augmentation in the test split. After
un-augmenting (`decode`), the predictions of one *slot* = (task_id, test_index) vote:

* candidates (distinct grids) are ranked by vote count, ties broken by the mean
  sigmoid(q_halt) of their votes (upstream's rule), remaining ties by first appearance
  in dataset order (what upstream's stable sort does);
* `weighting="q_halt"` instead weights every vote by its sigmoid(q_halt): rank by the
  summed confidence, ties again by the mean.

Everything is array code: one `np.unique` over the keys, one over (slot, key) pairs,
`bincount` for the tallies and one `lexsort` for the ranking.

A `VoteTable` is the votes of ONE evaluation. Nothing is pooled across evaluation
rounds (upstream's default "aggregated voting" silently mixed the candidates of every
evaluation since the start of training into the current one); pooling happens only
when asked for with `VoteTable.merge(other)`.

Metrics, named so that neither can be mistaken for the other:

* `pass_at_k_task_macro[K]` = upstream's `ARC/pass@K`: the mean over tasks of the
  fraction of that task's test inputs whose top-K candidates contain the truth;
* `arc_prize_score` = the ARC Prize / Kaggle score: over all test outputs (micro
  average), 1 if the truth is among the top-2 candidates (the two attempts), else 0,
  divided by the number of test outputs.

A slot that received no prediction counts as unsolved; every task in the truth set
counts, predicted or not.
"""

from __future__ import annotations

import math
import operator
import os
import sys
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping, Sequence

import numpy as np

from trm_kaggle.atomic import atomic_write
from trm_kaggle.config import number_argument, path_argument, sequence_argument, whole_argument
from trm_kaggle.data import MAX_GRID, grid_problem
from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import open_regular, read_failure
from trm_kaggle.names import task_id_problem
from trm_kaggle.wording import clipped, shown, type_name
from trm_kaggle.evaluate.decode import HEADER, grid_to_key, key_shapes, key_to_grid
from trm_kaggle.evaluate.stats import wilson_interval

PASS_KS = (1, 2, 5, 10, 100, 1000)
#: The largest K a pass@K is asked for: past any number of candidates a split's votes hold in memory.
MAX_PASS_K = 10**9
VOTES_FORMAT = "trm_kaggle.votes/1"
ATTEMPTS = 2  # ARC Prize: two attempts per test output
Slot = tuple[str, int]
Weighting = Literal["count", "q_halt"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow warnings


@dataclass
class VoteTable:
    """The votes of one evaluation: one row per prediction.

    slots   list of (task_id, test_index); row i votes in slots[slot[i]]
    slot    (M,) int64
    keys    (M,) void: candidate keys from `decode` (equal keys = equal grids)
    q_halt  (M,) float64 halting logits (sigmoid is taken when tallying)
    order   (M,) int64 position of each vote in dataset order (ties go to the earliest)
    """

    slots: list[Slot]
    slot: np.ndarray
    keys: np.ndarray
    q_halt: np.ndarray
    order: np.ndarray | None = None

    def __post_init__(self) -> None:
        # what `load` refuses is refused here too (`_table_problem`, one check for both): `save` wrote files its own
        # `load` refused, and a table given to `evaluate(pool_with=...)` was pooled unchecked
        self.slot, self.keys, self.q_halt = np.asarray(self.slot), np.asarray(self.keys), np.asarray(self.q_halt)
        self.order = np.arange(len(self.slot), dtype=np.int64) if self.order is None else np.asarray(self.order)
        self.slots = [tuple(s) if isinstance(s, (tuple, list)) else s for s in sequence_argument(
            "slots", self.slots, "(task id, test index) pairs")]
        if problem := _table_problem(self.slots, self.slot, self.keys, self.q_halt, self.order):
            raise ValueError(problem)
        self.slots = [(t, int(i)) for t, i in self.slots]  # a numpy integer index as Python's
        self.slot, self.order = self.slot.astype(np.int64, copy=False), self.order.astype(np.int64, copy=False)
        self.q_halt = self.q_halt.astype(np.float64, copy=False)

    def __len__(self) -> int:
        return len(self.slot)

    def problem(self) -> str | None:
        """Why this table (changed since it was made: its arrays are its caller's) is none `load` reads, or None."""
        if not isinstance(self.slots, (list, tuple)):  # a part replaced by another kind: said, never an AttributeError
            return f"slots: {type_name(self.slots)}, not a list of (task id, test index) pairs"
        return _table_problem(list(self.slots), *(np.asarray(a) for a in (self.slot, self.keys, self.q_halt,
                                                                          self.order)))

    @classmethod
    def from_grids(cls, votes: Iterable[tuple[Slot, np.ndarray, float]], side: int = 30) -> "VoteTable":
        """Small hand-made tables: ((task_id, test_index), grid, q_halt logit) per vote. A grid is an ARC grid
        (`grid_problem`) or the empty 0x0 prediction; nothing is cast (-1 was colour 255, 1.7 was 1, None the task
        'None'): ValueError or TypeError naming the vote."""
        slots: dict[Slot, int] = {}
        slot, keys, q = [], [], []
        for n, vote in enumerate(sequence_argument("votes", votes, "((task id, test index), grid, q_halt) votes")):
            if not isinstance(vote, (tuple, list)) or len(vote) != 3 or not isinstance(vote[0], (tuple, list)) \
                    or len(vote[0]) != 2:
                raise TypeError(f"votes[{n}]: expected ((task id, test index), grid, q_halt), got {type_name(vote)}")
            (task, index), grid, qh = vote
            index = whole_argument(f"votes[{n}] test index", index, 0, 2**62)
            slot.append(slots.setdefault((task, index), len(slots)))
            keys.append(_grid_key(grid, side, f"votes[{n}] grid", empty=True))
            q.append(number_argument(f"votes[{n}] q_halt", qh, -sys.float_info.max, sys.float_info.max))
        key_arr = np.array(keys, dtype=keys[0].dtype) if keys else np.empty(0, dtype=f"V{2 + side * side}")
        return cls(list(slots), np.array(slot, dtype=np.int64), key_arr, np.array(q, dtype=np.float64))

    def merge(self, other: "VoteTable") -> "VoteTable":
        """OPT-IN pooling: a new table holding the votes of both evaluations (neither is changed).

        Use it only when pooling is intended, e.g. several evaluation passes of the same
        weights with different test-time augmentations. Pooling the votes of different
        checkpoints mixes old and new models' answers (upstream's aggregated-voting defect).
        Votes of `other` come after this table's in the tie-breaking order.
        """
        if not isinstance(other, VoteTable):
            raise TypeError(f"other: expected a VoteTable, got {type_name(other)}")
        if self.keys.dtype != other.keys.dtype:
            raise ValueError(f"keys of different canvases: {self.keys.dtype} and {other.keys.dtype}")
        index = {s: i for i, s in enumerate(self.slots)}
        slots = list(self.slots)
        for s in other.slots:
            if s not in index:
                index[s] = len(slots)
                slots.append(s)
        remap = np.array([index[s] for s in other.slots], dtype=np.int64)
        shift = int(self.order.max()) + 1 if len(self) else 0
        return VoteTable(slots, np.concatenate([self.slot, remap[other.slot]]),
                         np.concatenate([self.keys, other.keys]), np.concatenate([self.q_halt, other.q_halt]),
                         np.concatenate([self.order, other.order + shift]))

    def tally(self, weighting: Weighting = "count") -> "VoteResult":
        return tally(self, weighting)

    def save(self, path: str | os.PathLike) -> None:
        """Write the votes to an .npz file (atomically; plain arrays, loadable without pickle); a table changed since
        it was made into one `load` refuses is a ValueError, nothing written."""
        if problem := self.problem():  # a NaN q_halt or a negative test index was written, refused when read back
            raise ValueError(f"{path}: not written: the table changed since it was made ({problem})")
        width = self.keys.dtype.itemsize
        arrays = {
            "format": np.array(VOTES_FORMAT),
            "slot_tasks": np.array([t for t, _ in self.slots], dtype=str),
            "slot_tests": np.array([i for _, i in self.slots], dtype=np.int64),
            "slot": self.slot, "q_halt": self.q_halt, "order": self.order,
            "keys": np.ascontiguousarray(self.keys).view(np.uint8).reshape(len(self.keys), width),
        }
        atomic_write(path, lambda f: np.savez(f, **arrays), through_link=True)  # --save-votes names it

    @classmethod
    def load(cls, path: str | os.PathLike) -> "VoteTable":
        """Votes written by `save` (e.g. `trm-kaggle evaluate --save-votes`); one clear error otherwise."""
        path = path_argument("path", path, "a votes file")
        if "\0" not in str(path) and not os.path.lexists(path):  # a NUL byte: named by the reader below
            raise DataError(f"{path}: no such votes file")
        try:
            with open_regular(path, "votes file") as f:
                if f.read(4) != b"PK\x03\x04":  # no .npz (a zip archive): np.load would take a .npy, or advise
                    raise ValueError("no .npz archive")  # unpickling a JSON file
                f.seek(0)
                _check_declared_shapes(f)  # from the members' headers: a 3 MB file unpacked to 3 GB before its check
                f.seek(0)
                with np.load(f, allow_pickle=False) as z:
                    if str(z["format"]) != VOTES_FORMAT:
                        raise ValueError(f"format {str(z['format'])!r}")
                    keys = z["keys"]
                    if keys.ndim != 2 or keys.dtype != np.uint8:
                        raise ValueError(f"keys of shape {keys.shape} and dtype {keys.dtype}")
                    # the table's own check (`_table_problem`) says what else is wrong, before any inference
                    return cls(list(zip(z["slot_tasks"].tolist(), z["slot_tests"].tolist())), z["slot"],
                               np.ascontiguousarray(keys).view(f"V{keys.shape[1]}").reshape(-1), z["q_halt"],
                               z["order"])
        except MemoryError:  # its members as their headers declare them do not fit this process
            raise DataError(f"{path}: a votes file larger than this process's memory can read") from None
        # truncated: a bad zip archive; empty: no numpy header (EOFError); a damaged member: zlib's error
        except (OSError, KeyError, ValueError, IndexError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise read_failure(e, path, "votes file") or DataError(
                f"{path}: not a votes file written by `trm-kaggle evaluate --save-votes` ({e})"
            ) from None

    def foreign_slots(self, slots: Iterable[Slot]) -> list[Slot]:
        """This table's slots that are none of `slots` (a test split's): votes of another dataset, which pooled
        counted for nothing while the scores were said to be pooled."""
        known = set(slots)
        return [s for s in self.slots if s not in known]


#: The largest ARC colour a vote's grid may hold.
MAX_COLOUR = 9
#: A vote's order (its position in its dataset's order) stays below this: two tables' orders add up when pooled.
MAX_ORDER = 2**52
#: The members of a votes file and the length each shares: M votes, S slots.
_MEMBERS = {"slot": "M", "q_halt": "M", "order": "M", "keys": "M", "slot_tasks": "S", "slot_tests": "S"}
#: The kinds of number each member holds (numpy's dtype.kind): an order of floats passed its bounds as NaN, which
#: no comparison fails, and was pooled as int64's bottom; 0.5 was cut to 0.
_KINDS = {"slot": "iu", "q_halt": "f", "order": "iu", "keys": "u", "slot_tasks": "U", "slot_tests": "iu"}


def _check_declared_shapes(f) -> None:
    """ValueError unless the .npz members' headers declare one vote count M for slot, q_halt, order and keys,
    one slot count S for slot_tasks and slot_tests, and keys of at most ARC's 30x30 canvas: read before any member
    is unpacked."""
    lengths: dict[str, int] = {}
    with zipfile.ZipFile(f) as z:
        for name, length in _MEMBERS.items():
            with z.open(f"{name}.npy") as member:
                version = np.lib.format.read_magic(member)
                shape, _, dtype = (np.lib.format.read_array_header_1_0(member) if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0(member))
            if dtype.kind not in _KINDS[name]:
                raise ValueError(f"{name} of dtype {dtype}")
            # keys are rows of bytes, every other member one value per vote or slot: a 2-D slot passed, and failed
            # in merge after the whole inference
            if len(shape) != (2 if name == "keys" else 1) or (name == "keys" and shape[1] > HEADER + MAX_GRID * MAX_GRID):
                raise ValueError(f"{name} of shape {shape}")
            if lengths.setdefault(length, shape[0]) != shape[0]:
                raise ValueError(f"votes of unequal lengths: {name} holds {shape[0]:,} rows, and others "
                                 f"{lengths[length]:,}")


def _table_problem(slots: list, slot: np.ndarray, keys: np.ndarray, q_halt: np.ndarray,
                   order: np.ndarray) -> str | None:
    """Why a table's parts are none `save` writes and `load` reads, or None: the one check of `VoteTable` (its
    constructor, `from_grids`, `load`, a table given to `evaluate(pool_with=...)`), each problem naming its part."""
    for name, value in (("slot", slot), ("q_halt", q_halt), ("order", order)):
        if value.ndim != 1:  # a 2-D slot failed in merge after the whole inference
            return f"{name} of shape {value.shape}"
        # the kinds of number (an empty list is numpy's float64); a q_halt of ints is exact as floats
        if value.size and value.dtype.kind not in _KINDS[name] + ("iu" if name == "q_halt" else ""):
            return f"{name} of dtype {value.dtype}"
    if keys.ndim != 1 or keys.dtype.kind != "V":
        return f"keys of shape {keys.shape} and dtype {keys.dtype} (keys are `decode` keys: one numpy.void each)"
    if not (len(slot) == len(keys) == len(q_halt) == len(order)):
        return (f"votes of unequal lengths: {len(slot)} slots, {len(keys)} keys, {len(q_halt)} q_halt, "
                f"{len(order)} order")
    if problem := _slots_problem(slots):
        return f"slots: {problem}"
    if len(slot) and (slot.min() < 0 or slot.max() >= len(slots)):
        return "slot index outside the slot list"
    if len(order) and ((order < 0).any() or (order >= MAX_ORDER).any()):  # int64's top: pooling overflowed
        return f"a vote's order below 0 or past {MAX_ORDER:,}"
    return _keys_problem(np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), keys.dtype.itemsize), q_halt)


def _grid_key(grid: object, side: int, what: str, empty: bool = False) -> np.void:
    """The key of `grid`, an ARC grid (`grid_problem`, the check of the tasks and of submissions; `empty`: or the
    0x0 grid a prediction without a colour cell crops to) on a side x side canvas; ValueError naming `what`:
    colours 257 and -255 were wrapped to 1, 1.9 cut to 1 and True taken as 1."""
    if not (empty and isinstance(grid, np.ndarray) and grid.shape == (0, 0) and grid.dtype.kind in "iu"):
        if problem := grid_problem(grid, allow_numpy=True):
            raise ValueError(f"{what}: {problem}")
    grid = np.asarray(grid)
    if grid.shape[0] > side or grid.shape[1] > side:
        raise ValueError(f"{what}: a {grid.shape[0]}x{grid.shape[1]} grid does not fit the {side}x{side} canvas")
    return grid_to_key(grid, side)


def _slots_problem(slots: list) -> str | None:
    """Why a votes file's (task id, test index) list is none `save` writes, or None: a test input listed twice
    scored its votes in a slot scoring never read (1.0 turned 0.0), an index below 0 named no test input."""
    for item in slots:
        if not isinstance(item, tuple) or len(item) != 2:
            return f"{clipped(item, 40)} is no (task id, test index) pair"
        task, index = item
        if isinstance(index, np.integer):
            index = operator.index(index)
        if not isinstance(task, str):
            return f"task id {shown(repr(task))}, which is no text"
        if problem := task_id_problem(task):
            return f"task id {problem}"
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return f"test index {shown(repr(index))} of task {shown(task)}"
    seen: set = set()
    for slot in slots:
        if slot in seen:
            return f"task {shown(slot[0])} test {slot[1]} listed twice"
        seen.add(slot)
    return None


def _keys_problem(keys: np.ndarray, q_halt: np.ndarray) -> str | None:
    """Why a votes file's candidate keys (rows of `HEADER` shape bytes and a side x side canvas) or its q_halt
    values are none `save` writes, or None."""
    if keys.ndim != 2 or keys.dtype != np.uint8:
        return f"keys of shape {keys.shape} and dtype {keys.dtype}"
    side = math.isqrt(max(keys.shape[1] - HEADER, 0))
    if side < 1 or side * side != keys.shape[1] - HEADER:
        return f"keys of {keys.shape[1]} bytes, which hold no square canvas"
    if len(keys) and int(keys[:, :HEADER].max()) > side:
        return f"a grid shape past its {side}x{side} canvas"
    if len(keys) and (top := int(keys[:, HEADER:].max())) > MAX_COLOUR:  # colour 200 was drawn as 9, an attempt
        return f"a grid cell of colour {top} (colours are 0 to {MAX_COLOUR})"
    # past a grid's cells its canvas is zeros: equal grids have equal keys (their votes add up); asked a block of
    # rows at a time, so that the check never holds a mask the size of the file
    position = np.arange(side * side)[None, :]
    for start in range(0, len(keys), 1 << 14):
        block = keys[start:start + (1 << 14)]
        cells = block[:, 0].astype(np.int64) * block[:, 1]
        if (block[:, HEADER:][position >= cells[:, None]] != 0).any():
            return "a key whose canvas holds values past its grid's cells"
    if not np.isfinite(np.asarray(q_halt, dtype=np.float64)).all():
        return "non-finite q_halt values"
    return None


def canvas_side(table: "VoteTable") -> int:
    """The canvas side of a table's keys (`key_dtype`'s)."""
    return math.isqrt(table.keys.dtype.itemsize - HEADER)


@dataclass
class VoteResult:
    """Ranked candidates of every slot; candidate arrays are sorted by (slot, rank).

    Slot s owns candidates [slot_start[s], slot_start[s+1]); rank 0 is the best.
    """

    slots: list[Slot]
    weighting: str
    keys: np.ndarray  # (C,) candidate keys
    cand_slot: np.ndarray  # (C,) int64
    rank: np.ndarray  # (C,) int64, 0 = best within the slot
    votes: np.ndarray  # (C,) int64 number of predictions for the candidate
    score: np.ndarray  # (C,) float64 the ranking score: votes, or summed sigmoid(q_halt)
    mean_q: np.ndarray  # (C,) float64 mean sigmoid(q_halt) of the candidate's votes
    slot_start: np.ndarray  # (S+1,) int64
    slot_mean_q: np.ndarray = field(default=None)  # (S,) mean sigmoid(q_halt) over all of the slot's votes
    slot_index: dict[Slot, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.slot_index = {s: i for i, s in enumerate(self.slots)}

    def candidates(self, slot: Slot) -> slice:
        s = self.slot_index.get(slot_argument("slot", slot))
        if s is None:
            return slice(0, 0)
        return slice(int(self.slot_start[s]), int(self.slot_start[s + 1]))

    def ranked(self, slot: Slot, limit: int | None = None) -> list[dict]:
        """Best first: {"grid", "votes", "score", "mean_sigmoid_q_halt"}."""
        sl = self.candidates(slot)
        limit = None if limit is None else whole_argument("limit", limit, 0, MAX_PASS_K)  # -1 dropped the last one
        idx = range(sl.start, sl.stop if limit is None else min(sl.stop, sl.start + limit))
        return [{"grid": key_to_grid(self.keys[i]), "votes": int(self.votes[i]), "score": float(self.score[i]),
                 "mean_sigmoid_q_halt": float(self.mean_q[i])} for i in idx]

    def ranked_grids(self, limit: int | None = None, drop_empty: bool = True) -> dict[Slot, list[np.ndarray]]:
        """{(task_id, test_index): [grid, ...] best first}, for a submission writer.

        drop_empty skips the 0x0 grid (a prediction with no colour cell at the top-left),
        which is no valid ARC answer; the metrics keep it as a candidate, as upstream.
        """
        limit = None if limit is None else whole_argument("limit", limit, 0, MAX_PASS_K)  # -1 dropped the last one
        out: dict[Slot, list[np.ndarray]] = {}
        nonempty = key_shapes(self.keys).min(axis=1) > 0 if len(self.keys) else np.zeros(0, bool)
        for s, slot in enumerate(self.slots):
            a, b = int(self.slot_start[s]), int(self.slot_start[s + 1])
            grids = [key_to_grid(self.keys[i]) for i in range(a, b) if nonempty[i] or not drop_empty]
            out[slot] = grids[:limit] if limit is not None else grids
        return out

    def num_candidates(self) -> np.ndarray:
        """(S,) distinct candidates per slot."""
        return np.diff(self.slot_start)

    def truth_ranks(self, truths: Mapping[Slot, np.ndarray] | Sequence[tuple[Slot, np.ndarray]]) -> dict[Slot, int]:
        """Rank (0 = best) of each truth among its slot's candidates, -1 when absent or never predicted. Every truth
        is an ARC grid (`grid_problem`): ValueError or TypeError naming it otherwise."""
        items = truth_items(truths)
        if not items:
            return {}
        side = int(np.sqrt(self.keys.dtype.itemsize - 2)) if len(self.keys) else 30
        truth_keys = np.array([_grid_key(g, side, f"truths: task {shown(s[0])} test {s[1]}") for s, g in items])
        # slot index per truth (-1: no votes at all), then match against all candidates of that slot
        sidx = np.array([self.slot_index.get(s, -1) for s, _ in items], dtype=np.int64)
        truth_of_slot = np.full(len(self.slots), -1, dtype=np.int64)
        truth_of_slot[sidx[sidx >= 0]] = np.flatnonzero(sidx >= 0)
        ranks = np.full(len(items), -1, dtype=np.int64)
        if len(self.keys):
            t = truth_of_slot[self.cand_slot]
            has = t >= 0
            match = np.zeros(len(self.keys), dtype=bool)
            match[has] = self.keys[has] == truth_keys[t[has]]
            ranks[t[match]] = self.rank[match]
        return {s: int(r) for (s, _), r in zip(items, ranks)}


def slot_argument(name: str, value: object) -> Slot:
    """`value`, a (task id, test index) pair given to a call, as one: ranked("a") was an IndexError, a test index
    1.7 was cut to 1; TypeError or ValueError naming `name` otherwise."""
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[0], str):
        raise TypeError(f"{name}: expected a (task id, test index) pair, got {clipped(value, 40)}")
    return value[0], whole_argument(f"{name} test index", value[1], 0, 2**62)


def truth_items(truths: object) -> list[tuple[Slot, object]]:
    """The (slot, grid) pairs of `truths`: a mapping {(task id, test index): grid} or a list of such pairs."""
    pairs = list(truths.items()) if isinstance(truths, Mapping) else sequence_argument(
        "truths", truths, "((task id, test index), grid) pairs")
    for n, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"truths[{n}]: expected a ((task id, test index), grid) pair, got {type_name(pair)}")
    return [(slot_argument("truths key", s), g) for s, g in pairs]


def pass_ks(ks: object) -> tuple[int, ...]:
    """The Ks a pass@K is asked for, each a whole number from 1 to MAX_PASS_K (`evaluate` and `score` alike): ks=[0]
    reported a pass@0, [nan] failed in numpy, '2' was the K 50."""
    return tuple(whole_argument(f"ks[{i}]", k, 1, MAX_PASS_K)
                 for i, k in enumerate(sequence_argument("ks", ks, "whole numbers")))


def tally(table: VoteTable, weighting: Weighting = "count") -> VoteResult:
    """Rank the candidates of every slot (see the module docstring for the rule)."""
    if not isinstance(table, VoteTable):
        raise TypeError(f"table: expected a VoteTable, got {type_name(table)}")
    if weighting not in ("count", "q_halt"):
        raise ValueError(f"weighting must be 'count' or 'q_halt', got {weighting!r}")
    S, M = len(table.slots), len(table)
    if M == 0:
        z = np.zeros(0, dtype=np.int64)
        return VoteResult(table.slots, weighting, table.keys[:0], z, z, z, z.astype(float), z.astype(float),
                          np.zeros(S + 1, dtype=np.int64), np.full(S, np.nan))
    conf = sigmoid(table.q_halt)
    uniq_keys, key_id = np.unique(table.keys, return_inverse=True)
    pair = table.slot * len(uniq_keys) + key_id.reshape(-1)
    pairs, cand = np.unique(pair, return_inverse=True)
    cand = cand.reshape(-1)
    C = len(pairs)
    votes = np.bincount(cand, minlength=C)
    conf_sum = np.bincount(cand, weights=conf, minlength=C)
    mean_q = conf_sum / votes
    score = votes.astype(np.float64) if weighting == "count" else conf_sum
    first = np.full(C, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, cand, table.order)
    cand_slot, cand_key = pairs // len(uniq_keys), pairs % len(uniq_keys)
    # by slot, then score desc, mean confidence desc, first appearance asc
    order = np.lexsort((first, -mean_q, -score, cand_slot))
    cand_slot = cand_slot[order]
    slot_start = np.searchsorted(cand_slot, np.arange(S + 1), side="left").astype(np.int64)
    rank = np.arange(C, dtype=np.int64) - slot_start[cand_slot]
    slot_votes = np.bincount(table.slot, minlength=S)
    with np.errstate(invalid="ignore", divide="ignore"):
        slot_mean_q = np.bincount(table.slot, weights=conf, minlength=S) / slot_votes
    return VoteResult(table.slots, weighting, uniq_keys[cand_key[order]], cand_slot, rank, votes[order],
                      score[order], mean_q[order], slot_start, slot_mean_q)


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------


@dataclass
class Metrics:
    pass_at_k_task_macro: dict[int, float | None]  # upstream's ARC/pass@K (macro over tasks); None: no output
    arc_prize_score: float | None  # micro over test outputs: truth in the top-2 attempts; None: no output to score
    num_tasks: int
    num_test_outputs: int
    truth_rank: dict[Slot, int]  # -1: truth not among the candidates

    @property
    def arc_prize_score_ci95(self) -> tuple[float, float]:
        """95 % Wilson interval of the ARC Prize score; unit: test outputs."""
        solved = sum(1 for r in self.truth_rank.values() if 0 <= r < ATTEMPTS)
        return wilson_interval(solved, self.num_test_outputs)

    @property
    def pass_at_2_ci95(self) -> tuple[float, float] | None:
        """95 % Wilson interval of the task-macro pass@2; unit: tasks (`trm_kaggle.evaluate.stats`); None where no
        pass@2 was computed (ks without 2, or no output)."""
        if self.pass_at_k_task_macro.get(ATTEMPTS) is None:
            return None
        return wilson_interval(self.pass_at_k_task_macro[ATTEMPTS] * self.num_tasks, self.num_tasks)

    def as_dict(self) -> dict:
        return {"arc_prize_score": self.arc_prize_score, "arc_prize_score_ci95": list(self.arc_prize_score_ci95),
                "pass_at_k_task_macro": {str(k): v for k, v in self.pass_at_k_task_macro.items()},
                "pass_at_2_task_macro_ci95": None if self.pass_at_2_ci95 is None else list(self.pass_at_2_ci95),
                "num_tasks": self.num_tasks, "num_test_outputs": self.num_test_outputs}


def pass_at_k_task_macro(ranks: np.ndarray, task_of: np.ndarray, ks: Sequence[int] = PASS_KS
                         ) -> dict[int, float | None]:
    """Mean over tasks of the fraction of the task's test outputs whose truth rank is < K.

    ranks    (T,) truth rank per test output (-1: not found)
    task_of  (T,) task index (0..num_tasks-1) of each test output
    """
    ks = pass_ks(ks)
    ranks, task_of = np.asarray(ranks), np.asarray(task_of, dtype=np.int64)
    if len(ranks) == 0:  # no data is not a score of 0
        return {k: None for k in ks}
    n_tasks = int(task_of.max()) + 1
    per_task = np.bincount(task_of, minlength=n_tasks)
    present = per_task > 0
    out = {}
    for k in ks:
        hit = (ranks >= 0) & (ranks < k)
        frac = np.bincount(task_of, weights=hit, minlength=n_tasks)[present] / per_task[present]
        out[int(k)] = float(frac.mean())
    return out


def arc_prize_score(ranks: np.ndarray, attempts: int = ATTEMPTS) -> float | None:
    """Fraction of all test outputs whose truth is among the first `attempts` candidates; None over no output (no
    data is not a score of 0)."""
    attempts = whole_argument("attempts", attempts, 1, MAX_PASS_K)  # 0 scored every output unsolved
    ranks = np.asarray(ranks)
    if len(ranks) == 0:
        return None
    return float(np.mean((ranks >= 0) & (ranks < attempts)))


def score(result: VoteResult, truths: Mapping[Slot, np.ndarray], ks: Sequence[int] = PASS_KS) -> Metrics:
    """Both metrics over every (task_id, test_index) of `truths` (the test set's answers: a mapping, or a list of
    (slot, grid) pairs as `truth_ranks` takes); over no truth both are None, never 0."""
    if not isinstance(result, VoteResult):
        raise TypeError(f"result: expected a VoteResult (`tally`'s), got {type_name(result)}")
    ks = pass_ks(ks)
    ranks_by_slot = result.truth_ranks(truths)
    slots = list(ranks_by_slot)
    ranks = np.array([ranks_by_slot[s] for s in slots], dtype=np.int64)
    task_ids: dict[str, int] = {}
    task_of = np.array([task_ids.setdefault(t, len(task_ids)) for t, _ in slots], dtype=np.int64)
    return Metrics(pass_at_k_task_macro(ranks, task_of, ks), arc_prize_score(ranks), len(task_ids), len(slots),
                   ranks_by_slot)
