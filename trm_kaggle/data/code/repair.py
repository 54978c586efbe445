"""`trm-kaggle build-code-repair`: (buggy, fixed) pairs of Python snippets as token grids.

One streaming pass over a corpus of Python files (by default this interpreter's
standard library, always there offline):

    files --(split by file: train / val / test)--> worker processes, a few files per task:
        read, parse, cut snippets that fit the grid (functions, else the blocks inside them)
        -> synthetic bugs (trm_kaggle.data.code.bugs) + ruff fixes (trm_kaggle.data.code.lint)
        -> validated pairs, encoded as grids (trm_kaggle.data.code.tokens)
    --> main process, in file order: drop duplicates (normalised hashes), write each pair
        to its split through the shared DatasetWriter.

Layout: upstream's format (identifiers.json, train/ and test/), plus

    val/                  the validation split, the same layout (upstream's readers never look at it)
    <split>/repair_meta.jsonl   line i describes example i: bug_type, category, rule (lint pairs),
                                difficulty, source (file, relative to the corpus), line, lines
    tokenizer.json        the BPE vocabulary (BPE datasets only)
    build_info.json       the config, the token scheme, counts and skips

Each pair is its own group and puzzle with the blank identifier: sampling then picks
pairs one by one, which is what lets a curriculum filter them by bug type.
Labels keep the padding as a target (ignore_label_id None): the model must also say
where the code ends, or its output could not be read back as text.

Memory stays bounded: tasks are submitted a few at a time, results are written as
they arrive, and only the 16-byte hashes of the pairs seen are kept.
"""

from __future__ import annotations

import ast
import collections
import hashlib
import io
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import sys
import sysconfig
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from trm_kaggle.config import CodeRepairBuildConfig, path_argument
from trm_kaggle.data.code import bugs as code_bugs
from trm_kaggle.data.code import lint as code_lint
from trm_kaggle.data.code.tokens import (TOKENIZER_FILE, CharTokens, Tokens, printable, tokens_from_description,
                                         train_bpe)
from trm_kaggle.data.format import DatasetWriter, SplitWriter, build_io
from trm_kaggle.data.puzzles.grids import build_summary
from trm_kaggle.errors import DataError, TRMError, UnreadableFile
from trm_kaggle.hardware import usable_cores
from trm_kaggle.jsonio import cannot_read, not_regular, parse_json, read_bytes, read_json, read_text
from trm_kaggle.lifetime import exit_with_parent
from trm_kaggle.outputs import check_kept
from trm_kaggle.progress import tqdm
from trm_kaggle.wording import clipped, one_line, type_name

SPLITS = ("train", "val", "test")
META_FILE = "repair_meta.jsonl"
FILES_PER_TASK = 8  # files a worker handles per task (ruff then runs once for all their snippets)
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
#: The most bytes read of one corpus file: ten times the standard library's largest (generated data beyond it).
MAX_SOURCE_BYTES = 8 << 20

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Corpus and splits
# ---------------------------------------------------------------------------


