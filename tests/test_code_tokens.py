"""Code as token grids: the character vocabulary of text_to_grid, and BPE pieces learnt from code."""

import numpy as np
import pytest

from trm_kaggle.data.code.tokens import CharTokens, tokens_from_description, train_bpe
from trm_kaggle.data.puzzles.grids import TEXT_VOCAB_SIZE, text_to_grid
from trm_kaggle.errors import DataError

CODE = """def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative")
    return w * h"""
LINES = (CODE + "\n" + CODE.replace("area", "volume").replace("w * h", "w * h * d")).split("\n") * 20


def test_char_tokens_are_text_to_grid():
    t = CharTokens()
    assert t.vocab_size == TEXT_VOCAB_SIZE == 97
    g = t.grid(CODE, 6, 40)
    assert np.array_equal(g, text_to_grid(CODE, 6, 40))
    assert t.text(g) == CODE


@pytest.mark.parametrize("text, rows, cols", [(CODE, 3, 40), (CODE, 6, 20), ("x =\t1", 2, 10), ("é = 1", 2, 10)])
def test_char_tokens_refuse_what_does_not_fit(text, rows, cols):
    assert CharTokens().grid(text, rows, cols) is None


@pytest.fixture(scope="module")
def bpe():
    pytest.importorskip("tokenizers")
    return train_bpe(iter(LINES), 120)


def test_bpe_round_trips_exactly_and_compresses(bpe):
    assert bpe.vocab_size == 2 + 120
    text = CODE + "\n\n        x = area(3,  4)  # spaces kept"
    g = bpe.grid(text, 8, 40)
    assert bpe.text(g) == text
    assert g.shape == (8, 40) and g.max() < bpe.vocab_size
    # learnt pieces: the indented 'return' line takes fewer tokens than characters
    row = g[3]
    assert int(np.argmax(row == 1)) < len("    return w * h")
    assert bpe.grid(CODE, 3, 40) is None  # too many lines
    assert bpe.grid("x\t= 1", 2, 40) is None  # not printable


def test_bpe_training_is_deterministic_and_reloads(bpe):
    again = train_bpe(iter(LINES), 120)
    assert again.json == bpe.json
    loaded = tokens_from_description(bpe.describe(), tokenizer_json=bpe.json)
    assert np.array_equal(loaded.grid(CODE, 6, 40), bpe.grid(CODE, 6, 40))


def test_bpe_fits_counts_tokens_not_characters(bpe):
    long_line = "    return w * h" * 3
    assert not CharTokens().fits([long_line], 1, 30)
    assert bpe.fits([long_line], 1, 30)


def test_token_description_errors(tmp_path):
    with pytest.raises(DataError, match="unknown token scheme"):
        tokens_from_description({"kind": "words"}, tmp_path)
    with pytest.raises(DataError, match="tokenizer.json: BPE vocabulary not found"):
        tokens_from_description({"kind": "bpe", "vocab_size": 10}, tmp_path)


def test_train_bpe_names_a_vocab_size_or_lines_it_cannot_take():
    """10**9 pieces ended the process in the tokenizers library (a failed 70 GB allocation in Rust, no Python
    exception): the config's bound holds here too; "200" and [1, 2] were Python's errors, naming no argument."""
    for size in (10**9, 32_001, 94, "200", 200.0, True):
        with pytest.raises(ValueError, match=r"^vocab_size=.*: expected a whole number from 95 to 32,000$"):
            train_bpe(["abc"], size)
    with pytest.raises(TypeError, match=r"^lines\[0\]: expected a str \(a line of code\), got int$"):
        train_bpe([1, 2], 100)


def test_a_vocabulary_names_what_it_cannot_encode_or_read(bpe):
    for tokens in (CharTokens(), bpe):
        with pytest.raises(TypeError, match="^text: expected the code as a str, got int$"):
            tokens.grid(5, 2, 4)  # "'int' object has no attribute 'split'"
        with pytest.raises(DataError, match="whole-number tokens, got float64"):  # numpy's cast warning, then a range
            tokens.text(np.full((2, 2), np.nan))
        with pytest.raises(DataError, match=r"at least one column, got shape \(2, 0\)"):
            tokens.text(np.zeros((2, 0), np.int64))
    with pytest.raises(TypeError, match="^dataset_dir: expected the dataset folder holding tokenizer.json"):
        tokens_from_description({"kind": "bpe"})  # pathlib's "expected str, bytes or os.PathLike object"
