"""Sudoku datasets in upstream's format: import Sudoku-Extreme CSVs, or generate puzzles offline.

Encoding (upstream's): a board of side n is read row by row into n*n cells; a cell value v
(0 = blank, 1..n) is stored as token v + 1 so that token 0 stays PAD. A 9x9 board is
seq_len 81, vocab_size 11. Every puzzle has exactly one example and identifier 0. A group
is one original puzzle followed by its `num_aug` shuffled copies (train split only).

Boxes, the solver and the puzzle generator: `trm_kaggle.data.puzzles.sudoku_solver`. Sudoku-Extreme's
own `rating` column comes from a different solver than `sudoku_rating`; the two are not on the same scale.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from trm_kaggle.config import SudokuBuildConfig
from trm_kaggle.data.format import DatasetWriter, SplitWriter, build_io, builder_config
from trm_kaggle.data.puzzles.grids import (CsvChunk, build_summary, char_lut, csv_inputs, decode_rows,
                                           first_bad_cell, raise_first_problem, read_puzzle_csv, rows_of_length,
                                           select_rows)
from trm_kaggle.data.puzzles.sudoku_solver import RATING_DOC, box_shape, generate_sudoku
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.names import ascii_number
from trm_kaggle.outputs import check_kept
from trm_kaggle.progress import tqdm
from trm_kaggle.wording import clipped

CSV_SIDES = (4, 6, 8, 9)  # sides whose digits fit one character and whose boxes are at least 2 wide


def seq_len_and_vocab(n: int) -> tuple[int, int]:
    """Upstream's numbers generalised: n*n cells, tokens PAD + blank + n digits."""
    return n * n, n + 2


