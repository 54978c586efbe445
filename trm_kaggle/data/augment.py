"""ARC augmentations: the 8 dihedral transforms and colour permutations, with exact inverses.

Conventions are upstream's, so names written by either builder decode the same way:

* transform ids 0..7 = identity, rot90, rot180, rot270 (numpy `rot90`, counter-clockwise),
  flip left-right, flip up-down, transpose, anti-transpose (flip left-right of rot90);
* a colour permutation `perm` is a length-10 array with perm[0] == 0 (black stays black):
  old colour c becomes perm[c];
* a grid is colour-mapped first, then transformed;
* an augmented puzzle is named `<task_id>|||t<transform>|||<perm digits>`, e.g.
  `007bbfb7|||t3|||0518729436`.
"""

from __future__ import annotations

import numbers
import re

import numpy as np

from trm_kaggle.names import SEPARATOR  # noqa: F401 (defined beside the task-id rule that refuses it in ids)
from trm_kaggle.wording import clipped, type_name

NUM_TRANSFORMS = 8
IDENTITY_PERM = np.arange(10, dtype=np.uint8)
# inverse transform of each id: rotations invert each other, reflections are their own inverse
INVERSE_TRANSFORM = (0, 3, 2, 1, 4, 5, 6, 7)


def dihedral(grid: np.ndarray, t: int) -> np.ndarray:
    """Apply dihedral transform `t` to the last two axes of `grid` (a view: slicing only)."""
    if np.ndim(grid) < 2:  # numpy's AxisError named an axis, not the grid
        raise ValueError(f"dihedral: grid must have two axes (rows, columns), got {np.ndim(grid)}")
    tr = np.swapaxes(grid, -1, -2)
    if t == 0:
        return grid
    if t == 1:  # rot90 counter-clockwise = transpose, then reverse the rows
        return tr[..., ::-1, :]
    if t == 2:
        return grid[..., ::-1, ::-1]
    if t == 3:  # rot270 = transpose, then reverse the columns
        return tr[..., :, ::-1]
    if t == 4:
        return grid[..., :, ::-1]
    if t == 5:
        return grid[..., ::-1, :]
    if t == 6:
        return tr
    if t == 7:  # anti-transpose = flip left-right of rot90
        return tr[..., ::-1, ::-1]
    if isinstance(t, bool) or not isinstance(t, numbers.Integral):  # "1" was said as an id outside 0..7
        raise TypeError(f"dihedral transform id must be a whole number 0..7, got {clipped(t)} ({type_name(t)})")
    raise ValueError(f"dihedral transform id must be 0..7, got {t}")


def inverse_dihedral(grid: np.ndarray, t: int) -> np.ndarray:
    return dihedral(grid, INVERSE_TRANSFORM[t])


def transformed_shape(shape: tuple[int, int], t: int) -> tuple[int, int]:
    """(rows, cols) of a grid of `shape` after transform `t`."""
    return (shape[1], shape[0]) if t in (1, 3, 6, 7) else (shape[0], shape[1])


def invert_perm(perm: np.ndarray) -> np.ndarray:
    """Inverse colour permutation(s); works on a (..., 10) batch. Anything but permutations is refused, named: a
    value repeated or outside 0..n-1 left entries of the inverse unset (whatever memory held) or wrapped around."""
    perm = np.asarray(perm)
    if perm.ndim == 0 or perm.dtype.kind not in "iu" or \
            not (np.sort(perm, axis=-1) == np.arange(perm.shape[-1])).all():
        raise ValueError(f"invert_perm: not a permutation (each of 0..n-1 once along the last axis): "
                         f"{clipped(perm.tolist(), 120)}")
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm.astype(np.intp), np.broadcast_to(np.arange(perm.shape[-1], dtype=perm.dtype), perm.shape), axis=-1)
    return inv


def check_perm(perm: np.ndarray) -> np.ndarray:
    perm = np.asarray(perm, dtype=np.uint8)
    if perm.shape != (10,) or perm[0] != 0 or sorted(perm.tolist()) != list(range(10)):
        raise ValueError(f"not a colour permutation fixing 0: {perm.tolist()}")
    return perm


def augment_grid(grid: np.ndarray, t: int, perm: np.ndarray) -> np.ndarray:
    """Colour-map then transform (upstream's order)."""
    return np.ascontiguousarray(dihedral(np.asarray(perm)[grid], t))


def unaugment_grid(grid: np.ndarray, t: int, perm: np.ndarray) -> np.ndarray:
    """Exact inverse of `augment_grid`."""
    return np.ascontiguousarray(invert_perm(perm)[inverse_dihedral(grid, t)])


def aug_name(task_id: str, t: int, perm: np.ndarray) -> str:
    return f"{task_id}{SEPARATOR}t{int(t)}{SEPARATOR}{''.join(str(int(c)) for c in perm)}"


def parse_aug_name(name: str) -> tuple[str, int, np.ndarray]:
    """`(task_id, transform, perm)` of a puzzle name; an un-augmented name gives (name, 0, identity)."""
    if not isinstance(name, str):  # 5 was "'int' object has no attribute 'split'"
        raise TypeError(f"parse_aug_name: name must be a str, got {clipped(name)} ({type_name(name)})")
    parts = name.split(SEPARATOR)
    if len(parts) == 1:
        return name, 0, IDENTITY_PERM.copy()
    # ASCII digits only: str.isdigit() is true for '²', which int() refuses
    if len(parts) != 3 or not re.fullmatch(r"t[0-9]{1,2}", parts[1]) or not re.fullmatch(r"[0-9]{10}", parts[2]):
        raise ValueError(f"not an augmented puzzle name: {name!r}")
    t = int(parts[1][1:])
    if t >= NUM_TRANSFORMS:
        raise ValueError(f"not an augmented puzzle name: {name!r}")
    return parts[0], t, check_perm(np.frombuffer(parts[2].encode(), dtype=np.uint8) - ord("0"))


def random_augmentations(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` random (transform, perm) pairs: uniform transform, uniform permutation of colours 1..9."""
    transforms = rng.integers(0, NUM_TRANSFORMS, size=n).astype(np.uint8)
    perms = np.zeros((n, 10), dtype=np.uint8)
    perms[:, 1:] = np.argsort(rng.random((n, 9)), axis=1) + 1
    return transforms, perms
