"""The documentation's commands run as written, and its links resolve.

Every fenced bash/sh/console/python block in README.md and docs/**/*.md carries a marker on the line just
above it:

    <!-- run -->                        the test runs it, after the page's blocks above it; it writes nothing
    <!-- run: writes data/x runs/y -->  the same, and what it leaves behind lies under these names
    <!-- run: needs runs/pipeline; writes runs/z -->   it also reads `trm-kaggle pipeline`'s outputs
    <!-- run: makes runs/pipeline -->   the one block that makes those outputs (run once, shared by every page)
    <!-- not run: REASON -->            shown, not run (a GPU, credentials, data from outside; the page says where)

Every page's blocks run in one folder, a copy of what a clone holds (the tracked files), with `trm-kaggle`,
`python` and `papermill` from this test's environment, in a shuffled order: the pages' blocks interleaved at
random (seeded), each page's in its own order. The docs' own order is one such interleaving; a block that
needs what another page's block leaves, without saying so, fails in the orders that put it first, which the
docs' order can hide. `TRM_DOCS_ORDER=docs` runs them page by page instead, `TRM_DOCS_ORDER_SEED=N` another
interleaving. After each block the test lists what it left
behind: every path must lie under a name its marker announces, and be ignored by .gitignore; two pages never
leave different contents at one path (one page rebuilding another's dataset with other settings broke the
other's resume). `pip install` lines are checked (the extras they name exist in pyproject.toml), not executed:
the environment running the tests already has them.
"""

from __future__ import annotations

import json
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
SHARED_ROOTS = {"runs", "data"}  # folders every page writes into: a page names what it writes inside them
BLOCK_TIMEOUT_S = 600
#: The seed of the shuffled order (another seed: TRM_DOCS_ORDER_SEED=N); the order is printed when a block fails.
ORDER_SEED = int(os.environ.get("TRM_DOCS_ORDER_SEED", "38"))
#: The order the blocks run in: shuffled (the default), or the docs' own (TRM_DOCS_ORDER=docs).
ORDER = os.environ.get("TRM_DOCS_ORDER", "shuffled")

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

    @property
    def clauses(self) -> list[str]:
        """The run marker's clauses: `needs runs/pipeline`, `makes runs/pipeline`, `writes P ...`."""
        return [c.strip() for c in self.note.split(";") if c.strip()] if self.marker == "run" else []

    @property
    def makes_pipeline(self) -> bool:
        return f"makes {PIPELINE}" in self.clauses

    @property
    def needs_pipeline(self) -> bool:
        return f"needs {PIPELINE}" in self.clauses

    @property
    def writes(self) -> list[str]:
        """The paths its marker announces (the pipeline's block: its folder)."""
        announced = [PIPELINE] if self.makes_pipeline else []
        for clause in self.clauses:
            if clause.startswith("writes "):
                announced += [w.rstrip("/") for w in clause.split()[1:]]
        return announced


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
    problems = []
    for clause in block.clauses:
        if clause not in (f"needs {PIPELINE}", f"makes {PIPELINE}") and not clause.startswith("writes "):
            problems.append(f"{block.where}: unknown run marker clause {clause!r} (use 'needs {PIPELINE}', "
                            f"'makes {PIPELINE}' or 'writes PATH ...', separated by ';')")
    for path in block.writes:
        parts = path.split("/")
        if path.startswith(("/", "~")) or ".." in parts or not path or path in SHARED_ROOTS:
            problems.append(f"{block.where}: writes {path!r}: name a path inside the clone, below "
                            f"{' or '.join(sorted(SHARED_ROOTS))} (not the whole folder)")
        elif not block.makes_pipeline and (path + "/").startswith(PIPELINE + "/"):
            problems.append(f"{block.where}: writes {path!r}: {PIPELINE} is the pipeline block's, read by every page")
    return problems


# ---------------------------------------------------------------------------
# static checks: markers, pip lines, links, wording
# ---------------------------------------------------------------------------


def test_every_command_block_is_marked():
    problems = [p for b in all_blocks() for p in marker_problems(b)]
    assert not problems, "\n".join(problems)
    makers = [b.where for b in all_blocks() if b.makes_pipeline]
    assert len(makers) == 1, f"exactly one block must make {PIPELINE}, found {makers}"


