"""The Sudoku solver and the offline generator: candidate bitmasks, naked and hidden singles, depth-first
guesses (`count_solutions`, `solve_sudoku`, `sudoku_rating`, `generate_sudoku`). `sudoku.py` builds the datasets.

Boxes are br rows by bc columns, br the largest divisor of n not above sqrt(n):
4x4 -> 2x2, 6x6 -> 2x3, 9x9 -> 3x3.

Difficulty ("rating") of a generated puzzle: the number of guesses made by a deterministic
depth-first solver that, before every guess, applies naked singles (a cell with one
candidate) and hidden singles (a digit with one place in a row, column or box) until
nothing changes, then branches on the first cell with the fewest candidates, trying its
digits in increasing order, and stops at the first solution. Every trial assignment counts
as one guess, so 0 means "solvable by singles alone" and a wrong first try costs 2 or more.
Sudoku-Extreme's own `rating` column comes from a different solver; the two are not on
the same scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

RATING_DOC = ("guesses made by a depth-first solver applying naked and hidden singles before each guess, "
              "branching on the first cell with fewest candidates, digits in increasing order, "
              "until the first solution (0 = singles suffice)")

# ---------------------------------------------------------------------------
# Board geometry
# ---------------------------------------------------------------------------


def box_shape(n: int) -> tuple[int, int]:
    """(rows, cols) of a box of an n x n sudoku: 4 -> (2, 2), 6 -> (2, 3), 9 -> (3, 3)."""
    br = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    if br < 2:
        raise ValueError(f"a {n}x{n} sudoku has no boxes (n must have a divisor between 2 and sqrt(n))")
    return br, n // br


@dataclass(frozen=True)
class Geometry:
    """Static facts of an n x n board, with cells numbered row by row."""

    n: int
    br: int
    bc: int
    full: int  # bitmask of all digits; digit d is bit d - 1
    units: tuple[tuple[int, ...], ...]  # every row, column and box
    peers: tuple[tuple[int, ...], ...]  # cells sharing a unit with each cell
    cell_units: tuple[tuple[int, int, int], ...]  # (row, column, box) of each cell


@lru_cache(maxsize=None)
def geometry(n: int) -> Geometry:
    br, bc = box_shape(n)
    cell_units = tuple((r, c, (r // br) * br + c // bc) for r in range(n) for c in range(n))
    rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
    cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
    boxes = [tuple(i for i, u in enumerate(cell_units) if u[2] == b) for b in range(n)]
    units = tuple(rows + cols + boxes)
    peers = tuple(
        tuple(sorted((set(rows[r]) | set(cols[c]) | set(boxes[b])) - {i}))
        for i, (r, c, b) in enumerate(cell_units)
    )
    return Geometry(n, br, bc, (1 << n) - 1, units, peers, cell_units)


# ---------------------------------------------------------------------------
# Solver: candidate bitmasks, naked + hidden singles, depth-first guesses
# ---------------------------------------------------------------------------


def _initial_candidates(geo: Geometry, values: list[int]) -> tuple[list[int], list[int]] | None:
    """Candidates of each cell given the givens, and the blank cells already down to one
    candidate (to propagate from); None when two givens clash or a cell has no candidate."""
    n = geo.n
    used = [0] * (3 * n)  # digits used per row, per column (offset n), per box (offset 2n)
    for cell, v in enumerate(values):
        if v:
            r, c, b = geo.cell_units[cell]
            bit = 1 << (v - 1)
            if (used[r] | used[n + c] | used[2 * n + b]) & bit:
                return None
            used[r] |= bit
            used[n + c] |= bit
            used[2 * n + b] |= bit
    cands, singles = [], []
    for cell, v in enumerate(values):
        if v:
            cands.append(1 << (v - 1))
            continue
        r, c, b = geo.cell_units[cell]
        m = geo.full & ~(used[r] | used[n + c] | used[2 * n + b])
        if not m:
            return None
        if not m & (m - 1):
            singles.append(cell)
        cands.append(m)
    return cands, singles


class _Solver:
    """Finds up to `limit` solutions; counts guesses. With `rng`, digits are tried in random order."""

    def __init__(self, geo: Geometry, limit: int, rng: np.random.Generator | None = None):
        self.geo, self.limit, self.rng = geo, limit, rng
        self.guesses = 0
        self.solutions: list[list[int]] = []

    def run(self, cands: list[int], singles: list[int]) -> int:
        self._search(cands, singles)
        return len(self.solutions)

    def _propagate(self, cands: list[int], stack: list[int]) -> bool:
        """Naked and hidden singles to a fixpoint; False on a contradiction.

        `stack` holds cells that became single and whose digit is not yet removed from their peers.
        """
        peers, units, full = self.geo.peers, self.geo.units, self.geo.full
        while True:
            while stack:
                cell = stack.pop()
                bit = cands[cell]
                for p in peers[cell]:
                    m = cands[p]
                    if m & bit:
                        m ^= bit
                        if not m:
                            return False
                        cands[p] = m
                        if not m & (m - 1):
                            stack.append(p)
            for unit in units:
                # digits seen once and at least twice in the unit, in one pass of bit tricks
                once = twice = 0
                for c in unit:
                    m = cands[c]
                    twice |= once & m
                    once |= m
                if once != full:
                    return False  # some digit has no place left in this unit
                hidden = once & ~twice
                if hidden:
                    for c in unit:
                        m = cands[c]
                        h = m & hidden
                        if h and h != m:
                            if h & (h - 1):
                                return False  # two digits that both must go in this one cell
                            cands[c] = h
                            stack.append(c)
            if not stack:
                return True

    def _search(self, cands: list[int], stack: list[int]) -> None:
        if not self._propagate(cands, stack):
            return
        cell, fewest = -1, self.geo.n + 1
        for i, m in enumerate(cands):
            if m & (m - 1):
                k = m.bit_count()
                if k < fewest:
                    cell, fewest = i, k
                    if k == 2:
                        break
        if cell < 0:
            self.solutions.append(cands)
            return
        m, bits = cands[cell], []
        while m:
            bits.append(m & -m)
            m &= m - 1
        if self.rng is not None:
            bits = [bits[i] for i in self.rng.permutation(len(bits))]
        for bit in bits:
            self.guesses += 1
            child = cands.copy()
            child[cell] = bit
            self._search(child, [cell])
            if len(self.solutions) >= self.limit:
                return


def _as_values(puzzle: np.ndarray) -> tuple[Geometry, list[int]]:
    arr = np.asarray(puzzle)
    n = math.isqrt(arr.size)
    if n * n != arr.size or arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape != (n, n)):
        raise ValueError(f"a sudoku is an n x n grid (or n*n cells), got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() > n):
        raise ValueError(f"cell values of a {n}x{n} sudoku are 0 (blank) to {n}")
    return geometry(n), [int(v) for v in arr.ravel()]


def _to_grid(geo: Geometry, cands: list[int]) -> np.ndarray:
    return np.array([m.bit_length() for m in cands], dtype=np.uint8).reshape(geo.n, geo.n)


def count_solutions(puzzle: np.ndarray, limit: int = 2) -> int:
    """Number of solutions of `puzzle` (values 0 = blank, 1..n), counting stops at `limit`."""
    geo, values = _as_values(puzzle)
    start = _initial_candidates(geo, values)
    return 0 if start is None else _Solver(geo, limit).run(*start)


def solve_sudoku(puzzle: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(first solution or None, guesses made): the deterministic solver the rating uses."""
    geo, values = _as_values(puzzle)
    start = _initial_candidates(geo, values)
    if start is None:
        return None, 0
    solver = _Solver(geo, limit=1)
    solver.run(*start)
    return (_to_grid(geo, solver.solutions[0]) if solver.solutions else None), solver.guesses


