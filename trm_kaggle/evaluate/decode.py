"""Predicted token grids -> un-augmented ARC grids, as fixed-width byte keys for voting.

Token encoding (see `trm_kaggle.data.arc.build`): a grid sits at the top-left of a
side x side canvas (side 30, seq_len 900) as tokens 2..11 (colour + 2), PAD is 0 and
EOS (1) marks the row below and the column right of the grid.

Cropping (upstream's evaluator keeps "the largest top-left rectangle free of PAD/EOS")
is done in two vectorised passes:

1. the fast rule: width w = the run of colour tokens at the start of the first row,
   height h = the run at the start of the first column; the crop is (h, w) when the
   h x w rectangle is all colour tokens (checked with a 2-D prefix sum). Such a
   prediction is *well formed*.
2. otherwise (a PAD/EOS token or an out-of-range token inside the rectangle: the model
   drew a ragged grid) we fall back to upstream's scan: walk down the rows keeping the
   running minimum of each row's leading colour run, and take the (rows, running
   minimum) pair of largest area (the first one on ties). Whenever the fast rule's
   rectangle is all colours the scan gives exactly that rectangle, so every crop here
   equals upstream's crop; `well_formed` only records which rows needed the scan.

A canvas whose first token is not a colour crops to the empty 0 x 0 grid; it stays a
candidate in voting (as upstream), and `keys_to_grids(..., drop_empty=True)` lets a
submission writer skip it.

Un-augmenting: the colour permutation is inverted on the whole canvas at once (one
`take_along_axis`), then examples are grouped by (transform, cropped shape) and each
group is cropped, inverse-transformed and written into the key array as one stacked
array operation. No Python code runs per example.

A key is one `numpy.void` of width 2 + side*side: byte 0 = rows, byte 1 = columns, then
the grid's bytes row-major, zero-padded. Equal keys <=> equal grids (shape included),
so `np.unique` on a key array groups identical predictions without hashing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from trm_kaggle.data import INVERSE_TRANSFORM, dihedral, invert_perm, parse_aug_name
from trm_kaggle.errors import DataError

PAD, EOS, COLOUR0 = 0, 1, 2
NUM_COLOURS = 10
HEADER = 2  # key bytes before the grid: rows, columns


# ---------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------


def key_dtype(side: int = 30) -> np.dtype:
    if not 1 <= side <= 255:
        raise ValueError(f"canvas side must be 1..255 to fit a one-byte shape header, got {side}")
    return np.dtype(f"V{HEADER + side * side}")


def side_of(seq_len: int) -> int:
    side = math.isqrt(int(seq_len))
    if side * side != seq_len:
        raise DataError(f"seq_len {seq_len} is not a square canvas: ARC decoding needs seq_len = side * side")
    return side


def grid_to_key(grid: np.ndarray, side: int = 30) -> np.void:
    """The key of one grid (values 0..9, at most side x side)."""
    dtype = key_dtype(side)  # its "canvas side must be 1..255" first: a side of 300 overflowed the shape header
    grid = np.asarray(grid)
    if grid.ndim != 2 or grid.shape[0] > side or grid.shape[1] > side:
        raise ValueError(f"grid of shape {grid.shape} does not fit a {side}x{side} canvas")
    buf = np.zeros(HEADER + side * side, dtype=np.uint8)
    buf[0], buf[1] = grid.shape
    buf[HEADER:HEADER + grid.size] = grid.astype(np.uint8).ravel()
    return buf.view(dtype)[0]


def grids_to_keys(grids: Sequence[np.ndarray], side: int = 30) -> np.ndarray:
    """Keys of several grids (a small loop: for truths and tests, not for predictions)."""
    out = np.empty(len(grids), dtype=key_dtype(side))
    for i, g in enumerate(grids):
        out[i] = grid_to_key(g, side)
    return out


def key_to_grid(key: np.void | bytes) -> np.ndarray:
    """The grid (uint8, rows x columns) a key stands for."""
    raw = np.frombuffer(key.tobytes() if isinstance(key, np.void) else bytes(key), dtype=np.uint8)
    h, w = int(raw[0]), int(raw[1])
    return raw[HEADER:HEADER + h * w].reshape(h, w).copy()


def keys_to_grids(keys: np.ndarray, drop_empty: bool = False) -> list[np.ndarray]:
    grids = [key_to_grid(k) for k in keys]
    return [g for g in grids if g.size] if drop_empty else grids


def key_shapes(keys: np.ndarray) -> np.ndarray:
    """(N, 2) rows, columns of each key, vectorised."""
    raw = keys.view(np.uint8).reshape(len(keys), -1)
    return raw[:, :HEADER].astype(np.int64)


# ---------------------------------------------------------------------------
# Cropping
# ---------------------------------------------------------------------------


def _leading_run(is_colour: np.ndarray) -> np.ndarray:
    """Length of the leading run of True along the last axis."""
    n = is_colour.shape[-1]
    first_bad = np.argmin(is_colour, axis=-1)  # first False (0 when the first is False or all True)
    return np.where(is_colour.all(axis=-1), n, first_bad)


def crop_sizes(tokens: np.ndarray, side: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(heights, widths, well_formed) of the crop of each canvas in `tokens` (N, side*side).

    See the module docstring for the rule; heights/widths are int64, well_formed bool.
    """
    tokens = np.asarray(tokens)
    side = side_of(tokens.shape[1]) if side is None else side
    canvas = tokens.reshape(len(tokens), side, side)
    colour = (canvas >= COLOUR0) & (canvas < COLOUR0 + NUM_COLOURS)
    w = _leading_run(colour[:, 0, :])
    h = _leading_run(colour[:, :, 0])
    # non-colour cells inside [0:h, 0:w], from a 2-D prefix sum of the non-colour mask
    bad = np.zeros((len(tokens), side + 1, side + 1), dtype=np.int16)
    bad[:, 1:, 1:] = (~colour).cumsum(axis=1, dtype=np.int16).cumsum(axis=2, dtype=np.int16)
    well_formed = bad[np.arange(len(tokens)), h, w] == 0
    ragged = np.flatnonzero(~well_formed)
    if len(ragged):  # upstream's scan, for the malformed rows only
        runs = _leading_run(colour[ragged])  # (n, side): leading run of every row
        cols = np.minimum.accumulate(runs, axis=1)  # running minimum down the rows
        area = cols * np.arange(1, side + 1)
        best = np.argmax(area, axis=1)  # first maximum, as upstream's strict '>'
        has_area = area[np.arange(len(ragged)), best] > 0
        h[ragged] = np.where(has_area, best + 1, 0)
        w[ragged] = np.where(has_area, cols[np.arange(len(ragged)), best], 0)
    return h.astype(np.int64), w.astype(np.int64), well_formed


