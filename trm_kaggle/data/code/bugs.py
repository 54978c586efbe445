"""Synthetic bugs: each mutation breaks a correct snippet in one labelled way.

A mutation lists the sites where it applies (found from the snippet's AST or tokens)
and turns one site into a text edit. Editing the text, rather than rewriting the AST
and unparsing it, keeps the snippet's own layout and comments: the buggy and the fixed
side differ at the bug and nowhere else, which is what a repair model should learn.

Syntax bugs (the buggy side must fail to parse):
  missing_colon        the ':' ending a block header is deleted
  unbalanced_bracket   one bracket of a pair is deleted
  bad_indent           a statement's indentation moves by two spaces
Logic bugs (the buggy side must still parse):
  flipped_comparison   a comparison is negated ('<' -> '>=', '==' -> '!=', 'in' -> 'not in')
  off_by_one           a range() bound or a subscript moves by one
  wrong_operator       an arithmetic or boolean operator is swapped ('+' -> '-', 'and' -> 'or')
  swapped_arguments    two neighbouring positional arguments of a call trade places
  wrong_variable       a local name is read where another local was meant
  removed_return       'return x' loses its 'return' (the value is computed and dropped)

`validate_pair` is the gate every pair passes: the fixed side parses, the buggy side
differs, and parses or not according to its category. Nothing here runs the code.
"""

from __future__ import annotations

import ast
import collections
import io
import re
import tokenize
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np


@dataclass(frozen=True)
class BugType:
    name: str
    category: str  # "syntax", "logic" or "lint"
    base_difficulty: float  # how hard the type is to repair, before size and nesting are counted


BUG_TYPES: dict[str, BugType] = {b.name: b for b in [
    BugType("missing_colon", "syntax", 0.1),
    BugType("unbalanced_bracket", "syntax", 0.2),
    BugType("bad_indent", "syntax", 0.2),
    BugType("flipped_comparison", "logic", 0.4),
    BugType("wrong_operator", "logic", 0.5),
    BugType("removed_return", "logic", 0.5),
    BugType("off_by_one", "logic", 0.6),
    BugType("swapped_arguments", "logic", 0.7),
    BugType("wrong_variable", "logic", 0.9),
    BugType("lint", "lint", 0.3),  # pairs from `ruff --fix` (see trm_kaggle.data.code.lint)
]}
SYNTHETIC = [name for name, b in BUG_TYPES.items() if b.category != "lint"]


def parse(text: str) -> ast.Module:
    """The AST of `text` (only parsed: nothing is compiled to bytecode or run); SyntaxError if it does not parse."""
    with warnings.catch_warnings():  # a mutated literal ('1if') or an old escape warns; say nothing
        warnings.simplefilter("ignore")
        return compile(text, "<snippet>", "exec", ast.PyCF_ONLY_AST)


def parses(text: str) -> bool:
    try:
        parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # ValueError: NUL bytes
        return False
    return True


def validate_pair(bug_type: str, buggy: str, fixed: str, fixed_parses: bool | None = None) -> str | None:
    """None when the pair is valid, else the reason it is not (a short key, counted by the builder)."""
    if buggy == fixed:
        return "unchanged"
    if not (parses(fixed) if fixed_parses is None else fixed_parses):
        return "fixed_does_not_parse"
    buggy_parses = parses(buggy)
    if BUG_TYPES[bug_type].category == "syntax":
        return "syntax_bug_parses" if buggy_parses else None
    return None if buggy_parses else "logic_bug_does_not_parse"


def difficulty(bug_type: str, num_lines: int, rows: int, depth: int) -> float:
    """A score in [0, 1]: mostly the type, then the snippet's share of the grid, then the nesting depth
    (in blocks) of the edited line. Curriculum stages cap on it."""
    score = (0.6 * BUG_TYPES[bug_type].base_difficulty + 0.25 * min(1.0, num_lines / rows)
             + 0.15 * min(1.0, depth / 4))
    return round(score, 3)