def default_corpus() -> Path:
    """The running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: str | os.PathLike, unread_folders: list[str] | None = None) -> list[str]:
    """Relative paths (POSIX, sorted) of the .py files under `root`; installed packages, caches and
    hidden directories are left out, and directory links are not followed.

    A sub-folder that cannot be listed (no permission) costs its own files alone: it is named in a WARNING line
    and its relative path appended to `unread_folders` (the build's record); `root` itself unreadable is a
    DataError naming the permission (it was "no Python (.py) files")."""
    root = Path(path_argument("root", root, "the corpus folder"))
    if not root.exists():
        raise DataError(f"corpus {root}: no such directory")
    if not root.is_dir():
        raise DataError(f"corpus {root}: not a directory")
    found, failed = [], []
    for d, dirs, files in os.walk(root, onerror=failed.append):  # onerror=None dropped such a folder unsaid
        dirs[:] = [x for x in dirs if x not in _SKIP_DIRS and not x.startswith(".")]
        rel = Path(d).relative_to(root)
        found.extend((rel / f).as_posix() for f in files if f.endswith(".py") and not f.startswith("."))
    for e in failed:
        where = Path(e.filename) if e.filename else root
        if where == root:
            raise UnreadableFile(f"corpus {cannot_read(root, 'corpus folder', e)}")
        log.warning("skipped %s", cannot_read(where, "corpus folder", e))
        if unread_folders is not None:
            unread_folders.append(where.relative_to(root).as_posix())
    if not found:
        raise DataError(f"corpus {root}: no Python (.py) files")
    return sorted(found)


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def assign_splits(files: list[str], seed: int, val_fraction: float, test_fraction: float,
                  usable: Callable[[str], bool] | None = None) -> dict[str, str]:
    """file -> split. A seeded shuffle of the sorted names; the first files go to test, the next to val.

    Every file's snippets stay in one split, so no code is shared between training and
    evaluation. With a non-zero fraction each held-out split gets at least one file
    while train keeps at least one. With `usable`, the fractions are of the files it accepts: one that will be
    skipped (unreadable, a FIFO, a dangling link) takes no split's place and is put in train, where it costs
    itself alone (counted among the places, three skipped files of nine had made 0.2/0.2 a third each).
    """
    placed = files if usable is None else [f for f in files if usable(f)]
    n = len(placed)
    order = np.random.default_rng([seed, 1]).permutation(n)
    n_test = round(n * test_fraction) or int(test_fraction > 0 and n >= 2)
    n_val = round(n * val_fraction) or int(val_fraction > 0 and n - n_test >= 2)
    n_test, n_val = min(n_test, n - 1), min(n_val, max(0, n - 1 - n_test))
    split = dict.fromkeys(files, "train")
    for k, i in enumerate(order):
        split[placed[i]] = "test" if k < n_test else "val" if k < n_test + n_val else "train"
    return split


def _parses(root: Path) -> Callable[[str], bool]:
    """Whether a corpus file reads and parses (as the workers will read it): a held-out split's place needs one."""
    def check(rel: str) -> bool:
        try:
            code_bugs.parse(_read_source(root, rel))
        except (UnreadableFile, DataError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
            return False
        return True
    return check


# ---------------------------------------------------------------------------
# Snippets
# ---------------------------------------------------------------------------

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.Match) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _first_line(node: ast.stmt) -> int:
    """A definition starts at its first decorator."""
    return min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])


def _child_bodies(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        body = getattr(node, name, None)
        if isinstance(body, list):
            yield body
    for handler in getattr(node, "handlers", []):
        yield handler.body
    for case in getattr(node, "cases", []):
        yield case.body


def _docstring_lines(node: ast.AST) -> tuple[int, int] | None:
    """(first, last) line of a function's or class's docstring when it has whole lines to itself and
    something follows it (a body left empty would not parse)."""
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)) and len(node.body) > 1:
        first, after = node.body[0], node.body[1]
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str) and node.lineno < first.lineno
                and first.end_lineno < after.lineno):
            return first.lineno, first.end_lineno
    return None


def extract_snippets(source: str, tree: ast.Module, fits: Callable[[list[str]], bool], min_lines: int,
                     max_lines: int, strip_docstrings: bool) -> list[tuple[int, str]]:
    """(first line in the file, text) of each function that fits, else of the blocks inside it.

    A snippet is dedented to column 0 and its lines right-stripped; one whose lines are
    not all indented at least as far as its first (a multi-line string, say) is left out.
    """
    lines = source.split("\n")
    out: list[tuple[int, str]] = []

    def cut(node: ast.stmt) -> str | None:
        start = _first_line(node)
        span = node.end_lineno - start + 1
        if span < min_lines or (span > max_lines and not strip_docstrings) or span > 4 * max_lines:
            return None  # cheap bounds before the work (docstrings rarely make up 3/4 of a block)
        drop: set[int] = set()
        if strip_docstrings:
            for inner in ast.walk(node):
                doc = _docstring_lines(inner)
                if doc:
                    drop.update(range(doc[0], doc[1] + 1))
        indent, kept = " " * node.col_offset, []
        for n in range(start, node.end_lineno + 1):
            if n in drop:
                continue
            line = lines[n - 1].rstrip()
            if line and not line.startswith(indent):
                return None
            kept.append(line[node.col_offset:])
        if not min_lines <= len(kept) <= max_lines or not fits(kept):
            return None
        text = "\n".join(kept)
        return text if printable(text) else None

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, _FUNCTIONS + _BLOCKS):
                text = cut(node)
                if text is not None:
                    out.append((_first_line(node), text))
                    continue
            if isinstance(node, _FUNCTIONS + _BLOCKS + (ast.ClassDef,)):
                for child in _child_bodies(node):
                    visit(child)

    visit(tree.body)
    return out


