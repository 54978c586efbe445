"""Maze: generator (unique shortest path, consistent labels), CSV import and the written dataset."""

from __future__ import annotations

import csv
import re
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.config import MazeBuildConfig
from trm_kaggle.data.puzzles import maze
from trm_kaggle.data.augment import dihedral
from trm_kaggle.data.format import load_identifiers, load_split
from trm_kaggle.data.puzzles.maze import CHARSET, build_maze, generate_maze, maze_from_text, maze_to_text
from trm_kaggle.errors import DataError

WALL, OPEN, START, GOAL, PATH = range(5)


def ref_distances(q: np.ndarray, source: tuple[int, int]) -> np.ndarray:
    """Independent BFS over non-wall cells."""
    dist = np.full(q.shape, -1)
    dist[source] = 0
    todo = deque([source])
    while todo:
        r, c = todo.popleft()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < q.shape[0] and 0 <= nc < q.shape[1] and q[nr, nc] != WALL and dist[nr, nc] < 0:
                dist[nr, nc] = dist[r, c] + 1
                todo.append((nr, nc))
    return dist


def ref_count_shortest(q: np.ndarray, s, g) -> int:
    dist = ref_distances(q, s)
    ways = np.zeros(q.shape, dtype=np.int64)
    ways[s] = 1
    for d in range(1, dist[g] + 1):
        for r, c in np.argwhere(dist == d):
            ways[r, c] = sum(ways[nr, nc] for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1))
                             if 0 <= nr < q.shape[0] and 0 <= nc < q.shape[1] and dist[nr, nc] == d - 1)
    return int(ways[g])


def check_maze(q: np.ndarray, a: np.ndarray, length: int | None = None) -> int:
    """Asserts every property a label must have; returns the path length."""
    assert q.shape == a.shape and q.shape[0] == q.shape[1]
    assert (q == START).sum() == 1 and (q == GOAL).sum() == 1 and (q == PATH).sum() == 0
    s, g = tuple(np.argwhere(q == START)[0]), tuple(np.argwhere(q == GOAL)[0])
    from_s, from_g = ref_distances(q, s), ref_distances(q, g)
    d = int(from_s[g])
    assert d > 0, "solvable"
    assert ref_count_shortest(q, s, g) == 1, "unique shortest path"
    # labels: the input, with exactly the inner cells of the shortest path marked
    assert np.array_equal(np.where(a == PATH, OPEN, a), q)
    on_path = np.argwhere(a == PATH)
    assert len(on_path) == d - 1
    assert all(from_s[r, c] + from_g[r, c] == d for r, c in on_path)
    if length is not None:
        assert length == d
    return d


@pytest.mark.parametrize("size", [5, 6, 9, 11, 30])
def test_generated_mazes_have_unique_shortest_path_labels(size):
    rng = np.random.default_rng(size)
    for _ in range(10 if size < 30 else 3):
        q, a, length = generate_maze(rng, size)
        assert q.dtype == np.uint8 and q.shape == (size, size)
        check_maze(q, a, length)
        assert (q[0] == WALL).all() and (q[:, 0] == WALL).all() and (q[-1] == WALL).all()


def test_maze_has_loops_and_far_endpoints():
    rng = np.random.default_rng(0)
    q, a, length = generate_maze(rng, 21)
    open_cells = (q != WALL).sum()
    # a tree on V cells has V - 1 edges; extra openings make more (loops)
    edges = ((q[:, 1:] != WALL) & (q[:, :-1] != WALL)).sum() + ((q[1:] != WALL) & (q[:-1] != WALL)).sum()
    assert edges > open_cells - 1
    s = tuple(np.argwhere(q == START)[0])
    assert length >= 0.75 * ref_distances(q, s).max() - 1


