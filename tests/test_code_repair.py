"""build-code-repair: snippets from a corpus -> validated, deduplicated pairs, split by file, in upstream's format."""

import hashlib
import json
import re
import signal
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.cli import main
from trm_kaggle.config import CodeRepairBuildConfig
from trm_kaggle.data.code import bugs as code_bugs
from trm_kaggle.data.code.lint import ruff_binary
from trm_kaggle.data.code.repair import (assign_splits, build_code_repair, corpus_files, extract_snippets,
                                         format_repair_build,
                                         load_repair_tokens, normalised, read_repair_info, read_repair_meta)
from trm_kaggle.data.format import load_split
from trm_kaggle.data.verify import verify_dataset
from trm_kaggle.errors import DataError, TRMError

GRID = "12x48"


def module_source(k: int) -> str:
    """A small module whose functions differ from those of module k' != k."""
    return f'''"""Module {k}."""


def scale_{k}(values, factor):
    out = []
    for i in range(len(values)):
        if values[i] > {k}:
            out.append(values[i] * factor + {k})
    return out


class Box{k}:
    def __init__(self, w, h):
        self.w = w
        self.h = max(h, w)

    def area(self, pad):
        if self.w < 0 or self.h == {k}:
            return 0
        return (self.w + pad) * (self.h - pad)


def first_{k}(items, key):
    for n, item in enumerate(items):
        if item is not None and key in item:
            return n
    return -{k}
'''


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "pkg").mkdir(parents=True)
    for k in range(1, 10):
        (root / ("pkg" if k % 2 else "") / f"mod{k}.py").write_text(module_source(k))
    (root / "copy_of_mod1.py").write_text(module_source(1))  # the same code twice: deduplicated
    (root / "broken.py").write_text("def f(:\n    pass\n")  # does not parse: skipped and counted
    (root / "latin1.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))  # not UTF-8
    (root / "gone.py").symlink_to(root / "missing-target.py")  # unreadable
    (root / "site-packages").mkdir()
    (root / "site-packages" / "ignored.py").write_text(module_source(99))
    return root


def build(corpus: Path, out: Path, **kw) -> dict:
    kw = {"grid": GRID, "workers": 1, "progress": False, "lint": "off", "val_fraction": 0.2, "test_fraction": 0.2,
          **kw}
    return build_code_repair(CodeRepairBuildConfig(output_dir=str(out), corpus=str(corpus), **kw))


def all_pairs(out: Path):
    """(split, example, buggy text, fixed text, meta record) of every example."""
    tokens = load_repair_tokens(out)
    rows, cols = json.loads((out / "build_info.json").read_text())["grid_shape"]
    for split in ("train", "val", "test"):
        s = load_split(out, split)
        records = [json.loads(line) for line in (out / split / "repair_meta.jsonl").read_text().splitlines()]
        assert len(records) == s.num_examples
        for i, r in enumerate(records):
            yield (split, i, tokens.text(s.inputs[i].reshape(rows, cols)), tokens.text(s.labels[i].reshape(rows, cols)),
                   r)


def test_build_verify_and_labels(corpus, tmp_path):
    out = tmp_path / "ds"
    s = build(corpus, out)
    verify_dataset(out)  # upstream's part of the layout checks out; val/ and the metadata are extra files
    assert load_split(out, "val").num_examples == s["val"]["examples"] > 0
    assert s["skipped_files"] == {"does_not_parse": 1, "not_utf8": 1, "unreadable": 1}
    assert s["files"] == 10  # the 13 corpus files read but the 3 skipped (site-packages is not part of a corpus)
    assert s["duplicates"]["snippets"] > 0
    info = json.loads((out / "build_info.json").read_text())
    assert info["tokens"] == {"kind": "char", "vocab_size": 97}
    assert load_split(out, "train").metadata.ignore_label_id is None  # padding is a target
    seen_types = set()
    for split, i, buggy, fixed, r in all_pairs(out):
        seen_types.add(r["bug_type"])
        assert r["example"] == i and r["category"] == code_bugs.BUG_TYPES[r["bug_type"]].category
        assert 0 <= r["difficulty"] <= 1
        assert buggy != fixed and code_bugs.parses(fixed)
        assert code_bugs.parses(buggy) is (r["category"] != "syntax")
        assert "site-packages" not in r["source"]
    assert seen_types == set(code_bugs.SYNTHETIC)


def test_split_by_file_no_leak_and_no_duplicate(corpus, tmp_path):
    out = tmp_path / "ds"
    build(corpus, out, mutations_per_type=2)
    files_of = {"train": set(), "val": set(), "test": set()}
    pairs, snippets_of = set(), {"train": set(), "val": set(), "test": set()}
    for split, _, buggy, fixed, r in all_pairs(out):
        files_of[split].add(r["source"])
        key = (normalised(buggy), normalised(fixed))
        assert key not in pairs, "a pair was written twice"
        pairs.add(key)
        snippets_of[split].add(normalised(fixed))
    assert all(files_of.values())
    assert not (files_of["train"] & files_of["val"]) and not (files_of["train"] & files_of["test"])
    assert not (files_of["val"] & files_of["test"])
    # copy_of_mod1.py and pkg/mod1.py hold the same code: only the first (in name order) contributes it
    used = set().union(*files_of.values())
    assert "copy_of_mod1.py" in used and "pkg/mod1.py" not in used
    assert not (snippets_of["train"] & snippets_of["test"]), "the same snippet in train and test"


def test_assign_splits_keeps_every_split_and_is_seeded():
    files = [f"f{i}.py" for i in range(20)]
    a = assign_splits(files, 0, 0.1, 0.2)
    assert sorted(a.values()).count("test") == 4 and sorted(a.values()).count("val") == 2
    assert a == assign_splits(files, 0, 0.1, 0.2) and a != assign_splits(files, 1, 0.1, 0.2)
    tiny = assign_splits(["a.py", "b.py", "c.py"], 0, 0.01, 0.01)
    assert sorted(tiny.values()) == ["test", "train", "val"]
    # a file that will be skipped never takes a held-out place, nor counts among the places: with every held-out
    # file of `a` unusable, the fractions are of the 14 usable files (3 test, 1 val), the skipped ones in train
    # (where each costs itself alone; counted, three skipped files of nine had made 0.2/0.2 a third each)
    held = {f for f, s in a.items() if s != "train"}
    b = assign_splits(files, 0, 0.1, 0.2, usable=lambda f: f not in held)
    assert all(b[f] == "train" for f in held) and sorted(b.values()).count("test") == 3
    assert sorted(b.values()).count("val") == 1
    nine = assign_splits([f"f{i}.py" for i in range(9)], 0, 0.2, 0.2, usable=lambda f: f not in {"f0.py", "f1.py",
                                                                                                    "f2.py"})
    assert sorted(nine.values()) == ["test"] + ["train"] * 7 + ["val"]  # of six usable files, as without the three
    assert assign_splits(files, 0, 0.1, 0.2, usable=lambda f: True) == a  # usable files: the same split
    # one good file beside a dangling link: the held-out place it took left train nothing ("no repair pairs in
    # the train split" for a corpus that builds without the link); train keeps a usable file
    for seed in range(8):
        pair = assign_splits(["a.py", "b.py"], seed, 0.1, 0.1, usable=lambda f: f == "a.py")
        assert pair["a.py"] == "train", (seed, pair)
    assert sorted(assign_splits(["a.py", "b.py", "c.py"], 0, 0.1, 0.1, usable=lambda f: f != "c.py").values()) == [
        "test", "train", "train"]


def test_a_skipped_corpus_file_never_empties_a_held_out_split(tmp_path):
    """A FIFO, a link loop and a file that does not parse beside good files came out as "84 train / 0 val / 0
    test": the skipped files had taken the held-out places."""
    root = tmp_path / "corpus"
    root.mkdir()
    for k in range(1, 7):
        (root / f"mod{k}.py").write_text(module_source(k))
    os.mkfifo(root / "fifo.py")
    (root / "loop.py").symlink_to(root / "loop.py")
    (root / "bad.py").write_text("def f(:\n")
    files = corpus_files(root)
    # a seed under which the plain shuffle gives both test places to skipped files
    seed = next(k for k in range(1000) if {f for f, s in assign_splits(files, k, 0.2, 0.2).items() if s == "test"}
                <= {"fifo.py", "loop.py", "bad.py"})
    s = build_code_repair(CodeRepairBuildConfig(output_dir=str(tmp_path / "o"), corpus=str(root), workers=1,
                                                lint="off", progress=False, val_fraction=0.2, test_fraction=0.2,
                                                seed=seed))
    assert s["skipped_files"] and all(s[split]["examples"] > 0 for split in ("train", "val", "test")), s
    # the record counts the files each split read: the skipped three are in none (they were "train: 5")
    info = json.loads((tmp_path / "o" / "build_info.json").read_text())
    assert info["files"] == {"train": 4, "val": 1, "test": 1}, info["files"]
    # and the closing line's "from N files" counts the files read (it said 9)
    assert s["files"] == 6 and sum(s["skipped_files"].values()) == 3, s
    assert " from 6 files in " in format_repair_build({"seconds": 1.0, **s})


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != "build_info.json":
            h.update(p.relative_to(out).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_deterministic_for_a_seed_and_any_worker_count(corpus, tmp_path):
    build(corpus, tmp_path / "a", seed=3)
    build(corpus, tmp_path / "b", seed=3, workers=2)
    build(corpus, tmp_path / "c", seed=4)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_bpe_tokens(corpus, tmp_path):
    pytest.importorskip("tokenizers")
    out = tmp_path / "bpe"
    s = build(corpus, out, tokens="bpe", bpe_vocab_size=160, grid="12x24")
    assert s["vocab_size"] == 162 and (out / "tokenizer.json").is_file()
    verify_dataset(out)
    n = 0
    for _, _, buggy, fixed, r in all_pairs(out):
        assert code_bugs.parses(fixed) and code_bugs.parses(buggy) is (r["category"] != "syntax")
        n += 1
    assert n == s["total_pairs"]


@pytest.mark.skipif(ruff_binary() is None, reason="linter pairs need ruff: pip install -e '.[repair]'")
def test_linter_pairs(tmp_path):
    root = tmp_path / "lint"
    root.mkdir()
    for k in range(3):
        (root / f"m{k}.py").write_text(f"def check_{k}(x, items):\n    if not x in items:\n        return {k}\n"
                                       f"    return f'found'\n")
    out = tmp_path / "ds"
    build(root, out, lint="on", bug_types=["missing_colon"], val_fraction=0.0, test_fraction=0.0)
    lint = [(b, f, r) for _, _, b, f, r in all_pairs(out) if r["bug_type"] == "lint"]
    rules = {r["rule"] for _, _, r in lint}
    assert {"E713", "F541"} <= rules
    for buggy, fixed, r in lint:
        assert r["category"] == "lint" and code_bugs.parses(buggy) and code_bugs.parses(fixed)
        if r["rule"] == "E713":
            assert "not x in items" in buggy and "x not in items" in fixed and "f'found'" in fixed


def test_extract_snippets_descends_into_functions_too_large():
    source = "def big(a):\n" + "".join(f"    x{i} = a\n" for i in range(20)) + \
             "    for i in range(a):\n        if i:\n            print(i)\n    return a\n"
    tree = code_bugs.parse(source)
    out = extract_snippets(source, tree, lambda lines: max(map(len, lines)) <= 40, 3, 8, False)
    assert [t for _, t in out] == ["for i in range(a):\n    if i:\n        print(i)"]
    assert out[0][0] == 22


def test_strip_docstrings():
    source = 'def f(a):\n    """Doc\n    string."""\n    b = a\n    return b\n'
    out = extract_snippets(source, code_bugs.parse(source), lambda lines: True, 3, 8, True)
    assert [t for _, t in out] == ["def f(a):\n    b = a\n    return b"]


@pytest.mark.parametrize("args, message", [
    (["--corpus", "{tmp}/nowhere"], "corpus {tmp}/nowhere: no such directory"),
    (["--corpus", "{tmp}/empty"], "corpus {tmp}/empty: no Python (.py) files"),
    (["--corpus", "{tmp}/empty", "--grid", "64x0"], "grid must be ROWSxCOLS"),
    # no file read: the grid, --min-lines and --bug-types were blamed
    (["--corpus", "{tmp}/onlybad"], "no repair pairs: every one of its 1 files was skipped (1 does not parse)"),
    (["--bug-types", "typo"], "unknown bug type 'typo'"),
    (["--corpus", "{tmp}/onlybad/a.py"], "corpus {tmp}/onlybad/a.py: not a directory"),
    # one type named twice made each of its pairs twice (the dataset doubled, exit 0)
    (["--bug-types", "wrong_operator", "wrong_operator"], "the bug type 'wrong_operator' is named twice"),
    # read by nothing with character tokens: the dataset was the same, build_info.json said 500
    (["--tokens", "char", "--bpe-vocab-size", "500"], "--bpe-vocab-size 500 sizes the BPE pieces, and tokens is char"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "onlybad").mkdir()
    (tmp_path / "onlybad" / "a.py").write_text("def f(:\n")
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "build-code-repair", "--output-dir", str(tmp_path / "o"),
                        *[a.format(tmp=tmp_path) for a in args]], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0] == p.stderr.strip().splitlines()[-1], p.stderr  # progress bars aside
    assert errors[0].startswith("error: ") and message.format(tmp=tmp_path) in errors[0]
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_cli_builds(corpus, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["build-code-repair", "--output-dir", str(out), "--corpus", str(corpus), "--grid", GRID,
                 "--workers", "1", "--lint", "off", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "pairs/s" in text and "missing_colon" in text
    assert read_repair_meta(out, "train").bug_type.size == load_split(out, "train").num_examples


def test_a_source_saved_with_a_byte_order_mark_is_read(tmp_path, capsys):
    """Python runs a file that starts with a UTF-8 byte-order mark (as editors on Windows save it); the builder kept
    the mark, ast refused the text, and such files were skipped as "does_not_parse"."""
    root = tmp_path / "bom"
    root.mkdir()
    for k in range(1, 6):
        (root / f"mod{k}.py").write_text(module_source(k), encoding="utf-8-sig")
    out = tmp_path / "ds"
    assert main(["build-code-repair", "--output-dir", str(out), "--corpus", str(root), "--grid", GRID,
                 "--workers", "1", "--lint", "off", "--no-progress"]) == 0, capsys.readouterr().err
    assert json.loads((out / "build_info.json").read_text())["skipped_files"] == {}


def test_read_repair_meta_errors(tmp_path):
    with pytest.raises(DataError, match="repair metadata not found"):
        read_repair_meta(tmp_path, "train")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "repair_meta.jsonl").write_text('{"bug_type": "x"}\n')
    with pytest.raises(DataError, match="repair_meta.jsonl:1"):
        read_repair_meta(tmp_path, "train")


@pytest.mark.parametrize("difficulty, line, words", [
    ("NaN", 3, "its difficulty nan is not a number from 0 to 1"),  # it dropped out of every curriculum stage
    ("Infinity", 3, "its difficulty inf"), ("-5", 3, "its difficulty -5"), ("true", 3, "its difficulty True"),
    ('"0.5"', 3, "its difficulty '0.5'"), ("0.5", "-1", "its line -1"), ("0.5", "2.5", "its line 2.5"),
    # past int64: numpy's OverflowError (a traceback in evaluate-repair and the curriculum's training)
    ("0.5", str(10**30), "its line 1000000000000000000000000000000 is not a line number"),
])
def test_a_repair_record_of_no_sane_difficulty_or_line_is_named(tmp_path, difficulty, line, words):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "repair_meta.jsonl").write_text(
        '{"bug_type": "b", "category": "c", "difficulty": %s, "source": "a.py", "line": %s}\n' % (difficulty, line))
    with pytest.raises(DataError, match=re.escape(f"repair_meta.jsonl:1: not a repair metadata record (ValueError: "
                                                  f"{words}")):
        read_repair_meta(tmp_path, "train")
    (tmp_path / "train" / "repair_meta.jsonl").write_text(
        '{"bug_type": "b", "category": "c", "difficulty": 0.5, "source": "a.py", "line": 3}\n')
    assert read_repair_meta(tmp_path, "train").difficulty.tolist() == [0.5]


def test_default_corpus_is_the_standard_library():
    from trm_kaggle.data.code.repair import default_corpus

    files = corpus_files(default_corpus())
    assert "json/decoder.py" in files and not any("site-packages" in f for f in files)
    assert np.all(np.array(files[:-1]) <= np.array(files[1:]))  # sorted


def test_val_and_test_fractions_that_leave_no_file_for_training_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="leave no file for training"):
        CodeRepairBuildConfig(output_dir=str(tmp_path / "ds"), val_fraction=0.6, test_fraction=0.6)
    assert main(["build-code-repair", "--output-dir", str(tmp_path / "ds"), "--val-fraction", "0.5",
                 "--test-fraction", "0.5"]) == 2
    assert "--val-fraction 0.5 + --test-fraction 0.5 leave no file" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def test_no_pairs_names_every_filter_that_can_leave_none(corpus, tmp_path):
    """No pairs was always "do any functions fit the grid?", also where every function fits and --min-lines or
    --bug-types left none: the line names each filter with its value."""
    with pytest.raises(DataError, match=r"have at least 1000 lines \(--min-lines\)"):
        build(corpus, tmp_path / "o", min_lines=1000)
    assert not (tmp_path / "o").exists()


def test_a_train_split_emptied_by_duplicates_says_so(tmp_path):
    """Three copies of one file: the held-out files came first and the train file's pairs were all dropped as
    duplicates; the refusal blamed the grid, --min-lines and the bug types."""
    corpus = tmp_path / "c"
    corpus.mkdir()
    for name in "abc":
        (corpus / f"{name}.py").write_text(module_source(1))
    args = ["build-code-repair", "--output-dir", str(tmp_path / "o"), "--corpus", str(corpus), "--grid", GRID,
            "--workers", "1", "--lint", "off", "--no-progress"]
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", *args[:-1]], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "dropped as duplicates): the train files repeat the code of the val/test files" in p.stderr
    assert "--min-lines" not in p.stderr and not (tmp_path / "o").exists()
    assert main([*args, "--val-fraction", "0", "--test-fraction", "0"]) == 0  # the advice holds