def test_marker_check_catches_an_unmarked_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```bash\nls\n```\n\n<!-- not run:  -->\n```python\nx = 1\n```\n\n<!-- run -->\n"
                    "```text\nout\n```\n\n```\nbare\n```\n\n<!-- run: makes runs/x -->\n```bash\nls\n```\n\n"
                    "<!-- run: writes runs -->\n```bash\nls\n```\n\n<!-- run: needs runs/pipeline; writes runs/pipeline/x "
                    "../y -->\n```bash\nls\n```\n")
    problems = [p for b in blocks(page) for p in marker_problems(b)]
    assert len(problems) == 8 and "page.md:3" in problems[0] and "page.md:8" in problems[1], problems
    assert "unknown run marker clause 'makes runs/x'" in problems[4] and "'runs'" in problems[5]
    assert "runs/pipeline/x" in problems[6] and "'../y'" in problems[7]


def git_ignored(paths: list[str]) -> set[str]:
    """Which of `paths` (relative to the repository) .gitignore ignores (whether they exist or not)."""
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "--stdin", "-z"],
                          input="\0".join(paths), capture_output=True, text=True)
    if done.returncode not in (0, 1):
        pytest.skip(f"git check-ignore failed: {done.stderr.strip()}")
    return set(filter(None, done.stdout.split("\0")))


def test_what_the_docs_write_is_git_ignored():
    """Every name a marker announces: its contents never show up as untracked files in a clone."""
    announced = {f"{path}/x": b.where for b in all_blocks() for path in b.writes}
    missing = sorted(set(announced) - git_ignored(list(announced)))
    assert not missing, "not in .gitignore: " + ", ".join(f"{p[:-2]} ({announced[p]})" for p in missing)
    assert git_ignored(["grid.yaml", "runs/x"]) == {"runs/x"}  # the check itself


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
    install = 'python -m pip install "torch==2.13.0" -e ".[dev,notebooks]" && python -m pytest -q'
    (line,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(install)]
    assert line in (ROOT / ".ci" / "run").read_text().splitlines()
    assert " -n auto " in line  # the suite on every core (pytest-xdist, in the dev extra)


def test_readme_says_what_the_install_brings_on_each_platform():
    """The pin is not "a CPU build" everywhere: from PyPI, Linux gets the CUDA build and its GPU wheels (GBs), macOS
    and Windows a CPU build; the README says so, with the laptop's CPU-only line from PyTorch's index pinning the
    same torch as the test command, and the measured sizes a link away."""
    readme = (ROOT / "README.md").read_text()
    text = " ".join(prose(ROOT / "README.md", inline_code=True).split())
    pins = set(re.findall(r'"torch==([^"]+)"', readme))
    assert len(pins) == 1, f"the README pins torch differently in different lines: {pins}"
    cpu = [ln for b in blocks(ROOT / "README.md") for ln in script_lines(b)
           if "--index-url https://download.pytorch.org/whl/cpu" in ln]
    assert cpu and f'"torch=={pins.pop()}"' in cpu[0] and '-e ".[arc]"' in cpu[0], cpu
    for words in ("Linux gets torch's CUDA build and 19 nvidia-*/cuda-*/triton wheels", "macOS and Windows a CPU build",
                  "benchmarks.md#what-the-install-downloads"):
        assert words in text, words
    assert "19 `nvidia-*`/`cuda-*`/`triton` wheels" in (ROOT / "docs" / "benchmarks.md").read_text()
    assert "a CPU build of torch" not in text  # the claim that held only for this machine's pip


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


def run_block(block: Block, cwd: Path, context: str = "") -> subprocess.CompletedProcess:
    """Run the block in `cwd` (pytest.fail on a failure or a time-out, `context` added to the message); its
    stdout and stderr are captured: not a terminal, as in a log or CI."""
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
        pytest.fail(f"{block.where}: the block ran past {BLOCK_TIMEOUT_S} s{context}; output tail:\n{tail}")
    if p.returncode != 0:
        tail = (p.stdout + p.stderr)[-4000:]
        pytest.fail(f"{block.where}: the block failed (exit status {p.returncode}){context}:\n{block.text}\n"
                    f"--- output tail ---\n{tail}")
    print(f"{block.where}: {time.perf_counter() - started:.1f} s")  # shown with -rP: where the test's time goes
    return p


Tree = tuple[dict[str, tuple[int, int]], set[str]]


def tree(root: Path) -> Tree:
    """({file: (size, mtime)}, {directory}) under `root`, relative POSIX paths; Python's byte-code caches aside."""
    files, dirs = {}, set()
    for here, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        base = Path(here).relative_to(root)
        dirs |= {(base / d).as_posix() for d in subdirs}
        for name in names:
            try:
                st = (Path(here) / name).lstat()
            except FileNotFoundError:  # removed while walking
                continue
            files[(base / name).as_posix()] = (st.st_size, st.st_mtime_ns)
    return files, dirs


