"""Voting: ranking rule, weighting, metrics on hand-built votes, no pooling unless asked."""

from __future__ import annotations

import numpy as np
import pytest

from trm_kaggle.evaluate.vote import VoteTable, arc_prize_score, pass_at_k_task_macro, score

A = np.array([[1, 2], [3, 4]], dtype=np.uint8)
B = np.array([[5]], dtype=np.uint8)
C = np.array([[1, 2, 3]], dtype=np.uint8)
D = np.array([[1], [2], [3]], dtype=np.uint8)  # C's bytes in another shape


def grids(result, slot):
    return [c["grid"] for c in result.ranked(slot)]


def same(a, b):
    return a.shape == b.shape and np.array_equal(a, b)


def test_rank_by_votes_then_mean_sigmoid_q_halt():
    s = ("t", 0)
    table = VoteTable.from_grids([
        (s, A, -2.0), (s, A, -2.0),  # 2 votes, low confidence
        (s, B, 3.0), (s, B, -1.0),  # 2 votes, mean sigmoid higher than A's
        (s, C, 5.0),  # 1 vote, very confident
    ])
    r = table.tally()
    g = grids(r, s)
    assert same(g[0], B) and same(g[1], A) and same(g[2], C)
    top = r.ranked(s)
    assert [c["votes"] for c in top] == [2, 2, 1]
    assert top[0]["mean_sigmoid_q_halt"] == pytest.approx((1 / (1 + np.exp(-3)) + 1 / (1 + np.exp(1))) / 2)


def test_tie_on_votes_flips_with_q_halt():
    s = ("t", 0)
    first = VoteTable.from_grids([(s, A, 1.0), (s, B, 0.0)]).tally()
    second = VoteTable.from_grids([(s, A, 0.0), (s, B, 1.0)]).tally()
    assert same(grids(first, s)[0], A)
    assert same(grids(second, s)[0], B)


def test_full_tie_goes_to_first_appearance():
    s = ("t", 0)
    r = VoteTable.from_grids([(s, C, 0.5), (s, D, 0.5)]).tally()
    assert same(grids(r, s)[0], C) and same(grids(r, s)[1], D)  # equal bytes, different shapes: two candidates
    r = VoteTable.from_grids([(s, D, 0.5), (s, C, 0.5)]).tally()
    assert same(grids(r, s)[0], D)


def test_weighting_by_q_halt_changes_the_winner():
    s = ("t", 0)
    votes = [(s, A, -4.0), (s, A, -4.0), (s, A, -4.0),  # 3 unconfident votes: sum sigmoid ~ 0.054
             (s, B, 4.0), (s, B, 4.0)]  # 2 confident votes: sum sigmoid ~ 1.96
    table = VoteTable.from_grids(votes)
    assert same(grids(table.tally("count"), s)[0], A)
    weighted = table.tally("q_halt")
    assert same(grids(weighted, s)[0], B)
    assert weighted.ranked(s)[0]["score"] == pytest.approx(2 / (1 + np.exp(-4.0)))
    with pytest.raises(ValueError):
        table.tally("bogus")


def test_slots_vote_separately():
    t0, t1 = ("t", 0), ("t", 1)
    r = VoteTable.from_grids([(t0, A, 0), (t0, A, 0), (t1, B, 0), (t1, A, 0), (t1, B, 0)]).tally()
    assert [c["votes"] for c in r.ranked(t0)] == [2]
    assert [c["votes"] for c in r.ranked(t1)] == [2, 1]
    assert same(grids(r, t1)[0], B)
    assert r.num_candidates().tolist() == [1, 2]