def normalised(text: str) -> str:
    """The text hashed for deduplication: indentation kept, other runs of spaces collapsed, blank lines dropped."""
    out = []
    for line in text.split("\n"):
        words = line.split()
        if words:
            out.append(" " * (len(line) - len(line.lstrip(" "))) + " ".join(words))
    return "\n".join(out)


def _digest(*texts: str) -> bytes:
    return hashlib.blake2b("\x00".join(normalised(t) for t in texts).encode(), digest_size=16).digest()


# ---------------------------------------------------------------------------
# Worker: files -> validated, encoded pairs
# ---------------------------------------------------------------------------


@dataclass
class Pair:
    bug_type: str
    rule: str | None
    difficulty: float
    buggy: np.ndarray  # (rows, cols) token grid
    fixed: np.ndarray
    digest: bytes


@dataclass
class SnippetPairs:
    line: int
    lines: int
    digest: bytes  # of the snippet as written (the fixed side of its synthetic pairs)
    pairs: list[Pair] = field(default_factory=list)


@dataclass
class FileResult:
    path: str
    skipped: str | None = None  # why the whole file was skipped
    problem: str | None = None  # the line that names the file, when it could not be read at all
    snippets: list[SnippetPairs] = field(default_factory=list)
    rejected: collections.Counter = field(default_factory=collections.Counter)  # pairs refused, by reason


@dataclass
class _Worker:
    cfg: CodeRepairBuildConfig
    root: Path
    tokens: Tokens
    ruff: str | None


_worker: _Worker | None = None


def _init_worker(cfg_json: str, root: str, tokens_desc: dict, tokenizer_json: str | None, ruff: str | None) -> None:
    global _worker
    cfg = CodeRepairBuildConfig.model_validate_json(cfg_json)
    _worker = _Worker(cfg, Path(root), tokens_from_description(tokens_desc, tokenizer_json=tokenizer_json), ruff)


def _init_pool_worker(parent: int, *init_args) -> None:
    exit_with_parent(parent, ctrl_c=False)  # a killed build leaves no worker blocked on the pool's queue forever
    _init_worker(*init_args)


class UnknownCoding(DataError):
    """A corpus file declares a coding Python does not know (`# -*- coding: nosuch -*-`)."""


class OutsideCorpus(DataError):
    """A corpus file that is a link to a file outside the corpus (`passwd.py -> /etc/passwd`): never read."""


def _read_source(root: Path, rel: str) -> str:
    """The corpus file `rel` as text with "\\n" line ends, through the one gate (a link out of the corpus, a FIFO
    or a device refused unread, at most MAX_SOURCE_BYTES read); OutsideCorpus, UnreadableFile, UnknownCoding,
    DataError (too large) or UnicodeDecodeError."""
    path = root / rel
    target, inside = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([target, inside]) != inside and not _special(path):  # a device: named as one below
        raise OutsideCorpus(f"{path}: a link to {target}, outside the corpus: not read")
    raw = read_bytes(path, "corpus file", max_bytes=MAX_SOURCE_BYTES)
    try:
        tokenize.detect_encoding(io.BytesIO(raw).readline)  # the coding a file declares, in its first two lines
    except SyntaxError as e:  # `# -*- coding: nosuch -*-`: Python cannot compile it; read as UTF-8 it gave pairs
        if str(e.msg).startswith("unknown encoding"):
            raise UnknownCoding(f"{path}: {e.msg} (declared in the file): Python cannot compile it") from None
    # utf-8-sig: a byte-order mark (an editor's on Windows) is no code; Python runs such files, ast refused them
    return raw.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")


def _special(path: Path) -> bool:
    """Whether `path` is a FIFO, a device or a socket (through links): a skip of its own kind, not "unreadable"."""
    try:
        return not_regular(os.stat(path).st_mode) is not None
    except (OSError, ValueError):
        return False


