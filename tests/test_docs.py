"""The documentation's commands run as written, and its links resolve.

Every fenced bash/sh/console/python block in README.md and docs/**/*.md carries a marker on the line just
above it:

    <!-- run -->                        the test runs it, in order with the page's other blocks
    <!-- run: needs runs/pipeline -->   the same, on a page that also holds `trm-kaggle pipeline`'s outputs
    <!-- run: makes runs/pipeline -->   the one block that makes those outputs (run once, shared by every page)
    <!-- not run: REASON -->            shown, not run (a GPU, credentials, data from outside; the page says where)

Each page's blocks run in a fresh copy of what a clone holds (the tracked files), with `trm-kaggle`, `python`
and `papermill` from this test's environment. `pip install` lines are checked (the extras they name exist in
pyproject.toml), not executed: the environment running the tests already has them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND_LANGUAGES = {"bash", "sh", "shell", "console", "python", "py"}
PIPELINE = "runs/pipeline"  # the one shared product: `trm-kaggle pipeline`'s work directory
BLOCK_TIMEOUT_S = 600

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
MARKER = re.compile(r"^<!--\s*(?P<kind>not run|run)\s*(?::\s*(?P<note>.*?))?\s*-->$")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    marker: str | None  # "run", "not run" or None
    note: str  # the marker's text after the colon

    @property
    def where(self) -> str:
        return f"{rel(self.page)}:{self.line}"

    @property
    def is_command(self) -> bool:
        return self.language in COMMAND_LANGUAGES


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with the marker on the line above each (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = "\n".join(re.sub(rf"^ {{0,{indent}}}", "", ln) for ln in lines[i + 1:j])
        above = lines[i - 1].strip() if i > 0 else ""
        mk = MARKER.match(above)
        found.append(Block(page, i + 1, m["info"].lower(), body, mk["kind"] if mk else None,
                           (mk["note"] or "").strip() if mk else ""))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def marker_problems(block: Block) -> list[str]:
    if not block.language:
        return [f"{block.where}: a fenced block without a language (```text for output, ```bash for commands)"]
    if not block.is_command:
        return [f"{block.where}: a marker above a ```{block.language} block (only commands run)"] if block.marker else []
    if block.marker is None:
        return [f"{block.where}: a ```{block.language} block without <!-- run --> or <!-- not run: REASON --> "
                "on the line just above it"]
    if block.marker == "not run" and not block.note:
        return [f"{block.where}: <!-- not run: ... --> needs its reason"]
    if block.marker == "run" and block.note not in ("", f"needs {PIPELINE}", f"makes {PIPELINE}"):
        return [f"{block.where}: unknown run marker {block.note!r} (use 'needs {PIPELINE}' or 'makes {PIPELINE}')"]
    return []


# ---------------------------------------------------------------------------
# static checks: markers, pip lines, links, wording
# ---------------------------------------------------------------------------


def test_every_command_block_is_marked():
    problems = [p for b in all_blocks() for p in marker_problems(b)]
    assert not problems, "\n".join(problems)
    makers = [b.where for b in all_blocks() if b.marker == "run" and b.note == f"makes {PIPELINE}"]
    assert len(makers) == 1, f"exactly one block must make {PIPELINE}, found {makers}"


def test_marker_check_catches_an_unmarked_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```bash\nls\n```\n\n<!-- not run:  -->\n```python\nx = 1\n```\n\n<!-- run -->\n"
                    "```text\nout\n```\n\n```\nbare\n```\n")
    problems = [p for b in blocks(page) for p in marker_problems(b)]
    assert len(problems) == 4 and "page.md:3" in problems[0] and "page.md:8" in problems[1], problems


def pyproject_extras() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib

        return set(tomllib.loads(text)["project"]["optional-dependencies"])
    except ImportError:  # Python 3.10: the section's keys are enough
        section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.M))


PIP_INSTALL = re.compile(r"(?:python3? -m )?pip install\b[^&;|\n]*")


def script_lines(block: Block) -> list[str]:
    """The block's shell text as logical lines (continuations joined); console blocks: the `$ ` lines."""
    raw = block.text.splitlines()
    if block.language == "console":
        raw, keep = [], False
        for ln in block.text.splitlines():
            if ln.startswith("$ ") or keep:
                raw.append(ln[2:] if ln.startswith("$ ") else ln)
                keep = ln.rstrip().endswith("\\")
    out, cur = [], ""
    for ln in raw:
        cur += ln.rstrip("\\").rstrip() + " " if ln.rstrip().endswith("\\") else ln
        if not ln.rstrip().endswith("\\"):
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


def pip_problems(found: list[Block], extras: set[str]) -> tuple[int, list[str]]:
    """(pip install commands seen, extras they name that pyproject.toml lacks)."""
    problems, seen = [], 0
    for b in found:
        if b.language not in ("bash", "sh", "shell", "console"):
            continue
        for line in script_lines(b):
            for cmd in PIP_INSTALL.findall(line):
                seen += 1
                for group in re.findall(r"(?:\.|trm_kaggle)\[([^\]]*)\]", cmd):
                    problems += [f"{b.where}: extra {x!r} is not in pyproject.toml" for x in group.split(",")
                                 if x.strip() not in extras]
    return seen, problems


def test_pip_lines_name_extras_that_exist():
    seen, problems = pip_problems(all_blocks(), pyproject_extras())
    assert seen, "no pip install line found in the docs"
    assert not problems, "\n".join(problems)


