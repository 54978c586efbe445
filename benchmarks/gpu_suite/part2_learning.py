"""Part 2: time to accuracy. Two stages: 4x4 Sudoku, ours against upstream's code, the same seed and minutes
(`learning`); and the training recipes at the paper's scale (`recipes`, below).

Ours: `trm-kaggle train` (trm_kaggle.train.loop.train) with the `sudoku4-cpu` preset (benchmarks/bench_learn_sudoku.py's
recipe) on the prepared dataset, evaluating the held-out puzzles every 2 epochs (exact solve rate: every cell
right after the full halt_max_steps).
Upstream: its model, ACT loss head and sparse SignSGD (models/, as benchmarks/bench_train_cpu.py's `Upstream`
drives them) with the same architecture, batch size, learning rates and weight decays, fed the same loader's
batches; the dense optimizer is AdamATan2 (this package's, the same algorithm as upstream's adam-atan2 CUDA
extension, which has no wheel), with a linear warm-up and then a constant rate (upstream's cosine has hardly
moved within minutes of a 1000-epoch schedule); held-out exact solve rate at the same epochs. Curves: exact
solve rate against wall time, one PNG.

Recipes: the time-to-accuracy harness (benchmarks/bench_recipes.py, `paper_scale`) with the `sudoku-mlp` preset
unchanged (upstream's architecture, batch 768, schedule and evaluation), upstream's recipe against `fast` (and
`muon-sic`, Muon as its paper trains it, when the allowance holds three runs), a bounded number of seconds each,
on the prepared generated 9x9 Sudoku (1,000 train puzzles rated >= 2 by our solver, as many as Sudoku-Extreme 1k's train split; not
Sudoku-Extreme, which cannot be fetched on a machine without network, and every report says so). A few minutes
of a GPU reach no accuracy the paper's hour does: what the stage measures is each recipe's seconds per step on
this GPU (its steps in one GPU-hour) and the steps to the targets it does reach, with the step-count ratio
against upstream's; and from them, the step-count ratio `fast` must achieve (the hardware-free part, which the
CPU harness measures) to reach upstream's 87.4 % in one GPU-hour, upstream taking its whole schedule to it.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.gpu_suite.context import Context
from benchmarks.gpu_suite.report import PartReport, PartTimeout

TITLE = "time to accuracy on 4x4 Sudoku, ours against upstream"
TARGET = 0.8


#: The recipe stage's data (in the prepared folder) and its name in every report: never "Sudoku-Extreme".
RECIPE_DATA = "sudoku9"
RECIPE_TASK = "sudoku9-generated"
#: Upstream's held-out exact accuracy on Sudoku-Extreme with `sudoku-mlp` (its README and paper).
PAPER_ACCURACY = 0.874


def sizes(ctx: Context) -> dict:
    """`recipes`: per run at most `run_s` training seconds and at least `min_run_s`; `fixed_s` the stage's own
    cost (data, summary, plot) and `per_recipe_s` each recipe's beyond its training (its unmeasured warm-up with
    the block's compile, the run's start, its evaluations); `muon_from_s` the allowance from which a third recipe
    runs; `eval_interval` in epochs (1,000 train puzzles: 1.3 steps of 768 rows an epoch)."""
    if ctx.smoke:
        return dict(seconds=2.0, overrides=["global_batch_size=16", "arch.hidden_size=16",
                                             "eval_interval=1", "threads=1"],
                    recipes=dict(run_s=1.0, min_run_s=0.5, fixed_s=3.0, per_recipe_s=3.0, muon_from_s=0.0,
                                 eval_interval=1, targets=(0.05, 0.2, 0.5, PAPER_ACCURACY),
                                 overrides=["global_batch_size=8", "arch.hidden_size=16", "arch.H_cycles=1",
                                            "arch.L_cycles=1", "arch.halt_max_steps=2", "lr_warmup_steps=2",
                                            "threads=1"]))
    return dict(seconds=60.0, overrides=[],
                recipes=dict(run_s=120.0, min_run_s=8.0, fixed_s=10.0, per_recipe_s=15.0, muon_from_s=150.0,
                             eval_interval=10, targets=(0.05, 0.2, 0.5, PAPER_ACCURACY), overrides=[]))


def setup(rep: PartReport, ctx: Context) -> dict:
    from benchmarks.gpu_suite.prepare import read_manifest

    read_manifest(ctx.prepared)
    return {"s": sizes(ctx)}


def teardown(state: dict) -> None:
    pass


def stages():
    """This part's one stage for the schedule (benchmarks/gpu_suite/schedule.py): both curves and their plot."""
    from benchmarks.gpu_suite.schedule import Stage

    return [Stage("learning", lambda rep, ctx, state: learning(rep, ctx, state["s"]), 45, 25),
            Stage("recipes", lambda rep, ctx, state: recipes(rep, ctx, state["s"]["recipes"]), 65, 50)]


