"""Linter-derived repair pairs: what `ruff --fix` would change in a snippet.

ruff (an optional dependency: `pip install -e '.[repair]'`) checks a batch of snippets
in one subprocess call and reports each violation with its fix as text edits. Each
safe fix becomes its own pair, labelled with its rule code: the buggy side is the
snippet as written, the fixed side the snippet with that one fix applied, so the pair
differs at one place, like the synthetic ones. ruff reads the code; nothing runs it.
"""

from __future__ import annotations

import bisect
import os
import shutil
import subprocess
from dataclasses import dataclass

from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import parse_json

# Rule families whose safe fixes repair something a reader would call a mistake or a
# clumsy construct (comparisons, f-strings without fields, old idioms, redundant calls).
RULES = ["E7", "F5", "F6", "UP", "SIM", "C4", "PIE", "RET", "PERF", "PLR1714", "RUF0"]
TARGET_VERSION = "py310"
TIME_LIMIT_S = 120.0


@dataclass(frozen=True)
class LintFix:
    snippet: int  # index into the list given to `lint_fixes`
    rule: str
    fixed: str
    line: int  # 1-based line of the violation in the snippet


def ruff_binary() -> str | None:
    """The ruff executable of this environment, or None when ruff is not installed."""
    try:
        from ruff.__main__ import find_ruff_bin

        return os.fsdecode(find_ruff_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("ruff")


def lint_fixes(snippets: list[str], ruff: str, time_limit: float = TIME_LIMIT_S) -> list[LintFix]:
    """Every safe single-violation fix ruff offers for `snippets`, in snippet order.

    The snippets go to ruff as one file on its standard input, two blank lines apart (no
    file to write; the selected rules look no further than a statement or a function), and
    each violation is mapped back to its snippet by line. A fix reaching outside its snippet
    is dropped.
    """
    if not snippets:
        return []
    first_rows, row = [], 1
    for text in snippets:
        first_rows.append(row)
        row += text.count("\n") + 3
    cmd = [ruff, "check", "--isolated", "--no-cache", "--exit-zero", "--output-format", "json",
           "--target-version", TARGET_VERSION, "--select", ",".join(RULES), "--stdin-filename", "snippets.py", "-"]
    try:
        done = subprocess.run(cmd, input="\n\n\n".join(snippets) + "\n", capture_output=True, text=True,
                              timeout=time_limit, encoding="utf-8", errors="replace")
    except subprocess.TimeoutExpired:
        raise TRMError(f"ruff took more than {time_limit:.0f} s on {len(snippets)} snippets") from None
    except OSError as e:
        raise TRMError(f"cannot run ruff ({ruff}): {e.strerror}") from None
    if done.returncode != 0:
        raise TRMError(f"ruff failed (exit {done.returncode}): {done.stderr.strip()[:300]}")
    violations = parse_json(done.stdout or "[]", "ruff check", "output")
    out = []
    for v in violations:
        fix = v.get("fix") or {}
        if fix.get("applicability") != "safe" or not fix.get("edits"):
            continue
        index = bisect.bisect_right(first_rows, v["location"]["row"]) - 1
        text = snippets[index]
        fixed = _apply(text, fix["edits"], first_rows[index] - 1)
        if fixed is not None and fixed != text:
            out.append(LintFix(index, v["code"], fixed, v["location"]["row"] - first_rows[index] + 1))
    out.sort(key=lambda f: (f.snippet, f.line, f.rule))
    return out


def _apply(text: str, edits: list[dict], row_shift: int) -> str | None:
    """`text` with ruff's edits applied (1-based rows of the whole file, `row_shift` rows before this
    snippet); None if they overlap or reach outside the snippet (its final newline aside)."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)

    def offset(loc: dict) -> int:
        row, lines = loc["row"] - row_shift, len(starts) - 1
        if not (1 <= row <= lines or (row == lines + 1 and loc["column"] == 1)):  # the start of the next line
            raise IndexError(row)
        return starts[row - 1] + loc["column"] - 1

    try:
        spans = sorted((offset(e["location"]), offset(e["end_location"]), e.get("content") or "") for e in edits)
    except (KeyError, IndexError, TypeError):  # an edit outside the snippet: not one we can trust
        return None
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
        return None
    source = text + "\n"  # ruff saw the file with its final newline
    for start, end, content in reversed(spans):
        source = source[:start] + content + source[end:]
    return source[:-1] if source.endswith("\n") else None