def process_files(paths: list[str]) -> list[FileResult]:
    """Pairs of a few corpus files (runs in a worker process; see `_init_worker`)."""
    w = _worker
    rows, cols = w.cfg.rows, w.cfg.cols
    bug_types = w.cfg.bug_types or code_bugs.SYNTHETIC
    results, lint_jobs = [], []  # lint_jobs: (result, pairs, snippet) for one ruff call at the end

    def fits(lines: list[str]) -> bool:
        return w.tokens.fits(lines, rows, cols)

    for rel in paths:
        result = FileResult(rel)
        results.append(result)
        try:
            source = _read_source(w.root, rel)
            tree = code_bugs.parse(source)
        except UnicodeDecodeError:
            result.skipped = "not_utf8"
            continue
        except OutsideCorpus as e:
            result.skipped, result.problem = "link_outside_corpus", str(e)
            continue
        except UnreadableFile as e:  # missing, no permission; a FIFO or a device, never opened (it may never end)
            result.skipped = "special_file" if _special(w.root / rel) else "unreadable"
            result.problem = str(e)
            continue
        except UnknownCoding as e:
            result.skipped, result.problem = "unknown_coding", str(e)
            continue
        except DataError as e:  # larger than MAX_SOURCE_BYTES: not read past the bound
            result.skipped, result.problem = "too_large", str(e)
            continue
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            result.skipped = "does_not_parse"
            continue
        rng = np.random.default_rng([w.cfg.seed, _stable_hash(rel)])
        snippets = extract_snippets(source, tree, fits, w.cfg.min_lines, rows, w.cfg.strip_docstrings)
        if w.cfg.max_snippets_per_file and len(snippets) > w.cfg.max_snippets_per_file:
            keep = np.sort(rng.choice(len(snippets), w.cfg.max_snippets_per_file, replace=False))
            snippets = [snippets[i] for i in keep]
        for line, text in snippets:
            try:
                snippet = code_bugs.Snippet(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # a block such as 'elif' alone
                result.rejected["snippet_does_not_parse"] += 1
                continue
            fixed = w.tokens.grid(text, rows, cols)
            sp = SnippetPairs(line, len(snippet.lines), _digest(text))
            result.snippets.append(sp)
            for m in code_bugs.mutate(snippet, bug_types, w.cfg.mutations_per_type, rng, result.rejected):
                _add_pair(sp, result, m.bug_type, None, m.buggy, text, fixed, m.depth)
            if w.ruff:
                lint_jobs.append((result, sp, snippet))
    if lint_jobs:
        try:
            fixes = code_lint.lint_fixes([snippet.text for _, _, snippet in lint_jobs], w.ruff)
        except TRMError:  # ruff failed on this batch: its files keep their synthetic pairs, and it is counted
            fixes = []
            results[0].rejected["ruff_failed_batches"] = 1
        for fix in fixes:
            result, sp, snippet = lint_jobs[fix.snippet]
            if not code_bugs.parses(fix.fixed):
                result.rejected["fixed_does_not_parse"] += 1
                continue
            depth = snippet.depth_at(snippet.offset(fix.line, 0))
            _add_pair(sp, result, "lint", fix.rule, snippet.text, fix.fixed, None, depth)
    return results


def _add_pair(sp: SnippetPairs, result: FileResult, bug_type: str, rule: str | None, buggy: str, fixed: str,
              fixed_grid: np.ndarray | None, depth: int) -> None:
    w = _worker
    rows, cols = w.cfg.rows, w.cfg.cols
    buggy_grid = w.tokens.grid(buggy, rows, cols)
    if fixed_grid is None:
        fixed_grid = w.tokens.grid(fixed, rows, cols)
    if buggy_grid is None or fixed_grid is None:  # the edit made a line too long for the grid
        result.rejected["does_not_fit"] += 1
        return
    score = code_bugs.difficulty(bug_type, max(buggy.count("\n"), fixed.count("\n")) + 1, rows, depth)
    sp.pairs.append(Pair(bug_type, rule, score, buggy_grid, fixed_grid, _digest(buggy, fixed)))


# ---------------------------------------------------------------------------
# The build
# ---------------------------------------------------------------------------


def _bounded_imap(pool, fn, tasks: Iterable, in_flight: int) -> Iterator:
    """pool.imap with at most `in_flight` tasks submitted ahead (Pool.imap queues every task and
    every finished result, which is unbounded when the consumer is the slower side)."""
    workers = {p.pid for p in pool._pool}
    pending: collections.deque = collections.deque()
    for task in tasks:
        pending.append(pool.apply_async(fn, (task,)))
        if len(pending) >= in_flight:
            yield _result(pool, pending.popleft(), workers)
    while pending:
        yield _result(pool, pending.popleft(), workers)


#: How often a wait for a worker's result looks whether a worker died.
WORKER_CHECK_S = 0.5


def _result(pool, pending, workers: set[int]):
    """`pending.get()`, in slices: a worker that dies (a kill, the out-of-memory killer) takes its task with it,
    and multiprocessing's Pool, which starts another worker in its place, would wait for that result for ever.
    The workers never end on their own before the pool is closed, so one missing from `workers` died."""
    while True:
        try:
            return pending.get(WORKER_CHECK_S)
        except multiprocessing.TimeoutError:
            pass
        alive = {p.pid for p in pool._pool if p.exitcode is None}
        if not workers <= alive:
            raise TRMError(f"a worker process of the build ended before its files were done (pid "
                           f"{', '.join(map(str, sorted(workers - alive)))}: killed, or out of memory?); nothing was "
                           "written: run the build again (--workers 1 runs it in this process)")


#: How long the workers of a pool whose results are all in get to end on their own (each takes its queue's end
#: mark and returns) before the pool ends them by SIGTERM.
WORKERS_EXIT_S = 10.0


def _close(pool, timeout_s: float) -> None:
    """Close a pool whose results are all in and give its workers `timeout_s` to end on their own: no signal is
    sent on the way that ends well; the `with` block's terminate() then finds nothing left (or ends a straggler,
    which takes SIGTERM's default: `lifetime.exit_with_parent`)."""
    pool.close()
    deadline, left = time.monotonic() + timeout_s, [p.sentinel for p in pool._pool]
    while left and (remaining := deadline - time.monotonic()) > 0:
        ended = multiprocessing.connection.wait(left, remaining)
        left = [s for s in left if s not in ended]


def _workers(requested: int) -> int:
    return requested or usable_cores()


def _train_tokens(cfg: CodeRepairBuildConfig, root: Path, train_files: list[str]) -> Tokens:
    if cfg.tokens == "char":
        return CharTokens()

    def lines() -> Iterator[str]:  # the train split's files only: held-out code does not shape the vocabulary
        for rel in train_files:
            try:
                yield from _read_source(root, rel).split("\n")
            except (DataError, UnicodeDecodeError):
                continue  # counted (and named) when the file is processed

    return train_bpe(lines(), cfg.bpe_vocab_size)


def _lint_binary(mode: str) -> str | None:
    if mode == "off":
        return None
    ruff = code_lint.ruff_binary()
    if ruff is None and mode == "on":
        raise TRMError("lint=on needs ruff: pip install -e '.[repair]' (or lint=auto to skip linter pairs)")
    return ruff


class _MetaWriter:
    """One split's repair_meta.jsonl, a line per example, written as the examples are."""

    def __init__(self, split_dir: Path):
        split_dir.mkdir(parents=True, exist_ok=True)
        self.f = open(split_dir / META_FILE, "w", encoding="utf-8")
        self.count = 0

    def write(self, pair: Pair, source: str, sp: SnippetPairs) -> None:
        record = {"example": self.count, "bug_type": pair.bug_type,
                  "category": code_bugs.BUG_TYPES[pair.bug_type].category, "difficulty": pair.difficulty,
                  "source": source, "line": sp.line, "lines": sp.lines}
        if pair.rule:
            record["rule"] = pair.rule
        self.f.write(json.dumps(record) + "\n")
        self.count += 1


def build_code_repair(cfg: CodeRepairBuildConfig) -> dict:
    """Build the dataset at cfg.output_dir; returns a summary (counts per split and bug type, speed)."""
    if not isinstance(cfg, CodeRepairBuildConfig):  # a dict or None was "has no attribute 'output_dir'"
        raise TypeError(f"cfg: expected a CodeRepairBuildConfig (CodeRepairBuildConfig(**values) makes one from a "
                        f"dict), got {type_name(cfg)}")
    started = time.monotonic()
    check_kept(*build_io(cfg, flags=False))  # as the command checks it: never built inside its own input
    for name in cfg.bug_types or []:
        if name not in code_bugs.SYNTHETIC:
            raise TRMError(f"unknown bug type {name!r}; known: {', '.join(code_bugs.SYNTHETIC)}")
    root = Path(cfg.corpus).expanduser() if cfg.corpus else default_corpus()
    unread_folders: list[str] = []  # named in a WARNING line each, and kept in build_info.json
    files = corpus_files(root, unread_folders)
    if cfg.max_files and cfg.max_files < len(files):
        files = sorted(np.random.default_rng([cfg.seed, 2]).choice(files, cfg.max_files, replace=False).tolist())
    split_of = assign_splits(files, cfg.seed, cfg.val_fraction, cfg.test_fraction, usable=_parses(root))
    ruff = _lint_binary(cfg.lint)
    tokens = _train_tokens(cfg, root, [f for f in files if split_of[f] == "train"])
    tokenizer_json = getattr(tokens, "json", None)
    init_args = (cfg.model_dump_json(), str(root), tokens.describe(), tokenizer_json, ruff)

    seen: set[bytes] = set()
    counts = {s: collections.Counter() for s in SPLITS}
    skipped, rejected = collections.Counter(), collections.Counter()
    duplicates, repeated_in = collections.Counter(), collections.Counter()  # kind -> count, split -> count
    unread: set[str] = set()  # the files skipped, counted in no split's files
    info: dict[str, Any] = {"builder": "code-repair", "config": cfg.model_dump(), "corpus": str(root),
                            "python": sys.version.split()[0], "grid_shape": [cfg.rows, cfg.cols],
                            "tokens": tokens.describe(), "lint": bool(ruff),
                            "bug_types": {n: b.category for n, b in code_bugs.BUG_TYPES.items()}}
    with DatasetWriter(cfg.output_dir, seq_len=cfg.rows * cfg.cols, vocab_size=tokens.vocab_size, build_info=info,
                       ignore_label_id=None) as writer:
        val = SplitWriter(writer.tmp_dir / "val", writer.seq_len, writer.vocab_size)
        splits = {"train": writer.train, "val": val, "test": writer.test}
        metas = {s: _MetaWriter(writer.tmp_dir / s) for s in SPLITS}
        if tokenizer_json is not None:
            (writer.tmp_dir / TOKENIZER_FILE).write_text(tokenizer_json, encoding="utf-8")
        tasks = [files[i:i + FILES_PER_TASK] for i in range(0, len(files), FILES_PER_TASK)]
        workers = min(_workers(cfg.workers), len(tasks))
        bar = tqdm(total=len(files), unit="file", desc="build-code-repair", disable=not cfg.progress, leave=False)
        try:
            for results in _run(tasks, workers, init_args):
                for r in results:
                    bar.update()
                    if r.skipped:
                        skipped[r.skipped] += 1
                        unread.add(r.path)
                        if r.problem:  # one file costs itself alone, and says why
                            log.warning("skipped %s", r.problem)
                        continue
                    rejected.update(r.rejected)
                    split = split_of[r.path]
                    for sp in r.snippets:
                        if sp.digest in seen:  # the same code in an earlier file (or earlier in this one)
                            duplicates["snippets"] += 1
                            repeated_in[split] += 1
                            continue
                        seen.add(sp.digest)
                        for pair in sp.pairs:
                            if pair.digest in seen:
                                duplicates["pairs"] += 1
                                repeated_in[split] += 1
                                continue
                            seen.add(pair.digest)
                            splits[split].add_puzzle(pair.buggy.reshape(1, -1), pair.fixed.reshape(1, -1), 0)
                            splits[split].end_group()
                            metas[split].write(pair, r.path, sp)
                            counts[split][pair.bug_type] += 1
                bar.set_postfix(pairs=sum(sum(c.values()) for c in counts.values()), refresh=False)
        finally:
            bar.close()
            for m in metas.values():
                m.f.close()
        total = sum(sum(c.values()) for c in counts.values())
        if not counts["train"]:
            # every filter that can leave nothing, with its value: the grid is one of them, not the only one
            kinds = ", ".join(cfg.bug_types) if cfg.bug_types else "every synthetic type"
            if total and repeated_in["train"]:  # the train files' code was seen first in held-out files
                raise DataError(f"corpus {root}: no repair pairs in the train split ({len(files)} files, {total} "
                                f"pairs in all, {repeated_in['train']} train snippets or pairs dropped as "
                                "duplicates): the train files repeat the code of the val/test files; give files "
                                "that differ, or set --val-fraction 0 --test-fraction 0")
            if skipped and sum(skipped.values()) >= len(files):  # no file was read: the grid is not the cause
                why = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(skipped.items()))
                raise DataError(f"corpus {root}: no repair pairs: every one of its {len(files)} files was skipped "
                                f"({why}); give Python files that parse (build_info.json of a build lists why)")
            raise DataError(f"corpus {root}: no repair pairs in the train split ({len(files)} files, "
                            f"{sum(skipped.values())} skipped, {total} pairs in all): a snippet must fit the "
                            f"{cfg.rows}x{cfg.cols} grid, have at least {cfg.min_lines} lines (--min-lines) and take a "
                            f"bug of {kinds} (--bug-types); try a larger --grid, --strip-docstrings, a lower "
                            f"--min-lines or other --bug-types")
        if cfg.test_fraction and not counts["test"]:  # evaluate-repair refuses such a dataset, much later
            log.warning("the test split holds no pairs (its %d file(s) gave none that fit): evaluate-repair cannot "
                        "score this dataset; build with a larger --test-fraction or another --seed",
                        sum(1 for f in files if split_of[f] == "test"))
        val.finish(len(writer.identifiers), writer.pad_id, writer.ignore_label_id)
        info.update(files={s: sum(1 for f in files if split_of[f] == s and f not in unread) for s in SPLITS},
                    skipped_files=dict(skipped), unreadable_folders=unread_folders, rejected_pairs=dict(rejected),
                    duplicates=dict(duplicates), pairs={s: dict(sorted(counts[s].items())) for s in SPLITS})
        writer.build_info = info
    summary = build_summary(writer, started)
    n_val = sum(counts["val"].values())
    summary["val"] = {"groups": n_val, "puzzles": n_val, "examples": n_val}  # one pair per group and puzzle
    seconds = time.monotonic() - started
    summary.update(files=len(files) - len(unread),  # the files read: "from N files"
                   skipped_files=dict(skipped), unreadable_folders=len(unread_folders), rejected_pairs=dict(rejected),
                   duplicates=dict(duplicates), pairs=info["pairs"], total_pairs=total,
                   pairs_per_second=total / max(seconds, 1e-9), workers=workers, lint=bool(ruff))
    return summary


