"""`trm-kaggle verify DIR`: check a dataset (ours or upstream's) before hours of training go into it.

Checks, in order, stopping at the first problem (raised as DataError naming the file): first
`check_metadata`, what needs no token row read, which training runs too before its run folder is made:
identifiers.json; for both splits dataset.json, the five arrays' shapes and dtypes, monotone index
arrays that cover every example and puzzle exactly, identifiers inside the identifier table (none of
a puzzle named '<blank>', the blank identifier's name), metadata counts and mean_puzzle_examples; the
splits agreeing; test_puzzles.json's task ids naming exactly the test split's un-augmented puzzles (the
file present where the test split holds ARC's augmented puzzles).
Then tokens inside the vocabulary, and test_puzzles.json's tasks against those puzzles' examples. Its augmented
puzzles are read by evaluate's rules (`trm_kaggle.evaluate.check_test_split`, above this layer),
which the `verify` command, the pipeline and the Kaggle training kernel run after this check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trm_kaggle.data.contents import contents_hash
from trm_kaggle.data.format import (SET_NAME, SPLITS, BLANK_IDENTIFIER, Split, check_token_range, dataset_path,
                                    load_identifiers, load_split)
from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import directory_problem, read_json
from trm_kaggle.names import task_id_problem
from trm_kaggle.wording import count, one_line, shown

log = logging.getLogger(__name__)


@dataclass
class SplitSummary:
    name: str
    examples: int
    puzzles: int
    groups: int
    seq_len: int
    vocab_size: int
    dtype: str
    mean_puzzle_examples: float


def _check_index(arr: np.ndarray, name: str, length: int, end: int, where: Path, count_field: str) -> None:
    if len(arr) != length:  # the length comes from dataset.json: either side may be the wrong one
        raise DataError(f"{where}: {name} has {len(arr)} entries, expected {length} (dataset.json's {count_field} "
                        f"{length - 1}, plus one)")
    if arr[0] != 0:
        raise DataError(f"{where}: {name} must start at 0, starts at {arr[0]}")
    steps = np.diff(arr.astype(np.int64))
    if (steps <= 0).any():
        k = int(np.argmax(steps <= 0))
        raise DataError(f"{where}: {name} is not strictly increasing at position {k} ({arr[k]} -> {arr[k + 1]})")
    if arr[-1] != end:
        raise DataError(f"{where}: {name} ends at {arr[-1]}, expected {end}")


def check_split(dataset_dir: Path, split: Split, num_identifiers: int | None = None) -> None:
    """DataError naming the file where one split's dataset.json disagrees with its arrays: the arrays' shapes, the
    index arrays against the counts, the identifiers inside the table (identifiers.json's `num_identifiers` names,
    where it was read; else the count dataset.json declares) and mean_puzzle_examples against the mean the arrays
    give (it sets the schedule's length). Headers and index arrays alone: nothing of the token rows is read (they
    stay memory-mapped). `verify` and every reader (the loader) check each split they open here."""
    d = Path(dataset_dir) / split.name
    m = split.metadata
    if num_identifiers is not None and m.num_puzzle_identifiers != num_identifiers:
        raise DataError(f"{d / 'dataset.json'}: num_puzzle_identifiers is {m.num_puzzle_identifiers} but "
                        f"identifiers.json lists {num_identifiers}")
    table = m.num_puzzle_identifiers if num_identifiers is None else num_identifiers
    for name in ("inputs", "labels"):
        a = getattr(split, name)
        if a.ndim != 2 or a.shape[1] != m.seq_len:
            raise DataError(f"{d}/{SET_NAME}__{name}.npy: shape {a.shape}, expected (N, seq_len={m.seq_len})")
    if split.inputs.shape != split.labels.shape:
        raise DataError(f"{d}: inputs {split.inputs.shape} and labels {split.labels.shape} differ in shape")
    n = len(split.inputs)
    _check_index(split.puzzle_indices, f"{SET_NAME}__puzzle_indices", m.total_puzzles + 1, n, d, "total_puzzles")
    _check_index(split.group_indices, f"{SET_NAME}__group_indices", m.total_groups + 1, m.total_puzzles, d,
                 "total_groups")
    pid = split.puzzle_identifiers
    if pid.ndim != 1 or len(pid) != m.total_puzzles:
        raise DataError(f"{d}: {SET_NAME}__puzzle_identifiers has shape {pid.shape}, expected ({m.total_puzzles},)")
    if len(pid) and (pid.min() < 0 or pid.max() >= table):
        bad = int(pid.min()) if pid.min() < 0 else int(pid.max())  # the side that is out (a -1 was said as the max)
        raise DataError(f"{d}: puzzle identifier {bad} outside the table of {table} (0..{table - 1})")
    mean = n / max(1, m.total_puzzles)
    if abs(mean - m.mean_puzzle_examples) > 1e-6 * max(1.0, mean):
        raise DataError(f"{d / 'dataset.json'}: mean_puzzle_examples {m.mean_puzzle_examples} but the arrays give {mean}")


def check_metadata(dataset_dir: str | Path, tokens: tuple[str, ...] = ()) -> tuple[list[str], dict[str, Split]]:
    """identifiers.json, both splits and test_puzzles.json checked against each other, as `verify` does, without
    reading a token row (index arrays and headers alone): DataError naming the file at the first problem; else the
    identifiers and the splits (their token rows memory-mapped). `verify` runs it first and training before its run
    folder is made, so that what verify refuses here training refuses too, in the same words. The splits named in
    `tokens` have their token rows read too, as `verify_split` reads them (training: the test split, which its loader
    reads only at the first evaluation)."""
    dataset_dir = dataset_path(dataset_dir)
    ids = load_identifiers(dataset_dir)
    if not ids or ids[0] != BLANK_IDENTIFIER:
        raise DataError(f"{dataset_dir / 'identifiers.json'}: entry 0 must be '<blank>'")
    splits = {}
    for name in SPLITS:
        if problem := directory_problem(dataset_dir / name, "split directory"):
            raise DataError(f"{problem} (a complete dataset has train/ and test/)")
        splits[name] = load_split(dataset_dir, name)
        check_split(dataset_dir, splits[name], len(ids))
        _check_blank_names(dataset_dir, splits[name], ids)
    tr, te = splits["train"].metadata, splits["test"].metadata
    if (tr.seq_len, tr.vocab_size) != (te.seq_len, te.vocab_size):
        raise DataError(f"{dataset_dir}: train and test disagree on seq_len/vocab_size")
    tp = dataset_dir / "test_puzzles.json"
    if tp.exists():
        _check_test_puzzle_names(dataset_dir, read_json(tp, "test_puzzles.json"), splits["test"], ids)
    elif augmented := next((n for n in np.asarray(ids, dtype=object)[splits["test"].puzzle_identifiers]
                            if "|||" in n), None):  # Sudoku's and Maze's have none: scored per example
        raise DataError(f"{tp}: not found, but the test split holds ARC's augmented puzzles ({shown(augmented)}): "
                        "ARC's evaluation scores its tasks by that file, which an ARC builder writes (rebuild the "
                        "dataset, or copy its test_puzzles.json back)")
    for name in tokens:
        check_token_range(dataset_dir / name, splits[name])
    return ids, splits


def verify_split(dataset_dir: Path, s: Split) -> SplitSummary:
    """The rest of a split `check_metadata` has checked: every token inside the vocabulary (read once, in chunks)."""
    check_token_range(Path(dataset_dir) / s.name, s)
    m, n = s.metadata, len(s.inputs)
    return SplitSummary(s.name, n, m.total_puzzles, m.total_groups, m.seq_len, m.vocab_size, str(s.inputs.dtype),
                        n / max(1, m.total_puzzles))


def verify_dataset(dataset_dir: str | Path) -> dict:
    """Raise DataError at the first problem; otherwise return a summary."""
    dataset_dir = dataset_path(dataset_dir)
    if problem := directory_problem(dataset_dir, "dataset directory"):
        raise DataError(problem)
    if any(dataset_dir.parent.glob(dataset_dir.name + ".partial-*")) and not (dataset_dir / "train").exists():
        raise DataError(f"{dataset_dir}: only a partial build exists (was the build interrupted?)")
    if not (dataset_dir / "identifiers.json").exists() and not (dataset_dir / "train").exists():
        raise DataError(f"{dataset_dir}: not a dataset directory (expected identifiers.json, train/ and test/)")
    ids, checked = check_metadata(dataset_dir)
    splits = {name: verify_split(dataset_dir, s) for name, s in checked.items()}
    test_tasks = None
    tp = dataset_dir / "test_puzzles.json"
    if tp.exists():
        test_puzzles = read_json(tp, "test_puzzles.json")
        test_tasks = len(test_puzzles)
        _check_test_puzzles(dataset_dir, test_puzzles, checked["test"], ids)
    else:  # scored per example: ARC's answers are test_puzzles.json's (a hidden test set's are unknown)
        _say_if_nothing_to_score(dataset_dir, checked["test"])
    contents_hash(dataset_dir, full=True)  # every byte as its builder recorded it (datasets with a record)
    size = sum(p.stat().st_size for p in dataset_dir.rglob("*") if p.is_file())
    return {"path": str(dataset_dir), "identifiers": len(ids), "test_tasks": test_tasks, "bytes": size,
            "splits": {k: v.__dict__ for k, v in splits.items()}}


def _say_if_nothing_to_score(dataset_dir: Path, s: Split, chunk: int = 1 << 16) -> None:
    """Warn when every label of the test split `s` is its ignore label: evaluate refuses such a split (nothing to
    score) and training's evaluation scores none of it. Read in chunks, up to the first scored label."""
    ignore = s.metadata.ignore_label_id
    if ignore is None or not len(s.labels):
        return
    for start in range(0, len(s.labels), chunk):
        if not (np.asarray(s.labels[start:start + chunk]) == ignore).all():
            return
    log.warning("%s/%s__labels.npy: every label of the test split is the ignore label %d: evaluate has nothing to "
                "score, and training's evaluation scores no example (rebuild the dataset with its answers)",
                dataset_dir / s.name, SET_NAME, ignore)