def learning(rep: PartReport, ctx: Context, s: dict) -> None:
    """Ours, then upstream, for the same seconds each: as many as the stage's allowance holds for both (each
    side can run to `hard_limit` of them), at most `sizes()["seconds"]`."""
    data = ctx.prepared / "data" / "sudoku4"
    seconds = min(s["seconds"], max((rep.left() - 25) / 3.2, 1.0))
    curves: dict[str, list[tuple[int, float, float]]] = {}
    # scratch (the training run's states) outside --out: only the report and its PNG go back from a GPU machine
    with tempfile.TemporaryDirectory(prefix="gpu_suite_part2_") as work:
        cfg = config(ctx, data, Path(work), s["overrides"])
        with rep.stage("ours"):
            curves["ours"] = train_ours(cfg, seconds)
        with rep.stage("upstream"):
            if ctx.upstream is None:
                rep.skip("upstream's curve", ctx.upstream_why or "upstream not given")
            else:
                curves["upstream"] = train_upstream(cfg, ctx, seconds)
    with rep.stage("curves"):
        summarise(rep, curves, seconds, cfg)


def config(ctx: Context, data: Path, work: Path, overrides: list[str]):
    from trm_kaggle.train import load_train_config

    return load_train_config(presets=["sudoku4-cpu"], overrides=[
        f"data_paths=[{data}]", f"checkpoint_path={work / 'run'}", "seed=0", "progress=False", "log_interval=31",
        f"device={ctx.device.type}", *overrides])


def hard_limit(seconds: float) -> float:
    """Each side stops at its first evaluation after `seconds`, and in any case before a step that would start
    after this many seconds (evaluations come every few epochs, so the last one can come late)."""
    return 1.5 * seconds + 10


def train_ours(cfg, seconds: float) -> list[tuple[int, float, float]]:
    from trm_kaggle.train import train

    curve: list[tuple[int, float, float]] = []
    start = time.perf_counter()

    def on_eval(step: int, m: dict) -> bool:
        elapsed = time.perf_counter() - start
        curve.append((step, elapsed, float(m["eval_exact_accuracy"])))
        return elapsed > seconds

    train(cfg, on_eval=on_eval, deadline=time.time() + hard_limit(seconds), banner=False)
    return curve