def test_an_empty_corpus_setting_is_refused_not_read_as_the_standard_library(tmp_path, capsys):
    """`--corpus ''` built the whole standard library (exit 0), as an unset shell variable's value would: the config
    refuses it, as every path setting's."""
    out = tmp_path / "ds"
    assert main(["build-code-repair", "--output-dir", str(out), "--corpus", "", "--no-progress"]) == 2
    assert "error: invalid option: --corpus: is empty: name a folder or a file" in capsys.readouterr().err
    with pytest.raises(ValueError, match="corpus\n.*is empty: name a folder or a file"):
        CodeRepairBuildConfig(output_dir=str(out), corpus="", progress=False)
    assert not out.exists()


def _unlistable(monkeypatch, folder: Path) -> None:
    """`folder` cannot be listed (as without read permission; the tests may run as root, who reads any)."""
    scandir = os.scandir

    def refusing(path="."):
        if Path(path) == folder:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)


def test_an_unreadable_corpus_folder_is_named_with_its_permission(corpus, monkeypatch):
    """It was "no Python (.py) files" (os.walk's errors were dropped)."""
    _unlistable(monkeypatch, corpus)
    with pytest.raises(DataError, match=re.escape(f"corpus {corpus}: cannot read corpus folder: Permission denied "
                                                  "(a permission")):
        corpus_files(corpus)


