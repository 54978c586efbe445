"""float16 training with loss scaling (train/amp.py) on CPU, with torch's CPU GradScaler: one step against
float32, a skipped step on injected inf, exact resume with the scale in the train state."""

import json

import torch

from test_model import make_batch, randomize_puzzle_table, tiny_model
from test_train import cfg_for, final_params, losses, sudoku4  # noqa: F401 (the module-scoped dataset)
from trm_kaggle.model.losses import act_loss
from trm_kaggle.optim.adam_atan2 import AdamATan2
from trm_kaggle.optim.sign_sgd import SignSGD
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train import step
from trm_kaggle.train.amp import LossScaler
from trm_kaggle.train.loop import train

FP16 = "arch.forward_dtype=float16"


def one_step_gradients(dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], torch.Tensor, LossScaler]:
    """The unscaled float32 gradients of one training forward/backward in `dtype`, and the puzzle rows'."""
    model = tiny_model(forward_dtype=str(dtype).replace("torch.", "")).train()
    randomize_puzzle_table(model)
    batch = make_batch(B=8)
    scaler = LossScaler(dtype, torch.device("cpu"))
    carry = model.initial_carry(batch)
    for _ in range(model.arch.halt_max_steps):  # the token loss counts halted rows: every row halts on the last
        carry, out = model(carry, batch)
        loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
        scaler.scale(loss / 8).backward()
    assert carry.halted.all()
    dense = AdamATan2([p for p in model.parameters()], lr=1e-3)
    if scaler.enabled:
        from trm_kaggle.train.amp import _Steps

        scaler.scaler.unscale_(_Steps(dense, None, model.puzzle_emb.rows_with_grad()))
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    rows = torch.cat([r.grad for r in model.puzzle_emb.rows_with_grad()])
    return grads, rows, scaler


def test_a_float16_step_matches_a_float32_step():
    """Every weight's (and the puzzle rows') unscaled float16 gradient is nearer the float32 gradient than
    bfloat16's, side by side on the same weights and batch: float16 keeps 3 more mantissa bits, so at most half
    bfloat16's relative error (measured: a fifth or less, on draws where float16's own error is 2 % and where it
    is 13 %: the recursion amplifies rounding by a factor that depends on the draw). A loss scale applied
    twice or not undone would be off by 2**16. The gradients are float32 tensors (weights and optimizer state
    stay float32)."""
    g16, rows16, scaler = one_step_gradients(torch.float16)
    gbf, rowsbf, _ = one_step_gradients(torch.bfloat16)
    g32, rows32, _ = one_step_gradients(torch.float32)
    assert scaler.enabled and scaler.scaler.get_scale() == 2.0**16
    assert set(g16) == set(g32) == set(gbf) and len(g16) > 5

    def err(g, name):
        return ((g[name] - g32[name]).norm() / g32[name].norm()).item()

    for name in g32:
        assert g16[name].dtype == torch.float32 and g32[name].norm() > 0, name
        assert not torch.equal(g16[name], g32[name]), name  # float16 arithmetic did run
        assert err(g16, name) <= 0.5 * err(gbf, name) and err(g16, name) < 0.5, name
    assert rows32.norm() > 0 and (rows16 - rows32).norm() <= 0.5 * (rowsbf - rows32).norm()


def test_a_float16_run_keeps_float32_weights_and_logs_its_scale(sudoku4, tmp_path):
    result = train(cfg_for(sudoku4, tmp_path / "run", "max_steps=3", FP16))
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "run")[-1])
    assert state["forward_dtype"] == "float16" and state["carries"][0][0]["z_H"].dtype == torch.float16
    assert all(t.dtype == torch.float32 for t in state["model"].values() if t.is_floating_point())
    assert all(t.dtype == torch.float32 for s in state["optimizer"]["state"].values() for t in s.values()
               if isinstance(t, torch.Tensor) and t.is_floating_point())
    assert state["amp"]["scaler"]["scale"] == 2.0**16 and state["amp"]["skipped"] == 0
    assert result.metrics["loss_scale"] == 2.0**16 and result.metrics["skipped_steps"] == 0
    # float32 runs log no scale and save none
    train(cfg_for(sudoku4, tmp_path / "fp32", "max_steps=1"))
    assert "loss_scale" not in json.loads((tmp_path / "fp32" / "metrics.jsonl").read_text().splitlines()[-1])
    assert ckpt.load_train_state(ckpt.list_states(tmp_path / "fp32")[-1])["amp"] is None


