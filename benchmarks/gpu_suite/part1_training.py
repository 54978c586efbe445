"""Part 1: the machine, the CUDA tests, bf16 and torch.compile parity, training throughput and MFU of the paper's
ARC config (ours in four variants, upstream's step beside them), the largest batch that fits, and a profile of
the compiled step (benchmarks/gpu_suite/profile.py). Ours' variants, and ours compiled, come from
benchmarks/gpu_suite/variants.py.

The training step, the batches and the FLOP count are those of benchmarks/bench_train_cpu.py (`Ours`,
`Upstream`, `make_batches`, `flops_per_example`, whose docstring gives the formula): one step = one ACT step,
forward -> loss -> backward -> AdamW on the dense weights -> each project's sparse SignSGD on the puzzle rows.
FLOPs per example (multiply-add = 2), S = 16 + 900 positions, D = 512, I = SwiGLU width:
    block = 2*S*D*3D + 4*S*S*D + 2*S*D*D + 2*S*D*2I + 2*S*I*D;  net = L_layers * block
    step  = H_cycles*(L_cycles+1)*net (forward) + 2*(L_cycles+1)*net (backward of the last H cycle) + heads
MFU = FLOPs per example * examples/s / the device's peak: the data sheet's dense bf16 rate for the bf16 variants
and the bf16 matmul rate measured here (8192^3); the float32 variants against the float32 matmul rate measured
here (TF32 as torch leaves it: off).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from benchmarks import bench_train_cpu as B
from benchmarks.gpu_suite import variants
from benchmarks.gpu_suite.context import NOMINAL_TFLOPS, REPO, VOCAB, Context, timed
from benchmarks.gpu_suite.profile import profile_stage
from benchmarks.gpu_suite.report import PartReport

TITLE = "environment, CUDA tests, parity, training throughput and MFU, the profile"

PAPER = dict(hidden_size=512, num_heads=8, expansion=4, H_cycles=3, L_cycles=4, H_layers=0, L_layers=2,
             halt_max_steps=16, halt_exploration_prob=0.1, no_ACT_continue=True, pos_encodings="rope",
             rope_theta=10000.0, rms_norm_eps=1e-5, puzzle_emb_ndim=512, puzzle_emb_len=16, mlp_t=False)
SMOKE = dict(PAPER, hidden_size=32, num_heads=2, expansion=2, H_cycles=2, L_cycles=2, halt_max_steps=4,
             puzzle_emb_ndim=32, puzzle_emb_len=2)


def sizes(ctx: Context) -> dict:
    """compile_kwargs: parity's compiled variants; timed_compile_kwargs: the throughput's and the profile's (the
    same on a GPU; in smoke mode parity checks the compiled numerics with aot_eager, the timed stages only the
    harness's path, with dynamo's cheaper eager backend)."""
    if ctx.smoke:
        return dict(arch=SMOKE, seq_len=16, num_ids=8, parity_rows=2, parity_batches=2, batch=4, warmup=1,
                    compile_warmup=2, min_steps=2, variant_s=0.2, matmul_n=256, compile_kwargs={"backend": "aot_eager"},
                    timed_compile_kwargs={"backend": "eager"}, max_batch=None, pytest_timeout=120)
    return dict(arch=PAPER, seq_len=900, num_ids=1000, parity_rows=4, parity_batches=6, batch=128, warmup=2,
                compile_warmup=3, min_steps=5, variant_s=10.0, matmul_n=8192, compile_kwargs={},
                timed_compile_kwargs={}, max_batch=8192, pytest_timeout=180)


def setup(rep: PartReport, ctx: Context) -> dict:
    return {"s": sizes(ctx)}


def teardown(state: dict) -> None:
    pass


def _in_stage(name: str, fn):
    def run(rep: PartReport, ctx: Context, state: dict) -> None:
        with rep.stage(name):
            fn(rep, ctx, state["s"])
    return run


def _throughput(names: tuple[str, ...]):
    return lambda rep, ctx, s: throughput(rep, ctx, {**s, "compile_kwargs": s["timed_compile_kwargs"]}, names)


def stages():
    """This part's stages for the schedule (benchmarks/gpu_suite/schedule.py), each with its share of the 480 s
    budget and the least seconds it starts with. Throughput comes in two: ours' best variant and upstream's
    compiled bf16 step first, the other variants with whatever time the lend has left at its end."""
    from benchmarks.gpu_suite.schedule import Stage

    return [Stage("environment", _in_stage("environment", lambda rep, ctx, s: environment(rep, ctx)), 5, 3),
            Stage("throughput_best", _in_stage("throughput_best", _throughput(BEST)), 95, 30),
            Stage("cuda_tests", _in_stage("cuda_tests", lambda rep, ctx, s: cuda_tests(rep, ctx, s["pytest_timeout"])),
                  55, 40),
            Stage("parity", _in_stage("parity", parity), 45, 25),
            Stage("max_batch", _in_stage("max_batch", max_batch), 10, 8),
            Stage("profile", lambda rep, ctx, state: profile_stage(rep, ctx, state["s"]), 25, 20),
            Stage("throughput_rest", _in_stage("throughput_rest", _throughput(REST)), 0, 20)]


# ---------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------


def environment(rep: PartReport, ctx: Context) -> None:
    import platform

    import trm_kaggle

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "device": str(ctx.device), "trm_kaggle": trm_kaggle.__version__,
           "trm_kaggle_from": str(Path(trm_kaggle.__file__).parent),
           "trm_kaggle_outside_the_repo": import_outside_repo(),
           "tf32_matmul_allowed": torch.backends.cuda.matmul.allow_tf32,
           "upstream": str(ctx.upstream) if ctx.upstream else None}
    if ctx.cuda:
        p = torch.cuda.get_device_properties(ctx.device)
        cap = torch.cuda.get_device_capability(ctx.device)
        env.update(gpu=p.name, capability=f"{cap[0]}.{cap[1]}", memory_gib=round(p.total_memory / 2**30, 2),
                   multiprocessors=p.multi_processor_count, gpus=torch.cuda.device_count(),
                   bf16_supported=torch.cuda.is_bf16_supported(), tf32_capable=cap >= (8, 0))
    else:
        env.update(gpu=None, capability=None, memory_gib=None, bf16_supported=None, tf32_capable=None)
        rep.note(f"device {ctx.device}: no CUDA figures (GPU name, capability, memory)")
    if ctx.upstream is None:
        rep.skip("upstream side by side", ctx.upstream_why or "upstream not given")
    rep.set("environment", env)
    rep.table("environment", ["what", "value"], [[k, v] for k, v in env.items()])


def import_outside_repo() -> str:
    """Where a fresh interpreter, away from the repository (its folder dropped from PYTHONPATH), imports
    trm_kaggle from: on the GPU machine the cp312 wheel installed in /tmp/site (`python -m` puts the repository
    first on sys.path, so the suite itself runs on the checkout's code)."""
    import os
    import tempfile

    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    code = "import trm_kaggle, trm_kaggle.config, trm_kaggle.model, trm_kaggle.solve.job; print(trm_kaggle.__file__)"
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", code], cwd=d, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return "import failed: " + ((r.stderr.strip().splitlines() or ["?"])[-1])
    return str(Path(r.stdout.strip()).parent)


# ---------------------------------------------------------------------------
# pytest -m cuda
# ---------------------------------------------------------------------------

CUDA_MARK = re.compile(r"pytest\.mark\.cuda\b")


def cuda_test_files(tests: Path = REPO / "tests") -> list[Path]:
    """The test files holding a test marked `cuda` (passed by name, so that pytest does not import the modules
    that need packages a bare GPU machine lacks)."""
    return sorted(p for p in tests.glob("test_*.py") if CUDA_MARK.search(p.read_text()))


def cuda_tests(rep: PartReport, ctx: Context, timeout: float) -> None:
    files = cuda_test_files()
    if not files:
        rep.skip("pytest -m cuda", f"no test file under {REPO / 'tests'} marks a test `cuda`")
        return
    scratch = tempfile.TemporaryDirectory(prefix="gpu_suite_pytest_")
    junit = Path(scratch.name) / "junit.xml"
    # -v prints each test's outcome as it ends: a run cut by the time limit still says what passed and where it was
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-p", "no:cacheprovider", "-o", "addopts=-ra",
           f"--junitxml={junit}", *[str(f.relative_to(REPO)) for f in files]]
    limit = min(timeout, max(rep.left(), 1))
    try:
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=limit)
        out, rc = res.stdout + res.stderr, res.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = _text(e.stdout) + _text(e.stderr), None
    tail = out.strip().splitlines()[-12:]
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if junit.is_file():
        root = ET.parse(junit).getroot()
        for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
            for k in counts:
                counts[k] += int(suite.get(k, 0))
    else:  # cut by the time limit: the outcomes printed so far
        ended = verbose_outcomes(out)
        counts = {"tests": len(ended), "failures": ended.count("FAILED"), "errors": ended.count("ERROR"),
                  "skipped": ended.count("SKIPPED")}
    scratch.cleanup()
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    # pytest's exit code 5 (nothing collected) counts as no failure: every cuda test deselected or none present
    ok = rc in (0, 5) and counts["failures"] == 0 and counts["errors"] == 0
    rep.set("cuda_tests", {"command": " ".join(cmd[1:3] + cmd[3:5] + [str(f.relative_to(REPO)) for f in files]),
                           "files": [f.name for f in files], "returncode": rc, "ok": ok, **counts, "tail": tail,
                           "timed_out_after_s": round(limit, 1) if rc is None else None})
    rep.table("pytest -m cuda", ["files", "passed", "failed", "errors", "skipped", "ok"],
              [[len(files), counts["passed"], counts["failures"], counts["errors"], counts["skipped"], ok]],
              note=("" if ctx.cuda else "no CUDA here: the cuda tests skip") if rc is not None else
              f"cut after {limit:.0f} s: the outcomes printed before it; then {running_test(out) or 'collection'}")
    if not ok:
        why = (f"timed out after {limit:.0f} s in {running_test(out) or 'collection'}" if rc is None
               else " / ".join(tail[-3:]))
        raise RuntimeError(f"pytest -m cuda failed (exit {rc}): {why}")


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


