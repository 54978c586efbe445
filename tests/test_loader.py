"""The training/evaluation data loader (trm_kaggle.data.loader).

Every dataset here is tiny and written with `DatasetWriter`. Each example's input row
spells its own example index (base-5 digits in tokens 1..5, positions 0..6) and, in
position 7, a marker naming its dataset, so a batch tells exactly which examples were
drawn.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from trm_kaggle.data.format import DatasetWriter
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.data.loader import IGNORE_LABEL_ID, EvalBatch, PuzzleLoader

SEQ_LEN, VOCAB = 8, 6


def input_row(index: int, marker: int) -> list[int]:
    return [(index // 5 ** i) % 5 + 1 for i in range(7)] + [marker]


def label_row(index: int) -> list[int]:
    return [(3 * index + i) % 5 + 1 for i in range(7)] + [0]  # position 7: the ignore label (0)


def decode(inputs: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(dataset marker, example index within that dataset) of every row."""
    x = inputs.numpy().astype(np.int64)
    index = ((x[:, :7] - 1) * (5 ** np.arange(7))).sum(axis=1)
    return x[:, 7], index


class Layout:
    """Where each example of one split of a test dataset lives."""

    def __init__(self, groups: list[list[int]], first_identifier: int, blank_puzzles: set[int]):
        self.example_puzzle, self.puzzle_group, self.puzzle_identifier, self.puzzle_size = [], [], [], []
        for g, sizes in enumerate(groups):
            for size in sizes:
                p = len(self.puzzle_group)
                self.puzzle_group.append(g)
                self.puzzle_size.append(size)
                self.puzzle_identifier.append(0 if p in blank_puzzles else first_identifier + p)
                self.example_puzzle += [p] * size
        self.example_puzzle = np.array(self.example_puzzle)
        self.puzzle_group = np.array(self.puzzle_group)
        self.puzzle_identifier = np.array(self.puzzle_identifier)
        self.puzzle_size = np.array(self.puzzle_size)
        self.num_groups = len(groups)


def make_dataset(path: Path, groups: list[list[int]], test_groups: list[list[int]] | None = None, *,
                 marker: int = 1, seq_len: int = SEQ_LEN, blank_puzzles: set[int] = frozenset()) -> dict:
    """A dataset whose group g holds puzzles with len(groups[g][i]) examples; returns the split layouts."""
    test_groups = groups if test_groups is None else test_groups
    layouts = {}
    with DatasetWriter(path, seq_len=seq_len, vocab_size=VOCAB) as w:
        for split, writer, gs in (("train", w.train, groups), ("test", w.test, test_groups)):
            layout = Layout(gs, 1, blank_puzzles)
            example = 0
            for g, sizes in enumerate(gs):
                for size in sizes:
                    p = len(writer._puzzle_identifiers)
                    rows = range(example, example + size)
                    inputs = np.array([input_row(e, marker)[:seq_len] for e in rows])
                    labels = np.array([label_row(e)[:seq_len] for e in rows])
                    writer.add_puzzle(inputs, labels, identifier=int(layout.puzzle_identifier[p]))
                    example += size
                writer.end_group()
            layouts[split] = layout
        n_names = max(len(layouts["train"].puzzle_group), len(layouts["test"].puzzle_group))
        w.identifiers = ["<blank>"] + [f"{path.name}-p{i}" for i in range(n_names)]
    return layouts


# groups whose puzzles all have 2 examples: with batch 4 an epoch is exactly 3 full batches
EVEN = [[2, 2], [2], [2, 2, 2], [2], [2, 2], [2]]
# 5 groups of 1-3 puzzles with 1-4 examples each
MIXED = [[1, 3], [4, 2, 2], [2], [3, 1, 4], [2, 2]]


@pytest.fixture
def even(tmp_path):
    return tmp_path / "even", make_dataset(tmp_path / "even", EVEN)


@pytest.fixture
def mixed(tmp_path):
    return tmp_path / "mixed", make_dataset(tmp_path / "mixed", MIXED, test_groups=[[3, 2], [1], [4, 1]])


