"""The on-disk dataset format shared with upstream (see docs/datasets.md, "The format").

    DATASET/
      identifiers.json       list[str], index = puzzle identifier, entry 0 is "<blank>"
      test_puzzles.json      ARC only: {task_id: task dict with test outputs}
      build_info.json        ours: how the dataset was built (upstream ignores it)
      contents.json          ours: every file's size and sha256 (trm_kaggle.data.contents)
      train/ test/           dataset.json + all__{inputs,labels,puzzle_identifiers,
                             puzzle_indices,group_indices}.npy

Example e of puzzle p lives at rows [puzzle_indices[p], puzzle_indices[p+1]);
puzzle p of group g at [group_indices[g], group_indices[g+1]). A group is one
original task and all its augmented copies.

`DatasetWriter` streams examples to disk (memory stays flat however large the
dataset) and finishes atomically; every builder writes through it or, for the
parallel ARC builder, through the same `NpyFile` and `finish_split` helpers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trm_kaggle.atomic import atomic_directory, atomic_write_json
from trm_kaggle.config import MAX_PUZZLE_IDENTIFIERS, path_argument, validation_line
from trm_kaggle.data.contents import write_contents
from trm_kaggle.errors import DamagedFile, DataError, UnreadableFile
from trm_kaggle.jsonio import directory_problem, open_regular, read_failure, read_json, readable_file
from trm_kaggle.names import name_problem
from trm_kaggle.outputs import Input, Output
from trm_kaggle.wording import clipped, type_name

SPLITS = ("train", "test")
SET_NAME = "all"
FIELDS = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")
BLANK_IDENTIFIER = "<blank>"

log = logging.getLogger(__name__)


class DatasetMetadata(BaseModel):
    """`dataset.json` of one split; field names and meaning are upstream's. Strict: read from a file, `true` is
    not the label 1 nor "12" a vocabulary (upstream writes plain numbers)."""

    model_config = ConfigDict(strict=True)

    pad_id: int = 0
    ignore_label_id: int | None = 0
    blank_identifier_id: int = 0
    # read from a file, they size the model (embeddings, the puzzle table) before any array is looked at
    vocab_size: int = Field(ge=1, le=1 << 20)
    seq_len: int = Field(ge=1, le=1 << 20)
    num_puzzle_identifiers: int = Field(ge=1, le=MAX_PUZZLE_IDENTIFIERS)
    total_groups: int = Field(ge=0)
    mean_puzzle_examples: float = Field(ge=0, allow_inf_nan=False)
    total_puzzles: int = Field(ge=0)
    sets: list[str] = [SET_NAME]

    @model_validator(mode="after")
    def _ids_in_range(self) -> "DatasetMetadata":
        # each id lands in an int32 array or indexes a table: one outside is an OverflowError deep in the loader
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id {self.pad_id} is not a token of the vocabulary 0..{self.vocab_size - 1}")
        if self.ignore_label_id is not None and not -(1 << 31) <= self.ignore_label_id < 1 << 31:
            raise ValueError(f"ignore_label_id {self.ignore_label_id} does not fit the labels' int32")
        if not 0 <= self.blank_identifier_id < self.num_puzzle_identifiers:
            raise ValueError(f"blank_identifier_id {self.blank_identifier_id} is not one of the identifiers "
                             f"0..{self.num_puzzle_identifiers - 1}")
        return self


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest unsigned dtype holding every token (upstream's ARC/Sudoku/Maze files are uint8)."""
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    if vocab_size <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


# ---------------------------------------------------------------------------
# .npy files written in pieces
# ---------------------------------------------------------------------------

_NPY_HEADER_BYTES = 128  # fixed so the header can be rewritten in place with the final shape


def npy_header(dtype: np.dtype, shape: Sequence[int]) -> bytes:
    """A version 1.0 .npy header padded to exactly `_NPY_HEADER_BYTES` bytes."""
    body = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (np.dtype(dtype).str, tuple(int(s) for s in shape))
    pad = _NPY_HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:
        raise ValueError(f"shape {shape} too long for the fixed .npy header")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _NPY_HEADER_BYTES - 10) + body.encode("latin1") + b" " * pad + b"\n"