class UpstreamSide:
    """Upstream's model, ACT loss head and sparse SignSGD (`models/` of its checkout, importable), built from our
    config with the same architecture, batch, learning rates and weight decays, fed our loader's batches; the
    dense optimizer is this package's AdamATan2 (see the module docstring). `benchmarks/bench_startup.py` runs
    it too."""

    def __init__(self, cfg, dev: torch.device):
        import importlib

        from trm_kaggle.data import PuzzleLoader
        from trm_kaggle.optim import AdamATan2

        trm = importlib.import_module("models.recursive_reasoning.trm")
        losses = importlib.import_module("models.losses")
        sparse_mod = importlib.import_module("models.sparse_embedding")
        torch.manual_seed(cfg.seed)
        self.train_loader = PuzzleLoader(cfg.data_paths, "train", cfg.global_batch_size, seed=cfg.seed, prefetch=0)
        self.test_loader = PuzzleLoader(cfg.data_paths, "test", cfg.global_batch_size, prefetch=0)
        meta, a = self.train_loader.metadata, cfg.arch
        arch = dict(halt_exploration_prob=a.halt_exploration_prob, halt_max_steps=a.halt_max_steps,
                    H_cycles=a.H_cycles, L_cycles=a.L_cycles, H_layers=a.H_layers, L_layers=a.L_layers,
                    hidden_size=a.hidden_size, num_heads=a.num_heads, expansion=a.expansion,
                    puzzle_emb_ndim=a.emb_ndim, pos_encodings=a.pos_encodings, rope_theta=a.rope_theta,
                    rms_norm_eps=a.rms_norm_eps, forward_dtype="float32", mlp_t=a.mlp_t,
                    puzzle_emb_len=a.puzzle_emb_len, no_ACT_continue=a.no_ACT_continue,
                    batch_size=cfg.global_batch_size, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
                    num_puzzle_identifiers=meta.num_puzzle_identifiers)
        with dev:
            self.model = losses.ACTLossHead(trm.TinyRecursiveReasoningModel_ACTV1(arch), loss_type=a.loss_type)
        self.dense = AdamATan2(self.model.parameters(), lr=0.0, betas=(cfg.beta1, cfg.beta2),
                               weight_decay=cfg.weight_decay)
        self.sparse = sparse_mod.CastedSparseEmbeddingSignSGD_Distributed(
            self.model.model.puzzle_emb.buffers(), world_size=1, lr=0.0, weight_decay=cfg.puzzle_emb_weight_decay)
        self.cfg, self.dev, self.carry, self.step = cfg, dev, None, 0

    def train_step(self, batch: dict) -> None:
        """One optimizer step on a loader batch (its carry kept between steps), after a linear warm-up."""
        cfg, dev, model = self.cfg, self.dev, self.model
        batch = {k: v.to(dev) for k, v in batch.items()}
        model.train()
        with dev:
            if self.carry is None:
                self.carry = model.initial_carry(batch)
            self.carry, loss, _, _, _ = model(carry=self.carry, batch=batch, return_keys=[])
        ((1 / cfg.global_batch_size) * loss).backward()
        self.step += 1
        scale = min(1.0, self.step / max(cfg.lr_warmup_steps, 1))
        for g in self.dense.param_groups:
            g["lr"] = cfg.lr * scale
        for g in self.sparse.param_groups:
            g["lr"] = cfg.puzzle_emb_lr * scale
        with dev:
            self.sparse.step()
        self.dense.step()
        self.sparse.zero_grad()
        self.dense.zero_grad()

    def exact_accuracy(self) -> float:
        """Share of the test split's real rows whose every labelled cell the model predicts right after all
        `halt_max_steps` ACT steps."""
        model, dev = self.model, self.dev
        model.eval()
        right = total = 0
        with torch.inference_mode(), dev:
            for item in self.test_loader:
                batch = {k: v.to(dev) for k, v in item.batch.items()}
                carry = model.initial_carry(batch)
                for _ in range(self.cfg.arch.halt_max_steps):
                    carry, _, _, out, _ = model(carry=carry, batch=batch, return_keys={"preds"})
                labels = batch["labels"]
                ok = ((out["preds"] == labels) | (labels < 0)).all(-1)[:item.num_real]
                right += int(ok.sum())
                total += item.num_real
        return right / max(total, 1)


def train_upstream(cfg, ctx: Context, seconds: float) -> list[tuple[int, float, float]]:
    """Upstream's side (`UpstreamSide`) on the clock and evaluation schedule ours keeps."""
    side = UpstreamSide(cfg, ctx.device)
    curve: list[tuple[int, float, float]] = []
    start, last_epoch = time.perf_counter(), 0
    for batch in side.train_loader.iterate():
        side.train_step(batch)
        if time.perf_counter() - start > hard_limit(seconds):  # as ours: no step starts after the hard limit
            break
        epoch = side.train_loader.epoch
        if epoch - last_epoch >= cfg.eval_interval:  # as ours: every eval_interval epochs
            last_epoch = epoch
            elapsed = time.perf_counter() - start
            curve.append((side.step, elapsed, side.exact_accuracy()))
            if elapsed > seconds:  # as ours: the first evaluation after `seconds` is the last
                break
    return curve


