"""Fidelity: several training steps of `trm-kaggle train` equal upstream's, rule by rule.

The reference below re-does every step from upstream's formulas (its pretrain.py, the
`adam-atan2` 0.0.3 kernel, its sparse SignSGD, EMAHelper and checkpoint loading):

* the learning rate of optimizer step k is cosine_lr(k) (upstream increments its step
  counter before computing the rate), over total_steps = int(epochs * total_groups *
  mean_puzzle_examples / global_batch_size);
* AdamATan2: p *= 1 - lr*wd; m, v = lerp; p -= (lr / bc1) * atan2(m, sqrt(v) / sqrt(bc2));
* SignSGD on the touched puzzle rows: w *= 1 - lr*wd; w -= lr * sign(summed grad);
* EMA: shadow = (1 - mu) * param + mu * shadow;
* the loss: per-example mean stablemax cross-entropy (in float64, as upstream), summed,
  + 0.5 * BCE(q_halt, sequence correct), scaled by 1 / global_batch_size;
* initial weights from a checkpoint with another identifier count: every row of the
  puzzle table becomes the mean of ALL saved rows (row 0 included).

The forward pass and its gradients come from our model in both runs (their equality with
upstream's code is measured by benchmarks/bench_train_cpu.py --upstream-dir), so what is
compared here is exactly the rules above. After every step the weights, the puzzle table,
the EMA shadow and the halting flags must agree; changing any one rule back fails.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import random_task, write_prefix_subset
from trm_kaggle.config import ArcBuildConfig, ArchConfig
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.data.loader import PuzzleLoader
from trm_kaggle.model.export import export_inference, read_export
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import train
from trm_kaggle.train.step import exploration_draws
from trm_kaggle.train.settings import load_train_config

STEPS = 4
BATCH = 4
EPOCHS = 3
LR, EMB_LR, WARMUP, MIN_RATIO = 3e-3, 1e-2, 2, 0.1
BETA1, BETA2, WD, EMB_WD, EMA_RATE, SEED = 0.9, 0.95, 0.1, 0.1, 0.9, 5
ARCH = dict(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=2, L_cycles=2, L_layers=1, halt_max_steps=3,
            halt_exploration_prob=0.5, puzzle_emb_len=2, forward_dtype="float32")
SAVED_ROWS = 5  # the initial checkpoint's table: fewer rows than the dataset has identifiers


@pytest.fixture(scope="module")
def arc_data(tmp_path_factory) -> Path:
    import numpy as np

    root = tmp_path_factory.mktemp("fidelity")
    rng = np.random.default_rng(11)
    prefix = root / "src" / "arc-agi"
    prefix.parent.mkdir()
    write_prefix_subset(prefix, "training", {f"tr{i:03d}": random_task(rng, max_side=5) for i in range(5)})
    write_prefix_subset(prefix, "evaluation", {f"ev{i:03d}": random_task(rng, max_side=5) for i in range(2)})
    out = root / "arc"
    build_arc(ArcBuildConfig(output_dir=str(out), input_file_prefix=str(prefix), subsets=["training", "evaluation"],
                             test_set_name="evaluation", test_set_name2="evaluation", num_aug=1, workers=1,
                             progress=False))
    return out


def _initial_export(path: Path, seq_len: int, vocab: int) -> Path:
    torch.manual_seed(123)
    model = TinyRecursiveModel(ArchConfig(**ARCH), seq_len, vocab, SAVED_ROWS)
    with torch.no_grad():  # a table worth averaging: row 0 (the blank id) is not zero here
        model.puzzle_emb.weights.copy_(torch.randn(SAVED_ROWS, ARCH["hidden_size"]))
    return export_inference(path, model, arch=ArchConfig(**ARCH), seq_len=seq_len, vocab_size=vocab)


# ---------------------------------------------------------------------------
# The reference, from upstream's formulas
# ---------------------------------------------------------------------------


def ref_total_steps(dataset: Path) -> int:
    meta = json.loads((dataset / "train" / "dataset.json").read_text())
    return int(EPOCHS * meta["total_groups"] * meta["mean_puzzle_examples"] / BATCH)


def ref_lr(base: float, k: int, total: int) -> float:
    """Upstream's cosine_schedule_with_warmup_lr_lambda at current_step = k (k = 1 for the first step)."""
    if k < WARMUP:
        return base * k / max(1, WARMUP)
    progress = (k - WARMUP) / max(1, total - WARMUP)
    return base * (MIN_RATIO + max(0.0, (1 - MIN_RATIO) * 0.5 * (1.0 + math.cos(math.pi * progress))))