_VERBOSE_LINE = re.compile(r"^(\S+::\S+)(?: (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS))?")


def verbose_outcomes(out: str) -> list[str]:
    """The outcomes `pytest -v` printed, one per test that ended (PASSED, FAILED, SKIPPED, ...)."""
    return [m.group(2) for line in out.splitlines() if (m := _VERBOSE_LINE.match(line)) and m.group(2)]


def running_test(out: str) -> str | None:
    """The test `pytest -v` had started and not ended when its output stops (it prints the id first)."""
    last = [m for line in out.splitlines() if (m := _VERBOSE_LINE.match(line))]
    return last[-1].group(1) if last and not last[-1].group(2) else None


# ---------------------------------------------------------------------------
# Parity: eager and compiled, float32 and bf16, all measured against a float64 run of the same weights
# ---------------------------------------------------------------------------

#: A compiled variant is judged against the eager run in its dtype (its `baseline` in variants.VARIANTS), both
#: measured against float64 (within B.PARITY_RATIO x + a floor): compiling changes the order of float32 sums,
#: which the recursion amplifies as much as any other reordering. At the paper's depth (15 recursive net calls
#: a step, 5 of them with gradient) rounding grows so much that bf16's one-step gradients are O(1) away from
#: float64's, for upstream's code just as for ours (measured on CPU at hidden 128: relative gradient error 0.7
#: to 2.4 for both), so bf16 eager is judged by the loss alone (a mean over every position: bf16 keeps it
#: within about 1e-3) and, with upstream's code at hand, side by side with upstream in bf16.
LOSS_TOL = {"float32": 1e-4, "bfloat16": 5e-2}


