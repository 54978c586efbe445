"""Linter-derived pairs: ruff's safe fixes, one pair per fix, mapped back to the snippet they belong to."""

import pytest

from trm_kaggle.data.code.lint import _apply, lint_fixes, ruff_binary
from trm_kaggle.errors import TRMError

ruff = ruff_binary()
needs_ruff = pytest.mark.skipif(ruff is None, reason="linter pairs need ruff: pip install -e '.[repair]'")


@needs_ruff
def test_each_safe_fix_is_its_own_pair_in_its_own_snippet():
    snippets = ["def f(x, items):\n    if not x in items:\n        return 1\n    return f'a'",
                "x = 1",
                "class C(object):\n    pass"]
    fixes = lint_fixes(snippets, ruff)
    assert [(f.snippet, f.rule, f.line) for f in fixes] == [(0, "E713", 2), (0, "F541", 4), (2, "UP004", 1)]
    assert fixes[0].fixed == "def f(x, items):\n    if x not in items:\n        return 1\n    return f'a'"
    assert fixes[1].fixed == "def f(x, items):\n    if not x in items:\n        return 1\n    return 'a'"
    assert fixes[2].fixed == "class C:\n    pass"
    assert lint_fixes([], ruff) == []


def test_edits_outside_the_snippet_or_overlapping_are_dropped():
    edit = {"location": {"row": 12, "column": 1}, "end_location": {"row": 12, "column": 2}, "content": "y"}
    assert _apply("x = 1\nz = 2", [edit], row_shift=10) == "x = 1\ny = 2"
    assert _apply("x = 1\nz = 2", [edit], row_shift=5) is None  # row 7 of a 2-line snippet
    overlapping = [{"location": {"row": 1, "column": 1}, "end_location": {"row": 1, "column": 4}, "content": ""},
                   {"location": {"row": 1, "column": 2}, "end_location": {"row": 1, "column": 5}, "content": ""}]
    assert _apply("x = 1", overlapping, row_shift=0) is None


def test_a_missing_ruff_is_a_clear_error():
    with pytest.raises(TRMError, match="cannot run ruff"):
        lint_fixes(["x = 1"], "/nonexistent/ruff")