def summarise(rep: PartReport, curves: dict, seconds: float, cfg) -> None:
    if not curves:
        raise RuntimeError("no curve was measured")
    empty = [side for side, c in curves.items() if not c]
    if empty:  # left out of the table and the plot; the stage fails below: a curve without a point is no result
        curves = {side: c for side, c in curves.items() if c}
    res = {}
    for side, c in curves.items():
        reached = next((t for _, t, acc in c if acc >= TARGET), None)
        res[side] = {"points": [{"step": s, "seconds": t, "exact": a} for s, t, a in c],
                     "best_exact": max((a for _, _, a in c), default=None), "steps": c[-1][0] if c else 0,
                     "seconds_to_target": reached}
    verdict = None
    if "ours" in curves and "upstream" in curves:
        # at the latest time both curves reach: each side's last evaluation by then
        t = min(curves["ours"][-1][1], curves["upstream"][-1][1])
        at = {side: next((a for _, s_, a in reversed(c) if s_ <= t), None) for side, c in curves.items()}
        verdict = {"at_seconds": t, "ours": at["ours"], "upstream": at["upstream"],
                   "ours_not_worse": None if None in at.values() else at["ours"] >= at["upstream"]}
    rep.set("learning", {"target": TARGET, "seconds": seconds, "sides": res, "without_a_point": empty,
                         "at_equal_time": verdict, "recipe": "sudoku4-cpu", "batch": cfg.global_batch_size})
    rows = [[side, r["steps"], r["points"][-1]["seconds"] if r["points"] else None, r["best_exact"],
             r["seconds_to_target"]] for side, r in res.items()]
    rep.table(f"held-out exact solve rate after {seconds:.0f} s each (target {TARGET})",
              ["side", "steps", "seconds", "best exact", f"seconds to {TARGET}"], rows)
    import matplotlib

    from trm_kaggle.atomic import atomic_write

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for side, c in curves.items():
        ax.plot([t for _, t, _ in c], [a for _, _, a in c], marker="o", label=side)
    ax.axhline(TARGET, color="grey", ls=":", lw=1)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("held-out exact solve rate")
    ax.set_title("4x4 Sudoku, same seed and minutes")
    ax.legend()
    fig.tight_layout()
    path = rep.out / "learning_curves.png"
    rep.out.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    rep.figure(path, "held-out exact solve rate against wall time")
    if empty:
        raise RuntimeError(f"no held-out evaluation within {seconds:.0f} s for: {', '.join(empty)} (evaluations come "
                           f"every {cfg.eval_interval} epochs)")


# ---------------------------------------------------------------------------
# Recipes at the paper's scale (benchmarks/bench_recipes.py)
# ---------------------------------------------------------------------------


