"""What a dataset holds, recorded by its builder: `contents.json` lists every file with its size, its sha256
and the sha256 of a few evenly spaced blocks of it.

A training run records the dataset it started on (`dataset_fingerprint` in `trm_kaggle.train.checkpoint`)
and a resume refuses another one. Sizes alone miss a dataset rebuilt in place with other contents and the
same shapes (another seed, other tasks of the same count); the record's overall hash does not. Checking it
is cheap: each file's size and sampled blocks are compared (a few MiB read, however large the dataset), so
a file replaced after the build is caught as well. `trm-kaggle verify` compares the full hashes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import BinaryIO

from trm_kaggle.atomic import OWNER_RECORD, atomic_write_json
from trm_kaggle.config import path_argument
from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import directory_problem, open_regular, read_json
from trm_kaggle.names import relative_path_problem, shown

CONTENTS_FILE = "contents.json"
CONTENTS_FORMAT = "trm_kaggle.dataset_contents"
_NOT_CONTENT = {CONTENTS_FILE, OWNER_RECORD, "build_info.json"}  # build_info.json: how, not what (it has timings)
_BLOCK, _BLOCKS = 1 << 16, 16  # sampled: 16 blocks of 64 KiB per file


def _sampled_sha256(f: BinaryIO, size: int) -> str:
    h = hashlib.sha256()
    if size <= _BLOCK * _BLOCKS:
        f.seek(0)
        h.update(f.read())
    else:
        for i in range(_BLOCKS):
            f.seek((size - _BLOCK) * i // (_BLOCKS - 1))
            h.update(f.read(_BLOCK))
    return h.hexdigest()


def _full_sha256(f: BinaryIO) -> str:
    f.seek(0)
    return hashlib.file_digest(f, "sha256").hexdigest()


def _content_files(dataset_dir: Path) -> list[str]:
    return sorted(p.relative_to(dataset_dir).as_posix() for p in dataset_dir.rglob("*")
                  if p.is_file() and p.relative_to(dataset_dir).as_posix() not in _NOT_CONTENT)


def write_contents(dataset_dir: str | os.PathLike) -> str:
    """Record every file of a dataset being built (the builder calls this last); returns the overall hash."""
    root = Path(dataset_dir)
    files = {}
    for rel in _content_files(root):
        with open_regular(root / rel, "dataset file") as f:
            size = os.fstat(f.fileno()).st_size
            files[rel] = {"size": size, "sha256": _full_sha256(f), "sampled_sha256": _sampled_sha256(f, size)}
    overall = _overall(files)
    atomic_write_json(root / CONTENTS_FILE, {"format": CONTENTS_FORMAT, "sha256": overall, "files": files}, indent=1)
    return overall


def _overall(files: dict) -> str:
    """The hash of a whole dataset: of its files' names and full hashes, in name order."""
    return hashlib.sha256("".join(f"{rel}\0{files[rel]['sha256']}\n" for rel in sorted(files)).encode()).hexdigest()


def _record(root: Path) -> dict | None:
    path = root / CONTENTS_FILE
    if not os.path.lexists(path):  # a FIFO or a directory in its place is refused by the reader, not ignored
        return None
    record = read_json(path, CONTENTS_FILE)
    if not isinstance(record, dict) or record.get("format") != CONTENTS_FORMAT or \
            not isinstance(record.get("files"), dict) or not isinstance(record.get("sha256"), str):
        raise DataError(f"{path}: not a dataset contents record")
    return record


def contents_hash(dataset_dir: str | os.PathLike, full: bool = False) -> str | None:
    """The recorded hash of a dataset's contents after checking its files against the record (sizes and sampled
    blocks; every byte with `full`); None for a dataset built before records (nothing to check).
    A file that differs from the record is a DataError naming it."""
    root = Path(path_argument("dataset_dir", dataset_dir))  # '' was the current folder's record
    record = _record(root)
    if record is None:
        return None
    for rel, want in record["files"].items():
        if problem := relative_path_problem(rel):  # a name read from a file: never a path outside the dataset
            raise DataError(f"{root / CONTENTS_FILE}: the file name {problem}")
        if not isinstance(want, dict):
            raise DataError(f"{root / CONTENTS_FILE}: the entry of {shown(rel)} is not an object")
        path = root / rel
        if not os.path.lexists(path):
            # a folder on the way that is something else (a FIFO in place of test/) is named as what it is
            folder = next((p for p in reversed(path.relative_to(root).parents) if str(p) != "."
                           and directory_problem(root / p)), None)
            why = (f"{directory_problem(root / folder, 'folder')}, where {rel} should be" if folder is not None
                   else f"{path}: missing")
            raise DataError(f"{why} (listed in {root / CONTENTS_FILE}); the dataset was changed after it was "
                            f"built: rebuild it")
        with open_regular(path, "dataset file") as f:  # a FIFO never blocks; no permission is not a change
            size = os.fstat(f.fileno()).st_size
            same = size == want.get("size") and (_full_sha256(f) == want.get("sha256") if full else
                                                 _sampled_sha256(f, size) == want.get("sampled_sha256"))
        if not same:
            raise DataError(f"{path}: differs from the contents its builder recorded in {root / CONTENTS_FILE} "
                            f"(changed or replaced after the build): rebuild the dataset")
    if not all(isinstance(want.get("sha256"), str) for want in record["files"].values()) or \
            _overall(record["files"]) != record["sha256"]:  # an entry taken out, or its hashes edited: the files
        raise DataError(f"{root / CONTENTS_FILE}: its list of files does not add up to its recorded hash (edited "
                        f"after the build): rebuild the dataset")  # it no longer lists were never checked
    return record["sha256"]