def test_an_unreadable_corpus_sub_folder_is_warned_and_recorded(corpus, tmp_path, monkeypatch, caplog):
    """It was left out without a word: no WARNING, nothing in build_info.json."""
    _unlistable(monkeypatch, corpus / "pkg")
    out = tmp_path / "ds"
    with caplog.at_level("WARNING"):
        s = build(corpus, out)
    assert f"skipped {corpus / 'pkg'}: cannot read corpus folder: Permission denied" in caplog.text
    assert s["unreadable_folders"] == 1 and "folders unreadable: 1" in format_repair_build(s)
    assert json.loads((out / "build_info.json").read_text())["unreadable_folders"] == ["pkg"]
    assert corpus_files(str(corpus)) == sorted(corpus_files(corpus))  # a str root is a path too


def test_library_calls_name_an_argument_of_the_wrong_type(tmp_path):
    for cfg in ({"output_dir": str(tmp_path / "x")}, None):  # "has no attribute 'output_dir'"
        with pytest.raises(TypeError, match=f"^cfg: expected a CodeRepairBuildConfig .*got {type(cfg).__name__}$"):
            build_code_repair(cfg)
    for call in (lambda: read_repair_meta(5, "test"), lambda: read_repair_info(5), lambda: load_repair_tokens(None)):
        with pytest.raises(TypeError, match="^dataset_dir: expected a code-repair dataset folder"):
            call()