# ---------------------------------------------------------------------------
# Augmentations of the puzzles
# ---------------------------------------------------------------------------


@dataclass
class PuzzleAugmentations:
    """Per puzzle (of a split): its original task and the augmentation that made it."""

    task_ids: list[str]  # distinct task ids, in order of first appearance
    task_index: np.ndarray  # (P,) int64 index into task_ids
    transform: np.ndarray  # (P,) uint8 dihedral transform id applied to the task
    perm: np.ndarray  # (P, 10) uint8 colour permutation applied (old colour c -> perm[c])

    @property
    def inverse_perm(self) -> np.ndarray:
        return invert_perm(self.perm)


def puzzle_augmentations(names: Sequence[str]) -> PuzzleAugmentations:
    """Parse each puzzle's identifier name once (`parse_aug_name`)."""
    P = len(names)
    task_index = np.empty(P, dtype=np.int64)
    transform = np.empty(P, dtype=np.uint8)
    perm = np.empty((P, NUM_COLOURS), dtype=np.uint8)
    task_ids: list[str] = []
    seen: dict[str, int] = {}
    for p, name in enumerate(names):
        try:
            task, t, pm = parse_aug_name(name)
        except ValueError as e:
            raise DataError(f"puzzle {p}: {e}") from None
        k = seen.get(task)
        if k is None:
            k = seen[task] = len(task_ids)
            task_ids.append(task)
        task_index[p], transform[p], perm[p] = k, t, pm
    return PuzzleAugmentations(task_ids, task_index, transform, perm)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