def _check_blank_names(dataset_dir: Path, split: Split, ids: list[str]) -> None:
    """No puzzle of `split` has an identifier past 0 that identifiers.json names '<blank>': a task or puzzle named
    so (its identifiers held '<blank>' twice). Unused entries may be so named (upstream's builder names every
    identifier below its first one '<blank>'), and identifier 0 is the puzzle of no name (every puzzle of
    upstream's Sudoku and Maze datasets, and of ours): neither is refused."""
    if ids.count(BLANK_IDENTIFIER) < 2:  # the usual case, counted in C (training checks a million names so)
        return
    blank = np.flatnonzero(np.asarray(ids, dtype=object) == BLANK_IDENTIFIER)
    pid = split.puzzle_identifiers
    named = np.isin(pid, blank[1:])
    if named.any():
        p = int(np.argmax(named))
        raise DataError(f"{dataset_dir / split.name}: puzzle {p} has identifier {int(pid[p])}, which identifiers.json "
                        f"names {BLANK_IDENTIFIER!r}, the name of the blank identifier 0: a task or puzzle may not be "
                        "named so (rename it and rebuild the dataset)")


def _check_test_puzzle_names(dataset_dir: Path, test_puzzles: object, s: Split, ids: list[str]) -> None:
    """test_puzzles.json maps task ids evaluate accepts, and records exactly the test split's un-augmented puzzles
    (names from identifiers.json: an augmented copy's holds '|||')."""
    where = dataset_dir / "test_puzzles.json"
    if not isinstance(test_puzzles, dict):
        raise DataError(f"{where}: must map task ids to tasks")
    for task_id in test_puzzles:  # evaluate's rule, before hours of training: ids become the report's file names
        if problem := task_id_problem(task_id):
            raise DataError(f"{where}: task id {problem}")
    names = np.asarray(ids, dtype=object)[s.puzzle_identifiers]
    plain = [name for name in names if "|||" not in name]
    if unrecorded := next((name for name in plain if name not in test_puzzles), None):
        raise DataError(f"{where}: test puzzle {shown(unrecorded)} is not recorded")
    if missing := set(test_puzzles) - set(plain):
        raise DataError(f"{where}: task {sorted(missing)[0]} has no puzzle in the test split")