def ref_loss(outputs: dict, labels: torch.Tensor) -> torch.Tensor:
    """Upstream's ACTLossHead (stablemax in float64), no q_continue term (no_ACT_continue)."""
    mask = labels != -100
    counts = mask.sum(-1)
    with torch.no_grad():
        seq_correct = (mask & (outputs["logits"].argmax(-1) == labels)).sum(-1) == counts
    x = outputs["logits"].to(torch.float64)
    s = torch.where(x < 0, 1 / (1 - x + 1e-30), x + 1)
    logp = torch.log(s / s.sum(-1, keepdim=True))
    picked = logp.gather(-1, torch.where(mask, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    lm = (-torch.where(mask, picked, 0) / counts.clamp_min(1).unsqueeze(-1)).sum()
    q = outputs["q_halt_logits"]
    return lm + 0.5 * F.binary_cross_entropy_with_logits(q, seq_correct.to(q.dtype), reduction="sum")


class Reference:
    def __init__(self, export: Path, dataset: Path):
        config, tensors = read_export(export)
        meta = json.loads((dataset / "train" / "dataset.json").read_text())
        self.model = TinyRecursiveModel(ArchConfig(**ARCH), meta["seq_len"], meta["vocab_size"],
                                        meta["num_puzzle_identifiers"]).train()
        tensors = dict(tensors)
        saved = tensors.pop("puzzle_emb.weights")
        missing, unexpected = self.model.load_state_dict(tensors, strict=False)
        assert missing == ["puzzle_emb.weights"] and not unexpected
        with torch.no_grad():  # upstream's load-time rule: the mean of every saved row, row 0 included
            self.model.puzzle_emb.weights.copy_(saved.sum(0) / saved.shape[0])
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self.m = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.ema = {n: p.detach().clone() for n, p in self.params.items()}
        self.total = ref_total_steps(dataset)
        self.k = 0
        self.carry = None

    @torch.no_grad()
    def _adam_atan2(self, lr: float) -> None:
        t = self.k
        for n, p in self.params.items():
            g = p.grad
            p.mul_(1 - lr * WD)
            self.m[n] = self.m[n] * BETA1 + g * (1 - BETA1)
            self.v[n] = self.v[n] * BETA2 + g * g * (1 - BETA2)
            p.sub_((lr / (1 - BETA1**t)) * torch.atan2(self.m[n], self.v[n].sqrt() / math.sqrt(1 - BETA2**t)))
            p.grad = None

    @torch.no_grad()
    def _sign_sgd(self, lr: float) -> None:
        ids, grads = self.model.puzzle_emb.touched()
        self.model.puzzle_emb.clear()
        table = self.model.puzzle_emb.weights
        for r in ids.unique().tolist():
            g = grads[ids == r].sum(0)
            table[r] = table[r] * (1 - lr * EMB_WD) - lr * torch.sign(g)

    def step(self, batch: dict) -> float:
        self.k += 1  # upstream: train_state.step += 1, then compute_lr
        if self.carry is None:
            self.carry = self.model.initial_carry(batch)
        expl = exploration_draws(SEED, self.k - 1, BATCH, ARCH["halt_max_steps"], slice(0, BATCH), torch.device("cpu"))
        self.carry, out = self.model(self.carry, batch, exploration=expl)
        loss = ref_loss(out, self.carry.current_data["labels"])
        ((1 / BATCH) * loss).backward()
        self._adam_atan2(ref_lr(LR, self.k, self.total))
        self._sign_sgd(ref_lr(EMB_LR, self.k, self.total))
        with torch.no_grad():
            for n, p in self.params.items():
                self.ema[n] = (1 - EMA_RATE) * p + EMA_RATE * self.ema[n]
        return loss.item() / BATCH


# ---------------------------------------------------------------------------


def test_training_steps_equal_upstreams_rules(arc_data, tmp_path):
    meta = json.loads((arc_data / "train" / "dataset.json").read_text())
    exact = EPOCHS * meta["total_groups"] * meta["mean_puzzle_examples"] / BATCH
    # the schedule must be short enough for the cosine to act, and int() must differ from ceil()
    assert STEPS < ref_total_steps(arc_data) < exact < math.ceil(exact)
    export = _initial_export(tmp_path / "init", meta["seq_len"], meta["vocab_size"])
    run = tmp_path / "run"
    overrides = [f"data_paths=[{arc_data}]", f"checkpoint_path={run}", f"load_checkpoint={export}",
                 *(f"arch.{k}={v}" for k, v in ARCH.items()), "arch.no_ACT_continue=True",
                 f"global_batch_size={BATCH}", f"epochs={EPOCHS}", f"lr={LR}", f"puzzle_emb_lr={EMB_LR}",
                 f"lr_warmup_steps={WARMUP}", f"lr_min_ratio={MIN_RATIO}", f"beta1={BETA1}", f"beta2={BETA2}",
                 f"weight_decay={WD}", f"puzzle_emb_weight_decay={EMB_WD}", "ema=True", f"ema_rate={EMA_RATE}",
                 f"seed={SEED}", "eval_interval=null", "log_interval=1", "progress=False", "device=cpu",
                 "threads=1", "deterministic=True", f"checkpoint_keep={STEPS + 1}"]

    ref = Reference(export, arc_data)
    batches = iter(PuzzleLoader([str(arc_data)], "train", BATCH, seed=SEED))
    threads = torch.get_num_threads()
    try:
        for k in range(1, STEPS + 1):
            # ours: the real command's training loop, stopped after step k (each call resumes the last one)
            train(load_train_config(overrides=overrides + [f"max_steps={k}"]))
            torch.set_num_threads(1)  # the reference's arithmetic on as many threads as ours
            b = next(batches)
            ref_loss_value = ref.step({n: b[n] for n in ("inputs", "labels", "puzzle_identifiers")})

            state = ckpt.load_train_state(ckpt.list_states(run)[-1])
            assert state["step"] == k
            weights = state["model"]
            for n, p in ref.params.items():
                torch.testing.assert_close(weights[n], p.detach(), rtol=1e-5, atol=1e-6,
                                           msg=lambda m, n=n: f"step {k}, weight {n}: {m}")
            torch.testing.assert_close(weights["puzzle_emb.weights"], ref.model.puzzle_emb.weights, rtol=1e-5,
                                       atol=1e-6, msg=lambda m: f"step {k}, puzzle table: {m}")
            for n, t in ref.ema.items():
                torch.testing.assert_close(state["ema"][n], t, rtol=1e-5, atol=1e-6,
                                           msg=lambda m, n=n: f"step {k}, EMA of {n}: {m}")
            carry = state["carries"][0][0]
            assert torch.equal(carry["halted"], ref.carry.halted), f"step {k}: halting flags differ"
            assert torch.equal(carry["steps"], ref.carry.steps), f"step {k}: ACT step counters differ"
            logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            ours = [r for r in logged if r.get("step") == k and "loss" in r]
            assert len(ours) == 1 and ours[0]["loss"] == pytest.approx(ref_loss_value, rel=1e-5)
            assert ours[0]["lr"] == pytest.approx(ref_lr(LR, k, ref.total), rel=1e-12)
    finally:
        torch.set_num_threads(threads)
    # the schedule really moved: warm-up, then cosine decay
    lrs = [ref_lr(LR, k, ref.total) for k in range(1, STEPS + 1)]
    assert lrs[0] == LR / 2 and lrs[1] == LR and lrs[3] < lrs[2] < LR
