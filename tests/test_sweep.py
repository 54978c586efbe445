"""trm-kaggle sweep: grids (built-in, YAML, bad ones), the plan's layering, and the runner with stand-in
children (a few lines of Python in place of `trm-kaggle train`): states, failures, resume, parallel slots,
GPUs, interruption, locking; then one small sweep of real training processes."""

import contextlib
import errno
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.config import SweepGrid
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import LOCK_FILE
from trm_kaggle.experiments import sweep as S

# Stands in for `trm-kaggle train`: records its argv/env/pid, then behaves as its run's name says.
FAKE_TRAIN = r"""
import json, os, sys, time
args = sys.argv[1:]
run_dir = os.path.dirname(args[args.index("--config") + 1])  # <run>/run_config.yaml
name = os.path.basename(run_dir)
def note(**kw):
    with open(os.path.join(run_dir, "fake.jsonl"), "a") as f:
        f.write(json.dumps(kw) + "\n")
if "saving" in name:  # as a training does: SIGINT saves a state (here a second's wait) before it ends
    import signal
    def save_and_stop(*_):
        time.sleep(1.0)
        note(saved=time.time())
        sys.exit(130)
    signal.signal(signal.SIGINT, save_and_stop)
note(argv=args, start=time.time(), pid=os.getpid(), cuda=os.environ.get("CUDA_VISIBLE_DEVICES"),
     omp=os.environ.get("OMP_NUM_THREADS"))
if name.startswith("fail"):
    print("some output")
    print("error: boom in " + name, file=sys.stderr)
    sys.exit(3)
if name.startswith("crash"):
    raise RuntimeError("a bug in " + name)
if name.startswith("slow"):
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0.6")))
open(os.path.join(run_dir, "state_step00000001.pt"), "w").close()  # a finished training leaves its state
note(end=time.time())
"""


@pytest.fixture
def fake_train(tmp_path, monkeypatch):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    real = S.PlannedRun.command  # [python, -m, trm_kaggle, train, *arguments]
    monkeypatch.setattr(S.PlannedRun, "command",
                        lambda self, run_dir, extra=(): [sys.executable, str(script), *real(self, run_dir, extra)[4:]])
    monkeypatch.setattr(S, "check_data", lambda grid, plan: None)  # the stand-in needs no dataset
    return script


def grid(*names, seeds=(0,), **kw) -> SweepGrid:
    return SweepGrid(name="t", axes=[[{"name": n} for n in names]], seeds=list(seeds), **kw)


def notes(sweep_dir: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (sweep_dir / run / "fake.jsonl").read_text().splitlines()]


def records(sweep_dir: Path) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads((sweep_dir / "sweep.json").read_text())["runs"]}


# ---------------------------------------------------------------------------
# Grids and the plan
# ---------------------------------------------------------------------------


def test_builtin_grids_are_the_studys():
    def variants(name):
        return [v.name for v in S.load_grid(name).axes[0]]

    assert variants("tn") == ["T2n2", "T2n6", "T3n4", "T3n6", "T4n6"]
    assert variants("ablations") == ["baseline", "no-ema", "attention", "act-8"]
    assert variants("batch") == ["batch512", "batch1024", "batch2048"]
    plan = S.plan_sweep(S.with_seeds(S.load_grid("ablations"), [0, 1]), "sw", presets=["sudoku-att"])
    cfg = {r.name: r.config for r in plan}
    assert list(cfg) == ["baseline_s0", "baseline_s1", "no-ema_s0", "no-ema_s1", "attention_s0", "attention_s1",
                         "act-8_s0", "act-8_s1"]
    assert cfg["baseline_s0"].ema and not cfg["no-ema_s1"].ema and cfg["act-8_s0"].arch.halt_max_steps == 8
    assert (cfg["baseline_s1"].seed, cfg["baseline_s1"].checkpoint_path) == (1, str(Path("sw") / "baseline_s1"))
    # sudoku-att already uses attention: that variant repeats the baseline, and the sweep says so
    assert S.repeated_variants(plan) == [["baseline", "attention"]]
    # a variant changes what it names whatever the base says: it applies on top of the base's overrides
    plan = S.plan_sweep(S.load_grid("ablations"), "sw", presets=["sudoku4-cpu"],
                        overrides=["ema=True", "arch.halt_max_steps=16"])
    cfg = {r.variant: r.config for r in plan}
    assert (cfg["baseline"].ema, cfg["no-ema"].ema, cfg["act-8"].ema) == (True, False, True)
    assert (cfg["baseline"].arch.halt_max_steps, cfg["act-8"].arch.halt_max_steps) == (16, 8)
    assert (cfg["baseline"].arch.mlp_t, cfg["attention"].arch.mlp_t) == (True, False)
    assert S.repeated_variants(plan) == []


