"""Writing job files: atomically, and never over a file someone edited (or that we did not write).

The output directory keeps a record, `.trm_kaggle_jobs` (JSON), of the SHA-256 of every file written
there. Writing again replaces a file only while it still holds what was written (its hash is in the
record); a file edited since, or one the record does not know, is refused with one line unless
`force`. Every file is checked before the first is written, so a refusal leaves the directory as it
was. A file whose new text equals the old one is left untouched. An input (the `--config` file) is
never overwritten, even with `force`.

Files of one sweep (`group`: the record says which group wrote each file) that the sweep no longer has (written
again with fewer runs) are removed, while they hold what was written: `kubectl apply -f DIR` would submit them
too. One edited since is refused with one line (never removed, even with `force`). A name in the record that is
not one this package writes (a hand edit, `../x`) is never touched.

The record is written before the files (listing the old and the new hash of each) and again after
them (the new hashes alone): a write interrupted half way never makes a file of ours look edited. The
writing holds the folder's lock (`trm_kaggle.locks`): a second launch writing there at once, which would
save a record without the first one's files, is refused in one line.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping, Sequence

from trm_kaggle.atomic import atomic_write_bytes, atomic_write_json
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import is_regular, read_json
from trm_kaggle.locks import directory_lock
from trm_kaggle.names import file_in, safe_filename
from trm_kaggle.outputs import JOBS_RECORD
from trm_kaggle.wording import command_line

# JSON without an extension: `kubectl apply -f DIR` reads every .json and .yaml file of DIR, hidden ones too
RECORD = JOBS_RECORD  # kept with the other names reserved for records (`outputs.RESERVED_NAMES`)
RECORD_FORMAT = "trm_kaggle.jobs"
JOB_FILE_SUFFIXES = (".yaml", ".sbatch")  # what `k8s` and `slurm` write: the only files ever removed here


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_record(out: Path) -> dict[str, list[str]]:
    """{file name: hashes it may hold as we wrote it}; an unreadable or foreign record counts as none."""
    return _read_record(out)[0]


def _read_record(out: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(`read_record`'s {file name: hashes}, {file name: the group that wrote it}), each entry checked for its type."""
    doc = _record(out)
    if doc is None:
        return {}, {}
    files = {k: [h for h in v if isinstance(h, str)] for k, v in doc["files"].items()
             if isinstance(k, str) and isinstance(v, list)}
    groups = doc.get("groups") if isinstance(doc.get("groups"), dict) else {}
    return files, {k: v for k, v in groups.items() if k in files and isinstance(v, str)}


def _record(out: Path) -> dict | None:
    """The record in `out` as this package writes it, or None (none there, unreadable, another format)."""
    path = out / RECORD
    if not is_regular(path, "job-files record"):  # a FIFO there is refused, not taken for no record and replaced
        return None
    try:
        doc = read_json(path, "job-files record")
    except TRMError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT or not isinstance(doc.get("files"), dict):
        return None
    return doc


def record_broken(out: Path) -> bool:
    """Whether `out` holds a record file this package cannot read (overwritten, another format): it counts as no
    record, and it is written again (`write_job_files`), even when every job file is unchanged (it was kept, and
    the next edit of a file could no longer be told from our own write)."""
    return out.is_dir() and is_regular(out / RECORD, "job-files record") and _record(out) is None


def _save_record(out: Path, files: Mapping[str, list[str]], groups: Mapping[str, str]) -> None:
    atomic_write_json(out / RECORD, {"format": RECORD_FORMAT, "files": dict(sorted(files.items())),
                                     "groups": {k: v for k, v in sorted(groups.items()) if k in files}}, indent=1)


def _ours_to_name(name: str) -> bool:
    """Whether `name`, read from the record, is one this package writes: a plain name in `out` (as `file_in` makes
    it) of a job file's kind. Only such a file is ever removed."""
    return name == safe_filename(name) and name.endswith(JOB_FILE_SUFFIXES)