def inject_inf_at(monkeypatch, steps: set[int]) -> None:
    """The loss of the training steps in `steps` (1-based, as logged) times inf: inf/nan gradients."""
    calls = {"n": 0}
    real = step.act_loss

    def act_loss_with_inf(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        calls["n"] += 1  # one call per micro-batch; the tests use one micro-batch per step
        return (loss * float("inf") if calls["n"] in steps else loss), metrics

    monkeypatch.setattr(step, "act_loss", act_loss_with_inf)


def test_an_injected_inf_skips_the_step_and_lowers_the_scale(sudoku4, tmp_path, monkeypatch, caplog):
    """Step 3's gradients are inf: the step changes no weight, no optimizer moment, no EMA, no puzzle row, and
    the scale halves; the run goes on (a skipped step is logged and counted, not raised)."""
    train(cfg_for(sudoku4, tmp_path / "two", "max_steps=2", "ema=True", FP16))
    inject_inf_at(monkeypatch, {3})
    caplog.set_level("INFO")
    result = train(cfg_for(sudoku4, tmp_path / "three", "max_steps=3", "ema=True", FP16))
    assert result.step == 3
    records = [json.loads(r) for r in (tmp_path / "three" / "metrics.jsonl").read_text().splitlines()]
    assert [r["skipped_steps"] for r in records] == [0, 0, 1]
    assert [r["loss_scale"] for r in records] == [2.0**16, 2.0**16, 2.0**15]
    assert any("step skipped" in r.message and r.levelname == "INFO" for r in caplog.records)
    a = ckpt.load_train_state(ckpt.list_states(tmp_path / "two")[-1])
    b = ckpt.load_train_state(ckpt.list_states(tmp_path / "three")[-1])
    for part in ("model", "ema"):
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part]), part
    for k, s in a["optimizer"]["state"].items():
        assert all(torch.equal(v, b["optimizer"]["state"][k][n]) for n, v in s.items() if isinstance(v, torch.Tensor))


def test_a_resumed_float16_run_equals_the_uninterrupted_one(sudoku4, tmp_path, monkeypatch):
    """The loss scale (lowered by an inf at step 2) and the skip count are in the train state: the resumed
    run takes the uninterrupted run's very steps."""
    inject_inf_at(monkeypatch, {2})
    full = train(cfg_for(sudoku4, tmp_path / "a", "max_steps=6", FP16))
    inject_inf_at(monkeypatch, {2})
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=3", FP16))
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "b")[-1])
    assert state["amp"]["scaler"]["scale"] == 2.0**15 and state["amp"]["skipped"] == 1
    inject_inf_at(monkeypatch, set())
    resumed = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=6", FP16))
    assert full.step == resumed.step == 6
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    a, b = final_params(tmp_path / "a"), final_params(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert full.metrics["skipped_steps"] == resumed.metrics["skipped_steps"] == 1
    assert full.metrics["loss_scale"] == resumed.metrics["loss_scale"] == 2.0**15


def test_the_sign_sgd_rows_of_a_skipped_step_are_dropped():
    model = tiny_model(forward_dtype="float16").train()
    batch = make_batch(B=4)
    carry, out = model(model.initial_carry(batch), batch)
    loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    scaler = LossScaler(torch.float16, torch.device("cpu"))
    scaler.scale(loss * float("inf")).backward()
    table = model.puzzle_emb.weights.clone()
    sparse = SignSGD(model.puzzle_emb, lr=0.1)
    assert scaler.step(None, sparse, model) is False and scaler.skipped == 1
    assert torch.equal(model.puzzle_emb.weights, table) and model.puzzle_emb.touched() is None