def recipes(rep: PartReport, ctx: Context, s: dict) -> None:
    """Upstream's recipe and `fast` (and `muon-sic` when the allowance holds it) with `sudoku-mlp` on the prepared
    9x9 set, the same seconds each; the harness's JSON, markdown and PNG go into this part's folder."""
    from benchmarks.bench_recipes import paper_scale

    data = ctx.prepared / "data" / RECIPE_DATA
    if not (data / "train" / "dataset.json").is_file():
        rep.skip("recipes at the paper's scale", f"the prepared folder has no data/{RECIPE_DATA} (prepared before "
                                                 f"the stage existed): run `prepare` again")
        return
    names = ["upstream", "fast"] + (["muon-sic"] if rep.left() >= s["muon_from_s"] else [])
    spare = rep.left() - s["fixed_s"] - len(names) * s["per_recipe_s"]
    # 1.6: a run's evaluations (500 puzzles x 16 ACT steps, every 13 steps) cost more than half its training
    run_s = min(s["run_s"], max(s["min_run_s"], spare / (1.6 * len(names))))
    extra = [*s["overrides"]]
    if not ctx.smoke:  # each run stops by its share of the wall time, should its evaluations come late
        extra.append(f"time_limit={2 * run_s + 10:g}")
    # the run folders (weights, train states) outside --out: only the reports travel back from a GPU machine
    with tempfile.TemporaryDirectory(prefix="gpu_suite_recipes_") as work:
        with rep.stage("recipes"):
            try:
                report = paper_scale(data, names, work=Path(work), budget_s=run_s, targets=s["targets"],
                                     device=ctx.device.type, eval_interval=s["eval_interval"], out=rep.out,
                                     extra=extra, name=RECIPE_TASK, say=progress(ctx))
            except PartTimeout:  # ended at its allowance: the runs the harness saved so far still count
                saved = rep.out / f"bench_recipes_{RECIPE_TASK}.json"
                if saved.is_file():
                    summarise_recipes(rep, json.loads(saved.read_text()), data, run_s, s["targets"])
                    rep.note("recipes: ended at the stage's allowance; its table holds the runs finished by then")
                raise
            summarise_recipes(rep, report, data, run_s, s["targets"])


def progress(ctx: Context):
    """The harness's one-line messages (each evaluation) to the suite's log; its closing markdown stays in the
    files it writes."""
    def say(*args, **_) -> None:
        text = " ".join(str(a) for a in args)
        if "\n" not in text:
            ctx.say(text)
    return say


def recipe_figures(report: dict, targets) -> dict:
    """Per recipe (its one seed's curve): steps, training seconds, seconds per step between its first and last
    evaluation (the start and the block's compile left out), steps in a GPU-hour at that rate, FLOP/s, the best
    held-out exact accuracy, and the steps to each target (None: not reached); per target, the step-count ratio
    against upstream's where both reached it."""
    out: dict = {}
    for c in report["curves"]:
        pts = c["points"]
        if not pts:
            out[c["recipe"]] = {"steps": 0, "stopped_by": c["stopped_by"]}
            continue
        a, b = pts[0], pts[-1]
        if b["step"] > a["step"] and b["seconds"] > a["seconds"]:
            per_step = (b["seconds"] - a["seconds"]) / (b["step"] - a["step"])
            flops_s = (b["flops"] - a["flops"]) / (b["seconds"] - a["seconds"])
        else:  # one evaluation: the whole run, its start included
            per_step, flops_s = b["seconds"] / max(b["step"], 1), b["flops"] / max(b["seconds"], 1e-9)
        out[c["recipe"]] = {
            "steps": b["step"], "examples": b["examples"], "seconds": b["seconds"], "evaluations": len(pts),
            "seconds_per_step": per_step, "steps_per_gpu_hour": 3600.0 / per_step, "flops_per_s": flops_s,
            "best_exact": max(p["accuracy"] for p in pts), "last_exact": b["accuracy"], "stopped_by": c["stopped_by"],
            "steps_to": {str(t): next((p["step"] for p in pts if p["accuracy"] >= t), None) for t in targets}}
    up = out.get("upstream", {}).get("steps_to", {})
    for name, r in out.items():
        if name != "upstream" and "steps_to" in r:
            r["step_ratio"] = {t: (n / up[t] if n and up.get(t) else None) for t, n in r["steps_to"].items()}
    return out