def test_metrics_on_a_constructed_example():
    # task x: 2 test outputs; task y: 1 test output.
    truths = {("x", 0): A, ("x", 1): B, ("y", 0): C}
    votes = [
        (("x", 0), A, 0), (("x", 0), A, 0), (("x", 0), B, 0),  # truth ranked 1st
        (("x", 1), A, 0), (("x", 1), A, 0), (("x", 1), C, 0), (("x", 1), C, 0), (("x", 1), C, 0),
        (("x", 1), B, 0),  # truth ranked 3rd
        (("y", 0), A, 0), (("y", 0), A, 0), (("y", 0), C, 0),  # truth ranked 2nd
    ]
    m = score(VoteTable.from_grids(votes).tally(), truths)
    assert m.truth_rank == {("x", 0): 0, ("x", 1): 2, ("y", 0): 1}
    # macro over tasks: pass@1 = mean(1/2, 0) ; pass@2 = mean(1/2, 1) ; pass@5 = mean(1, 1)
    assert m.pass_at_k_task_macro[1] == pytest.approx(0.25)
    assert m.pass_at_k_task_macro[2] == pytest.approx(0.75)
    assert m.pass_at_k_task_macro[5] == pytest.approx(1.0)
    # micro over the 3 test outputs, top-2: x0 and y0 solved
    assert m.arc_prize_score == pytest.approx(2 / 3)
    assert (m.num_tasks, m.num_test_outputs) == (2, 3)
    # 95 % Wilson intervals, worked by hand (z^2 = 3.841459):
    # ARC Prize score, 2 of 3 test outputs: centre (0.666667 + 0.640243) / 2.280486 = 0.573085,
    #   half 1.959964 / 2.280486 * sqrt(0.074074 + 0.106709) = 0.365426
    assert m.arc_prize_score_ci95 == pytest.approx((0.207660, 0.938508), abs=1e-6)
    # pass@2 over 2 tasks (0.5 + 1 = 1.5 "solved"): centre (0.75 + 0.960365) / 2.920729 = 0.585595,
    #   half 1.959964 / 2.920729 * sqrt(0.09375 + 0.240091) = 0.387727
    assert m.pass_at_2_ci95 == pytest.approx((0.197867, 0.973323), abs=1e-6)
    d = m.as_dict()
    assert d["arc_prize_score_ci95"] == pytest.approx([0.207660, 0.938508], abs=1e-6)
    assert d["pass_at_2_task_macro_ci95"] == pytest.approx([0.197867, 0.973323], abs=1e-6)


def test_unpredicted_and_wrong_slots_count_as_unsolved():
    truths = {("x", 0): A, ("y", 0): B, ("y", 1): C}
    m = score(VoteTable.from_grids([(("x", 0), A, 0), (("y", 0), A, 0)]).tally(), truths)
    assert m.truth_rank == {("x", 0): 0, ("y", 0): -1, ("y", 1): -1}
    assert m.arc_prize_score == pytest.approx(1 / 3)
    assert m.pass_at_k_task_macro[1000] == pytest.approx(0.5)


def test_metric_functions_directly():
    ranks = np.array([0, 1, -1, 3])
    task_of = np.array([0, 0, 1, 1])
    assert arc_prize_score(ranks) == pytest.approx(0.5)
    assert pass_at_k_task_macro(ranks, task_of, (1, 2, 4)) == {1: pytest.approx(0.25), 2: pytest.approx(0.5),
                                                               4: pytest.approx(0.75)}


def test_no_pooling_across_evaluations_unless_merged():
    s = ("t", 0)
    truths = {s: A}
    round1 = VoteTable.from_grids([(s, B, 0), (s, B, 0), (s, B, 0)])
    round2 = VoteTable.from_grids([(s, A, 0), (s, A, 0)])
    # tallying round 2 sees round 2 only, whatever was tallied before
    round1.tally()
    r2 = round2.tally()
    assert [c["votes"] for c in r2.ranked(s)] == [2]
    assert score(r2, truths).arc_prize_score == 1.0
    assert len(round1) == 3 and len(round2) == 2  # tallying changes no table
    pooled = round1.merge(round2)
    assert len(round1) == 3 and len(round2) == 2  # merging neither
    rp = pooled.tally()
    assert [c["votes"] for c in rp.ranked(s)] == [3, 2]
    assert score(rp, truths).pass_at_k_task_macro[1] == 0.0