def take(iterator, n: int) -> list:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) == n:
            break
    return out


def assert_same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


# ----------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------


def test_epoch_visits_every_group_once(even):
    path, layouts = even
    lay = layouts["train"]
    loader = PuzzleLoader(path, "train", global_batch_size=4, seed=3, prefetch=0)
    assert loader.exact_batches_in_epoch(0) == 3 and loader.batches_per_epoch == pytest.approx(3.0)
    for epoch in range(3):
        batches = list(loader.iterate(until_epoch=epoch + 1))
        assert len(batches) == 3 and loader.epoch == epoch + 1
        _, ex = decode(torch.cat([b["inputs"] for b in batches]))
        puzzles = lay.example_puzzle[ex]
        # every group exactly once: one puzzle of it, with both of its examples
        assert sorted(lay.puzzle_group[np.unique(puzzles)]) == list(range(lay.num_groups))
        assert sorted(Counter(puzzles).values()) == [2] * lay.num_groups
        assert len(set(ex.tolist())) == len(ex)


def test_batches_hold_one_puzzle_per_group_without_repeats(mixed):
    path, layouts = mixed
    lay = layouts["train"]
    loader = PuzzleLoader(path, "train", global_batch_size=5, seed=0, prefetch=0)
    batches = list(loader.iterate(until_epoch=20))
    assert len(batches) >= 20  # an epoch holds 10-15 examples, so 2-3 batches
    seen_puzzles_of_group: dict[int, set] = {g: set() for g in range(lay.num_groups)}
    orders_of_puzzle: dict[int, set] = {p: set() for p in range(len(lay.puzzle_group))}
    for b in batches:
        assert b["inputs"].shape == (5, SEQ_LEN) and b["inputs"].dtype == torch.int32
        _, ex = decode(b["inputs"])
        assert len(set(ex.tolist())) == 5  # no example twice
        puzzles = lay.example_puzzle[ex]
        groups = lay.puzzle_group[puzzles]
        for g in set(groups.tolist()):
            assert len(set(puzzles[groups == g].tolist())) == 1  # one puzzle per group
            seen_puzzles_of_group[g].update(puzzles[groups == g].tolist())
        counts = Counter(puzzles.tolist())
        partial = [p for p, c in counts.items() if c < lay.puzzle_size[p]]
        assert len(partial) <= 1  # only the puzzle that completes the batch is cut
        for p in counts:
            orders_of_puzzle[p].add(tuple(ex[puzzles == p].tolist()))
        # identifiers follow the puzzle
        assert torch.equal(b["puzzle_identifiers"], torch.from_numpy(lay.puzzle_identifier[puzzles].astype(np.int32)))
    # over 20 epochs every puzzle of the multi-puzzle groups gets drawn
    for g, sizes in enumerate(MIXED):
        assert len(seen_puzzles_of_group[g]) == len(sizes)
    # a puzzle's examples come in a random order (and random subsets when cut)
    four = [p for p in range(len(lay.puzzle_group)) if lay.puzzle_size[p] == 4]
    assert all(len(orders_of_puzzle[p]) > 2 for p in four)


def test_drop_last_skips_the_incomplete_batch(tmp_path):
    lay = make_dataset(tmp_path / "odd", [[2]] * 5)["train"]  # 10 examples per epoch, batch 4: 2 batches
    loader = PuzzleLoader(tmp_path / "odd", "train", global_batch_size=4, seed=1, prefetch=0)
    assert loader.batches_per_epoch == pytest.approx(2.5) and loader.exact_batches_in_epoch(0) == 2
    dropped = Counter()
    for epoch in range(12):
        batches = list(loader.iterate(until_epoch=epoch + 1))
        assert len(batches) == 2
        _, ex = decode(torch.cat([b["inputs"] for b in batches]))
        groups = set(lay.puzzle_group[lay.example_puzzle[ex]].tolist())
        assert len(groups) == 4
        dropped.update(set(range(5)) - groups)
    assert len(dropped) > 1  # a different group falls off the end in different epochs
    assert loader.epoch == 12 and loader.step == 24