def left_behind(before: Tree, after: Tree) -> list[str]:
    """The files a block created or changed and the folders it created (a folder only when nothing inside it
    is listed), sorted."""
    files = [f for f, stat in after[0].items() if before[0].get(f) != stat]
    dirs = [d for d in after[1] - before[1] if not any(f.startswith(d + "/") for f in files)]
    return sorted(files + dirs)


def under(path: str, names: list[str]) -> bool:
    return any(path == n or path.startswith(n + "/") for n in names)


def digest(path: Path) -> str:
    import hashlib

    if not path.is_file():
        return "folder"
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Leftovers:
    """What each block of a run left behind, and the problems with it."""

    listing: list[str]
    problems: list[str]
    written: dict[str, dict[str, str]]  # path -> {page: digest of what that page last wrote there}

    def add(self, block: Block, cwd: Path, paths: list[str]) -> None:
        shown = sorted({"/".join(p.split("/")[:3]) for p in paths})
        self.listing.append(f"{block.where}: {len(paths)} path(s) under " + (", ".join(shown) or "-"))
        outside = [p for p in paths if not under(p, block.writes)]
        if outside:
            self.problems.append(f"{block.where}: left {', '.join(outside[:5])}{' ...' if len(outside) > 5 else ''} "
                                 f"outside what its marker announces ({', '.join(block.writes) or 'nothing'})")
        unignored = sorted(set(paths) - git_ignored(paths)) if paths else []
        if unignored:
            self.problems.append(f"{block.where}: left {', '.join(unignored[:5])} that .gitignore does not ignore")
        page = rel(block.page)
        for path in paths:
            d = digest(cwd / path)
            writers = self.written.setdefault(path, {})
            others = [other for other, theirs in writers.items() if other != page and theirs != d]
            if others:
                self.problems.append(f"{block.where}: writes {path} with other contents than {others[0]} did: the "
                                     "pages share an output path with different settings; give each its own")
            writers[page] = d


@dataclass
class PipelineRun:
    out: Path  # the pipeline's folder
    leftovers: Leftovers
    stderr: str


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory) -> PipelineRun:
    """The one `makes runs/pipeline` block, run once in a clone of its own (stdout and stderr to pipes, as in a
    log); every run of the docs copies what it left. Under xdist the workers share it: the first to need it runs
    it, holding a lock the others wait on, and leaves its result (or its failure) for them."""
    from filelock import FileLock  # torch's own requirement

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    result = root / "docs-pipeline.json"
    with FileLock(str(root / "docs-pipeline.lock")):
        if not result.is_file():
            try:
                made = make_pipeline(root / "docs-pipeline")
                saved = {"out": str(made.out), "stderr": made.stderr, "leftovers": vars(made.leftovers)}
            except BaseException as e:  # pytest.fail, a time-out, an interrupt: the others fail without a rerun
                saved = {"failed": f"{type(e).__name__}: {e}"}
                raise
            finally:
                tmp = result.with_suffix(".tmp")
                tmp.write_text(json.dumps(saved))
                tmp.replace(result)
        saved = json.loads(result.read_text())
    if "failed" in saved:
        pytest.fail(f"the pipeline block failed (in the first worker that ran it): {saved['failed']}")
    return PipelineRun(Path(saved["out"]), Leftovers(**saved["leftovers"]), saved["stderr"])


def make_pipeline(folder: Path) -> PipelineRun:
    maker = next(b for b in all_blocks() if b.makes_pipeline)
    folder.mkdir()
    cwd = make_clone(folder)
    before = tree(cwd)
    done = run_block(maker, cwd)
    leftovers = Leftovers([], [], {})
    leftovers.add(maker, cwd, left_behind(before, tree(cwd)))
    out = cwd / PIPELINE
    assert out.is_dir(), f"{maker.where}: the block ran but left no {PIPELINE}"
    return PipelineRun(out, leftovers, done.stderr)


@pytest.mark.slow
def test_the_pipeline_block_writes_its_folder_alone_and_a_short_log(pipeline_run):
    """The README's set-up command off a terminal: its progress bars print a line per tenth, not one redraw per
    step (its stderr was 76 KB, mostly one bar)."""
    assert not pipeline_run.leftovers.problems, "\n".join(pipeline_run.leftovers.problems)
    err = pipeline_run.stderr
    assert "\r" not in err and len(err.encode()) < 10_000, f"{len(err.encode())} bytes of stderr:\n{err[-3000:]}"