def summarise_recipes(rep: PartReport, report: dict, data: Path, run_s: float, targets) -> None:
    """The stage's results and tables from the harness's report (or the part of it saved when the stage was
    ended)."""
    from trm_kaggle.data import load_metadata
    from trm_kaggle.train import total_train_steps

    targets = list(targets)
    figures = recipe_figures(report, targets)
    up_cfg = report["configs"]["upstream"]
    meta = load_metadata(data, "train")
    schedule = total_train_steps(up_cfg["epochs"], meta.total_groups, meta.mean_puzzle_examples,
                                 up_cfg["global_batch_size"])
    build = json.loads((data / "build_info.json").read_text()) if (data / "build_info.json").is_file() else {}
    up = figures.get("upstream", {})
    projection = {"schedule_steps": schedule, "paper_accuracy": PAPER_ACCURACY,
                  "upstream_schedule_gpu_hours": (schedule * up["seconds_per_step"] / 3600.0
                                                  if "seconds_per_step" in up else None)}
    for name, r in figures.items():
        if name != "upstream" and "seconds_per_step" in r:
            # upstream reaches its accuracy at its schedule's end (where the paper evaluates): the recipe must
            # reach it in the steps one GPU-hour buys at its measured rate
            projection[name] = {"steps_in_one_gpu_hour": r["steps_per_gpu_hour"],
                                "step_ratio_needed": r["steps_per_gpu_hour"] / schedule}
    rep.set("recipes", {
        "data": {"folder": RECIPE_DATA, "name": RECIPE_TASK, "is_sudoku_extreme": False,
                 "what": "generated 9x9 Sudoku (trm-kaggle build-sudoku), rated by our solver's guesses; not "
                         "Sudoku-Extreme (no network on the GPU machine)",
                 "train_puzzles": meta.total_groups, "train_rows": meta.total_puzzles,
                 "test_puzzles": load_metadata(data, "test").total_puzzles,
                 "min_rating": (build.get("config") or {}).get("min_difficulty"),
                 "rating_mean": (build.get("train") or {}).get("rating_mean")},
        "preset": "sudoku-mlp", "batch": up_cfg["global_batch_size"], "device": up_cfg["device"],
        "compile": up_cfg["compile"], "seconds_per_run": run_s, "eval_interval_epochs": up_cfg["eval_interval"],
        "targets": targets, "recipes": figures, "projection": projection,
        "reports": [f"bench_recipes_{RECIPE_TASK}.{x}" for x in ("json", "md", "png")]})
    rows = []
    for name, r in figures.items():
        reached = "; ".join(f"{t}: {n}" for t, n in r.get("steps_to", {}).items() if n)
        ratios = "; ".join(f"{t}: {v:.2f}x" for t, v in (r.get("step_ratio") or {}).items() if v is not None)
        rows.append([name, r["steps"], r.get("seconds"), r.get("seconds_per_step"), r.get("steps_per_gpu_hour"),
                     r.get("best_exact"), reached or "none", ratios or "-"])
    rep.table(f"recipes with sudoku-mlp on {RECIPE_TASK} (generated 9x9 Sudoku, NOT Sudoku-Extreme), "
              f"{run_s:.0f} s each", ["recipe", "steps", "train s", "s/step", "steps per GPU-hour", "best exact",
                                      "steps to target", "step ratio vs upstream"], rows,
              note="s/step between the first and the last evaluation; `fast` starts in the shallowest stage of its "
                   "depth curriculum, so its later steps cost more than these. Targets a run did not reach are "
                   "left out.")
    prow = [["upstream's whole schedule", schedule, projection["upstream_schedule_gpu_hours"], None]]
    prow += [[f"{n} in one GPU-hour", p["steps_in_one_gpu_hour"], 1.0, p["step_ratio_needed"]]
             for n, p in projection.items() if isinstance(p, dict)]
    rep.table(f"what {PAPER_ACCURACY:.1%} in one GPU-hour asks (the step rates above)",
              ["run", "steps", "GPU-hours", "step ratio needed"], prow,
              note="upstream's accuracy comes at its schedule's end; a recipe meets the target when it reaches "
                   "that accuracy within its steps in one GPU-hour: its step-count ratio against upstream's "
                   "(which the CPU harness measures) at most the ratio needed.")
    png = rep.out / f"bench_recipes_{RECIPE_TASK}.png"
    if png.is_file():
        rep.figure(png, f"held-out exact accuracy of each recipe on {RECIPE_TASK} (not Sudoku-Extreme)")
