"""Part 3: evaluation (ours in float32 and in the user's dtype compiled, end to end; ours and upstream's models
judged against a float64 run of upstream on the same weights and batches; upstream's ARC evaluator against our
votes on the same predictions), the Kaggle solve of unseen tasks with its time plan (the plan's estimate
against the measured time per task), and a projection to Kaggle's 4 x L4 for the hidden set (240 tasks, 12 h).

The model is the paper's ARC config (hidden 512, H_cycles 3, L_cycles 4, 16 ACT steps) with random weights and a
q head calibrated so that about half the rows would halt early (benchmarks/bench_evaluate.py's
`random_model` / `calibrate_halting`): the figures are speeds and agreement, not accuracy.

Agreement. Two float32 implementations of 16 ACT steps (240 net calls) round differently, and with random
weights many cells are near-ties: on the first H100 run 113 of 252 rows differed between ours and upstream
though one training step of each matched a float64 run closely. So each side is measured against a float64
run of upstream (`bench_train_cpu.float64_model`) on the same rows: the share of cells, of rows (every cell)
and of test inputs' top-2 votes that agree with it. Ours passes when its disagreement is within
`AGREE_RATIO` x upstream's plus a floor (`AGREE_FLOOR`), as parity judges one step; a 1 % change of the weights
breaks it (tests/test_gpu_suite.py plants one).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import bench_evaluate as E
from benchmarks import bench_train_cpu as B
from benchmarks.gpu_suite import variants
from benchmarks.gpu_suite.context import NOMINAL_TFLOPS, Context
from benchmarks.gpu_suite.report import PartReport
from trm_kaggle.model import Carry

TITLE = "evaluation throughput and agreement, the Kaggle solve and its time plan, the 4 x L4 projection"
#: Kaggle's hidden set and kernel: 240 tasks, 12 hours, 4 x L4 (121 TFLOP/s dense bf16, 300 GB/s each).
HIDDEN_TASKS, KAGGLE_HOURS, KAGGLE_GPUS = 240, 12.0, 4
L4_TFLOPS, L4_GBS = 121.0, 300.0
#: Memory bandwidth in GB/s by a substring of the device name (data sheets), for the pessimistic projection.
BANDWIDTH_GBS = {"H200": 4800.0, "H100 80GB HBM3": 3350.0, "H100 PCIe": 2000.0, "H100": 3350.0,
                 "A100": 2039.0, "L40S": 864.0, "L4": 300.0}
#: Ours' disagreement with the float64 reference may be this many times upstream's, plus a floor per figure
#: (a few cells or rows of rounding where upstream happens to have none).
AGREE_RATIO = 4.0
AGREE_FLOOR = {"cells": 1e-3, "rows": 0.05, "votes": 0.05}
SMOKE_ARCH = (32, 2, 2, 2, 4)
PAPER_ARCH = (512, 8, 3, 4, 16)


def sizes(ctx: Context) -> dict:
    if ctx.smoke:
        return dict(arch=SMOKE_ARCH, batch=8, tasks=1, solve_tasks=2, compile_kwargs={"backend": "eager"},
                    solve=dict(num_aug=1, finetune_steps=2, safety_margin=5.0, eval_batch_size=8,
                               global_batch_size=8, threads=1), solve_budget=60.0, solve_setup_s=0.0)
    return dict(arch=PAPER_ARCH, batch=256, tasks=6, solve_tasks=12, compile_kwargs={},
                solve=dict(num_aug="auto", finetune_steps="auto", safety_margin=10.0), solve_budget=None,
                solve_setup_s=15.0)


def setup(rep: PartReport, ctx: Context) -> dict:
    from benchmarks.gpu_suite.prepare import read_manifest

    read_manifest(ctx.prepared)
    # scratch (exports, datasets, fine-tuning runs) outside --out: only the report goes back from a GPU machine
    scratch = tempfile.TemporaryDirectory(prefix="gpu_suite_part3_")
    return {"s": sizes(ctx), "scratch": scratch, "work": Path(scratch.name)}


def teardown(state: dict) -> None:
    state["scratch"].cleanup()


def stages():
    """This part's stages for the schedule (benchmarks/gpu_suite/schedule.py), with their shares of the 480 s
    budget and the least seconds each starts with. The solve's share is reserved before the evaluation runs."""
    from benchmarks.gpu_suite.schedule import Stage

    def staged(name, fn):
        def run(rep, ctx, state):
            with rep.stage(name):
                fn(rep, ctx, state)
        return run

    return [Stage("evaluation", staged("evaluation", lambda rep, ctx, st: evaluation(rep, ctx, st["s"], st["work"])),
                  65, 30),
            Stage("solve", staged("solve", lambda rep, ctx, st: solve_tasks(rep, ctx, st["s"], st["work"])), 70, 40),
            Stage("projection", staged("projection", lambda rep, ctx, st: projection(rep, ctx)), 0, 0)]


