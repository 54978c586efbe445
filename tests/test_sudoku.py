"""Sudoku: solver, generator, augmentation, CSV import and the written dataset."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.config import SudokuBuildConfig
from trm_kaggle.data.puzzles import sudoku
from trm_kaggle.data.format import load_identifiers, load_split
from trm_kaggle.data.puzzles.sudoku import (apply_transforms, build_sudoku, random_transforms, seq_len_and_vocab,
                                           shuffle_sudoku, valid_solutions)
from trm_kaggle.data.puzzles.sudoku_solver import box_shape, count_solutions, generate_sudoku, solve_sudoku, sudoku_rating
from trm_kaggle.errors import DataError

# Arto Inkala's "world's hardest sudoku" and its solution: needs guesses
HARD = "800000000003600000070090200050007000000045700000100030001000068008500010090000400"
HARD_SOLUTION = "812753649943682175675491283154237896369845721287169534521974368438526917796318452"


def board(s: str) -> np.ndarray:
    n = int(len(s) ** 0.5)
    return np.array([0 if ch == "." else int(ch) for ch in s], dtype=np.uint8).reshape(n, n)


def text(b: np.ndarray, blank: str = ".") -> str:
    return "".join(blank if v == 0 else str(v) for v in b.ravel())


# --- an independent reference: plain backtracking on sets, no bitmasks, no singles ---------


def ref_valid(grid: np.ndarray) -> bool:
    n = grid.shape[0]
    br, bc = box_shape(n)
    want = set(range(1, n + 1))
    units = [grid[r] for r in range(n)] + [grid[:, c] for c in range(n)]
    units += [grid[r:r + br, c:c + bc].ravel() for r in range(0, n, br) for c in range(0, n, bc)]
    return all(set(u.tolist()) == want for u in units)


def ref_count(puzzle: np.ndarray, limit: int = 2) -> int:
    g = puzzle.astype(int).copy()
    n = g.shape[0]
    br, bc = box_shape(n)

    def options(r: int, c: int) -> set[int]:
        r0, c0 = r - r % br, c - c % bc
        used = set(g[r]) | set(g[:, c]) | set(g[r0:r0 + br, c0:c0 + bc].ravel())
        return set(range(1, n + 1)) - used

    def rec() -> int:
        blanks = [(len(options(r, c)), r, c) for r in range(n) for c in range(n) if g[r, c] == 0]
        if not blanks:
            return 1
        _, r, c = min(blanks)
        found = 0
        for v in sorted(options(r, c)):
            g[r, c] = v
            found += rec()
            g[r, c] = 0
            if found >= limit:
                break
        return found

    return rec()


# --- geometry and solver ---------------------------------------------------------------------


def test_box_shapes_and_upstream_numbers():
    assert box_shape(4) == (2, 2) and box_shape(6) == (2, 3) and box_shape(9) == (3, 3)
    assert seq_len_and_vocab(9) == (81, 11)  # upstream's exact numbers
    assert seq_len_and_vocab(4) == (16, 6)
    with pytest.raises(ValueError):
        box_shape(5)


def test_solver_on_known_hard_puzzle():
    solution, guesses = solve_sudoku(board(HARD))
    assert text(solution) == HARD_SOLUTION
    assert guesses > 0 and sudoku_rating(board(HARD)) == guesses
    assert count_solutions(board(HARD)) == 1


def test_rating_zero_when_singles_suffice():
    p = board(HARD_SOLUTION)
    p[0, 0] = p[4, 4] = p[8, 8] = 0
    assert sudoku_rating(p) == 0


def test_count_solutions_counts_and_detects_clashes():
    assert count_solutions(np.zeros((4, 4), dtype=np.uint8), limit=1000) == 288  # all 4x4 sudokus
    clash = np.zeros((4, 4), dtype=np.uint8)
    clash[0, 0] = clash[0, 3] = 1
    assert count_solutions(clash) == 0
    assert count_solutions(np.zeros((9, 9), dtype=np.uint8)) == 2  # stops at the limit
    assert count_solutions(np.zeros((6, 6), dtype=np.uint8), limit=5) == 5


@pytest.mark.parametrize("size,count", [(4, 15), (6, 8), (9, 3)])
def test_generated_puzzles_are_unique_minimal_and_valid(size, count):
    rng = np.random.default_rng(size)
    for _ in range(count):
        puzzle, solution, rating = generate_sudoku(rng, size)
        assert puzzle.shape == solution.shape == (size, size)
        assert ref_valid(solution)
        assert ((puzzle == 0) | (puzzle == solution)).all()
        assert ref_count(puzzle) == 1
        assert isinstance(rating, int) and rating == sudoku_rating(puzzle) >= 0
        assert (puzzle == 0).sum() > size  # givens were removed
        if size < 9:  # minimal: every given is needed
            for r, c in np.argwhere(puzzle > 0):
                fewer = puzzle.copy()
                fewer[r, c] = 0
                assert ref_count(fewer) >= 2


def test_generator_is_deterministic_for_a_seed():
    a = generate_sudoku(np.random.default_rng(7), 6)
    b = generate_sudoku(np.random.default_rng(7), 6)
    c = generate_sudoku(np.random.default_rng(8), 6)
    assert all(np.array_equal(x, y) for x, y in zip(a[:2], b[:2])) and a[2] == b[2]
    assert not np.array_equal(a[0], c[0])


# --- augmentation -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [4, 6, 9])
def test_augmentation_keeps_validity(size):
    rng = np.random.default_rng(0)
    puzzle, solution, _ = generate_sudoku(rng, size)
    k = 200
    t = random_transforms(np.random.default_rng(1), k, size)
    q = apply_transforms(np.repeat(puzzle[None], k, axis=0), t)
    a = apply_transforms(np.repeat(solution[None], k, axis=0), t)
    assert valid_solutions(a).all()
    assert all(ref_valid(x) for x in a[:20])
    assert ((q == 0) | (q == a)).all()
    assert ((q == 0).sum(axis=(1, 2)) == (puzzle == 0).sum()).all()  # blanks stay blanks
    assert count_solutions(q[0]) == 1
    assert len({x.tobytes() for x in a}) > k // 2  # it really shuffles
    if size == 6:  # 2x3 boxes: a transpose would break validity, so it is never drawn
        assert not t.transpose.any()
    else:
        assert t.transpose.any() and not t.transpose.all()


def test_augmentation_is_deterministic_and_matches_definition():
    puzzle, solution, _ = generate_sudoku(np.random.default_rng(3), 9)
    q1, a1 = shuffle_sudoku(np.random.default_rng(5), puzzle, solution)
    q2, a2 = shuffle_sudoku(np.random.default_rng(5), puzzle, solution)
    assert np.array_equal(q1, q2) and np.array_equal(a1, a2)
    t = random_transforms(np.random.default_rng(11), 1, 9)
    src = solution.T if t.transpose[0] else solution
    expected = t.digits[0][src[np.ix_(t.rows[0], t.cols[0])]]
    assert np.array_equal(apply_transforms(solution[None], t)[0], expected)
    assert t.digits[0, 0] == 0 and sorted(t.digits[0, 1:]) == list(range(1, 10))
    # bands move whole: the rows of each new band come from one old band
    assert all(len(set(t.rows[0, b:b + 3] // 3)) == 1 for b in (0, 3, 6))
    assert all(len(set(t.cols[0, b:b + 3] // 3)) == 1 for b in (0, 3, 6))


def test_valid_solutions_rejects_bad_grids():
    good = board(HARD_SOLUTION)
    swapped = good.copy()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]  # rows fine, columns broken
    blank = good.copy()
    blank[3, 3] = 0
    assert valid_solutions(np.stack([good, swapped, blank])).tolist() == [True, False, False]


# --- CSV import --------------------------------------------------------------------------------


def make_rows(num: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Distinct 9x9 puzzles cheaply: shuffles of two generated ones, ratings 0..num-1."""
    rng = np.random.default_rng(seed)
    bases = [generate_sudoku(rng, 9)[:2] for _ in range(2)]
    rows = []
    for i in range(num):
        q, a = shuffle_sudoku(rng, *bases[i % 2])
        rows.append((q, a, i))
    return rows


