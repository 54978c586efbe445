"""Part 3: evaluation throughput (ours end to end, ours' and upstream's models side by side on the same weights
and batches, predictions compared), the Kaggle solve of unseen tasks with its time plan (the plan's estimate
against the measured time per task), and a projection to Kaggle's 4 x L4 for the hidden set (240 tasks, 12 h).

The model is the paper's ARC config (hidden 512, H_cycles 3, L_cycles 4, 16 ACT steps) with random weights and a
q head calibrated so that about half the rows would halt early (benchmarks/bench_evaluate.py's
`random_model` / `calibrate_halting`): the figures are speeds and agreement, not accuracy.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import bench_evaluate as E
from benchmarks.gpu_suite.context import NOMINAL_TFLOPS, REPO, Context
from benchmarks.gpu_suite.report import PartReport

TITLE = "evaluation throughput, the Kaggle solve and its time plan, the 4 x L4 projection"
#: Kaggle's hidden set and kernel: 240 tasks, 12 hours, 4 x L4 (121 TFLOP/s dense bf16, 300 GB/s each).
HIDDEN_TASKS, KAGGLE_HOURS, KAGGLE_GPUS = 240, 12.0, 4
L4_TFLOPS, L4_GBS = 121.0, 300.0
#: Memory bandwidth in GB/s by a substring of the device name (data sheets), for the pessimistic projection.
BANDWIDTH_GBS = {"H200": 4800.0, "H100 80GB HBM3": 3350.0, "H100 PCIe": 2000.0, "H100": 3350.0,
                 "A100": 2039.0, "L40S": 864.0, "L4": 300.0}


def sizes(ctx: Context) -> dict:
    if ctx.smoke:
        return dict(arch=(32, 2, 2, 2, 4), batch=8, rounds=1, solve_budget=120.0, solve_tasks=2,
                    solve=dict(num_aug=1, finetune_steps=2, safety_margin=5.0, eval_batch_size=8,
                               global_batch_size=8, threads=1), weights=REPO / "weights" / "arc2-cpu-tiny")
    return dict(arch=(512, 8, 3, 4, 16), batch=256, rounds=3, solve_budget=300.0, solve_tasks=12,
                solve=dict(num_aug="auto", finetune_steps="auto", safety_margin=20.0), weights=None)


def run(rep: PartReport, ctx: Context) -> None:
    from benchmarks.gpu_suite.prepare import read_manifest

    s = sizes(ctx)
    read_manifest(ctx.prepared)
    # scratch (exports, datasets, fine-tuning runs) outside --out: only the report goes back from a GPU machine
    with tempfile.TemporaryDirectory(prefix="gpu_suite_part3_") as tmp:
        work = Path(tmp)
        with rep.stage("evaluation"):
            evaluation(rep, ctx, s, work)
        with rep.stage("solve"):
            solve_tasks(rep, ctx, s, work)
    with rep.stage("projection"):
        projection(rep, ctx)


# ---------------------------------------------------------------------------
# Evaluation throughput and agreement
# ---------------------------------------------------------------------------


def evaluation(rep: PartReport, ctx: Context, s: dict, work: Path) -> None:
    from trm_kaggle.data.format import load_metadata, load_split

    ds = ctx.prepared / "data" / "arc"
    arch = E.make_arch(*s["arch"])
    meta = load_metadata(ds, "test")
    n = load_split(ds, "test").num_examples
    bs = min(s["batch"], n)
    base = E.random_model(arch, meta.num_puzzle_identifiers, seed=0).to(ctx.device)
    probe = {k: v.to(ctx.device) for k, v in E.first_batch(ds, min(bs, 16)).items()}
    bias, _, _ = E.calibrate_halting(base, probe, 0.5, seed=0)
    ours = E.load_ours(base, arch, ds, work / "export")
    E.run_ours(ours, ds, bs, device=str(ctx.device))  # warm-up: CUDA kernels, caches
    runs = [E.run_ours(ours, ds, bs, device=str(ctx.device)) for _ in range(s["rounds"])]
    early = E.run_ours(ours, ds, bs, early_exit=True, device=str(ctx.device))
    eps = statistics.median(r["n"] / r["total"] for r in runs)
    model_eps = statistics.median(r["n"] / r["model"] for r in runs)
    res = {"examples": n, "batch": bs, "rounds": s["rounds"], "arch": list(s["arch"]), "q_bias": bias,
           "ours_end_to_end_examples_per_s": eps, "ours_model_examples_per_s": model_eps,
           "share_outside_model": statistics.median((r["total"] - r["model"]) / r["total"] for r in runs),
           "early_exit_examples_per_s": early["n"] / early["total"], "early_exit_mean_steps": early["mean_steps"],
           "deterministic": E.same_candidates(runs[0]["result"], runs[-1]["result"])}
    rows = [["ours, end to end (predict + decode + vote + score)", eps, None],
            ["ours, model only", model_eps, None],
            ["ours, early exit, end to end", res["early_exit_examples_per_s"], None]]
    if ctx.upstream is None:
        rep.skip("upstream's model on the same weights and batches", ctx.upstream_why or "upstream not given")
    else:
        side = side_by_side(ctx, ours, runs[0], arch, ds, bs, work)
        res["side_by_side"] = side
        rows += [["ours, model loop on the same batches", side["ours_examples_per_s"], None],
                 ["upstream, model loop on the same batches", side["upstream_examples_per_s"],
                  side["ours_examples_per_s"] / side["upstream_examples_per_s"]]]
        ue = side["upstream_evaluator"]
        if ue is None:
            rep.skip("upstream's ARC evaluator (evaluators/arc.py)", side["upstream_evaluator_missing"])
        else:
            rows.append(["upstream's evaluator, end to end (model + update_batch + result)",
                         ue["end_to_end_examples_per_s"], eps / ue["end_to_end_examples_per_s"]])
    rep.set("evaluation", res)
    rep.table(f"evaluation, {n} augmented test inputs, batch {bs}, {arch.halt_max_steps} ACT steps",
              ["side", "examples/s", "ours / upstream"], rows,
              note=f"mean ACT steps with early exit {early['mean_steps']:.2f} of {arch.halt_max_steps}")
    side = res.get("side_by_side")
    if side and not side["same_predictions"]:
        raise RuntimeError(f"ours and upstream predict differently on {side['differing_rows']} rows")
    if side and side["upstream_evaluator"] and not side["upstream_evaluator"]["same_votes"]:
        raise RuntimeError(f"ours and upstream's evaluator disagree: {side['upstream_evaluator']['mismatches'][:3]}")


def upstream_arc_evaluator(ds: Path):
    """Upstream's ARC evaluator (evaluators/arc.py) for dataset `ds` and the helpers it needs, or the reason it
    cannot be imported (it needs numba and, through upstream's dataset builder, argdantic)."""
    import importlib

    try:
        arc = importlib.import_module("evaluators.arc")
        common = importlib.import_module("dataset.common")
        builder = importlib.import_module("dataset.build_arc_dataset")
    except Exception as e:  # noqa: BLE001 - a missing dependency: the evaluator comparison is skipped
        return None, f"cannot import upstream's evaluators/arc.py: {type(e).__name__}: {e}"
    meta = common.PuzzleDatasetMetadata(**json.loads((ds / "test" / "dataset.json").read_text()))
    import numpy as np

    for dtype in (np.int32, np.int64):  # numba compiles _crop once per process and dtype: not timed
        arc._crop(np.full(900, 2, dtype=dtype))
    return (arc.ARC(str(ds), meta), builder.grid_hash), None


@contextlib.contextmanager
def process_group_of_one():
    """A gloo group of one process: upstream's evaluator gathers its votes with torch.distributed even alone."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def side_by_side(ctx: Context, ours, ours_run: dict, arch, ds: Path, bs: int, work: Path) -> dict:
    """Both models (upstream's loads our weights) through every ACT step on the same batches, in the dataset's
    order: predictions and q_halt compared row by row, model-loop time of each. Then, when upstream's evaluator
    imports, its votes (evaluators/arc.py: update_batch per batch, result at the end, as pretrain.py's evaluate
    runs them) against ours' (`ours_run`, benchmarks/bench_evaluate.py's `compare`: candidates, vote counts,
    mean sigmoid(q_halt), top-2 attempts, pass@K)."""
    from types import SimpleNamespace

    from trm_kaggle.data.format import load_metadata, load_split
    from trm_kaggle.model.upstream import to_upstream_state_dict

    import importlib
    trm = importlib.import_module("models.recursive_reasoning.trm")
    losses = importlib.import_module("models.losses")
    meta = load_metadata(ds, "test")
    n = load_split(ds, "test").num_examples
    cfg = dict(E.upstream_arch(arch), batch_size=bs, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
               num_puzzle_identifiers=meta.num_puzzle_identifiers)
    with ctx.device:
        up = losses.ACTLossHead(trm.TinyRecursiveReasoningModel_ACTV1(cfg), loss_type="stablemax_cross_entropy")
    up.load_state_dict(to_upstream_state_dict(ours, compiled=False, init_dtype=None), strict=True)
    up.eval()
    ours = ours.to(ctx.device).eval()
    evaluator, why = upstream_arc_evaluator(ds)
    everything = {k: v.to(ctx.device) for k, v in E.first_batch(ds, n).items()}
    T = arch.halt_max_steps
    preds, qs, seconds = {"ours": [], "upstream": []}, {"ours": [], "upstream": []}, {"ours": 0.0, "upstream": 0.0}
    update_s = 0.0
    with torch.inference_mode(), ctx.device:
        for start in range(0, n, bs):
            batch = {k: v[start:start + bs] for k, v in everything.items()}
            for side in ("ours", "upstream"):
                ctx.sync()
                t = time.perf_counter()
                if side == "ours":
                    c = ours.initial_carry(batch)
                    for _ in range(T):
                        c, o = ours(c, batch)
                    p, q = o["logits"].argmax(-1), o["q_halt_logits"]
                else:  # as pretrain.py's evaluate: ACT steps until every row has halted
                    c, done, steps = up.initial_carry(batch), False, 0
                    while not done:
                        c, _, _, o, done = up(carry=c, batch=batch, return_keys=set(evaluator[0].required_outputs)
                                              if evaluator else {"preds", "q_halt_logits"})
                        steps += 1
                    p, q = o["preds"], o["q_halt_logits"]
                ctx.sync()
                seconds[side] += time.perf_counter() - t
                if side == "upstream" and evaluator is not None:
                    t = time.perf_counter()
                    evaluator[0].update_batch(batch, o)
                    update_s += time.perf_counter() - t
                preds[side].append(p.cpu())
                qs[side].append(q.float().cpu())
    po, pu = torch.cat(preds["ours"]), torch.cat(preds["upstream"])
    differing = int((po != pu).any(-1).sum())
    out = {"rows": n, "act_steps": T, "same_predictions": differing == 0, "differing_rows": differing,
           "max_abs_q_halt_diff": float((torch.cat(qs["ours"]) - torch.cat(qs["upstream"])).abs().max()),
           "ours_examples_per_s": n / seconds["ours"], "upstream_examples_per_s": n / seconds["upstream"],
           "upstream_evaluator": None, "upstream_evaluator_missing": why}
    if evaluator is not None:
        ev, grid_hash = evaluator
        sub_dir = work / "upstream_submission"
        sub_dir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        with process_group_of_one():
            arc = ev.result(str(sub_dir), rank=0, world_size=1)
        result_s = time.perf_counter() - t
        drv = SimpleNamespace(grid_hash=grid_hash,
                              submission=lambda _ev: json.loads((sub_dir / "submission.json").read_text()))
        bad, q_diff = E.compare(ours_run, {"out": {"evaluator": ev, "arc": arc}}, drv)
        total = seconds["upstream"] + update_s + result_s
        out["upstream_evaluator"] = {
            "end_to_end_examples_per_s": n / total, "update_batch_s": update_s, "result_s": result_s,
            "pass_at_k": {k: v for k, v in arc.items()}, "mismatches": bad[:20], "same_votes": not bad,
            "max_mean_q_diff": q_diff, "ours_end_to_end_examples_per_s": ours_run["n"] / ours_run["total"]}
    return out


# ---------------------------------------------------------------------------
# The Kaggle solve and its time plan
# ---------------------------------------------------------------------------


def paper_export(work: Path, ctx: Context) -> Path:
    """A random export of the paper's ARC config (one puzzle row: unseen tasks start from it)."""
    from trm_kaggle.model.export import export_inference

    arch = E.make_arch(512, 8, 3, 4, 16)
    model = E.random_model(arch, 1, seed=0)
    return export_inference(work / "paper-weights", model, arch=arch, seq_len=E.SEQ_LEN, vocab_size=E.VOCAB)


def solve_tasks(rep: PartReport, ctx: Context, s: dict, work: Path) -> None:
    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve.solve import solve

    challenges = ctx.prepared / "data" / "unseen_challenges.json"
    weights = s["weights"] or paper_export(work, ctx)
    budget = min(s["solve_budget"], max(rep.left() - 30, 10))
    cfg = SolveConfig(challenges=str(challenges), weights=str(weights), output=str(work / "submission.json"),
                      work_dir=str(work / "ttt"), time_budget=budget, max_tasks=s["solve_tasks"],
                      device=ctx.device.type, workers=1, progress=False, **s["solve"])
    lines: list[str] = []
    t = time.time()
    report = solve(cfg, echo=lines.append)
    wall = time.time() - t
    plan_path = work / "ttt" / "workers" / "w0.plan.json"
    plan = json.loads(plan_path.read_text()) if plan_path.is_file() else None
    tasks = report["task_reports"]
    # the whole task (dataset, model load, demonstration accuracy before and after, fine-tuning, prediction),
    # which is what the plan's total prices (its per-task overhead included)
    per_task = {tid: r["task_s"] for tid, r in tasks.items() if "task_s" in r}
    measured = statistics.mean(per_task.values()) if per_task else None
    priced = bool(plan and plan.get("tasks") and plan.get("rates") and not plan.get("short"))
    estimate = plan["total_s"] / plan["tasks"] if priced else None
    if not priced:
        rep.note("the solve's plan priced nothing (" + ("no plan file" if not plan else "the fixed small plan: too "
                 "little time to time a batch" if plan.get("short") else "nothing timed") + "): no estimate to compare")
    res = {"tasks": report["tasks"], "answered": report["answered"], "valid": report["valid"],
           "errors": report["errors"], "budget_s": budget, "wall_s": wall, "elapsed_s": report["elapsed_s"],
           "plan": plan, "measured_s_per_task": per_task, "measured_mean_s": measured, "estimate_s_per_task": estimate,
           "estimate_error": (measured - estimate) / estimate if (measured and estimate) else None,
           "estimate_within_20_percent": abs(measured - estimate) <= 0.2 * estimate if (measured and estimate)
           else None,
           "settings": {k: str(v) for k, v in s["solve"].items()}, "weights": str(weights), "log": lines[-12:]}
    rep.set("solve", res)
    rows = [[tid, per_task[tid], tasks[tid].get("dataset_s"), tasks[tid].get("finetune_s"),
             tasks[tid].get("predict_s"), tasks[tid].get("finetune_steps"), tasks[tid].get("predicted"),
             tasks[tid].get("examples")] for tid in per_task]
    rep.table(f"Kaggle solve of {len(per_task)} unseen tasks ({budget:.0f} s budget)",
              ["task", "seconds", "dataset + model s", "fine-tuning s", "prediction s", "fine-tuning steps",
               "predicted", "augmented inputs"], rows,
              note=(f"plan: {estimate:.1f} s per task" if estimate else "plan: none (nothing timed)")
              + (f"; measured {measured:.1f} s per task ({100 * res['estimate_error']:+.0f} %; goal within 20 %)"
                 if res["estimate_error"] is not None else "")
              + f"; submission valid: {report['valid']}")
    if not report["valid"]:
        raise RuntimeError("the solve wrote an invalid submission")


def projection(rep: PartReport, ctx: Context) -> None:
    """Kaggle's 4 x L4 from the measured cost per task: scaled by the ratio of dense bf16 peaks (compute-bound,
    optimistic) and by the ratio of memory bandwidths (pessimistic)."""
    solved = rep.data["results"].get("solve")
    if not solved or not solved.get("measured_mean_s"):
        rep.skip("4 x L4 projection", "no measured time per task (the solve stage did not run or answered nothing)")
        return
    per_task = solved["measured_mean_s"]
    if ctx.cuda:
        name = torch.cuda.get_device_name(ctx.device)
        tflops = next((v[0] for k, v in NOMINAL_TFLOPS.items() if k in name), None)
        gbs = next((v for k, v in BANDWIDTH_GBS.items() if k in name), None)
    elif ctx.smoke:  # the arithmetic only: an L4's own rates, so the slow-down is 1
        name, tflops, gbs = "cpu (smoke mode: L4 rates assumed)", L4_TFLOPS, L4_GBS
    else:
        name, tflops, gbs = str(ctx.device), None, None
    if tflops is None or gbs is None:
        rep.skip("4 x L4 projection", f"no data-sheet rates for {name}: the scaling to an L4 is unknown")
        return
    budget_per_task = KAGGLE_HOURS * 3600 * KAGGLE_GPUS / HIDDEN_TASKS
    rows, res = [], {}
    for label, factor in (("compute-bound (bf16 peak ratio)", tflops / L4_TFLOPS),
                          ("bandwidth-bound (memory bandwidth ratio)", gbs / L4_GBS)):
        l4_task = per_task * factor
        total_h = l4_task * HIDDEN_TASKS / KAGGLE_GPUS / 3600
        res[label] = {"factor": factor, "l4_s_per_task": l4_task, "hours_for_240_tasks": total_h,
                      "fits_12h": total_h <= KAGGLE_HOURS, "headroom": budget_per_task / l4_task}
        rows.append([label, factor, l4_task, total_h, total_h <= KAGGLE_HOURS, budget_per_task / l4_task])
    res["assumptions"] = (f"the measured mean seconds per task here ({per_task:.1f} s, this part's solve settings and "
                          f"plan) times the ratio of {name}'s to an L4's data-sheet rate; {HIDDEN_TASKS} tasks shared "
                          f"evenly by {KAGGLE_GPUS} workers (one per L4) with no start-up cost; the kernel's own "
                          f"plan fits its settings (num_aug, fine-tuning steps) to {budget_per_task:.0f} s per task, "
                          f"so 'headroom' says how much more work per task the 12 h would allow")
    rep.set("projection", res)
    rep.table(f"projection to Kaggle's {KAGGLE_GPUS} x L4, {HIDDEN_TASKS} tasks in {KAGGLE_HOURS:.0f} h",
              ["assumption", "slow-down", "L4 s/task", "hours", "fits", "headroom"], rows, note=res["assumptions"])
