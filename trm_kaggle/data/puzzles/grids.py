"""Datasets of fixed-shape token grids, in upstream's format, for any task you can phrase as one.

A TRM example is an (input, label) pair of token sequences of one length; anything that
fits a fixed 2-D grid (a maze, a board, a page of source code) can be trained on. This
module is the generic path in, plus the pieces the Sudoku and Maze builders share:

* `build_grid_dataset(out, train=groups, test=groups, vocab_size=..., grid_shape=...)`
  where a group is a list of puzzles and a puzzle is `(name_or_None, [(input, label), ...])`;
* `build_grid_dataset_from_jsonl(path, out, vocab_size, grid_shape)`, one example per line;
* `text_to_grid` / `grid_to_text`, a worked encoding of short texts (code-repair pairs);
* `read_puzzle_csv`, the streaming reader of the `source,q,a,rating` CSVs of
  Sudoku-Extreme and Maze-Hard.

Puzzle names become puzzle identifiers 1, 2, ... in first-seen order (None is the blank
identifier 0; the name "<blank>" is its own and refused); identifiers.json lists "<blank>" and
then the names.
"""

from __future__ import annotations

import csv
import numbers
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from trm_kaggle.config import MAX_GRID_CELLS, path_argument, whole_argument
from trm_kaggle.data.format import BLANK_IDENTIFIER, DatasetWriter, SplitWriter
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.jsonio import open_regular, parse_json, readable_file
from trm_kaggle.names import shown, task_id_problem
from trm_kaggle.progress import tqdm
from trm_kaggle.wording import clipped, one_line, type_name

Example = tuple[Any, Any]  # (input grid, label grid), arrays or nested lists
Puzzle = tuple[str | None, Sequence[Example]]
Group = Iterable[Puzzle]


# ---------------------------------------------------------------------------
# Generic builder
# ---------------------------------------------------------------------------


@dataclass
class _Identifiers:
    """Puzzle name -> identifier, assigned in first-seen order (0 is the blank)."""

    names: list[str] = field(default_factory=lambda: [BLANK_IDENTIFIER])
    ids: dict[str, int] = field(default_factory=lambda: {BLANK_IDENTIFIER: 0})

    def get(self, name: str | None, where: str) -> int:
        if name is None:
            return 0
        if not isinstance(name, str):
            raise DataError(f"{where}: puzzle name must be a string or None, got {type(name).__name__}")
        if name == BLANK_IDENTIFIER:  # it took identifier 0 silently: its examples trained under the blank row
            raise DataError(f"{where}: puzzle name {name!r} is the name of the blank identifier 0: give the puzzle "
                            "another name, or none (null) for the blank identifier")
        # ARC's task-id rule: a name is a file name of evaluate's pictures and a task id of its reports, and '|||'
        # parts an augmented name ('a/../b', an escape and 'x|||t1|||0' were built, and verify passed them)
        if problem := task_id_problem(name):
            raise DataError(f"{where}: puzzle name {problem}")
        if name not in self.ids:
            self.ids[name] = len(self.names)
            self.names.append(name)
        return self.ids[name]


def _grid_size(name: str, shape: Any) -> tuple[int, int]:
    """(rows, cols) of a grid a caller asks for: two whole numbers >= 1 of at most MAX_GRID_CELLS cells (NaN once
    failed in int(), a million rows asked numpy for 931 GiB), else TRMError naming `name`."""
    try:
        rows, cols = (whole_argument(name, size, 1, MAX_GRID_CELLS) for size in shape)
    except (TypeError, ValueError):  # not two sizes, or one that is no whole number in bounds
        rows = cols = None
    if rows is None or rows * cols > MAX_GRID_CELLS:
        raise TRMError(f"{name} must be two whole sizes (rows, cols) of at most {MAX_GRID_CELLS:,} cells, "
                       f"got {clipped(shape)}")
    return rows, cols


def _holds_bool(value: Any) -> bool:
    """Whether a grid given as nested lists (JSON's) holds a bool anywhere: numpy turns [True, 2] into [1, 2]."""
    if isinstance(value, bool):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_bool(v) for v in value)