def test_merge_joins_slots_by_name():
    a = VoteTable.from_grids([(("t", 0), A, 0)])
    b = VoteTable.from_grids([(("u", 0), B, 0), (("t", 0), A, 0)])
    r = a.merge(b).tally()
    assert [c["votes"] for c in r.ranked(("t", 0))] == [2]
    assert [c["votes"] for c in r.ranked(("u", 0))] == [1]


def test_ranked_grids_for_submissions_drop_empty_grids():
    s = ("t", 0)
    empty = np.zeros((0, 0), dtype=np.uint8)
    r = VoteTable.from_grids([(s, empty, 0), (s, empty, 0), (s, A, 0)]).tally()
    assert grids(r, s)[0].shape == (0, 0)  # the metrics see upstream's candidate list
    out = r.ranked_grids()
    assert len(out[s]) == 1 and same(out[s][0], A)
    assert len(r.ranked_grids(drop_empty=False)[s]) == 2


# ---------------------------------------------------------------------------
# Upstream's reported ARC/pass@K: votes pooled over every evaluation of a run
# ---------------------------------------------------------------------------


def upstream_pooled_pass_at_k(rounds, truths, ks):
    """Upstream's evaluators/arc.py with aggregated_voting=True, from its formulas: one dict of
    predictions that every evaluation round appends to and none clears; per test input the
    candidates rank by (count, mean sigmoid q) descending (a stable sort: ties keep first
    appearance); pass@K = mean over tasks of the fraction of test inputs solved in the top K."""
    preds: dict = {}
    for votes in rounds:  # never cleared between rounds
        for (task, test), grid, q in votes:
            preds.setdefault((task, test), []).append((grid.shape, grid.tobytes(), 1 / (1 + np.exp(-q))))
    tasks: dict = {}
    for task, test in truths:
        tasks.setdefault(task, []).append(test)
    correct = {k: 0.0 for k in ks}
    for task, tests in tasks.items():
        solved = {k: 0 for k in ks}
        for test in tests:
            p_map: dict = {}
            for shape, data, q in preds.get((task, test), []):
                stats = p_map.setdefault((shape, data), [0, 0.0])
                stats[0] += 1
                stats[1] += q
            for stats in p_map.values():
                stats[1] /= stats[0]
            ranked = sorted(p_map.items(), key=lambda kv: kv[1], reverse=True)
            truth = truths[(task, test)]
            for k in ks:
                solved[k] += any(h == (truth.shape, truth.tobytes()) for h, _ in ranked[:k])
        for k in ks:
            correct[k] += solved[k] / len(tests)
    return {k: correct[k] / len(tasks) for k in ks}


def test_pooled_votes_reproduce_upstreams_aggregated_pass_at_k():
    rng = np.random.default_rng(4)
    pool = [A, B, C, D, np.array([[7, 7]], dtype=np.uint8)]
    slots = [(f"task{t}", i) for t in range(6) for i in range(1 + t % 2)]
    truths = {s: pool[int(rng.integers(len(pool)))] for s in slots}
    rounds = []
    for r in range(4):  # four evaluations during one training run; later ones lean towards the truth
        votes = []
        for s in slots:
            flat = s[0] in ("task0", "task3")  # q_halt exactly 0 there: exact ties, broken by first appearance
            for _ in range(int(rng.integers(1, 6))):
                grid = truths[s] if rng.random() < 0.15 * r else pool[int(rng.integers(len(pool)))]
                votes.append((s, grid, 0.0 if flat else float(rng.normal())))
        rounds.append(votes)
    ks = (1, 2, 3, 5)
    tables = [VoteTable.from_grids(v) for v in rounds]
    pooled = tables[0]
    differs = False
    for n in range(1, len(rounds) + 1):
        if n > 1:
            pooled = pooled.merge(tables[n - 1])  # oldest first, as upstream appended
        ours = score(pooled.tally(), truths, ks).pass_at_k_task_macro
        expected = upstream_pooled_pass_at_k(rounds[:n], truths, ks)
        assert ours == pytest.approx(expected, abs=1e-12), f"after evaluation {n}"
        alone = score(tables[n - 1].tally(), truths, ks).pass_at_k_task_macro
        differs |= alone != pytest.approx(expected, abs=1e-12)
    assert differs, "the case must be one where pooling changes the reported numbers"