@pytest.mark.parametrize("text, words", [
    ('{"example": 0, "bug_type": "b", "category": "c", "difficulty": 0.5, "source": "a.py", "line": 3}\n\n\n',
     "repair_meta.jsonl:2: a blank line where repair metadata record 2 belongs"),  # was "the file is empty"
    ("[1, 2]\n", "(ValueError: it is a JSON list, not an object)"),  # was Python's "list indices must be integers"
    ('{"example": 99, "bug_type": "b", "category": "c", "difficulty": 0.5, "source": "a.py", "line": 3}\n',
     "its example 99 is not 0, the example of line 1"),  # taken without a word
])
def test_a_repair_metadata_file_changed_by_hand_is_named(tmp_path, text, words):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "repair_meta.jsonl").write_text(text)
    with pytest.raises(DataError, match=re.escape(words)):
        read_repair_meta(tmp_path, "train")


def test_a_file_declaring_an_unknown_coding_is_skipped_with_a_warning(tmp_path, caplog):
    """Python cannot compile it; it was read as UTF-8 and gave pairs."""
    root = tmp_path / "c"
    root.mkdir()
    for k in range(1, 4):
        (root / f"mod{k}.py").write_text(module_source(k))
    (root / "odd.py").write_text("# -*- coding: nosuch -*-\n" + module_source(7))
    with caplog.at_level("WARNING"):
        s = build(root, tmp_path / "ds", val_fraction=0.0, test_fraction=0.0)
    assert s["skipped_files"] == {"unknown_coding": 1}
    assert "odd.py: unknown encoding: nosuch" in caplog.text


