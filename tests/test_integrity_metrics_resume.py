"""metrics.jsonl holds each step once, also after a kill before the first train state.

A process killed before it saved a state leaves records but nothing to resume from: the next start
begins at step 0, and the log then starts at step 0 too (the abandoned records are dropped), as a resume
from a state at step N drops the records past N.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trm_kaggle.cli import main
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.metrics import read_metrics

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=1", "arch.L_cycles=1",
        "arch.L_layers=1", "arch.halt_max_steps=2", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "lr_warmup_steps=1", "eval_interval=null", "log_interval=1", "device=cpu",
        "threads=1", "seed=0", "deterministic=True"]


def train(data: Path, run: Path, steps: int) -> int:
    return main(["train", f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, f"max_steps={steps}",
                 "--no-progress"])


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def abandoned(step: int, **extra) -> str:
    """A training record as a process writes it, marked so that the test can find it."""
    return json.dumps({"step": step, "loss": 9.0, "elapsed_s": 1.0, "start_step": 0, "abandoned": True, **extra})


@pytest.mark.parametrize("tail", [
    [abandoned(1), abandoned(2), abandoned(3)],         # killed at step 3, before the first state
    [abandoned(1), '{"step": 2, "lo'],                  # ... while it wrote a line
    [abandoned(1), abandoned(1, eval_exact_accuracy=0.5)],  # an evaluation record too
    [abandoned(7)],                                      # a record beyond the run's end
])
def test_a_start_without_a_state_drops_the_abandoned_records(sudoku4, tmp_path, tail):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(tail) + "\n")
    (run / "run.json").write_text('{"run_id": "killed"}')  # claimed at its start (a log nothing recorded is refused)
    assert train(sudoku4, run, 3) == 0
    logged = records(run)
    assert not any(r.get("abandoned") for r in logged)
    assert [r["step"] for r in logged if "loss" in r] == [1, 2, 3]  # each step once, from the start
    train_records, _ = read_metrics(run)
    assert [r["step"] for r in train_records] == [1, 2, 3]


def test_a_run_whose_states_were_removed_starts_a_fresh_log(sudoku4, tmp_path):
    run = tmp_path / "run"
    assert train(sudoku4, run, 2) == 0
    for state in ckpt.list_states(run):  # removed by hand: nothing to resume from
        state.unlink()
    assert train(sudoku4, run, 3) == 0
    assert [r["step"] for r in records(run) if "loss" in r] == [1, 2, 3]


def test_a_resume_from_a_state_still_keeps_the_steps_before_it(sudoku4, tmp_path):
    run = tmp_path / "run"
    assert train(sudoku4, run, 2) == 0
    with open(run / "metrics.jsonl", "a") as f:  # steps 3 and 4 logged, then killed before their state
        f.write(abandoned(3) + "\n" + abandoned(4) + "\n")
    assert train(sudoku4, run, 4) == 0
    logged = [r for r in records(run) if "loss" in r]
    assert [r["step"] for r in logged] == [1, 2, 3, 4] and not any(r.get("abandoned") for r in logged)


@pytest.mark.slow  # starts a training process: ~20 s on a loaded 2-core machine
def test_a_real_kill_before_the_first_state(sudoku4, tmp_path):
    """A training killed (SIGKILL) after logging steps but before any state: the rerun logs each step once."""
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "trm_kaggle", "train", f"data_paths=[{sudoku4}]",
                          f"checkpoint_path={run}", *TINY, "max_steps=100000", "--no-progress"],
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (run / "metrics.jsonl").is_file() or (run / "metrics.jsonl").read_text().count("\n") < 2:
        assert p.poll() is None and time.time() < deadline
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not ckpt.list_states(run)  # killed before its first state
    assert train(sudoku4, run, 3) == 0
    assert [r["step"] for r in records(run) if "loss" in r] == [1, 2, 3]