def test_yaml_grid_and_the_order_of_layers(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("presets: [cpu-smoke]\noverrides: [lr=0.1, max_steps=7]\n"
                    "axes:\n  - [baseline, T3n6, {name: big, presets: [large], overrides: [lr=0.3]}]\n"
                    "  - [\"weight_decay=0.5\"]\nseeds: [3]\n")
    g = S.load_grid(str(path))
    assert g.name == "lr"  # the file's stem
    plan = S.plan_sweep(g, tmp_path / "sw", overrides=["lr=0.2"], presets=["no-ema"])
    cfg = {r.name: r.config for r in plan}
    assert list(cfg) == ["baseline_weight_decay=0.5_s3", "T3n6_weight_decay=0.5_s3", "big_weight_decay=0.5_s3"]
    base, deep, big = cfg.values()
    # base: command-line presets, grid presets, grid overrides, command-line overrides; then the variants
    assert (base.lr, deep.lr, big.lr) == (0.2, 0.2, 0.3)
    assert base.max_steps == 7 and base.weight_decay == 0.5 and base.seed == 3 and not base.ema
    assert (deep.arch.H_cycles, deep.arch.L_cycles) == (3, 6) and big.arch.hidden_size == 768
    assert (plan[2].presets, plan[2].overrides) == (["large"], ["lr=0.3", "weight_decay=0.5"])


@pytest.mark.parametrize("where, setting", [("variant", "seed=7"), ("variant", "checkpoint_path=/tmp/x"),
                                            ("command line", "run_name=mine"), ("grid", "+seed=3")])
def test_a_setting_the_sweep_gives_each_run_is_refused_not_replaced(tmp_path, where, setting):
    """A variant's `seed=7` was replaced by the grid's seeds (and checkpoint_path, run_name by the sweep's own)
    with no word but "the runs repeat each other"."""
    key = setting.lstrip("+").partition("=")[0]
    g = (SweepGrid(name="t", axes=[[{"name": "v", "overrides": [setting]}]]) if where == "variant" else
         SweepGrid(name="t", axes=[[{"name": "a"}]], overrides=[setting] if where == "grid" else []))
    with pytest.raises(TRMError, match=f"sweep t, .*: the sweep sets {key} for each run .*; leave it out"):
        S.plan_sweep(g, tmp_path / "sw", overrides=[setting] if where == "command line" else [])
    assert not (tmp_path / "sw").exists()


def test_a_config_files_settings_the_sweep_gives_each_run_are_said_and_dropped(tmp_path, caplog):
    """`--config` holding seed 7 and run_name foo: the seed was replaced by the grid's without a word, and every
    run was named foo though the sweep names each run <variant>_s<seed>. An upstream all_config.yaml holds all
    three: they are said once and not used (the command line's and a grid's are refused, above)."""
    (tmp_path / "cfg.yaml").write_text("seed: 7\nrun_name: foo\ncheckpoint_path: elsewhere\nlr: 0.002\n")
    with caplog.at_level("WARNING"):
        (run,) = S.plan_sweep(grid("a"), tmp_path / "sw", config_file=str(tmp_path / "cfg.yaml"))
    said = [r.getMessage() for r in caplog.records if "cfg.yaml" in r.getMessage()]
    assert said == [f"sweep t: {tmp_path / 'cfg.yaml'} sets seed, checkpoint_path, run_name, which the sweep sets "
                    "for each run (its seeds are the grid's `seeds` list, or --seeds; each run's folder is "
                    "<sweep-dir>/<variant>_s<seed>; each run is named <variant>_s<seed>): the file's are not used"], said
    assert (run.config.seed, run.config.run_name, run.config.lr) == (0, None, 0.002)
    assert run.config.checkpoint_path == str(tmp_path / "sw" / "a_s0")


def test_a_path_with_odd_characters_reaches_train_unchanged(tmp_path):
    from trm_kaggle.train.settings import dump_config, load_train_config

    odd = tmp_path / "my sweep, [v2] {x}=y it's \\"
    (run,) = S.plan_sweep(grid("a"), odd)
    assert run.config.checkpoint_path == str(odd / "a_s0")
    (tmp_path / "c.yaml").write_text(dump_config(run.config))  # what the run's process reads
    assert load_train_config(tmp_path / "c.yaml") == run.config


@pytest.mark.parametrize("text, message", [
    ("name: ../up\naxes: [[baseline]]\n", "bad grid: name: String should match pattern"),
    ("axes: [[{name: ../x}]]\n", "bad grid: axes.0.0.name: String should match pattern"),
    ("axes: [[]]\n", "bad grid: axes: axis 0 is empty"),
    ("axes: [[a, a]]\n", "bad grid: axes: axis 0 repeats a variant name"),
    ("seeds: [1, 1]\n", "bad grid: seeds: repeated seed"),
    ("axes: [[baseline]]\nlearning_rate: 3\n", "bad grid: learning_rate: Extra inputs are not permitted"),
    ("axes: [[baseline]\n", "not valid YAML"),
    ("- a\n- b\n", "expected a mapping of settings at the top level, got list"),
    ("axes: [[a, b, c, d, e, f, g, h, i, j]]\nseeds: " + str(list(range(1001))) + "\n", "bad grid: seeds: List should"),
    ("axes: [" + ", ".join(["[a, b, c, d, e, f, g, h, i, j]"] * 5) + "]\n",
     "bad grid: 100,000 runs; a grid holds at most 10,000"),
])
def test_a_bad_grid_file_is_one_clear_line(tmp_path, capsys, text, message):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: ") and message in err[0], err
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_two_variants_whose_joined_names_collide_are_refused_before_any_run(tmp_path, capsys, dry):
    """`a` + `b_c` and `a_b` + `c` both join to a_b_c: two runs of other settings in one folder (the second refused
    as "started with other settings" though nothing had started, or a SLURM array writing one folder twice)."""
    path = tmp_path / "g.yaml"
    path.write_text("axes:\n  - [{name: a, overrides: [lr=0.1]}, {name: a_b, overrides: [lr=0.2]}]\n"
                    "  - [{name: b_c, overrides: [weight_decay=0.1]}, {name: c, overrides: [weight_decay=0.2]}]\n")
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw"), *dry]) == 2
    line = one_error_line(capsys)
    assert "the variants a + b_c and a_b + c both name their runs a_b_c_s<seed>" in line, line
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_two_axes_setting_one_key_are_refused_before_any_run(tmp_path, capsys, dry):
    """Two axes that both set lr: the run named lr=1e-3_lr=2e-3 trained with the second value alone, unsaid."""
    path = tmp_path / "g.yaml"
    path.write_text('axes: [["lr=1e-3", "lr=3e-3"], ["lr=2e-3"]]\n')
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw"), *dry]) == 2
    line = one_error_line(capsys)
    assert "the variants lr=1e-3 and lr=2e-3 (two axes) both set lr" in line, line
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("grid, said", [
    ("overrides: [max_steps=2, lr=1e-3, max_steps=3]\n", "the grid's overrides: max_steps is set twice ('max_steps=2', "
     "then 'max_steps=3')"),
    ("axes: [[{name: v, overrides: [lr=1e-3, arch.loss.loss_type=softmax_cross_entropy, arch.loss_type=x]}]]\n",
     "variant v: arch.loss_type is set twice"),
])
def test_a_key_set_twice_in_a_grid_file_is_refused(tmp_path, capsys, grid, said):
    """A grid file's overrides holding max_steps twice trained with the later alone, unsaid (the command line warns
    for the same; a file is refused, as two axes setting one key are)."""
    path = tmp_path / "g.yaml"
    path.write_text(grid)
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw"), "--dry-run"]) == 2
    line = one_error_line(capsys)
    assert f"sweep g, {said}" in line and line.endswith(": set it once"), line
    assert not (tmp_path / "sw").exists()


def test_bad_runs_and_commands_are_refused_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    path.write_text("axes: [[baseline, nope]]\n")
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw")]) == 2
    assert capsys.readouterr().err.startswith("error: sweep g, variant nope: unknown preset 'nope'")
    assert main(["sweep", "tn", "arch.L_cyclez=3", "--sweep-dir", str(tmp_path / "sw")]) == 2
    assert capsys.readouterr().err.startswith("error: sweep tn: the base settings: override 'arch.L_cyclez=3'")
    assert main(["sweep", "no-such-grid"]) == 2
    assert "neither a built-in grid (tn, ablations, batch) nor a grid file" in capsys.readouterr().err
    assert main(["sweep", "tn", "--seeds", "1,1", "--sweep-dir", str(tmp_path / "sw")]) == 2
    assert "--seeds: seeds: repeated seed" in capsys.readouterr().err
    for seeds in ("0,,1", "0,1,", "\uff11", "1_0", "-1"):  # an item left out, no ASCII number, or under 0
        assert main(["sweep", "tn", "--seeds", seeds, "--sweep-dir", str(tmp_path / "sw")]) == 2
        assert "expected comma-separated whole numbers from 0 (seeds are never negative)" in capsys.readouterr().err
    assert main(["sweep", "tn", "--parallel", "0", "--sweep-dir", str(tmp_path / "sw")]) == 2
    assert not (tmp_path / "sw").exists()
    for extra in ([], ["--dry-run"]):  # a billion slots were once a list of a billion, until memory ran out
        assert main(["sweep", "tn", "--parallel", "1000000000", *extra, "--sweep-dir", str(tmp_path / "sw")]) == 2
        assert "--parallel 1000000000: must be from 1 to 1024" in capsys.readouterr().err
    assert not (tmp_path / "sw").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("not a sweep")
    assert main(["sweep", "tn", "--sweep-dir", str(tmp_path / "busy")]) == 2
    assert "is not empty and holds no sweep.json" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["mine.txt"]


def test_missing_or_unreadable_data_stops_the_sweep_before_any_run(tmp_path, capsys):
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku

    sd = tmp_path / "sw"
    assert main(["sweep", "ablations", "--preset", "cpu-smoke", "--sweep-dir", str(sd)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("error: sweep ablations, run baseline_s0: no data: set data_paths=[DIR] on the sweep's command "
                       "line (a dataset built with trm-kaggle build-*)")
    (tmp_path / "empty").mkdir()
    assert main(["sweep", "ablations", "--preset", "cpu-smoke", f"data_paths=[{tmp_path / 'empty'}]",
                 "--sweep-dir", str(sd)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: sweep ablations, run baseline_s0: data_paths: ") and "dataset.json" in err[-1]
    assert not sd.exists()  # nothing started, nothing written
    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=8, num_test=2, progress=False))
    g = SweepGrid(name="d", axes=[["baseline", f"data_paths=[{data}, {tmp_path / 'empty'}]"]])
    with pytest.raises(TRMError, match="run data_paths=.*: data_paths: "):  # a variant's own data is checked too
        S.run_sweep(g, sd, overrides=[f"data_paths=[{data}]"], progress=False)
    assert not sd.exists()


def test_list_grids_and_dry_run(tmp_path, capsys):
    assert main(["sweep", "--list-grids"]) == 0
    assert "ablations" in capsys.readouterr().out
    assert main(["sweep", "batch", "--preset", "cpu-smoke", "--seeds", "0,1", "--dry-run",
                 "--sweep-dir", str(tmp_path / "sw")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "base: --preset cpu-smoke" and len(lines) == 7
    assert lines[1].split() == ["batch512_s0", "new", "--preset", "batch512"]
    assert not (tmp_path / "sw").exists()


def test_a_dry_run_lists_each_run_as_the_sweep_would_take_it(tmp_path, fake_train, capsys):
    """--dry-run listed a finished run `done` where the sweep refuses it (another fixed setting) or reopens it (a
    raised max_steps): it reads the records as the run does."""
    sd = tmp_path / "sw"
    S.run_sweep(grid("ok"), sd, overrides=["max_steps=5"], progress=False, poll_seconds=0.02)
    capsys.readouterr()
    for dry in (True, False):
        with pytest.raises(TRMError, match="run ok_s0 was started with other settings \\(lr_warmup_steps\\)"):
            S.run_sweep(grid("ok"), sd, overrides=["max_steps=5", "lr_warmup_steps=2"], progress=False, dry_run=dry)
    before = (sd / "sweep.json").read_bytes()
    for steps, state in ((5, "done"), (6, "pending")):
        S.run_sweep(grid("ok"), sd, overrides=[f"max_steps={steps}"], progress=False, dry_run=True)
        assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["ok_s0", state]
    assert (sd / "sweep.json").read_bytes() == before  # a dry run writes nothing


def test_a_dry_runs_summary_counts_the_runs_done_and_it_refuses_what_the_run_refuses(tmp_path, fake_train, capsys):
    """A dry run over one run done said "0 of 2 runs done (1 before this command)": 1 of 2. In a non-empty folder
    without sweep.json it listed every run as new, where the real run is refused: refused alike."""
    sd = tmp_path / "sw"
    S.run_sweep(grid("ok"), sd, overrides=["max_steps=5"], progress=False, poll_seconds=0.02)
    summary = S.run_sweep(grid("ok", "ok2"), sd, overrides=["max_steps=5"], progress=False, dry_run=True)
    assert (summary.total, summary.done, summary.skipped) == (2, 1, 1)
    assert "1 of 2 runs done (1 before this command)" in summary.describe()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for dry in (True, False):
        with pytest.raises(TRMError, match="exists, is not empty and holds no sweep.json"):
            S.run_sweep(grid("ok"), other, progress=False, dry_run=dry)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


# ---------------------------------------------------------------------------
# The runner (stand-in children)
# ---------------------------------------------------------------------------


def test_a_failure_is_recorded_and_the_sweep_goes_on_then_a_rerun_skips_done_runs(tmp_path, fake_train, capsys):
    sd = tmp_path / "sw"
    summary = S.run_sweep(grid("ok", "fail", "crash", "ok2"), sd, progress=False, poll_seconds=0.02)
    assert (summary.total, summary.done, summary.failed, summary.skipped) == (4, 2, 2, 0)
    recs = records(sd)
    assert {n: r["state"] for n, r in recs.items()} == {"ok_s0": "done", "fail_s0": "failed", "crash_s0": "failed",
                                                        "ok2_s0": "done"}
    assert recs["fail_s0"]["error"] == "exit status 3: error: boom in fail_s0"
    assert recs["crash_s0"]["error"] == "exit status 1: RuntimeError: a bug in crash_s0"
    assert recs["ok_s0"]["returncode"] == 0 and recs["ok_s0"]["error"] is None and "pid" not in recs["ok_s0"]
    assert all(r["attempts"] == 1 and r["seconds"] > 0 and r["started"] and r["finished"] for r in recs.values())
    assert recs["ok_s0"]["settings"]["seed"] == 0 and "progress=False" in recs["ok_s0"]["command"]
    assert "FAILED  fail_s0: exit status 3: error: boom in fail_s0" in capsys.readouterr().err
    log = (sd / "fail_s0" / "train.log").read_text()
    assert log.startswith("--- sweep attempt 1 ") and "some output" in log

    again = S.run_sweep(grid("ok", "fail", "crash", "ok2"), sd, progress=False, poll_seconds=0.02)
    assert (again.done, again.failed, again.skipped) == (2, 2, 2)
    recs = records(sd)
    assert [recs[n]["attempts"] for n in ("ok_s0", "fail_s0", "crash_s0", "ok2_s0")] == [1, 2, 2, 1]
    assert len(notes(sd, "ok_s0")) == 2  # started and finished once
    assert (sd / "fail_s0" / "train.log").read_text().count("--- sweep attempt") == 2


def test_a_done_run_whose_folder_was_deleted_is_trained_again(tmp_path, fake_train, caplog):
    """A rerun said "2 of 2 runs done" over a deleted run folder, left it holding only a lock file, and compare
    listed the run as done without data."""
    import shutil

    sd = tmp_path / "sw"
    S.run_sweep(grid("ok", "ok2"), sd, progress=False, poll_seconds=0.02)
    shutil.rmtree(sd / "ok_s0")
    again = S.run_sweep(grid("ok", "ok2"), sd, progress=False, poll_seconds=0.02)
    assert (again.done, again.skipped) == (2, 1)
    assert records(sd)["ok_s0"]["attempts"] == 2 and len(notes(sd, "ok_s0")) == 2  # trained again, from scratch
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("run ok_s0 is recorded done but" in m and "holds no train state" in m for m in said), said


def test_a_run_that_cannot_start_is_a_failed_run(tmp_path, fake_train, monkeypatch):
    fake = S.PlannedRun.command
    monkeypatch.setattr(S.PlannedRun, "command", lambda self, run_dir, extra=(): (
        [str(tmp_path / "no-such-python")] if self.name.startswith("missing") else fake(self, run_dir, extra)))
    summary = S.run_sweep(grid("missing", "ok"), tmp_path / "sw", progress=False, poll_seconds=0.02)
    assert (summary.done, summary.failed) == (1, 1)
    rec = records(tmp_path / "sw")["missing_s0"]
    assert rec["state"] == "failed" and rec["error"].startswith(f"cannot start {tmp_path / 'no-such-python'}: ")


def test_the_cli_exit_status_counts_failed_runs(tmp_path, fake_train, capsys):
    path = tmp_path / "g.yaml"
    path.write_text("axes: [[{name: ok}, {name: fail}]]\n")
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw"), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 runs done" in out and "1 failed" in out and f"trm-kaggle compare {tmp_path / 'sw'}" in out


def test_parallel_runs_share_the_cpu_cores(tmp_path, fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "1.0")
    monkeypatch.setattr(S, "usable_cores", lambda: 8)
    sd = tmp_path / "sw"
    S.run_sweep(grid("slow-a", "slow-b", "slow-c"), sd, parallel=2, progress=False, poll_seconds=0.02)
    spans = []
    for run in ("slow-a_s0", "slow-b_s0", "slow-c_s0"):
        first, last = notes(sd, run)
        spans.append((first["start"], last["end"]))
        assert first["omp"] == "4" and "threads=4" in first["argv"] and first["cuda"] is None
    overlaps = [sum(a <= s < b for a, b in spans) for s, _ in spans]
    assert max(overlaps) == 2  # two at a time, never three


def test_one_gpu_per_parallel_run(tmp_path, fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "1.0")
    monkeypatch.setattr(S, "_uses_cuda", lambda cfg: True)
    monkeypatch.setattr(S, "_visible_gpus", lambda: ["3", "5"])
    sd = tmp_path / "sw"
    with pytest.raises(TRMError, match="--parallel 3: 2 GPU"):
        S.run_sweep(grid("slow-a", "slow-b"), sd, parallel=3, progress=False)
    S.run_sweep(grid("slow-a", "slow-b"), sd, parallel=2, progress=False, poll_seconds=0.02)
    a, b = notes(sd, "slow-a_s0")[0], notes(sd, "slow-b_s0")[0]
    assert {a["cuda"], b["cuda"]} == {"3", "5"}  # they ran at the same time, each on its own GPU
    assert not any(x.startswith("threads=") for x in a["argv"])
    assert records(sd)["slow-a_s0"]["gpu"] == a["cuda"]


def signal_once_running(run_dir: Path, *signums: int) -> None:
    """From a thread: once the training of `run_dir` has started, send this process each of `signums`, 50 ms
    apart."""
    def send():
        deadline = time.time() + 60
        while not (run_dir / "fake.jsonl").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        for i, signum in enumerate(signums):
            time.sleep(0.05 if i else 0)
            os.kill(os.getpid(), signum)

    threading.Thread(target=send, daemon=True).start()


def test_sigterm_stops_the_children_and_leaves_a_consistent_record(tmp_path, fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "60")
    sd = tmp_path / "sw"

    before = signal.getsignal(signal.SIGTERM)
    signal_once_running(sd / "slow-a_s0", signal.SIGTERM)  # run_sweep's handler is installed before any child starts
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        S.run_sweep(grid("ok", "slow-a", "slow-b"), sd, parallel=2, progress=False, poll_seconds=0.02)
    assert time.time() - t0 < 40
    recs = records(sd)
    assert recs["ok_s0"]["state"] == "done"
    for name in ("slow-a_s0", "slow-b_s0"):
        assert recs[name]["state"] == "pending" and recs[name]["error"] == "interrupted" and "pid" not in recs[name]
    pid = notes(sd, "slow-a_s0")[0]["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the child was stopped (and reaped)
    assert signal.getsignal(signal.SIGTERM) == before  # the sweep's handler is gone

    monkeypatch.setenv("FAKE_SLEEP", "0.1")
    summary = S.run_sweep(grid("ok", "slow-a", "slow-b"), sd, parallel=2, progress=False, poll_seconds=0.02)
    assert (summary.done, summary.skipped) == (3, 1)
    assert records(sd)["slow-a_s0"]["attempts"] == 2 and records(sd)["slow-a_s0"]["error"] is None


@pytest.mark.parametrize("first, second", [(signal.SIGINT, signal.SIGINT), (signal.SIGINT, signal.SIGTERM),
                                           (signal.SIGTERM, signal.SIGINT)])
def test_a_second_signal_cannot_leave_a_record_running(tmp_path, fake_train, monkeypatch, first, second):
    """Two signals 50 ms apart: the second comes while the sweep waits for its training to save and stop, and must
    not cut the rewrite of that run's record (once left "running" with no process behind it)."""
    monkeypatch.setenv("FAKE_SLEEP", "60")
    sd = tmp_path / "sw"
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal_once_running(sd / "slow-saving_s0", first, second)
    with pytest.raises(KeyboardInterrupt) as stopped:
        S.run_sweep(grid("slow-saving"), sd, progress=False, poll_seconds=0.02)
    assert getattr(stopped.value, "exit_status", 130) == 128 + first  # the first signal says how the sweep ended
    rec = records(sd)["slow-saving_s0"]
    assert rec["state"] == "pending" and rec["error"] == "interrupted" and "pid" not in rec
    assert "saved" in notes(sd, "slow-saving_s0")[-1]  # the training had its time to save
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@contextlib.contextmanager
def no_wait(seconds: int = 20):
    """The block fails, instead of hanging, when it waits on a FIFO (an open for writing waits for a reader)."""
    def hung(*_):
        raise AssertionError("waited on a FIFO in place of a run's log")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind, says", [("link", "not a symbolic link"), ("hard link", "the log has 2 names"),
                                        ("fifo", "not a pipe (FIFO)")])
def test_a_runs_log_is_never_followed_nor_waited_on(tmp_path, fake_train, kind, says):
    """A run's train.log is appended to: a link there would carry the log to a file outside the sweep, a FIFO would
    hang the sweep. Refused in one line before any run starts, and at a run's start (planted since): that run fails."""
    sd = tmp_path / "sw"
    S.run_sweep(grid("fail"), sd, progress=False, poll_seconds=0.02)  # failed: the next sweep starts it again
    log, outside = sd / "fail_s0" / "train.log", tmp_path / "outside.txt"
    outside.write_text("precious\n")
    log.unlink()
    {"link": lambda: log.symlink_to(outside), "hard link": lambda: os.link(outside, log),
     "fifo": lambda: os.mkfifo(log)}[kind]()
    before = (sd / "sweep.json").read_text()
    with no_wait():
        with pytest.raises(TRMError, match=re.escape(says)):
            S.run_sweep(grid("fail"), sd, progress=False, poll_seconds=0.02)
        assert (sd / "sweep.json").read_text() == before
        rec = {"attempts": 0}
        assert S._launch(S.plan_sweep(grid("fail"), sd)[0], rec, 0, sd, [], 1, None) is None
    assert rec["state"] == "failed" and rec["attempts"] == 0
    assert rec["error"].startswith(f"cannot open its log: {log}: ") and says in rec["error"]
    assert outside.read_text() == "precious\n"


def test_a_sweep_whose_first_record_failed_is_continued_by_the_same_command(tmp_path, fake_train, monkeypatch):
    """A first sweep.json that could not be written (a full disk, `ulimit -f`) leaves the folder holding only the
    sweep's locks: the same command continues there, while a folder holding anything else is still refused."""
    sd = tmp_path / "sw"

    def too_large(path, obj, indent=None, **kw):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(path))

    with monkeypatch.context() as m:
        m.setattr(S, "atomic_write_json", too_large)
        with pytest.raises(OSError, match="File too large"):
            S.run_sweep(grid("ok", "ok2"), sd, progress=False, poll_seconds=0.02)
    assert sorted(p.relative_to(sd).as_posix() for p in sd.rglob("*")) == [
        LOCK_FILE, "ok2_s0", f"ok2_s0/{LOCK_FILE}", "ok_s0", f"ok_s0/{LOCK_FILE}"]
    summary = S.run_sweep(grid("ok", "ok2"), sd, progress=False, poll_seconds=0.02)
    assert (summary.done, summary.failed) == (2, 0) and records(sd)["ok_s0"]["attempts"] == 1

    other = tmp_path / "other"
    (other / "x_s0").mkdir(parents=True)
    (other / "x_s0" / LOCK_FILE).touch()
    (other / "x_s0" / "notes.txt").write_text("mine")
    with pytest.raises(TRMError, match="is not empty and holds no sweep.json"):
        S.run_sweep(grid("ok"), other, progress=False)
    assert sorted(p.name for p in other.iterdir()) == ["x_s0"]


def test_changed_settings(tmp_path, fake_train):
    sd = tmp_path / "sw"
    S.run_sweep(grid("ok", overrides=["max_steps=5"]), sd, progress=False, poll_seconds=0.02)
    # a setting a resumed run may change (here: train longer) re-opens the done run
    summary = S.run_sweep(grid("ok", overrides=["max_steps=10"]), sd, progress=False, poll_seconds=0.02)
    assert summary.skipped == 0 and records(sd)["ok_s0"]["attempts"] == 2
    assert records(sd)["ok_s0"]["settings"]["max_steps"] == 10
    # a change that leaves a finished run nothing to train (a lower limit, another log interval) keeps it done,
    # its record the settings it ran with: it started a training that trained nothing, "0 before this command"
    for lower in (["max_steps=4"], ["max_steps=10", "log_interval=3"]):
        summary = S.run_sweep(grid("ok", overrides=lower), sd, progress=False, poll_seconds=0.02)
        assert summary.skipped == 1 and records(sd)["ok_s0"]["attempts"] == 2
        assert records(sd)["ok_s0"]["settings"]["max_steps"] == 10 and records(sd)["ok_s0"]["state"] == "done"
    with pytest.raises(TRMError, match="run ok_s0 was started with other settings \\(arch\\)"):
        S.run_sweep(grid("ok", overrides=["max_steps=10", "arch.L_cycles=3"]), sd, progress=False)


def test_a_done_run_that_trained_further_than_asked_is_said(tmp_path, fake_train, caplog):
    """A lower max_steps keeps a done run done: the summary's "1 of 1 runs done" is not all, one line says the run
    went further than asked."""
    sd = tmp_path / "sw"
    S.run_sweep(grid("ok", overrides=["max_steps=5"]), sd, progress=False, poll_seconds=0.02)
    caplog.clear()
    S.run_sweep(grid("ok", overrides=["max_steps=5", "log_interval=3"]), sd, progress=False, poll_seconds=0.02)
    assert "further than asked" not in caplog.text  # nothing to say: the same limit
    S.run_sweep(grid("ok", overrides=["max_steps=2"]), sd, progress=False, poll_seconds=0.02)
    assert "sweep t: run ok_s0 trained further than asked (a lower max_steps or time_limit)" in caplog.text


@pytest.mark.parametrize("parallel, said", [(1.5, "1.5"), ("2", "'2'"), (True, "True"), (None, "None")])
def test_parallel_that_is_no_whole_number_is_refused_before_anything_is_written(tmp_path, fake_train, parallel, said):
    """1.5 failed with a TypeError after the sweep folder and its records were made; "2" was a comparison's
    TypeError; True ran as 1."""
    for dry in (False, True):
        with pytest.raises(TRMError, match=f"^--parallel {re.escape(said)}: must be from 1 to 1024"):
            S.run_sweep(grid("ok"), tmp_path / "sw", parallel=parallel, progress=False, dry_run=dry)
    assert not (tmp_path / "sw").exists()


def test_one_sweep_process_per_directory(tmp_path, fake_train):
    import fcntl

    sd = tmp_path / "sw"
    S.run_sweep(grid("ok"), sd, progress=False, poll_seconds=0.02)
    with open(sd / LOCK_FILE, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        with pytest.raises(TRMError, match="another sweep is running in this directory"):
            S.run_sweep(grid("ok"), sd, progress=False)


def test_a_child_left_running_by_a_killed_sweep_is_not_started_twice(tmp_path, fake_train):
    sd = tmp_path / "sw"
    S.run_sweep(grid("ok"), sd, progress=False, poll_seconds=0.02)
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "trm_kaggle", "ok_s0"])
    try:
        doc = json.loads((sd / "sweep.json").read_text())
        doc["runs"][0].update(state="running", pid=orphan.pid)
        (sd / "sweep.json").write_text(json.dumps(doc))
        with pytest.raises(TRMError, match=f"run ok_s0 is still being trained by process {orphan.pid}"):
            S.run_sweep(grid("ok"), sd, progress=False)
    finally:
        orphan.kill()
        orphan.wait()
    summary = S.run_sweep(grid("ok"), sd, progress=False, poll_seconds=0.02)  # gone: the run starts again
    assert summary.done == 1 and records(sd)["ok_s0"]["attempts"] == 2


# ---------------------------------------------------------------------------
# Real training processes
# ---------------------------------------------------------------------------


def test_a_sweep_of_real_training_runs(tmp_path, monkeypatch):
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku
    from trm_kaggle.experiments.compare import comparison_tables, load_runs

    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=16, num_test=4, progress=False))
    monkeypatch.setattr(S, "usable_cores", lambda: 2)
    g = SweepGrid(name="real", presets=["cpu-smoke"], axes=[["baseline", "lr=0.01"]],
                  overrides=["arch.hidden_size=16", "arch.num_heads=2", "arch.L_layers=1", "global_batch_size=4",
                             "max_steps=2", "log_interval=1"])
    sd = tmp_path / "a sweep, it's [1]"  # reaches train through run_config.yaml, unparsed
    summary = S.run_sweep(g, sd, overrides=[f"data_paths=[{data}]"], parallel=2, progress=False, poll_seconds=0.1)
    assert (summary.done, summary.failed) == (2, 0), summary.describe()
    for run in ("baseline_s0", "lr=0.01_s0"):
        assert "trained 2 steps" in (sd / run / "train.log").read_text()
        config = json.loads((sd / run / "config.json").read_text())
        assert config["threads"] == 1 and config["checkpoint_path"] == str(sd / run)  # 2 cores, 2 runs at a time
    assert json.loads((sd / "lr=0.01_s0" / "config.json").read_text())["lr"] == 0.01
    again = S.run_sweep(g, sd, overrides=[f"data_paths=[{data}]"], parallel=2, progress=False)
    assert (again.done, again.skipped) == (2, 2)
    md, _ = comparison_tables(load_runs([sd]))
    assert "| baseline | 1 | 1 done | 2 |" in md and "| lr=0.01 | 1 | 1 done | 2 |" in md