def _trainer(s: dict, ctx: Context, v: variants.Variant, batch: int, state: dict | None = None) -> B.Ours:
    """Ours' trainer for variant `v` (`state`: the weights to start from), as `variants` makes it."""
    t = B.Ours(s["arch"], batch, False, v.dtype, device=ctx.device, seq_len=s["seq_len"], vocab=VOCAB,
               num_ids=s["num_ids"])
    if state is not None:
        t.model.load_state_dict(state)
    model = v.make(t.model, **s["compile_kwargs"])
    if model is not t.model:  # another module: the optimizers follow its weights
        t.model = model
        t.make_optimizers()
    t.name = v.name
    return t


def parity(rep: PartReport, ctx: Context, s: dict) -> None:
    """One training step (forward, ACT loss, backward) of each variant on the same weights and the same
    `parity_batches` batches of `parity_rows` rows, against a float64 run: per figure the geometric mean over
    the batches of the relative error (`B.relative_errors`); also each variant's largest absolute difference
    from float32 eager on the first batch."""
    rows = s["parity_rows"]
    batches = B.make_batches(s["parity_batches"], rows, 5, s["seq_len"], VOCAB, s["num_ids"], ctx.device)
    torch._dynamo.reset()  # the throughput stage compiled the net at another batch: static graphs here too
    torch.manual_seed(0)
    base = _trainer(s, ctx, variants.variant(variants.EAGER["float32"]), rows)
    with torch.no_grad():  # a non-zero puzzle table, so that the rows matter
        w = base.model.puzzle_emb.weights
        w.copy_(torch.randn(w.shape, generator=torch.Generator().manual_seed(7)).to(w.device))
    state = {k: v.clone() for k, v in base.model.state_dict().items()}
    exact = [B.step_outputs(B.float64_copy(base), b, i) for i, b in enumerate(batches)]
    del base
    rows_out, res, first = [], {}, None
    for v in variants.VARIANTS:
        name, dtype = v.name, v.dtype
        if v.cuda_only and ctx.device.type != "cuda":
            rep.skip(f"parity {name}", "needs a CUDA GPU (Triton kernels, float8 matmuls)")
            continue
        if rep.left() < 10 and not ctx.smoke:
            rep.skip(f"parity {name}", "its stage's allowance was spent", cut=True)
            continue
        t = _trainer(s, ctx, v, rows, state)
        steps = [B.step_outputs(t, b, i) for i, b in enumerate(batches)]
        del t
        errors = dict(zip(B.ERROR_NAMES, B.typical_errors([B.relative_errors(o, r) for o, r in zip(steps, exact)])))
        if first is None:
            first = steps[0]
        logits, loss, grads = steps[0]
        r = {"errors_vs_float64": errors,
             "max_abs_logits": (logits - first[0]).abs().max().item(), "max_abs_loss": abs(loss - first[1]),
             "max_abs_grads": max((grads[n] - g).abs().max().item() for n, g in first[2].items())}
        if v.baseline is not None:
            base_errors = res.get(v.baseline, {}).get("errors_vs_float64")
            r["judged_by"] = f"within {B.PARITY_RATIO:g}x {v.baseline}'s errors + {B.PARITY_FLOOR[dtype]:.1e}"
            r["ok"] = base_errors is not None and B.within(errors.values(), base_errors.values(), dtype)
        else:
            r["judged_by"] = f"loss error <= {LOSS_TOL[dtype]:g}"
            r["ok"] = errors["loss"] <= LOSS_TOL[dtype]
        res[name] = r
        rows_out.append([name, errors["logits"], errors["loss"], errors["grads"], r["max_abs_logits"],
                         r["max_abs_loss"], r["max_abs_grads"], r["judged_by"], r["ok"]])
    same = against_upstream(ctx, s) if ctx.upstream is not None else {}
    rep.set("parity", {"reference": "float64 (same weights, same batches)", "rows": rows,
                       "batches": s["parity_batches"], "compile_kwargs": s["compile_kwargs"], "variants": res,
                       "ours_vs_upstream": same or None})
    rep.table(f"parity: one training step against float64, {s['parity_batches']} batches of {rows} rows",
              ["variant", "rel logits", "rel loss", "rel grads", "max|d logits|", "|d loss|", "max|d grad|",
               "judged by", "ok"], rows_out,
              note="rel: against float64, geometric mean over the batches (logits: max |diff| / max |value|; "
                   "grads: the worst parameter's ||diff|| / ||value||); max|d ...|: against ours eager fp32, "
                   "first batch")
    for dtype, c in same.items():
        rep.note(f"ours against upstream, {dtype}, same weights, {c['batches']} batches of {c['rows']} rows: "
                 f"{c['line']}")
    bad = [n for n, r in res.items() if not r["ok"]] + [f"ours vs upstream {d}" for d, c in same.items()
                                                         if not c["ok"]]
    if bad:
        raise RuntimeError(f"parity outside tolerance: {', '.join(bad)}")


