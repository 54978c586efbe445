"""Kaggle datasets with folders, shipped whole: one archive beside a manifest of every file inside it.

An upload to Kaggle (the `kaggle` client, or `kaggle datasets create -p DIR` by hand) sends the files of DIR,
not its subfolders, so a dataset with folders (a built dataset's `train/` and `test/`, a run's `run/` and
`weights/`) would arrive without them. Such a dataset is packed instead (`pack`): DIR holds `<name>.tar`
(uncompressed; entries sorted, owners and times fixed) and `manifest.json`, whose `archive` entry lists every
file inside the archive with its size and sha256 (its `files` list the archive itself, as every manifest of
the bundle does).

Inside the kernel `open_packed` checks the archive against the manifest and unpacks it into a scratch folder
(`<stem>-<digest>/`, built beside and renamed into place: a kill leaves no half folder; found again, it is
reused), or, when Kaggle unpacked the archive itself, checks its files where they are (in DIR, or in
DIR/<stem>/). A file missing, cut short or changed, an entry that is a link or leaves its folder, names that
cannot all be files of one folder (a file and a folder of one name, two spellings of one path, a name too long),
stops with one line naming the archive and the entry: a run is never started on part of its data, nor restarted
for want of its state.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable

from trm_kaggle.atomic import OWNER_RECORD, atomic_directory, owner_problem
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.jsonio import READ_FAILURES, cannot_read, is_regular, open_regular, read_json
from trm_kaggle.kaggle.metadata import DATASET_META, MANIFEST, sha256_file, verify_manifest
from trm_kaggle.names import name_problem

ARCHIVE_KEY = "archive"  # manifest.json's entry for the packed folder
UNPACKED = "unpacked kaggle dataset"  # the kind of the scratch folders (their owner record)
_SKIPPED = {MANIFEST, DATASET_META, OWNER_RECORD}


class _Hashing:
    """A file read by tarfile, hashed on the way."""

    def __init__(self, f: BinaryIO):
        self.f, self.sha = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.sha.update(data)
        return data


def pack(src: str | os.PathLike, dest: str | os.PathLike, name: str,
         keep: Callable[[str], bool] = lambda rel: True,
         linked_in: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """`dest/<name>` (a tar) of every file under `src` whose relative path `keep` accepts (bookkeeping files
    never); returns the manifest's `archive` entry: {"name": name, "files": {path: {"sha256", "size"}}}. A file
    linked in from outside `src` is packed and told to `linked_in(rel, target)` (the user's own dataset, a big
    file linked in to save space), or, with no `linked_in`, refused (a downloaded kernel output: a link in it would
    publish this machine's file it points to)."""
    if problem := name_problem(name):  # '../evil' was a path out of dest
        raise ValueError(f"pack: the archive's name {problem}")
    src = Path(src)
    files: dict[str, dict[str, Any]] = {}
    top = os.path.realpath(src)
    if os.path.commonpath([top, os.path.realpath(dest)]) == top:  # the archive would be written among what it packs
        raise ValueError(f"pack: the archive's folder {dest} lies inside the folder packed, {src}")
    with tarfile.open(Path(dest) / name, "w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(src.rglob("*")):
            rel = p.relative_to(src).as_posix()
            if (p.parent == src and p.name in _SKIPPED) or p.name == OWNER_RECORD or not keep(rel):
                continue
            # A file linked in is the dataset's as much as any other (`verify` reads through links): its bytes are
            # packed, read through the one gate (a FIFO, device or /proc file is refused, never waited on); one from
            # outside the folder is said (/etc/passwd linked in would be published), or refused (`linked_in`)
            if p.is_symlink() and os.path.lexists(target := os.path.realpath(p)) \
                    and os.path.commonpath([top, target]) != top:
                if linked_in is None:
                    raise TRMError(f"{p}: a symbolic link to {target}, outside {src}: this dataset packs its own "
                                   "folder's files only (packed, the file it points to would be published with "
                                   "it); copy the file in, or remove the link")
                if is_regular(p, "dataset file"):
                    linked_in(rel, target)
            if not is_regular(p, "dataset file"):
                continue  # a folder (its files come on their own), or nothing (a dangling link: `verify` says it)
            info = tarfile.TarInfo(rel)
            with open_regular(p, "dataset file") as f:
                info.size, info.mtime, info.mode = os.fstat(f.fileno()).st_size, 0, 0o644
                reader = _Hashing(f)
                tar.addfile(info, reader)
            files[rel] = {"sha256": reader.sha.hexdigest(), "size": info.size}
    if not files:
        raise TRMError(f"{src}: no files to pack")
    return {"name": name, "files": files}


def packed_manifest(folder: Path) -> dict | None:
    """The manifest of a packed dataset in `folder` (one with an `archive` entry), else None."""
    path = folder / MANIFEST
    if not is_regular(path, MANIFEST):
        return None
    manifest = read_json(path, MANIFEST)
    return manifest if isinstance(manifest, dict) and ARCHIVE_KEY in manifest else None


def _checked_entry(folder: Path, manifest: dict) -> tuple[str, dict[str, dict]]:
    """(archive name, {path: {sha256, size}}) of a manifest, every name checked: a plain .tar file name, and
    relative paths that stay inside their folder (names read from a file never become paths unchecked)."""
    where = folder / MANIFEST
    entry = manifest.get(ARCHIVE_KEY)
    name = entry.get("name") if isinstance(entry, dict) else None
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".tar") or not isinstance(files, dict) \
            or not files:
        raise TRMError(f"{where}: its '{ARCHIVE_KEY}' entry must name a .tar file in {folder} and list its files")
    for rel, f in files.items():
        parts = PurePosixPath(rel).parts
        if not rel or rel.startswith("/") or ".." in parts or "\\" in rel or "\0" in rel or not isinstance(f, dict) \
                or not isinstance(f.get("size"), int) or not isinstance(f.get("sha256"), str):
            raise TRMError(f"{where}: entry {rel!r} is not a file inside the archive with its size and sha256")
    if problem := _clash(files):
        raise TRMError(f"{folder / name}: {problem} (names listed in {where}): its files cannot all be unpacked; "
                       "pack and upload the dataset again")
    return name, files


NAME_MAX, PATH_MAX = 255, 4096  # bytes: the longest name of one file, and of a path, a Linux file system takes


def _clash(files: dict[str, dict]) -> str | None:
    """Why the archive's names cannot all be files of one folder, or None: a name of no file (`.`), one too long
    for the file system, two spellings of one path (`a//b` and `a/b`, `./a` and `a`), or a file that is also the
    folder of another (`a` and `a/b`). Unpacked, each ended in the system's error naming the scratch folder."""
    paths: dict[str, str] = {}  # the path as the file system reads it -> the name as listed
    for rel in files:
        parts = PurePosixPath(rel).parts
        if not parts:
            return f"{_clipped(rel)} names no file"
        size = len(rel.encode("utf-8", "surrogatepass"))
        if size > PATH_MAX or any(len(p.encode("utf-8", "surrogatepass")) > NAME_MAX for p in parts):
            return (f"{_clipped(rel)} is a name too long for a file system (over {NAME_MAX} bytes in one part, or "
                    f"{PATH_MAX} in all; {size:,} bytes)")
        path = "/".join(parts)
        if path in paths:
            return f"{_clipped(paths[path])} and {_clipped(rel)} are one path"
        paths[path] = rel
    for path, rel in paths.items():
        parts = path.split("/")
        for n in range(1, len(parts)):
            if (above := "/".join(parts[:n])) in paths:
                return f"{_clipped(paths[above])} is a file and the folder of {_clipped(rel)}"
    return None


def _clipped(rel: str) -> str:
    """A name as an error line shows it: escaped, its middle left out past 80 characters."""
    return repr(rel) if len(rel) <= 80 else f"{rel[:40]!r}...{rel[-30:]!r} ({len(rel):,} characters)"


def _checked_archive(folder: Path, manifest: dict, name: str) -> dict:
    """The manifest's `files` entry of the archive `name` ({size, sha256}), the archive checked against it."""
    archive = folder / name
    listed = manifest.get("files")
    outer = listed.get(name) if isinstance(listed, dict) else None
    if not (isinstance(outer, dict) and isinstance(outer.get("size"), int)  # the digest names the unpacked
            and re.fullmatch(r"[0-9a-f]{64}", str(outer.get("sha256")))):  # folder: read from a file, checked
        raise TRMError(f"{folder / MANIFEST}: its 'files' entry must give {name} with its size and sha256")
    size = archive.stat().st_size
    if size != outer.get("size"):
        raise TRMError(f"{archive}: differs from {folder / MANIFEST} (size {size:,} bytes, manifest "
                       f"{outer.get('size'):,}): the upload was cut short or changed; upload it again")
    if (digest := sha256_file(archive)) != outer.get("sha256"):  # the same size: a byte changed
        raise TRMError(f"{archive}: differs from {folder / MANIFEST} (sha256 {digest[:16]}..., manifest "
                       f"{outer['sha256'][:16]}...; the same size): the upload was changed; upload it again")
    return outer


def check_packed(folder: str | os.PathLike) -> int:
    """Before an upload: the packed dataset in `folder` checked as the kernel's `open_packed` will check it,
    without unpacking anything: the folder against its manifest (`verify_manifest`: the archive listed, nothing
    else there), and every entry inside the archive against the manifest's `archive` block. A bundle whose
    data the session would refuse is never published. TRMError naming the first difference; returns the count
    of files inside the archive."""
    folder = Path(folder)
    manifest = packed_manifest(folder)
    if manifest is None:
        raise TRMError(f"{folder / MANIFEST}: not the manifest of a packed dataset (no '{ARCHIVE_KEY}' entry); "
                       "rebuild the bundle")
    name, files = _checked_entry(folder, manifest)
    verify_manifest(folder, required=[name])
    _checked_archive(folder, manifest, name)
    _unpack(folder / name, None, files)
    return len(files)


def open_packed(folder: str | os.PathLike, scratch: str | os.PathLike, say: Callable[[str], None] = print) -> Path:
    """The folder holding the packed dataset of `folder`, every file checked against its manifest: unpacked
    into `scratch`, or where Kaggle unpacked it. TRMError naming the first file that is missing or differs, or
    that cannot be read (no permission, a failing disk: said as such, never as damage)."""
    folder = Path(folder)
    try:
        return _open_packed(folder, Path(scratch), say)
    except OSError as e:  # its archive or a file beside it unreadable (raised raw, it was the session's "error")
        if e.errno in READ_FAILURES and e.filename is not None:
            raise TRMError(f"{folder}: " + cannot_read(e.filename, "a file of this packed dataset", e)) from None
        raise TRMError(f"{folder}: {os_error_line(e)}") from None


def _open_packed(folder: Path, scratch: Path, say: Callable[[str], None]) -> Path:
    manifest = packed_manifest(folder)
    if manifest is None:
        raise TRMError(f"{folder}: no {MANIFEST} of a packed dataset")
    name, files = _checked_entry(folder, manifest)
    archive = folder / name
    if is_regular(archive, name):  # a FIFO, a device or a kernel file there is named as what it is, never missing
        outer = _checked_archive(folder, manifest, name)
        dest = Path(scratch) / f"{Path(name).stem}-{outer['sha256'][:16]}"
        if dest.is_symlink():  # unpacked again through it, the folder it points to (an input) was replaced
            raise TRMError(f"{dest} is a symbolic link to {os.path.realpath(dest)}: an unpacked dataset is never "
                           "read or written through a link; remove the link")
        # A copy of ours from an earlier training session is reused only when every file's digest is the
        # manifest's; a damaged one (a cut copy, a changed byte) is unpacked again from the checked archive
        if dest.is_dir() and owner_problem(dest, UNPACKED) is None:
            damage = _problem(dest, files, digests=True)
            if damage is None:
                say(f"{folder}: {len(files)} files of {name}, unpacked before in {dest}, checked")
                return dest
            say(f"{folder}: the copy unpacked before in {dest} is damaged ({damage}): unpacking it again")
        with atomic_directory(dest, kind=UNPACKED) as tmp:
            _unpack(archive, tmp, files)
        say(f"{folder}: {len(files)} files of {name} checked and unpacked in {dest}")
        return dest
    for root in (folder, folder / Path(name).stem):  # unpacked by Kaggle: in place, or in a folder of its name
        if all(is_regular(root / rel, "dataset file") for rel in files):
            problem = _problem(root, files, digests=True)
            if problem:
                raise TRMError(f"{folder}: {problem}")
            say(f"{folder}: {len(files)} files of {name} found unpacked in {root}, checked")
            return root
    missing = next(rel for rel in files if not (folder / rel).is_file())
    if archive.is_dir():  # there, but not as the archive (nor holding its files): not "missing"
        raise TRMError(f"{archive}: a folder where {MANIFEST} names the archive of {len(files)} files (a .tar file), "
                       f"and the files are not unpacked beside it: upload the dataset again")
    raise TRMError(f"{folder}: neither {name} nor its {len(files)} files ({missing}, ...) are there, though "
                   f"{MANIFEST} lists them: the upload is incomplete; upload the dataset again")


def _problem(root: Path, files: dict[str, dict], digests: bool) -> str | None:
    """Why the files under `root` are not those of the manifest (sizes; with `digests` sha256 too), or None."""
    for rel, f in files.items():
        path = root / rel
        if not is_regular(path, "dataset file"):  # a special file is refused by name, never called missing
            return f"{path}: listed in {MANIFEST} but missing"
        if (size := path.stat().st_size) != f["size"]:
            return f"{path}: differs from {MANIFEST} (size {size:,} bytes, manifest {f['size']:,})"
        if digests and (digest := sha256_file(path)) != f["sha256"]:  # the same size: a byte changed
            return (f"{path}: differs from {MANIFEST} (sha256 {digest[:16]}..., manifest {str(f['sha256'])[:16]}...; "
                    "the same size)")
    return None


def _unpack(archive: Path, dest: Path | None, files: dict[str, dict]) -> None:
    """Every regular file of the archive into `dest`, each checked against the manifest as it is written (with
    no `dest`, only checked: nothing is written)."""
    seen, rel = set(), ""
    try:
        with tarfile.open(archive, "r:") as tar:
            for member in tar:
                if member.isdir():
                    continue
                rel = member.name
                if rel in seen:  # written twice, the second copy replaced the first one checked
                    raise TRMError(f"{archive}: holds {rel!r} twice")
                if rel not in files:
                    raise TRMError(f"{archive}: holds {rel!r}, which {MANIFEST} does not list")
                if not member.isreg():
                    raise TRMError(f"{archive}: {rel!r} is a link or a special file, not a regular file")
                want = files[rel]
                if member.size != want["size"]:
                    raise TRMError(f"{archive}: {rel} has {member.size:,} bytes, {MANIFEST} says {want['size']:,}")
                sha = hashlib.sha256()
                with tar.extractfile(member) as src, _sink(dest, rel) as out:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        sha.update(block)
                        out.write(block)
                if sha.hexdigest() != want["sha256"]:
                    raise TRMError(f"{archive}: {rel} differs from its sha256 in {MANIFEST}")
                seen.add(rel)
                rel = ""  # (a failing read of the next entry is the archive's, not this member's)
    except tarfile.TarError as e:
        raise TRMError(f"{archive}: not a readable tar archive ({e})") from None
    except OSError as e:  # a full disk, a name the scratch folder's file system refuses: said with the archive
        said = os_error_line(OSError(e.errno, e.strerror or str(e)))  # (the half-unpacked folder is removed)
        member = f"{_clipped(rel)} " if rel else ""
        where = f"unpacked into {dest.parent}" if dest is not None else "read"
        raise TRMError(f"{archive}: {member}could not be {where}: {said}") from None
    missing = sorted(set(files) - seen)
    if missing:
        raise TRMError(f"{archive}: lacks {len(missing)} file(s) {MANIFEST} lists ({missing[0]}, ...)")


def _sink(dest: Path | None, rel: str) -> BinaryIO:
    """Where an entry's bytes go: its file under `dest` (its folders made), or nowhere when only checked."""
    if dest is None:
        return open(os.devnull, "wb")
    target = dest.joinpath(*PurePosixPath(rel).parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    return open(target, "wb")


def open_all(root: str | os.PathLike, scratch: str | os.PathLike, say: Callable[[str], None] = print) -> list[Path]:
    """`open_packed` for every packed dataset under `root` (each folder holding such a manifest), in order."""
    return [open_packed(f, scratch, say) for f in manifest_folders(root) if packed_manifest(f) is not None]


def manifest_folders(root: str | os.PathLike) -> list[Path]:
    """Every folder under `root` holding a manifest, sorted: the packed datasets among them are those whose
    manifest has an archive entry (`packed_manifest`)."""
    return sorted({p.parent for p in Path(root).rglob(MANIFEST) if p.is_file()})