# ---------------------------------------------------------------------------
# A parsed snippet and text edits on it
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    start: int  # character offsets into the snippet text
    end: int
    text: str  # replaces text[start:end]

    def apply(self, source: str) -> str:
        return source[:self.start] + self.text + source[self.end:]


class Snippet:
    """A snippet's text with its AST, line offsets and (on demand) tokens, shared by the mutations.

    Snippets are ASCII (the builder drops others), so the AST's UTF-8 column offsets are
    character offsets.
    """

    def __init__(self, text: str, tree: ast.AST | None = None):
        self.text = text
        self.tree = tree if tree is not None else parse(text)
        self.lines = text.split("\n")
        self.line_starts = np.cumsum([0] + [len(line) + 1 for line in self.lines]).tolist()
        self._tokens: list[tokenize.TokenInfo] | None = None
        self._nodes: list[ast.AST] | None = None

    def offset(self, lineno: int, col: int) -> int:
        return self.line_starts[lineno - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.text[a:b]

    def depth_at(self, offset: int) -> int:
        """Indentation of the line holding `offset`, in 4-space blocks."""
        line = self.lines[int(np.searchsorted(self.line_starts, offset, side="right")) - 1]
        return (len(line) - len(line.lstrip(" "))) // 4

    @property
    def nodes(self) -> list[ast.AST]:
        """Every AST node outside f-strings (whose inner positions Python < 3.12 does not always get right)."""
        if self._nodes is None:
            out, stack = [], [self.tree]
            while stack:
                node = stack.pop()
                out.append(node)
                if not isinstance(node, ast.JoinedStr):
                    stack.extend(reversed(list(ast.iter_child_nodes(node))))
            self._nodes = out
        return self._nodes

    @property
    def tokens(self) -> list[tokenize.TokenInfo]:
        if self._tokens is None:
            self._tokens = list(tokenize.generate_tokens(io.StringIO(self.text).readline))
        return self._tokens


# ---------------------------------------------------------------------------
# Syntax bugs (sites from the token stream)
# ---------------------------------------------------------------------------

_SKIP_TOKENS = (tokenize.COMMENT, tokenize.NL)


def _significant(tokens: list[tokenize.TokenInfo]) -> list[tokenize.TokenInfo]:
    return [t for t in tokens if t.type not in _SKIP_TOKENS]


def sites_missing_colon(s: Snippet) -> list[Edit]:
    toks = _significant(s.tokens)
    return [Edit(s.offset(*t.start), s.offset(*t.end), "")
            for t, nxt in zip(toks, toks[1:]) if t.string == ":" and nxt.type == tokenize.NEWLINE]


def sites_unbalanced_bracket(s: Snippet) -> list[Edit]:
    return [Edit(s.offset(*t.start), s.offset(*t.end), "") for t in s.tokens
            if t.type == tokenize.OP and t.string in "()[]{}"]


def sites_bad_indent(s: Snippet) -> list[Edit]:
    """Move the first line of a statement two spaces right, or left when it is indented."""
    out, at_line_start = [], True
    for t in s.tokens:
        if t.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.COMMENT):
            at_line_start = at_line_start or t.type in (tokenize.NEWLINE, tokenize.NL)
            continue
        if at_line_start and t.type != tokenize.ENDMARKER:
            line_start = s.offset(t.start[0], 0)
            width = t.start[1]
            out.append(Edit(line_start, line_start + width, " " * (width + 2)))
            if width >= 2:
                out.append(Edit(line_start, line_start + width, " " * (width - 2)))
        at_line_start = False
    return out


# ---------------------------------------------------------------------------
# Logic bugs (sites from the AST)
# ---------------------------------------------------------------------------

_NEGATED = {ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<", ast.Eq: "!=", ast.NotEq: "==",
            ast.Is: "is not", ast.IsNot: "is", ast.In: "not in", ast.NotIn: "in"}