def test_votes_file_round_trip_and_refusals(tmp_path):
    from trm_kaggle.errors import DataError

    table = VoteTable.from_grids([(("t", 0), A, 0.5), (("u|1", 1), C, -2.0), (("t", 0), B, 1.0)])
    path = tmp_path / "votes.npz"
    table.save(path)
    back = VoteTable.load(path)
    assert back.slots == table.slots and np.array_equal(back.keys, table.keys)
    assert np.array_equal(back.slot, table.slot) and np.array_equal(back.q_halt, table.q_halt)
    assert np.array_equal(back.order, table.order)
    assert [c["votes"] for c in back.tally().ranked(("t", 0))] == [1, 1]
    VoteTable.from_grids([]).save(tmp_path / "empty.npz")
    assert len(VoteTable.load(tmp_path / "empty.npz")) == 0
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    # a truncated file (a bad zip archive) and an empty one (no numpy header) were tracebacks of `--pool-with`
    (tmp_path / "cut.npz").write_bytes(path.read_bytes()[:300])
    (tmp_path / "zero.npz").write_bytes(b"")
    for bad in (tmp_path / "cut.npz", tmp_path / "zero.npz"):
        with pytest.raises(DataError, match=f"{bad.name}: not a votes file"):
            VoteTable.load(bad)
    for bad in (tmp_path / "bad.npz", tmp_path / "missing.npz"):
        with pytest.raises(DataError, match=bad.name):
            VoteTable.load(bad)
    # a .npy was a TypeError traceback (np.load gives it as an array) and a JSON file numpy's advice to unpickle
    np.save(tmp_path / "arr.npy", np.zeros(3))
    (tmp_path / "v.json").write_text('{"a": 1}')
    for bad in (tmp_path / "arr.npy", tmp_path / "v.json"):
        with pytest.raises(DataError, match=f"{bad.name}: not a votes file .*\\(no .npz archive\\)$"):
            VoteTable.load(bad)
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DataError, match="not a votes file"):
        VoteTable.load(tmp_path / "other.npz")
    # keys whose shape header lies past the canvas, or NaN q_halt: loaded, then a traceback after the inference
    with np.load(path) as z:
        fields = dict(z)
    for name, change, said in (("header", lambda f: f["keys"].__setitem__((0, 0), 255), "a grid shape past its"),
                               ("nan", lambda f: f["q_halt"].__setitem__(0, np.nan), "non-finite q_halt")):
        edited = {k: v.copy() for k, v in fields.items()}
        change(edited)
        np.savez(tmp_path / f"{name}.npz", **edited)
        with pytest.raises(DataError, match=said):
            VoteTable.load(tmp_path / f"{name}.npz")


def test_a_votes_path_holding_a_nul_byte_is_named_as_such(tmp_path):
    """`evaluate_export(pool_with=["a\\0b"])` said "a<NUL>b: no such votes file", the raw byte on the terminal."""
    from trm_kaggle.errors import TRMError

    with pytest.raises(TRMError, match=r"holds a NUL byte") as caught:
        VoteTable.load("a\0b")
    assert "\0" not in str(caught.value)


