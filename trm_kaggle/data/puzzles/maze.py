"""Maze datasets in upstream's format: import Maze-Hard CSVs, or generate mazes offline.

A maze is an s x s grid of characters from "# SGo": wall, open, start, goal, and (in the
label only) the cells of the shortest start -> goal path. Here a maze is held as an array
of cell codes, the index of the character in "# SGo", and stored as token code + 1 so that
token 0 stays PAD (upstream: vocab_size 6, seq_len s*s = 900 for Maze-Hard). One example
per puzzle, identifier 0. A group is one maze, or with `aug` its 8 dihedral copies (train
split only), each copy its own puzzle.
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Iterator

import numpy as np

from trm_kaggle.config import MazeBuildConfig
from trm_kaggle.data.augment import NUM_TRANSFORMS, dihedral
from trm_kaggle.data.format import DatasetWriter, SplitWriter, build_io, builder_config
from trm_kaggle.data.puzzles.grids import (CsvChunk, build_summary, char_lut, csv_inputs, decode_rows,
                                           first_bad_cell, raise_first_problem, read_puzzle_csv, rows_of_length,
                                           select_rows)
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.outputs import check_kept
from trm_kaggle.progress import tqdm

CHARSET = "# SGo"
WALL, OPEN, START, GOAL, PATH = range(len(CHARSET))  # cell codes; token = code + 1
VOCAB_SIZE = len(CHARSET) + 1


def maze_to_text(grid: np.ndarray) -> str:
    """Cell codes -> the maze drawn with "# SGo", one line per row."""
    return "\n".join("".join(CHARSET[int(v)] for v in row) for row in np.asarray(grid))


def maze_from_text(text: str) -> np.ndarray:
    """Inverse of `maze_to_text`."""
    lines = text.split("\n")
    return np.array([[CHARSET.index(ch) for ch in line] for line in lines], dtype=np.uint8)


# ---------------------------------------------------------------------------
# Shortest paths
# ---------------------------------------------------------------------------


def _bfs(open_cells: np.ndarray, source: int) -> tuple[np.ndarray, np.ndarray]:
    """Distances from `source` over open cells (flat indices, 4-neighbourhood; -1 = unreachable)
    and the number of shortest paths to each cell, capped at 2 (all we need to know is "unique")."""
    rows, cols = open_cells.shape
    passable = open_cells.ravel().tolist()
    dist = [-1] * len(passable)
    ways = [0] * len(passable)
    dist[source], ways[source] = 0, 1
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        r, c = divmod(cell, cols)
        neighbours = ((cell - cols, r > 0), (cell + cols, r < rows - 1), (cell - 1, c > 0), (cell + 1, c < cols - 1))
        for nb, inside in neighbours:
            if not inside or not passable[nb]:
                continue
            if dist[nb] < 0:
                dist[nb], ways[nb] = dist[cell] + 1, ways[cell]
                queue.append(nb)
            elif dist[nb] == dist[cell] + 1:
                ways[nb] = min(2, ways[nb] + ways[cell])
    return np.array(dist, dtype=np.int64).reshape(rows, cols), np.array(ways, dtype=np.int64).reshape(rows, cols)


def shortest_path(q: np.ndarray) -> tuple[list[tuple[int, int]] | None, int]:
    """(cells of one shortest S -> G path, S and G included, or None if unreachable; number of
    shortest paths capped at 2). q holds cell codes with exactly one START and one GOAL."""
    q = np.asarray(q)
    (sr, sc), (gr, gc) = np.argwhere(q == START)[0], np.argwhere(q == GOAL)[0]
    dist, ways = _bfs(q != WALL, int(sr) * q.shape[1] + int(sc))
    if dist[gr, gc] < 0:
        return None, 0
    path = [(int(gr), int(gc))]
    while dist[path[-1]] > 0:  # walk back along decreasing distance
        r, c = path[-1]
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < q.shape[0] and 0 <= nc < q.shape[1] and dist[nr, nc] == dist[r, c] - 1:
                path.append((nr, nc))
                break
    return path[::-1], int(ways[gr, gc])


# ---------------------------------------------------------------------------
# Offline generator
# ---------------------------------------------------------------------------


def _carve_maze(rng: np.random.Generator, size: int, extra_openings: float) -> np.ndarray:
    """WALL/OPEN codes of a random maze: a depth-first-search spanning tree of the rooms at odd
    coordinates (a perfect maze), then a fraction of the remaining inner walls between two
    rooms knocked down so that the maze has loops, hence many near-shortest alternatives."""
    span = size if size % 2 else size - 1  # the lattice needs an odd side; an even size keeps an extra wall line
    rooms = (span - 1) // 2
    grid = np.full((size, size), WALL, dtype=np.uint8)
    visited = np.zeros((rooms, rooms), dtype=bool)
    start = (int(rng.integers(rooms)), int(rng.integers(rooms)))
    visited[start] = True
    grid[2 * start[0] + 1, 2 * start[1] + 1] = OPEN
    stack = [start]
    while stack:
        i, j = stack[-1]
        options = [(i + di, j + dj) for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1))
                   if 0 <= i + di < rooms and 0 <= j + dj < rooms and not visited[i + di, j + dj]]
        if not options:
            stack.pop()
            continue
        ni, nj = options[int(rng.integers(len(options)))]
        visited[ni, nj] = True
        grid[2 * ni + 1, 2 * nj + 1] = OPEN
        grid[i + ni + 1, j + nj + 1] = OPEN  # the wall cell between the two rooms
        stack.append((ni, nj))
    # walls between two rooms: one coordinate odd, the other even, inside the lattice
    r, c = np.meshgrid(np.arange(1, span - 1), np.arange(1, span - 1), indexing="ij")
    between = ((r % 2) != (c % 2)) & (grid[1:span - 1, 1:span - 1] == WALL)
    candidates = np.argwhere(between) + 1
    k = int(round(extra_openings * len(candidates)))
    for rr, cc in candidates[rng.permutation(len(candidates))[:k]]:
        grid[rr, cc] = OPEN
    return grid


def generate_maze(rng: np.random.Generator, size: int = 30, *, extra_openings: float = 0.1,
                  min_path_length: int | None = None, max_tries: int = 1000) -> tuple[np.ndarray, np.ndarray, int]:
    """(q, a, path_length): a solvable maze whose shortest S -> G path is unique.

    q and a are (size, size) uint8 cell codes (see CHARSET); a marks the path cells between
    S and G with PATH. path_length is the number of moves from S to G, so a has
    path_length - 1 PATH cells. S is a random open cell and G a random open cell in the
    farthest quarter of distances from S and at least `min_path_length` moves away; a maze
    with no such cell, or with several shortest S -> G paths, is drawn again (DataError
    after `max_tries`). `extra_openings` is the fraction of the remaining inner walls
    removed to make loops.
    """
    if size < 5:
        raise TRMError(f"maze size must be >= 5, got {size}")
    for _ in range(max_tries):
        grid = _carve_maze(rng, size, extra_openings)
        open_cells = np.flatnonzero(grid.ravel() == OPEN)
        s = int(open_cells[rng.integers(len(open_cells))])
        dist, ways = _bfs(grid == OPEN, s)
        far = np.flatnonzero(dist.ravel() >= max(1, math.ceil(0.75 * dist.max()), min_path_length or 0))
        if far.size == 0:
            continue  # nothing far enough from this start
        g = int(far[rng.integers(len(far))])
        length = int(dist.ravel()[g])
        if ways.ravel()[g] != 1:
            continue
        q = grid.copy()
        q.ravel()[s], q.ravel()[g] = START, GOAL
        path, _ = shortest_path(q)
        a = q.copy()
        for r, c in path[1:-1]:
            a[r, c] = PATH
        return q, a, length
    raise DataError(f"no {size}x{size} maze with a unique shortest path of length >= {min_path_length} "
                    f"in {max_tries} tries; lower min_path_length")


# ---------------------------------------------------------------------------
# Writing groups
# ---------------------------------------------------------------------------


def write_maze_groups(split: SplitWriter, q: np.ndarray, a: np.ndarray, aug: bool) -> None:
    """One group per maze: the maze alone, or its 8 dihedral copies (augment.dihedral ids 0..7)."""
    transforms = range(NUM_TRANSFORMS) if aug else range(1)
    for qi, ai in zip(q, a):
        for t in transforms:
            split.add_puzzle(dihedral(qi, t) + np.uint8(1), dihedral(ai, t) + np.uint8(1), 0)
        split.end_group()


# ---------------------------------------------------------------------------
# CSV import
# ---------------------------------------------------------------------------

_LUT = char_lut({ch: i for i, ch in enumerate(CHARSET)})


def parse_maze_chunk(path: Path, chunk: CsvChunk, side: int) -> np.ndarray:
    """Validate and decode a chunk into (B, 2, side, side) cell codes (q, a)."""
    cells = side * side
    problems: list[tuple[int, str]] = []
    good = rows_of_length(chunk, cells, f"a {side}x{side} maze", problems)
    allowed = f"one of {CHARSET!r}"
    q, a, ok_chars = decode_rows(chunk, good, cells, (_LUT, _LUT), (allowed, allowed), problems)
    leak = first_bad_cell(q == PATH)
    if leak:
        problems.append((leak[0], f"q has the path mark 'o' at position {leak[1] + 1}; "
                                  "only the label a marks the path"))
    # the label is the input with open cells on the path marked; any other difference is an error
    differ = (q != a) & ~((q == OPEN) & (a == PATH)) & ok_chars[:, None]
    bad = first_bad_cell(differ)
    if bad:
        r, c = bad
        problems.append((r, f"q and a disagree at row {c // side + 1}, column {c % side + 1} "
                            f"(q {CHARSET[q[r, c]]!r}, a {CHARSET[a[r, c]]!r}); only open cells may "
                            "become path cells"))
    problems += _maze_problems(q, a, ok_chars, side)
    raise_first_problem(path, chunk.lines, problems)
    return np.stack([q, a], axis=1).reshape(-1, 2, side, side)


def _maze_problems(q: np.ndarray, a: np.ndarray, ok: np.ndarray, side: int) -> list[tuple[int, str]]:
    """Rows that are no maze: not one start 'S' and one goal 'G', or a label that is not one path from one to the
    other (a row of walls, a path cut in two, a branch or a block of path cells, trained as a maze's answer)."""
    problems = []
    starts, goals = (q == START).sum(axis=1), (q == GOAL).sum(axis=1)
    for r in np.flatnonzero(ok & ((starts != 1) | (goals != 1)))[:1]:
        problems.append((int(r), f"q has {starts[r]} start(s) 'S' and {goals[r]} goal(s) 'G'; a maze has one of each"))
    for r in np.flatnonzero(ok & (starts == 1) & (goals == 1)):
        grid = a[r].reshape(side, side)
        start = divmod(int(np.flatnonzero(q[r] == START)[0]), side)
        seen, todo = {start}, [start]
        while todo:  # the path cells reached from the start, step by step (4 neighbours)
            y, x = todo.pop()
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < side and 0 <= nx < side and (ny, nx) not in seen and grid[ny, nx] in (PATH, GOAL):
                    seen.add((ny, nx))
                    todo.append((ny, nx))
        if not any(grid[y, x] == GOAL for y, x in seen):
            problems.append((int(r), "a marks no path from the start 'S' to the goal 'G' (path cells 'o' joined "
                                     "step by step)"))
            break
        off = _off_path_cell(grid, seen)
        if off:
            (y, x), what = off
            problems.append((int(r), f"a's {what} at row {y + 1}, column {x + 1} breaks the path: a label is one "
                                     "path from 'S' to 'G', each path cell 'o' joined to the cells before and after "
                                     "it only (a cell apart, a branch, a loop or a block of path cells is none)"))
            break
    return problems


def _off_path_cell(grid: np.ndarray, joined: set[tuple[int, int]]) -> tuple[tuple[int, int], str] | None:
    """The first cell that keeps the label from being one simple path S -> G, and what it is; None when it is one.
    On such a path each path cell 'o' has exactly two neighbours on the way (S, G or 'o') and S and G one each;
    with every 'o' reached from S, nothing else fits (a shortest path always does: a shortcut would shorten it)."""
    side = grid.shape[0]
    on_way = (grid == PATH) | (grid == START) | (grid == GOAL)
    for y, x in np.argwhere(on_way):
        y, x = int(y), int(x)
        sides = sum(1 for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1))
                    if 0 <= ny < side and 0 <= nx < side and on_way[ny, nx])
        code = grid[y, x]
        if code == PATH and ((y, x) not in joined or sides != 2):
            return (y, x), "path cell 'o'"
        if code != PATH and sides != 1:
            return (y, x), "start 'S'" if code == START else "goal 'G'"
    return None