def test_pip_check_catches_a_missing_extra(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('<!-- not run: x -->\n```bash\npython -m pip install "torch==2.13.0" -e ".[dev,nope]" && ls\n'
                    'pip install "trm_kaggle[hub]"\n```\n')
    seen, problems = pip_problems(blocks(page), {"dev", "hub"})
    assert seen == 2 and len(problems) == 1 and "'nope'" in problems[0], problems


def test_readme_test_command_is_what_ci_runs():
    line = 'python -m pip install "torch==2.13.0" -e ".[dev,notebooks]" && python -m pytest -q'
    assert line in (ROOT / "README.md").read_text().splitlines()
    assert line in (ROOT / ".ci" / "run").read_text().splitlines()


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(page: Path, inline_code: bool = False) -> str:
    """The page without its fenced blocks, and without inline code unless asked (links there are examples)."""
    text, out, fence = page.read_text(encoding="utf-8"), [], None
    for ln in text.splitlines():
        m = FENCE.match(ln)
        if fence is None and m:
            fence = m["fence"][0] * len(m["fence"])
            out.append("")
        elif fence is not None:
            if ln.strip().startswith(fence) and not ln.strip().strip(fence[0]):
                fence = None
            out.append("")
        else:
            out.append(ln.replace("`", "") if inline_code else re.sub(r"`[^`]*`", "", ln))
    return "\n".join(out)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats numbered."""
    slugs, counts = set(), {}
    for ln in prose(page, inline_code=True).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", ln)
        if m:
            slug = re.sub(r"[^\w\- ]", "", re.sub(r"<[^>]+>", "", m[1]).lower()).replace(" ", "-")
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def test_relative_links_resolve():
    problems = []
    for page in PAGES:
        for target in LINK.findall(prose(page)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                problems.append(f"{rel(page)}: link to {target}: {path} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{rel(page)}: link to {target}: no heading #{anchor} in {dest.name}")
    assert not problems, "\n".join(problems)


def test_link_check_catches_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "b.md").write_text("# A title, with `code`\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#a-title-with-code) [gone](c.md) [bad](b.md#nope) `[code](x.md)`\n")
    found = [t for t in LINK.findall(prose(page))]
    assert found == ["b.md#a-title-with-code", "c.md", "b.md#nope"]
    assert "a-title-with-code" in anchors(tmp_path / "b.md") and "nope" not in anchors(tmp_path / "b.md")


def test_docs_speak_of_the_project_only():
    banned = re.compile(r"this session|earlier session|previous session|the build machine|the spec\b|the issue\b",
                        re.I)
    problems = [f"{rel(p)}:{i}: {ln.strip()[:100]}" for p in PAGES
                for i, ln in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if banned.search(ln)]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------
# running the blocks
# ---------------------------------------------------------------------------


def clone_files() -> list[str]:
    """What a clone of the repository holds: git's tracked (and not ignored) files, else the tree minus
    build products."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f and (ROOT / f).is_file()]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    skip = {".git", "runs", "data", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)]


def make_clone(dest: Path) -> Path:
    for f in clone_files():
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)
    return dest


def block_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    return env


def run_block(block: Block, cwd: Path) -> None:
    if block.language in ("python", "py"):
        cmd, stdin = [sys.executable, "-"], block.text
    else:  # pip lines were checked above; the environment already has what they install
        script = "\n".join(PIP_INSTALL.sub("true", ln) for ln in script_lines(block))
        cmd, stdin = ["bash", "-e", "-o", "pipefail", "-c", script], None
    started = time.perf_counter()
    try:
        p = subprocess.run(cmd, input=stdin, cwd=cwd, env=block_env(), capture_output=True, text=True,
                           timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        tail = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or "")[-3000:]
        pytest.fail(f"{block.where}: the block ran past {BLOCK_TIMEOUT_S} s; output tail:\n{tail}")
    if p.returncode != 0:
        tail = (p.stdout + p.stderr)[-4000:]
        pytest.fail(f"{block.where}: the block failed (exit status {p.returncode}):\n{block.text}\n--- output tail ---\n"
                    f"{tail}")
    print(f"{block.where}: {time.perf_counter() - started:.1f} s")  # shown with -rP: where the test's time goes


@pytest.fixture(scope="session")
def pipeline_outputs(tmp_path_factory) -> Path:
    """The one `makes runs/pipeline` block, run once in a clone of its own; pages copy what it left."""
    maker = next(b for b in all_blocks() if b.marker == "run" and b.note == f"makes {PIPELINE}")
    cwd = make_clone(tmp_path_factory.mktemp("pipeline"))
    run_block(maker, cwd)
    out = cwd / PIPELINE
    assert out.is_dir(), f"{maker.where}: the block ran but left no {PIPELINE}"
    return out


RUNNABLE_PAGES = [rel(p) for p in PAGES if any(b.marker == "run" for b in blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_page_commands_run(page, tmp_path, request):
    """The page's `run` blocks, in order, in a fresh clone; pipeline outputs copied in where a block needs them."""
    cwd = make_clone(tmp_path / "clone")
    have_pipeline = False
    for block in blocks(ROOT / page):
        if block.marker != "run":
            continue
        if block.note in (f"needs {PIPELINE}", f"makes {PIPELINE}") and not have_pipeline:
            shutil.copytree(request.getfixturevalue("pipeline_outputs"), cwd / PIPELINE)
            have_pipeline = True
        if block.note == f"makes {PIPELINE}":
            continue  # it ran once, for every page (pipeline_outputs)
        run_block(block, cwd)