class NpyFile:
    """A 2-D .npy file of rows of width `row_len`, written by appends or by positioned writes.

    `append` streams rows (the header is fixed up in `close`); `preallocate` sets the final
    row count so that several processes can `write_rows_at` disjoint ranges with pwrite,
    which keeps the data out of any process's resident memory.
    """

    def __init__(self, path: str | os.PathLike, dtype: np.dtype, row_len: int | None):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.row_len = row_len  # None: a 1-D array
        self.rows = 0
        self._f = open(self.path, "wb")
        self._f.write(npy_header(self.dtype, self._shape(0)))

    def _shape(self, rows: int) -> tuple[int, ...]:
        return (rows,) if self.row_len is None else (rows, self.row_len)

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self._shape(0)[1:]:
            raise ValueError(f"{self.path.name}: rows of shape {rows.shape[1:]} where {self._shape(0)[1:]} expected")
        self._f.write(rows.tobytes())
        self.rows += len(rows)

    def preallocate(self, rows: int) -> None:
        self.rows = rows
        self._f.truncate(_NPY_HEADER_BYTES + rows * self.dtype.itemsize * (self.row_len or 1))

    def close(self) -> None:
        self._f.seek(0)
        self._f.write(npy_header(self.dtype, self._shape(self.rows)))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()


def write_rows_at(path: str | os.PathLike, dtype: np.dtype, row_len: int, first_row: int, rows: np.ndarray) -> None:
    """pwrite `rows` into a preallocated `NpyFile` at row `first_row` (safe from several processes)."""
    rows = np.ascontiguousarray(rows, dtype=dtype)
    view = memoryview(rows.reshape(-1).view(np.uint8))
    offset = _NPY_HEADER_BYTES + first_row * np.dtype(dtype).itemsize * row_len
    fd = os.open(path, os.O_WRONLY)
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# Writing a dataset
# ---------------------------------------------------------------------------


def finish_split(split_dir: Path, metadata: DatasetMetadata, puzzle_identifiers: np.ndarray,
                 puzzle_indices: np.ndarray, group_indices: np.ndarray) -> None:
    """Write the three index arrays and dataset.json of a split whose inputs/labels are written."""
    np.save(split_dir / f"{SET_NAME}__puzzle_identifiers.npy", np.asarray(puzzle_identifiers, dtype=np.int32))
    np.save(split_dir / f"{SET_NAME}__puzzle_indices.npy", np.asarray(puzzle_indices, dtype=np.int32))
    np.save(split_dir / f"{SET_NAME}__group_indices.npy", np.asarray(group_indices, dtype=np.int32))
    atomic_write_json(split_dir / "dataset.json", metadata.model_dump())


class SplitWriter:
    """Streams one split: add puzzles (each a block of examples), close groups, finish."""

    def __init__(self, split_dir: Path, seq_len: int, vocab_size: int):
        split_dir.mkdir(parents=True, exist_ok=True)
        self.split_dir, self.seq_len, self.vocab_size = split_dir, seq_len, vocab_size
        dtype = token_dtype(vocab_size)
        self._inputs = NpyFile(split_dir / f"{SET_NAME}__inputs.npy", dtype, seq_len)
        self._labels = NpyFile(split_dir / f"{SET_NAME}__labels.npy", dtype, seq_len)
        self._puzzle_identifiers: list[int] = []
        self._puzzle_indices: list[int] = [0]
        self._group_indices: list[int] = [0]

    @property
    def num_examples(self) -> int:
        return self._puzzle_indices[-1]

    @property
    def num_puzzles(self) -> int:
        return len(self._puzzle_identifiers)

    def add_puzzle(self, inputs: np.ndarray, labels: np.ndarray, identifier: int = 0) -> None:
        inputs = np.asarray(inputs).reshape(-1, self.seq_len)
        labels = np.asarray(labels).reshape(-1, self.seq_len)
        if inputs.shape != labels.shape or len(inputs) == 0:
            raise ValueError(f"a puzzle needs as many input as label rows (>=1), got {inputs.shape} and {labels.shape}")
        for name, arr in (("input", inputs), ("label", labels)):
            if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
                raise ValueError(f"{name} token outside the vocabulary 0..{self.vocab_size - 1}")
        self._inputs.append(inputs)
        self._labels.append(labels)
        self._puzzle_identifiers.append(int(identifier))
        self._puzzle_indices.append(self.num_examples + len(inputs))

    def end_group(self) -> None:
        if self._group_indices[-1] == self.num_puzzles:
            raise ValueError("end_group() called on an empty group")
        self._group_indices.append(self.num_puzzles)

    def finish(self, num_puzzle_identifiers: int, pad_id: int = 0, ignore_label_id: int | None = 0) -> DatasetMetadata:
        if self._group_indices[-1] != self.num_puzzles:
            self.end_group()
        self._inputs.close()
        self._labels.close()
        meta = DatasetMetadata(
            pad_id=pad_id, ignore_label_id=ignore_label_id, blank_identifier_id=0,
            vocab_size=self.vocab_size, seq_len=self.seq_len, num_puzzle_identifiers=num_puzzle_identifiers,
            total_groups=len(self._group_indices) - 1,
            mean_puzzle_examples=self.num_examples / max(1, self.num_puzzles),
            total_puzzles=self.num_puzzles,
        )
        finish_split(self.split_dir, meta, np.array(self._puzzle_identifiers, dtype=np.int32),
                     np.array(self._puzzle_indices, dtype=np.int32), np.array(self._group_indices, dtype=np.int32))
        return meta