def write_csv(path: Path, rows, blank: str = ".") -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "q", "a", "rating"])
        for q, a, rating in rows:
            w.writerow(["gen", text(q, blank), text(a), rating])


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory) -> tuple[Path, list, list]:
    d = tmp_path_factory.mktemp("sudoku_csv")
    train, test = make_rows(10, seed=1), make_rows(4, seed=2)
    write_csv(d / "train.csv", train)
    write_csv(d / "test.csv", test, blank="0")  # '0' is a blank too
    return d, train, test


def tokens(b: np.ndarray) -> np.ndarray:
    return (b.ravel() + 1).astype(np.uint8)


def test_csv_import_layout_filter_and_augmentation(csv_dir, tmp_path):
    d, train, test = csv_dir
    out = tmp_path / "ds"
    summary = build_sudoku(SudokuBuildConfig(output_dir=str(out), input_dir=str(d), min_difficulty=3,
                                             num_aug=2, progress=False))
    kept = [r for r in train if r[2] >= 3]  # ratings 3..9: 7 rows, in file order
    tr, te = load_split(out, "train"), load_split(out, "test")
    assert summary["train"] == {"groups": 7, "puzzles": 21, "examples": 21}
    assert tr.inputs.dtype == np.uint8 and tr.labels.dtype == np.uint8 and tr.inputs.shape == (21, 81)
    # upstream layout: one group per original = original + num_aug copies, one example per puzzle
    assert tr.group_indices.tolist() == list(range(0, 22, 3))
    assert tr.puzzle_indices.tolist() == list(range(22))
    assert tr.puzzle_identifiers.tolist() == [0] * 21
    for g, (q, a, _) in enumerate(kept):
        assert np.array_equal(tr.inputs[3 * g], tokens(q)) and np.array_equal(tr.labels[3 * g], tokens(a))
        for j in (1, 2):
            qa, aa = tr.inputs[3 * g + j].astype(int) - 1, tr.labels[3 * g + j].astype(int) - 1
            assert ref_valid(aa.reshape(9, 9)) and ((qa == 0) | (qa == aa)).all()
            assert (qa == 0).sum() == (q == 0).sum()
    # the test split: filtered too (as upstream), never augmented; '0' blanks read as blanks
    test_kept = [r for r in test if r[2] >= 3]
    assert len(test_kept) == 1 and te.group_indices.tolist() == [0, 1] and te.inputs.shape == (1, 81)
    assert np.array_equal(te.inputs[0], tokens(test_kept[0][0]))
    assert np.array_equal(te.labels[0], tokens(test_kept[0][1]))
    for split, puzzles in ((tr, 21), (te, len(test_kept))):
        m = split.metadata
        assert (m.vocab_size, m.seq_len, m.pad_id, m.ignore_label_id) == (11, 81, 0, 0)
        assert m.total_puzzles == puzzles and m.mean_puzzle_examples == 1.0 and m.num_puzzle_identifiers == 1
        assert m.total_groups == len(split.group_indices) - 1
    assert load_identifiers(out) == ["<blank>"]
    info = json.loads((out / "build_info.json").read_text())
    assert info["config"]["min_difficulty"] == 3 and info["train"]["rows_kept"] == 7