@pytest.mark.parametrize("seeds", [[True], [0, False]])
def test_a_boolean_seed_in_a_grid_is_refused(seeds):
    """`seeds: [true]` in a grid file was seed 1 (pydantic reads true as 1), though train refuses seed=true."""
    with pytest.raises(ValueError, match="seeds\n.*item .*: a boolean, not a number"):
        SweepGrid(name="t", seeds=seeds)
    assert SweepGrid(name="t", seeds=[0, 1]).seeds == [0, 1]


@pytest.mark.parametrize("field, value, said", [
    ("state", "weird", "state 'weird' is none of pending, running, done, failed"),
    ("seconds", float("nan"), "seconds nan is no finite number of seconds"),
    ("attempts", -5, "attempts -5 is no non-negative whole number"),
    ("attempts", True, "attempts True is no non-negative whole number"),
    ("returncode", "0", "returncode '0' is no whole number"),
    ("seed", "0", "seed '0' is no non-negative whole number"),  # a sweep writes the grid's seeds, whole numbers
    ("seed", 2**32, "seed 4294967296 is past the largest a grid holds (4294967295)"),
    ("seed", 7, "variant 'a' and seed 7 do not make its name (<variant>_s<seed>)"),  # compare showed seed 7
    ("variant", "lr=1e-3", "variant 'lr=1e-3' and seed 0 do not make its name (<variant>_s<seed>)"),  # compare grouped it so
    ("variant", "/etc/passwd", "variant '/etc/passwd' and seed 0 do not make its name (<variant>_s<seed>)"),
])
def test_a_run_record_no_sweep_writes_is_refused_not_kept(tmp_path, field, value, said):
    """A hand-edited record (state "weird", seconds NaN, attempts -5) was taken without a word and the NaN written
    back, which a strict JSON reader then refused."""
    rec = {"name": "a_s0", "variant": "a", "seed": 0, "state": "done", "attempts": 1, "seconds": 2.5, "returncode": 0,
           field: value}
    (tmp_path / "sweep.json").write_text(json.dumps({"format": S.SWEEP_FORMAT, "runs": [rec]}))
    before = (tmp_path / "sweep.json").read_bytes()
    with pytest.raises(TRMError, match=f"sweep.json: run a_s0: {re.escape(said)}; fix the record"):
        S.read_sweep(tmp_path)
    assert (tmp_path / "sweep.json").read_bytes() == before
    rec[field] = {"state": "pending", "seconds": 0, "attempts": 0, "returncode": None, "seed": 0, "variant": "a"}[field]
    (tmp_path / "sweep.json").write_text(json.dumps({"format": S.SWEEP_FORMAT, "runs": [rec]}))
    assert S.read_sweep(tmp_path)["runs"][0][field] == rec[field]