@pytest.mark.parametrize("field", ["slot_tests", "order"])
def test_a_votes_file_with_an_index_below_zero_is_refused(tmp_path, field):
    """A votes file whose test indices (or vote order) were edited to -1 loaded, and `evaluate --pool-with` said
    POOLED while none of its votes could belong to a test input."""
    from trm_kaggle.errors import DataError

    VoteTable.from_grids([(("t", 0), A, 0.0), (("t", 1), B, 1.0)]).save(tmp_path / "v.npz")
    with np.load(tmp_path / "v.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[field] = np.full_like(arrays[field], -1)
    np.savez(tmp_path / "edited.npz", **arrays)
    with pytest.raises(DataError, match="test index -1 of task t|a vote's order below 0 or past"):
        VoteTable.load(tmp_path / "edited.npz")
    VoteTable.load(tmp_path / "v.npz")


def _edited_votes(path, tmp_path, name, edit):
    with np.load(path) as z:
        fields = {k: v.copy() for k, v in z.items()}
    edit(fields)
    np.savez(tmp_path / name, **fields)
    return tmp_path / name


@pytest.mark.parametrize("case, said", [
    ("slot listed twice", "task t test 0 listed twice"),
    ("colour 200", "a grid cell of colour 200 (colours are 0 to 9)"),
    ("canvas past the grid", "a key whose canvas holds values past its grid's cells"),
    ("task id with a slash", "task id"),
    ("task ids as numbers", "slot_tasks of dtype int64"),
    ("test index a boolean", "slot_tests of dtype bool"),
    ("keys of other length", "votes of unequal lengths: keys holds 4 rows"),
    ("order at int64's top", "a vote's order below 0 or past"),  # pooled first, the sum overflowed after inference
    ("order of floats, NaN", "order of dtype float64"),  # NaN fails no bound: pooled as int64's bottom, exit 0
    ("order of fractions", "order of dtype float64"),  # 0.5 was cut to 0
])
def test_a_votes_file_no_evaluation_writes_is_refused_naming_it(tmp_path, case, said):
    """A votes file listing a test input twice was pooled and turned a score of 1.0 into 0.0 (its votes tallied in
    a slot scoring never read); colour 200 was drawn as colour 9 and took an attempt; ids no task has, test indexes
    of booleans and keys of another length than the votes were read as they came. Each is one line naming the
    file, and keys of another length are refused from the members' headers, before any member is unpacked (a 3 MB
    file unpacked to 3 GB first)."""
    from trm_kaggle.errors import DataError

    table = VoteTable.from_grids([(("t", 0), A, 0.5), (("u", 1), C, -2.0), (("t", 0), B, 1.0)])
    path = tmp_path / "votes.npz"
    table.save(path)
    edit = {
        "slot listed twice": lambda f: f.update(slot_tasks=np.array(["t", "t"]), slot_tests=np.array([0, 0])),
        "colour 200": lambda f: f["keys"].__setitem__((0, 2), 200),
        "canvas past the grid": lambda f: f["keys"].__setitem__((0, f["keys"].shape[1] - 1), 3),
        "task id with a slash": lambda f: f.update(slot_tasks=np.array(["../x", "u"])),
        "task ids as numbers": lambda f: f.update(slot_tasks=np.array([1, 2])),
        "test index a boolean": lambda f: f.update(slot_tests=np.array([True, False])),
        "keys of other length": lambda f: f.update(keys=np.zeros((4, f["keys"].shape[1]), np.uint8)),
        "order at int64's top": lambda f: f["order"].__setitem__(0, np.iinfo(np.int64).max),
        "order of floats, NaN": lambda f: f.update(order=np.full(len(f["order"]), np.nan)),
        "order of fractions": lambda f: f.update(order=f["order"] + 0.5),
    }[case]
    bad = _edited_votes(path, tmp_path, "bad.npz", edit)
    with pytest.raises(DataError, match=f"bad.npz: not a votes file") as e:
        VoteTable.load(bad)
    assert said in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert VoteTable.load(path).slots == table.slots  # the file as saved still loads
