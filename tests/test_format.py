"""The on-disk format is upstream's: their reader must read ours and ours must read theirs."""

import json
import re

import numpy as np
import pytest

from trm_kaggle.data.format import (DatasetMetadata, DatasetWriter, NpyFile, load_metadata, load_split,
                                    read_npy_header, write_rows_at)
from trm_kaggle.data.verify import verify_dataset
from trm_kaggle.errors import DataError, TRMError

# field names of upstream's PuzzleDatasetMetadata (dataset/common.py at the pinned commit)
UPSTREAM_FIELDS = {"pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len",
                   "num_puzzle_identifiers", "total_groups", "mean_puzzle_examples", "total_puzzles", "sets"}


def write_like_upstream(root, seq_len=4, vocab=5, with_total_puzzles=True):
    """A dataset written the way upstream's builders do (np.save of whole arrays, json.dump)."""
    rng = np.random.default_rng(0)
    for split, n_puzzles in (("train", 3), ("test", 1)):
        d = root / split
        d.mkdir(parents=True)
        counts = rng.integers(1, 4, size=n_puzzles)
        n = int(counts.sum())
        np.save(d / "all__inputs.npy", rng.integers(0, vocab, size=(n, seq_len)).astype(np.uint8))
        np.save(d / "all__labels.npy", rng.integers(0, vocab, size=(n, seq_len)).astype(np.uint8))
        np.save(d / "all__puzzle_indices.npy", np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        np.save(d / "all__puzzle_identifiers.npy", np.arange(1, n_puzzles + 1, dtype=np.int32))
        np.save(d / "all__group_indices.npy", np.array([0, n_puzzles], dtype=np.int32))
        meta = dict(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=vocab, seq_len=seq_len,
                    num_puzzle_identifiers=4, total_groups=1, mean_puzzle_examples=n / n_puzzles, sets=["all"])
        if with_total_puzzles:
            meta["total_puzzles"] = n_puzzles
        (d / "dataset.json").write_text(json.dumps(meta))
    (root / "identifiers.json").write_text(json.dumps(["<blank>", "a", "b", "c"]))


def test_metadata_fields_are_upstreams():
    assert set(DatasetMetadata.model_fields) == UPSTREAM_FIELDS


@pytest.mark.parametrize("with_total_puzzles", [True, False])
def test_we_read_upstream_datasets(tmp_path, with_total_puzzles):
    write_like_upstream(tmp_path / "up", with_total_puzzles=with_total_puzzles)
    s = load_split(tmp_path / "up", "train")
    assert s.metadata.total_puzzles == 3 and isinstance(s.inputs, np.memmap)
    verify_dataset(tmp_path / "up")


def test_upstream_reader_reads_ours(tmp_path):
    out = tmp_path / "ds"
    with DatasetWriter(out, seq_len=6, vocab_size=7) as w:
        w.identifiers = ["<blank>", "p1", "p2"]
        w.train.add_puzzle(np.ones((2, 6)), np.full((2, 6), 2), identifier=1)
        w.train.add_puzzle(np.ones((1, 6)), np.full((1, 6), 3), identifier=2)
        w.train.end_group()
        w.test.add_puzzle(np.ones((1, 6)), np.ones((1, 6)), identifier=1)
    # what upstream's PuzzleDataset does: dataset.json into its pydantic model, np.load with mmap for inputs
    for split in ("train", "test"):
        meta = json.loads((out / split / "dataset.json").read_text())
        assert set(meta) == UPSTREAM_FIELDS and meta["sets"] == ["all"]
        for field, mode in (("inputs", "r"), ("labels", "r"), ("puzzle_identifiers", None),
                            ("puzzle_indices", None), ("group_indices", None)):
            arr = np.load(out / split / f"all__{field}.npy", mmap_mode=mode)
            assert arr.dtype == (np.uint8 if field in ("inputs", "labels") else np.int32)
    x = np.load(out / "train" / "all__labels.npy")
    assert x.tolist() == [[2] * 6, [2] * 6, [3] * 6]
    assert np.load(out / "train" / "all__puzzle_indices.npy").tolist() == [0, 2, 3]
    assert json.loads((out / "identifiers.json").read_text()) == ["<blank>", "p1", "p2"]


def test_npy_file_append_and_positioned_writes(tmp_path):
    f = NpyFile(tmp_path / "a.npy", np.uint8, 3)
    f.append(np.array([[1, 2, 3]]))
    f.append(np.array([[4, 5, 6], [7, 8, 9]]))
    f.close()
    assert np.load(tmp_path / "a.npy").tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    g = NpyFile(tmp_path / "b.npy", np.uint16, 2)
    g.preallocate(3)
    g.close()
    write_rows_at(tmp_path / "b.npy", np.uint16, 2, 2, np.array([[500, 7]]))
    write_rows_at(tmp_path / "b.npy", np.uint16, 2, 0, np.array([[1, 2], [3, 4]]))
    assert np.load(tmp_path / "b.npy").tolist() == [[1, 2], [3, 4], [500, 7]]
    assert read_npy_header(tmp_path / "b.npy") == (np.dtype(np.uint16), (3, 2))


def test_writer_rejects_tokens_outside_vocabulary(tmp_path):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        with DatasetWriter(tmp_path / "ds", seq_len=2, vocab_size=3) as w:
            w.train.add_puzzle(np.array([[0, 3]]), np.array([[0, 1]]))
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob("ds.partial-*"))