def _check_test_puzzles(dataset_dir: Path, test_puzzles: dict, s: Split, ids: list[str]) -> None:
    """Every un-augmented test puzzle's task has as many test pairs as the split holds examples for it, and its
    test inputs are the split's (`check_metadata` has matched the names)."""
    name_of = np.asarray(ids, dtype=object)
    counts = np.diff(s.puzzle_indices)
    for p, ident in enumerate(s.puzzle_identifiers):
        name = name_of[ident]
        if "|||" in name:  # an augmented copy: evaluate's `check_test_split` reads it (evaluate sits above data)
            continue
        task = test_puzzles[name]  # a task recorded as null is recorded: its shape is said here
        tests = task.get("test") if isinstance(task, dict) else None
        if not isinstance(tests, list) or not tests:  # evaluate's words for a task it could not score
            raise DataError(f"{dataset_dir / 'test_puzzles.json'}: task {shown(name)} has no test pairs (a task is "
                            "an object whose \"test\" is a list of pairs)")
        if len(tests) != counts[p]:
            raise DataError(f"{dataset_dir / 'test_puzzles.json'}: task {shown(name)} has "
                            f"{count(len(tests), 'test input')} but the test split holds {counts[p]} examples for it")
        _check_test_inputs(dataset_dir, name, tests, s.inputs[s.puzzle_indices[p]:s.puzzle_indices[p + 1]])


