"""Datasets with folders shipped whole (trm_kaggle.kaggle.packed): one archive and a manifest of every file in it;
the kernel checks and unpacks it, or checks the files where Kaggle unpacked them; anything missing, cut short,
changed, linked or outside its folder is one error naming it, and nothing half unpacked is left."""

from __future__ import annotations

import io
import re
import json
import tarfile
from pathlib import Path

import pytest

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle.metadata import sha256_file, verify_manifest, write_manifest
from trm_kaggle.kaggle.packed import ARCHIVE_KEY, open_all, open_packed, pack, packed_manifest

FILES = {"identifiers.json": b'["<blank>"]', "train/dataset.json": b"{}", "train/all__inputs.npy": bytes(range(256)) * 40,
         "test/dataset.json": b'{"x": 1}', "deep/er/still/file.bin": b"\x00" * 5}


@pytest.fixture
def source(tmp_path) -> Path:
    root = tmp_path / "source"
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / ".hidden").write_text("bookkeeping")
    return root


def packed(tmp_path: Path, source: Path, name: str = "data.tar", linked_in=lambda rel, target: None) -> Path:
    out = tmp_path / "dataset"
    out.mkdir()
    entry = pack(source, out, name, keep=lambda rel: not rel.startswith("."), linked_in=linked_in)
    write_manifest(out, {ARCHIVE_KEY: entry})
    return out


def same_files(root: Path) -> bool:
    return all((root / rel).read_bytes() == data for rel, data in FILES.items())


def test_pack_and_open_round_trip(tmp_path, source):
    out = packed(tmp_path, source)
    assert sorted(p.name for p in out.iterdir()) == ["data.tar", "manifest.json"]  # flat: an upload sends it all
    assert verify_manifest(out) == 1 and set(packed_manifest(out)[ARCHIVE_KEY]["files"]) == set(FILES)
    said: list[str] = []
    root = open_packed(out, tmp_path / "scratch", say=said.append)
    assert root.parent == tmp_path / "scratch" and same_files(root) and not (root / ".hidden").exists()
    assert "checked and unpacked in" in said[-1]
    assert open_packed(out, tmp_path / "scratch", say=said.append) == root and "unpacked before" in said[-1]
    assert open_all(tmp_path, tmp_path / "scratch2", say=said.append) == [tmp_path / "scratch2" / root.name]
    # the archive is reproducible: the same files give the same bytes
    again = tmp_path / "again"
    again.mkdir()
    pack(source, again, "data.tar", keep=lambda rel: not rel.startswith("."))
    assert (again / "data.tar").read_bytes() == (out / "data.tar").read_bytes()


@pytest.mark.parametrize("where", ["in place", "in a folder of its name"])
def test_files_kaggle_unpacked_are_checked_where_they_are(tmp_path, source, where):
    out = packed(tmp_path, source)
    root = out if where == "in place" else out / "data"
    with tarfile.open(out / "data.tar") as tar:
        tar.extractall(root, filter="data")
    (out / "data.tar").unlink()
    assert open_packed(out, tmp_path / "scratch", say=lambda _: None) == root
    (root / "train" / "all__inputs.npy").write_bytes(b"x" * len(FILES["train/all__inputs.npy"]))  # same size
    with pytest.raises(TRMError, match="all__inputs.npy: differs from manifest.json"):
        open_packed(out, tmp_path / "scratch", say=lambda _: None)


def test_an_upload_without_its_archive_or_files_is_one_error(tmp_path, source):
    out = packed(tmp_path, source)
    (out / "data.tar").unlink()
    with pytest.raises(TRMError, match="neither data.tar nor its 5 files .* the upload is incomplete"):
        open_packed(out, tmp_path / "scratch", say=lambda _: None)