def test_load_split_errors_are_clear(tmp_path):
    with pytest.raises(DataError, match="dataset.json: dataset.json not found .is .* a dataset directory"):
        load_split(tmp_path, "train")
    write_like_upstream(tmp_path / "up")
    (tmp_path / "up" / "train" / "all__labels.npy").write_bytes(b"garbage")
    with pytest.raises(DataError, match="all__labels.npy: not a .npy array"):
        load_split(tmp_path / "up", "train")
    # a split is a folder of the dataset, never a path out of it
    write_like_upstream(tmp_path / "other")
    for split in ("../other/train", "..", "a/b"):
        with pytest.raises(DataError, match=f"{tmp_path / 'up'}: split '.*"):
            load_split(tmp_path / "up", split)


def test_atomic_directory_keeps_target_on_failure(tmp_path):
    with DatasetWriter(tmp_path / "up", seq_len=4, vocab_size=5) as w:  # ours: replaceable
        w.train.add_puzzle(np.zeros((1, 4)), np.zeros((1, 4)))
    before = (tmp_path / "up" / "identifiers.json").read_text()
    with pytest.raises(RuntimeError):
        with DatasetWriter(tmp_path / "up", seq_len=4, vocab_size=5) as w:
            w.train.add_puzzle(np.ones((1, 4)), np.ones((1, 4)))
            raise RuntimeError("boom")
    assert (tmp_path / "up" / "identifiers.json").read_text() == before
    assert not list(tmp_path.glob("up.partial-*"))


def test_output_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(TRMError, match="not a directory"):
        with DatasetWriter(tmp_path / "f", seq_len=1, vocab_size=2):
            pass


def test_written_files_are_readable_by_others(tmp_path):
    """Datasets and exports are shared (Kaggle datasets, teammates): not private 0600 temp-file modes."""
    import stat

    with DatasetWriter(tmp_path / "ds", seq_len=2, vocab_size=3) as w:
        w.train.add_puzzle(np.ones((1, 2)), np.ones((1, 2)))
    for p in (tmp_path / "ds").rglob("*"):
        if p.is_file():
            assert p.stat().st_mode & stat.S_IROTH, p


def test_a_dataset_directory_that_is_a_loop_of_links_is_named_as_one(tmp_path):
    """From Python, `a -> b -> a` as the data said "dataset directory not found (Too many levels of symbolic
    links)": a folder to look for, where a link to remove stands."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for read in (lambda p: load_metadata(p, "train"), lambda p: load_split(p, "train"), verify_dataset):
        with pytest.raises(DataError) as e:
            read(tmp_path / "a")
        assert str(e.value) == f"{tmp_path / 'a'}: dataset directory is a loop of symbolic links (a dangling " \
                               "link): remove the link", str(e.value)
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'a' / 'ds'}: dataset directory cannot be reached: "
                                                  "a folder on its path is a loop of symbolic links")):
        verify_dataset(tmp_path / "a" / "ds")


@pytest.mark.parametrize("content, said", [
    (b"hello world", "not a .npy array (no numpy header: it starts with b'hello ')"),
    ("object", "a .npy array of Python objects (pickled data, never loaded"),
    ("call", "something other than plain values"),
])
def test_a_file_that_is_no_npy_array_is_named_as_what_it_is(tmp_path, content, said):
    """Text (or /etc/passwd linked in) in a dataset's .npy slot, and an array of Python objects, were "This file
    contains pickled (object) data. If you trust the file you can load it unsafely...": numpy's advice to
    unpickle an untrusted file. A header holding a call was named by the parser's object address."""
    from trm_kaggle.data.format import load_array
    from trm_kaggle.errors import DamagedFile

    path = tmp_path / "all__inputs.npy"
    if content == "object":
        np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    elif content == "call":
        header = "{'descr': __import__('os').getcwd(), 'fortran_order': False, 'shape': (1,), }"
        path.write_bytes(b"\x93NUMPY\x01\x00" + len(header + "\n").to_bytes(2, "little") + header.encode() + b"\n")
    else:
        path.write_bytes(content)
    with pytest.raises(DamagedFile) as e:
        load_array(path)
    assert said in str(e.value) and "unsafely" not in str(e.value) and " at 0x" not in str(e.value), e.value


@pytest.mark.parametrize("labels, warned", [(0, True), (1, False)])
def test_a_training_split_whose_every_label_is_ignored_is_said_by_verify_and_the_loader(tmp_path, caplog, labels,
                                                                                        warned):
    from trm_kaggle.data import PuzzleLoader

    write_like_upstream(tmp_path / "up")
    for split in ("train", "test"):  # the test split too: verify says it apart (test_verify), the loader does not
        path = tmp_path / "up" / split / "all__labels.npy"
        np.save(path, np.full_like(np.load(path), labels))
    for read in (lambda: verify_dataset(tmp_path / "up"), lambda: PuzzleLoader(tmp_path / "up", "train", 2)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="trm_kaggle.data.format"):
            read()
        said = [r.getMessage() for r in caplog.records if r.name == "trm_kaggle.data.format"]
        if warned:
            assert len(said) == 1 and re.search(r"train/all__labels.npy: every label of the training split is the "
                                                r"ignore label 0", said[0]), said
        else:
            assert said == []