def test_labels_ignore_id_becomes_minus_100(mixed):
    path, _ = mixed
    batch = next(iter(PuzzleLoader(path, "train", global_batch_size=5, seed=0, prefetch=0)))
    labels = batch["labels"]
    assert labels.dtype in (torch.int32, torch.int64)
    assert (labels[:, 7] == IGNORE_LABEL_ID).all()
    _, ex = decode(batch["inputs"])
    expected = torch.tensor([label_row(int(e))[:7] for e in ex], dtype=labels.dtype)
    assert torch.equal(labels[:, :7], expected)
    assert IGNORE_LABEL_ID == -100


def test_batches_stay_on_the_host_under_a_callers_default_device(mixed):
    """A caller inside `with torch.device(...)` (upstream's pretrain.py runs so on CUDA) still gets host batches:
    the loader fills them through numpy. The meta device stands in for CUDA here."""
    path, _ = mixed
    plain = take(PuzzleLoader(path, "train", global_batch_size=5, seed=3, prefetch=0), 3)
    with torch.device("meta"):
        under = take(PuzzleLoader(path, "train", global_batch_size=5, seed=3, prefetch=0), 3)
    for a, b in zip(plain, under):
        assert all(v.device.type == "cpu" for v in b.values())
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_same_seed_same_batches_other_seed_different(mixed):
    path, _ = mixed
    a = take(PuzzleLoader(path, "train", global_batch_size=5, seed=7, prefetch=0), 12)
    b = take(PuzzleLoader(path, "train", global_batch_size=5, seed=7, prefetch=2), 12)
    c = take(PuzzleLoader(path, "train", global_batch_size=5, seed=8, prefetch=0), 12)
    assert_same_batches(a, b)
    assert not all(torch.equal(x["inputs"], y["inputs"]) for x, y in zip(a, c))


# ----------------------------------------------------------------------------
# Exact resume
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("k", [1, 4, "epoch_end", 9])
def test_exact_resume(mixed, k, prefetch):
    path, _ = mixed
    make = lambda: PuzzleLoader(path, "train", global_batch_size=5, seed=11, prefetch=prefetch)  # noqa: E731
    n = 12
    whole = take(make(), n)
    if k == "epoch_end":
        k = make().exact_batches_in_epoch(0)  # stop right after an epoch's last batch
    first = make()
    head = take(first, k)
    state = json.loads(json.dumps(first.state_dict()))  # JSON-serialisable
    assert state["step"] == k  # what was consumed, not what the prefetch thread prepared
    resumed = make()
    resumed.load_state_dict(state)
    tail = take(resumed, n - k)
    assert_same_batches(head + tail, whole)


def test_state_reflects_consumed_batches_and_epochs(mixed):
    path, _ = mixed
    loader = PuzzleLoader(path, "train", global_batch_size=5, seed=2, prefetch=2)
    per_epoch = [loader.exact_batches_in_epoch(e) for e in range(3)]
    batches = list(loader.iterate(until_epoch=3))
    assert len(batches) == sum(per_epoch)
    state = loader.state_dict()
    assert (state["epoch"], state["position"], state["step"]) == (3, 0, sum(per_epoch))
    assert loader.epoch_progress == 3.0
    # the rest of the stream after the epoch boundary is the same as an uninterrupted one
    fresh = PuzzleLoader(path, "train", global_batch_size=5, seed=2, prefetch=0)
    expected = take(fresh, sum(per_epoch) + 3)[-3:]
    assert_same_batches(take(loader, 3), expected)