def format_repair_build(s: dict) -> str:
    """What `trm-kaggle build-code-repair` prints: totals, speed, skips, then pairs per type and split."""
    skipped = ", ".join(f"{v} {k}" for k, v in sorted(s["skipped_files"].items())) or "none"
    if s.get("unreadable_folders"):  # folders never listed: their files are in no count
        skipped += f"; folders unreadable: {s['unreadable_folders']:,}"
    lines = [f"built {one_line(s['output_dir'])}: {s['total_pairs']:,} pairs ({s['train']['examples']:,} train / "
             f"{s['val']['examples']:,} val / {s['test']['examples']:,} test) from {s['files']:,} files in "
             f"{s['seconds']:.1f} s, {s['pairs_per_second']:,.0f} pairs/s on {s['workers']} worker(s)",
             f"  files skipped: {skipped}; duplicates dropped: {s['duplicates'].get('snippets', 0):,} snippets, "
             f"{s['duplicates'].get('pairs', 0):,} pairs; linter pairs {'on' if s['lint'] else 'off'}",
             f"  {'bug type':<20}{'train':>9}{'val':>9}{'test':>9}"]
    for name in code_bugs.BUG_TYPES:
        counts = [s["pairs"][split].get(name, 0) for split in SPLITS]
        if any(counts):
            lines.append(f"  {name:<20}" + "".join(f"{c:>9,}" for c in counts))
    return "\n".join(lines)