_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                 ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_BIN_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
             ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^",
             ast.MatMult: "@"}
_WRONG_BIN = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "/", "%": "//", "**": "*", "<<": ">>", ">>": "<<",
              "|": "&", "&": "|", "^": "|", "@": "*"}
_WRONG_BOOL = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_GAP_FILLER = re.compile(r"[\s()\\]*")


def _operator_in_gap(s: Snippet, left: ast.AST, right: ast.AST, expected: str) -> tuple[int, int] | None:
    """(start, end) of the operator between two operands, or None when the gap holds anything else
    (a comment, say): parentheses, whitespace and line continuations are all it may hold besides."""
    a, b = s.offset(left.end_lineno, left.end_col_offset), s.offset(right.lineno, right.col_offset)
    gap = s.text[a:b]
    lead = _GAP_FILLER.match(gap).end()
    trail = len(gap) - _GAP_FILLER.match(gap[::-1]).end()
    if gap[lead:trail].split() != expected.split():
        return None
    return a + lead, a + trail


def sites_flipped_comparison(s: Snippet) -> list[Edit]:
    out = []
    for node in s.nodes:
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                where = _operator_in_gap(s, operands[i], operands[i + 1], _COMPARE_TEXT[type(op)])
                if where:
                    out.append(Edit(*where, _NEGATED[type(op)]))
    return out


def sites_wrong_operator(s: Snippet) -> list[Edit]:
    out = []
    for node in s.nodes:
        if isinstance(node, ast.BinOp):
            text = _BIN_TEXT[type(node.op)]
            where = _operator_in_gap(s, node.left, node.right, text)
            if where:
                out.append(Edit(*where, _WRONG_BIN[text]))
        elif isinstance(node, ast.AugAssign):
            text = _BIN_TEXT[type(node.op)] + "="
            where = _operator_in_gap(s, node.target, node.value, text)
            if where:
                out.append(Edit(*where, _WRONG_BIN[text[:-1]] + "="))
        elif isinstance(node, ast.BoolOp):
            text, wrong = _WRONG_BOOL[type(node.op)]
            for left, right in zip(node.values, node.values[1:]):
                where = _operator_in_gap(s, left, right, text)
                if where:
                    out.append(Edit(*where, wrong))
    return out