def test_resume_refuses_a_different_stream(mixed):
    path, _ = mixed
    state = PuzzleLoader(path, "train", global_batch_size=5, seed=1).state_dict()
    other = PuzzleLoader(path, "train", global_batch_size=5, seed=2)
    with pytest.raises(TRMError, match="seed"):
        other.load_state_dict(state)
    other.load_state_dict(state, strict=False)  # explicitly allowed
    # an iterator started before load_state_dict does not silently continue the old stream
    loader = PuzzleLoader(path, "train", global_batch_size=5, seed=1, prefetch=0)
    it = iter(loader)
    next(it)
    loader.load_state_dict(state)
    with pytest.raises(RuntimeError, match="load_state_dict"):
        next(it)


def test_resume_refuses_a_position_no_stream_reaches(even):
    """A hand-edited state (re-signed in a train state) with a position beyond the groups was clipped to them without
    a word, and an epoch and step of 10**9 were taken: the resume went on with another stream. Strict, a count no
    stream of this loader reaches is refused naming it and its range; strict=False still clips."""
    path, _ = even
    make = lambda: PuzzleLoader(path, "train", global_batch_size=4, seed=1, prefetch=0)  # noqa: E731
    first = make()
    take(first, 4)  # 3 batches an epoch: one batch into the second
    state = first.state_dict()
    assert [state[k] for k in ("epoch", "position", "batch_in_epoch", "step")] == [1, 2, 1, 4]
    for change, said in [({"position": 10**12}, "position 1000000000000 is outside 0..6 (the groups of an epoch)"),
                         ({"position": 7}, "position 7 is outside 0..6"),
                         ({"batch_in_epoch": 1000}, "batch_in_epoch 1000 is outside 1..2 (position 2:"),
                         ({"batch_in_epoch": 0}, "batch_in_epoch 0 is outside 1..2"),
                         ({"position": 0}, "batch_in_epoch 1 is outside 0..0"),
                         ({"step": 0}, "step 0 is below batch_in_epoch 1"),
                         ({"epoch": 10**9, "step": 10**9}, "epoch 1000000000 is outside 0..999999999"),
                         ({"epoch": 4}, "epoch 4 is outside 0..3 (step 4 counts a batch at least")]:
        with pytest.raises(TRMError, match="^cannot resume the data stream exactly: the saved state's "
                                           + re.escape(said)):
            make().load_state_dict({**state, **change})
    clipped = make()
    clipped.load_state_dict({**state, "position": 10**12}, strict=False)  # explicitly allowed: clipped
    assert clipped.state_dict()["position"] == 6


@pytest.mark.parametrize("batch", [4, 5, 9])
def test_every_position_a_stream_reaches_resumes(mixed, batch):
    """The strict checks refuse no state a stream writes (batch 9: the smallest puzzles fill no batch, and an epoch
    may yield none, so the epoch is not bounded by the step)."""
    path, _ = mixed
    make = lambda: PuzzleLoader(path, "train", global_batch_size=batch, seed=3, prefetch=0)  # noqa: E731
    loader, states = make(), []
    for _ in loader.iterate(until_epoch=4):
        states.append(loader.state_dict())
    states.append(loader.state_dict())
    for state in states:
        make().load_state_dict(state)


# ----------------------------------------------------------------------------
# Ranks
# ----------------------------------------------------------------------------


def test_ranks_split_the_global_batch(mixed):
    path, _ = mixed
    whole = take(PuzzleLoader(path, "train", global_batch_size=6, seed=5, prefetch=0), 8)
    parts = [take(PuzzleLoader(path, "train", global_batch_size=6, seed=5, rank=r, world_size=2), 8)
             for r in range(2)]
    for w, r0, r1 in zip(whole, *parts):
        assert r0["inputs"].shape == (3, SEQ_LEN)
        for key in w:
            assert torch.equal(torch.cat([r0[key], r1[key]]), w[key])


def test_batch_size_must_divide_by_world_size(mixed):
    with pytest.raises(TRMError, match="divisible"):
        PuzzleLoader(mixed[0], "train", global_batch_size=5, world_size=2)


def test_batch_larger_than_an_epoch_is_an_error(even):
    loader = PuzzleLoader(even[0], "train", global_batch_size=100)
    with pytest.raises(TRMError, match="global_batch_size"):
        iter(loader)


