"""Generic grid datasets: builder, validation, JSONL input and the text-grid encoding."""

from __future__ import annotations

import json
import re
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_kaggle.data.format import load_identifiers, load_split
from trm_kaggle.data.puzzles.grids import (TEXT_EOL, TEXT_PAD, TEXT_VOCAB_SIZE, build_grid_dataset,
                                   build_grid_dataset_from_jsonl, grid_to_text, text_to_grid)
from trm_kaggle.errors import DataError, TRMError

SHAPE = (3, 4)


def grid(v: int) -> np.ndarray:
    return np.full(SHAPE, v, dtype=np.int64)


def groups(spec):
    """spec: list of groups, each a list of (name, [token values, one per example])."""
    for group in spec:
        yield [(name, [(grid(v), grid(v + 1)) for v in values]) for name, values in group]


def test_builder_layout_identifiers_and_metadata(tmp_path):
    train = [[("a", [1, 2]), (None, [3])], [("b", [4]), ("a", [5, 6, 7])]]
    test = [[("c", [8])]]
    out = tmp_path / "ds"
    summary = build_grid_dataset(out, train=groups(train), test=groups(test), vocab_size=10, grid_shape=SHAPE,
                                 build_info={"note": "x"})
    assert summary["train"] == {"groups": 2, "puzzles": 4, "examples": 7}
    tr, te = load_split(out, "train"), load_split(out, "test")
    assert tr.inputs.dtype == np.uint8 and tr.inputs.shape == (7, 12)
    assert tr.inputs[:, 0].tolist() == [1, 2, 3, 4, 5, 6, 7] and tr.labels[:, 0].tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert tr.puzzle_indices.tolist() == [0, 2, 3, 4, 7]
    assert tr.group_indices.tolist() == [0, 2, 4]
    assert tr.puzzle_identifiers.tolist() == [1, 0, 2, 1]  # first-seen order, None -> blank
    assert te.puzzle_identifiers.tolist() == [3]
    assert load_identifiers(out) == ["<blank>", "a", "b", "c"]
    m = tr.metadata
    assert (m.vocab_size, m.seq_len, m.num_puzzle_identifiers, m.total_groups, m.total_puzzles) == (10, 12, 4, 2, 4)
    assert m.mean_puzzle_examples == pytest.approx(7 / 4)
    assert json.loads((out / "build_info.json").read_text())["note"] == "x"


@pytest.mark.parametrize("info, said", [({"x": float("nan")}, "build_info: not a record strict JSON can hold"),
                                         ({"x": object()}, "build_info: not a record strict JSON can hold"),
                                         ({"builder": "mine"}, "build_info: builder is one of this builder's own entries")])
def test_a_build_info_strict_json_cannot_hold_or_naming_the_builders_own_is_refused(tmp_path, info, said):
    """`build_info={"x": nan}` wrote a bare NaN into build_info.json (strict JSON readers refuse it), and
    `{"builder": ...}` replaced the builder's own entry. Refused before anything is written."""
    with pytest.raises(DataError, match=said):
        build_grid_dataset(tmp_path / "ds", train=groups([[("a", [1])]]), test=groups([[("b", [2])]]), vocab_size=10,
                           grid_shape=SHAPE, build_info=info)
    assert list(tmp_path.iterdir()) == []


def test_preassigned_identifiers_and_wide_vocab(tmp_path):
    out = tmp_path / "ds"
    build_grid_dataset(out, train=groups([[("z", [299])]]), test=groups([[("new", [1])]]), vocab_size=301,
                       grid_shape=SHAPE, identifiers=["<blank>", "y", "z"])
    tr = load_split(out, "train")
    assert tr.inputs.dtype == np.uint16 and int(tr.labels[0, 0]) == 300
    assert tr.puzzle_identifiers.tolist() == [2]
    assert load_identifiers(out) == ["<blank>", "y", "z", "new"]


def test_nested_lists_accepted(tmp_path):
    pair = ([[1, 2, 3, 4]] * 3, [[0, 0, 0, 1]] * 3)
    build_grid_dataset(tmp_path / "ds", train=[[(None, [pair])]], test=[[(None, [pair])]], vocab_size=5,
                       grid_shape=SHAPE)
    assert load_split(tmp_path / "ds", "test").inputs[0].tolist() == [1, 2, 3, 4] * 3