@dataclass
class Decoded:
    """Un-augmented crops of N canvases."""

    keys: np.ndarray  # (N,) key_dtype(side): shape + bytes of the un-augmented grid
    well_formed: np.ndarray  # (N,) bool: the fast crop rule applied (see module docstring)
    side: int

    def grid(self, i: int) -> np.ndarray:
        return key_to_grid(self.keys[i])

    @property
    def shapes(self) -> np.ndarray:
        return key_shapes(self.keys)


def decode_canvases(tokens: np.ndarray, transform: np.ndarray, inverse_perm: np.ndarray,
                    side: int | None = None, chunk: int = 8192) -> Decoded:
    """Crop every canvas, undo its augmentation, and key it.

    tokens        (N, side*side) token canvases (predictions or labels)
    transform     (N,) dihedral id each canvas was augmented with
    inverse_perm  (N, 10) inverse colour permutation of each canvas
    """
    tokens = np.asarray(tokens)
    N = len(tokens)
    side = side_of(tokens.shape[1]) if side is None else side
    transform = np.asarray(transform, dtype=np.int64)
    inverse_perm = np.asarray(inverse_perm, dtype=np.uint8)
    if transform.shape != (N,) or inverse_perm.shape != (N, NUM_COLOURS):
        raise ValueError(f"need one transform and inverse permutation per canvas: {transform.shape}, "
                         f"{inverse_perm.shape} for {N} canvases")
    raw = np.zeros((N, HEADER + side * side), dtype=np.uint8)
    well_formed = np.empty(N, dtype=bool)
    # chunks bound the temporaries (an index array per token) whatever N is
    for a in range(0, N, chunk):
        b = min(N, a + chunk)
        well_formed[a:b] = _decode_chunk(np.asarray(tokens[a:b]), transform[a:b], inverse_perm[a:b], side, raw[a:b])
    return Decoded(raw.view(key_dtype(side)).reshape(N), well_formed, side)


def _decode_chunk(tokens: np.ndarray, transform: np.ndarray, inverse_perm: np.ndarray, side: int,
                  raw: np.ndarray) -> np.ndarray:
    N = len(tokens)
    h, w, well_formed = crop_sizes(tokens, side)

    # colour: inverse permutation applied on the whole canvas (non-colour cells are cropped away later)
    colours = np.clip(tokens.astype(np.int16) - COLOUR0, 0, NUM_COLOURS - 1).astype(np.intp)
    canvas = np.take_along_axis(inverse_perm, colours, axis=1).reshape(N, side, side)

    inv_t = np.asarray(INVERSE_TRANSFORM, dtype=np.int64)[transform]
    swaps = np.isin(transform, (1, 3, 6, 7))
    raw[:, 0] = np.where(swaps, w, h)  # shape after the inverse transform
    raw[:, 1] = np.where(swaps, h, w)
    group = (inv_t * (side + 1) + h) * (side + 1) + w
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for members in np.split(order, bounds):
        if len(members) == 0:
            continue
        i0 = members[0]
        gh, gw, t = int(h[i0]), int(w[i0]), int(inv_t[i0])
        if gh == 0 or gw == 0:
            continue
        grids = dihedral(canvas[members, :gh, :gw], t)  # (n, H, W)
        raw[members, HEADER:HEADER + gh * gw] = grids.reshape(len(members), -1)
    return well_formed


def example_puzzles(puzzle_indices: np.ndarray, num_examples: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(puzzle of each example, position of the example inside its puzzle), from `puzzle_indices`."""
    pi = np.asarray(puzzle_indices, dtype=np.int64)
    n = int(pi[-1]) if num_examples is None else num_examples
    ex = np.arange(n, dtype=np.int64)
    puzzle = np.searchsorted(pi, ex, side="right") - 1
    return puzzle, ex - pi[puzzle]


def decode_split_tokens(tokens: np.ndarray, puzzle_of_example: np.ndarray, augs: PuzzleAugmentations,
                        side: int | None = None) -> Decoded:
    """`decode_canvases` for canvases of a split, given each one's puzzle (index into `augs`)."""
    puzzle_of_example = np.asarray(puzzle_of_example, dtype=np.int64)
    inv = augs.inverse_perm
    return decode_canvases(tokens, augs.transform[puzzle_of_example], inv[puzzle_of_example], side)