def test_a_run_recorded_twice_is_refused_not_kept(tmp_path):
    """Two records of one run (a hand edit): a rerun trained the run again, added a third record and counted "2 of
    2 runs done" over a file that held three."""
    rec = {"name": "a_s0", "state": "done", "attempts": 1, "seconds": 2.5, "returncode": 0}
    (tmp_path / "sweep.json").write_text(json.dumps({"format": S.SWEEP_FORMAT, "runs": [rec, {**rec, "seconds": 1}]}))
    before = (tmp_path / "sweep.json").read_bytes()
    with pytest.raises(TRMError, match="sweep.json: run a_s0 is recorded twice; fix the record"):
        S.read_sweep(tmp_path)
    assert (tmp_path / "sweep.json").read_bytes() == before


def test_a_damaged_record_is_refused_with_the_way_out_of_the_command_that_reads_it(tmp_path, capsys):
    """compare's refusal of a damaged sweep.json ended "or choose another --sweep-dir", an option compare has not;
    the sweep command, which has it, still names it."""
    sweep_dir = tmp_path / "s5"
    sweep_dir.mkdir()
    rec = {"name": "baseline_s0", "variant": "baseline", "seed": 0, "state": "bogus"}
    (sweep_dir / "sweep.json").write_text(json.dumps({"format": S.SWEEP_FORMAT, "runs": [rec]}))
    line = one_error_line(capsys, main(["compare", str(sweep_dir), "--out", str(tmp_path / "o")]))
    assert line.endswith("is none of pending, running, done, failed; fix the record"), line
    assert not (tmp_path / "o").exists()
    (tmp_path / "g.yaml").write_text("axes: [[baseline]]\nseeds: [0]\n")
    line = one_error_line(capsys, main(["sweep", str(tmp_path / "g.yaml"), "--dry-run", "--sweep-dir", str(sweep_dir)]))
    assert line.endswith("; fix the record or choose another --sweep-dir"), line