BAD = {
    "shape": ([[(None, [(grid(1), grid(1))]), ("p", [(grid(1), grid(1)), (np.zeros((4, 3), int), grid(1))])]],
              "train group 0 puzzle 1 example 1: input has shape (4, 3), expected (3, 4)"),
    "too_big": ([[(None, [(grid(1), grid(1))])], [(None, [(grid(1), grid(10))])]],
                "train group 1 puzzle 0 example 0: label token 10 at row 0, column 0 is outside 0..9"),
    "negative": ([[(None, [(grid(-1), grid(1))])]], "token -1"),
    "float": ([[(None, [(grid(1) * 1.0, grid(1))])]], "integer tokens"),
    "ragged": ([[(None, [([[1, 2], [3]], grid(1))])]], "train group 0 puzzle 0 example 0: input"),
    "empty_puzzle": ([[(None, [])]], "train group 0 puzzle 0: puzzle has no examples"),
    "empty_group": ([[(None, [(grid(1), grid(1))])], []], "train group 1: group has no puzzles"),
    "empty_split": ([], "train split has no groups"),
    "not_pair": ([[(None, [(grid(1),)])]], "expected an (input, label) pair"),
    "bad_name": ([[(7, [(grid(1), grid(1))])]], "puzzle name must be a string or None"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_validation_errors_say_where(case, tmp_path):
    train, words = BAD[case]
    out = tmp_path / "ds"
    with pytest.raises(DataError) as e:
        build_grid_dataset(out, train=train, test=[[(None, [(grid(1), grid(1))])]], vocab_size=10, grid_shape=SHAPE)
    assert words in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing left behind, not even a .partial directory


def test_test_split_errors_name_the_test_split(tmp_path):
    with pytest.raises(DataError, match="test group 0 puzzle 0 example 0: label has shape"):
        build_grid_dataset(tmp_path / "ds", train=groups([[(None, [1])]]), test=[[(None, [(grid(1), grid(1)[:2])])]],
                           vocab_size=10, grid_shape=SHAPE)


def test_generator_raising_mid_build_leaves_nothing(tmp_path):
    def train():
        yield from groups([[("a", [1])], [("b", [2])]])
        raise RuntimeError("source broke")

    out = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="source broke"):
        build_grid_dataset(out, train=train(), test=groups([[(None, [1])]]), vocab_size=10, grid_shape=SHAPE)
    assert list(tmp_path.iterdir()) == []


def test_builder_streams_its_inputs(tmp_path):
    """Groups are pulled one at a time: a group is written before the next is asked for."""
    pulled = []

    def train():
        for i in range(5):
            pulled.append(i)
            yield [(None, [(grid(i), grid(i))])]
            assert len(pulled) == i + 1

    build_grid_dataset(tmp_path / "ds", train=train(), test=groups([[(None, [1])]]), vocab_size=10,
                       grid_shape=SHAPE)
    assert load_split(tmp_path / "ds", "train").inputs.shape == (5, 12)


# --- JSONL --------------------------------------------------------------------------------------


def line(split, group, puzzle, v, shape=SHAPE):
    return json.dumps({"split": split, "group": group, "puzzle": puzzle,
                       "input": np.full(shape, v).tolist(), "label": np.full(shape, v + 1).tolist()})


def test_jsonl_groups_puzzles_and_interleaved_splits(tmp_path):
    lines = [line("train", "g1", "a", 1), line("train", "g1", "a", 2), line("train", "g1", None, 3),
             line("test", 7, "t", 4), line("train", "g2", "b", 5), "", line("train", "g2", "a", 6)]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    summary = build_grid_dataset_from_jsonl(path, tmp_path / "ds", vocab_size=10, grid_shape=SHAPE)
    assert summary["train"] == {"groups": 2, "puzzles": 4, "examples": 5}
    tr, te = load_split(tmp_path / "ds", "train"), load_split(tmp_path / "ds", "test")
    assert tr.inputs[:, 0].tolist() == [1, 2, 3, 5, 6]
    assert tr.puzzle_indices.tolist() == [0, 2, 3, 4, 5] and tr.group_indices.tolist() == [0, 2, 4]
    assert tr.puzzle_identifiers.tolist() == [1, 0, 3, 1] and te.puzzle_identifiers.tolist() == [2]
    assert load_identifiers(tmp_path / "ds") == ["<blank>", "a", "t", "b"]


@pytest.mark.parametrize("bad,words", [
    ("{not json", "unreadable JSON line"),
    (json.dumps({"split": "train", "group": 1, "input": [[1]]}), "missing key(s) label"),
    (json.dumps({"split": "dev", "group": 1, "input": [[1]], "label": [[1]]}), "split must be"),
    (line("train", "g", None, 1, shape=(2, 4)), "input has shape (2, 4), expected (3, 4)"),
    (line("train", "g", None, 12), "token 12"),
    (line("train", "g0", None, 1), "appears again"),
    # JSON's true is no token 1 (numpy made it one); nor a whole grid of them
    (json.dumps({"split": "train", "group": "g", "puzzle": "p", "input": [[True, 2, 3, 4]] + [[1, 2, 3, 4]] * 2,
                 "label": [[1, 2, 3, 4]] * 3}), "input holds true/false, not integer tokens"),
    (json.dumps({"split": "train", "group": "g", "puzzle": "p", "input": [[1, 2, 3, 4]] * 3,
                 "label": [[False] * 4] * 3}), "label holds true/false"),
])
def test_jsonl_errors_name_the_line(tmp_path, bad, words):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join([line("train", "g0", None, 1), line("train", "g9", None, 1), bad,
                               line("test", "t", None, 1)]))
    with pytest.raises(DataError) as e:
        build_grid_dataset_from_jsonl(path, tmp_path / "ds", vocab_size=10, grid_shape=SHAPE)
    assert f"{path}:3:" in str(e.value) and words in str(e.value)
    assert not (tmp_path / "ds").exists()


