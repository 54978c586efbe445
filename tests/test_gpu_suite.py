"""The GPU suite (benchmarks/gpu_suite) in smoke mode: `prepare` offline, every part on the CPU at tiny sizes, the
reports' structure and values, the failure paths (a part that raises, a stage that raises, a non-finite figure,
a prepared folder over its size limit) and the 'upstream missing' path."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
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
    for d in ("sudoku4", "arc"):
        assert (prepared / "data" / d).is_dir()
    assert len(json.loads((prepared / "data" / "unseen_challenges.json").read_text())) == P.SMOKE["unseen"]
    assert m["total_mib"] < 60
    for n, c in enumerate(m["commands"], 1):
        assert c.startswith("python3 -m pip install -q --no-index --no-deps")
        assert f"PYTHONPATH=/tmp/site:. python3 -m benchmarks.gpu_suite run --part {n} --prepared" in c


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
        assert d["seconds"] <= d["cap_s"]
    assert rc == 0

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
    skipped = {s["what"]: s["why"] for d in reports.values() for s in d["skipped"]}
    assert "upstream's code was not found" in skipped["upstream side by side"]
    assert "largest batch" in skipped and "upstream's curve" in skipped

    p2 = reports[2]["results"]["learning"]["sides"]["ours"]
    assert p2["points"] and all(0.0 <= x["exact"] <= 1.0 and x["seconds"] > 0 for x in p2["points"])
    assert (out / "part2" / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    p3 = reports[3]["results"]
    ev = p3["evaluation"]
    assert ev["examples"] > 0 and ev["ours_end_to_end_examples_per_s"] > 0 and ev["deterministic"]
    assert 0 < ev["share_outside_model"] < 1
    solve = p3["solve"]
    assert solve["valid"] and solve["tasks"] == P.SMOKE["unseen"] and solve["measured_mean_s"] > 0
    assert solve["estimate_s_per_task"] > 0 and solve["plan"]["tasks"] == P.SMOKE["unseen"]
    proj = p3["projection"]
    assert all(v["hours_for_240_tasks"] > 0 for k, v in proj.items() if k != "assumptions")
    assert not (out / "part3" / "_work").exists()  # its scratch is removed
    md = (out / "part1" / REPORT_MD).read_text()
    assert "| ours compile fp32 |" in md and "smoke mode" in md


@pytest.mark.parametrize("factor, caught", [(1.01, ["ours compile fp32"]),
                                            (1.2, ["ours compile fp32", "ours compile bf16"])])
def test_parity_catches_a_compiled_variant_that_computes_something_else(tmp_path, monkeypatch, factor, caught):
    """A compiled net whose every output is `factor` too large (a planted bug), judged against the eager run in
    its dtype, both measured against float64 on the same weights and batches: 1 % is far outside float32's
    rounding but inside bf16's (8 bits through the recursion), 20 % outside both; the eager variants pass."""
    from benchmarks import bench_train_cpu as B
    from benchmarks.gpu_suite import part1_training as p1
    from benchmarks.gpu_suite.report import PartReport

    real = B.Ours

    class OffWhenCompiled(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            if a[2]:  # compile_net
                net = self.model._compiled_net
                self.model._compiled_net = lambda *x: net(*x) * factor

    monkeypatch.setattr(B, "Ours", OffWhenCompiled)
    ctx = make_context(True, str(tmp_path), str(tmp_path / "no-upstream"), "cpu")
    rep = PartReport(1, "t", True, tmp_path, cap_s=600)
    s = p1.sizes(ctx)
    s["compile_kwargs"] = {"backend": "eager"}
    with pytest.raises(RuntimeError, match=f"parity outside tolerance: {', '.join(caught)}$"):
        p1.parity(rep, ctx, s)
    res = rep.data["results"]["parity"]["variants"]
    assert [n for n, r in res.items() if not r["ok"]] == caught


def test_a_failing_part_is_recorded_and_the_others_still_run(prepared, tmp_path, monkeypatch, capsys):
    import benchmarks.gpu_suite.part1_training as p1
    import benchmarks.gpu_suite.part2_learning as p2
    import benchmarks.gpu_suite.part3_evaluation as p3

    def broken(rep, ctx):
        raise RuntimeError("boom in part 1")

    def one_stage_fails(rep, ctx):
        with rep.stage("good"):
            rep.set("figure", 1.5)
        with rep.stage("bad"):
            raise ValueError("bad stage")
        with rep.stage("after"):
            rep.set("nan", float("nan"))

    def fine(rep, ctx):
        with rep.stage("only"):
            rep.table("t", ["a", "b"], [["x", 2.0]])

    monkeypatch.setattr(p1, "run", broken)
    monkeypatch.setattr(p2, "run", one_stage_fails)
    monkeypatch.setattr(p3, "run", fine)
    out = tmp_path / "out"
    rc = suite.main(["run", "--part", "all", "--smoke", "--prepared", str(prepared), "--out", str(out)])
    assert rc == 1
    d1, d2, d3 = (report(out / f"part{n}") for n in (1, 2, 3))
    assert d1["status"] == "failed" and d1["error"] == "RuntimeError: boom in part 1"
    assert d2["status"] == "partial" and d2["stages"]["bad"]["error"] == "ValueError: bad stage"
    assert d2["stages"]["good"]["status"] == "ok" and d2["stages"]["after"]["status"] == "ok"
    assert d2["results"] == {"figure": 1.5, "nan": None} and d2["non_finite"] == ["results.nan"]
    assert d3["status"] == "ok" and d3["tables"][0]["rows"] == [["x", 2.0]]
    printed = capsys.readouterr().out
    assert "boom in part 1" in printed and "stage bad FAILED" in printed


def test_a_part_past_its_time_cap_is_recorded_as_failed(prepared, tmp_path, monkeypatch):
    import time

    import benchmarks.gpu_suite.part2_learning as p2

    def slow(rep, ctx):
        with rep.stage("forever"):
            time.sleep(30)

    monkeypatch.setattr(p2, "run", slow)
    ctx = make_context(True, str(prepared), None, "cpu")
    t = time.monotonic()
    d = suite.run_part(2, tmp_path / "p2", ctx, cap_s=-14.0)  # the hard cap fires after cap + 15 s = 1 s
    assert time.monotonic() - t < 10
    assert d["status"] == "failed" and "time cap" in d["error"]
    assert d["stages"]["forever"]["error"] == "the part's time cap ran out during this stage"


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