def test_a_done_line_says_when_its_seconds_add_up_several_attempts(tmp_path):
    """A rerun printed `done a_s0 (6 s)` beside `in 5 s` for the whole command: the 6 s were two attempts'."""
    import io

    def finished(attempts: int) -> str:
        rec = {"name": "a_s0", "seconds": 4.0, "attempts": attempts}
        return S._finish(S._Job(rec, None, 0, time.perf_counter() - 2.0, io.StringIO()), 0, tmp_path)

    assert finished(1) == "done    a_s0 (6 s)"
    assert finished(2) == "done    a_s0 (6 s over 2 attempts)"


@pytest.mark.parametrize("poll", [-1, 0, float("nan"), float("inf"), 1e6, None])
def test_a_poll_interval_that_is_no_sane_wait_is_refused_before_any_run(tmp_path, fake_train, poll):
    """`run_sweep(poll_seconds=-1)` raised in time.sleep once a training had started; 1e6 waited on a finished
    run for days."""
    with pytest.raises(ValueError, match="poll_seconds="):
        S.run_sweep(grid("ok"), tmp_path / "sw", overrides=["max_steps=5"], progress=False, poll_seconds=poll)
    assert not (tmp_path / "sw").exists()


def test_the_sweep_library_checks_its_folder_as_the_command_does(tmp_path, fake_train):
    """`run_sweep(grid, "/dev/x")` made a sweep in /dev; a file on the path was a raw OSError."""
    (tmp_path / "f").write_text("a file")
    for folder, words in ((tmp_path / "f" / "sw", "is a file, not a folder"), ("/dev/trm-sweep-probe", "is in /dev")):
        with pytest.raises(TRMError, match=words):
            S.run_sweep(grid("ok"), folder, overrides=["max_steps=5"], progress=False)
    assert not os.path.lexists("/dev/trm-sweep-probe")