def sudoku_rating(puzzle: np.ndarray) -> int:
    """Guesses the deterministic singles-then-guess solver needs (see the module docstring)."""
    solution, guesses = solve_sudoku(puzzle)
    if solution is None:
        raise ValueError("the puzzle has no solution")
    return guesses


# ---------------------------------------------------------------------------
# Offline generator
# ---------------------------------------------------------------------------


def _random_full_grid(rng: np.random.Generator, geo: Geometry) -> list[int]:
    """A random complete board: depth-first search from an empty board, digits in random order."""
    solver = _Solver(geo, limit=1, rng=rng)
    solver.run([geo.full] * (geo.n * geo.n), [])
    return [m.bit_length() for m in solver.solutions[0]]


def _has_other_solution(geo: Geometry, values: list[int], cell: int, digit: int) -> bool:
    """Does the puzzle `values` (whose `cell` was just blanked, and which was uniquely solvable
    with `digit` there) have a solution with another digit in `cell`? That is exactly "the
    blanked puzzle is not unique", and searching for one solution is cheaper than counting two."""
    cands, singles = _initial_candidates(geo, values)
    m = cands[cell] & ~(1 << (digit - 1))
    if not m:
        return False  # the cell is forced by its peers: trivially still unique
    cands[cell] = m
    if not m & (m - 1):
        singles.append(cell)
    return _Solver(geo, limit=1).run(cands, singles) > 0


def generate_sudoku(rng: np.random.Generator, size: int = 9) -> tuple[np.ndarray, np.ndarray, int]:
    """A uniquely solvable, minimal puzzle: (puzzle, solution, rating), boards (size, size) uint8.

    A random full board, then every cell in random order is blanked unless that would
    allow a second solution; a cell kept once stays necessary, so the result is minimal.
    """
    geo = geometry(size)
    solution = _random_full_grid(rng, geo)
    values = list(solution)
    for cell in rng.permutation(size * size).tolist():
        digit, values[cell] = values[cell], 0
        if _has_other_solution(geo, values, cell, digit):
            values[cell] = digit
    puzzle = np.array(values, dtype=np.uint8).reshape(size, size)
    return puzzle, np.array(solution, dtype=np.uint8).reshape(size, size), sudoku_rating(puzzle)