def valid_solutions(grids: np.ndarray) -> np.ndarray:
    """(B,) bool: each (n, n) grid of the batch uses every digit 1..n once per row, column and box."""
    grids = np.asarray(grids)
    b, n = grids.shape[0], grids.shape[-1]
    br, bc = box_shape(n)
    in_range = ((grids >= 1) & (grids <= n)).reshape(b, n * n).all(axis=1)  # b may be 0
    bits = np.left_shift(np.uint32(1), np.clip(grids, 0, n).astype(np.uint32))  # digit d -> bit d
    full = (1 << (n + 1)) - 2  # bits 1..n; a blank (bit 0) can never complete a unit
    boxes = bits.reshape(b, n // br, br, n // bc, bc).transpose(0, 1, 3, 2, 4).reshape(b, n, n)
    ok = in_range.copy()
    for units in (bits, bits.transpose(0, 2, 1), boxes):
        ok &= (np.bitwise_or.reduce(units, axis=2) == full).all(axis=1)
    return ok


def _broken_unit(grid: np.ndarray) -> str:
    """Names the first row, column or box of an invalid solution that misses a digit."""
    n = grid.shape[0]
    br, bc = box_shape(n)
    digits = set(range(1, n + 1))
    for r in range(n):
        if set(grid[r].tolist()) != digits:
            return f"row {r + 1}"
    for c in range(n):
        if set(grid[:, c].tolist()) != digits:
            return f"column {c + 1}"
    for b in range(n):
        r0, c0 = (b // (n // bc)) * br, (b % (n // bc)) * bc
        if set(grid[r0:r0 + br, c0:c0 + bc].ravel().tolist()) != digits:
            return f"box {b + 1}"
    return "no unit"


# ---------------------------------------------------------------------------
# Augmentation (upstream's shuffle, generalised to br x bc boxes)
# ---------------------------------------------------------------------------


@dataclass
class SudokuTransforms:
    """A batch of k validity-preserving shuffles of n x n boards.

    Board b becomes: transposed if `transpose[b]`, then new cell (i, j) = old cell
    (rows[b, i], cols[b, j]), then every digit d -> digits[b, d] (digits[b, 0] = 0).
    """

    digits: np.ndarray  # (k, n + 1)
    transpose: np.ndarray  # (k,) bool
    rows: np.ndarray  # (k, n)
    cols: np.ndarray  # (k, n)


def _block_permutations(rng: np.random.Generator, k: int, n: int, block: int) -> np.ndarray:
    """(k, n) permutations that shuffle the n // block blocks and the lines inside each block."""
    order = np.argsort(rng.random((k, n // block)), axis=1)
    within = np.argsort(rng.random((k, n // block, block)), axis=2)
    return (order[:, :, None] * block + within).reshape(k, n)


def random_transforms(rng: np.random.Generator, k: int, n: int) -> SudokuTransforms:
    br, bc = box_shape(n)
    digits = np.zeros((k, n + 1), dtype=np.int64)
    digits[:, 1:] = np.argsort(rng.random((k, n)), axis=1) + 1
    # transposing swaps the box shape, so it keeps validity only for square boxes
    transpose = rng.random(k) < 0.5 if br == bc else np.zeros(k, dtype=bool)
    return SudokuTransforms(digits, transpose, _block_permutations(rng, k, n, br), _block_permutations(rng, k, n, bc))


def apply_transforms(grids: np.ndarray, t: SudokuTransforms) -> np.ndarray:
    """Apply transform b to grid b of a (k, n, n) batch; returns (k, n, n) uint8."""
    grids = np.asarray(grids)
    k, n = grids.shape[0], grids.shape[-1]
    grids = np.where(t.transpose[:, None, None], grids.transpose(0, 2, 1), grids)
    moved = grids[np.arange(k)[:, None, None], t.rows[:, :, None], t.cols[:, None, :]]
    relabelled = np.take_along_axis(t.digits, moved.reshape(k, n * n).astype(np.intp), axis=1)
    return relabelled.reshape(k, n, n).astype(np.uint8)


def shuffle_sudoku(rng: np.random.Generator, puzzle: np.ndarray, solution: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One random shuffle applied to both the puzzle and its solution (upstream's `shuffle_sudoku`)."""
    puzzle, solution = np.asarray(puzzle), np.asarray(solution)
    t = random_transforms(rng, 1, puzzle.shape[-1])
    return apply_transforms(puzzle[None], t)[0], apply_transforms(solution[None], t)[0]


# ---------------------------------------------------------------------------
# Writing groups
# ---------------------------------------------------------------------------

_MAX_BATCH_BOARDS = 65536  # boards augmented at once: bounds memory however large num_aug is


def write_sudoku_groups(split: SplitWriter, puzzles: np.ndarray, solutions: np.ndarray,
                        num_aug: int, rng: np.random.Generator) -> None:
    """One group per original: the original, then `num_aug` shuffled copies, one example each."""
    n = puzzles.shape[-1]
    per_batch = max(1, _MAX_BATCH_BOARDS // (num_aug + 1))
    for start in range(0, len(puzzles), per_batch):
        q, a = puzzles[start:start + per_batch], solutions[start:start + per_batch]
        b = len(q)
        # (b, 1 + num_aug, n, n): each original followed by its copies, the same shuffle for q and a
        t = random_transforms(rng, b * num_aug, n)
        copies = [apply_transforms(np.repeat(x, num_aug, axis=0), t).reshape(b, num_aug, n, n) for x in (q, a)]
        q, a = (np.concatenate([x[:, None], c], axis=1) for x, c in zip((q, a), copies))
        q_tokens = q.reshape(b, num_aug + 1, n * n) + np.uint8(1)  # value v -> token v + 1
        a_tokens = a.reshape(b, num_aug + 1, n * n) + np.uint8(1)
        for i in range(b):
            for j in range(num_aug + 1):
                split.add_puzzle(q_tokens[i, j], a_tokens[i, j], 0)
            split.end_group()


# ---------------------------------------------------------------------------
# CSV import
# ---------------------------------------------------------------------------


MAX_RATING = 2**63 - 1  # what the int64 rating column holds
RATING_DIGITS = len(str(MAX_RATING))  # a longer run of digits is past it (and is never made an int)


@dataclass
class SudokuRows:
    """Validated rows of a CSV chunk: boards hold values 0 (blank) to n."""

    lines: list[int]
    puzzles: np.ndarray  # (B, n, n) uint8
    solutions: np.ndarray  # (B, n, n) uint8
    ratings: np.ndarray  # (B,) int64


def _q_lut(n: int) -> np.ndarray:
    return char_lut({".": 0, **{str(d): d for d in range(n + 1)}})


def _a_lut(n: int) -> np.ndarray:
    return char_lut({str(d): d for d in range(1, n + 1)})


def parse_sudoku_chunk(path: Path, chunk: CsvChunk, n: int) -> SudokuRows:
    """Validate and decode a chunk; a problem raises DataError naming the first bad line."""
    cells = n * n
    problems: list[tuple[int, str]] = []  # (row in chunk, message); the earliest row is reported
    good = rows_of_length(chunk, cells, f"a {n}x{n} sudoku", problems)
    ratings = np.zeros(good, dtype=np.int64)
    for i, r in enumerate(chunk.rating[:good]):
        # ASCII digits as written: int() also read '٣' (another script's 3), '1_000', ' 5 ' and '+5' as numbers
        value = ascii_number(r, max_digits=RATING_DIGITS) if r == r.strip() else None
        if value is None and not (r.isascii() and r.isdigit()):
            problems.append((i, f"rating {clipped(r)} is not a whole number in ASCII digits 0-9 "
                                "(no sign, blank or separator)"))
            break
        if value is None or value > MAX_RATING:  # a whole number, past what a rating column holds
            problems.append((i, f"rating {clipped(r)} is out of range (a rating is at most {MAX_RATING:,})"))
            break
        ratings[i] = value
    q, a, ok_chars = decode_rows(chunk, good, cells, (_q_lut(n), _a_lut(n)), (f"'.' or 0-{n}", f"1-{n}"), problems)
    clash = first_bad_cell((q != 0) & (q != a) & ok_chars[:, None])
    if clash:
        r, c = clash
        problems.append((r, f"given {q[r, c]} at row {c // n + 1}, column {c % n + 1} differs from "
                            f"the solution's {a[r, c]}"))
    invalid = np.flatnonzero(ok_chars & ~valid_solutions(np.where(a == 255, 0, a).reshape(-1, n, n)))
    if invalid.size:
        r = int(invalid[0])
        problems.append((r, f"a is not a valid sudoku solution ({_broken_unit(a[r].reshape(n, n))} "
                            "does not hold every digit once)"))
    raise_first_problem(path, chunk.lines, problems)
    return SudokuRows(chunk.lines, q.reshape(-1, n, n), a.reshape(-1, n, n), ratings)


def csv_side(path: Path) -> int:
    """Board side of a Sudoku CSV, from the length of its first puzzle."""
    for chunk in read_puzzle_csv(path, chunk_rows=1):
        length = len(chunk.q[0])
        n = math.isqrt(length)
        if n * n != length or n not in CSV_SIDES:
            sizes = ", ".join(str(s * s) for s in CSV_SIDES)
            raise DataError(f"{path}:{chunk.lines[0]}: q has {length} characters, expected one of {sizes} "
                            f"(a {'/'.join(f'{s}x{s}' for s in CSV_SIDES)} sudoku)")
        return n
    raise DataError(f"{path}: no puzzles after the header")


def iter_sudoku_csv(path: Path, n: int, min_difficulty: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Validated chunks of a Sudoku CSV: ((B, 2, n, n) puzzle/solution values, (B,) mask of the
    rows with rating >= min_difficulty)."""
    for chunk in read_puzzle_csv(path):
        rows = parse_sudoku_chunk(path, chunk, n)
        keep = np.ones(len(rows.lines), dtype=bool) if min_difficulty is None else rows.ratings >= min_difficulty
        yield np.stack([rows.puzzles, rows.solutions], axis=1), keep


def _import_split(split: SplitWriter, name: str, path: Path, n: int, cfg: SudokuBuildConfig,
                  rng_sub: np.random.Generator, rng_aug: np.random.Generator) -> dict:
    """Stream one CSV into `split` (filter, train-only subsample and augmentation); returns row counts."""
    num_aug = cfg.num_aug if name == "train" else 0
    subsample = cfg.subsample_size if name == "train" else None
    stats: dict[str, int] = {}
    for boards in select_rows(lambda: iter_sudoku_csv(path, n, cfg.min_difficulty), subsample, rng_sub,
                              stats, desc=f"{name} {path.name}", progress=cfg.progress):
        write_sudoku_groups(split, boards[:, 0], boards[:, 1], num_aug, rng_aug)
    if split.num_puzzles == 0:
        why = f" with rating >= min_difficulty={cfg.min_difficulty}" if cfg.min_difficulty is not None else ""
        raise DataError(f"{path}: no puzzles{why} (read {stats['rows_read']} rows)")
    return {**stats, "puzzles_written": split.num_puzzles}


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------


def _generate_split(split: SplitWriter, name: str, count: int, cfg: SudokuBuildConfig, seen: set[bytes],
                    rng_gen: np.random.Generator, rng_aug: np.random.Generator, bar: tqdm) -> dict:
    """Generate `count` puzzles not in `seen` (and with rating >= min_difficulty) into `split`."""
    num_aug = cfg.num_aug if name == "train" else 0
    batch_q, batch_a, ratings = [], [], []
    attempts = 0
    while len(ratings) < count:
        attempts += 1
        puzzle, solution, rating = generate_sudoku(rng_gen, cfg.size)
        key = puzzle.tobytes()
        if key not in seen and (cfg.min_difficulty is None or rating >= cfg.min_difficulty):
            seen.add(key)
            batch_q.append(puzzle)
            batch_a.append(solution)
            ratings.append(rating)
            bar.update(1)
            if len(batch_q) == 1024:
                write_sudoku_groups(split, np.stack(batch_q), np.stack(batch_a), num_aug, rng_aug)
                batch_q, batch_a = [], []
        elif attempts >= 1000 and len(ratings) * 100 < attempts:
            raise DataError(
                f"after {attempts} generated {cfg.size}x{cfg.size} puzzles only {len(ratings)} were new and had "
                f"rating >= min_difficulty={cfg.min_difficulty}; lower min_difficulty or the number of puzzles")
    if batch_q:
        write_sudoku_groups(split, np.stack(batch_q), np.stack(batch_a), num_aug, rng_aug)
    r = np.array(ratings)
    return {"attempts": attempts, "puzzles": count,
            "rating_mean": float(r.mean()) if count else 0.0, "rating_max": int(r.max()) if count else 0}


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _check_config(cfg: SudokuBuildConfig) -> None:
    if cfg.num_aug < 0:
        raise TRMError(f"num_aug must be >= 0, got {cfg.num_aug}")
    if cfg.subsample_size is not None and cfg.subsample_size < 1:
        raise TRMError(f"subsample_size must be >= 1, got {cfg.subsample_size}")
    if cfg.input_dir is None and (cfg.num_train < 1 or cfg.num_test < 1):
        raise TRMError(f"num_train and num_test must be >= 1, got {cfg.num_train} and {cfg.num_test}")


def build_sudoku(cfg: SudokuBuildConfig) -> dict:
    """Build a Sudoku dataset (CSV import when cfg.input_dir is set, else generation); returns a summary."""
    started = time.monotonic()
    builder_config(cfg, SudokuBuildConfig)
    _check_config(cfg)
    check_kept(*build_io(cfg, flags=False))  # as the command checks it: never built inside its own input
    # independent streams, so that e.g. changing num_aug does not change the subsample
    rng_sub, rng_aug, rng_gen = (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(3))
    if cfg.input_dir is not None:
        paths = csv_inputs(cfg.input_dir)
        n = csv_side(paths["train"])
    else:
        n = cfg.size
    br, bc = box_shape(n)
    seq_len, vocab_size = seq_len_and_vocab(n)
    info = {"builder": "sudoku", "config": cfg.model_dump(), "side": n, "box": [br, bc],
            "encoding": "value v (0 = blank) -> token v + 1; PAD 0"}
    with DatasetWriter(cfg.output_dir, seq_len=seq_len, vocab_size=vocab_size, build_info=info) as writer:
        if cfg.input_dir is not None:
            info["source"] = f"csv:{Path(cfg.input_dir).absolute()}"
            for name in ("train", "test"):
                info[name] = _import_split(getattr(writer, name), name, paths[name], n, cfg, rng_sub, rng_aug)
        else:
            info["source"] = "generator"
            info["generator"] = {"algorithm": "random full board by randomised backtracking; givens removed in "
                                              "random order while the solution stays unique (minimal puzzles)",
                                 "rating": RATING_DOC, "size": n}
            seen: set[bytes] = set()
            with tqdm(total=cfg.num_train + cfg.num_test, desc=f"generate {n}x{n} sudoku",
                      unit=" puzzles", disable=not cfg.progress) as bar:
                for name, count in (("train", cfg.num_train), ("test", cfg.num_test)):
                    info[name] = _generate_split(getattr(writer, name), name, count, cfg, seen, rng_gen, rng_aug, bar)
        writer.build_info = info
    return build_summary(writer, started)