# ---------------------------------------------------------------------------
# Evaluation throughput and agreement
# ---------------------------------------------------------------------------


class UpstreamForEvaluate(torch.nn.Module):
    """Upstream's ACT model (its ACTLossHead, our weights loaded) behind the calls our `evaluate` makes:
    initial_carry(batch) and forward(carry, batch) -> (carry, outputs with logits and q_halt_logits), with the
    attributes it reads (arch, seq_len, vocab_size, num_puzzle_identifiers). Upstream makes its carries'
    tensors without a device, under `with torch.device(...)` as its pretrain.py runs: so do these calls. In eval
    mode its ACT runs every step (halting only at the last), as ours does without early exit."""

    def __init__(self, head: torch.nn.Module, arch, seq_len: int, vocab_size: int, num_puzzle_identifiers: int):
        super().__init__()
        self.head = head
        self.arch, self.seq_len, self.vocab_size = arch, seq_len, vocab_size
        self.num_puzzle_identifiers = num_puzzle_identifiers

    def _device(self) -> torch.device:
        return next(self.head.parameters()).device

    # Our rollout keeps and edits our `Carry` (z_H, z_L, steps, halted, current_data) between calls and decodes
    # the rows that stop with `decode`; upstream's carry nests z_H and z_L in an inner carry: each call converts.
    def initial_carry(self, batch: dict) -> Carry:
        with self._device():
            return self._ours(self.head.initial_carry(batch))

    def forward(self, carry: Carry, batch: dict, logits: bool = True):
        """One ACT step of upstream's model; `logits` is ours' option to skip them (upstream always makes them)."""
        up = self.head.model
        inner = type(up.inner.empty_carry(0))(z_H=carry.z_H, z_L=carry.z_L)
        with self._device():
            new, out = up(carry=self._carry_type(inner_carry=inner, steps=carry.steps, halted=carry.halted,
                                                 current_data=carry.current_data), batch=batch)
        return self._ours(new), out

    def decode(self, z_H: torch.Tensor) -> torch.Tensor:
        inner = self.head.model.inner
        return inner.lm_head(z_H)[:, inner.puzzle_emb_len:]

    def _ours(self, up_carry) -> Carry:
        self._carry_type = type(up_carry)
        return Carry(z_H=up_carry.inner_carry.z_H, z_L=up_carry.inner_carry.z_L, steps=up_carry.steps,
                     halted=up_carry.halted, current_data=up_carry.current_data)


def agreement(side: dict, ref: dict) -> dict:
    """The share of `ref`'s predicted cells, rows (every cell) and test inputs' top-2 votes (both attempts, in
    order) that `side` agrees with; two `E.run_ours` results over the same rows."""
    a, b = side["result"], ref["result"]
    same = a.predictions.tokens == b.predictions.tokens
    slots = b.test_set.slots
    votes = [[E.grid_id(c["grid"]) for c in a.votes.ranked(slot, limit=2)]
             == [E.grid_id(c["grid"]) for c in b.votes.ranked(slot, limit=2)] for slot in slots]
    return {"cells": float(same.mean()), "rows": float(same.all(1).mean()), "votes": float(np.mean(votes)),
            "n_rows": int(same.shape[0]), "n_inputs": len(slots)}


def judge_agreement(ours: dict, upstream: dict) -> dict:
    """Ours' disagreement with the float64 reference against upstream's, figure by figure (see the module
    docstring): ok when each is at most AGREE_RATIO x upstream's + AGREE_FLOOR."""
    out = {}
    for k, floor in AGREE_FLOOR.items():
        bound = AGREE_RATIO * (1.0 - upstream[k]) + floor
        out[k] = {"ours_disagree": 1.0 - ours[k], "upstream_disagree": 1.0 - upstream[k], "bound": bound,
                  "ok": 1.0 - ours[k] <= bound}
    return {"figures": out, "ok": all(v["ok"] for v in out.values()),
            "rule": f"ours' disagreement <= {AGREE_RATIO:g} x upstream's + {AGREE_FLOOR}"}