def test_a_build_whose_test_split_is_empty_says_so(tmp_path, caplog):
    """evaluate-repair refuses such a dataset, long after the build said nothing."""
    root = tmp_path / "c"
    root.mkdir()
    for k in range(1, 4):
        (root / f"mod{k}.py").write_text(module_source(k))
    (root / "consts.py").write_text("X = 1\n")  # parses, and has no snippet
    for seed in range(40):  # the seed that gives the test place to consts.py
        split = assign_splits(sorted(p.name for p in root.iterdir()), seed, 0.0, 0.25)
        if split["consts.py"] == "test":
            break
    with caplog.at_level("WARNING"):
        s = build(root, tmp_path / "ds", val_fraction=0.0, test_fraction=0.25, seed=seed)
    assert s["test"]["examples"] == 0 and "the test split holds no pairs" in caplog.text


BUILDS_IN_A_LOOP = (
    "import shutil, sys, time\n"
    "from trm_kaggle.interrupts import take_sigterm\n"
    "take_sigterm()  # as the command line: the pool's workers inherit its handlers\n"
    "from trm_kaggle.config import CodeRepairBuildConfig\n"
    "from trm_kaggle.data.code.repair import build_code_repair\n"
    "corpus, out = sys.argv[1:]\n"
    "end = time.monotonic() + 8\n"
    "while time.monotonic() < end:\n"
    "    shutil.rmtree(out, ignore_errors=True)\n"
    "    build_code_repair(CodeRepairBuildConfig(output_dir=out, corpus=corpus, grid='8x32', workers=2,\n"
    "                      progress=False, lint='off', val_fraction=0.2, test_fraction=0.2))\n"
    "print('ok')\n")