def against_upstream(ctx: Context, s: dict) -> dict:
    """benchmarks/bench_train_cpu.py's `compare_with_upstream` on this device, in float32 and in bf16:
    upstream's initial weights loaded into ours, one step of each and of a float64 copy of upstream per batch;
    ours passes when its typical error against the float64 answer is within B.PARITY_RATIO x upstream's own."""
    rows = s["parity_rows"]
    batches = B.make_batches(s["parity_batches"], rows, 3, s["seq_len"], VOCAB, s["num_ids"], ctx.device)
    out = {}
    for dtype in ("float32", "bfloat16"):
        ours = _trainer(s, ctx, variants.variant(variants.EAGER[dtype]), rows)
        up = upstream_trainer(s, ctx, dtype, False, rows)
        c = B.compare_with_upstream(ours, up, batches)
        out[dtype] = {**c, "rows": rows, "line": B.check_same_line(c)}
        del ours, up
    return out


# ---------------------------------------------------------------------------
# Throughput and MFU
# ---------------------------------------------------------------------------


def matmul_tflops(ctx: Context, n: int, dtype: torch.dtype, reps: int = 10) -> float:
    a = torch.randn(n, n, device=ctx.device).to(dtype)
    b = torch.randn(n, n, device=ctx.device).to(dtype)
    for _ in range(3):
        a @ b
    best = min(timed(lambda: a @ b, ctx) for _ in range(reps))
    return 2 * n**3 / best / 1e12