def _run(tasks: list[list[str]], workers: int, init_args: tuple) -> Iterator[list[FileResult]]:
    """process_files over the tasks, in order: inline for one worker, else in a process pool."""
    if workers <= 1:
        _init_worker(*init_args)
        yield from map(process_files, tasks)
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # a forked child must not reuse the parent's thread pool
    try:
        with multiprocessing.get_context(method).Pool(workers, initializer=_init_pool_worker,
                                                      initargs=(os.getpid(), *init_args)) as pool:
            yield from _bounded_imap(pool, process_files, tasks, in_flight=4 * workers)
            _close(pool, WORKERS_EXIT_S)
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


# ---------------------------------------------------------------------------
# Reading the metadata back (curriculum, evaluation)
# ---------------------------------------------------------------------------


@dataclass
class RepairMeta:
    """Per-example metadata of one split; arrays indexed by example."""

    bug_type: np.ndarray  # str objects
    category: np.ndarray
    difficulty: np.ndarray  # float64
    source: list[str]  # file relative to the corpus (shown to people, never opened)
    line: np.ndarray

    def __len__(self) -> int:
        return len(self.difficulty)


def read_repair_meta(dataset_dir: str | os.PathLike, split: str) -> RepairMeta:
    path_argument("dataset_dir", dataset_dir, "a code-repair dataset folder")
    if split not in SPLITS:
        raise TRMError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    path = Path(dataset_dir) / split / META_FILE
    text = read_text(path, "repair metadata", hint=f"is {dataset_dir} a code-repair dataset? build it with "
                                                    "trm-kaggle build-code-repair")
    bug_type, category, difficulty, source, line = [], [], [], [], []
    for n, record in enumerate(text.splitlines(), start=1):
        if not record.strip():  # parse_json's words for it, "the file is empty", named the whole file
            raise DataError(f"{path}:{n}: a blank line where repair metadata record {n} belongs (one record a line)")
        r = parse_json(record, f"{path}:{n}", "repair metadata record")
        try:
            if not isinstance(r, dict):  # [1, 2] was Python's "list indices must be integers or slices"
                raise ValueError(f"it is a JSON {type(r).__name__}, not an object")
            if "example" in r and r["example"] != n - 1:  # line i describes example i: a record moved or changed
                raise ValueError(f"its example {clipped(r['example'])} is not {n - 1}, the example of line {n}")
            for key in ("bug_type", "category"):  # names shown in tables and reports: plain words, one line
                if not (isinstance(r[key], str) and r[key].isprintable() and 0 < len(r[key]) <= 80):
                    raise ValueError(f"its {key} {clipped(r[key])} is not a name of at most 80 printable characters")
            bug_type.append(str(r["bug_type"]))
            category.append(str(r["category"]))
            score = r["difficulty"]  # a score in [0, 1] (`bugs.difficulty`): a NaN one dropped out of every stage
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
                raise ValueError(f"its difficulty {clipped(score)} is not a number from 0 to 1")
            # a line number of a source file: 10**30 passed, then numpy's int64 array overflowed (a traceback)
            if isinstance(r["line"], bool) or not isinstance(r["line"], int) or not 0 <= r["line"] < 2**31:
                raise ValueError(f"its line {clipped(r['line'])} is not a line number (0 to 2**31 - 1)")
            if not isinstance(r["source"], str):
                raise ValueError(f"its source {clipped(r['source'])} is not a file's name")
            difficulty.append(float(score))
            source.append(str(r["source"]))
            line.append(r["line"])
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{path}:{n}: not a repair metadata record ({type(e).__name__}: {e})") from None
    return RepairMeta(np.array(bug_type, dtype=object), np.array(category, dtype=object),
                      np.array(difficulty, dtype=np.float64), source, np.array(line, dtype=np.int64))


def read_repair_info(dataset_dir: str | os.PathLike) -> dict:
    """A code-repair dataset's build_info.json (its token scheme and grid shape among the rest)."""
    path_argument("dataset_dir", dataset_dir, "a code-repair dataset folder")
    info = read_json(Path(dataset_dir) / "build_info.json", "build_info.json",
                     hint=f"is {dataset_dir} a code-repair dataset?")
    if not isinstance(info, dict) or info.get("builder") != "code-repair":
        builder = info.get("builder") if isinstance(info, dict) else None
        raise DataError(f"{dataset_dir}: not a code-repair dataset (built by {builder!r})")
    return info


def load_repair_tokens(dataset_dir: str | os.PathLike) -> Tokens:
    """The token scheme a code-repair dataset was built with."""
    path_argument("dataset_dir", dataset_dir, "a code-repair dataset folder")
    return tokens_from_description(read_repair_info(dataset_dir).get("tokens"), dataset_dir)
