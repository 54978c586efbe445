"""Which examples each training batch holds: upstream's sampling, drawn from seeded generators.

An epoch visits every group once, in a shuffled order (`group_order`); for each group one of its puzzles is
picked at random and that puzzle's examples (a random subset of them, without replacement, when only part
fits) are packed into the global batch until it is full (`sample_batch`). The incomplete batch at the end of
an epoch is dropped. Several datasets are mixed: one shuffled order runs over the groups of all of them.

Every random draw comes from generators seeded by (seed, epoch) and (seed, epoch, batch): the batch stream is
a pure function of the seed, which is what makes exact resume possible from a state of a few integers.
Upstream draws the group order and puzzle choice from a per-epoch generator, but the example subsets from
numpy's global RNG. `trm_kaggle.data.loader.PuzzleLoader` walks the epochs and gathers the rows.
"""

from __future__ import annotations

import numpy as np

from trm_kaggle.errors import TRMError

# Tags that keep the group-order and per-batch random streams apart. SeedSequence treats
# trailing zeros as absent ([1, 2] and [1, 2, 0] seed the same stream), so every key
# used below ends in a non-zero word.
_ORDER_TAG = 1
_BATCH_TAG = 2


def _seed_words(seed: int) -> int:
    # SeedSequence wants non-negative entropy; map negative seeds into range.
    return int(seed) % (1 << 64)


class GroupSampler:
    """Global batches of `global_batch_size` example indices, from the merged index arrays of the datasets:
    puzzle p owns global examples [puzzle_starts[p], puzzle_starts[p+1]), group g owns global puzzles
    [group_starts[g], group_starts[g+1])."""

    def __init__(self, seed: int, global_batch_size: int, puzzle_starts: np.ndarray, group_starts: np.ndarray):
        self.seed, self.global_batch_size = int(seed), int(global_batch_size)
        self.puzzle_starts, self.group_starts = puzzle_starts, group_starts
        self.puzzle_sizes = np.diff(puzzle_starts)
        self.total_groups = len(group_starts) - 1
        self._order_cache: tuple[int, np.ndarray | None, np.ndarray] | None = None
        self._exact_counts: dict[int, int] = {}

    def group_order(self, epoch: int, mask: np.ndarray | None = None) -> np.ndarray:
        """The shuffled order of all groups (all datasets together) for `epoch`, keeping those `mask` allows."""
        cached = self._order_cache  # read once: the prefetch thread may replace it
        if cached is not None and cached[0] == epoch and cached[1] is mask:
            return cached[2]
        rng = np.random.default_rng([_seed_words(self.seed), epoch, _ORDER_TAG])
        order = rng.permutation(self.total_groups)
        if mask is not None:
            order = order[mask[order]]
        self._order_cache = (epoch, mask, order)
        return order

    def _batch_rng(self, epoch: int, batch_in_epoch: int) -> np.random.Generator:
        return np.random.default_rng([_seed_words(self.seed), epoch, _BATCH_TAG, batch_in_epoch + 1])

    def draw_puzzles(self, order: np.ndarray, position: int, epoch: int, batch_in_epoch: int):
        """Pick one puzzle for each upcoming group until the global batch is full.

        Returns (puzzles, sizes, rng) where sizes are the examples each puzzle contributes
        (the last one possibly truncated), or None when the epoch's remaining groups cannot
        fill a batch (the drop-last case). Each group gives at least one example, so the
        next global_batch_size groups always suffice.
        """
        B = self.global_batch_size
        groups = order[position:position + B]
        if groups.size == 0:
            return None
        rng = self._batch_rng(epoch, batch_in_epoch)
        first = self.group_starts[groups]
        # one uniformly random puzzle per group (drawn for all candidate groups at once)
        puzzles = first + rng.integers(0, self.group_starts[groups + 1] - first)
        sizes = self.puzzle_sizes[puzzles]
        filled = np.cumsum(sizes)
        k = int(np.searchsorted(filled, B, side="left"))  # first group with which the batch is full
        if k >= len(groups):
            return None
        puzzles, sizes = puzzles[:k + 1], sizes[:k + 1].copy()
        sizes[k] = B - (filled[k - 1] if k else 0)
        return puzzles, sizes, rng

    def sample_batch(self, order: np.ndarray, position: int, epoch: int, batch_in_epoch: int):
        """(example indices, puzzle indices, groups used) of one global batch, or None (epoch over)."""
        drawn = self.draw_puzzles(order, position, epoch, batch_in_epoch)
        if drawn is None:
            return None
        puzzles, sizes, rng = drawn
        full, full_sizes, last = puzzles[:-1], sizes[:-1], puzzles[-1]
        # Puzzles that fit whole: all their examples, shuffled within the puzzle
        # (sort by puzzle, then by a random key).
        n_full = int(full_sizes.sum())
        segment = np.repeat(np.arange(len(full)), full_sizes)
        seg_start = np.repeat(np.cumsum(full_sizes) - full_sizes, full_sizes)
        examples = np.repeat(self.puzzle_starts[full], full_sizes) + (np.arange(n_full) - seg_start)
        examples = examples[np.lexsort((rng.random(n_full), segment))]
        # The puzzle that completes the batch: a random subset of its examples, without replacement.
        last_examples = self.puzzle_starts[last] + rng.choice(int(self.puzzle_sizes[last]), int(sizes[-1]),
                                                              replace=False)
        example_ids = np.concatenate([examples, last_examples])
        puzzle_ids = np.repeat(puzzles, sizes)
        return example_ids, puzzle_ids, len(puzzles)

    def batches_in_epoch(self, epoch: int) -> int:
        """The exact number of batches `epoch` yields: its group order and puzzle draws replayed without
        touching the data (about a microsecond per group); cached per epoch."""
        if epoch not in self._exact_counts:
            order = self.group_order(epoch)
            position, count = 0, 0
            while True:
                drawn = self.draw_puzzles(order, position, epoch, count)
                if drawn is None:
                    break
                position += len(drawn[0])
                count += 1
            self._exact_counts[epoch] = count
        return self._exact_counts[epoch]

    def max_examples_per_epoch(self) -> int:
        """Examples an epoch yields at most (every group's largest puzzle)."""
        largest = np.maximum.reduceat(self.puzzle_sizes, self.group_starts[:-1]) if self.total_groups else []
        return int(np.sum(largest))

    def groups_where(self, example_mask: np.ndarray) -> np.ndarray:
        """Group mask from a mask over all examples: a group passes when every example in it does
        (a group's puzzle is drawn at random, so a partly allowed group could yield the rest)."""
        example_mask = np.asarray(example_mask, dtype=bool)
        num_examples = int(self.puzzle_starts[-1])
        if example_mask.shape != (num_examples,):
            raise TRMError(f"example mask of shape {example_mask.shape}, expected ({num_examples},)")
        puzzle_ok = np.logical_and.reduceat(example_mask, self.puzzle_starts[:-1])
        return np.logical_and.reduceat(puzzle_ok, self.group_starts[:-1])
