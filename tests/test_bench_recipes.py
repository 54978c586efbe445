"""benchmarks/bench_recipes.py: recipes, the FLOP count, and the harness end to end on a tiny 4x4 Sudoku."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from benchmarks.bench_recipes import (Curve, Recipe, accuracy_at, bench, make_task, parse_recipe, summarise,
                                      training_flops)
from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError


def test_recipes_parse_presets_names_and_overrides():
    assert parse_recipe("upstream") == Recipe("upstream")
    assert parse_recipe("upstream").is_upstream
    assert parse_recipe("no-ema+T2n2") == Recipe("no-ema+T2n2", ("no-ema", "T2n2"))
    assert parse_recipe("fastlr:lr=3e-3") == Recipe("fastlr", (), ("lr=3e-3",))
    assert parse_recipe("deep=T3n6:lr=3e-4,data_paths=[a,b]") == Recipe("deep", ("T3n6",),
                                                                         ("lr=3e-4", "data_paths=[a,b]"))
    assert parse_recipe("no-ema:lr=1e-3") == Recipe("no-ema:lr=1e-3", ("no-ema",), ("lr=1e-3",))
    for lever in ("rsm", "depth-curriculum", "cgar", "large-batch", "fast"):  # every lever's preset is a recipe
        assert parse_recipe(lever) == Recipe(lever, (lever,))
    assert parse_recipe("fast:curriculum.epochs=40") == Recipe("fast:curriculum.epochs=40", ("fast",),
                                                               ("curriculum.epochs=40",))
    with pytest.raises(TRMError, match="unknown preset"):
        parse_recipe("no-such-preset")
    with pytest.raises(TRMError, match="not key=value"):
        parse_recipe("x:lr")


def test_training_flops_matches_a_hand_count():
    # attention: S = 2 + 4 = 6, D = 8, SwiGLU width 256 (upstream rounds up to a multiple of 256)
    arch = ArchConfig(hidden_size=8, num_heads=2, expansion=2.0, H_cycles=2, L_cycles=3, L_layers=1,
                      puzzle_emb_len=2, mlp_t=False)
    S, D, inner = 6, 8, 256
    block = (2 * S * D * 3 * D + 2 * 2 * S * S * D + 2 * S * D * D) + (2 * S * D * 2 * inner + 2 * S * inner * D)
    calls = 2 * (3 + 1) + 2 * (3 + 1)  # forward: T x (n + 1) calls; backward: 2 x the last cycle's n + 1
    heads = 3 * (2 * 4 * D * 5 + 2 * D * 2)
    assert training_flops(arch, seq_len=4, vocab_size=5) == calls * block + heads == 1_248_288
    assert training_flops(arch, seq_len=4, vocab_size=5, examples=10) == 10 * 1_248_288
    # RSM's warm-up: each gradient-free supervision step adds the forward recursion and the halting head
    assert training_flops(arch, seq_len=4, vocab_size=5, warmup=2) == 1_248_288 + 2 * (2 * 4 * block + 2 * D * 2)
    # mlp_t: the mixer is a SwiGLU along the S = 6 positions (width 256) for each of the D channels
    mlp = arch.model_copy(update={"mlp_t": True, "pos_encodings": "none"})
    mixer = 2 * D * S * 2 * inner + 2 * D * inner * S
    assert training_flops(mlp, seq_len=4, vocab_size=5) == calls * (mixer + 2 * S * D * 2 * inner
                                                                    + 2 * S * inner * D) + heads


def _curve(recipe, seed, accs):
    pts = [dict(step=i + 1, examples=10 * (i + 1), flops=100.0 * (i + 1), seconds=float(i + 1), accuracy=a)
           for i, a in enumerate(accs)]
    return Curve(recipe, seed, 10, 10.0, pts)


def test_summary_costs_ratios_and_equal_budget():
    curves = [_curve("upstream", 0, [0.1, 0.3, 0.5, 0.7]), _curve("fast", 0, [0.3, 0.6]),
              _curve("upstream", 1, [0.0, 0.1, 0.4, 0.6]), _curve("fast", 1, [0.2, 0.5])]
    s = summarise(curves, [0.2, 0.5, 0.9], "upstream")
    up, fast = s["to_target"]["upstream"], s["to_target"]["fast"]
    assert up["0.2"]["examples"] == {"median": 25.0, "min": 20, "max": 30} and up["0.2"]["reached"] == 2
    assert fast["0.5"]["examples"] == {"median": 20.0, "min": 20, "max": 20}
    ratio = fast["0.5"]["examples_ratio"]  # paired by seed: 20/30 and 20/40
    assert (ratio["median"], ratio["min"], ratio["max"]) == pytest.approx((7 / 12, 0.5, 2 / 3))
    assert math.isinf(up["0.9"]["seconds"]["median"]) and up["0.9"]["reached"] == 0
    assert s["budgets"]["examples"] == 20  # the shortest run
    assert s["at_budget"]["fast"]["examples"]["accuracy"]["median"] == pytest.approx(0.55)
    assert s["at_budget"]["fast"]["examples"]["minus_upstream"]["median"] == pytest.approx(0.35)
    assert accuracy_at(curves[0], "seconds", 0.5) == 0.0


def test_harness_end_to_end_on_tiny_sudoku(tmp_path):
    task = dataclasses.replace(make_task("sudoku4", num_train=64, num_test=16), eval_interval=1)
    targets = [0.0, 0.5, 2.0]
    report = bench(task, ["upstream", "fastlr:lr=1e-2", "rsm"], seeds=2, budget_s=None, budget_examples=16 * 8,
                   targets=targets, work=tmp_path, say=lambda *a, **k: None,
                   extra=["global_batch_size=16", "arch.hidden_size=16", "arch.halt_max_steps=2",
                          "arch.H_cycles=1", "arch.L_cycles=1"])
    out = tmp_path / "report"
    for suffix in ("json", "md", "png"):
        assert (out / f"bench_recipes_sudoku4.{suffix}").stat().st_size > 0
    saved = json.loads((out / "bench_recipes_sudoku4.json").read_text())
    assert saved["configs"]["fastlr"]["lr"] == 1e-2 and saved["configs"]["upstream"]["lr"] == 3e-3
    assert saved["configs"]["rsm"]["rsm"]["enabled"] and not saved["configs"]["upstream"]["rsm"]["enabled"]
    assert [(c["recipe"], c["seed"]) for c in saved["curves"]] == [("upstream", 0), ("fastlr", 0), ("rsm", 0),
                                                                    ("upstream", 1), ("fastlr", 1), ("rsm", 1)]
    for c in saved["curves"]:
        assert c["points"] and c["points"][-1]["examples"] >= 16 * 8  # stopped at the first evaluation past it
        for p in c["points"]:
            assert p["examples"] == p["step"] * 16
            if c["recipe"] == "rsm":  # its warm-up (0 or 1 gradient-free step per step here) is counted too
                plain = p["examples"] * c["flops_per_example"]
                assert plain <= p["flops"] < 2 * plain
            else:
                assert p["flops"] == pytest.approx(p["examples"] * c["flops_per_example"])
        assert all(a["seconds"] < b["seconds"] for a, b in zip(c["points"], c["points"][1:]))
    s = report["summary"]
    for r in ("upstream", "fastlr"):
        reached = [s["to_target"][r][str(t)] for t in targets]
        assert reached[0]["reached"] == 2 and reached[-1]["reached"] == 0  # 0.0 at the first evaluation; 2.0 never
        costs = [row["examples"]["median"] for row in reached]
        assert costs == sorted(costs)  # a higher target never costs less
    assert s["to_target"]["fastlr"]["0.0"]["examples_ratio"]["median"] == 1.0  # the same first evaluation
    assert "examples_ratio" not in s["to_target"]["upstream"]["0.0"]
    md = (out / "bench_recipes_sudoku4.md").read_text()
    first = saved["curves"][1]["points"][0]["examples"]
    assert f"| fastlr | 0 | 2/2 | {first:,} |" in md and "not reached" in md and "1.00x" in md


def test_paper_scale_names_its_reports_and_refuses_a_name_that_is_no_file_name(tmp_path):
    """`paper_scale(name=...)` names the task in the reports (another 9x9 set is never reported as
    Sudoku-Extreme); a name that could leave the report folder is one error before anything is built or run."""
    from benchmarks.bench_recipes import paper_scale

    for bad in ("../up", "a b", ""):
        with pytest.raises(TRMError, match="paper_scale: name"):
            paper_scale(tmp_path / "no-data", ["upstream"], work=tmp_path, budget_s=1.0, name=bad)
    assert not any(tmp_path.iterdir())
    with pytest.raises(TRMError, match="task sudoku9-generated needs --data"):  # the name reaches the task
        paper_scale(None, ["upstream"], work=tmp_path, budget_s=1.0, name="sudoku9-generated")


def test_a_report_again_joins_saved_runs_with_other_targets(tmp_path):
    """`--report`: no training; the curves of two saved reports of one task joined (upstream's from the first),
    summarised at new targets; another task's report, or an --out that holds an input, is one error."""
    from dataclasses import asdict

    from benchmarks.bench_recipes import main

    def saved(name, recipes, curves, task="sudoku6"):
        report = {"task": task, "seeds": 2, "budget_s": None, "budget_examples": 40.0, "threads": 1,
                  "recipes": {r: {"presets": [], "overrides": []} for r in recipes},
                  "configs": {r: {"device": "cpu", "lr": i} for i, r in enumerate(recipes)},
                  "curves": [asdict(c) for c in curves]}
        (tmp_path / name).write_text(json.dumps(report))
        return str(tmp_path / name)

    first = saved("a.json", ["upstream", "muon"], [_curve("upstream", 0, [0.1, 0.3, 0.5, 0.7]),
                                                   _curve("muon", 0, [0.2, 0.4, 0.6, 0.6]),
                                                   _curve("upstream", 1, [0.0, 0.1, 0.4, 0.6]),
                                                   _curve("muon", 1, [0.1, 0.5, 0.5, 0.6])])
    second = saved("b.json", ["upstream", "muon+rsm"], [_curve("upstream", 0, [0.9, 0.9, 0.9, 0.9]),
                                                        _curve("muon+rsm", 0, [0.6, 0.7, 0.7, 0.7]),
                                                        _curve("upstream", 1, [0.9, 0.9, 0.9, 0.9]),
                                                        _curve("muon+rsm", 1, [0.5, 0.6, 0.7, 0.7])])
    assert main(["--report", first, second, "--targets", "0.6", "--out", str(tmp_path / "joined")]) == 0
    joined = json.loads((tmp_path / "joined" / "bench_recipes_sudoku6.json").read_text())
    assert list(joined["recipes"]) == ["upstream", "muon", "muon+rsm"] and len(joined["curves"]) == 6
    to = joined["summary"]["to_target"]
    assert to["upstream"]["0.6"]["examples"]["median"] == 40.0  # the first file's upstream (the second's: 10)
    assert to["muon+rsm"]["0.6"]["examples_ratio"]["min"] == pytest.approx(10 / 40)
    assert (tmp_path / "joined" / "bench_recipes_sudoku6.png").stat().st_size > 0
    assert "| muon+rsm | 0.6 | 2/2 |" in (tmp_path / "joined" / "bench_recipes_sudoku6.md").read_text()
    other = saved("c.json", ["upstream"], [_curve("upstream", 0, [0.1])], task="maze")
    assert main(["--report", first, other, "--out", str(tmp_path / "x")]) == 2
    broken = json.loads((tmp_path / "a.json").read_text())
    del broken["curves"][1]["recipe"]
    (tmp_path / "d.json").write_text(json.dumps(broken))
    assert main(["--report", str(tmp_path / "d.json"), "--out", str(tmp_path / "y")]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    hostile = saved("e.json", ["upstream"], [_curve("upstream", 0, [0.1])], task="../../escaped")
    assert main(["--report", hostile, "--out", str(tmp_path / "z")]) == 2  # a task name never becomes a path
    assert not list(tmp_path.parent.glob("escaped*")) and not (tmp_path / "z").exists()
    # a recipe name a run refuses (an escape sequence, a newline) reached the tables and the terminal raw
    raw = saved("f.json", ["m\x1b[31m\nX"], [_curve("m\x1b[31m\nX", 0, [0.1])])
    assert main(["--report", raw, "--out", str(tmp_path / "w")]) == 2 and not (tmp_path / "w").exists()
    (tmp_path / "bench_recipes_sudoku6.json").write_text((tmp_path / "a.json").read_text())
    inputs = (tmp_path / "bench_recipes_sudoku6.json").read_bytes()
    assert main(["--report", str(tmp_path / "bench_recipes_sudoku6.json"), "--out", str(tmp_path)]) == 2
    assert (tmp_path / "bench_recipes_sudoku6.json").read_bytes() == inputs  # an input is never written over


def test_size_sets_the_mazes_side_and_their_shortest_paths_and_is_refused_elsewhere(tmp_path, capsys):
    from benchmarks.bench_recipes import main

    assert make_task("maze", size=7).build_key["size"] == 7 and make_task("maze", size=7).build_key[
        "min_path_length"] == 6
    assert make_task("maze").build_key["size"] == 11 and make_task("maze").build_key["min_path_length"] == 10
    for argv in (["--task", "sudoku6", "--size", "7"], ["--task", "maze", "--size", "4"]):
        assert main([*argv, "--work-dir", str(tmp_path / "w")]) == 2
        assert "--size" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


# ---------------------------------------------------------------------------
# The harness's folders: never through a link, never what it did not write; one benchmark per work folder
# ---------------------------------------------------------------------------

def _argv(work, *more):
    return ["--task", "sudoku4", "--recipes", "upstream", "--seeds", "1", "--budget-examples", "300",
            "--work-dir", str(work), *more]


@pytest.fixture
def no_work(monkeypatch):
    """The harness's first work (the dataset's build) fails the test: a refusal must come before it."""
    import benchmarks.bench_recipes as br

    def built(*args, **kwargs):
        raise AssertionError("the benchmark began its work")

    monkeypatch.setattr(br, "dataset", built)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("planted", ["recipe", "warm-up", "seed", "data", "report", "user-files"])
def test_a_folder_planted_as_a_link_or_holding_a_users_files_is_refused_before_any_work(tmp_path, capsys, no_work,
                                                                                         planted):
    """A folder the harness clears or writes below its work folder (a recipe's folder, a run's, the warm-up's, the
    dataset's, the default report folder) planted as a symbolic link to a user's folder, or a run folder holding
    a user's file: one `error:` line, status 2, before any work; the user's files are left as they were and
    nothing is written (the harness once deleted `mine/seed0/notes.txt` through such a link and trained there)."""
    from benchmarks.bench_recipes import main

    mine, work = tmp_path / "mine", tmp_path / "bw"
    (mine / "seed0").mkdir(parents=True)
    (mine / "seed0" / "notes.txt").write_text("precious")
    runs = work / "runs" / "sudoku4"
    runs.mkdir(parents=True)
    if planted == "recipe":
        (runs / "upstream").symlink_to(mine, target_is_directory=True)
    elif planted == "warm-up":
        (runs / "warm-up").symlink_to(mine, target_is_directory=True)
    elif planted == "seed":
        (runs / "upstream").mkdir()
        (runs / "upstream" / "seed0").symlink_to(mine / "seed0", target_is_directory=True)
    elif planted == "data":
        (work / "data").symlink_to(mine, target_is_directory=True)
    elif planted == "report":
        (work / "report").symlink_to(mine, target_is_directory=True)
    else:  # a real folder in the run's place, holding a file of the user's beside a training's
        (runs / "upstream" / "seed0").mkdir(parents=True)
        (runs / "upstream" / "seed0" / "run.json").write_text('{"run_id": "x"}')
        (runs / "upstream" / "seed0" / "notes.txt").write_text("precious")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(_argv(work)) == 2
    err = _one_error(capsys)
    assert ("symbolic link" in err) if planted != "user-files" else ("notes.txt" in err and "no training" in err)
    assert (mine / "seed0" / "notes.txt").read_text() == "precious"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # not even the lock


def test_a_rerun_clears_the_harness_own_run_folders_and_nothing_else(tmp_path):
    """A rerun over the harness's earlier output clears its run folders and trains again (a training's files:
    run.json, config.json, metrics.jsonl, its states and lock); a user's file put in one stops the rerun before any
    work, and is kept."""
    task = dataclasses.replace(make_task("sudoku4", num_train=32, num_test=8), eval_interval=1)
    kwargs = dict(seeds=1, budget_s=None, budget_examples=16 * 2, targets=[0.5], work=tmp_path,
                  say=lambda *a, **k: None, extra=["global_batch_size=16", "arch.hidden_size=16",
                                                   "arch.halt_max_steps=2", "arch.H_cycles=1", "arch.L_cycles=1"])
    first = bench(task, ["upstream"], **kwargs)
    seed0 = tmp_path / "runs" / "sudoku4" / "upstream" / "seed0"
    assert (seed0 / "run.json").is_file()
    second = bench(task, ["upstream"], **kwargs)  # cleared and trained again: the same deterministic curve
    assert [p["accuracy"] for p in second["curves"][0]["points"]] == [p["accuracy"] for p in
                                                                      first["curves"][0]["points"]]
    (seed0 / "notes.txt").write_text("precious")
    with pytest.raises(TRMError, match="holds notes.txt, which no training of the harness wrote"):
        bench(task, ["upstream"], **kwargs)
    assert (seed0 / "notes.txt").read_text() == "precious" and (seed0 / "run.json").is_file()
    from benchmarks.bench_recipes import run_folder_problem

    (seed0 / "notes.txt").unlink()
    assert run_folder_problem(tmp_path, seed0) is None
    for entry in [seed0 / "run.json", *seed0.glob("state_step*.pt")]:  # a training's names, no run recorded
        entry.unlink()
    assert "no run.json and no train state" in run_folder_problem(tmp_path, seed0)


def test_a_second_benchmark_on_a_held_work_folder_is_refused_in_one_line(tmp_path, capsys, no_work):
    """Two benchmarks on one --work-dir: the second is refused in one line naming the first (its process), before
    any work, as the package's commands refuse a folder another one holds; none cleared the other's runs."""
    import os

    from benchmarks.bench_recipes import main
    from trm_kaggle.locks import directory_lock

    with directory_lock(tmp_path / "bw", "recipes benchmark"):
        assert main(_argv(tmp_path / "bw")) == 2
    err = _one_error(capsys)
    assert "another recipes benchmark is running" in err and f"process {os.getpid()}" in err
    assert sorted(p.name for p in (tmp_path / "bw").iterdir()) == [".trm_kaggle.lock"]


def test_an_out_that_cannot_take_the_reports_is_one_line_before_any_work(tmp_path, capsys, no_work):
    """`--out` that is a file, lies below a file or cannot be written: one `error:` line, status 2, before any
    training (and in `--report` mode before anything is written), never a Python traceback."""
    import os

    from benchmarks.bench_recipes import main

    (tmp_path / "afile").write_text("x")
    saved = tmp_path / "in.json"
    saved.write_text(json.dumps({"task": "sudoku4", "seeds": 1, "budget_s": None, "budget_examples": 10.0,
                                 "threads": 1, "recipes": {"upstream": {"presets": [], "overrides": []}},
                                 "configs": {"upstream": {"device": "cpu"}},
                                 "curves": [dataclasses.asdict(_curve("upstream", 0, [0.1, 0.5]))]}))
    outs = [(tmp_path / "afile", "is a file"), (tmp_path / "afile" / "sub", "not a folder")]
    if os.geteuid() != 0:  # root writes into a read-only folder
        (tmp_path / "ro").mkdir(mode=0o555)
        outs.append((tmp_path / "ro" / "sub", "not writable"))
    for out, said in outs:
        for argv in (["--report", str(saved), "--targets", "0.5", "--out", str(out)],
                     _argv(tmp_path / "bw", "--out", str(out))):
            assert main(argv) == 2
            assert said in _one_error(capsys)
    assert not (tmp_path / "bw").exists() and (tmp_path / "afile").read_text() == "x"


def test_a_stop_by_sigterm_is_one_interrupted_line_with_the_commands_status(tmp_path):
    """The script stopped by SIGTERM says `interrupted: stopped by SIGTERM; ...` (what it kept) and exits 143, as
    the package's commands do; it once ended by the signal without a word. (Training is replaced by a wait.)"""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "data").mkdir()
    script = ("import runpy, sys, time\n"
              "import trm_kaggle.train as T\n"
              "def train(*a, **k):\n"
              "    print('training', flush=True)\n"
              "    for _ in range(1200): time.sleep(0.1)  # a stop before a sleep begins is taken\n"
              "T.train = train\n"
              f"sys.argv = ['bench_recipes.py'] + {_argv(tmp_path / 'bw', '--data', str(tmp_path / 'data'))!r}\n"
              f"runpy.run_path({str(repo / 'benchmarks' / 'bench_recipes.py')!r}, run_name='__main__')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        assert proc.stdout.readline().strip() == "training"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == ("interrupted: stopped by SIGTERM; no run had finished; a rerun trains "
                                            "every run again") and "Traceback" not in err


@pytest.mark.parametrize("damage", [b"", b"{trunc", b"\xff\xfe\x00"])
def test_a_damaged_dataset_record_rebuilds_the_data_with_a_line_and_is_written_whole(tmp_path, monkeypatch, damage):
    """WORK/data/<task>.build.json cut off (a stop or a full disk while it was written: empty, truncated, not
    UTF-8) once ended every rerun in a traceback; the harness wrote it, so the data is built again, said in a
    line naming the record. The record is written by the package's atomic writer (whole or not at all)."""
    import trm_kaggle.atomic as atomic
    from benchmarks.bench_recipes import Task, dataset

    builds, written, said = [], [], []

    def build(out):
        builds.append(out)
        out.mkdir(parents=True, exist_ok=True)

    real = atomic.atomic_write_json
    monkeypatch.setattr(atomic, "atomic_write_json", lambda path, obj, *a, **k: (written.append(path),
                                                                                 real(path, obj, *a, **k)))
    task = Task("tiny", build, {"kind": "tiny", "n": 1}, (), (), eval_interval=1)
    stamp = tmp_path / "data" / "tiny.build.json"
    assert dataset(task, tmp_path, said.append) == tmp_path / "data" / "tiny" and len(builds) == 1
    assert written == [stamp] and json.loads(stamp.read_text()) == {"kind": "tiny", "n": 1}
    dataset(task, tmp_path, said.append)
    assert len(builds) == 1  # reused while its record matches
    stamp.write_bytes(damage)
    dataset(task, tmp_path, said.append)
    assert len(builds) == 2 and json.loads(stamp.read_text()) == {"kind": "tiny", "n": 1}
    assert any(str(stamp) in line and "built again" in line for line in said), said


@pytest.mark.parametrize("inside", ["data/sudoku4", "data/sudoku4/train", "data", "runs/sudoku4/warm-up",
                                    "runs/sudoku4/upstream/seed0", "runs"])
def test_an_out_inside_the_harness_data_or_run_folders_is_refused_before_any_work(tmp_path, capsys, no_work,
                                                                                   inside):
    """`--out WORK/data/sudoku4` in a fresh work folder once wrote the reports into the dataset it then built (and
    was refused only once the dataset existed); anywhere in WORK/data or WORK/runs, the folders the harness
    builds and clears, is one line before any work, whether they exist yet or not."""
    from benchmarks.bench_recipes import main

    work = tmp_path / "bw"
    assert main(_argv(work, "--out", str(work / inside))) == 2
    err = _one_error(capsys)
    assert "--out" in err and "builds and clears" in err
    assert not work.exists()


@pytest.mark.parametrize("flags, words", [
    (["--budget-s", "nan"], "--budget-s nan: a number above 0"), (["--budget-s", "inf"], "--budget-s inf"),
    (["--budget-s", "-5"], "--budget-s -5.0"), (["--budget-examples", "0"], "--budget-examples 0.0"),
    (["--seeds", "0"], "--seeds 0: a whole number of seeds from 1 to 1000"), (["--seeds", "100000000000"], "--seeds"),
    (["--targets", "nan"], "--targets nan: held-out exact accuracies"), (["--targets", "-0.5"], "--targets -0.5"),
])
def test_numbers_that_give_no_benchmark_are_refused_before_any_work(tmp_path, capsys, no_work, flags, words):
    """`--budget-s nan` (or inf) built the dataset, then ended in a deadline's ValueError traceback; `--seeds 0`
    trained nothing and ended in min() of an empty sequence; a negative budget reported nothing trained, exit 0."""
    from benchmarks.bench_recipes import main

    assert main(_argv(tmp_path / "bw", *flags)) == 2
    assert words in _one_error(capsys)
    assert not (tmp_path / "bw").exists()


def test_a_stop_while_the_report_is_written_leaves_one_runs_report_and_names_it(tmp_path, monkeypatch):
    """A SIGTERM while the report was published: the new .json and .md stood beside the previous run's .png, and
    the line was a bare `interrupted: stopped by SIGTERM`. The three files are written together, and the line names
    the report that holds the finished runs."""
    import os
    import signal

    import benchmarks.bench_recipes as br
    from trm_kaggle.interrupts import Terminated, raise_terminated

    task = dataclasses.replace(make_task("sudoku4", num_train=64, num_test=16), eval_interval=1)
    kw = dict(seeds=1, budget_s=None, budget_examples=16 * 2, targets=[0.5], work=tmp_path, say=lambda *a, **k: None,
              extra=["global_batch_size=16", "arch.hidden_size=16", "arch.halt_max_steps=2", "arch.H_cycles=1",
                     "arch.L_cycles=1"])
    bench(task, ["upstream"], **kw)
    out = tmp_path / "report"
    before = {p.suffix: p.stat().st_mtime_ns for p in out.glob("bench_recipes_*")}
    real = br.plot

    def stopped_while_plotting(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)

    monkeypatch.setattr(br, "plot", stopped_while_plotting)
    signal.signal(signal.SIGTERM, raise_terminated)  # as the script's `command` takes it (put back after the test)
    with pytest.raises(Terminated) as stopped:
        bench(task, ["upstream"], **kw)
    after = {p.suffix: p.stat().st_mtime_ns for p in out.glob("bench_recipes_*")}
    assert set(after) == {".json", ".md", ".png"} and all(after[s] > before[s] for s in after), (before, after)
    assert str(stopped.value).endswith(f"the run it finished is in {out / 'bench_recipes_sudoku4.json'}; a rerun "
                                       "trains every run again"), stopped.value


@pytest.mark.parametrize("damage", ["nan accuracy", "inf accuracy", "point lacks examples", "points a string",
                                    "batch text", "flops text", "accuracy past 1", "seed negative", "device raw",
                                    "seeds text", "no curves", "points reversed", "threads huge"])
def test_a_saved_report_with_numbers_no_run_writes_is_one_line_and_writes_nothing(tmp_path, capsys, damage):
    """A saved report whose accuracy was NaN or inf, or whose curve's points lacked a field or were a string, was a
    matplotlib or KeyError traceback after `--out` was made (left empty, or holding the .json and .md without the
    .png). Every number is checked as a run writes it, before anything is written."""
    from dataclasses import asdict

    from benchmarks.bench_recipes import main

    report = {"task": "sudoku6", "seeds": 1, "budget_s": None, "budget_examples": 40.0, "threads": 1,
              "recipes": {"upstream": {"presets": [], "overrides": []}},
              "configs": {"upstream": {"device": "cpu"}}, "curves": [asdict(_curve("upstream", 0, [0.1, 0.5]))]}
    curve, point = report["curves"][0], report["curves"][0]["points"][1]
    if damage == "nan accuracy":
        point["accuracy"] = float("nan")
    elif damage == "inf accuracy":
        point["accuracy"] = float("inf")
    elif damage == "point lacks examples":
        del point["examples"]
    elif damage == "points a string":
        curve["points"] = "zz"
    elif damage == "batch text":
        curve["batch"] = "x"
    elif damage == "flops text":
        curve["flops_per_example"] = "nan"
    elif damage == "accuracy past 1":
        point["accuracy"] = 5.0
    elif damage == "seed negative":
        curve["seed"] = -1
    elif damage == "device raw":
        report["configs"]["upstream"]["device"] = "cpu\x1b[2J"
    elif damage == "no curves":
        report["curves"] = []
    elif damage == "points reversed":
        curve["points"].reverse()
    elif damage == "threads huge":
        report["threads"] = 10**30
    else:
        report["seeds"] = "two"
    (tmp_path / "r.json").write_text(json.dumps(report))  # NaN and Infinity as Python's json writes them
    assert main(["--report", str(tmp_path / "r.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    said = "no curve: no run of these reports finished" if damage == "no curves" else "not as bench_recipes writes it"
    assert "Traceback" not in err and said in err and "\x1b" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("planted", ["tensorboard/precious.txt", "state_step99999999.pt.mynotes", "config.json/",
                                     ".notes.tmp", "compile_cache.mine"])
def test_a_run_folder_is_cleared_only_for_the_exact_names_a_training_writes(tmp_path, planted):
    """A user's file that only looked like a training's (anything in `tensorboard/`, `state_step*.pt.mynotes`) was
    deleted with the run folder on a rerun, without a word: only a training's exact names (and TensorBoard's event
    files) are cleared; anything else is refused, named, and nothing is deleted."""
    from benchmarks.bench_recipes import clear_run_folder, run_folder_problem

    seed0 = tmp_path / "runs" / "sudoku4" / "upstream" / "seed0"
    (seed0 / "tensorboard").mkdir(parents=True)
    for name in ("run.json", "config.json", "metrics.jsonl", "state_step00000063.pt", "state_step00000063.pt.corrupt",
                 ".metrics.jsonl.abc_12.tmp", "tensorboard/events.out.tfevents.1765.host.42.0"):
        (seed0 / name).write_text('{"run_id": "r"}' if name == "run.json" else "x")
    assert run_folder_problem(tmp_path, seed0) is None  # what a training writes, TensorBoard's events included
    if planted.endswith("/"):  # a folder under a training's file name
        (seed0 / "config.json").unlink()
        (seed0 / planted).mkdir()
        (seed0 / planted / "mine.txt").write_text("precious")
    else:
        (seed0 / planted).write_text("precious")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    problem = run_folder_problem(tmp_path, seed0)
    assert problem and planted.rstrip("/") in problem and "no training of the harness wrote" in problem, problem
    with pytest.raises(TRMError, match="no training of the harness wrote"):
        clear_run_folder(tmp_path, seed0)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("recipes, words", [
    (["a/b:lr=1e-3", "a_b:lr=2e-3"], "recipes 'a/b' and 'a_b' would share the run folder 'a_b'"),
    (["A:lr=1e-3", "a:lr=2e-3"], "would share the run folder 'a'"),  # one folder on a case-blind disk
    (["..:lr=1e-3"], "recipe '..:lr=1e-3': its run folder '..' is not a name"),
    (["warm-up:lr=1e-3"], "its run folder 'warm-up' is the harness's own warm-up folder"),
    (["x:lr=1e-3", "lr=nan"], "--recipes: 'lr=nan' is not NAME, PRESETS, NAME:key=value"),
])
def test_a_recipe_name_that_makes_no_run_folder_of_its_own_is_refused_before_any_work(tmp_path, capsys, no_work,
                                                                                       recipes, words):
    """`a/b` and `a_b` trained in one run folder (the second cleared the first's run, and the report named it for
    both); `..` wrote its runs into WORK/runs, where every task's meet; `warm-up` ran inside the harness's warm-up
    folder and the next benchmark there was refused; `lr=nan` after --recipes was 'unknown preset nan'. Each is one
    line naming the recipe, status 2, before anything is made."""
    from benchmarks.bench_recipes import main

    argv = _argv(tmp_path / "bw")
    at = argv.index("upstream")
    assert main([*argv[:at], *recipes, *argv[at + 1:]]) == 2
    err = _one_error(capsys)
    assert words in err, err
    assert "settings for every recipe go before --recipes" in err if "lr=nan" in recipes else True
    assert not (tmp_path / "bw").exists()


def _saved_report(path):
    path.write_text(json.dumps({"task": "sudoku4", "seeds": 1, "budget_s": None, "budget_examples": 10.0,
                                "threads": 1, "recipes": {"upstream": {"presets": [], "overrides": []}},
                                "configs": {"upstream": {"device": "cpu"}},
                                "curves": [dataclasses.asdict(_curve("upstream", 0, [0.1, 0.5]))]}))
    return str(path)


@pytest.mark.parametrize("suffix", ["md", "png"])
def test_a_folder_in_a_reports_place_is_one_line_before_any_work_and_nothing_is_written(tmp_path, capsys, no_work,
                                                                                         suffix):
    """A folder where bench_recipes_<task>.md or .png goes was refused only after every run had trained, the .json
    (and .md) already written beside it; in `--report` mode after the .json was written. Both modes: one line,
    status 2, before any work, and no report is written."""
    from benchmarks.bench_recipes import main

    out = tmp_path / "od"
    (out / f"bench_recipes_sudoku4.{suffix}").mkdir(parents=True)
    saved = _saved_report(tmp_path / "in.json")
    for argv in (_argv(tmp_path / "bw", "--out", str(out)), ["--report", saved, "--targets", "0.5", "--out", str(out)]):
        assert main(argv) == 2
        err = _one_error(capsys)
        assert f"bench_recipes_sudoku4.{suffix}" in err and "is a folder" in err, err
        assert sorted(p.name for p in out.iterdir()) == [f"bench_recipes_sudoku4.{suffix}"]
    assert not (tmp_path / "bw").exists()


@pytest.mark.parametrize("held", ["out", "above"])
def test_an_out_another_live_harness_holds_is_refused_in_one_line(tmp_path, capsys, no_work, held):
    """Two harnesses with their own work folders and one --out both said their report was written; the one that
    ended last replaced the other's. A live harness holds its --out (and its work folder) as the package's lock:
    a second one writing there, or inside a folder one holds, is refused in one line naming it, in both modes."""
    import os

    from benchmarks.bench_recipes import main
    from trm_kaggle.locks import directory_lock

    other = tmp_path / "wm"
    out = other / "report" if held == "out" else other / "mine"
    saved = _saved_report(tmp_path / "in.json")
    with directory_lock(other / "report" if held == "out" else other, "recipes benchmark"):
        for argv in (_argv(tmp_path / "bw", "--out", str(out)),
                     ["--report", saved, "--targets", "0.5", "--out", str(out)]):
            assert main(argv) == 2
            err = _one_error(capsys)
            assert "--out" in err and "another recipes benchmark is running" in err and str(os.getpid()) in err, err
    assert not (tmp_path / "bw").exists() and not (other / "mine").exists()
    assert not list((other / "report").glob("bench_recipes_*")) if (other / "report").exists() else True


def test_a_benchmark_holds_its_report_folder_while_it_runs(tmp_path, monkeypatch):
    """While a benchmark runs, its --out is held (a second harness there is refused); afterwards it is free."""
    import benchmarks.bench_recipes as br
    from trm_kaggle.locks import refuse_if_held

    out, seen = tmp_path / "shared", []

    def measure(*args, **kwargs):
        with pytest.raises(TRMError, match="another recipes benchmark is running"):
            refuse_if_held(out)
        seen.append(kwargs["out"])
        return {}

    monkeypatch.setattr(br, "_measure", measure)
    assert br.main(_argv(tmp_path / "bw", "--out", str(out))) == 0
    assert seen == [out]
    refuse_if_held(out)  # released


def test_a_run_never_evaluated_is_named_and_left_out_of_the_equal_budget(tmp_path, capsys):
    """A recipe whose runs end before their first evaluation (`short:max_steps=...`) made the smallest budget any run
    used 0, so every recipe was compared at no training, without a word. Such a run is named in one warning and in
    the report, counts as not reaching any target, and the equal budget is taken over the runs evaluated; with no
    run evaluated the report says there is no equal budget."""
    from benchmarks.bench_recipes import main

    task = dataclasses.replace(make_task("sudoku4", num_train=32, num_test=8), eval_interval=1)
    bench(task, ["upstream", "short:max_steps=1"], seeds=1, budget_s=None, budget_examples=16 * 2, targets=[0.0],
          work=tmp_path, say=lambda *a, **k: None, extra=["global_batch_size=16", "arch.hidden_size=16",
                                                          "arch.halt_max_steps=2", "arch.H_cycles=1",
                                                          "arch.L_cycles=1"])
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("warning: no evaluation")] == [
        "warning: no evaluation in short seed 0 (the run ended before its first one): counted as not reaching any "
        "target, and the equal budget is taken over the runs that have one"], err
    saved = tmp_path / "report" / "bench_recipes_sudoku4.json"
    s = json.loads(saved.read_text())["summary"]
    assert s["unmeasured"] == [["short", 0]] and s["budgets"]["examples"] == 32  # upstream's, not 0
    assert s["at_budget"]["short"]["examples"]["accuracy"]["median"] is None
    assert s["to_target"]["short"]["0.0"]["reached"] == 0
    md = (tmp_path / "report" / "bench_recipes_sudoku4.md").read_text()
    assert "Not measured (the run ended before its first evaluation" in md and ": short seed 0." in md
    assert "The smallest budget any measured run used: 32 examples" in md
    report = json.loads(saved.read_text())
    report["curves"] = [c for c in report["curves"] if c["recipe"] == "short"]  # no run evaluated at all
    (tmp_path / "only_short.json").write_text(json.dumps(report))
    assert main(["--report", str(tmp_path / "only_short.json"), "--out", str(tmp_path / "j")]) == 0
    assert "no equal budget" in (tmp_path / "j" / "bench_recipes_sudoku4.md").read_text()
    assert "warning: no evaluation in short seed 0" in capsys.readouterr().err


def test_the_harness_safety_stop_is_no_max_steps_training_warns_of(tmp_path, caplog):
    """Every measured run warned "max_steps=1012 stops the run at step 1012, which does not evaluate": the harness's
    own safety stop (for evaluations that never come), a setting the user never gave. It now lands on a step that
    evaluates, so training says nothing of it; a max_steps the recipe sets is still training's to warn of."""
    import logging

    from benchmarks.bench_recipes import _evaluation_from
    from trm_kaggle.data import load_metadata

    task = dataclasses.replace(make_task("sudoku4", num_train=32, num_test=8), eval_interval=3)  # 6 steps
    kw = dict(seeds=1, budget_s=None, budget_examples=16 * 3, targets=[0.5], work=tmp_path, say=lambda *a, **k: None,
              extra=["global_batch_size=16", "arch.hidden_size=16", "arch.halt_max_steps=2", "arch.H_cycles=1",
                     "arch.L_cycles=1"])
    with caplog.at_level(logging.WARNING):
        bench(task, ["upstream"], **kw)
    assert not [r.getMessage() for r in caplog.records if "max_steps" in r.getMessage()]
    meta = load_metadata(tmp_path / "data" / "sudoku4", "train")
    cfg = json.loads((tmp_path / "report" / "bench_recipes_sudoku4.json").read_text())["configs"]["upstream"]
    per = meta.total_groups * meta.mean_puzzle_examples / 16  # steps per epoch, as training counts them
    for interval in (1, 3):
        c = type("Cfg", (), {"global_batch_size": 16, "eval_interval": interval})
        for step in (1, 1012, round(per * interval), round(per * interval) + 1):
            at = _evaluation_from(step, meta, c)
            ends = [s for s in range(step, at + 1) if math.floor(s / per / interval) > math.floor((s - 1) / per /
                                                                                                  interval)]
            assert ends == [at], (interval, step, at)  # the first step from `step` on that ends an interval
    assert cfg["max_steps"] is None  # the stop is the harness's, not written into the recipe's config


def test_reports_of_other_data_or_of_a_recipe_with_another_config_do_not_join(tmp_path, capsys):
    """`--report` joined a recipe found in two files with different configs (the second file's runs dropped without
    a word), and an upstream trained on ARC data with recipes trained on Sudoku. A report records its data's
    fingerprint and names its data; joining compares both, and each mismatch is one line naming the files and the
    difference. Where runs lie (run folders, data paths of other work folders) is no difference."""
    from benchmarks.bench_recipes import main

    def saved(name, configs, fingerprint="f1", data="wa/data/sudoku4"):
        report = {"task": "sudoku4", "seeds": 1, "budget_s": None, "budget_examples": 40.0, "threads": 1,
                  "data": data, "data_fingerprint": fingerprint,
                  "recipes": {r: {"presets": [], "overrides": []} for r in configs}, "configs": configs,
                  "curves": [dataclasses.asdict(_curve(r, 0, [0.1, 0.5])) for r in configs]}
        (tmp_path / name).write_text(json.dumps(report))
        return str(tmp_path / name)

    def config(work, **changed):
        return {"device": "cpu", "lr": 3e-3, "arch": {"hidden_size": 64, "H_cycles": 2}, "checkpoint_path":
                f"{work}/runs/sudoku4/x/seed0", "data_paths": [f"{work}/data/sudoku4"], **changed}

    a = saved("a.json", {"upstream": config("wa"), "muon": config("wa", lr=1e-2)})
    b = saved("b.json", {"upstream": config("wb"), "fast": config("wb")}, data="wb/data/sudoku4")
    assert main(["--report", a, b, "--targets", "0.5", "--out", str(tmp_path / "ok")]) == 0  # only places differ
    capsys.readouterr()
    other = saved("c.json", {"upstream": config("wc", lr=0.5, arch={"hidden_size": 512, "H_cycles": 2}),
                             "fast": config("wc")})
    assert main(["--report", a, other, "--targets", "0.5", "--out", str(tmp_path / "x")]) == 2
    err = _one_error(capsys)
    assert (f"{other}: recipe 'upstream' was trained with another config than in {a} (lr 0.003 against 0.5; "
            "arch.hidden_size 64 against 512)") in err, err
    arc = saved("d.json", {"upstream": config("wd"), "fast": config("wd")}, fingerprint="f2", data="wd/data/arc-small")
    assert main(["--report", arc, b, "--targets", "0.5", "--out", str(tmp_path / "y")]) == 2
    err = _one_error(capsys)
    assert f"{b}: trained on other data than {arc} ('wb/data/sudoku4' against 'wd/data/arc-small'" not in err
    assert f"{b}: trained on other data than {arc} (wb/data/sudoku4 against wd/data/arc-small" in err, err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    # a live benchmark records its data's fingerprint, and its report names the data (--data names another set)
    task = dataclasses.replace(make_task("sudoku4", num_train=32, num_test=8), eval_interval=1)
    bench(task, ["upstream"], seeds=1, budget_s=None, budget_examples=16, targets=[0.5], work=tmp_path / "w",
          say=lambda *a, **k: None, extra=["global_batch_size=16", "arch.hidden_size=16", "arch.halt_max_steps=2",
                                           "arch.H_cycles=1", "arch.L_cycles=1"])
    live = json.loads((tmp_path / "w" / "report" / "bench_recipes_sudoku4.json").read_text())
    from trm_kaggle.train.checkpoint import dataset_fingerprint

    assert live["data_fingerprint"] == dataset_fingerprint([str(tmp_path / "w" / "data" / "sudoku4")])
    md = (tmp_path / "w" / "report" / "bench_recipes_sudoku4.md").read_text()
    assert f"Data: `{tmp_path / 'w' / 'data' / 'sudoku4'}`." in md


@pytest.mark.parametrize("given", [["seed=7"], ["eval_interval=3"], ["data_paths=[/nonexistent]"], ["--recipes",
                                   "x:seed=5"], ["--recipes", "x:checkpoint_path=/tmp/elsewhere"], ["device=cuda"],
                                   ["threads=4"]])
def test_a_setting_the_harness_gives_every_run_is_refused_not_replaced(tmp_path, capsys, no_work, given):
    """seed=, eval_interval=, data_paths=, checkpoint_path= (for every recipe or in one) were replaced by the
    harness's own without a word: the report recorded seed 0 and its own data. Refused in one line naming the
    harness's option for it, as `sweep` refuses its own, before any work."""
    from benchmarks.bench_recipes import main

    argv = _argv(tmp_path / "bw")
    argv = [*argv, *given] if given[0] != "--recipes" else [*argv[:argv.index("--recipes")], *argv[
        argv.index("--recipes") + 2:], *given]
    assert main(argv) == 2
    err = _one_error(capsys)
    key = given[-1].split(":")[-1].split("=")[0]
    assert f"the harness sets {key} for every run" in err and "leave it out" in err, err
    hint = {"seed": "--seeds", "eval_interval": "--eval-interval", "data_paths": "--data", "device": "--device",
            "threads": "--threads", "checkpoint_path": "WORK/runs"}[key]
    assert hint in err and ("recipe 'x'" in err) == (given[0] == "--recipes"), err
    assert not (tmp_path / "bw").exists()


def test_a_work_or_report_folder_in_a_training_run_folder_is_refused(tmp_path, capsys, no_work):
    """--out or --work-dir in a training's run folder (run.json or a train state; a sweep's runs hold the same) had
    the harness's data, runs and reports written among the run's states: refused as `regress --out` refuses it."""
    from benchmarks.bench_recipes import main

    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    (run / "state_step00000004.pt").write_bytes(b"x")
    saved = tmp_path / "in.json"
    saved.write_text(json.dumps({"task": "sudoku4", "seeds": 1, "budget_s": None, "budget_examples": 10.0,
                                 "threads": 1, "recipes": {"upstream": {"presets": [], "overrides": []}},
                                 "configs": {"upstream": {"device": "cpu"}},
                                 "curves": [dataclasses.asdict(_curve("upstream", 0, [0.1, 0.5]))]}))
    for argv, what in ((_argv(tmp_path / "bw", "--out", str(run)), "--out"), (_argv(run), "--work-dir"),
                       (_argv(run / "sub"), "--work-dir"),
                       (["--report", str(saved), "--out", str(run / "rep")], "--out")):
        assert main(argv) == 2
        err = _one_error(capsys)
        assert f"error: {what} " in err and "a training run folder" in err, (argv, err)
    assert sorted(p.name for p in run.iterdir()) == ["state_step00000004.pt"] and not (tmp_path / "bw").exists()


def test_an_empty_path_is_refused_naming_its_option(tmp_path, capsys, no_work, monkeypatch):
    """--work-dir '' built and trained in the current folder, --out '' and --data '' were taken as not given (an
    unset shell variable's): each is refused naming the option; from Python, bench's work='' names `work`."""
    from benchmarks.bench_recipes import main

    monkeypatch.chdir(tmp_path)
    for argv, what in ((_argv(""), "--work-dir"), (_argv("bw", "--out", ""), "--out"),
                       (_argv("bw", "--data", " "), "--data"), (["--report", "", "--out", "o"], "--report"),
                       (["--report", "a.json", "--out", ""], "--out")):
        assert main(argv) == 2
        assert f"error: {what} is empty" in _one_error(capsys), argv
    task = dataclasses.replace(make_task("sudoku4", num_train=32, num_test=8), eval_interval=1)
    for kw, name in ((dict(work=""), "work"), (dict(work="w", out=""), "out"), (dict(work="w", data=""), "data")):
        with pytest.raises(TRMError, match=f"^{name} is empty"):
            bench(task, ["upstream"], seeds=1, budget_s=1.0, **kw)
    assert not any(tmp_path.iterdir())


def test_bench_names_wrong_typed_arguments_before_any_work(tmp_path, no_work, monkeypatch):
    """From Python: recipes=[] was a StopIteration after the dataset was built, recipes="upstream" the recipes
    u, p, s, ..., work="dir" or 5 a TypeError of `/`, extra="lr=1" the overrides l, r, ...: named before any work,
    one str taken as one recipe or one setting."""
    import benchmarks.bench_recipes as br

    task = dataclasses.replace(make_task("sudoku4", num_train=32, num_test=8), eval_interval=1)
    kw = dict(seeds=1, budget_s=1.0)
    with pytest.raises(TRMError, match="recipes: name at least one recipe"):
        bench(task, [], work=tmp_path / "w", **kw)
    for bad, match in ((dict(recipes=5), r"recipes: expected a recipe"), (dict(recipes=["upstream", 5]),
                       r"recipes\[1\]: expected a str"), (dict(work=5), "work: expected the work folder's path"),
                       (dict(extra=[1]), r"extra\[0\]: expected a str"),
                       (dict(data=3), "data: expected the dataset's path")):
        args = {"recipes": ["upstream"], "work": tmp_path / "w", **bad}
        with pytest.raises(TypeError, match=match):
            bench(task, args.pop("recipes"), **args, **kw)
    seen = []

    def measured(task, parsed, configs, upstream, **kw):
        seen.append(([r.name for r in parsed], kw["work"], configs["quick"].lr, configs["quick"].arch.hidden_size))
        return {}

    monkeypatch.setattr(br, "_measure", measured)
    bench(task, "quick:lr=0.01", work=str(tmp_path / "w"), extra="arch.hidden_size=16", **kw)  # one str: one item
    assert seen == [(["quick"], tmp_path / "w", 0.01, 16)]


def test_paths_echoed_on_the_terminal_are_escaped(tmp_path):
    """The `data:` and `report:` lines echoed a typed --work-dir or --out with its control characters raw (an
    escape sequence recoloured the terminal): escaped, as the package's success lines are."""
    from benchmarks.bench_recipes import dataset, rereport

    task = dataclasses.replace(make_task("sudoku4"), build=lambda out: out.mkdir(parents=True))
    said = []
    dataset(task, tmp_path / "w\x1b[31mk", say=said.append)
    saved = tmp_path / "in.json"
    saved.write_text(json.dumps({"task": "sudoku4", "seeds": 1, "budget_s": None, "budget_examples": 10.0,
                                 "threads": 1, "recipes": {"upstream": {"presets": [], "overrides": []}},
                                 "configs": {"upstream": {"device": "cpu"}},
                                 "curves": [dataclasses.asdict(_curve("upstream", 0, [0.1, 0.5]))]}))
    rereport([saved], [0.5], tmp_path / "r\x1b[31mout", say=said.append)
    lines = [s for s in said if s.startswith(("data:", "report:"))]
    assert len(lines) == 2 and all("\x1b" not in s and "\\x1b[31m" in s for s in lines), said


@pytest.mark.parametrize("damage", ["configs null", "curve's recipe unknown", "recipes a list", "recipe not text",
                                    "seed huge"])
def test_a_malformed_saved_report_names_the_field_not_a_python_error(tmp_path, capsys, damage):
    """configs null, a curve's recipe not among the recipes, recipes a list were Python's exception text
    ("'NoneType' object is not subscriptable", KeyError('../../etc')); a seed of 10**30 was joined. Each is one
    line naming the file and the field."""
    from benchmarks.bench_recipes import main

    report = {"task": "sudoku4", "seeds": 1, "budget_s": None, "budget_examples": 10.0, "threads": 1,
              "recipes": {"upstream": {"presets": [], "overrides": []}}, "configs": {"upstream": {"device": "cpu"}},
              "curves": [dataclasses.asdict(_curve("upstream", 0, [0.1, 0.5]))]}
    if damage == "configs null":
        report["configs"], said = None, "its configs are not an object"
    elif damage == "curve's recipe unknown":
        report["curves"][0]["recipe"], said = "../../etc", "recipe ../../etc is not among the report's recipes"
    elif damage == "recipes a list":
        report["recipes"], said = ["up\x1bstream"], "its recipes are not an object"
    elif damage == "recipe not text":
        report["recipes"]["upstream"]["presets"], said = [5], "upstream has no presets and overrides as lists"
    else:
        report["curves"][0]["seed"], said = 10**30, "is not from 0 to 4.29497e+09"
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert main(["--report", str(tmp_path / "r.json"), "--out", str(tmp_path / "out")]) == 2
    err = _one_error(capsys)
    assert f"{tmp_path / 'r.json'}: " in err and said in err and "Error" not in err, err
    assert not (tmp_path / "out").exists()