def nominal(ctx: Context) -> tuple[float, float] | None:
    if not ctx.cuda:
        return None
    name = torch.cuda.get_device_name(ctx.device)
    return next((v for k, v in NOMINAL_TFLOPS.items() if k in name), None)


def time_trainer(t, batches, ctx: Context, warmup: int, min_steps: int, seconds: float) -> dict:
    """Warm-up steps (compilation included), then steps until both `min_steps` and `seconds` are reached."""
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    w = time.perf_counter()
    for i in range(warmup):
        t.step(batches[i % len(batches)])
    ctx.sync()
    warm_s = time.perf_counter() - w
    n, start = 0, time.perf_counter()
    while n < min_steps or time.perf_counter() - start < seconds:
        t.step(batches[(warmup + n) % len(batches)])
        n += 1
        if n % 4 == 0:
            ctx.sync()
    ctx.sync()
    wall = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(ctx.device) / 2**30 if ctx.cuda else None
    return {"steps": n, "seconds": wall, "step_s": wall / n, "warmup_s": warm_s, "peak_gib": peak}


def upstream_trainer(s: dict, ctx: Context, dtype: str, compile_model: bool, batch: int) -> B.Upstream:
    t = B.Upstream(s["arch"], batch, str(ctx.upstream), dtype, device=ctx.device, seq_len=s["seq_len"], vocab=VOCAB,
                   num_ids=s["num_ids"])
    if compile_model:  # as upstream's pretrain.py does (unless DISABLE_COMPILE): the whole loss head + model
        t.model = torch.compile(t.model, **s["compile_kwargs"])
    return t


#: Ours' best variant and upstream's compiled bf16 step (the throughput target) first; the other variants in
#: a later stage, from the time the lend has left: bf16 first, float32 after.
BEST = (variants.BEST, "upstream compile bf16")
REST = tuple([v.name for v in variants.VARIANTS if v.cuda_only]  # the fused rows: what the speed targets wait on
             + [v.name for v in variants.VARIANTS if v.dtype == "bfloat16" and v.name != variants.BEST
                and not v.cuda_only]
             + ["upstream eager bf16"]
             + [v.name for v in variants.VARIANTS if v.dtype == "float32" and v.name != variants.BEST]
             + ["upstream eager fp32"])
RATIOS = tuple(dict.fromkeys((
    (variants.BEST, "upstream compile bf16"), ("ours compile bf16", "upstream compile bf16"),
    *((v.name, "upstream compile bf16") for v in variants.VARIANTS if v.cuda_only),
    ("ours eager bf16", "upstream eager bf16"), ("ours compile bf16", "upstream eager bf16"),
    ("ours eager fp32", "upstream eager fp32"), ("ours compile fp32", "upstream eager fp32"))))