def builder_config(cfg: object, model: type[BaseModel]) -> BaseModel:
    """`cfg`, a builder's settings, when it is a `model`; else a TypeError naming the argument, before any work: a
    dict or None was an AttributeError from deep in the builder ("'dict' object has no attribute 'output_dir'")."""
    if not isinstance(cfg, model):
        name = model.__name__
        raise TypeError(f"cfg: expected {'an' if name[0] in 'AEIOU' else 'a'} {name} ({name}(**values) makes one from a "
                        f"dict), got {type_name(cfg)}")
    return cfg


def build_io(source: Any, flags: bool = True) -> tuple[list[Input], list[Output]]:
    """What a dataset build reads and writes, from its parsed options or its config (`source`: the fields
    input_file_prefix, task_dir, input_dir, corpus and output_dir), named as the command's options (`flags`) or as
    the config's fields: `trm_kaggle.outputs.check_io` / `check_kept` hold the output off the inputs."""
    import glob

    def name(field: str) -> str:
        return "--" + field.replace("_", "-") if flags else field

    inputs = []
    prefix = getattr(source, "input_file_prefix", None)
    if prefix:  # PREFIX_<subset>_challenges.json and its solutions: each file is an input
        inputs += [Input(p, f"{name('input_file_prefix')} file") for p in sorted(glob.glob(glob.escape(prefix) + "_*"))]
    for field in ("task_dir", "input_dir", "corpus"):
        if getattr(source, field, None):
            inputs.append(Input(getattr(source, field), name(field), tree=True))
    return inputs, [Output(source.output_dir, name("output_dir"), "replaced")]


