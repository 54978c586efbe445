"""The GPU suite (benchmarks/gpu_suite) in smoke mode: `prepare` offline, every part's stages on the CPU at tiny sizes
in one schedule, the reports' structure and values, the schedule (shares by priority, the solve's time reserved
before the evaluation, a stage that would not fit skipped, one past its allowance ended, reports written as it
goes), the failure paths (a part whose set-up raises, a stage that raises, a non-finite figure, a prepared folder
over its size limit), the 'upstream missing' path, and the defects of the first H100 run, each planted."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.gpu_suite import __main__ as suite
from benchmarks.gpu_suite import prepare as P
from benchmarks.gpu_suite.context import make_context
from benchmarks.gpu_suite.report import REPORT_JSON, REPORT_MD
from trm_kaggle.errors import TRMError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("suite") / "prepared"
    assert suite.main(["prepare", "--smoke", "--out", str(out)]) == 0
    return out


def report(folder: Path) -> dict:
    assert (folder / REPORT_MD).is_file()
    return json.loads((folder / REPORT_JSON).read_text())


def finite_numbers(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_numbers(v) for v in value)
    return True


def test_prepare_writes_the_wheel_the_datasets_and_the_commands(prepared):
    m = json.loads((prepared / "PREPARED.json").read_text())
    assert (prepared / "wheels" / m["wheels"]["trm_kaggle"]).is_file()
    assert m["wheels"]["target"]["python_version"] == "3.12"
    assert "torch" in m["wheels"]["assumed_on_gpu"] and not m["wheels"]["shipped"]  # offline: ours alone
    assert any("pydantic" in x for x in m["missing"]) and any("upstream" in x for x in m["missing"])
    assert m["upstream"] is None
    for d in ("sudoku4", "sudoku9", "arc"):
        assert (prepared / "data" / d).is_dir()
    nine = m["data"]["sudoku9"]  # the recipe stage's stand-in, never passed off as Sudoku-Extreme
    assert "not Sudoku-Extreme" in nine["source"] and nine["train"] == P.SMOKE["sudoku9_train"]
    assert len(json.loads((prepared / "data" / "unseen_challenges.json").read_text())) == P.SMOKE["unseen"]
    assert m["total_mib"] < 60
    assert m["command"].startswith("python3 -m pip install -q --no-index --no-deps")
    assert "PYTHONPATH=/tmp/site:. python3 -m benchmarks.gpu_suite run --part all --prepared" in m["command"]
    for n, c in enumerate(m["part_commands"], 1):
        assert f"python3 -m benchmarks.gpu_suite run --part {n} --prepared" in c


@pytest.mark.slow
def test_smoke_mode_runs_every_part_and_writes_sound_reports(prepared, tmp_path):
    out = tmp_path / "out"
    rc = suite.main(["run", "--part", "all", "--smoke", "--prepared", str(prepared), "--out", str(out),
                     "--upstream-dir", str(tmp_path / "no-upstream")])
    reports = {n: report(out / f"part{n}") for n in (1, 2, 3)}
    for n, d in reports.items():
        assert d["part"] == n and d["smoke"] is True
        assert d["status"] == "ok", (n, d["error"], {k: v["error"] for k, v in d["stages"].items()})
        assert d["non_finite"] == [] and finite_numbers(d["results"])
        assert d["schedule"] and all(e["status"] == "ran" for e in d["schedule"])
        assert d["budget_s"] == suite.SMOKE_BUDGET_S
    assert rc == 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 11, files  # what travels back from a GPU machine
    # the schedule: every stage in ORDER, each within what it was allowed (with its grace)
    from benchmarks.gpu_suite.schedule import ORDER, grace

    ran = [(e["part"], e["stage"]) for d in reports.values() for e in d["schedule"]]
    assert sorted(ran, key=ORDER.index) == list(ORDER) and len(ran) == len(ORDER)
    for d in reports.values():
        for e in d["schedule"]:
            assert e["seconds"] <= e["allowance_s"] + grace(e["allowance_s"])

    p1 = reports[1]["results"]
    assert p1["environment"]["device"] == "cpu" and p1["environment"]["torch"]
    assert Path(p1["environment"]["trm_kaggle_outside_the_repo"]).name == "trm_kaggle"  # a fresh import worked
    assert p1["cuda_tests"]["ok"] and "test_cuda.py" in p1["cuda_tests"]["files"]
    assert p1["cuda_tests"]["skipped"] >= 5 and p1["cuda_tests"]["failures"] == 0  # no CUDA here
    par = p1["parity"]["variants"]
    assert set(par) == {"ours eager fp32", "ours eager bf16", "ours compile fp32", "ours compile bf16"}
    assert all(v["ok"] for v in par.values())
    fp32, bf16 = par["ours eager fp32"]["errors_vs_float64"], par["ours eager bf16"]["errors_vs_float64"]
    assert 0 < fp32["logits"] < 1e-4 and fp32["grads"] < 1e-4  # float32 against float64: rounding only
    assert all(100 * fp32[k] < bf16[k] for k in ("logits", "grads"))  # bf16 keeps 8 bits: far coarser
    assert par["ours compile fp32"]["max_abs_logits"] < 1e-4 and par["ours eager bf16"]["max_abs_logits"] > 0
    sides = p1["throughput"]["sides"]
    assert set(sides) == {"ours eager fp32", "ours eager bf16", "ours compile fp32", "ours compile bf16"}
    assert all(s["examples_per_s"] > 0 and s["mfu_measured"] > 0 for s in sides.values())
    assert p1["throughput"]["flops_per_example"] > 0 and p1["throughput"]["ratios"] == {}
    prof = p1["profile"]
    assert abs(sum(prof["kernels"]["share"].values()) - 1) < 1e-6 and prof["kernels"]["ms_per_step"]["GEMM"] > 0
    assert prof["kernels"]["attention_kernels"] and prof["syncs"]["host_reads_per_step"] >= 0
    assert prof["compile"]["one block"]["cold_s"] >= 0 and prof["compile"]["apply_compile()"]["cold_s"] > 0
    skipped = {s["what"]: s["why"] for d in reports.values() for s in d["skipped"]}
    assert "upstream's code was not found" in skipped["upstream side by side"]
    assert "largest batch" in skipped and "upstream's curve" in skipped
    assert skipped["host syncs: CUDA's sync debug mode"] == "needs CUDA"

    p2 = reports[2]["results"]["learning"]["sides"]["ours"]
    assert p2["points"] and all(0.0 <= x["exact"] <= 1.0 and x["seconds"] > 0 for x in p2["points"])
    assert (out / "part2" / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rec = reports[2]["results"]["recipes"]
    assert rec["data"]["is_sudoku_extreme"] is False and rec["preset"] == "sudoku-mlp"
    assert {"upstream", "fast"} <= set(rec["recipes"]) and all(r["steps"] > 0 for r in rec["recipes"].values())
    assert all((out / "part2" / f).stat().st_size > 0 for f in rec["reports"])

    p3 = reports[3]["results"]
    ev = p3["evaluation"]
    assert ev["examples"] > 0 and ev["float32"]["examples_per_s"] > 0 and 0 < ev["float32"]["share_outside_model"] < 1
    assert ev["user"]["compiled"] and ev["user"]["dtype"] == "float32"  # a CPU this narrow: float32 is auto's pick
    agree = ev["agreement_with_float64"]
    assert agree["reference"].startswith("ours in float64") and "judgement" not in agree  # no upstream: not judged
    assert 0.99 <= agree["ours float32"]["cells"] <= 1.0
    solve = p3["solve"]
    assert solve["valid"] and solve["tasks"] == P.SMOKE["unseen"] and solve["measured_mean_s"] > 0
    assert solve["estimate_s_per_task"] > 0 and solve["plan"]["tasks"] == P.SMOKE["unseen"]
    proj = p3["projection"]
    assert all(v["hours_for_240_tasks"] > 0 for k, v in proj.items() if k not in ("assumptions", "prediction_alone"))
    alone = proj["prediction_alone"]  # the hidden set's prediction at the user-dtype evaluation's rate
    assert len(alone) == 4 and all(v["hours"] > 0 for v in alone.values())
    md = (out / "part1" / REPORT_MD).read_text()
    assert "| ours compile fp32 |" in md and "smoke mode" in md and "## Schedule" in md


@pytest.mark.parametrize("factor, caught", [(1.01, ["ours compile fp32"]),
                                            (1.2, ["ours compile fp32", "ours compile bf16"])])
def test_parity_catches_a_compiled_variant_that_computes_something_else(tmp_path, monkeypatch, factor, caught):
    """Ours compiled (the suite's one adapter, `variants.ours_compiled`) whose every net output is `factor` too large (a
    planted bug), judged against the eager run in its dtype, both measured against float64 on the same weights
    and batches: 1 % is far outside float32's rounding but inside bf16's (8 bits through the recursion), 20 %
    outside both; the eager variants pass."""
    from benchmarks.gpu_suite import part1_training as p1
    from benchmarks.gpu_suite import variants
    from benchmarks.gpu_suite.report import PartReport

    real = variants.ours_compiled

    def off(model, **kw):
        real(model, **kw)
        net = model.net
        model.net = lambda *x: net(*x) * factor  # what every recursion step calls
        return model

    monkeypatch.setattr(variants, "ours_compiled", off)
    ctx = make_context(True, str(tmp_path), str(tmp_path / "no-upstream"), "cpu")
    rep = PartReport(1, "t", True, tmp_path, 600)
    s = p1.sizes(ctx)
    s["compile_kwargs"] = {"backend": "eager"}
    with pytest.raises(RuntimeError, match=f"parity outside tolerance: {', '.join(caught)}$"):
        p1.parity(rep, ctx, s)
    res = rep.data["results"]["parity"]["variants"]
    assert [n for n, r in res.items() if not r["ok"]] == caught


def _stages(*stages):
    return lambda: list(stages)


def test_a_failing_stage_or_part_is_recorded_and_the_others_still_run(prepared, tmp_path, monkeypatch, capsys):
    import benchmarks.gpu_suite.part1_training as p1
    import benchmarks.gpu_suite.part2_learning as p2
    import benchmarks.gpu_suite.part3_evaluation as p3
    from benchmarks.gpu_suite.schedule import Stage

    def broken_setup(rep, ctx):
        raise RuntimeError("boom in part 1")

    def one_stage_fails(rep, ctx, state):
        with rep.stage("good"):
            rep.set("figure", 1.5)
        with rep.stage("bad"):
            raise ValueError("bad stage")
        with rep.stage("after"):
            rep.set("nan", float("nan"))

    def fine(rep, ctx, state):
        with rep.stage("only"):
            rep.table("t", ["a", "b"], [["x", 2.0]])

    monkeypatch.setattr(p1, "setup", broken_setup)
    monkeypatch.setattr(p2, "stages", _stages(Stage("learning", one_stage_fails, 10, 0)))
    monkeypatch.setattr(p3, "stages", _stages(Stage("evaluation", fine, 10, 0)))
    out = tmp_path / "out"
    rc = suite.main(["run", "--part", "all", "--smoke", "--prepared", str(prepared), "--out", str(out)])
    assert rc == 1
    d1, d2, d3 = (report(out / f"part{n}") for n in (1, 2, 3))
    assert d1["status"] == "failed" and d1["error"] == "RuntimeError: boom in part 1"
    assert {e["status"] for e in d1["schedule"]} == {"not run (the part failed)"}
    assert d2["status"] == "partial" and d2["stages"]["bad"]["error"] == "ValueError: bad stage"
    assert d2["stages"]["good"]["status"] == "ok" and d2["stages"]["after"]["status"] == "ok"
    assert d2["results"] == {"figure": 1.5, "nan": None} and d2["non_finite"] == ["results.nan"]
    assert d3["status"] == "ok" and d3["tables"][0]["rows"] == [["x", 2.0]]
    printed = capsys.readouterr().out
    assert "boom in part 1" in printed and "stage bad FAILED" in printed


def test_the_schedule_reserves_the_later_stages_shares_by_priority():
    """Before a stage starts, the later stages' shares are set aside, highest priority first, as far as they go
    while it keeps its least time: the evaluation cannot eat the solve's share, and a stage short of time
    takes the lowest-priority shares first."""
    from benchmarks.gpu_suite.schedule import ORDER, Planned, Stage, allowance, plan

    noop = lambda rep, ctx, state: None  # noqa: E731
    stages = {1: [Stage("environment", noop, 10, 3), Stage("throughput_best", noop, 80, 30)],
              3: [Stage("evaluation", noop, 80, 30), Stage("solve", noop, 100, 40), Stage("projection", noop, 0, 0)]}
    planned = plan(stages, 540.0)
    names = {(n, st.name) for n, part in stages.items() for st in part}
    assert [(p.part, p.stage.name) for p in planned] == [k for k in ORDER if k in names]
    assert [round(p.share_s) for p in planned] == [20, 160, 160, 200, 0]  # scaled to the budget given
    ev = next(i for i, p in enumerate(planned) if p.stage.name == "evaluation")
    assert allowance(planned, ev, 400.0, 30) == 200.0  # all but the solve's share
    assert allowance(planned, ev, 230.0, 30) == 30.0  # the solve's 200 s stay reserved
    assert allowance(planned, ev, 220.0, 30) == 220.0  # too little for both: the solve's share is not reserved
    later = [Planned(1, Stage("a", noop, 0, 0), 0.0), Planned(1, Stage("b", noop, 0, 0), 50.0),
             Planned(1, Stage("c", noop, 0, 0), 30.0)]
    assert allowance(later, 0, 90.0, 20) == 40.0  # b reserved; c, the lowest priority, is not


def _run_stages(tmp_path, stages: dict, budget: float, smoke: bool = False):
    from benchmarks.gpu_suite import schedule
    from benchmarks.gpu_suite.report import PartReport

    ctx = make_context(smoke, str(tmp_path), str(tmp_path / "no-upstream"), "cpu", say=lambda m: None)
    reports = {n: PartReport(n, "t", smoke, tmp_path / f"part{n}", budget) for n in stages}
    planned = schedule.plan(stages, budget)
    log = schedule.run(planned, reports, {n: {} for n in stages}, ctx, budget, say=lambda m: None)
    return log, reports


def test_a_slow_evaluation_leaves_the_solve_its_share(tmp_path, monkeypatch):
    """The first H100 run's part 3: the solve got whatever the evaluation left (10 s: fallback answers). Now an
    evaluation that uses every second it is given still leaves the solve its share of the budget."""
    from benchmarks.gpu_suite.schedule import Stage

    got = {}

    def greedy_evaluation(rep, ctx, state):
        got["evaluation"] = rep.left()
        while rep.left() > 0:  # as a stage that measures while its allowance lasts
            time.sleep(0.02)

    def solve(rep, ctx, state):
        got["solve"] = rep.left()

    log, _ = _run_stages(tmp_path, {3: [Stage("evaluation", greedy_evaluation, 75, 0),
                                        Stage("solve", solve, 100, 0)]}, budget=3.5)
    assert [e["status"] for e in log] == ["ran", "ran"]
    assert got["evaluation"] == pytest.approx(1.5, abs=0.1)  # its own share: the solve's 2 s are reserved
    assert got["solve"] >= 1.9


def test_a_stage_that_would_not_fit_is_skipped_and_one_past_its_allowance_is_ended(tmp_path, monkeypatch):
    from benchmarks.gpu_suite import schedule
    from benchmarks.gpu_suite.schedule import Stage

    monkeypatch.setattr(schedule, "grace", lambda allowance: 0.5)
    ran = []

    def stuck(rep, ctx, state):
        with rep.stage("stuck"):
            time.sleep(30)  # a compile that does not return

    def after(rep, ctx, state):
        ran.append("after")
        with rep.stage("after"):
            rep.set("ok", True)

    t = time.monotonic()
    log, reports = _run_stages(tmp_path, {1: [Stage("environment", stuck, 10, 0),
                                              Stage("throughput_best", after, 10, 0),
                                              Stage("profile", after, 10, 60)]}, budget=9.0)
    # 3 s a share: the stuck stage ends at its allowance and grace (3.5 s), which leaves the next one 2.5 s, not
    # the 1.5 s that a loaded machine's late end of the first stage (a budget of 6 s) took below its 1 s floor
    assert time.monotonic() - t < 15
    assert [e["status"] for e in log] == ["ended at its allowance", "ran", "skipped"]
    d = reports[1].finish()
    assert d["stages"]["stuck"]["error"] == "stage environment ran past its allowance"
    assert d["results"] == {"ok": True} and ran == ["after"]
    assert "stage profile" in {s["what"] for s in d["skipped"]} and d["status"] == "partial"
    assert "would not fit" in next(s["why"] for s in d["skipped"] if s["what"] == "stage profile")


def test_no_grace_carries_the_run_past_its_budget(tmp_path, monkeypatch):
    """A stage's grace past its allowance ends at the budget plus OVERRUN_S: the lend's command ends in time."""
    from benchmarks.gpu_suite import schedule
    from benchmarks.gpu_suite.schedule import Stage

    monkeypatch.setattr(schedule, "grace", lambda allowance: 100.0)
    monkeypatch.setattr(schedule, "OVERRUN_S", 0.5)

    def stuck(rep, ctx, state):
        time.sleep(30)

    t = time.monotonic()
    log, _ = _run_stages(tmp_path, {1: [Stage("environment", stuck, 10, 0)]}, budget=2.0)
    assert 2.4 < time.monotonic() - t < 6
    assert log[0]["status"] == "ended at its allowance"


def test_each_report_is_written_as_the_stages_go(tmp_path):
    """A command killed from outside (the lend's time limit) leaves the reports of the stages done."""
    from benchmarks.gpu_suite.schedule import Stage

    seen = {}

    def first(rep, ctx, state):
        with rep.stage("first"):
            rep.set("first", 1)

    def second(rep, ctx, state):
        seen.update(report(rep.out))  # what a kill here would leave

    _run_stages(tmp_path, {1: [Stage("environment", first, 1, 0), Stage("throughput_best", second, 1, 0)]}, 10.0)
    assert seen["status"] == "running" and seen["results"] == {"first": 1}
    assert [(e["stage"], e["status"]) for e in seen["schedule"]] == [("environment", "ran"),
                                                                     ("throughput_best", "running")]


def test_the_upstream_folder_is_checked(tmp_path):
    ctx = make_context(True, str(tmp_path), str(tmp_path / "absent"), "cpu")
    assert ctx.upstream is None and "not found" in ctx.upstream_why
    (tmp_path / "up").mkdir()
    ctx = make_context(True, str(tmp_path), str(tmp_path / "up"), "cpu")
    assert ctx.upstream is None and "models/recursive_reasoning/trm.py" in ctx.upstream_why


def test_prepare_refuses_a_folder_over_its_size_limit(tmp_path, monkeypatch, capsys):
    def fake_wheels(dest, *a, **k):
        dest.mkdir(parents=True)
        (dest / "big.whl").write_bytes(b"0" * 2**20)
        return {}

    monkeypatch.setattr(P, "wheels", fake_wheels)
    monkeypatch.setattr(P, "datasets", lambda dest, sizes, say: {})
    out = tmp_path / "prepared"
    assert suite.main(["prepare", "--smoke", "--out", str(out), "--max-mib", "0.5"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"error: the prepared folder would hold 1\.0 MiB, over the 0\.5 MiB limit", err)
    assert not out.exists() and not list(tmp_path.glob("prepared*"))  # nothing written


def test_run_without_a_prepared_folder_says_so(tmp_path):
    out = tmp_path / "out"
    assert suite.main(["run", "--part", "3", "--smoke", "--prepared", str(tmp_path / "none"), "--out", str(out)]) == 1
    d = report(out)
    assert d["status"] == "failed" and "run `python -m benchmarks.gpu_suite prepare` first" in d["error"]
    assert {e["status"] for e in d["schedule"]} == {"not run (the part failed)"}


def test_every_test_that_needs_cuda_is_marked_cuda():
    """A test file that puts tensors on a CUDA device or skips without CUDA marks its tests `cuda`, so that
    `pytest -m cuda` (and the GPU suite's part 1) runs every one of them."""
    from benchmarks.gpu_suite.part1_training import CUDA_MARK, cuda_test_files

    needs = re.compile(r"""torch\.\w+\([^()]*device=["']cuda["']|\.cuda\(\)|skipif\(not[^)]*cuda\.is_available""")
    unmarked = [p.name for p in sorted((REPO / "tests").glob("test_*.py"))
                if needs.search(p.read_text()) and not CUDA_MARK.search(p.read_text())]
    assert unmarked == []
    assert {"test_cuda.py", "test_adam_atan2.py"} <= {p.name for p in cuda_test_files()}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_prepare_exports_upstream_code_from_a_checkout(tmp_path):
    """A git checkout is exported at the pinned commit when it has it, else at its HEAD (said so); only the code
    and configs travel (not upstream's data files); a stub wandb module is added."""
    src = tmp_path / "upstream"
    (src / "models" / "recursive_reasoning").mkdir(parents=True)
    (src / "models" / "recursive_reasoning" / "trm.py").write_text("X = 1\n")
    (src / "pretrain.py").write_text("import wandb\n")
    (src / "kaggle").mkdir()
    (src / "kaggle" / "big.json").write_text("{}")
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (src / "pretrain.py").write_text("uncommitted\n")  # the export takes the commit, not the work tree
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    manifest = {"missing": []}
    info = P.copy_upstream(str(src), tmp_path / "out", manifest, say=lambda m: None)
    out = tmp_path / "out"
    assert info["commit"] == head and info["pinned"] is False
    assert any(P.UPSTREAM_COMMIT[:12] in m and head[:12] in m for m in manifest["missing"])
    assert (out / "pretrain.py").read_text() == "import wandb\n" and not (out / "kaggle").exists()
    assert "def init" in (out / "wandb" / "__init__.py").read_text()
    # not a checkout: copied as it is, commit unknown
    shutil.rmtree(src / ".git")
    manifest = {"missing": []}
    info = P.copy_upstream(str(src), tmp_path / "out2", manifest, say=lambda m: None)
    assert info["commit"] is None and (tmp_path / "out2" / "pretrain.py").read_text() == "uncommitted\n"
    with pytest.raises(TRMError, match="no models/recursive_reasoning/trm.py"):
        P.copy_upstream(str(tmp_path / "out2" / "wandb"), tmp_path / "out3", {"missing": []}, say=lambda m: None)


def test_upstreams_attention_gets_the_layout_its_view_needs(monkeypatch):
    """On CUDA, float64 attention runs torch's math kernel, whose (B, H, S, D) output is a plain contiguous
    tensor; upstream's attention moves the heads behind the positions and calls `.view`, which fails there (the
    first H100 run's parity died on it). Simulated here with an attention that returns that layout, in a stand-in
    for upstream's models/layers.py (its call order: attention, heads behind positions, view): the harness's
    patch, made at import time in this process only, lays the output out as the other kernels do."""
    import types

    import torch
    import torch.nn.functional as F

    from benchmarks import bench_train_cpu as B

    def math_kernel(q, k, v, **kw):
        return F.scaled_dot_product_attention(q, k, v, **kw).contiguous()

    layers = types.ModuleType("models.layers")
    layers.scaled_dot_product_attention = math_kernel

    def attend(q, k, v):
        out = layers.scaled_dot_product_attention(q, k, v)
        b, h, s, d = out.shape
        return out.transpose(1, 2).view(b, s, h * d)

    monkeypatch.setitem(sys.modules, "models", types.ModuleType("models"))
    monkeypatch.setitem(sys.modules, "models.layers", layers)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        attend(q, k, v)
    B.patch_upstream_attention()
    B.patch_upstream_attention()  # once is enough: not wrapped twice
    assert layers.scaled_dot_product_attention.flash_layout
    want = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 5, 12)
    assert torch.equal(attend(q, k, v), want)
    # an output already laid out so (the flash, efficient, cuDNN and CPU kernels) is passed on, not copied
    laid_out = torch.randn(2, 5, 3, 4).transpose(1, 2)
    assert B.flash_layout(lambda *a, **kw: laid_out)(q, k, v) is laid_out


def test_the_bench_glue_loads_ours_on_the_device(prepared, tmp_path, monkeypatch):
    """bench_evaluate.load_ours loaded on the CPU whatever the device (the first H100 run's evaluation died on a
    device mismatch): the device is passed to the loader. The loader is watched (no GPU here): it is asked for
    `cuda:1` and loads on the CPU."""
    from benchmarks import bench_evaluate as E
    from trm_kaggle.data.format import load_metadata

    asked = []
    real = E.load_model_for_dataset

    def watched(export_dir, dataset, device="cpu"):
        asked.append(device)
        return real(export_dir, dataset, "cpu")

    monkeypatch.setattr(E, "load_model_for_dataset", watched)
    ds = prepared / "data" / "arc"
    arch = E.make_arch(32, 2, 2, 2, 4)
    base = E.random_model(arch, load_metadata(ds, "test").num_puzzle_identifiers, seed=0)
    loaded = E.load_ours(base, arch, ds, tmp_path / "export", "cuda:1")
    assert asked == ["cuda:1"] and not loaded.training


def test_evaluation_is_judged_against_float64_and_a_one_percent_weight_change_breaks_the_bound(prepared, tmp_path):
    """Ours and upstream are each measured against a float64 run of the same weights (cells, rows, top-2 votes
    agreeing), not against each other: ours passes when its disagreement is within the bound of upstream's,
    identical or not. Here a float32 run of the same weights stands in for upstream (no upstream code in
    tests) and our float64 run for the reference; ours with every weight moved by 1 % fails the bound."""
    import copy

    import torch

    from benchmarks import bench_evaluate as E
    from benchmarks import bench_train_cpu as B
    from benchmarks.gpu_suite import part3_evaluation as p3
    from trm_kaggle.data.format import load_metadata

    ds = prepared / "data" / "arc"
    arch = E.make_arch(32, 2, 2, 2, 4)
    base = E.random_model(arch, load_metadata(ds, "test").num_puzzle_identifiers, seed=0)
    ours = E.load_ours(base, arch, ds, tmp_path / "export")
    reference = E.run_ours(B.float64_model(ours), ds, 8)
    standin = p3.agreement(E.run_ours(copy.deepcopy(ours), ds, 8), reference)
    judged = p3.judge_agreement(p3.agreement(E.run_ours(ours, ds, 8), reference), standin)
    assert judged["ok"], judged
    planted = copy.deepcopy(ours)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in planted.parameters():
            p.add_(0.01 * p.abs().mean() * torch.randn(p.shape, generator=g))
    bad = p3.agreement(E.run_ours(planted, ds, 8), reference)
    judged = p3.judge_agreement(bad, standin)
    assert not judged["ok"] and not judged["figures"]["cells"]["ok"], judged
    assert 0.9 < bad["cells"] < 1.0  # most cells still agree: a share, not an identity, decides
    # not identity: a side that differs from upstream's predictions passes when it is as close to float64
    near = {"cells": 0.996, "rows": 0.7, "votes": 0.9}
    assert p3.judge_agreement({"cells": 0.995, "rows": 0.6, "votes": 0.85}, near)["ok"]


def test_the_one_lend_schedule_fills_480_seconds_as_docs_gpu_md_says():
    """The stages' shares add up to the 480 s budget, and docs/gpu.md's table gives each stage's part, share and
    place in the order as the code does."""
    import importlib

    from benchmarks.gpu_suite.schedule import FULL_BUDGET_S, ORDER

    shares = {}
    for n, name in suite.PARTS.items():
        for st in importlib.import_module(f"benchmarks.gpu_suite.{name}").stages():
            shares[(n, st.name)] = st.share
    assert sum(shares.values()) == FULL_BUDGET_S == suite.BUDGET_S and set(shares) == set(ORDER)
    text = (REPO / "docs" / "gpu.md").read_text()
    rows = re.findall(r"^\| (\w+) \| (\d) \| (\d+) \|", text, re.M)
    assert [(int(p), name) for name, p, _ in rows] == list(ORDER)
    assert {(int(p), name): float(share) for name, p, share in rows} == shares


def test_the_fused_rows_compute_the_same_weights_another_way_and_run_on_cuda_only():
    """The fused Triton and float8 rows of the suite's table: the variant keeps the model's weights, changes how
    its blocks compute (arch.kernels=triton, arch.fp8) and compiles it through the one adapter; they are marked
    CUDA-only, so a CPU run lists them as not measured instead of failing."""
    import torch

    from benchmarks.gpu_suite import variants
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model.compiling import is_compiled
    from trm_kaggle.model.trm import TinyRecursiveModel

    for name, fp8 in (("ours fused compile bf16", "off"), ("ours fused fp8 compile bf16", "nograd")):
        v = variants.variant(name)
        assert v.cuda_only and v.dtype == "bfloat16" and v.baseline == "ours eager bf16"
        model = TinyRecursiveModel(ArchConfig(hidden_size=32, num_heads=2, puzzle_emb_len=1), 8, 5, 3)
        before = {k: t.clone() for k, t in model.state_dict().items()}
        made = v.make(model)
        assert (made.arch.kernels, made.arch.fp8) == ("triton", fp8) and is_compiled(made)
        assert all(block.dispatch is not None for block in made.layers)
        assert all(torch.equal(made.state_dict()[k], t) for k, t in before.items())
    assert not any(v.cuda_only for v in variants.VARIANTS if v.name in (variants.BEST, *variants.EAGER.values()))


def _harness_report(curves: dict) -> dict:
    """A harness report (benchmarks/bench_recipes.py's JSON as it stands after its runs) of one seed per recipe,
    curves of (step, seconds, accuracy) with batch 768."""
    return {"configs": {"upstream": {"epochs": 50000, "global_batch_size": 768, "device": "cuda", "compile": "auto",
                                     "eval_interval": 10}},
            "curves": [{"recipe": r, "stopped_by": "the evaluation callback",
                        "points": [{"step": st, "examples": 768 * st, "flops": 1e12 * st, "seconds": sec,
                                    "accuracy": acc} for st, sec, acc in pts]} for r, pts in curves.items()]}


def test_the_recipe_stage_reports_step_rates_step_ratios_and_what_one_gpu_hour_asks(prepared, tmp_path, monkeypatch):
    """The recipe stage's figures from the harness's curves: the seconds per step between the first and last
    evaluation (the start and compile left out), the steps to each target and the step-count ratio against
    upstream's (None where either did not reach it), and the step ratio a recipe needs for upstream's accuracy
    in one GPU-hour; a prepared folder without the 9x9 set is a skip that says why; a stage ended at its
    allowance still reports the runs the harness saved."""
    import benchmarks.gpu_suite.part2_learning as p2
    from benchmarks.gpu_suite.report import PartReport

    report = _harness_report({"upstream": [(10, 30.0, 0.0), (20, 40.0, 0.2), (40, 60.0, 0.6)],
                              "fast": [(10, 25.0, 0.3), (20, 45.0, 0.4), (30, 65.0, 0.4)]})
    fig = p2.recipe_figures(report, (0.1, 0.5))
    assert fig["upstream"]["seconds_per_step"] == pytest.approx(1.0)  # (60 - 30) / (40 - 10)
    assert fig["fast"]["seconds_per_step"] == pytest.approx(2.0) and fig["fast"]["steps_per_gpu_hour"] == 1800
    assert fig["upstream"]["steps_to"] == {"0.1": 20, "0.5": 40} and fig["fast"]["steps_to"] == {"0.1": 10, "0.5": None}
    assert fig["fast"]["step_ratio"] == {"0.1": 0.5, "0.5": None} and "step_ratio" not in fig["upstream"]
    assert fig["fast"]["flops_per_s"] == pytest.approx(20e12 / 40)

    rep = PartReport(2, "t", True, tmp_path / "out", 100)
    p2.summarise_recipes(rep, report, prepared / "data" / "sudoku9", 30.0, (0.1, 0.5))
    res = rep.data["results"]["recipes"]
    schedule = 50000 * P.SMOKE["sudoku9_train"] // 768  # upstream's schedule on this set: epochs x puzzles / batch
    assert res["projection"]["schedule_steps"] == schedule
    assert res["projection"]["upstream_schedule_gpu_hours"] == pytest.approx(schedule / 3600)
    assert res["projection"]["fast"]["step_ratio_needed"] == pytest.approx(1800 / schedule)
    assert res["data"]["is_sudoku_extreme"] is False and res["data"]["train_puzzles"] == P.SMOKE["sudoku9_train"]
    assert "NOT Sudoku-Extreme" in rep.data["tables"][0]["title"]
    assert rep.data["tables"][0]["rows"][1][-1] == "0.1: 0.50x"

    bare = tmp_path / "bare"
    (bare / "data").mkdir(parents=True)
    ctx = make_context(True, str(bare), str(tmp_path / "no-upstream"), "cpu", say=lambda m: None)
    rep = PartReport(2, "t", True, tmp_path / "out2", 100)
    p2.recipes(rep, ctx, p2.sizes(ctx)["recipes"])
    assert rep.data["skipped"][0]["what"] == "recipes at the paper's scale" and "prepare" in rep.data["skipped"][0]["why"]

    # ended at its allowance after the harness saved one run: that run is still summarised, and the stage ends
    def cut_short(data, names, *, out, name, **kw):
        out.mkdir(parents=True, exist_ok=True)
        (out / f"bench_recipes_{name}.json").write_text(json.dumps(_harness_report({"upstream": [(10, 30.0, 0.0),
                                                                                                 (20, 40.0, 0.2)]})))
        raise StageTimeout("stage recipes ran past its allowance")

    import benchmarks.bench_recipes as br
    from benchmarks.gpu_suite.schedule import StageTimeout

    ctx = make_context(True, str(prepared), str(tmp_path / "no-upstream"), "cpu", say=lambda m: None)
    rep = PartReport(2, "t", True, tmp_path / "out3", 100)
    monkeypatch.setattr(br, "paper_scale", cut_short)
    with pytest.raises(StageTimeout):
        p2.recipes(rep, ctx, p2.sizes(ctx)["recipes"])
    assert rep.data["results"]["recipes"]["recipes"]["upstream"]["seconds_per_step"] == pytest.approx(1.0)
    assert any("ended at the stage's allowance" in n for n in rep.data["notes"])


@pytest.mark.slow
def test_the_recipe_stage_trains_every_recipe_on_the_prepared_9x9_set_on_a_cpu(prepared, tmp_path, monkeypatch):
    """The stage as a GPU runs it, on the CPU at tiny sizes: upstream's recipe, `fast` and `muon` trained by the
    harness with `sudoku-mlp`'s settings on the prepared 9x9 set (named as generated, not Sudoku-Extreme, in its
    files), the same seconds each; a target of 0 is reached at the first evaluation by every recipe, at the same
    step, so its step-count ratio is 1."""
    import benchmarks.gpu_suite.part2_learning as p2
    from benchmarks.gpu_suite.report import PartReport

    ctx = make_context(True, str(prepared), str(tmp_path / "no-upstream"), "cpu", say=lambda m: None)
    s = {**p2.sizes(ctx)["recipes"], "targets": (0.0, p2.PAPER_ACCURACY)}
    rep = PartReport(2, "t", True, tmp_path / "out", 100)
    rep.begin(100)
    p2.recipes(rep, ctx, s)
    assert rep.data["stages"]["recipes"]["status"] == "ok", rep.data["stages"]["recipes"]
    res = rep.data["results"]["recipes"]
    assert list(res["recipes"]) == ["upstream", "fast", "muon-sic"]
    for name, r in res["recipes"].items():
        assert r["steps"] > 0 and r["seconds_per_step"] > 0 and 0.0 <= r["best_exact"] <= 1.0
        assert r["steps_to"]["0.0"] == res["recipes"]["upstream"]["steps_to"]["0.0"] > 0
    assert res["recipes"]["fast"]["step_ratio"]["0.0"] == 1.0 and res["recipes"]["muon-sic"]["step_ratio"]["0.0"] == 1.0
    harness = json.loads((tmp_path / "out" / "bench_recipes_sudoku9-generated.json").read_text())
    assert harness["task"] == "sudoku9-generated" and harness["configs"]["muon-sic"]["optimizer"] == "muon"
    assert harness["configs"]["muon-sic"]["arch"]["swiglu_norm"] and harness["configs"]["muon-sic"]["muon_lr"] == 0.02
    assert harness["configs"]["fast"]["curriculum"]["stages"] and harness["configs"]["upstream"]["arch"]["mlp_t"]
    md = (tmp_path / "out" / "bench_recipes_sudoku9-generated.md").read_text()
    assert md.startswith("# Time to accuracy: sudoku9-generated") and "extreme" not in md.lower()


def test_upstreams_model_runs_through_our_rollout_with_its_nested_carry(prepared, tmp_path):
    """Our rollout keeps our `Carry` between calls, decodes stopped rows with `decode` and asks for no logits;
    upstream's ACT model nests z_H/z_L in an inner carry and always returns logits (the H200 run's evaluation
    died on `logits=`). A shim with upstream's carry layout around our model, behind `UpstreamForEvaluate`,
    must predict exactly what our model predicts."""
    from dataclasses import dataclass

    import torch

    from benchmarks import bench_evaluate as E
    from benchmarks.gpu_suite import part3_evaluation as p3
    from trm_kaggle.data.format import load_metadata
    from trm_kaggle.model import Carry

    @dataclass
    class InnerCarry:  # upstream's TinyRecursiveReasoningModel_ACTV1InnerCarry
        z_H: torch.Tensor
        z_L: torch.Tensor

    @dataclass
    class UpCarry:  # upstream's TinyRecursiveReasoningModel_ACTV1Carry
        inner_carry: InnerCarry
        steps: torch.Tensor
        halted: torch.Tensor
        current_data: dict

    def up(c: Carry) -> UpCarry:
        return UpCarry(InnerCarry(c.z_H, c.z_L), c.steps, c.halted, c.current_data)

    class Inner(torch.nn.Module):  # upstream's inner model: lm_head over every position, prefix cut after
        def __init__(self, ours):
            super().__init__()
            self.lm_head, self.puzzle_emb_len = ours.lm_head, ours.prefix_len

        def empty_carry(self, batch_size: int) -> InnerCarry:
            return InnerCarry(torch.empty(batch_size, 0), torch.empty(batch_size, 0))

    class Model(torch.nn.Module):
        def __init__(self, ours):
            super().__init__()
            self.ours, self.inner = ours, Inner(ours)

        def forward(self, carry: UpCarry, batch: dict):
            new, out = self.ours(Carry(carry.inner_carry.z_H, carry.inner_carry.z_L, carry.steps, carry.halted,
                                       carry.current_data), batch)  # logits always, as upstream
            return up(new), out

    class Head(torch.nn.Module):  # upstream's ACTLossHead: initial_carry and .model
        def __init__(self, ours):
            super().__init__()
            self.model = Model(ours)

        def initial_carry(self, batch: dict) -> UpCarry:
            return up(self.model.ours.initial_carry(batch))

    ds = prepared / "data" / "arc"
    meta = load_metadata(ds, "test")
    arch = E.make_arch(32, 2, 2, 2, 4)
    ours = E.load_ours(E.random_model(arch, meta.num_puzzle_identifiers, seed=0), arch, ds, tmp_path / "x")
    shim = p3.UpstreamForEvaluate(Head(ours).eval(), arch, meta.seq_len, meta.vocab_size,
                                  meta.num_puzzle_identifiers)
    a, b = E.run_ours(ours, ds, 8), E.run_ours(shim, ds, 8)
    assert a["n"] == b["n"] > 0
    assert (a["result"].predictions.tokens == b["result"].predictions.tokens).all()


def test_a_cuda_test_run_cut_by_its_time_limit_says_what_passed_and_where_it_was():
    """`pytest -v` prints each test id, then its outcome when it ends: the H200 run's cut stage said only "timed
    out"; the outcomes printed before the cut and the test still running are read from the output."""
    from benchmarks.gpu_suite.part1_training import running_test, verbose_outcomes

    out = ("collecting ... collected 9 items / 2 deselected / 7 selected\n\n"
           "tests/test_a.py::test_one SKIPPED [ 14%]\n"
           "tests/test_a.py::test_two[True] PASSED [ 28%]\n"
           "tests/test_b.py::test_three FAILED [ 42%]\n"
           "tests/test_b.py::test_four ")
    assert verbose_outcomes(out) == ["SKIPPED", "PASSED", "FAILED"]
    assert running_test(out) == "tests/test_b.py::test_four"
    assert running_test(out.rsplit("\n", 1)[0]) is None  # every printed test ended


def test_pack_puts_every_report_in_one_archive_outside_out(tmp_path):
    """A lend brings back at most 8 files and the three parts write ten: `--pack` archives --out whole; an
    archive inside --out (it would pack itself) or not named .tar.gz is refused before anything runs."""
    import tarfile

    out = tmp_path / "out"
    (out / "part2").mkdir(parents=True)
    (out / "part2" / "gpu_report.md").write_text("# part 2\n")
    suite.pack(out, tmp_path / "back" / "reports.tar.gz", say=lambda m: None)
    with tarfile.open(tmp_path / "back" / "reports.tar.gz") as tar:
        assert tar.extractfile("out/part2/gpu_report.md").read() == b"# part 2\n"
    assert [p.name for p in (tmp_path / "back").iterdir()] == ["reports.tar.gz"]  # no temporary file left
    for bad in (out / "r.tar.gz", tmp_path / "r.zip"):
        assert suite.main(["run", "--part", "3", "--smoke", "--out", str(out), "--pack", str(bad),
                           "--prepared", str(tmp_path / "none")]) == 2
        assert not bad.exists()


def test_run_refuses_an_out_or_pack_in_the_prepared_folder_before_any_work(prepared, monkeypatch, capsys):
    """`run --out` (or `--pack`) inside the prepared folder it reads, that folder itself, or a folder holding it,
    is one error line before any work: a report written there kept `prepare` from replacing the folder."""
    import benchmarks.gpu_suite.part3_evaluation as p3
    from benchmarks.gpu_suite.schedule import Stage

    ran = []
    monkeypatch.setattr(p3, "setup", lambda rep, ctx: ran.append("setup") or {})
    monkeypatch.setattr(p3, "teardown", lambda state: None)
    monkeypatch.setattr(p3, "stages", _stages(Stage("evaluation", lambda rep, ctx, state: None, 10, 0)))
    before = sorted(p.relative_to(prepared.parent) for p in prepared.parent.rglob("*"))
    # and what was refused only after the whole suite, or not at all: an empty --out (the current folder), a --pack
    # that is a folder, a report of another run that --pack would carry beside this one's, a budget of nan
    (prepared.parent / "a.tar.gz").mkdir(exist_ok=True)
    (prepared.parent / "earlier" / "part1").mkdir(parents=True, exist_ok=True)
    (prepared.parent / "earlier" / "part1" / "gpu_report.json").write_text("{}")
    before = sorted(p.relative_to(prepared.parent) for p in prepared.parent.rglob("*"))
    for where, said in [(["--out", str(prepared)], "is also the input --prepared"),
                        (["--out", str(prepared / "data")], "is inside the input --prepared"),
                        (["--out", str(prepared.parent)], "holds the input --prepared"),
                        (["--out", str(prepared.parent / "elsewhere"), "--pack", str(prepared / "data" / "r.tar.gz")],
                         "--pack"),
                        (["--out", ""], "--out is empty"),
                        (["--out", str(prepared.parent / "o"), "--pack", str(prepared.parent / "a.tar.gz")],
                         "is a folder"),
                        (["--out", str(prepared.parent / "earlier")], "holds the report of another run"),
                        (["--out", str(prepared.parent / "o"), "--budget", "nan"], "--budget nan: must be from")]:
        assert suite.main(["run", "--part", "3", "--smoke", "--prepared", str(prepared), *where]) == 2, where
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and said in err[0], err
    assert ran == [] and sorted(p.relative_to(prepared.parent) for p in prepared.parent.rglob("*")) == before


def _stopped_suite(tmp_path, patch: str, argv: list[str], started: str, signum):
    """`python -m benchmarks.gpu_suite ARGV` (with `patch` run first: the slow work replaced by a wait), sent
    `signum` once it printed `started`; returns (status, stderr)."""
    import os

    script = (f"import runpy, sys, time\n{patch}\nsys.argv = ['gpu_suite'] + {argv!r}\n"
              "runpy.run_module('benchmarks.gpu_suite', run_name='__main__', alter_sys=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        for line in proc.stdout:
            if line.strip() == started:
                break
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_prepare_stopped_says_so_in_one_line_and_leaves_no_partial_folder(tmp_path, signame):
    """Ctrl-C was a traceback and SIGTERM ended without a word, leaving OUT.partial-PID and its record; now the
    stop is one `interrupted` line with status 130 or 143, and the partial folder and its record are gone."""
    import signal

    patch = ("import benchmarks.gpu_suite.prepare as P\n"
             "def datasets(dest, sizes, say):\n"
             "    dest.mkdir(parents=True)\n"
             "    (dest / 'half.json').write_text('{}')\n"
             "    print('building', flush=True)\n"
             "    for _ in range(1200): time.sleep(0.1)  # a stop before a sleep begins is taken\n"
             "P.wheels = lambda dest, *a, **k: dest.mkdir(parents=True) or {}\n"
             "P.datasets = datasets\n")
    signum = getattr(signal, signame)
    rc, err = _stopped_suite(tmp_path, patch, ["prepare", "--smoke", "--out", "q"], "building", signum)
    assert rc == 128 + signum, err
    why = "stopped by SIGTERM; " if signame == "SIGTERM" else ""
    assert err.strip().splitlines()[-1] == (f"interrupted: {why}q is as it was (the partial copy was removed); run "
                                            "prepare again") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no q, no q.partial-PID, no record


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_run_stopped_says_so_and_its_report_says_stopped_not_running(tmp_path, signame):
    """A stopped `run` left gpu_report.md saying `Status: **running**` for a process gone (SIGTERM: without a word;
    Ctrl-C: a traceback after `reports packed`). Now its report says `stopped`, the stage it was in and the stages
    that did not run, the archive carries it back, and the stop is one line with status 130 or 143."""
    import signal
    import tarfile

    patch = ("import benchmarks.gpu_suite.part3_evaluation as p3\n"
             "from benchmarks.gpu_suite.schedule import Stage\n"
             "def slow(rep, ctx, state):\n"
             "    with rep.stage('evaluation'):\n"
             "        print('evaluating', flush=True)\n"
             "        for _ in range(1200): time.sleep(0.1)  # a stop before a sleep begins is taken\n"
             "p3.setup = lambda rep, ctx: {}\n"
             "p3.teardown = lambda state: None\n"
             "p3.stages = lambda: [Stage('evaluation', slow, 50, 0), Stage('solve', lambda *a: None, 50, 0)]\n")
    signum = getattr(signal, signame)
    argv = ["run", "--part", "3", "--smoke", "--prepared", "none", "--out", "out", "--pack", "back/r.tar.gz"]
    rc, err = _stopped_suite(tmp_path, patch, argv, "evaluating", signum)
    assert rc == 128 + signum, err
    why = "stopped by SIGTERM; " if signame == "SIGTERM" else ""
    assert err.strip().splitlines()[-1] == (f"interrupted: {why}the reports say what ran and what did not: "
                                            f"out/{REPORT_MD}") and "Traceback" not in err
    d = report(tmp_path / "out")
    assert d["status"] == "stopped" and d["stages"]["evaluation"]["status"] == "stopped"
    assert [(e["stage"], e["status"]) for e in d["schedule"]] == [("evaluation", "stopped"),
                                                                  ("solve", "not run (the command was stopped)")]
    assert "during stage evaluation" in d["error"] and "not run: solve" in d["error"]
    assert "Status: **stopped**" in (tmp_path / "out" / REPORT_MD).read_text()
    with tarfile.open(tmp_path / "back" / "r.tar.gz") as tar:
        assert json.load(tar.extractfile(f"out/{REPORT_JSON}"))["status"] == "stopped"
