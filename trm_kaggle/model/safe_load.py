"""Reading torch files without running their code, and without torch's own words on the console.

Every `.pt` file we read (a train state, upstream's `step_N` checkpoint) is loaded with `weights_only=True`:
a pickle of foreign objects is refused, never executed. For such a file torch also warns (a pickle protocol
it did not write, a storage type) before it refuses; the caller reports the file in one line of its own, so
the warning, with its source line from torch's site-packages, would only make that refusal three lines."""

from __future__ import annotations

import codecs
import os
import warnings
import zipfile
from pathlib import Path
from typing import IO, Any

import torch

from trm_kaggle.errors import DamagedFile
from trm_kaggle.jsonio import read_failure


def load_weights_only(source: Any, *, mmap: bool = False, path: str | os.PathLike | None = None, what: str = "",
                      said: str = "", guess: str = "") -> Any:
    """`torch.load(source)` on the CPU with `weights_only=True` (`mmap` for a path), torch's warnings silenced.
    With `path` (`source` the file open from it, `what` it is called in errors), a file torch cannot load is one
    line: `read_failure`'s for a failing read, else `torch_file_failure`'s (`said` and `guess`)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mmap:
                return torch.load(source, map_location="cpu", weights_only=True, mmap=True)
            return torch.load(source, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, foreign pickle, text, ...; a failing disk is no damage (`read_failure`)
        if path is None:
            raise
        raise read_failure(e, path, what) or torch_file_failure(e, source, path, said, guess) from None


def torch_file_failure(err: Exception, f: IO[bytes], path: str | os.PathLike, said: str, guess: str
                       ) -> DamagedFile:
    """The one line for `path` (open as `f`), which torch could not load: `said` (what it is not), then what its
    bytes show it is where they tell (an export's weights.safetensors was torch's "Weights only load failed", a
    text file "KeyError: 101"), else `guess` and torch's first sentence (the rest advises weights_only=False,
    which would run a pickle's code)."""
    kind = _foreign_kind(f)
    if kind is None:
        detail = (str(err).strip().splitlines() or [""])[0].split(". ")[0][:200]
        return DamagedFile(f"{path}: {said} ({guess}): {type(err).__name__}: {detail}")
    if kind == "a safetensors file" and Path(path).name == "weights.safetensors" \
            and (Path(path).parent / "config.json").is_file():
        kind = (f"the weights.safetensors of the export {Path(path).parent}, an export already: name that folder "
                "where weights are read (evaluate --weights, submit, train load_checkpoint=), no import needed")
    return DamagedFile(f"{path}: {said}: it is {kind}")


def _zip_without_pickle(f: IO[bytes]) -> bool:
    """Whether `f` is a readable zip archive none of whose members is a `data.pkl` (a damaged zip: False, so that
    torch's own words on the damage stand)."""
    try:
        f.seek(0)
        with zipfile.ZipFile(f) as archive:
            return not any(name.rsplit("/", 1)[-1] == "data.pkl" for name in archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False


def begins_as_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of `size` bytes beginning with `head` begins as a safetensors file does: the 8-byte length of
    a JSON header that follows it and fits in the file (a torch file begins with a zip's or a pickle's bytes, whose
    length would pass its end)."""
    return len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") <= size - 8


def _foreign_kind(f: IO[bytes]) -> str | None:
    """What a file torch could not load is, told by its first bytes, or None: a safetensors file (the 8-byte length
    of a JSON header that fits in the file), a numpy array, a zip archive that is no torch file, an empty file, or text (UTF-8, no control bytes)."""
    try:
        f.seek(0)
        head, size = f.read(4096), os.fstat(f.fileno()).st_size
    except (OSError, ValueError):
        return None
    if not head:
        return "an empty file"
    if begins_as_safetensors(head, size):
        return "a safetensors file"
    if head.startswith(b"\x93NUMPY"):
        return "a numpy .npy array"
    if head.startswith(b"PK\x03\x04") and _zip_without_pickle(f):  # torch's own files are zips holding data.pkl
        return "a zip archive but not a torch file (no data.pkl inside)"
    try:  # an incremental decoder: a character cut at the block's end is no error
        text = codecs.getincrementaldecoder("utf-8")().decode(head)
    except UnicodeDecodeError:
        return None
    if all(c.isprintable() or c in "\t\n\r\f" for c in text.removeprefix("\ufeff")):
        return "a text file"
    return None