def test_min_path_length_and_determinism():
    q, a, length = generate_maze(np.random.default_rng(1), 11, min_path_length=20)
    assert length >= 20
    q2, a2, _ = generate_maze(np.random.default_rng(1), 11, min_path_length=20)
    assert np.array_equal(q, q2) and np.array_equal(a, a2)
    with pytest.raises(DataError, match="min_path_length"):
        generate_maze(np.random.default_rng(1), 7, min_path_length=100, max_tries=20)


def test_text_round_trip():
    q, a, _ = generate_maze(np.random.default_rng(2), 9)
    drawn = maze_to_text(a)
    assert set(drawn) <= set(CHARSET + "\n") and "o" in drawn
    assert np.array_equal(maze_from_text(drawn), a)


def test_generated_dataset_with_aug(tmp_path):
    out = tmp_path / "m"
    summary = build_maze(MazeBuildConfig(output_dir=str(out), size=9, num_train=6, num_test=3, aug=True,
                                         progress=False))
    assert summary["train"] == {"groups": 6, "puzzles": 48, "examples": 48}
    tr, te = load_split(out, "train"), load_split(out, "test")
    assert tr.inputs.dtype == np.uint8 and tr.inputs.shape == (48, 81)
    assert tr.group_indices.tolist() == list(range(0, 49, 8))  # 8 dihedral copies per group
    assert tr.puzzle_indices.tolist() == list(range(49)) and tr.puzzle_identifiers.tolist() == [0] * 48
    assert te.group_indices.tolist() == [0, 1, 2, 3]  # test split: no augmentation
    for g in range(6):
        base_q = tr.inputs[8 * g].reshape(9, 9)
        base_a = tr.labels[8 * g].reshape(9, 9)
        check_maze(base_q.astype(int) - 1, base_a.astype(int) - 1)
        for t in range(8):
            assert np.array_equal(tr.inputs[8 * g + t].reshape(9, 9), dihedral(base_q, t))
            assert np.array_equal(tr.labels[8 * g + t].reshape(9, 9), dihedral(base_a, t))
    for split in (tr, te):
        m = split.metadata
        assert (m.vocab_size, m.seq_len, m.num_puzzle_identifiers, m.mean_puzzle_examples) == (6, 81, 1, 1.0)
        assert split.inputs.min() >= 1 and split.labels.max() <= 5
    train_mazes = {tr.inputs[8 * g].tobytes() for g in range(6)}
    assert not train_mazes & {row.tobytes() for row in te.inputs}
    assert load_identifiers(out) == ["<blank>"]


# --- CSV import --------------------------------------------------------------------------------


def as_text(grid: np.ndarray) -> str:
    return "".join(CHARSET[v] for v in grid.ravel())


def write_csv(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "q", "a", "rating"])
        w.writerows(rows)


@pytest.fixture(scope="module")
def mazes():
    rng = np.random.default_rng(9)
    return [generate_maze(rng, 9)[:2] for _ in range(8)]


def maze_rows(mazes) -> list[list[str]]:
    return [["gen", as_text(q), as_text(a), "0"] for q, a in mazes]


def test_csv_import_tokens_and_layout(tmp_path, mazes):
    d = tmp_path / "in"
    d.mkdir()
    write_csv(d / "train.csv", maze_rows(mazes[:6]))
    write_csv(d / "test.csv", maze_rows(mazes[6:]))
    out = tmp_path / "out"
    build_maze(MazeBuildConfig(output_dir=str(out), input_dir=str(d), aug=True, progress=False))
    tr, te = load_split(out, "train"), load_split(out, "test")
    assert tr.group_indices.tolist() == list(range(0, 49, 8)) and te.group_indices.tolist() == [0, 1, 2]
    for g, (q, a) in enumerate(mazes[:6]):
        # token = index of the character in "# SGo" + 1
        expected = np.array([CHARSET.index(ch) + 1 for ch in as_text(q)], dtype=np.uint8)
        assert np.array_equal(tr.inputs[8 * g], expected)
        assert np.array_equal(tr.labels[8 * g], a.ravel() + 1)
    assert np.array_equal(te.inputs, np.stack([q.ravel() + 1 for q, _ in mazes[6:]]))