# ----------------------------------------------------------------------------
# Several datasets
# ----------------------------------------------------------------------------


def test_two_datasets_are_mixed_with_offset_identifiers(tmp_path):
    a = make_dataset(tmp_path / "a", EVEN, marker=1)["train"]
    b = make_dataset(tmp_path / "b", [[2], [2, 2], [2], [2]], marker=2, blank_puzzles={1})["train"]
    n_a, n_b = len(a.puzzle_group) + 1, len(b.puzzle_group) + 1  # identifiers incl. blank
    loader = PuzzleLoader([tmp_path / "a", tmp_path / "b"], "train", global_batch_size=4, seed=0, prefetch=0)
    assert loader.identifier_offsets == [0, n_a]
    assert loader.metadata.num_puzzle_identifiers == n_a + n_b
    assert loader.metadata.total_groups == a.num_groups + b.num_groups
    names = loader.identifier_names
    assert len(names) == n_a + n_b and names[0] == names[n_a] == "<blank>" and names[n_a + 1] == "b-p0"

    batches = list(loader.iterate(until_epoch=1))
    assert len(batches) == (a.num_groups + b.num_groups) // 2  # all groups of both, 2 examples each
    groups_seen = set()
    for batch in batches:
        marker, ex = decode(batch["inputs"])
        for m, e, ident in zip(marker, ex, batch["puzzle_identifiers"].tolist()):
            lay = a if m == 1 else b
            p = lay.example_puzzle[e]
            groups_seen.add((m, lay.puzzle_group[p]))
            original = lay.puzzle_identifier[p]
            if m == 1:
                assert ident == original
            else:  # shifted past dataset a's identifiers; blank stays blank
                assert ident == (0 if original == 0 else original + n_a)
    assert len(groups_seen) == a.num_groups + b.num_groups
    # batches mix the datasets: some batch holds examples of both
    assert any(len(set(decode(x["inputs"])[0].tolist())) == 2 for x in take(loader, 20))


def test_datasets_that_disagree_are_refused(tmp_path):
    make_dataset(tmp_path / "a", EVEN)
    make_dataset(tmp_path / "short", EVEN, seq_len=6)
    with pytest.raises(DataError) as err:
        PuzzleLoader([tmp_path / "a", tmp_path / "short"], "train", global_batch_size=4)
    message = str(err.value)
    assert "seq_len" in message and str(tmp_path / "a") in message and str(tmp_path / "short") in message


# ----------------------------------------------------------------------------
# Test split
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2])
def test_test_split_covers_every_example_once_in_order(mixed, world_size):
    path, layouts = mixed
    lay = layouts["test"]  # groups [[3, 2], [1], [4, 1]]: 11 examples, 5 puzzles
    n = len(lay.example_puzzle)
    per_rank = []
    for rank in range(world_size):
        loader = PuzzleLoader(path, "test", global_batch_size=4, rank=rank, world_size=world_size, prefetch=1)
        assert loader.test_mode and len(loader) == 3
        items = list(loader)
        assert all(isinstance(i, EvalBatch) for i in items) and len(items) == 3
        per_rank.append(items)

    real_examples = []
    for step in range(3):
        for rank in range(world_size):
            batch, num_real, ex_idx, pz_idx, global_real = per_rank[rank][step]
            local = 4 // world_size
            assert batch["inputs"].shape == (local, SEQ_LEN)
            assert global_real == min(4, n - 4 * step)
            real, pad = slice(0, num_real), slice(num_real, None)
            _, decoded = decode(batch["inputs"][real])
            assert ex_idx[real].tolist() == decoded.tolist()
            assert pz_idx[real].tolist() == lay.example_puzzle[decoded].tolist()
            assert batch["puzzle_identifiers"][real].tolist() == lay.puzzle_identifier[pz_idx[real].numpy()].tolist()
            assert (batch["labels"][real][:, 7] == IGNORE_LABEL_ID).all()
            # padding rows are marked
            assert (batch["inputs"][pad] == 0).all() and (batch["labels"][pad] == IGNORE_LABEL_ID).all()
            assert (batch["puzzle_identifiers"][pad] == 0).all()
            assert (ex_idx[pad] == -1).all() and (pz_idx[pad] == -1).all()
            real_examples += ex_idx[real].tolist()
    assert real_examples == list(range(n))
    assert per_rank[0][-1].num_real == (3 if world_size == 1 else 2)