def test_the_sweep_library_refuses_a_config_file_inside_its_folder_as_the_command_does(tmp_path, fake_train):
    """`run_sweep(..., config_file=SWEEP/RUN/run_config.yaml)` rewrote its own input (the command refused it)."""
    sd = tmp_path / "sw"
    S.run_sweep(grid("ok"), sd, overrides=["max_steps=5"], progress=False, poll_seconds=0.02)
    config = sd / "ok_s0" / S.RUN_CONFIG
    before = config.read_bytes()
    with pytest.raises(TRMError, match=r"^sweep folder .*sw holds the input config_file .*run_config.yaml: writing"):
        S.run_sweep(grid("ok"), sd, config_file=str(config), overrides=["max_steps=10"], progress=False)
    assert config.read_bytes() == before and records(sd)["ok_s0"]["attempts"] == 1


def _submit_work_folders(root: Path) -> list[Path]:
    """Two submits' work folders under `root`: one that finished (solve_report.json), one under way (units/ and
    workers/)."""
    done, going = root / "done-ttt", root / "going-ttt"
    done.mkdir()
    (done / "solve_report.json").write_text("{}")
    (going / "units").mkdir(parents=True)
    (going / "workers").mkdir()
    return [done, going]


def test_a_sweep_folder_in_a_submits_work_folder_is_refused_before_anything_is_written(tmp_path, fake_train, capsys):
    """`sweep --sweep-dir W/sw` (W a submit's work folder) wrote sweep.json and each run's folder among the solve's
    files, then every run's train refused its folder there and the sweep recorded them all failed (exit 1); `train
    checkpoint_path=W/x` is refused up front. Refused by `run_sweep` itself, for every caller, in the command's
    words (naming --sweep-dir from the command line), dry run included; nothing written."""
    def listing() -> list[str]:
        return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    for work in _submit_work_folders(tmp_path):
        before = listing()
        for sd, where in ((work / "sw", f"lies inside {work}, which is"), (work, "is")):
            said = f"{sd} {where} a submit's work folder (it holds units/ or solve_report.json)"
            for dry in (False, True):
                with pytest.raises(TRMError) as e:
                    S.run_sweep(grid("ok"), sd, overrides=["max_steps=5"], progress=False, dry_run=dry)
                assert str(e.value).startswith(f"sweep folder {said}") and "choose a folder of its own" in str(e.value)
            path = tmp_path / "g.yaml"
            path.write_text("axes: [[{name: ok}]]\n")
            line = one_error_line(capsys, main(["sweep", str(path), "--sweep-dir", str(sd), "--no-progress"]))
            assert f"--sweep-dir {said}" in line and "choose a folder of its own" in line, line
            path.unlink()
        assert listing() == before