def test_builds_with_two_workers_always_end(corpus, tmp_path):
    """About one build in ten never ended: the pool's terminate() sent each worker a SIGTERM its inherited Python
    handler could miss (a worker blocking on the queue's lock), then joined it for ever. The pool is now closed
    when its results are in, and a worker takes SIGTERM's default."""
    p = subprocess.run([sys.executable, "-c", BUILDS_IN_A_LOOP, str(corpus), str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr[-2000:]


def test_a_link_to_a_file_outside_the_corpus_is_skipped_unread(corpus, tmp_path, caplog):
    """`passwd.py -> /etc/passwd` was followed and read (it only failed to parse); a link out of the corpus is
    now skipped unread, counted and named; a link to a file inside the corpus is read as before."""
    outside = tmp_path / "secret.py"
    outside.write_text(module_source(42))
    (corpus / "outside.py").symlink_to(outside)
    (corpus / "inside.py").symlink_to(corpus / "mod2.py")
    s = build(corpus, tmp_path / "o")
    assert s["skipped_files"].get("link_outside_corpus") == 1, s["skipped_files"]
    assert any("outside.py" in r.message and "outside the corpus" in r.message for r in caplog.records)
    assert not any("inside.py" in r.message for r in caplog.records)


def _dies_on_two(n: int) -> int:
    if n == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer ends a worker
    return n


def test_a_worker_that_dies_is_one_error_not_a_wait_for_ever():
    """A worker killed mid-build (SIGKILL to it, the out-of-memory killer) left the build waiting for ever for
    the task it took along: multiprocessing's Pool starts another worker and never answers the lost task."""
    import multiprocessing

    from trm_kaggle.data.code import repair

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        got = []
        started = time.monotonic()
        with pytest.raises(TRMError, match="a worker process of the build ended before its files were done"):
            for r in repair._bounded_imap(pool, _dies_on_two, range(6), in_flight=4):
                got.append(r)
        assert time.monotonic() - started < 20 and got == [0, 1]