def test_test_split_of_two_datasets_uses_global_indices(tmp_path):
    make_dataset(tmp_path / "a", [[2]], test_groups=[[3]], marker=1)
    make_dataset(tmp_path / "b", [[2]], test_groups=[[1], [2]], marker=2)
    loader = PuzzleLoader([tmp_path / "a", tmp_path / "b"], "test", global_batch_size=4, prefetch=0)
    items = list(loader)
    ex = torch.cat([i.example_indices[:i.num_real] for i in items]).tolist()
    pz = torch.cat([i.puzzle_indices[:i.num_real] for i in items]).tolist()
    markers = np.concatenate([decode(i.batch["inputs"][:i.num_real])[0] for i in items]).tolist()
    assert ex == list(range(6)) and pz == [0, 0, 0, 1, 2, 2] and markers == [1, 1, 1, 2, 2, 2]
    assert loader.locate_puzzle(2) == (1, 1)
    ids = torch.cat([i.batch["puzzle_identifiers"][:i.num_real] for i in items]).tolist()
    assert ids == [1, 1, 1, 2 + 1, 2 + 2, 2 + 2]  # dataset b's identifiers offset by a's count (2)


# ----------------------------------------------------------------------------
# Upstream-written datasets
# ----------------------------------------------------------------------------


def test_reads_upstream_dataset_without_total_puzzles(tmp_path):
    """np.save'd arrays and a dataset.json lacking total_puzzles, as HRM-era upstream builders write."""
    root = tmp_path / "upstream"
    sizes = [1, 2, 1, 3]  # 4 puzzles, groups [0, 1] and [2, 3]
    for split in ("train", "test"):
        d = root / split
        d.mkdir(parents=True)
        n = sum(sizes)
        np.save(d / "all__inputs.npy", np.array([input_row(e, 1) for e in range(n)], dtype=np.uint8))
        np.save(d / "all__labels.npy", np.array([label_row(e) for e in range(n)], dtype=np.uint8))
        np.save(d / "all__puzzle_indices.npy", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32))
        np.save(d / "all__puzzle_identifiers.npy", np.arange(1, 5, dtype=np.int32))
        np.save(d / "all__group_indices.npy", np.array([0, 2, 4], dtype=np.int32))
        (d / "dataset.json").write_text(json.dumps(dict(
            pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=VOCAB, seq_len=SEQ_LEN,
            num_puzzle_identifiers=5, total_groups=2, mean_puzzle_examples=n / 4, sets=["all"])))
    loader = PuzzleLoader(root, "train", global_batch_size=2, seed=0, prefetch=0)
    assert loader.metadata.total_puzzles == 4 and loader.identifier_names is None
    batch = next(iter(loader))
    assert batch["inputs"].dtype == torch.int32 and (batch["labels"][:, 7] == IGNORE_LABEL_ID).all()
    test_loader = PuzzleLoader(root, "test", global_batch_size=4)
    assert sum(i.num_real for i in test_loader) == sum(sizes)


def test_examples_gathers_the_rows_asked_for_in_order(mixed):
    path, layouts = mixed
    lay = layouts["test"]
    loader = PuzzleLoader(path, "test", global_batch_size=4, prefetch=0)
    wanted = [5, 0, 3, 3]
    batch = loader.examples(wanted)
    _, decoded = decode(batch["inputs"])
    assert decoded.tolist() == wanted
    assert batch["puzzle_identifiers"].tolist() == lay.puzzle_identifier[lay.example_puzzle[wanted]].tolist()
    assert (batch["labels"][:, 7] == IGNORE_LABEL_ID).all()