def csv_side(path: Path) -> int:
    """Maze side from the length of the first maze (it must be a square)."""
    for chunk in read_puzzle_csv(path, chunk_rows=1):
        length = len(chunk.q[0])
        side = math.isqrt(length)
        if side * side != length or side == 0:
            raise DataError(f"{path}:{chunk.lines[0]}: q has {length} characters, not a square grid")
        return side
    raise DataError(f"{path}: no mazes after the header")


def iter_maze_csv(path: Path, side: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for chunk in read_puzzle_csv(path):
        rows = parse_maze_chunk(path, chunk, side)
        yield rows, np.ones(len(rows), dtype=bool)


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


MAX_REPEATS = 10_000  # draws in a row that repeat a maze already made, before the size is called exhausted


def _generate_split(split: SplitWriter, name: str, count: int, cfg: MazeBuildConfig, seen: set[bytes],
                    rng: np.random.Generator, bar: tqdm) -> dict:
    lengths, repeats = [], 0
    while len(lengths) < count:
        q, a, length = generate_maze(rng, cfg.size, min_path_length=cfg.min_path_length)
        if q.tobytes() in seen:  # keeps test mazes out of train (and duplicates out of both)
            repeats += 1
            if repeats > MAX_REPEATS:  # a small size has few distinct mazes: asking for more once spun forever
                raise TRMError(f"only {len(seen)} distinct {cfg.size}x{cfg.size} mazes came up in {MAX_REPEATS:,} "
                               f"tries after the last new one, short of the {name} split's {count}: ask for fewer "
                               "mazes (--num-train, --num-test) or a larger --size")
            continue
        repeats = 0
        seen.add(q.tobytes())
        write_maze_groups(split, q[None], a[None], cfg.aug and name == "train")
        lengths.append(length)
        bar.update(1)
    return {"mazes": count, "path_length_mean": float(np.mean(lengths)), "path_length_min": int(min(lengths))}


def build_maze(cfg: MazeBuildConfig) -> dict:
    """Build a Maze dataset (CSV import when cfg.input_dir is set, else generation); returns a summary."""
    started = time.monotonic()
    builder_config(cfg, MazeBuildConfig)
    check_kept(*build_io(cfg, flags=False))  # as the command checks it: never built inside its own input
    if cfg.subsample_size is not None and cfg.subsample_size < 1:
        raise TRMError(f"subsample_size must be >= 1, got {cfg.subsample_size}")
    if cfg.input_dir is None and (cfg.num_train < 1 or cfg.num_test < 1):
        raise TRMError(f"num_train and num_test must be >= 1, got {cfg.num_train} and {cfg.num_test}")
    rng_sub, rng_gen = (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(2))
    if cfg.input_dir is not None:
        paths = csv_inputs(cfg.input_dir)
        side = csv_side(paths["train"])
    else:
        if cfg.size < 5:
            raise TRMError(f"maze size must be >= 5, got {cfg.size}")
        side = cfg.size
    info = {"builder": "maze", "config": cfg.model_dump(), "side": side, "charset": CHARSET,
            "encoding": "token = index in charset + 1; PAD 0"}
    with DatasetWriter(cfg.output_dir, seq_len=side * side, vocab_size=VOCAB_SIZE, build_info=info) as writer:
        if cfg.input_dir is not None:
            info["source"] = f"csv:{Path(cfg.input_dir).absolute()}"
            for name in ("train", "test"):
                split, path, stats = getattr(writer, name), paths[name], {}
                subsample = cfg.subsample_size if name == "train" else None
                for rows in select_rows(lambda: iter_maze_csv(path, side), subsample, rng_sub, stats,
                                        desc=f"{name} {path.name}", progress=cfg.progress):
                    write_maze_groups(split, rows[:, 0], rows[:, 1], cfg.aug and name == "train")
                if split.num_puzzles == 0:
                    raise DataError(f"{path}: no mazes after the header")
                info[name] = stats
        else:
            info["source"] = "generator"
            info["generator"] = {"algorithm": "depth-first-search maze on the odd lattice, 10% of the remaining "
                                              "inner walls removed for loops; S random, G in the farthest quarter; "
                                              "mazes with several shortest paths rejected", "size": side}
            seen: set[bytes] = set()
            with tqdm(total=cfg.num_train + cfg.num_test, desc=f"generate {side}x{side} mazes",
                      unit=" mazes", disable=not cfg.progress) as bar:
                for name, count in (("train", cfg.num_train), ("test", cfg.num_test)):
                    info[name] = _generate_split(getattr(writer, name), name, count, cfg, seen, rng_gen, bar)
        writer.build_info = info
    return build_summary(writer, started)
