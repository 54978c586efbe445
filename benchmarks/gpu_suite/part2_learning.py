"""Part 2: time to accuracy on generated 4x4 Sudoku, ours against upstream's code, the same seed and minutes.

Ours: `trm-kaggle train` (trm_kaggle.train.loop.train) with the `sudoku4-cpu` preset (benchmarks/bench_learn_sudoku.py's
recipe) on the prepared dataset, evaluating the held-out puzzles every 2 epochs (exact solve rate: every cell
right after the full halt_max_steps).
Upstream: its model, ACT loss head and sparse SignSGD (models/, as benchmarks/bench_train_cpu.py's `Upstream`
drives them) with the same architecture, batch size, learning rates and weight decays, fed the same loader's
batches; the dense optimizer is AdamATan2 (this package's, the same algorithm as upstream's adam-atan2 CUDA
extension, which has no wheel), with a linear warm-up and then a constant rate (upstream's cosine has hardly
moved within minutes of a 1000-epoch schedule); held-out exact solve rate at the same epochs. Curves: exact
solve rate against wall time, one PNG.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from benchmarks.gpu_suite.context import Context
from benchmarks.gpu_suite.report import PartReport

TITLE = "time to accuracy on 4x4 Sudoku, ours against upstream"
TARGET = 0.8


def sizes(ctx: Context) -> dict:
    if ctx.smoke:
        return dict(seconds=2.0, overrides=["global_batch_size=16", "arch.hidden_size=16", "arch.num_heads=2",
                                             "eval_interval=1", "threads=1"])
    return dict(seconds=60.0, overrides=[])


def setup(rep: PartReport, ctx: Context) -> dict:
    from benchmarks.gpu_suite.prepare import read_manifest

    read_manifest(ctx.prepared)
    return {"s": sizes(ctx)}


def teardown(state: dict) -> None:
    pass


def stages():
    """This part's one stage for the schedule (benchmarks/gpu_suite/schedule.py): both curves and their plot."""
    from benchmarks.gpu_suite.schedule import Stage

    return [Stage("learning", lambda rep, ctx, state: learning(rep, ctx, state["s"]), 55, 25)]


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
