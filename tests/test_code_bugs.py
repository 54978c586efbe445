"""Synthetic bugs: every mutation type breaks a snippet the way its label says, at one place."""

import collections

import numpy as np
import pytest

from trm_kaggle.data.code import bugs as B

SNIPPET = """def total(items, limit):
    count = 0
    for i in range(len(items) - 1):
        if items[i] > limit and count < 10:
            count += items[i] * 2
    return max(count, limit)"""


def edits_of(bug_type, text=SNIPPET):
    s = B.Snippet(text)
    return [e.apply(text) for e in B.SITES[bug_type](s)]


@pytest.mark.parametrize("bug_type", B.SYNTHETIC)
def test_every_type_has_sites_and_its_valid_pairs_have_the_right_parse_status(bug_type):
    buggy = edits_of(bug_type)
    assert buggy, f"no {bug_type} site in the test snippet"
    valid = [b for b in buggy if B.validate_pair(bug_type, b, SNIPPET) is None]
    assert valid, f"no valid {bug_type} pair"
    syntax = B.BUG_TYPES[bug_type].category == "syntax"
    for b in valid:
        assert b != SNIPPET
        assert B.parses(b) is not syntax  # syntax bugs do not parse, logic bugs do
    assert B.parses(SNIPPET)  # the fixed side parses


@pytest.mark.parametrize("bug_type, expected", [
    ("missing_colon", "    for i in range(len(items) - 1)\n"),
    ("unbalanced_bracket", "def total(items, limit:\n"),
    ("bad_indent", "      return max(count, limit)"),
    ("flipped_comparison", "if items[i] <= limit"),
    ("flipped_comparison", "count >= 10"),
    ("wrong_operator", "count -= items[i]"),
    ("wrong_operator", "items[i] / 2"),
    ("wrong_operator", "limit or count"),
    ("off_by_one", "range(len(items))"),  # 'n - 1' loses its constant
    ("off_by_one", "range(len(items) - 2)"),
    ("off_by_one", "items[i + 1] > limit"),
    ("removed_return", "\n    max(count, limit)"),
    ("swapped_arguments", "max(limit, count)"),
    # locals in binding order: items, limit, count, i; a read becomes one of its neighbours
    ("wrong_variable", "for i in range(len(limit) - 1)"),
    ("wrong_variable", "if items[i] > limit and i < 10"),
])
def test_specific_edits(bug_type, expected):
    assert any(expected in b for b in edits_of(bug_type)), (bug_type, expected)


def test_swapped_arguments():
    text = "def f(a, b):\n    return divmod(a, b) + g(b, b)"
    assert edits_of("swapped_arguments", text) == ["def f(a, b):\n    return divmod(b, a) + g(b, b)"]


def test_operators_are_found_through_parentheses_and_line_breaks_but_not_comments():
    text = "def f(a, b):\n    x = ((a + 1)\n         < b)\n    y = (a  # note\n         - b)\n    return x"
    assert "x = ((a + 1)\n         >= b)" in "\n".join(edits_of("flipped_comparison", text))
    assert not any("y = (a  # note\n         + b)" in b for b in edits_of("wrong_operator", text))
    assert any("((a - 1)" in b for b in edits_of("wrong_operator", text))


def test_not_in_and_is_not_flip_whole():
    text = "def f(a, b):\n    return a not in b or a is not None"
    out = edits_of("flipped_comparison", text)
    assert "def f(a, b):\n    return a in b or a is not None" in out
    assert "def f(a, b):\n    return a not in b or a is None" in out


def test_f_strings_are_left_alone():
    text = "def f(a, b):\n    s = f'{a + b}'\n    return s"
    assert edits_of("wrong_operator", text) == []


def test_removed_return_keeps_parenthesised_values():
    assert edits_of("removed_return", "def f(a):\n    return(a)") == ["def f(a):\n    (a)"]
    assert edits_of("removed_return", "def f(a):\n    return") == []  # a bare return has no value to keep


def test_validate_pair_reasons():
    assert B.validate_pair("missing_colon", SNIPPET, SNIPPET) == "unchanged"
    assert B.validate_pair("missing_colon", "x = 1", "x = 2") == "syntax_bug_parses"
    assert B.validate_pair("wrong_operator", "x = (", "x = 2") == "logic_bug_does_not_parse"
    assert B.validate_pair("wrong_operator", "x = 1", "x = (") == "fixed_does_not_parse"
    assert B.validate_pair("wrong_operator", "x = 1", "x = 2") is None


def test_mutate_labels_counts_and_determinism():
    def run(seed):
        rejected = collections.Counter()
        out = list(B.mutate(B.Snippet(SNIPPET), B.SYNTHETIC, 2, np.random.default_rng(seed), rejected))
        return out, rejected

    out, rejected = run(0)
    assert out == run(0)[0]
    assert len({m.buggy for m in out}) == len(out)  # distinct
    for m in out:
        assert B.validate_pair(m.bug_type, m.buggy, SNIPPET) is None
    per_type = {t: sum(m.bug_type == t for m in out) for t in B.SYNTHETIC}
    assert all(1 <= n <= 2 for n in per_type.values()), per_type
    assert "syntax_bug_parses" in rejected or per_type["bad_indent"] == 2


def test_difficulty_grows_with_type_size_and_depth():
    easy = B.difficulty("missing_colon", 2, 16, 0)
    assert easy < B.difficulty("wrong_variable", 2, 16, 0)
    assert easy < B.difficulty("missing_colon", 16, 16, 0) < B.difficulty("missing_colon", 16, 16, 4) <= 1.0