def test_csv_subsample_train_only_and_seeded(csv_dir, tmp_path):
    d, train, test = csv_dir

    def build(name: str, seed: int):
        out = tmp_path / name
        build_sudoku(SudokuBuildConfig(output_dir=str(out), input_dir=str(d), subsample_size=4, seed=seed,
                                       progress=False))
        return load_split(out, "train"), load_split(out, "test")

    tr, te = build("a", 1)
    assert tr.inputs.shape == (4, 81) and tr.group_indices.tolist() == [0, 1, 2, 3, 4]
    originals = {tokens(q).tobytes() for q, _, _ in train}
    assert len({row.tobytes() for row in tr.inputs}) == 4 and all(row.tobytes() in originals for row in tr.inputs)
    assert te.inputs.shape == (len(test), 81)  # test is never subsampled
    tr2, _ = build("b", 1)
    tr3, _ = build("c", 2)
    assert np.array_equal(tr.inputs, tr2.inputs)
    assert not np.array_equal(tr.inputs, tr3.inputs)


def test_csv_subsample_not_smaller_keeps_file_order(csv_dir, tmp_path):
    d, train, _ = csv_dir
    out = tmp_path / "all"
    build_sudoku(SudokuBuildConfig(output_dir=str(out), input_dir=str(d), subsample_size=50, progress=False))
    tr = load_split(out, "train")
    assert np.array_equal(tr.inputs, np.stack([tokens(q) for q, _, _ in train]))