def test_leftover_check_catches_stray_unignored_and_shared_outputs(tmp_path):
    """The checks themselves, on blocks that write by hand: a file outside the announced names and not ignored
    (grid.yaml at the root), and a second page writing a dataset path with other contents (a smaller rebuild)."""
    pages = {}
    for name, note in (("a.md", "writes data/sudoku4"), ("b.md", "writes data/sudoku4"), ("c.md", "writes runs/x")):
        pages[name] = tmp_path / name
        pages[name].write_text(f"<!-- run: {note} -->\n```bash\nls\n```\n")
    a, b, c = (blocks(pages[n])[0] for n in ("a.md", "b.md", "c.md"))
    cwd = tmp_path / "clone"
    (cwd / "data" / "sudoku4").mkdir(parents=True)
    leftovers = Leftovers([], [], {})

    def step(block: Block, writes: dict[str, str]) -> None:
        before = tree(cwd)
        time.sleep(0.01)
        for path, text in writes.items():
            (cwd / path).parent.mkdir(parents=True, exist_ok=True)
            (cwd / path).write_text(text)
        leftovers.add(block, cwd, left_behind(before, tree(cwd)))

    step(a, {"data/sudoku4/train.npy": "2000 puzzles"})
    step(b, {"data/sudoku4/train.npy": "2000 puzzles"})  # the same settings again: the same bytes, allowed
    assert leftovers.problems == []
    step(b, {"data/sudoku4/train.npy": "200 puzzles"})
    step(c, {"runs/x/out.json": "{}", "grid.yaml": "name: g"})
    assert len(leftovers.problems) == 3, leftovers.problems
    assert "writes data/sudoku4/train.npy with other contents than a.md did" in leftovers.problems[0]
    assert "left grid.yaml outside what its marker announces (runs/x)" in leftovers.problems[1]
    assert "left grid.yaml that .gitignore does not ignore" in leftovers.problems[2]
    assert leftovers.listing[-1] == "c.md:2: 2 path(s) under grid.yaml, runs/x/out.json"


def interleaved(seed: int) -> list[Block]:
    """Every page's `run` blocks interleaved at random (a seeded uniform merge), each page's in its own order."""
    import random

    rng = random.Random(seed)
    queues = [[b for b in blocks(page) if b.marker == "run" and not b.makes_pipeline] for page in PAGES]
    queues = [q for q in queues if q]
    order = []
    while queues:
        q = rng.choices(queues, weights=[len(q) for q in queues])[0]
        order.append(q.pop(0))
        queues = [q for q in queues if q]
    return order


def test_the_shuffled_order_keeps_each_pages_order():
    order = interleaved(ORDER_SEED)
    docs = [b for b in all_blocks() if b.marker == "run" and not b.makes_pipeline]
    assert sorted(b.where for b in order) == sorted(b.where for b in docs) and order != docs
    for page in PAGES:
        assert [b.line for b in order if b.page == page] == [b.line for b in docs if b.page == page]
    assert interleaved(ORDER_SEED) == order and interleaved(ORDER_SEED + 1) != order


def run_every_block(order: str, pipeline_run: PipelineRun, tmp_path: Path) -> None:
    """All pages' blocks in one clone, in the docs' order or shuffled; the pipeline's outputs copied in first."""
    if order not in ("docs", "shuffled"):
        pytest.fail(f"TRM_DOCS_ORDER={order!r}: use docs or shuffled")
    cwd = make_clone(tmp_path / "clone")
    shutil.copytree(pipeline_run.out, cwd / PIPELINE)
    sequence = ([b for b in all_blocks() if b.marker == "run" and not b.makes_pipeline] if order == "docs"
                else interleaved(ORDER_SEED))
    context = ("" if order == "docs" else
               f" (shuffled order, TRM_DOCS_ORDER_SEED={ORDER_SEED}: {', '.join(b.where for b in sequence)})")
    leftovers = Leftovers([], [], {})
    for block in sequence:
        before = tree(cwd)
        run_block(block, cwd, context)
        leftovers.add(block, cwd, left_behind(before, tree(cwd)))
    print("\n".join(leftovers.listing))  # with -rP: every block and what it left
    assert not leftovers.problems, "\n".join(leftovers.problems) + context


@pytest.mark.slow(s=250)  # a CLI process per command: ~40 of them
def test_every_block_runs_in_one_folder_and_leaves_only_what_it_announces(pipeline_run, tmp_path):
    run_every_block(ORDER, pipeline_run, tmp_path)