def test_csv_subsample_train_only(tmp_path, mazes):
    d = tmp_path / "in"
    d.mkdir()
    write_csv(d / "train.csv", maze_rows(mazes[:6]))
    write_csv(d / "test.csv", maze_rows(mazes[6:]))
    out = tmp_path / "out"
    build_maze(MazeBuildConfig(output_dir=str(out), input_dir=str(d), subsample_size=3, progress=False))
    tr, te = load_split(out, "train"), load_split(out, "test")
    originals = {(q.ravel() + 1).astype(np.uint8).tobytes() for q, _ in mazes[:6]}
    assert tr.inputs.shape == (3, 81) and len({r.tobytes() for r in tr.inputs} & originals) == 3
    assert te.inputs.shape == (2, 81)


def _replace(s: str, i: int, ch: str) -> str:
    return s[:i] + ch + s[i + 1:]


def bad_cases(mazes):
    q, a = as_text(mazes[0][0]), as_text(mazes[0][1])
    wall = q.index("#", 10)
    open_ = q.index(" ")
    return {
        "columns": (["gen", q, a], "expected 4 columns"),
        "not_square": (["gen", q[:-1], a[:-1]], "80 characters"),
        "charset_q": (["gen", _replace(q, 3, "x"), a], "q has 'x' at position 4"),
        "charset_a": (["gen", q, _replace(a, 3, "*")], "a has '*' at position 4"),
        "wall_differs": (["gen", q, _replace(a, wall, " ")], "disagree"),
        "path_on_wall": (["gen", q, _replace(a, wall, "o")], "disagree"),
        "path_in_input": (["gen", _replace(q, open_, "o"), a], "path mark 'o'"),
    }


@pytest.mark.parametrize("case", ["columns", "not_square", "charset_q", "charset_a", "wall_differs",
                                  "path_on_wall", "path_in_input"])
def test_bad_csv_rows_name_file_and_line(case, tmp_path, mazes):
    row, words = bad_cases(mazes)[case]
    d = tmp_path / "in"
    d.mkdir()
    good = maze_rows(mazes[:2])
    write_csv(d / "train.csv", good + [row + ["0"] if case != "columns" else row])  # bad row on line 4
    write_csv(d / "test.csv", maze_rows(mazes[2:3]))
    out = tmp_path / "out"
    with pytest.raises(DataError) as e:
        build_maze(MazeBuildConfig(output_dir=str(out), input_dir=str(d), progress=False))
    assert "train.csv:4:" in str(e.value) and words in str(e.value)
    assert not out.exists()


