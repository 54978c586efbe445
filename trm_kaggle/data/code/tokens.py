"""Source code as token grids: one line per row, characters or BPE pieces along the row.

Two vocabularies, one layout (the layout of `trm_kaggle.data.puzzles.grids.text_to_grid`):
token 0 pads, token 1 ends a line (left out when the line fills the row), and rows
after the last line are all padding.

* `CharTokens`: the 97-symbol vocabulary of `text_to_grid` (printable ASCII); this
  module only wraps it, so there is one character vocabulary in the project.
* `BpeTokens`: byte-pair pieces learnt from the corpus with the `tokenizers` library.
  A piece is a plain substring of a line (no pre-tokenizer, no byte mapping), so a row
  decodes by joining its pieces, and indentation or spacing survives exactly. Piece i
  is token i + 2.

`grid()` returns None for a text that does not fit the grid (too many lines, a line
too long, a character outside printable ASCII): the builder skips such snippets, and
counting a skip is cheaper than raising.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np

from trm_kaggle.config import CodeRepairBuildConfig, path_argument, texts_argument, whole_argument
from trm_kaggle.data.puzzles.grids import (TEXT_EOL, TEXT_PAD, TEXT_VOCAB_SIZE, grid_to_text, text_grid_tokens,
                                          text_to_grid)
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.jsonio import read_text
from trm_kaggle.wording import type_name

PRINTABLE = [chr(c) for c in range(32, 127)]  # the characters both vocabularies can write
TOKENIZER_FILE = "tokenizer.json"  # a BPE dataset's vocabulary, at the dataset root
#: The most pieces a BPE vocabulary learns: the bound of the config's bpe_vocab_size, read from its one place.
MAX_BPE_VOCAB_SIZE = next(m.le for m in CodeRepairBuildConfig.model_fields["bpe_vocab_size"].metadata
                          if getattr(m, "le", None) is not None)


def printable(text: str) -> bool:
    """True when every character is printable ASCII or a newline (for ASCII, isprintable() is 32..126)."""
    return text.isascii() and text.replace("\n", "").isprintable()


class CharTokens:
    """One token per character: the vocabulary of `text_to_grid`."""

    kind = "char"
    vocab_size = TEXT_VOCAB_SIZE

    def fits(self, lines: list[str], rows: int, cols: int) -> bool:
        return len(lines) <= rows and max(map(len, lines), default=0) <= cols

    def grid(self, text: str, rows: int, cols: int) -> np.ndarray | None:
        lines = _snippet_text(text).split("\n")
        if not self.fits(lines, rows, cols) or not printable(text):
            return None
        return text_to_grid(text, rows, cols)

    def text(self, grid: np.ndarray) -> str:
        return grid_to_text(grid)

    def describe(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size}


class BpeTokens:
    """Byte-pair pieces of a trained `tokenizers` model (see the module docstring)."""

    kind = "bpe"

    def __init__(self, tokenizer_json: str):
        tokenizers = _import_tokenizers()
        self.json = tokenizer_json
        self.tokenizer = tokenizers.Tokenizer.from_str(tokenizer_json)
        size = self.tokenizer.get_vocab_size()
        self.vocab_size = 2 + size
        # piece strings by id, for decoding a whole grid with one lookup
        self._pieces = np.array([self.tokenizer.id_to_token(i) or "" for i in range(size)], dtype=object)

    def fits(self, lines: list[str], rows: int, cols: int) -> bool:
        if len(lines) > rows:
            return False
        return all(len(e.ids) <= cols for e in self.tokenizer.encode_batch(lines, add_special_tokens=False))

    def grid(self, text: str, rows: int, cols: int) -> np.ndarray | None:
        lines = _snippet_text(text).split("\n")
        if len(lines) > rows or not printable(text):
            return None
        out = np.full((rows, cols), TEXT_PAD, dtype=np.uint16 if self.vocab_size > 256 else np.uint8)
        for r, enc in enumerate(self.tokenizer.encode_batch(lines, add_special_tokens=False)):
            ids = enc.ids
            if len(ids) > cols:
                return None
            out[r, :len(ids)] = np.asarray(ids) + 2
            if len(ids) < cols:
                out[r, len(ids)] = TEXT_EOL
        return out

    def text(self, grid: np.ndarray) -> str:
        grid = text_grid_tokens(grid, self.vocab_size)  # NaN tokens were numpy's cast warning, then "must be in"
        lines = []
        for row in grid:  # the same reading rule as grid_to_text
            if row[0] == TEXT_PAD:
                break
            stop = np.flatnonzero(row < 2)
            lines.append("".join(self._pieces[row[: stop[0] if stop.size else len(row)] - 2]))
        return "\n".join(lines)

    def describe(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "file": TOKENIZER_FILE}


Tokens = CharTokens | BpeTokens


def _snippet_text(text: object) -> str:
    """`text`, the code a vocabulary's grid() encodes, when it is a str: 5 was "'int' object has no attribute
    'split'" and bytes a str method's error, naming no argument."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected the code as a str, got {type_name(text)}")
    return text


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise TRMError("BPE tokens need the `tokenizers` package: pip install -e '.[repair]'") from None
    return tokenizers


def train_bpe(lines: Iterable[str], vocab_size: int) -> BpeTokens:
    """Learn `vocab_size` pieces (the 95 printable characters included) from lines of code.

    Lines holding anything but printable ASCII are left out, so every piece is printable.
    Training is deterministic for the same lines in the same order.
    """
    # the bounds of the config's bpe_vocab_size, the command's (10**9 pieces ended the process in the tokenizers
    # library's Rust: a failed 70 GB allocation, no Python exception); a str or a float named, not compared
    vocab_size = whole_argument("vocab_size", vocab_size, len(PRINTABLE), MAX_BPE_VOCAB_SIZE)
    lines = texts_argument("lines", lines, "a line of code")  # [1, 2] was "'int' object has no attribute 'isascii'"
    tokenizers = _import_tokenizers()
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=PRINTABLE,
                                             limit_alphabet=len(PRINTABLE), special_tokens=[], show_progress=False)
    tok.train_from_iterator((line for line in lines if line and printable(line)), trainer=trainer)
    return BpeTokens(tok.to_str())


def tokens_from_description(desc: dict, dataset_dir: str | Path | None = None, tokenizer_json: str | None = None
                            ) -> Tokens:
    """The vocabulary a dataset was built with, from its build_info "tokens" entry."""
    kind = desc.get("kind") if isinstance(desc, dict) else None
    if kind == "char":
        return CharTokens()
    if kind == "bpe":
        if tokenizer_json is None:
            # a fixed name inside the dataset, never one read from data (None was pathlib's "expected str, ...")
            path_argument("dataset_dir", dataset_dir, "the dataset folder holding tokenizer.json")
            tokenizer_json = read_text(Path(dataset_dir) / TOKENIZER_FILE, "BPE vocabulary")
        try:
            tokens = BpeTokens(tokenizer_json)
        except Exception as e:  # the tokenizers library raises its own exception types
            raise DataError(f"{dataset_dir}/{TOKENIZER_FILE}: not a tokenizers vocabulary ({e})") from None
        if tokens.vocab_size != desc.get("vocab_size"):
            raise DataError(f"{dataset_dir}/{TOKENIZER_FILE}: {tokens.vocab_size} tokens, build_info says "
                            f"{desc.get('vocab_size')}")
        return tokens
    raise DataError(f"{dataset_dir}: unknown token scheme {json.dumps(desc)} (expected kind char or bpe)")