class _GridChecker:
    """Validates examples against the grid shape and vocabulary; messages say where."""

    def __init__(self, vocab_size: int, grid_shape: Sequence[int]):
        grid_shape = _grid_size("grid_shape", grid_shape)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or \
                not 2 <= vocab_size <= 2**31 - 1:
            raise TRMError(f"vocab_size must be a whole number from 2 to 2**31-1, got {clipped(vocab_size)}")
        self.vocab_size, self.grid_shape = int(vocab_size), grid_shape

    def grid(self, value: Any, what: str, where: str) -> np.ndarray:
        try:
            arr = np.asarray(value)
        except ValueError as e:  # ragged nested lists
            raise DataError(f"{where}: {what} is not a rectangular grid ({e})") from None
        except TypeError as e:  # a type numpy cannot take (a bfloat16 tensor): said where, as every grid problem
            raise DataError(f"{where}: {what} is no grid numpy can read ({type_name(value)}: {one_line(str(e))})") \
                from None
        if arr.shape != self.grid_shape:
            raise DataError(f"{where}: {what} has shape {arr.shape}, expected {self.grid_shape}")
        if arr.dtype.kind == "b" or (arr.dtype.kind in "iu" and _holds_bool(value)):  # numpy made them 0 and 1
            raise DataError(f"{where}: {what} holds true/false, not integer tokens")
        if arr.dtype.kind not in "iu":
            raise DataError(f"{where}: {what} must hold integer tokens, got dtype {arr.dtype}")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.vocab_size:
            bad = lo if lo < 0 else hi
            r, c = np.argwhere(arr == bad)[0]
            raise DataError(f"{where}: {what} token {bad} at row {r}, column {c} is outside 0..{self.vocab_size - 1}")
        return arr.reshape(1, -1)

    def puzzle(self, examples: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
        """All examples of one puzzle as (inputs, labels), each (num_examples, seq_len)."""
        if isinstance(examples, (str, bytes)) or not isinstance(examples, Iterable):
            raise DataError(f"{where}: examples must be a list of (input, label) pairs")
        inputs, labels = [], []
        for e, pair in enumerate(examples):
            at = f"{where} example {e}"
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise DataError(f"{at}: expected an (input, label) pair")
            inputs.append(self.grid(pair[0], "input", at))
            labels.append(self.grid(pair[1], "label", at))
        if not inputs:
            raise DataError(f"{where}: puzzle has no examples")
        return np.concatenate(inputs), np.concatenate(labels)


def build_grid_dataset(
    output_dir: str | os.PathLike,
    *,
    train: Iterable[Group],
    test: Iterable[Group],
    vocab_size: int,
    grid_shape: Sequence[int],
    identifiers: Sequence[str] | None = None,
    pad_id: int = 0,
    ignore_label_id: int | None = 0,
    build_info: dict[str, Any] | None = None,
) -> dict:
    """Write a dataset from groups of puzzles of (input, label) grids; returns a summary.

    `identifiers`, when given, pre-assigns identifiers 1, 2, ... to these names (a leading
    "<blank>" is skipped) so that ids stay stable across datasets; other names follow in
    first-seen order. A puzzle named "<blank>" is refused (None is the blank puzzle). Both
    iterables are consumed once, group by group.
    """
    started = time.monotonic()
    path_argument("output_dir", output_dir, "the dataset folder's path")  # '' replaced the current folder
    checker = _GridChecker(vocab_size, grid_shape)
    # tokens of the vocabulary, checked before the build: pad_id 9 of 5 was pydantic's error after every grid was
    # written, and a negative ignore_label_id matched no label, so nothing was ignored
    whole_argument("pad_id", pad_id, 0, checker.vocab_size - 1)
    if ignore_label_id is not None:
        whole_argument("ignore_label_id", ignore_label_id, 0, checker.vocab_size - 1)
    for arg, value in (("train", train), ("test", test), ("identifiers", identifiers)):
        # a str is iterable too: identifiers="abc" named three puzzles 'a', 'b' and 'c'
        if (value is not None or arg != "identifiers") and not _many(value):
            raise TRMError(f"{arg} must be " + ("a list of names" if arg == "identifiers" else "an iterable of groups")
                           + f", got {clipped(value)} ({type_name(value)})")
    if build_info is not None and not isinstance(build_info, Mapping):
        raise TRMError(f"build_info must be a dict of JSON values, got {clipped(build_info)} ({type_name(build_info)})")
    names = _Identifiers()
    for k, name in enumerate(identifiers or []):
        if isinstance(name, str) and name in names.ids and name != BLANK_IDENTIFIER:
            # a second one took no identifier: every name after it had one less than its place in the list
            raise DataError(f"identifiers entry {k}: {shown(name)} is given twice; name each puzzle once")
        if k or name != BLANK_IDENTIFIER:  # a later "<blank>" would have moved every name after it down by one
            names.get(name, f"identifiers entry {k}")
    seq_len = checker.grid_shape[0] * checker.grid_shape[1]
    info = {"builder": "grids", "grid_shape": list(checker.grid_shape)}
    if taken := sorted(set(info) & set(build_info or {})):  # the builder's own record, never replaced by a caller's
        raise DataError(f"build_info: {', '.join(taken)} {'is one of' if len(taken) == 1 else 'are'} this builder's own "
                        "entries; name yours otherwise")
    info.update(build_info or {})
    with DatasetWriter(output_dir, seq_len=seq_len, vocab_size=checker.vocab_size, build_info=info,
                       pad_id=pad_id, ignore_label_id=ignore_label_id) as writer:
        for split_name, groups in (("train", train), ("test", test)):
            _write_groups(getattr(writer, split_name), split_name, groups, checker, names)
        writer.identifiers = list(names.names)
    return build_summary(writer, started)


def _many(value: Any) -> bool:
    """Whether `value` is an iterable of items, as a list of groups or names is: a str or bytes is not."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))


def _write_groups(split: SplitWriter, split_name: str, groups: Iterable[Group],
                  checker: _GridChecker, names: _Identifiers) -> None:
    num_groups = 0
    for g, group in enumerate(groups):
        if not _many(group):
            raise DataError(f"{split_name} group {g}: a group must be an iterable of (name, examples) puzzles, got "
                            f"{clipped(group)}")
        num_puzzles = 0
        for p, puzzle in enumerate(group):
            where = f"{split_name} group {g} puzzle {p}"
            if not isinstance(puzzle, (tuple, list)) or len(puzzle) != 2:
                raise DataError(f"{where}: a puzzle must be a (name or None, examples) pair")
            identifier = names.get(puzzle[0], where)
            inputs, labels = checker.puzzle(puzzle[1], where)
            split.add_puzzle(inputs, labels, identifier)
            num_puzzles += 1
        if num_puzzles == 0:
            raise DataError(f"{split_name} group {g}: group has no puzzles")
        split.end_group()
        num_groups += 1
    if num_groups == 0:
        raise DataError(f"{split_name} split has no groups")


def build_summary(writer: DatasetWriter, started: float) -> dict:
    """What every builder returns: counts per split, the output path and the seconds taken."""
    summary: dict[str, Any] = {"output_dir": str(writer.output_dir)}
    for name, meta in writer.metadata.items():
        examples = getattr(writer, name).num_examples
        summary[name] = {"groups": meta.total_groups, "puzzles": meta.total_puzzles, "examples": examples}
    summary["seq_len"], summary["vocab_size"] = writer.seq_len, writer.vocab_size
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def format_grid_build(s: dict, puzzles: str = "puzzles") -> str:
    """What `trm-kaggle build-sudoku` / `build-maze` print (`build_summary`'s dict; `puzzles` names them)."""
    return (f"built {one_line(s['output_dir'])}: {s['train']['puzzles']:,} train / {s['test']['puzzles']:,} test {puzzles} "
            f"({s['train']['examples']:,} / {s['test']['examples']:,} examples), seq_len {s['seq_len']}, vocab "
            f"{s['vocab_size']} in {s['seconds']:.1f} s")


# ---------------------------------------------------------------------------
# JSONL input: one example per line
# ---------------------------------------------------------------------------


def build_grid_dataset_from_jsonl(path: str | os.PathLike, output_dir: str | os.PathLike,
                                  vocab_size: int, grid_shape: Sequence[int]) -> dict:
    """Build from JSONL lines {"split", "group", "puzzle", "input", "label"}.

    Consecutive lines with the same split, group and puzzle form one puzzle (so two blank
    puzzles in a row merge into one); a group's lines must be consecutive. Splits may
    interleave. Errors name the line.
    """
    started = time.monotonic()
    path = Path(path_argument("path", path, "the JSONL file's path"))
    path_argument("output_dir", output_dir, "the dataset folder's path")
    checker = _GridChecker(vocab_size, grid_shape)
    names = _Identifiers()
    seq_len = checker.grid_shape[0] * checker.grid_shape[1]
    info = {"builder": "grids-jsonl", "source": str(path), "grid_shape": list(checker.grid_shape)}
    f = open_regular(path, "JSONL file")  # before the output is begun: a FIFO is refused at once, never waited on
    with f, DatasetWriter(output_dir, seq_len=seq_len, vocab_size=checker.vocab_size, build_info=info) as writer:
        _write_jsonl(path, f, writer, checker, names)
        writer.identifiers = list(names.names)
    return build_summary(writer, started)


def _write_jsonl(path: Path, f: BinaryIO, writer: DatasetWriter, checker: _GridChecker, names: _Identifiers) -> None:
    seen_groups: set[tuple[str, str]] = set()
    group_key: tuple[str, str] | None = None  # (split, group) being written
    puzzle_name: str | None = None
    pending: list[tuple[np.ndarray, np.ndarray]] = []  # examples of the open puzzle
    pending_id = 0

    def flush_puzzle() -> None:
        if pending:
            split = getattr(writer, group_key[0])
            inputs, labels = zip(*pending)
            split.add_puzzle(np.concatenate(inputs), np.concatenate(labels), pending_id)
            pending.clear()

    # each line of `f` is decoded by the one JSON reader (one clear line for bad bytes)
    for line_no, text in enumerate(f, start=1):
        if not text.strip():
            continue
        where = f"{path}:{line_no}"
        split_name, group, name, inp, lab = _parse_jsonl_line(text, where)
        key = (split_name, group)  # the JSON value itself: 1 and "1" are two groups, as they are two values
        if key != group_key:  # a new group starts: close the open one
            if key in seen_groups:
                raise DataError(f"{where}: group {clipped(group)} of the {split_name} split appears again after "
                                "other groups; a group's lines must be consecutive")
            flush_puzzle()
            if group_key is not None:
                getattr(writer, group_key[0]).end_group()
            seen_groups.add(key)
            group_key, puzzle_name = key, None
            pending_id = names.get(name, where)
        elif name != puzzle_name:
            flush_puzzle()
            pending_id = names.get(name, where)
        puzzle_name = name
        pending.append((checker.grid(inp, "input", where), checker.grid(lab, "label", where)))
    flush_puzzle()
    for split_name in ("train", "test"):
        if getattr(writer, split_name).num_puzzles == 0:
            raise DataError(f"{path}: no lines of the {split_name} split")


def _parse_jsonl_line(text: bytes | str, where: str) -> tuple[str, str | int, str | None, Any, Any]:
    obj = parse_json(text, where, "JSON line")
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object")
    missing = [k for k in ("split", "group", "input", "label") if k not in obj]
    if missing:
        raise DataError(f"{where}: missing key(s) {', '.join(missing)}")
    if obj["split"] not in ("train", "test"):
        raise DataError(f"{where}: split must be \"train\" or \"test\", got {clipped(obj['split'])}")
    group = obj["group"]
    if isinstance(group, bool) or not isinstance(group, (str, int)):
        raise DataError(f"{where}: group must be a string or an integer, got {clipped(group)}")
    name = obj.get("puzzle")
    if name is not None and not isinstance(name, str):
        raise DataError(f"{where}: puzzle must be a string or null, got {clipped(name)}")
    return obj["split"], group, name, obj["input"], obj["label"]


# ---------------------------------------------------------------------------
# Worked encoding: short texts as grids (one line per row)
# ---------------------------------------------------------------------------

TEXT_PAD = 0
TEXT_EOL = 1  # ends a line; an empty line is a row holding only this
TEXT_FIRST_CHAR = 32  # printable ASCII 32..126 are tokens 2..96
TEXT_VOCAB_SIZE = 2 + (126 - TEXT_FIRST_CHAR + 1)  # 97


def text_to_grid(text: str, rows: int = 64, cols: int = 48) -> np.ndarray:
    """Encode `text` as a (rows, cols) uint8 grid: row i holds line i, then an end-of-line token.

    Lines are split on "\\n" only (so "a\\n" is two lines, the second empty). A line may use
    all `cols` columns, in which case its end-of-line token is left out; rows after the
    last line are all PAD. Text that does not fit, or any character outside printable
    ASCII (tabs and "\\r" included: expand or strip them first), is refused with DataError
    rather than truncated, because a silently cut program is a wrong training pair.
    """
    rows, cols = _grid_size("text_to_grid's grid", (rows, cols))
    if not isinstance(text, str):  # bytes met str.split("\n") and were said as a str given where bytes belong
        raise TypeError(f"text_to_grid: text must be a str, got {clipped(text)} ({type_name(text)}); decode bytes "
                        "first")
    lines = text.split("\n")
    if len(lines) > rows:
        raise DataError(f"text has {len(lines)} lines, more than the {rows} rows of the grid")
    # the whole text at once (code-repair builders encode thousands of snippets a second):
    # each character's line and column come from the newline positions
    # surrogatepass: a lone surrogate ('\ud800', from a JSON escape) is a code above 126 like any other, refused below
    # with its line and column (strict encoding raised UnicodeEncodeError)
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    newline = codes == 10
    line_of = np.cumsum(newline) - newline
    line_start = np.concatenate([[0], np.flatnonzero(newline) + 1])
    col_of = np.arange(len(codes)) - line_start[line_of]
    lengths = np.diff(np.append(line_start, len(codes) + 1)) - 1
    bad = ~newline & ((codes < TEXT_FIRST_CHAR) | (codes > 126))
    if bad.any() or lengths.max() > cols:  # report the first line with a problem, its length first
        first_bad = int(np.argmax(bad)) if bad.any() else len(codes)
        bad_line = int(line_of[first_bad]) if bad.any() else len(lines)
        r = int(np.argmax(lengths > cols)) if lengths.max() > cols else len(lines)
        if r <= bad_line:
            raise DataError(f"line {r + 1} has {lengths[r]} characters, more than the {cols} columns of the grid")
        ch = text[first_bad]
        raise DataError(f"line {bad_line + 1}, column {col_of[first_bad] + 1}: character {ch!r} "
                        f"(U+{ord(ch):04X}) is not printable ASCII")
    grid = np.full((rows, cols), TEXT_PAD, dtype=np.uint8)
    chars = ~newline
    grid[line_of[chars], col_of[chars]] = codes[chars] - TEXT_FIRST_CHAR + 2
    short = np.flatnonzero(lengths < cols)
    grid[short, lengths[short]] = TEXT_EOL
    return grid


def text_grid_tokens(grid: Any, vocab_size: int) -> np.ndarray:
    """`grid`, a text grid of a vocabulary of `vocab_size` tokens, as int64, or one DataError saying what is wrong
    with it (the check of every reader of text grids: characters' and BPE pieces')."""
    grid = np.asarray(grid)
    if grid.ndim != 2:
        raise DataError(f"a text grid is 2-D, got shape {grid.shape}")
    if grid.shape[0] and not grid.shape[1]:  # a row with no first cell: an IndexError from the reading below
        raise DataError(f"a text grid has at least one column, got shape {grid.shape}")
    if grid.dtype.kind not in "iu":  # NaN tokens were cast to 0 (the end of the text) with a numpy warning
        raise DataError(f"a text grid holds whole-number tokens, got {grid.dtype}")
    if grid.size and (grid.min() < 0 or grid.max() >= vocab_size):
        raise DataError(f"text grid tokens must be in 0..{vocab_size - 1}")
    return grid.astype(np.int64)


def grid_to_text(grid: Any) -> str:
    """Inverse of `text_to_grid`: read each row up to its end-of-line (or PAD); stop at an all-PAD row."""
    lines = []
    for row in text_grid_tokens(grid, TEXT_VOCAB_SIZE):
        if row[0] == TEXT_PAD:
            break
        stop = np.flatnonzero(row < 2)
        chars = row[: stop[0] if stop.size else len(row)]
        lines.append(bytes((chars - 2 + TEXT_FIRST_CHAR).astype(np.uint8)).decode("ascii"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The `source,q,a,rating` CSVs of Sudoku-Extreme and Maze-Hard
# ---------------------------------------------------------------------------

CSV_COLUMNS = ("source", "q", "a", "rating")


def csv_inputs(input_dir: str | os.PathLike) -> dict[str, Path]:
    """{"train": ..., "test": ...}: the two CSV files a builder imports from `input_dir`, each checked to be a
    regular file it can read (missing, a folder, a FIFO or a device: one line naming which and what it is)."""
    paths = {name: Path(input_dir) / f"{name}.csv" for name in ("train", "test")}
    for p in paths.values():
        readable_file(p, "CSV file", hint="input_dir must hold train.csv and test.csv")
    return paths


@dataclass
class CsvChunk:
    """Consecutive data rows of a puzzle CSV, with the line number of each."""

    lines: list[int]
    q: list[str]
    a: list[str]
    rating: list[str]


def _not_utf8(path: Path) -> DataError:
    """The line and byte that are not UTF-8. The text layer decodes blocks of the file ahead of the CSV reader, so
    its error came while an earlier line was read (line 1 for a byte anywhere in the first 8 KiB); the file is
    read again, a line at a time (a line break is never part of a UTF-8 sequence)."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataError(f"{path}:{number}: unreadable CSV: not UTF-8 text (byte 0x{line[e.start]:02x} at "
                                 f"column {e.start + 1}; save it as UTF-8)")
    return DataError(f"{path}: unreadable CSV: not UTF-8 text (save it as UTF-8)")  # changed since: said whole


def read_puzzle_csv(path: str | os.PathLike, chunk_rows: int = 32768) -> Iterator[CsvChunk]:
    """Stream a `source,q,a,rating` CSV in chunks (blank lines are skipped).

    Only the column count and header are checked here; the callers check the contents
    a chunk at a time with numpy.
    """
    path = Path(path)
    try:
        f = open(path, newline="", encoding="utf-8-sig")  # a byte-order mark (spreadsheet exports) is no header
    except FileNotFoundError:
        raise DataError(f"{path}: missing") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
        except csv.Error as e:
            raise DataError(f"{path}:1: unreadable CSV ({e})") from None
        if header is None:
            raise DataError(f"{path}: empty file, expected the header {','.join(CSV_COLUMNS)}")
        if tuple(h.strip().lower() for h in header) != CSV_COLUMNS:
            raise DataError(f"{path}:1: header is {clipped(','.join(header))}, expected {','.join(CSV_COLUMNS)}")
        chunk = CsvChunk([], [], [], [])
        while True:
            try:
                row = next(reader, None)
            except UnicodeDecodeError:
                raise _not_utf8(path) from None
            except csv.Error as e:  # the reader has counted the line it failed on
                raise DataError(f"{path}:{reader.line_num}: unreadable CSV ({e})") from None
            if row is None:
                break
            if not row:
                continue
            if len(row) != len(CSV_COLUMNS):
                raise DataError(f"{path}:{reader.line_num}: expected {len(CSV_COLUMNS)} columns "
                                f"({','.join(CSV_COLUMNS)}), got {len(row)}")
            chunk.lines.append(reader.line_num)
            chunk.q.append(row[1])
            chunk.a.append(row[2])
            chunk.rating.append(row[3])
            if len(chunk.lines) >= chunk_rows:
                yield chunk
                chunk = CsvChunk([], [], [], [])
        if chunk.lines:
            yield chunk


def strings_to_codes(strings: list[str], width: int, lut: np.ndarray) -> np.ndarray:
    """Equal-length strings -> (len, width) uint8 array of `lut[byte]` (255 = not allowed).

    Non-ASCII characters become '?' first so that every character stays one byte.
    """
    raw = "".join(strings).encode("ascii", errors="replace")
    return lut[np.frombuffer(raw, dtype=np.uint8)].reshape(len(strings), width)


def char_lut(mapping: dict[str, int]) -> np.ndarray:
    """A 256-entry byte -> value table; bytes not in `mapping` map to 255 (invalid)."""
    lut = np.full(256, 255, dtype=np.uint8)
    for ch, v in mapping.items():
        lut[ord(ch)] = v
    return lut


def first_bad_cell(bad: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first True of a (rows, width) mask, in row-major order."""
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size == 0:
        return None
    r = int(rows[0])
    return r, int(np.argmax(bad[r]))


def rows_of_length(chunk: CsvChunk, cells: int, what: str, problems: list[tuple[int, str]]) -> int:
    """How many rows from the chunk's first have q and a of `cells` characters each; the first row that does
    not adds its problem (`what` names the board: "a 9x9 sudoku"). Rows up to it are checked with numpy."""
    for i, (q, a) in enumerate(zip(chunk.q, chunk.a)):
        if len(q) != cells or len(a) != cells:
            col, s = ("q", q) if len(q) != cells else ("a", a)
            problems.append((i, f"{col} has {len(s)} characters, expected {cells} ({what})"))
            return i
    return len(chunk.lines)


def decode_rows(chunk: CsvChunk, rows: int, cells: int, luts: tuple[np.ndarray, np.ndarray],
                allowed: tuple[str, str], problems: list[tuple[int, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first `rows` rows' q and a as (rows, cells) codes through their `luts` (255: a character not allowed),
    and the mask of rows whose every character is allowed. The first character a column does not allow adds
    its problem (`allowed`: what each column expects, as the message says it)."""
    q = strings_to_codes(chunk.q[:rows], cells, luts[0])
    a = strings_to_codes(chunk.a[:rows], cells, luts[1])
    for name, codes, expected in (("q", q, allowed[0]), ("a", a, allowed[1])):
        bad = first_bad_cell(codes == 255)
        if bad:
            ch = getattr(chunk, name)[bad[0]][bad[1]]
            problems.append((bad[0], f"{name} has {ch!r} at position {bad[1] + 1}, expected {expected}"))
    return q, a, (q != 255).all(axis=1) & (a != 255).all(axis=1)


def raise_first_problem(path: Path, lines: list[int], problems: list[tuple[int, str]]) -> None:
    """Raise DataError for the earliest row among (row in chunk, message) problems, if any
    (on a tie the problem listed first wins)."""
    if problems:
        row, message = min(problems, key=lambda p: p[0])
        raise DataError(f"{path}:{lines[row]}: {message}")


def choose_subsample(rng: np.random.Generator, total: int, size: int | None) -> np.ndarray | None:
    """Indices of the kept rows in output order, as upstream's `np.random.choice(total, size,
    replace=False)`; None when every row is kept (no subsample, or it is not smaller)."""
    if size is None:
        return None
    if size < 0:
        raise TRMError(f"subsample_size must be >= 0, got {size}")
    if size >= total:
        return None
    return rng.choice(total, size=size, replace=False)


RowChunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def select_rows(make_chunks: RowChunks, subsample_size: int | None, rng: np.random.Generator,
                stats: dict[str, int], desc: str = "", progress: bool = False) -> Iterator[np.ndarray]:
    """Batches of the rows that pass the caller's filter, subsampled like upstream when asked.

    `make_chunks()` yields (rows, keep): a (B, ...) array of decoded rows and a (B,) mask of
    those passing the filter. Without a subsample the kept rows stream through chunk by
    chunk. With one, a first pass counts the kept rows, the sample is drawn, and a second
    pass gathers only the chosen rows (the only ones held in memory) in the sample's random
    order, which is upstream's output order. `stats` receives rows_read and rows_kept.
    """
    selection = None
    if subsample_size is not None:
        with tqdm(desc=f"count {desc}", unit=" rows", disable=not progress) as bar:
            total = 0
            for rows, keep in make_chunks():
                total += int(keep.sum())
                bar.update(len(rows))
        selection = choose_subsample(rng, total, subsample_size)
    read = kept = 0
    with tqdm(desc=desc, unit=" rows", disable=not progress) as bar:
        if selection is None:
            for rows, keep in make_chunks():
                read, kept = read + len(rows), kept + int(keep.sum())
                bar.update(len(rows))
                yield rows[keep]
        else:
            out_pos = np.full(total, -1, dtype=np.int64)  # kept-row index -> output position
            out_pos[selection] = np.arange(len(selection))
            gathered = None
            for rows, keep in make_chunks():
                pos = out_pos[kept:kept + int(keep.sum())]
                read, kept = read + len(rows), kept + len(pos)
                bar.update(len(rows))
                if gathered is None:
                    gathered = np.zeros((len(selection),) + rows.shape[1:], dtype=rows.dtype)
                chosen = pos >= 0
                gathered[pos[chosen]] = rows[keep][chosen]
            yield gathered
    stats["rows_read"], stats["rows_kept"] = read, kept