def test_a_grid_files_settings_reach_the_terminal_escaped(tmp_path, capsys):
    """--dry-run printed a YAML grid's settings raw: an escape sequence and a bell from the file reached the
    terminal (the run name column was cleaned, the settings column not)."""
    path = tmp_path / "ctl.yaml"
    path.write_text('presets: [cpu-smoke]\naxes:\n  - ["project_name=\\x1b[31mRED\\x07", "lr=1e-3"]\n')
    assert main(["sweep", str(path), "--sweep-dir", str(tmp_path / "sw"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "project_name=\\x1b[31mRED\\x07" in out, out


def test_the_printed_compare_command_pastes_as_one_command():
    """`compare them: trm-kaggle compare sw/a b$(id)` ran `id` and split the path when pasted."""
    summary = S.SweepSummary(Path("sw/a b$(id)"), total=1, done=1, failed=0, skipped=0, seconds=1.0)
    line = summary.describe().splitlines()[-1]
    assert line.startswith("compare them: ")
    assert shlex.split(line.removeprefix("compare them: ")) == ["trm-kaggle", "compare", "sw/a b$(id)"]


def test_a_sweep_folder_starting_with_a_dash_reaches_train_as_a_path(tmp_path, monkeypatch):
    """`--sweep-dir ./-sw` gave each run `train --config -sw/...` (a Path drops the `./`): train's argparse read it as
    an option, "argument --config: expected one argument", and every run failed."""
    from trm_kaggle.cli import build_parser
    from test_wording import pasted

    monkeypatch.chdir(tmp_path)
    (run,) = S.plan_sweep(grid("a"), "./-sw")
    cmd = run.command(Path("./-sw") / run.name)
    assert cmd[2:4] == ["trm_kaggle", "train"]
    assert build_parser().parse_args(cmd[3:]).config == "./-sw/a_s0/run_config.yaml"
    for folder, said in ((Path("./-sw"), "./-sw"), (Path("sw\nnl"), "sw\nnl")):  # pasted: that folder, as one line
        line = S.SweepSummary(folder, total=1, done=1, failed=0, skipped=0, seconds=1.0).describe().splitlines()[-1]
        assert pasted(line.removeprefix("compare them: ")) == ["trm-kaggle", "compare", said]
