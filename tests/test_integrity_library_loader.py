"""PuzzleLoader called from Python with arguments it cannot use, or over a dataset changed under it: each is one
exception naming the argument or the file, never a batch from other rows, a silently cut number or a crash."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.data import PuzzleLoader, build_grid_dataset
from trm_kaggle.errors import DataError, TRMError

GROUPS = 8  # one puzzle of 2 examples each: puzzle p is identifier p + 1, examples 2p and 2p + 1


def build(out: Path, prefix: str = "a", shape: tuple[int, int] = (3, 3)) -> Path:
    rng = np.random.default_rng(0)

    def groups(tag: str, n: int):
        return [[(f"{tag}-{i}", [(g, g.T) for g in (rng.integers(1, 5, size=shape) for _ in range(2))])]
                for i in range(n)]

    build_grid_dataset(out, train=groups(prefix, GROUPS), test=groups(prefix + "t", 2), vocab_size=5,
                       grid_shape=shape)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("libloader") / "ds")


def loader(data: Path, **kw) -> PuzzleLoader:
    return PuzzleLoader(data, **{"global_batch_size": 4, "prefetch": 0, **kw})


def first_batches(L: PuzzleLoader, n: int = 2) -> list[list[int]]:
    it = iter(L)
    return [next(it)["puzzle_identifiers"].tolist() for _ in range(n)]


def test_a_group_filter_is_a_bool_mask_or_group_indices(data):
    mask = np.zeros(GROUPS, dtype=bool)
    mask[:2] = True
    want = {1, 2}  # groups 0 and 1 hold identifiers 1 and 2
    for given in (mask, [0, 1], np.array([1, 0, 1], dtype=np.int64)):
        L = loader(data)
        L.set_group_filter(lambda step, given=given: given)
        assert {i for batch in first_batches(L) for i in batch} == want
    # a 0/1 integer array as long as the groups are many was taken as indices: groups 0 and 1 of another meaning
    L = loader(data)
    L.set_group_filter(lambda step: mask.astype(int))
    with pytest.raises(TRMError, match=r"set_group_filter.*0/1 integer array.*pass a bool mask"):
        next(iter(L))
    for wrong, said in ((np.ones(3, bool), r"bool mask of 3 entries for 8 groups"),
                        (np.array([0.0, 1.0]), r"values of dtype float64"),
                        (np.array([2, 8]), r"group index 8, outside 0\.\.7"),
                        (np.array([-1, 3]), r"group index -1"),
                        (np.ones((2, 8), bool), r"2-D")):
        L = loader(data)
        L.set_group_filter(lambda step, wrong=wrong: wrong)
        with pytest.raises(TRMError, match=said):
            next(iter(L))
    with pytest.raises(TypeError, match=r"mask_at must be a function of the step or None, got int"):
        loader(data).set_group_filter(5)


def test_examples_takes_whole_indices_inside_the_split(data):
    L = loader(data)
    assert L.examples([15, 0])["inputs"].shape == (2, 9) and L.examples([])["inputs"].shape == (0, 9)
    for wrong, said in (([-1], r"index -1 is outside 0\.\.15"), ([16], r"index 16 is outside 0\.\.15 \(the 16 examples"),
                        ([0.9], r"dtype float64"), ([[0]], r"2-D")):
        with pytest.raises(TRMError, match=r"example_indices: .*" + said):
            L.examples(wrong)
    for wrong in (-1, 8, 0.5):  # -1 was the last puzzle's identifier
        with pytest.raises(IndexError, match=r"puzzle_index="):
            L.puzzle_identifier(wrong)
        with pytest.raises(IndexError, match=r"puzzle_index="):
            L.locate_puzzle(wrong)
    assert L.puzzle_identifier(7) == 8 and L.locate_puzzle(7) == (0, 7)


@pytest.mark.parametrize("kw, name", [({"global_batch_size": 2.7}, "global_batch_size"), ({"seed": 1.9}, "seed"),
                                      ({"seed": None}, "seed"), ({"world_size": 1.9}, "world_size"),
                                      ({"rank": 0.5}, "rank"), ({"test_mode": "no"}, "test_mode"),
                                      ({"global_batch_size": float("nan")}, "global_batch_size"),
                                      ({"prefetch": -1}, "prefetch"), ({"pin_memory": "yes"}, "pin_memory")])
def test_constructor_numbers_are_whole_and_flags_bools(data, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        loader(data, **kw)


def test_dataset_paths_are_paths(data):
    for wrong, said in ((os.fsencode(data), "got bytes"), ({str(data)}, "got set"), ({str(data): 1}, "got dict"),
                        ([str(data), 3], "list holding int")):
        with pytest.raises(TypeError, match=r"dataset_paths: .*" + said):
            PuzzleLoader(wrong)
    assert PuzzleLoader((str(data),), global_batch_size=4).num_examples == 16


def test_state_and_epoch_counts_are_whole_numbers(data):
    L = loader(data)
    next(iter(L))
    state = L.state_dict()
    for key, value in (("epoch", 1.7), ("epoch", "3"), ("position", -3), ("step", -10), ("batch_in_epoch", -1)):
        with pytest.raises(ValueError, match=rf"data loader state's {key}="):
            loader(data).load_state_dict({**state, key: value})
    with pytest.raises(TRMError, match=r"no 'epoch'"):
        loader(data).load_state_dict({k: v for k, v in state.items() if k != "epoch"})
    with pytest.raises(TypeError, match=r"state: expected the dict state_dict\(\) returned, got NoneType"):
        loader(data).load_state_dict(None)
    for value in (1.5, float("nan"), -1, "2"):  # 1.5 ran two epochs, NaN and -1 none
        with pytest.raises(ValueError, match=r"until_epoch="):
            next(loader(data).iterate(until_epoch=value))
    with pytest.raises(ValueError, match=r"epoch=-1"):
        loader(data).exact_batches_in_epoch(-1)
    M = loader(data)
    M.load_state_dict(state)
    assert M.state_dict() == state and len(list(M.iterate(until_epoch=1))) == 3


def test_identifier_names_of_a_dataset_rebuilt_under_the_loader_are_refused(tmp_path):
    out = build(tmp_path / "ds")
    L = loader(out)
    kept = loader(out)
    assert kept.identifier_names[1] == "a-0"  # read before the rebuild: the names of the rows read
    build(out, prefix="b")  # the same counts, other names
    with pytest.raises(DataError, match=r"identifiers\.json was replaced or changed after this loader opened"):
        L.identifier_names
    assert kept.identifier_names[1] == "a-0" and loader(out).identifier_names[1] == "b-0"


def test_an_array_file_shrunk_under_the_loader_is_named(tmp_path):
    """A file truncated in place under a live loader: past the new end a read is a SIGBUS; within its last page
    rows of zeros. The small file here is the second case (a test must not crash the run it checks)."""
    out = build(tmp_path / "ds")
    L = loader(out)
    path = out / "train" / "all__inputs.npy"
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 9)  # the last row is gone
    with pytest.raises(DataError, match=r"all__inputs\.npy: the file shrank to .* must not be rewritten in place"):
        L.examples([15])
    with pytest.raises(DataError, match=r"all__inputs\.npy: the file shrank"):
        next(iter(L))