def _check_test_inputs(dataset_dir: Path, name: str, tests: list, rows: np.ndarray) -> None:
    """The un-augmented test puzzle's examples are its task's test inputs as test_puzzles.json records them: a
    test input edited in either passed, trained, and was refused by evaluate only after the training."""
    from trm_kaggle.data.arc.build import encode_puzzles  # ARC datasets alone record test_puzzles.json

    side = int(round(rows.shape[1] ** 0.5)) if rows.ndim == 2 else 0
    where = f"{dataset_dir / 'test_puzzles.json'}: task {one_line(name)}"
    for i, test in enumerate(tests):
        grid = test.get("input") if isinstance(test, dict) else None
        try:
            a = np.asarray(grid)
            if a.ndim != 2 or a.dtype.kind not in "iu" or a.size == 0 or a.min() < 0 or a.max() > 9 \
                    or max(a.shape) > side:
                raise ValueError
            want, _ = encode_puzzles([(a, a)], np.zeros(1, np.int64), np.arange(10)[None], translate=False,
                                     rng=np.random.default_rng(0), side=side)
        except (ValueError, TypeError, IndexError):
            raise DataError(f"{where}: test input {i} is no grid of colours 0-9 within the {side}x{side} canvas") \
                from None
        if rows.shape[1:] != want.shape[1:] or not np.array_equal(rows[i], want[0]):
            raise DataError(f"{where}: test input {i} differs from the test split's example for it: the dataset "
                            "and test_puzzles.json disagree (rebuild the dataset)")


def format_summary(summary: dict) -> str:
    lines = [f"dataset {one_line(summary['path'])}: OK",  # a typed path: its control characters escaped
             f"  puzzle identifiers {summary['identifiers']:,}"
             + (f", test tasks {summary['test_tasks']:,}" if summary["test_tasks"] is not None else "")
             + f", {summary['bytes'] / 1e6:,.1f} MB on disk"]
    for name, s in summary["splits"].items():
        lines.append(f"  {name:5s} examples {s['examples']:>11,}  puzzles {s['puzzles']:>9,}  groups {s['groups']:>7,}"
                     f"  seq_len {s['seq_len']}  vocab {s['vocab_size']}  {s['dtype']}"
                     f"  mean examples/puzzle {s['mean_puzzle_examples']:.2f}")
    return "\n".join(lines)