def test_a_puzzle_named_as_the_blank_identifier_is_refused_where_it_is_read(tmp_path):
    """A puzzle named "<blank>" took the blank identifier 0 silently (identifiers.json ["<blank>", "p2"]): its
    examples trained under the blank row. It is refused in one line naming the line, or the group and puzzle;
    a leading "<blank>" of pre-assigned identifiers is still skipped, a later one is refused (it moved the names
    after it)."""
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join([line("train", "g0", "p1", 1), line("train", "g1", "<blank>", 2),
                               line("test", "t", "p2", 1)]))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: puzzle name '<blank>' is the name of the blank "
                                        r"identifier 0: give the puzzle another name, or none \(null\)"):
        build_grid_dataset_from_jsonl(path, tmp_path / "ds", vocab_size=10, grid_shape=SHAPE)
    with pytest.raises(DataError, match=r"^train group 1 puzzle 0: puzzle name '<blank>' is the name of the blank"):
        build_grid_dataset(tmp_path / "ds", train=groups([[("p1", [1])], [("<blank>", [2])]]),
                           test=groups([[("p2", [3])]]), vocab_size=10, grid_shape=SHAPE)
    with pytest.raises(DataError, match=r"^identifiers entry 2: puzzle name '<blank>'"):
        build_grid_dataset(tmp_path / "ds", train=groups([[("a", [1])]]), test=groups([[("b", [3])]]), vocab_size=10,
                           grid_shape=SHAPE, identifiers=["<blank>", "a", "<blank>", "b"])
    assert not (tmp_path / "ds").exists()


def test_jsonl_needs_both_splits(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(line("train", "g", None, 1) + "\n")
    with pytest.raises(DataError, match="no lines of the test split"):
        build_grid_dataset_from_jsonl(path, tmp_path / "ds", vocab_size=10, grid_shape=SHAPE)


# --- text grids ---------------------------------------------------------------------------------


def test_text_grid_layout():
    g = text_to_grid("ab\n\nc", rows=4, cols=3)
    assert g.dtype == np.uint8 and g.shape == (4, 3)
    a, b, c = (ord(ch) - 30 for ch in "abc")
    assert g.tolist() == [[a, b, TEXT_EOL], [TEXT_EOL, 0, 0], [c, TEXT_EOL, 0], [0, 0, 0]]
    assert text_to_grid("~ ", rows=1, cols=2).tolist() == [[96, 2]]  # full-width line: no end-of-line token
    assert TEXT_VOCAB_SIZE == 97 and TEXT_PAD == 0


@pytest.mark.parametrize("text", ["", "\n", "x = 1\n", "def f():\n    return  1\n\n\n# end ~", "a" * 48,
                                  "\n" * 63])
def test_text_round_trip_examples(text):
    assert grid_to_text(text_to_grid(text)) == text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=string.printable[:95].replace("\n", "") + " ", max_size=12), min_size=1,
                max_size=8))
