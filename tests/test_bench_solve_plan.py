"""benchmarks/bench_solve_plan.py: a short run's measured rates, priced for longer budgets by the solve's own plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_solve_plan.py"


def test_longer_budgets_plan_more_work_from_the_same_rates(tmp_path):
    (tmp_path / "wd" / "workers").mkdir(parents=True)
    rates = {"device": "cpu", "step_s": 0.5, "embeddings_step_s": 0.2, "row_step_s": 0.01, "halt_max_steps": 4,
             "batch": 32, "eval_batch": 64, "timing_s": 5.0, "notes": ["a note"]}
    (tmp_path / "wd" / "workers" / "w0.plan.json").write_text(json.dumps({"rates": rates}))
    task = {"train": [{"input": [[1]], "output": [[2]]}] * 3, "test": [{"input": [[1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({f"t{i}": task for i in range(20)}))
    done = subprocess.run([sys.executable, str(SCRIPT), "--work-dir", str(tmp_path / "wd"), "--challenges",
                           str(tmp_path / "c.json"), "--budgets", "70", "4200", "41400"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("20 tasks, 20 test inputs; measured on cpu: a step 0.50 s")
    plans = [(int(line.split("num_aug ")[1].split(",")[0]), int(line.split(", ")[1].split(" ")[0]))
             for line in lines[1:]]
    assert plans[0] == (0, 0) and "smallest plan" in lines[1]  # 70 s: nothing left after the margins
    assert plans[1][0] > 0 and plans[2] > plans[1] and plans[2][1] > 0  # hours buy augmentations, then tuning
    bad = subprocess.run([sys.executable, str(SCRIPT), "--work-dir", str(tmp_path / "none"), "--challenges",
                          str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and bad.stderr.strip().startswith("error:") and "w0.plan.json" in bad.stderr


def test_a_plan_that_is_wrong_is_named_and_its_device_is_escaped(tmp_path):
    """A malformed plan was blamed on the good challenges file (or `error: 'rates'`); a device name holding an
    escape sequence reached the terminal raw; a budget past submit's bound passed the check before any work."""
    (tmp_path / "wd" / "workers").mkdir(parents=True)
    plan = tmp_path / "wd" / "workers" / "w0.plan.json"
    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t0": task}))

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SCRIPT), "--work-dir", str(tmp_path / "wd"), "--challenges",
                               str(tmp_path / "c.json"), *extra], capture_output=True, text=True, timeout=120)

    for saved in ({"no rates": 1}, {"rates": {"device": "cpu"}}, {"rates": [1]}):
        plan.write_text(json.dumps(saved))
        done = run()
        assert done.returncode == 2 and f"error: {plan}: not a worker's plan" in done.stderr, done.stderr
    # the missing rates named in the package's words (it was Python's "Rates.__init__() missing 7 required ...")
    plan.write_text(json.dumps({"rates": {"device": "cpu"}}))
    assert "(no step_s, embeddings_step_s, row_step_s" in run().stderr
    plan.write_bytes(b"\xff\xfe")  # a byte-order mark alone: no JSON, though not an empty file
    assert "the file holds no JSON (blank space or a byte-order mark only)" in run().stderr
    rates = {"device": "cpu\x1b[2J\n", "step_s": 0.5, "embeddings_step_s": 0.2, "row_step_s": 0.01,
             "halt_max_steps": 4, "batch": 32, "eval_batch": 64}
    plan.write_text(json.dumps({"rates": rates}))
    done = run("--budgets", "600")
    assert done.returncode == 0 and "\x1b" not in done.stdout and "cpu\\x1b[2J\\n" in done.stdout, done.stdout
    done = run("--budgets", "700000")
    assert done.returncode == 2 and "--budgets 700000.0: at most" in done.stderr and not done.stdout, done.stderr


def test_challenges_of_no_task_are_refused_as_submit_refuses_them(tmp_path, monkeypatch, capsys):
    """`{}` as the challenges printed a plan for 0 tasks, status 0; a solutions file (no test input) likewise. Each is
    one line naming the file, status 2, nothing planned."""
    sys.path.insert(0, str(SCRIPT.parents[1]))
    from benchmarks.bench_solve_plan import main
    from benchmarks.entry import said

    (tmp_path / "wd" / "workers").mkdir(parents=True)
    rates = {"device": "cpu", "step_s": 0.1, "embeddings_step_s": 0.05, "row_step_s": 0.01, "halt_max_steps": 4,
             "batch": 4, "eval_batch": 4}
    (tmp_path / "wd" / "workers" / "w0.plan.json").write_text(json.dumps({"rates": rates}))
    for challenges, said_there in (({}, "holds no task, so there is nothing to plan"),
                                   ({"t0": [[[1]]]}, "none of its 1 task has a test input")):
        (tmp_path / "c.json").write_text(json.dumps(challenges))
        monkeypatch.setattr(sys, "argv", ["bench_solve_plan.py", "--work-dir", str(tmp_path / "wd"), "--challenges",
                                          str(tmp_path / "c.json"), "--budgets", "60"])
        assert said(main) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"error: {tmp_path / 'c.json'}: ") and said_there in err and not out, (out, err)