def test_a_csv_with_a_byte_order_mark_imports_as_without(csv_dir, tmp_path):
    """A CSV saved by a spreadsheet starts with U+FEFF: its header read "\ufeffsource" and was refused (pandas,
    upstream's reader, and our JSON reader take it)."""
    import shutil

    d, _, _ = csv_dir
    marked = tmp_path / "marked"
    shutil.copytree(d, marked)
    for name in ("train.csv", "test.csv"):
        (marked / name).write_bytes(b"\xef\xbb\xbf" + (d / name).read_bytes())
    for src, out in ((d, "plain-ds"), (marked, "marked-ds")):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / out), input_dir=str(src), progress=False))
    a, b = load_split(tmp_path / "plain-ds", "train"), load_split(tmp_path / "marked-ds", "train")
    assert np.array_equal(a.inputs, b.inputs) and np.array_equal(a.labels, b.labels)


def test_csv_import_streams_in_chunks(csv_dir, tmp_path, monkeypatch):
    """Chunk boundaries (tiny chunks here) change nothing."""
    d, _, _ = csv_dir
    cfg = dict(input_dir=str(d), num_aug=1, subsample_size=6, min_difficulty=1, progress=False)
    build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "big"), **cfg))
    real = sudoku.read_puzzle_csv
    monkeypatch.setattr(sudoku, "read_puzzle_csv", lambda path, chunk_rows=0: real(path, chunk_rows=3))
    build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "small"), **cfg))
    a, b = load_split(tmp_path / "big", "train"), load_split(tmp_path / "small", "train")
    assert np.array_equal(a.inputs, b.inputs) and np.array_equal(a.labels, b.labels)


GOOD_Q = text(board(HARD))
GOOD_A = HARD_SOLUTION


def _bad(q=GOOD_Q, a=GOOD_A, rating="3", extra=None):
    row = ["src", q, a, rating]
    return row + extra if extra else row


def _swap(s: str, i: int, j: int) -> str:
    chars = list(s)
    chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)


BAD_ROWS = {
    "columns": (_bad(extra=["x"]), "columns"),
    "q_length": (_bad(q=GOOD_Q[:-1]), "80 characters"),
    "a_length": (_bad(a=GOOD_A + "1"), "82 characters"),
    "q_char": (_bad(q="x" + GOOD_Q[1:]), "'x' at position 1"),
    "a_char": (_bad(a=GOOD_A[:5] + "." + GOOD_A[6:]), "'.' at position 6"),
    "a_zero": (_bad(a="0" + GOOD_A[1:]), "'0' at position 1"),
    "clash": (_bad(q="9" + GOOD_Q[1:]), "differs from the solution"),
    "invalid_solution": (_bad(q="." * 81, a=_swap(GOOD_A, 0, 1)), "not a valid sudoku solution"),
    "rating": (_bad(rating="hard"), "rating 'hard'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_csv_rows_name_file_and_line(case, tmp_path):
    row, words = BAD_ROWS[case]
    d = tmp_path / "in"
    d.mkdir()
    with open(d / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "q", "a", "rating"])
        w.writerow(_bad())
        w.writerow(_bad())
        w.writerow(row)  # line 4
        w.writerow(_bad(q="y" * 81))  # a later error must not be the one reported
    write_csv(d / "test.csv", make_rows(1))
    out = tmp_path / "out"
    with pytest.raises(DataError) as e:
        build_sudoku(SudokuBuildConfig(output_dir=str(out), input_dir=str(d), progress=False))
    assert "train.csv:4:" in str(e.value) and words in str(e.value)
    assert not out.exists() and not list(tmp_path.glob("out.partial-*"))


@pytest.mark.parametrize("bad_line", [2, 5, 600])
@pytest.mark.parametrize("problem", ["not UTF-8", "a field past the CSV limit"])
def test_an_unreadable_csv_line_is_named_where_it_is(tmp_path, problem, bad_line):
    """A byte that is not UTF-8 was blamed on line 1 (anywhere in the first 8 KiB: the text layer decodes ahead of
    the CSV reader) or on the line the reader had reached; a field past the csv module's limit on the line after."""
    d = tmp_path / "in"
    d.mkdir()
    good = ",".join(_bad()).encode() + b"\n"
    bad = (b"s\xe9," + ",".join(_bad()[1:]).encode() if problem == "not UTF-8"
           else b"s," + b"1" * 200_000 + b"," + ",".join(_bad()[2:]).encode())
    (d / "train.csv").write_bytes(b"source,q,a,rating\n" + good * (bad_line - 2) + bad + b"\n" + good)
    write_csv(d / "test.csv", make_rows(1))
    with pytest.raises(DataError) as e:
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "out"), input_dir=str(d), progress=False))
    assert f"train.csv:{bad_line}: unreadable CSV" in str(e.value), str(e.value)
    if problem == "not UTF-8":
        assert "byte 0xe9 at column 2" in str(e.value), str(e.value)