def _stale(out: Path, texts: Mapping[str, str], group: str | None, record: Mapping[str, list[str]],
           groups: Mapping[str, str]) -> tuple[list[str], list[Path]]:
    """(names of the group's files the record lists and `texts` no longer has, the paths of those to remove: still
    holding what was written); TRMError for one changed since."""
    if group is None:
        return [], []
    gone = [name for name, g in groups.items() if g == group and name not in texts and _ours_to_name(name)]
    remove = []
    for name in gone:
        path = out / name
        if not os.path.lexists(path):
            continue  # removed already: only its entry goes
        if path.is_symlink() or not path.is_file() or digest(path.read_bytes()) not in record[name]:
            raise TRMError(f"{path}: was written here for {group}, which no longer has it, and was changed since; "
                           f"`{command_line('kubectl', 'apply', '-f', out)}` would submit it too: move it away (or choose another --out); "
                           "nothing was written")
        remove.append(path)
    return gone, remove


def _plan(out: Path, texts: Mapping[str, str], paths: Mapping[str, Path], force: bool,
          protected: set[Path]) -> tuple[dict[str, bytes], list[Path], dict[str, list[str]]]:
    """({name: data} to write, paths already holding their text, the record) or TRMError for the first refusal."""
    record = read_record(out) if out.is_dir() else {}
    todo, unchanged = {}, []
    for name, text in texts.items():
        path, data = paths[name], text.encode()
        if path.resolve() in protected:
            raise TRMError(f"{path}: is an input of this command (--config); choose another --out")
        if path.exists() or path.is_symlink():
            if not path.is_file() or path.is_symlink():
                raise TRMError(f"{path}: exists and is not a plain file; refusing to replace it")
            current = digest(path.read_bytes())
            if current == digest(data):
                unchanged.append(path)
                continue
            why = ("was not written by trm-kaggle" if name not in record else
                   "was edited since it was written" if current not in record[name] else None)
            if why and not force:
                raise TRMError(f"{path}: {why}; refusing to overwrite it (--force replaces it, or choose "
                               "another --out); nothing was written")
        todo[name] = data
    return todo, unchanged, record


def write_job_files(out: Path, texts: Mapping[str, str], *, force: bool = False,
                    inputs: Sequence[str | os.PathLike] = (),
                    group: str | None = None) -> tuple[list[Path], list[Path], list[Path]]:
    """Write `texts` ({file name: text}) into `out`, as the files of `group` (a sweep's: its files written here
    before and not in `texts` are removed; None: nothing is removed); returns (written, unchanged, removed) paths."""
    if out.exists() and not out.is_dir():
        raise TRMError(f"--out {out}: exists and is not a directory")
    paths = {name: file_in(out, name) for name in texts}  # names are ours, and still checked to stay inside
    protected = {Path(p).resolve() for p in inputs}

    def planned():  # every refusal before the first byte
        todo, unchanged, _ = _plan(out, texts, paths, force, protected)
        record, groups = _read_record(out) if out.is_dir() else ({}, {})
        gone, remove = _stale(out, texts, group, record, groups)
        settled = (not todo and not gone and all(groups.get(name) == group for name in texts)
                   and not record_broken(out))
        return todo, unchanged, record, groups, gone, remove, settled

    todo, unchanged, *_, settled = planned()
    if settled:
        return [], unchanged, []
    # one writer per folder (trm_kaggle.locks): two launches writing here at once would each save a record
    # without the other's files, which would then look foreign; under the lock the check runs again
    with directory_lock(out, "launch"):
        todo, unchanged, record, groups, gone, remove, settled = planned()
        if settled:
            return [], unchanged, []
        groups = {k: v for k, v in groups.items() if k not in texts}  # a file is the group's that writes it now
        if group is not None:
            groups.update(dict.fromkeys(texts, group))
        pending = dict(record)
        # the files that already hold their text are ours as much as the ones written now (a record written again
        # lists them too)
        hashes = {name: digest(texts[name].encode()) for name in texts if paths[name] in unchanged}
        hashes.update({name: digest(data) for name, data in todo.items()})
        for name, h in hashes.items():
            pending[name] = sorted({h, *record.get(name, [])})
        _save_record(out, pending, groups)
        for name, data in todo.items():
            atomic_write_bytes(paths[name], data)
        for path in remove:  # after the new files: an interrupted write leaves the old sweep's, still recorded
            path.unlink()
        final = {name: kept for name, kept in record.items() if name not in gone}
        final.update({name: [h] for name, h in hashes.items()})
        _save_record(out, final, groups)
    return [paths[name] for name in todo], unchanged, remove
