"""The voting and scoring calls check what they are given, in one error naming the argument: a table is checked as
its votes file is (`VoteTable`'s one check), truths are ARC grids, counts are bounded as `evaluate` bounds them."""

from __future__ import annotations

import numpy as np
import pytest

from trm_kaggle.errors import DataError
from trm_kaggle.evaluate.vote import VoteTable, arc_prize_score, pass_at_k_task_macro, score, tally

A = np.array([[1]])


def result():
    return VoteTable.from_grids([(("a", 0), np.array([[k]]), 0.0) for k in (1, 2, 3)]).tally()


@pytest.mark.parametrize("member", ["slot", "q_halt", "order"])
def test_a_votes_file_whose_member_is_2d_is_refused_by_load(tmp_path, member):
    VoteTable.from_grids([(("a", 0), A, 0.0)]).save(tmp_path / "v.npz")
    z = dict(np.load(tmp_path / "v.npz"))
    z[member] = z[member].reshape(-1, 1)  # passed the up-front check, then failed in merge after the inference
    np.savez(tmp_path / "v2d.npz", **z)
    with pytest.raises(DataError, match=f"v2d.npz: not a votes file .*{member} of shape"):
        VoteTable.load(tmp_path / "v2d.npz")


@pytest.mark.parametrize("vote, said", [
    ((("a", -1), A, 0.0), r"votes\[0\] test index=-1"),
    ((("a", 1.7), A, 0.0), r"votes\[0\] test index=1.7"),
    ((("a", 0), np.array([[200]]), 0.0), r"votes\[0\] grid: value 200"),
    ((("a", 0), np.array([[-1]]), 0.0), r"votes\[0\] grid: value -1"),
    ((("a", 0), [[1.7]], 0.0), r"votes\[0\] grid: value 1.7"),
    ((("a", 0), np.array([[np.nan]]), 0.0), r"votes\[0\] grid: values of dtype float64"),
    ((("a", 0), A, float("nan")), r"votes\[0\] q_halt=nan"),
    (((None, 0), A, 0.0), "slots: task id None, which is no text"),
    ((("a\x1b[31m", 0), A, 0.0), r"slots: task id 'a\\x1b\[31m'"),
])
def test_from_grids_refuses_what_load_refuses_and_casts_nothing(vote, said):
    with pytest.raises(ValueError, match=said):
        VoteTable.from_grids([vote])


def test_the_constructor_checks_what_load_checks():
    good = VoteTable.from_grids([(("a", 0), A, 0.0), (("b", 0), A, 0.0)])
    for change, said in ((dict(slots=[("a", 0), ("a", 0)]), "slots: task a test 0 listed twice"),
                         (dict(order=np.array([-1, 0])), "a vote's order below 0"),
                         (dict(q_halt=np.array([np.inf, 0.0])), "non-finite q_halt"),
                         (dict(slot=good.slot.reshape(-1, 1)), r"slot of shape \(2, 1\)"),
                         (dict(slot=np.array([0.0, 1.0])), "slot of dtype float64"),
                         (dict(keys=np.zeros((2, 11), np.uint8)), "keys of shape")):
        parts = dict(slots=good.slots, slot=good.slot, keys=good.keys, q_halt=good.q_halt, order=good.order)
        with pytest.raises(ValueError, match=said):
            VoteTable(**{**parts, **change})


@pytest.mark.parametrize("truth", [[[257]], [[1.9]], [[True]], [[-255]], np.zeros((31, 31), int)])
def test_a_truth_that_is_no_arc_grid_is_refused_naming_it(truth):
    with pytest.raises(ValueError, match="truths: task a test 0: "):
        score(result(), {("a", 0): np.array(truth)})
    with pytest.raises(ValueError, match="truths: task a test 0: "):
        result().truth_ranks({("a", 0): np.array(truth)})


def test_counts_are_bounded_as_evaluate_bounds_them():
    r = result()
    for ks, said in (([0], r"ks\[0\]=0"), ([-1], r"ks\[0\]=-1"), ([float("nan")], r"ks\[0\]=nan"),
                     (["2"], r"ks\[0\]='2'")):
        with pytest.raises(ValueError, match=said):
            score(r, {("a", 0): A}, ks=ks)
    with pytest.raises(ValueError, match="limit=-1"):
        r.ranked_grids(limit=-1)
    with pytest.raises(ValueError, match="limit=-1"):
        r.ranked(("a", 0), limit=-1)
    with pytest.raises(ValueError, match="attempts=0"):
        arc_prize_score(np.array([0]), attempts=0)


def test_a_score_over_no_truth_is_none_not_zero():
    m = score(result(), {})
    assert m.arc_prize_score is None and m.pass_at_k_task_macro[2] is None and m.pass_at_2_ci95 is None
    assert m.as_dict()["pass_at_2_task_macro_ci95"] is None
    assert pass_at_k_task_macro(np.zeros(0), np.zeros(0), ks=[1]) == {1: None}
    assert score(result(), {("a", 0): A}, ks=[1]).as_dict()["pass_at_2_task_macro_ci95"] is None  # no pass@2


def test_the_list_form_of_truths_scores_as_the_mapping():
    assert score(result(), [(("a", 0), A)]).arc_prize_score == 1.0


def test_wrong_argument_types_are_named(tmp_path):
    table = VoteTable.from_grids([(("a", 0), A, 0.0)])
    for call, said in ((lambda: tally({"a": 1}), "table: expected a VoteTable, got dict"),
                       (lambda: table.merge("x"), "other: expected a VoteTable, got str"),
                       (lambda: VoteTable.load(None), "path: expected a votes file"),
                       (lambda: score({"a": 1}, {}), "result: expected a VoteResult"),
                       (lambda: score(result(), "abc"), "truths: expected a list"),
                       (lambda: result().ranked("a"), "slot: expected a .task id, test index. pair"),
                       (lambda: VoteTable.from_grids(5), "votes: expected a list")):
        with pytest.raises(TypeError, match=said):
            call()


@pytest.mark.parametrize("change, said", [
    (lambda t: t.q_halt.__setitem__(0, np.nan), "non-finite q_halt values"),
    (lambda t: setattr(t, "slot", np.array([[0]])), r"slot of shape \(1, 1\)"),
    (lambda t: setattr(t, "slots", [("a", -1)]), "slots: test index -1 of task a"),
    (lambda t: setattr(t, "slot", [[0]]), r"slot of shape \(1, 1\)"),
    (lambda t: setattr(t, "slots", 5), "slots: int, not a list"),
], ids=["nan-q_halt", "2-D-slot", "negative-index", "list-slot", "int-slots"])
def test_save_refuses_a_table_changed_into_one_load_refuses_and_writes_nothing(tmp_path, change, said):
    """A table's arrays are its caller's: changed after it was made, `save` wrote a file its own `load` refused."""
    table = VoteTable.from_grids([(("a", 0), A, 0.0)])
    change(table)
    with pytest.raises(ValueError, match=f"v.npz: not written: the table changed since it was made .*{said}"):
        table.save(tmp_path / "v.npz")
    assert list(tmp_path.iterdir()) == []