def test_bad_header_missing_file_and_empty_filter(tmp_path, csv_dir):
    d = tmp_path / "in"
    d.mkdir()
    (d / "train.csv").write_text("q,a\n" + GOOD_Q + "," + GOOD_A + "\n")
    write_csv(d / "test.csv", make_rows(1))
    with pytest.raises(DataError, match="train.csv:1: header"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    (d / "test.csv").unlink()
    with pytest.raises(DataError, match=r"test.csv: CSV file not found \(input_dir must hold train.csv and test.csv"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    (d / "test.csv").mkdir()  # there, but a folder: named as what it is, not as missing
    with pytest.raises(DataError, match="test.csv: CSV file expected, found a directory"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    src, _, _ = csv_dir
    with pytest.raises(DataError, match="no puzzles with rating >= min_difficulty=1000"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(src), min_difficulty=1000,
                                       progress=False))
    assert not (tmp_path / "o").exists()


# --- generation builds ------------------------------------------------------------------------


def test_generated_dataset_4x4(tmp_path):
    cfg = dict(size=4, num_train=30, num_test=10, num_aug=2, seed=5, progress=False)
    summary = build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "a"), **cfg))
    assert summary["train"] == {"groups": 30, "puzzles": 90, "examples": 90}
    assert summary["test"] == {"groups": 10, "puzzles": 10, "examples": 10}
    tr, te = load_split(tmp_path / "a", "train"), load_split(tmp_path / "a", "test")
    assert tr.inputs.shape == (90, 16) and tr.inputs.dtype == np.uint8
    assert (tr.metadata.vocab_size, tr.metadata.seq_len, tr.metadata.num_puzzle_identifiers) == (6, 16, 1)
    assert tr.group_indices.tolist() == list(range(0, 91, 3))
    assert tr.inputs.min() >= 1 and tr.inputs.max() <= 5 and tr.labels.min() >= 2
    for q, a in zip(np.concatenate([tr.inputs, te.inputs]), np.concatenate([tr.labels, te.labels])):
        q, a = q.astype(int).reshape(4, 4) - 1, a.astype(int).reshape(4, 4) - 1
        assert ref_valid(a) and ((q == 0) | (q == a)).all() and count_solutions(q) == 1
    train_originals = {row.tobytes() for row in tr.inputs[tr.group_indices[:-1]]}
    assert len(train_originals) == 30
    assert not train_originals & {row.tobytes() for row in te.inputs}  # test puzzles are new
    build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "b"), **cfg))
    again = load_split(tmp_path / "b", "train")
    assert np.array_equal(tr.inputs, again.inputs) and np.array_equal(tr.labels, again.labels)


def test_generated_9x9_with_min_difficulty(tmp_path):
    build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "d"), num_train=3, num_test=2, min_difficulty=2,
                                   progress=False))
    for split in ("train", "test"):
        s = load_split(tmp_path / "d", split)
        assert s.metadata.seq_len == 81 and s.metadata.vocab_size == 11
        for q in s.inputs:
            assert sudoku_rating(q.astype(int).reshape(9, 9) - 1) >= 2