def test_first_row_not_square_and_missing_csv(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    write_csv(d / "train.csv", [["gen", "#" * 10, "#" * 10, "0"]])
    write_csv(d / "test.csv", [["gen", "#" * 10, "#" * 10, "0"]])
    with pytest.raises(DataError, match=r"train.csv:2: q has 10 characters, not a square"):
        build_maze(MazeBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    (d / "train.csv").unlink()
    with pytest.raises(DataError, match="train.csv: CSV file not found"):
        build_maze(MazeBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    (d / "train.csv").mkdir()  # there, but a folder: named as what it is, not as missing
    with pytest.raises(DataError, match="train.csv: CSV file expected, found a directory"):
        build_maze(MazeBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))


def test_exception_mid_build_leaves_no_output(tmp_path, monkeypatch):
    real, calls = maze.generate_maze, {"n": 0}

    def flaky(rng, size=30, **kw):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("boom")
        return real(rng, size, **kw)

    monkeypatch.setattr(maze, "generate_maze", flaky)
    out = tmp_path / "never"
    with pytest.raises(RuntimeError, match="boom"):
        build_maze(MazeBuildConfig(output_dir=str(out), size=7, num_train=3, num_test=3, progress=False))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("builder", ["build-maze", "build-sudoku"])
@pytest.mark.parametrize("flags, said", [
    (["--input-dir", "csvs", "--size", "9", "--num-train", "3"], "--size and --num-train set the generator, and "
                                                                  "--input-dir imports CSVs"),
    (["--subsample-size", "2"], "--subsample-size applies to imported CSVs (--input-dir), and none is given"),
])
def test_a_grid_builders_flags_of_the_other_mode_are_refused(tmp_path, capsys, builder, flags, said):
    """`build-maze --input-dir D --size 9 --min-path-length 1000` built D's mazes of side 7 and recorded size 9 in
    build_info.json; `--subsample-size 2` with the generator built all 6 train puzzles. Exit 0 both."""
    from trm_kaggle.cli import main

    out = tmp_path / "out"
    assert main([builder, "--output-dir", str(out), "--no-progress", *flags]) == 2
    assert said in capsys.readouterr().err and not out.exists()
    if builder == "build-maze":
        with pytest.raises(ValueError, match="`min_path_length` sets the generator"):
            MazeBuildConfig(output_dir="o", input_dir="d", min_path_length=3)


@pytest.mark.parametrize("q, a, said", [
    ("#" * 16, "#" * 16, "q has 0 start(s) 'S' and 0 goal(s) 'G'; a maze has one of each"),
    ("#S  G #  ##  ## ", "#S  G #  ##  ## ", "a marks no path from the start 'S' to the goal 'G'"),
    ("#S  #   #   #  G", "#So #   #   #  G", "a marks no path from the start 'S' to the goal 'G'"),  # cut short
    ("#S G#   #   #   ", "#SoG#   #  o#   ", "a's path cell 'o' at row 3, column 4 breaks the path"),  # a cell apart
    ("#S G#   #   #   ", "#SoG# o #   #   ", "a's path cell 'o' at row 1, column 3 breaks the path"),  # a branch
    ("S  G        #   ", "SooG oo  oo #   ", "a's path cell 'o' at row 1, column 2 breaks the path"),  # a block
    ("S  G    #   #   ", "SooGoo  #   #   ", "a's start 'S' at row 1, column 1 breaks the path"),  # a loop
])
def test_a_csv_row_that_is_no_maze_is_refused(tmp_path, q, a, said):
    """A row of walls, or a label whose path does not join the start to the goal, was built as a maze (exit 0); so
    was a label with a path cell apart from the way, a branch, a loop or a block of path cells (a dead end two cells
    wide): a label is one simple path."""
    (tmp_path / "in").mkdir()
    for split in ("train", "test"):
        (tmp_path / "in" / f"{split}.csv").write_text(f"source,q,a,rating\nx,{q},{a},0\n")
    with pytest.raises(DataError, match=re.escape(f"train.csv:2: {said}")):
        build_maze(MazeBuildConfig(input_dir=str(tmp_path / "in"), output_dir=str(tmp_path / "out"), progress=False))
    assert not (tmp_path / "out").exists()
    good_q, good_a = "#S G#   #   #   ", "#SoG#   #   #   "
    for split in ("train", "test"):
        (tmp_path / "in" / f"{split}.csv").write_text(f"source,q,a,rating\nx,{good_q},{good_a},0\n")
    build_maze(MazeBuildConfig(input_dir=str(tmp_path / "in"), output_dir=str(tmp_path / "out"), progress=False))


def test_more_mazes_than_a_size_holds_is_one_error_not_a_hang(tmp_path, monkeypatch):
    """`build-maze --size 6 --num-train 60` spun forever: a 6x6 grid holds some 56 distinct mazes."""
    from trm_kaggle.data.puzzles import maze
    from trm_kaggle.errors import TRMError

    monkeypatch.setattr(maze, "MAX_REPEATS", 500)
    with pytest.raises(TRMError, match="distinct 6x6 mazes"):
        build_maze(MazeBuildConfig(output_dir=str(tmp_path / "m"), size=6, num_train=60, num_test=5))
    assert not (tmp_path / "m").exists()