def user_dtype(arch, device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype `trm-kaggle evaluate` runs this model in on `device` (forward_dtype auto)."""
    from trm_kaggle.model import resolve_forward_dtype

    return resolve_forward_dtype(arch.model_copy(update={"forward_dtype": "auto"}), device)


def evaluation(rep: PartReport, ctx: Context, s: dict, work: Path) -> None:
    """Ours end to end in float32 (eager, the comparison's dtype) and in the user's dtype compiled, early exit;
    with upstream's code its model through our pipeline on the same rows, its evaluator on those predictions,
    and both sides judged against upstream's float64 run; without it, ours against its own float64 run
    (reported, not judged). Pieces are dropped, last first, when the stage's allowance runs short."""
    from trm_kaggle.data import load_metadata

    ds = ctx.prepared / "data" / "arc"
    arch = E.make_arch(*s["arch"])
    meta = load_metadata(ds, "test")
    base = E.random_model(arch, meta.num_puzzle_identifiers, seed=0).to(ctx.device)
    probe = {k: v.to(ctx.device) for k, v in E.first_batch(ds, 16).items()}
    bias, _, _ = E.calibrate_halting(base, probe, 0.5, seed=0)
    ours = E.load_ours(base, arch, ds, work / "export", ctx.device)
    tasks = s["tasks"]
    E.run_ours(ours, ds, s["batch"], max_tasks=1)  # warm-up: the device's kernels and caches
    r32 = E.run_ours(ours, ds, s["batch"], max_tasks=tasks)
    n = r32["n"]
    res = {"examples": n, "tasks": len(r32["result"].test_set.task_ids), "batch": min(s["batch"], n),
           "arch": list(s["arch"]), "q_bias": bias, "float32": speed(r32)}
    rep.set("evaluation", res)
    rows = [["ours float32 eager, end to end (predict + decode + vote + score)", res["float32"]["examples_per_s"],
             res["float32"]["model_examples_per_s"], None]]
    table = {"title": f"evaluation, {n} augmented test inputs of {res['tasks']} tasks, {arch.halt_max_steps} ACT "
                      f"steps, batch {res['batch']}", "header": ["side", "examples/s", "model examples/s",
                                                                 "ours / upstream"], "rows": rows, "note": ""}
    rep.data["tables"].append(table)

    dtype, why = user_dtype(arch, ctx.device)
    if rep.left() > 20 or ctx.smoke:
        user = E.load_ours(base, arch, ds, work / "export", ctx.device)
        user.forward_dtype = dtype
        user = variants.ours_compiled(user, **s["compile_kwargs"])
        t = time.perf_counter()
        E.run_ours(user, ds, s["batch"], max_tasks=tasks)  # compiles for this batch shape
        first = time.perf_counter() - t
        r_user = E.run_ours(user, ds, s["batch"], max_tasks=tasks)
        res["user"] = {**speed(r_user), "dtype": str(dtype).replace("torch.", ""), "why": why, "compiled": True,
                       "first_run_s": first, "speed_up_over_float32": (r_user["n"] / r_user["total"])
                       / res["float32"]["examples_per_s"]}
        rows.append([f"ours {res['user']['dtype']} compiled (the user's dtype), end to end",
                     res["user"]["examples_per_s"], res["user"]["model_examples_per_s"], None])
        rep.write()
    else:
        r_user = None
        rep.skip("evaluation in the user's dtype, compiled", "the stage's allowance was spent", cut=True)

    if ctx.upstream is None:
        rep.skip("upstream's model on the same weights and rows", ctx.upstream_why or "upstream not given")
        ref_label, r_up = "ours in float64 (upstream absent: reported, not judged)", None
        ref_model = B.float64_model(ours)
    else:
        up = upstream_model(ctx, ours, arch, meta)
        r_up = E.run_ours(up, ds, s["batch"], max_tasks=tasks)
        res["upstream_float32"] = speed(r_up)
        rows.append(["upstream's model float32 eager, through the same pipeline", res["upstream_float32"]
                     ["examples_per_s"], res["upstream_float32"]["model_examples_per_s"],
                     res["float32"]["examples_per_s"] / res["upstream_float32"]["examples_per_s"]])
        evaluator = upstream_evaluator_on(ctx, r_up, ds, work)
        res["upstream_evaluator"] = evaluator
        if evaluator.get("missing"):
            rep.skip("upstream's ARC evaluator (evaluators/arc.py)", evaluator["missing"])
        ref_label, ref_model = "upstream in float64", UpstreamForEvaluate(B.float64_model(up.head), arch,
                                                                           meta.seq_len, meta.vocab_size,
                                                                           meta.num_puzzle_identifiers)
        rep.write()
    if rep.left() > 10 or ctx.smoke:
        r64 = E.run_ours(ref_model, ds, s["batch"], max_tasks=tasks)
        agree = {"reference": ref_label, "ours float32": agreement(r32, r64)}
        if r_user is not None:
            agree[f"ours {res['user']['dtype']} compiled"] = agreement(r_user, r64)
        if r_up is not None:
            agree["upstream float32"] = agreement(r_up, r64)
            agree["judgement"] = judge_agreement(agree["ours float32"], agree["upstream float32"])
        res["agreement_with_float64"] = agree
        rep.table(f"agreement with {ref_label}, {n} rows ({arch.halt_max_steps} ACT steps)",
                  ["side", "cells", "rows", "votes (top-2)"],
                  [[k, v["cells"], v["rows"], v["votes"]] for k, v in agree.items() if isinstance(v, dict)
                   and "cells" in v],
                  note=agree["judgement"]["rule"] if "judgement" in agree else "")
    else:
        rep.skip("agreement with a float64 run", "the stage's allowance was spent", cut=True)
    if rep.left() > 5 or ctx.smoke:
        early = E.run_ours(ours, ds, s["batch"], early_exit=True, max_tasks=tasks)
        res["early_exit"] = {**speed(early), "mean_steps": early["mean_steps"]}
        rows.append(["ours float32 eager, early exit, end to end", res["early_exit"]["examples_per_s"],
                     res["early_exit"]["model_examples_per_s"], None])
        table["note"] = f"mean ACT steps with early exit {early['mean_steps']:.2f} of {arch.halt_max_steps}"
    else:
        rep.skip("evaluation with early exit", "the stage's allowance was spent", cut=True)
    judged = res.get("agreement_with_float64", {}).get("judgement")
    if judged and not judged["ok"]:
        bad = ", ".join(f"{k} {v['ours_disagree']:.3g} > {v['bound']:.3g}" for k, v in judged["figures"].items()
                        if not v["ok"])
        raise RuntimeError(f"ours disagrees with the float64 reference beyond the bound: {bad}")
    ev = res.get("upstream_evaluator") or {}
    if ev.get("same_votes") is False:
        raise RuntimeError(f"upstream's evaluator and ours disagree on the same predictions: {ev['mismatches'][:3]}")


def speed(run: dict) -> dict:
    return {"examples_per_s": run["n"] / run["total"], "model_examples_per_s": run["n"] / run["model"],
            "share_outside_model": (run["total"] - run["model"]) / run["total"], "seconds": run["total"]}


def upstream_model(ctx: Context, ours, arch, meta) -> UpstreamForEvaluate:
    """Upstream's model with ours' weights, on the device, float32, as `evaluate` drives it."""
    import importlib

    from trm_kaggle.model import to_upstream_state_dict

    trm = importlib.import_module("models.recursive_reasoning.trm")
    losses = importlib.import_module("models.losses")
    cfg = dict(E.upstream_arch(arch), batch_size=1, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
               num_puzzle_identifiers=meta.num_puzzle_identifiers)
    with ctx.device:
        head = losses.ACTLossHead(trm.TinyRecursiveReasoningModel_ACTV1(cfg), loss_type="stablemax_cross_entropy")
    head.load_state_dict(to_upstream_state_dict(ours, compiled=False, init_dtype=None), strict=True)
    return UpstreamForEvaluate(head.eval(), arch, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers)


def upstream_evaluator_on(ctx: Context, run: dict, ds: Path, work: Path) -> dict:
    """Upstream's ARC evaluator (evaluators/arc.py: update_batch, then result, as its pretrain.py runs them, in
    a gloo group of one) fed the predictions of `run` (upstream's model through our pipeline), against our
    votes on the same predictions (`E.compare`: candidates, vote counts, mean sigmoid(q_halt), top-2, pass@K):
    the same predictions in must give the same votes out."""
    from types import SimpleNamespace

    from trm_kaggle.data import load_split
    from trm_kaggle.evaluate import example_puzzles

    evaluator, why = upstream_arc_evaluator(ds)
    if evaluator is None:
        return {"missing": why}
    ev, grid_hash = evaluator
    result = run["result"]
    p = result.predictions
    split = load_split(ds, "test")
    puzzle_of, _ = example_puzzles(split.puzzle_indices, split.num_examples)
    examples = np.flatnonzero(np.isin(puzzle_of, p.puzzle_index))  # every example of the predicted puzzles
    if len(examples) != len(p) or not np.all(p.steps >= 0):
        raise RuntimeError(f"the run's {len(p)} predictions are not every example of its {len(examples)} puzzles")
    batch = {"inputs": torch.from_numpy(np.asarray(split.inputs[examples]).astype(np.int32)),
             "puzzle_identifiers": torch.from_numpy(p.puzzle_identifier.astype(np.int32))}
    outputs = {"preds": torch.from_numpy(p.tokens.astype(np.int64)), "q_halt_logits": torch.from_numpy(p.q_halt)}
    # scored over the tasks predicted, as ours is (its pass@K is a mean over test_puzzles.json's tasks)
    ev.test_puzzles = {t: ev.test_puzzles[t] for t in result.test_set.task_ids}
    t = time.perf_counter()
    ev.update_batch(batch, outputs)
    update_s = time.perf_counter() - t
    sub_dir = work / "upstream_submission"
    sub_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    with process_group_of_one():
        arc = ev.result(str(sub_dir), rank=0, world_size=1)
    result_s = time.perf_counter() - t
    drv = SimpleNamespace(grid_hash=grid_hash,
                          submission=lambda _ev: json.loads((sub_dir / "submission.json").read_text()))
    bad, q_diff = E.compare(run, {"out": {"evaluator": ev, "arc": arc}}, drv)
    return {"update_batch_s": update_s, "result_s": result_s, "pass_at_k": dict(arc), "mismatches": bad[:20],
            "same_votes": not bad, "max_mean_q_diff": q_diff}


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


# ---------------------------------------------------------------------------
# The Kaggle solve and its time plan
# ---------------------------------------------------------------------------


def random_export(work: Path, sizes: tuple) -> Path:
    """A random export of the ARC config `sizes` (one puzzle row: unseen tasks start from it)."""
    from trm_kaggle.model import export_inference

    arch = E.make_arch(*sizes)
    model = E.random_model(arch, 1, seed=0)
    return export_inference(work / "solve-weights", model, arch=arch, seq_len=E.SEQ_LEN, vocab_size=E.VOCAB)


def solve_tasks(rep: PartReport, ctx: Context, s: dict, work: Path) -> None:
    """`trm-kaggle submit`'s solve of the unseen tasks with the stage's allowance as its budget (less what the
    export and the solve's start take), its plan priced on this device."""
    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve import solve

    challenges = ctx.prepared / "data" / "unseen_challenges.json"
    weights = random_export(work, s["arch"])
    budget = s["solve_budget"] or max(rep.left() - s["solve_setup_s"], 10.0)
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
    inference_projection(rep, solved, factors={k: v["factor"] for k, v in res.items() if k != "assumptions"})


def inference_projection(rep: PartReport, solved: dict, factors: dict[str, float]) -> None:
    """The hidden set's prediction alone at the evaluation's rate in the user's dtype, compiled (examples/s end
    to end, 16 ACT steps), scaled to an L4 the same two ways: at the solve plan's num_aug and at upstream's
    evaluation recipe (1000 augmentations per task)."""
    from trm_kaggle.solve import TEST_INPUTS_PER_TASK

    user = (rep.data["results"].get("evaluation") or {}).get("user")
    if not user:
        rep.skip("4 x L4 projection of the prediction alone", "no evaluation in the user's dtype was measured")
        return
    plan = solved.get("plan") or {}
    augs = sorted({n for n in (plan.get("num_aug"), 1000) if isinstance(n, int)})
    rows, out = [], {}
    for n in augs:
        examples = HIDDEN_TASKS * TEST_INPUTS_PER_TASK * (n + 1)
        for label, factor in factors.items():
            hours = examples / user["examples_per_s"] * factor / KAGGLE_GPUS / 3600
            out[f"num_aug {n}, {label}"] = {"examples": examples, "hours": hours, "fits_12h": hours <= KAGGLE_HOURS}
            rows.append([n, label, examples, hours, hours <= KAGGLE_HOURS])
    rep.data["results"]["projection"]["prediction_alone"] = out
    rep.table(f"projection of the prediction alone to {KAGGLE_GPUS} x L4 ({user['dtype']} compiled, "
              f"{user['examples_per_s']:.1f} examples/s here)", ["num_aug", "assumption", "examples", "hours", "fits"],
              rows, note=f"{TEST_INPUTS_PER_TASK:.2f} test inputs per task (ARC-AGI-2's evaluation set), each "
                         f"predicted num_aug + 1 times; no fine-tuning, no start-up")