def test_an_archive_cut_short_is_refused_before_unpacking(tmp_path, source):
    out = packed(tmp_path, source)
    data = (out / "data.tar").read_bytes()
    (out / "data.tar").write_bytes(data[: len(data) // 2])
    with pytest.raises(TRMError, match="data.tar: differs from .*manifest.json .* cut short or changed"):
        open_packed(out, tmp_path / "scratch", say=lambda _: None)
    assert not (tmp_path / "scratch").exists() or not list((tmp_path / "scratch").iterdir())
    # one byte changed, the size kept: the line names the digest that differs, not two equal sizes
    (out / "data.tar").write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    with pytest.raises(TRMError, match=r"data.tar: differs from .*manifest.json \(sha256 [0-9a-f]{16}\.\.\., "
                                       r"manifest [0-9a-f]{16}\.\.\.; the same size\): the upload was changed"):
        open_packed(out, tmp_path / "scratch", say=lambda _: None)


def rewrite_archive(out: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    """Replace data.tar and record its new digest as the manifest's (a consistent upload of a bad archive)."""
    with tarfile.open(out / "data.tar", "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"]["data.tar"] = {"sha256": sha256_file(out / "data.tar"), "size": (out / "data.tar").stat().st_size}
    atomic_write_json(out / "manifest.json", manifest)


def info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.size, t.type, t.linkname = size, kind, link
    return t


@pytest.mark.parametrize("case, words", [
    ("changed member", "train/dataset.json differs from its sha256"),
    ("link", "'identifiers.json' is a link or a special file"),
    ("unlisted", "holds '../escape', which manifest.json does not list"),
    ("missing", "lacks 4 file(s)"),
])
def test_a_bad_archive_is_one_error_and_leaves_nothing(tmp_path, source, case, words):
    out = packed(tmp_path, source)
    good = {rel: data for rel, data in FILES.items()}
    if case == "changed member":
        members = [(info(r, len(d)), d if r != "train/dataset.json" else b"[]") for r, d in good.items()]
    elif case == "link":
        members = [(info("identifiers.json", kind=tarfile.SYMTYPE, link="/etc/passwd"), None)]
    elif case == "unlisted":
        members = [(info("../escape", 1), b"x")]
    else:
        members = [(info("identifiers.json", len(good["identifiers.json"])), good["identifiers.json"])]
    rewrite_archive(out, members)
    with pytest.raises(TRMError) as e:
        open_packed(out, tmp_path / "scratch", say=lambda _: None)
    assert words in str(e.value)
    leftovers = list((tmp_path / "scratch").glob("*")) if (tmp_path / "scratch").exists() else []
    assert leftovers == [] and not (tmp_path / "escape").exists()


@pytest.mark.parametrize("entry, words", [
    ({"name": "../data.tar", "files": {"a": {"sha256": "0", "size": 1}}}, "must name a .tar file"),
    ({"name": "data.tar", "files": {"../../etc/passwd": {"sha256": "0", "size": 1}}}, "is not a file inside"),
    ({"name": "data.tar", "files": {"/abs": {"sha256": "0", "size": 1}}}, "is not a file inside"),
    ({"name": "data.tar", "files": {}}, "must name a .tar file"),
])
def test_names_read_from_the_manifest_never_leave_the_folder(tmp_path, source, entry, words):
    out = packed(tmp_path, source)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest[ARCHIVE_KEY] = entry
    atomic_write_json(out / "manifest.json", manifest)
    with pytest.raises(TRMError, match=words):
        open_packed(out, tmp_path / "scratch", say=lambda _: None)


@pytest.mark.parametrize("damage", ["a changed byte", "a cut file", "a missing file"])
def test_a_damaged_copy_from_an_earlier_session_is_unpacked_again(tmp_path, source, damage):
    """The scratch copy is ours: a rerun whose earlier copy was damaged (same size or not) unpacks the checked
    archive again and says so, never trusting the copy nor blocking the rerun."""
    out = packed(tmp_path, source)
    root = open_packed(out, tmp_path / "scratch", say=lambda _: None)
    target = root / "train" / "all__inputs.npy"
    if damage == "a changed byte":
        data = bytearray(target.read_bytes())
        data[7] ^= 1
        target.write_bytes(bytes(data))
    elif damage == "a cut file":
        target.write_bytes(target.read_bytes()[:100])
    else:
        target.unlink()
    said: list[str] = []
    assert open_packed(out, tmp_path / "scratch", say=said.append) == root
    assert same_files(root) and "is damaged" in said[0] and "all__inputs.npy" in said[0], said
    assert "checked and unpacked in" in said[-1]
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == [root.name]  # nothing half done beside it


@pytest.mark.parametrize("files", [[], {"data.tar": "abc"}, {"data.tar": {"size": 1, "sha256": "../../x"}}])
def test_a_manifest_whose_files_entry_is_malformed_is_one_line_naming_it(tmp_path, source, files):
    """A 'files' that is a list, or an archive's entry that is a string, was "AttributeError: 'list' object has no
    attribute 'get'"; the digest names the unpacked folder, so it is checked too."""
    out = packed(tmp_path, source)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] = files
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TRMError, match="manifest.json: its 'files' entry must give data.tar with its size and sha256"):
        open_packed(out, tmp_path / "scratch")
    assert not (tmp_path / "scratch").exists()


def test_a_file_linked_into_the_dataset_is_packed_and_a_fifo_refused(tmp_path, source):
    """`verify` reads through links, but the packer skipped them: the copy on Kaggle then lacked a file (found
    only there). A linked file's bytes are packed; a FIFO in the dataset is one line, never waited on."""
    import os

    outside = tmp_path / "elsewhere.bin"
    (source / "train" / "all__inputs.npy").rename(outside)
    (source / "train" / "all__inputs.npy").symlink_to(outside)
    (source / "test" / "same.json").symlink_to("dataset.json")  # inside the folder: packed, nothing said
    linked: list[tuple[str, str]] = []
    out = packed(tmp_path, source, linked_in=lambda *link: linked.append(link))
    assert "train/all__inputs.npy" in packed_manifest(out)[ARCHIVE_KEY]["files"]
    assert linked == [("train/all__inputs.npy", str(outside))]  # told to the caller, who says it
    assert same_files(open_packed(out, tmp_path / "scratch", say=lambda _: None))
    os.mkfifo(source / "test" / "pipe")
    (tmp_path / "second").mkdir()
    with pytest.raises(TRMError, match=r"pipe: dataset file must be a regular file, not a pipe \(FIFO\)"):
        packed(tmp_path / "second", source)


@pytest.mark.parametrize("planted, words", [("fifo", "data.tar must be a regular file, not a pipe (FIFO)"),
                                            ("zero", "data.tar must be a regular file, not a character device"),
                                            ("folder", "a folder where manifest.json names the archive")])
def test_an_archive_that_is_a_special_file_is_named_never_called_missing(tmp_path, source, planted, words):
    """data.tar as a FIFO, a link to /dev/zero or a folder was "neither data.tar nor its files are there": a
    special file is named as what it is."""
    import os

    out = packed(tmp_path, source)
    archive = out / "data.tar"
    archive.unlink()
    {"fifo": lambda: os.mkfifo(archive), "zero": lambda: archive.symlink_to("/dev/zero"),
     "folder": lambda: archive.mkdir()}[planted]()
    with pytest.raises(TRMError, match=re.escape(words)):
        open_packed(out, tmp_path / "scratch", say=lambda _: None)
    assert not (tmp_path / "scratch").exists()


def archive_of(tmp_path: Path, members: list[tuple[str, bytes]], listed: list[str] | None = None) -> Path:
    """A packed dataset whose data.tar holds `members` (in that order) and whose manifest lists `listed` (each
    member's name by default) with their sizes and digests: a consistent upload of names made by hand."""
    import hashlib

    out = tmp_path / "dataset"
    out.mkdir()
    with tarfile.open(out / "data.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            tar.addfile(info(name, len(data)), io.BytesIO(data))
    data_of = dict(members)
    files = {rel: {"sha256": hashlib.sha256(data_of.get(rel, b"")).hexdigest(), "size": len(data_of.get(rel, b""))}
             for rel in (listed if listed is not None else [name for name, _ in members])}
    atomic_write_json(out / "manifest.json", {ARCHIVE_KEY: {"name": "data.tar", "files": files}, "files": {
        "data.tar": {"sha256": sha256_file(out / "data.tar"), "size": (out / "data.tar").stat().st_size}}})
    return out


@pytest.mark.parametrize("members, words", [
    ([("a", b"1"), ("a/b", b"2")], "'a' is a file and the folder of 'a/b'"),
    ([("a/b", b"2"), ("a", b"1")], "'a' is a file and the folder of 'a/b'"),
    ([("a//b", b"1"), ("a/b", b"1")], "'a//b' and 'a/b' are one path"),
    ([("./a", b"1"), ("a", b"1")], "'./a' and 'a' are one path"),
    ([(".", b"1")], "'.' names no file"),
    ([("x" * 300, b"1")], "(300 characters) is a name too long for a file system"),
    ([("/".join(["y" * 200] * 21), b"1")], "is a name too long for a file system"),
])
def test_names_that_cannot_all_be_files_are_refused_naming_the_archive(tmp_path, members, words):
    """Names of an archive that clash (a file and a folder of one name, two spellings of one path, `.`) or that
    no file system holds ended in the system's FileExistsError, IsADirectoryError or "File name too long" naming
    the scratch folder: now one line naming the archive, the manifest and the entry, and nothing unpacked."""
    out = archive_of(tmp_path, members)
    with pytest.raises(TRMError) as e:
        open_packed(out, tmp_path / "scratch", say=lambda _: None)
    assert str(e.value).startswith(f"{out / 'data.tar'}: ") and words in str(e.value), e.value
    assert str(out / "manifest.json") in str(e.value)
    assert not (tmp_path / "scratch").exists() or list((tmp_path / "scratch").glob("*")) == []


@pytest.mark.parametrize("members, listed, words", [
    ([("a", b"1"), ("a", b"1")], ["a"], "data.tar: holds 'a' twice"),
    ([("/".join(["y" * 200] * 20), b"1")], None, "could not be unpacked into"),  # short enough as a name, past the
])  # system's limit once under the scratch folder
def test_an_archive_unpacking_fails_on_is_one_line_naming_it(tmp_path, members, listed, words):
    out = archive_of(tmp_path, members, listed)
    scratch = tmp_path / ("s" * 100)  # the path under it is past 4,096 bytes
    with pytest.raises(TRMError) as e:
        open_packed(out, scratch, say=lambda _: None)
    assert str(e.value).startswith(f"{out / 'data.tar'}: ") and words in str(e.value), e.value
    assert list(scratch.glob("*")) == []


def test_a_link_out_of_the_folder_is_refused_where_no_one_says_it(tmp_path, source):
    """A downloaded kernel output (`--continue-from`) holding a link to /etc/passwd was packed through it: this
    machine's file would have been published with the run-state dataset. Without `linked_in` such a link is one
    line naming it and its target; a link that stays inside the folder is packed."""
    import os

    (source / "test" / "same.json").symlink_to("dataset.json")
    (source / "notes.txt").symlink_to("/etc/passwd")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TRMError, match=re.escape(f"{source / 'notes.txt'}: a symbolic link to /etc/passwd, outside "
                                                 f"{source}")):
        pack(source, out, "data.tar")
    os.unlink(source / "notes.txt")
    assert "test/same.json" in pack(source, out, "data.tar")["files"]


def test_an_archive_is_never_written_inside_what_it_packs_nor_outside_its_folder(tmp_path, source):
    """pack(src, src, 'x') wrote the archive into its own source; the name '../evil' made a path out of dest."""
    (tmp_path / "dest").mkdir()
    for dest, name, words in [(source, "x", "lies inside the folder packed"),
                              (source / "deep", "x", "lies inside the folder packed"),
                              (tmp_path / "dest", "../evil", "'../evil' holds '/'")]:
        with pytest.raises(ValueError, match=re.escape(words)):
            pack(source, dest, name)
    assert not (source / "x").exists() and not (source / "deep" / "x").exists() and not (tmp_path / "evil").exists()