def test_text_round_trip_property(lines):
    text = "\n".join(lines)
    assert grid_to_text(text_to_grid(text, rows=8, cols=12)) == text


@pytest.mark.parametrize("text,words", [
    ("a" * 49, "line 1 has 49 characters, more than the 48 columns"),
    ("\n" * 64, "65 lines, more than the 64 rows"),
    ("ok\n\tx", "line 2, column 1: character '\\t'"),
    ("é", "not printable ASCII"),
    ("a\r\nb", "'\\r'"),
])
def test_text_that_does_not_fit_is_refused(text, words):
    with pytest.raises(DataError) as e:
        text_to_grid(text)
    assert words in str(e.value)


def test_text_pairs_make_a_dataset(tmp_path):
    """The worked example: code-repair pairs as 64x48 grids, vocab 97."""
    pairs = [("print(x", "print(x)"), ("if x\n  y", "if x:\n  y")]
    train = [[(None, [(text_to_grid(bad), text_to_grid(good))])] for bad, good in pairs]
    build_grid_dataset(tmp_path / "ds", train=train, test=train[:1], vocab_size=TEXT_VOCAB_SIZE, grid_shape=(64, 48))
    tr = load_split(tmp_path / "ds", "train")
    assert tr.metadata.seq_len == 64 * 48 and tr.metadata.vocab_size == 97
    assert grid_to_text(np.asarray(tr.labels[1]).reshape(64, 48)) == "if x:\n  y"


@pytest.mark.parametrize("vocab_size", [2**31, 10**400, 1, 2.5, True])
def test_a_vocab_size_outside_its_bounds_names_both(tmp_path, vocab_size):
    """2**31 was refused as "must be at least 2", and 10**400 printed whole (401 digits)."""
    with pytest.raises(TRMError, match=r"vocab_size must be a whole number from 2 to 2\*\*31-1, got .{1,90}$"):
        build_grid_dataset(tmp_path / "ds", train=[], test=[], vocab_size=vocab_size, grid_shape=SHAPE)


@pytest.mark.parametrize("shape", [(float("nan"), 3), (3.0, 3), (0, 3), (True, 3), (3,), "ab", (2**20, 2)])
def test_a_grid_shape_that_is_no_two_whole_sizes_is_named(tmp_path, shape):
    """`grid_shape=(nan, 3)` was Python's "cannot convert float NaN to integer" from int()."""
    group = [("p", [(np.ones((3, 3), int), np.ones((3, 3), int))])]
    with pytest.raises(TRMError, match="grid_shape must be two whole sizes"):
        build_grid_dataset(tmp_path / "d", train=[group], test=[group], vocab_size=5, grid_shape=shape)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("rows, cols", [(float("nan"), 4), (10**6, 10**6), (-1, 4), (4, 0)])
def test_a_text_grid_of_no_sane_size_is_named_before_numpy_allocates(rows, cols):
    """rows=nan was a TypeError inside numpy; rows=cols=10**6 asked for 931 GiB."""
    with pytest.raises(TRMError, match="text_to_grid's grid must be two whole sizes"):
        text_to_grid("ab", rows=rows, cols=cols)


def test_a_text_grid_of_no_whole_numbers_is_refused():
    """An all-NaN grid read as "" with only numpy's cast warning."""
    with pytest.raises(DataError, match="whole-number tokens"):
        grid_to_text(np.full((2, 2), np.nan))


def test_a_lone_surrogate_and_a_grid_without_columns_are_data_errors():
    """'a\\ud800b' was a UnicodeEncodeError from the utf-32 encoding, a (2, 0) grid an IndexError."""
    with pytest.raises(DataError, match=re.escape("line 1, column 2: character '\\ud800' (U+D800) is not printable")):
        text_to_grid("a\ud800b", 4, 8)
    with pytest.raises(DataError, match=re.escape("a text grid has at least one column, got shape (2, 0)")):
        grid_to_text(np.zeros((2, 0), np.int64))
    assert grid_to_text(np.zeros((0, 3), np.int64)) == ""  # no row: the empty text