class DatasetWriter:
    """Context manager that builds a dataset directory atomically.

        with DatasetWriter(out, seq_len=81, vocab_size=11, build_info={...}) as w:
            for group in ...:
                for puzzle in group:
                    w.train.add_puzzle(inputs, labels, identifier)
                w.train.end_group()
            ...
            w.identifiers = ["<blank>", ...]     # optional, default ["<blank>"]

    Nothing appears at `out` unless the block finishes without an exception.
    """

    def __init__(self, output_dir: str | os.PathLike, *, seq_len: int, vocab_size: int,
                 build_info: dict[str, Any] | None = None, pad_id: int = 0, ignore_label_id: int | None = 0):
        self.output_dir = Path(output_dir)
        self.seq_len, self.vocab_size = seq_len, vocab_size
        self.pad_id, self.ignore_label_id = pad_id, ignore_label_id
        self.build_info = dict(build_info or {})
        try:  # strict JSON, checked before the build: a NaN was written as a bare `NaN` that JSON readers refuse
            json.dumps(self.build_info, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise DataError(f"build_info: not a record strict JSON can hold ({e})") from None
        self.identifiers: list[str] = [BLANK_IDENTIFIER]
        self.test_puzzles: dict[str, Any] | None = None
        self._ctx = None

    def __enter__(self) -> "DatasetWriter":
        self._ctx = atomic_directory(self.output_dir, kind="dataset")
        self.tmp_dir = self._ctx.__enter__()
        self.train = SplitWriter(self.tmp_dir / "train", self.seq_len, self.vocab_size)
        self.test = SplitWriter(self.tmp_dir / "test", self.seq_len, self.vocab_size)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self.metadata = {
                    name: split.finish(len(self.identifiers), self.pad_id, self.ignore_label_id)
                    for name, split in (("train", self.train), ("test", self.test))
                }
                write_identifiers(self.tmp_dir, self.identifiers)
                if self.test_puzzles is not None:
                    atomic_write_json(self.tmp_dir / "test_puzzles.json", self.test_puzzles)
                atomic_write_json(self.tmp_dir / "build_info.json", self.build_info, indent=2)
                write_contents(self.tmp_dir)  # last: what every file holds (resume and verify check it)
            except BaseException as e:  # finishing failed: discard the partial directory
                self._ctx.__exit__(type(e), e, e.__traceback__)
                raise
        return bool(self._ctx.__exit__(exc_type, exc, tb))


def write_identifiers(dataset_dir: Path, identifiers: list[str]) -> None:
    if not identifiers or identifiers[0] != BLANK_IDENTIFIER:
        raise ValueError("identifiers[0] must be '<blank>'")
    atomic_write_json(dataset_dir / "identifiers.json", identifiers)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


@dataclass
class Split:
    """One split, with inputs/labels memory-mapped (nothing large is read into memory)."""

    name: str
    metadata: DatasetMetadata
    inputs: np.ndarray
    labels: np.ndarray
    puzzle_identifiers: np.ndarray
    puzzle_indices: np.ndarray
    group_indices: np.ndarray

    @property
    def num_examples(self) -> int:
        return len(self.inputs)


def dataset_path(value: Any, name: str = "dataset_dir") -> Path:
    """`value`, a library call's dataset folder, as a Path when it is a path (a str or os.PathLike); else a TypeError
    naming the argument (None and 5 were pathlib's "expected str, bytes or os.PathLike object", naming none). An
    empty one is refused by the library's one rule (`config.path_argument`): '' was read as the current folder."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a dataset folder's path (a str or os.PathLike), got {clipped(value)} "
                        f"({type_name(value)})")
    return Path(path_argument(name, value))


def load_metadata(dataset_dir: str | os.PathLike, split: str) -> DatasetMetadata:
    dataset_path(dataset_dir)
    if problem := name_problem(split):  # a split is a folder of the dataset: `../x/train` would open another's
        raise DataError(f"{dataset_dir}: split {problem}")
    if os.path.islink(dataset_dir) and not os.path.exists(dataset_dir):  # a loop, a dangling link: named as such
        raise DataError(directory_problem(dataset_dir, "dataset directory"))
    path = Path(dataset_dir) / split / "dataset.json"
    raw = read_json(path, "dataset.json", hint=f"is {dataset_dir} a dataset directory?")
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not a dataset.json (expected an object)")
    if "total_puzzles" not in raw:  # HRM-era files lack it; it equals len(puzzle_indices) - 1
        idx = load_array(Path(dataset_dir) / split / f"{SET_NAME}__puzzle_indices.npy", mmap=True)
        raw["total_puzzles"] = len(idx) - 1
    try:
        meta = DatasetMetadata(**raw)
    except ValidationError as e:
        raise DataError(f"{path}: not a dataset.json: {validation_line(e)}") from None
    if meta.sets != [SET_NAME]:  # every reader takes the arrays of the set 'all' alone: another set was read as it
        # set names are data: a path among them is said as one
        if bad := next((problem for name in meta.sets if (problem := name_problem(name))), None):
            raise DataError(f"{path}: sets: a set name {bad} (sets are files of the split's folder, named by a plain "
                            "name)")
        raise DataError(f"{path}: sets {clipped(meta.sets)}: a split of this package is the one set "
                        f"{SET_NAME!r} ({SET_NAME}__*.npy) and no other is read; rebuild it as one set")
    return meta


def load_split(dataset_dir: str | os.PathLike, split: str) -> Split:
    """A split's metadata and arrays, each array checked to be integers of its rank (token rows are 2-D, the
    index arrays 1-D): a float array would be cast to token ids silently, or its NaN stop a later check with a
    traceback; every reader (training, evaluation, verify) opens splits here."""
    meta = load_metadata(dataset_dir, split)
    d = Path(dataset_dir) / split
    arrays = {}
    for field in FIELDS:
        path = d / f"{SET_NAME}__{field}.npy"
        a = arrays[field] = load_array(path, mmap=field in ("inputs", "labels"))
        ndim = 2 if field in ("inputs", "labels") else 1
        if not np.issubdtype(a.dtype, np.integer) or a.ndim != ndim:
            raise DataError(f"{path}: dtype {a.dtype} with shape {a.shape}, expected a {ndim}-D integer array; "
                            "rebuild the dataset")
    return Split(name=split, metadata=meta, **arrays)


def load_array(path: Path, mmap: bool = False) -> np.ndarray:
    """One .npy array of a dataset (memory-mapped with `mmap`). `UnreadableFile` when it cannot be read (missing,
    no permission, a FIFO, device or directory: checked first, so that nothing waits on a FIFO), `DamagedFile`
    when its bytes are not a .npy array."""
    if not os.path.lexists(path):
        raise UnreadableFile(f"{path}: missing")
    readable_file(path, ".npy array")
    _check_declared_size(path)
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:  # EOFError: an empty file
        raise read_failure(e, path, ".npy array") or DamagedFile(f"{path}: unreadable or truncated .npy file: "
                                                                 f"{e}") from None
    if not isinstance(array, np.ndarray):  # a .npz archive under the name: np.load opens it as one
        array.close()
        raise DamagedFile(f"{path}: a .npz archive, not a .npy array")
    return array


def _check_declared_size(path: Path) -> None:
    """DamagedFile when a .npy file is empty, has no readable header, or holds fewer bytes than its header
    declares: np.load then allocated the declared shape first (10**12 entries were "out of memory", blamed on the
    batch settings) or ended in EOFError, a traceback."""
    with open_regular(path, ".npy array") as f:
        head = f.read(len(np.lib.format.MAGIC_PREFIX))
        if not head:
            raise DamagedFile(f"{path}: an empty file, not a .npy array; rebuild the dataset")
        if head != np.lib.format.MAGIC_PREFIX:
            if head.startswith(b"PK"):  # a .npz archive (a zip): load_array names it
                return
            # text, /etc/passwd linked in: numpy took it for a pickle and advised loading it unsafely
            raise DamagedFile(f"{path}: not a .npy array (no numpy header: it starts with {head[:8]!r}); rebuild "
                              "the dataset")
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _fortran, dtype = read(f)
        except (ValueError, EOFError, OSError) as e:  # a header holding a call: said without the parser's object
            said = re.sub(r"<[^<>]* object at 0x[0-9a-f]+>", "something other than plain values", str(e))
            raise read_failure(e, path, ".npy array") or DamagedFile(f"{path}: unreadable or truncated .npy file: "
                                                                     f"{said}") from None
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
    dtype = np.dtype(dtype)
    if dtype.hasobject:  # never unpickled (np.load's own refusal advised loading it unsafely)
        raise DamagedFile(f"{path}: a .npy array of Python objects (pickled data, never loaded: a dataset holds "
                          "numbers); rebuild the dataset")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if size - offset < declared:
        raise DamagedFile(f"{path}: its header declares shape {tuple(shape)} of {dtype} ({declared:,} bytes of data) "
                          f"but the file holds {size - offset:,}: truncated or edited; rebuild the dataset")


_TOKEN_CHUNK_ROWS = 1 << 16


def check_token_range(split_dir: Path, split: Split) -> None:
    """DataError naming the file and row of the first input or label token outside 0..vocab_size-1 (a label may
    also be the split's ignore_label_id). Reads the memory-mapped integer arrays (`load_split`) once, in chunks."""
    m = split.metadata
    # a training split whose every label is the ignore label teaches nothing: said, not refused (it is a dataset)
    unlearnable = split.name == "train" and m.ignore_label_id is not None and len(split.labels) > 0
    for name in ("inputs", "labels"):
        a = getattr(split, name)
        all_inside = np.issubdtype(a.dtype, np.unsignedinteger) and np.iinfo(a.dtype).max < m.vocab_size
        for start in range(0, len(a), _TOKEN_CHUNK_ROWS):
            if all_inside and not (unlearnable and name == "labels"):
                break  # nothing this dtype holds can be outside
            chunk = np.asarray(a[start:start + _TOKEN_CHUNK_ROWS])
            if name == "labels" and unlearnable:
                unlearnable = bool((chunk == m.ignore_label_id).all())
            if all_inside or not chunk.size or (int(chunk.min()) >= 0 and int(chunk.max()) < m.vocab_size):
                continue
            bad = (chunk < 0) | (chunk >= m.vocab_size)
            if name == "labels" and m.ignore_label_id is not None:
                bad &= chunk != m.ignore_label_id
            if bad.any():
                row = start + int(np.argmax(bad.any(axis=1)))
                token = int(chunk[row - start][bad[row - start]][0])
                raise DataError(f"{split_dir}/{SET_NAME}__{name}.npy: row {row} has token {token}, outside 0.."
                                f"{m.vocab_size - 1} (the vocabulary its dataset.json declares); rebuild the "
                                f"dataset, or correct its vocab_size")
    if unlearnable:
        log.warning("%s/%s__labels.npy: every label of the training split is the ignore label %d: no step can "
                    "learn from it (rebuild the dataset with its answers)", split_dir, SET_NAME, m.ignore_label_id)


def read_npy_header(path: str | os.PathLike) -> tuple[np.dtype, tuple[int, ...]]:
    """dtype and shape from a .npy header without reading the data."""
    with open_regular(path, ".npy array") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(f)
    return np.dtype(dtype), tuple(shape)


def load_identifiers(dataset_dir: str | os.PathLike) -> list[str]:
    path = dataset_path(dataset_dir) / "identifiers.json"
    ids = read_json(path, "identifiers.json")
    if not isinstance(ids, list) or not set(map(type, ids)) <= {str}:  # in C: a million names are read in training
        raise DataError(f"{path}: must be a JSON list of strings")
    return ids