def test_impossible_min_difficulty_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="min_difficulty=1"):  # 4x4 puzzles never need a guess
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "x"), size=4, num_train=5, num_test=1,
                                       min_difficulty=1, progress=False))
    assert not (tmp_path / "x").exists()


def test_exception_mid_build_leaves_no_output(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = sudoku.generate_sudoku

    def flaky(rng, size=9):
        calls["n"] += 1
        if calls["n"] == 20:
            raise RuntimeError("boom")
        return real(rng, size)

    monkeypatch.setattr(sudoku, "generate_sudoku", flaky)
    out = tmp_path / "never"
    with pytest.raises(RuntimeError, match="boom"):
        build_sudoku(SudokuBuildConfig(output_dir=str(out), size=4, num_train=10, num_test=30, progress=False))
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_test_split_of_another_side_and_a_huge_rating_are_one_short_line(tmp_path):
    """Every row of a chunk of the wrong length (test.csv of 4x4 rows for a 9x9 train.csv) is the first row's
    problem, not a traceback of an empty chunk; a rating of 100,000 digits is echoed cut."""
    d = tmp_path / "in"
    d.mkdir()
    write_csv(d / "train.csv", make_rows(2))
    (d / "test.csv").write_text("source,q,a,rating\nx,1.34.412214.43.1,1234341221434321,3\n")
    with pytest.raises(DataError, match=r"test.csv:2: q has 16 characters, expected 81 \(a 9x9 sudoku\)"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    write_csv(d / "test.csv", make_rows(1))
    rows = make_rows(2)
    rows[1] = (*rows[1][:2], "7" * 100_000 + "x")
    write_csv(d / "train.csv", rows)
    with pytest.raises(DataError, match="train.csv:3: rating '7777") as e:
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    assert len(str(e.value)) < 300
    assert not (tmp_path / "o").exists()


def test_a_rating_past_the_column_is_out_of_range_not_no_integer(tmp_path):
    """A rating of 10**30 was called "not an integer"; it is one, larger than a rating column holds."""
    d = tmp_path / "in"
    d.mkdir()
    write_csv(d / "test.csv", make_rows(1))
    rows = make_rows(2)
    rows[1] = (*rows[1][:2], str(10**30))
    write_csv(d / "train.csv", rows)
    with pytest.raises(DataError, match=r"train.csv:3: rating '1000000000000000000000000000000' is out of range"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("rating", ["\u0663", "1_000", " 5 ", "+5", "-5", "５"])
def test_a_rating_is_ascii_digits(tmp_path, rating):
    """int() read another script's digits ('٣' passed --min-difficulty 3 as 3), '1_000', ' 5 ' and '+5'; a rating
    is refused on its line unless it is ASCII digits, as 'nan' is."""
    d = tmp_path / "in"
    d.mkdir()
    write_csv(d / "test.csv", make_rows(1))
    rows = make_rows(2)
    rows[1] = (*rows[1][:2], rating)
    write_csv(d / "train.csv", rows)
    with pytest.raises(DataError, match=re.escape(f"train.csv:3: rating {rating!r} is not a whole number in ASCII")):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "o"), input_dir=str(d), progress=False))
    assert not (tmp_path / "o").exists()


def test_the_success_lines_of_build_and_verify_escape_a_typed_folder(tmp_path, capsys):
    """`--output-dir` typed with an escape sequence and a newline (a name pasted from elsewhere) cleared the screen
    and split the line in `built ...` and `dataset ...: OK`, as the error lines no longer do."""
    from trm_kaggle.cli import main
    from trm_kaggle.data.arc.build import format_arc_build

    out = tmp_path / "o\x1b[2J\nx"
    assert main(["build-sudoku", "--size", "4", "--num-train", "2", "--num-test", "1", "--output-dir", str(out),
                 "--no-progress"]) == 0
    assert main(["verify", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "o\\x1b[2J\\nx: 2 train" in printed and "o\\x1b[2J\\nx: OK" in printed, printed
    arc = format_arc_build({"output_dir": "a\x1b[31m", "tasks": 1, "puzzle_identifiers": 2, "train_examples": 3,
                            "test_examples": 1, "seconds": 0.1})
    assert arc.startswith("built a\\x1b[31m: 1 tasks") and "\x1b" not in arc