def targets_met(results: dict, ratios: dict) -> dict:
    """The targets, where measured: ours' best bf16 step >= 1.3x upstream's best bf16 step (upstream compiles by
    default), MFU of ours' best variant >= 40 % of the data sheet's peak (stated for an H100)."""
    def best(prefix: str) -> float | None:
        rates = [r["examples_per_s"] for n, r in results.items() if n.startswith(prefix) and n.endswith("bf16")
                 and "examples_per_s" in r]
        return max(rates) if rates else None

    out = {}
    o, u = best("ours"), best("upstream")
    if o and u:
        out["ours best bf16 / upstream best bf16 >= 1.3"] = {"value": o / u, "met": o / u >= 1.3}
    mfu = results.get(variants.BEST, {}).get("mfu_nominal")
    if mfu is not None:
        out[f"MFU {variants.BEST} >= 0.40"] = {"value": mfu, "met": mfu >= 0.40}
    return out


def throughput(rep: PartReport, ctx: Context, s: dict, names: tuple[str, ...]) -> None:
    """The sides `names` in turn (the two stages share one summary and one table, each updated after every
    side, so a stage ended at its allowance keeps what it measured). Each side gets an equal part of what the
    stage has left, at most `variant_s` seconds of timed steps after its warm-up."""
    a, batch = s["arch"], s["batch"]
    flops = B.flops_per_example(a, s["seq_len"], VOCAB)
    # Another stage compiled the same net code at another batch size: start afresh, so that each side here
    # compiles static graphs for this batch (a second shape would otherwise make dynamo compile shape-generic code).
    torch._dynamo.reset()
    batches = B.make_batches(4, batch, 1, s["seq_len"], VOCAB, s["num_ids"], ctx.device)
    summary = rep.data["results"].get("throughput")
    if summary is None:
        peaks = {"bfloat16": matmul_tflops(ctx, s["matmul_n"], torch.bfloat16),
                 "float32": matmul_tflops(ctx, s["matmul_n"], torch.float32)}
        summary = {"batch": batch, "seq_len": s["seq_len"], "arch": a, "flops_per_example": flops,
                   "matmul_tflops_measured": peaks, "nominal_tflops_bf16_tf32": nominal(ctx), "sides": {},
                   "ratios": {}, "targets": {"ours bf16 / upstream bf16": 1.3, "mfu compile bf16 (H100)": 0.40}}
        rep.set("throughput", summary)
        rep.table(f"training throughput, batch {batch}, {flops / 1e9:.1f} GFLOP per example",
                  ["side", "steps", "s/step", "examples/s", "TFLOP/s", "MFU (measured peak)", "MFU (data sheet)",
                   "peak GiB", "warm-up s"], [])
    table = next(t for t in rep.data["tables"] if t["title"].startswith("training throughput"))
    results, ratios, peaks, nom = summary["sides"], summary["ratios"], summary["matmul_tflops_measured"], \
        summary["nominal_tflops_bf16_tf32"]
    # name: (dtype, whether its first steps compile, the trainer's maker)
    makers = {v.name: (v.dtype, v.make is not variants.eager, (lambda v=v: _trainer(s, ctx, v, batch)))
              for v in variants.VARIANTS if not v.cuda_only or ctx.device.type == "cuda"}
    for v in variants.VARIANTS:
        if v.cuda_only and v.name in names and v.name not in makers:
            rep.skip(f"throughput {v.name}", "needs a CUDA GPU (Triton kernels, float8 matmuls)")
    if ctx.upstream is not None:
        makers.update({n: (d, c, (lambda d=d, c=c: upstream_trainer(s, ctx, d, c, batch))) for n, d, c in
                       (("upstream eager bf16", "bfloat16", False), ("upstream compile bf16", "bfloat16", True),
                        ("upstream eager fp32", "float32", False))})
    sides = [n for n in names if n in makers]
    for i, name in enumerate(sides):
        dtype, compiles, make = makers[name]
        left = rep.left()
        if left < (1 if ctx.smoke else 15):
            rep.skip(f"throughput {name}", "its stage's allowance was spent", cut=True)
            continue
        seconds = min(s["variant_s"], left / (2 * (len(sides) - i)))
        t = None
        try:
            t = make()
            warmup = s["compile_warmup"] if compiles else s["warmup"]
            r = time_trainer(t, batches, ctx, warmup, s["min_steps"], seconds)
        except Exception as e:  # noqa: BLE001 - out of memory, a compile error: this side alone
            results[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            rep.note(f"throughput {name}: {results[name]['error']}")
            continue
        finally:
            t = None
            if ctx.cuda:
                torch.cuda.empty_cache()
        eps = batch / r["step_s"]
        achieved = flops * eps / 1e12
        r.update(examples_per_s=eps, tflops=achieved, mfu_measured=achieved / peaks[dtype],
                 mfu_nominal=(achieved / nom[0]) if (nom and dtype == "bfloat16") else None)
        results[name] = r
        table["rows"].append([name, r["steps"], r["step_s"], eps, achieved, r["mfu_measured"], r["mfu_nominal"],
                              r["peak_gib"], r["warmup_s"]])
        ctx.say(f"  {name}: {eps:.1f} examples/s")
        for ours, up in RATIOS:
            if "examples_per_s" in results.get(ours, {}) and "examples_per_s" in results.get(up, {}):
                ratios[f"{ours} / {up}"] = results[ours]["examples_per_s"] / results[up]["examples_per_s"]
        summary["targets_met"] = targets_met(results, ratios)
        table["note"] = (f"measured matmul peaks: bf16 {peaks['bfloat16']:.1f}, fp32 {peaks['float32']:.1f} "
                         f"TFLOP/s; data sheet (bf16, tf32): {nom}; ratios: "
                         + (", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()) or "none (no upstream)"))
        rep.write()


def max_batch(rep: PartReport, ctx: Context, s: dict) -> None:
    """The largest batch of ours (eager, bf16) that runs a training step, by doubling then one step between the
    last that fit and the first that did not; peak memory per example at each."""
    if not ctx.cuda:
        rep.skip("largest batch", "needs CUDA (torch.cuda.max_memory_allocated and out-of-memory errors)")
        return
    b, fit, failed, tried = s["batch"], 0, None, []
    res = {"largest_fitting": fit, "first_failing": failed, "tried": tried, "variant": "ours eager bf16"}
    rep.set("max_batch", res)  # updated after each try: a time cap keeps what was found
    last = 0.0  # seconds of the last try: the next (a larger batch) is started with twice that left
    while b <= s["max_batch"] and rep.left() > 2 * last + 2:
        t = data = None
        started = time.perf_counter()
        try:
            t = _trainer(s, ctx, variants.variant(variants.EAGER["bfloat16"]), b)
            data = B.make_batches(1, b, 2, s["seq_len"], VOCAB, s["num_ids"], ctx.device)[0]
            torch.cuda.reset_peak_memory_stats(ctx.device)
            step_s = timed(lambda: t.step(data), ctx)
            peak = torch.cuda.max_memory_allocated(ctx.device)
            tried.append({"batch": b, "fits": True, "peak_gib": peak / 2**30, "mib_per_example": peak / b / 2**20,
                          "step_s": step_s})
            fit = res["largest_fitting"] = b
        except torch.cuda.OutOfMemoryError:
            tried.append({"batch": b, "fits": False})
            failed = res["first_failing"] = b
        finally:
            t = data = None
            torch.cuda.empty_cache()
        last = time.perf_counter() - started
        if failed is None:
            b *= 2
        elif failed - fit > max(fit // 4, 1) and b != (fit + failed) // 2:
            b = (fit + failed) // 2
        else:
            break
    else:
        if b <= s["max_batch"]:
            rep.skip("largest batch: the search", f"stopped at batch {b}: its stage's allowance was spent", cut=True)
    rep.table("largest batch (ours eager bf16, one training step)", ["batch", "fits", "peak GiB", "MiB/example",
                                                                    "s/step"],
              [[x["batch"], x["fits"], x.get("peak_gib"), x.get("mib_per_example"), x.get("step_s")] for x in tried])