def _int_constant(node: ast.AST) -> int | None:
    """The value of an int literal, or of a negated one (-1); None for anything else (bools included)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_constant(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _shift_by_one(s: Snippet, expr: ast.AST) -> list[Edit]:
    """The ways to move `expr` by one: a literal changes value, `n - 1` changes its constant (or loses
    it), a name, attribute, call or subscript gets ' + 1' / ' - 1' appended."""
    start, end = s.span(expr)
    value = _int_constant(expr)
    if value is not None:
        return [Edit(start, end, str(value + d)) for d in (1, -1)]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        k = _int_constant(expr.right)
        if k is None or k < 0 or not isinstance(expr.right, ast.Constant):
            return []
        k_start, k_end = s.span(expr.right)
        out = []
        for d in (1, -1):
            if k + d > 0:
                out.append(Edit(k_start, k_end, str(k + d)))
            elif k + d == 0:  # 'n - 1' -> 'n': drop the operator and the constant
                out.append(Edit(s.offset(expr.left.end_lineno, expr.left.end_col_offset), end, ""))
        return out
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return [Edit(end, end, " + 1"), Edit(end, end, " - 1")]
    return []


def sites_off_by_one(s: Snippet) -> list[Edit]:
    out = []
    for node in s.nodes:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
                and 1 <= len(node.args) <= 3 and not node.keywords
                and not any(isinstance(a, ast.Starred) for a in node.args)):
            for arg in node.args[:2]:  # the bounds, not the step
                out.extend(_shift_by_one(s, arg))
        elif isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(index, ast.Slice):
                for bound in (index.lower, index.upper):
                    if bound is not None:
                        out.extend(_shift_by_one(s, bound))
            elif not isinstance(index, ast.Tuple):
                out.extend(_shift_by_one(s, index))
    return out


def sites_swapped_arguments(s: Snippet) -> list[Edit]:
    out = []
    for node in s.nodes:
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            for a, b in zip(node.args, node.args[1:]):
                if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                    continue
                (a0, a1), (b0, b1) = s.span(a), s.span(b)
                first, second = s.text[a0:a1], s.text[b0:b1]
                if first != second:
                    out.append(Edit(a0, b1, second + s.text[a1:b0] + first))
    return out


def _local_names(s: Snippet) -> list[str]:
    """Names the snippet binds itself (parameters, assignment and loop targets), in first-seen order."""
    names: dict[str, None] = {}
    for node in s.nodes:
        if isinstance(node, ast.arg):
            names[node.arg] = None
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names[node.id] = None
    return list(names)


def sites_wrong_variable(s: Snippet) -> list[Edit]:
    """A read of a local name becomes a read of its neighbour in binding order (the name bound just
    before or after it): mixing up names that live side by side is the usual slip, and two
    candidates per read keep the site list short in snippets with many locals."""
    local = _local_names(s)
    if len(local) < 2:
        return []
    position = {name: i for i, name in enumerate(local)}
    out = []
    for node in s.nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in position:
            start, end = s.span(node)
            i = position[node.id]
            out.extend(Edit(start, end, local[j]) for j in (i - 1, i + 1) if 0 <= j < len(local))
    return out


def sites_removed_return(s: Snippet) -> list[Edit]:
    out = []
    for node in s.nodes:
        if isinstance(node, ast.Return) and node.value is not None:
            start, value_start = s.span(node)[0], s.offset(node.value.lineno, node.value.col_offset)
            keyword = s.text[start:value_start]
            drop = 6 + len(keyword[6:]) - len(keyword[6:].lstrip(" "))  # 'return' and the spaces after it
            if keyword.startswith("return"):
                out.append(Edit(start, start + drop, ""))
    return out


SITES: dict[str, Callable[[Snippet], list[Edit]]] = {
    "missing_colon": sites_missing_colon,
    "unbalanced_bracket": sites_unbalanced_bracket,
    "bad_indent": sites_bad_indent,
    "flipped_comparison": sites_flipped_comparison,
    "wrong_operator": sites_wrong_operator,
    "removed_return": sites_removed_return,
    "off_by_one": sites_off_by_one,
    "swapped_arguments": sites_swapped_arguments,
    "wrong_variable": sites_wrong_variable,
}


@dataclass(frozen=True)
class Mutation:
    bug_type: str
    buggy: str
    depth: int  # indentation (in blocks) of the edited line


def mutate(s: Snippet, bug_types: list[str], per_type: int, rng: np.random.Generator,
           rejected: collections.Counter) -> Iterator[Mutation]:
    """Up to `per_type` valid, distinct mutations of each type, sites drawn at random.

    Sites are tried in a random order until `per_type` of them pass `validate_pair`, so a
    site that happens not to break the parse (or to break it when it should not) costs
    only itself. Rejections are counted in `rejected` by reason.
    """
    seen = {s.text}
    for bug_type in bug_types:
        try:
            edits = SITES[bug_type](s)
        except (tokenize.TokenError, SyntaxError, IndexError):  # a snippet the tokenizer reads differently
            rejected["no_sites"] += 1
            continue
        kept = 0
        for i in rng.permutation(len(edits)):
            if kept == per_type:
                break
            edit = edits[i]
            buggy = edit.apply(s.text)
            if buggy in seen:
                continue
            reason = validate_pair(bug_type, buggy, s.text, fixed_parses=True)
            if reason:
                rejected[reason] += 1
                continue
            seen.add(buggy)
            kept += 1
            yield Mutation(bug_type, buggy, s.depth_at(edit.start))
