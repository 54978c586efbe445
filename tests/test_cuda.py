"""Tests that need a CUDA GPU (marked `cuda`; `pytest -m cuda` runs them, the GPU suite's part 1 too). Without
CUDA they skip. Imports stay light (trm_kaggle, torch, numpy): a bare GPU machine runs this file from wheels."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

from trm_kaggle.config import ArchConfig, SudokuBuildConfig
from trm_kaggle.data.puzzles.sudoku import build_sudoku
from trm_kaggle.model import TinyRecursiveModel, act_loss, resolve_forward_dtype

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SEQ, VOCAB, IDS = 16, 11, 5


def tiny(dtype: str = "float32", seed: int = 0) -> TinyRecursiveModel:
    torch.manual_seed(seed)
    arch = ArchConfig(hidden_size=64, num_heads=4, expansion=2, H_cycles=2, L_cycles=2, L_layers=2, halt_max_steps=4,
                      puzzle_emb_len=2, forward_dtype=dtype, pos_encodings="rope")
    return TinyRecursiveModel(arch, SEQ, VOCAB, IDS)


def batch(device: str, B: int = 8) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    b = {"inputs": torch.randint(0, VOCAB, (B, SEQ), generator=g),
         "labels": torch.randint(1, VOCAB, (B, SEQ), generator=g),
         "puzzle_identifiers": torch.randint(0, IDS, (B,), generator=g, dtype=torch.int32)}
    return {k: v.to(device) for k, v in b.items()}


def step(model: TinyRecursiveModel, data: dict) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    model.train()
    torch.manual_seed(5)
    carry, out = model(model.initial_carry(data), data)
    loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return out["logits"].detach().float().cpu(), loss.detach().float().cpu(), grads


def test_float32_step_on_cuda_matches_the_cpu():
    cpu, gpu = tiny(), tiny().cuda()
    gpu.load_state_dict(cpu.state_dict())
    lc, loss_c, gc = step(cpu, batch("cpu"))
    lg, loss_g, gg = step(gpu, batch("cuda"))
    torch.testing.assert_close(lg, lc, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(loss_g, loss_c, rtol=1e-4, atol=1e-5)
    for n in gc:
        torch.testing.assert_close(gg[n], gc[n], rtol=1e-2, atol=1e-4)


def test_bf16_is_chosen_on_ampere_and_later_and_keeps_float32_weights():
    dtype, why = resolve_forward_dtype(ArchConfig(), "cuda")
    major = torch.cuda.get_device_capability()[0]
    assert dtype == (torch.bfloat16 if major >= 8 else torch.float32), why
    ref, model = tiny(), tiny("bfloat16").cuda()
    model.load_state_dict(ref.state_dict())
    logits, loss, grads = step(model, batch("cuda"))
    l32, _, _ = step(ref.cuda(), batch("cuda"))
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads.values())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert (logits - l32).abs().max() < 0.25 * l32.abs().max()


def test_apply_compile_on_cuda_matches_eager():
    from trm_kaggle.model.compiling import apply_compile

    torch._dynamo.reset()
    eager, compiled = tiny().cuda(), tiny().cuda()
    apply_compile(compiled, "on", "cuda")
    le, _, ge = step(eager, batch("cuda"))
    lc, _, gc = step(compiled, batch("cuda"))
    torch.testing.assert_close(lc, le, rtol=1e-3, atol=1e-3)
    for n in ge:
        torch.testing.assert_close(gc[n], ge[n], rtol=1e-2, atol=1e-4)


def test_nccl_world_of_one_all_reduces_and_broadcasts():
    import torch.distributed as dist

    from trm_kaggle.train.runtime import all_reduce_, broadcast_model_

    if not dist.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        x = [torch.ones(3, device="cuda"), torch.full((2,), 2.0, device="cuda")]
        all_reduce_(x)
        assert x[0].tolist() == [1.0, 1.0, 1.0] and x[1].tolist() == [2.0, 2.0]
        model = tiny().cuda()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        broadcast_model_(model)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    finally:
        dist.destroy_process_group()


def test_training_on_cuda_runs_and_its_losses_are_finite(tmp_path: Path):
    """The training loop on CUDA, eager: the compiled step on CUDA is test_compiling.py's (a cold compile of the
    whole run here cost the GPU suite's `pytest -m cuda` its time limit on an H200)."""
    import json

    from trm_kaggle.train.loop import train
    from trm_kaggle.train.settings import load_train_config

    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=40, num_test=8, progress=False))
    cfg = load_train_config(presets=["sudoku4-cpu"], overrides=[
        f"data_paths=[{data}]", f"checkpoint_path={tmp_path / 'run'}", "device=cuda", "compile=off", "max_steps=4",
        "global_batch_size=8", "progress=False", "eval_interval=null", "log_interval=1"])
    train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(v)) for v in losses)


def test_predicting_with_device_cuda_moves_a_cpu_model_there(tmp_path: Path):
    """The Python entry points that take a device move the model there (`hardware.place_model`): a CPU model
    asked to predict on CUDA runs there and predicts what it predicts on the CPU (float32, up to rounding)."""
    from trm_kaggle.evaluate.predict import predict_split

    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=20, num_test=16, progress=False))
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_cycles=2, L_cycles=2, L_layers=1, halt_max_steps=2,
                      puzzle_emb_len=1, forward_dtype="float32")
    from trm_kaggle.data.format import load_metadata

    meta = load_metadata(data, "test")
    model = TinyRecursiveModel(arch, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers)
    on_cpu = predict_split(model, data, batch_size=8, device="cpu")
    on_cuda = predict_split(model, data, batch_size=8, device="cuda")
    assert next(model.parameters()).device.type == "cuda" and on_cuda.device.startswith("cuda")
    assert (on_cpu.tokens == on_cuda.tokens).mean() > 0.99


def test_float64_attention_on_cuda_gets_the_layout_upstreams_view_needs():
    """The float64 reference of parity runs upstream's attention, which moves the heads behind the positions and
    calls `.view`; on CUDA float64 runs torch's math kernel, whose output does not allow that view (the first H100
    run's parity died on it). The harness's `flash_layout` wrapper (put in front of upstream's attention in the
    suite's process) makes it allow it, with the same values."""
    import torch.nn.functional as F

    from benchmarks.bench_train_cpu import flash_layout

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, dtype=torch.float64, device="cuda", generator=g) for _ in range(3))
    out = flash_layout(F.scaled_dot_product_attention)(q, k, v)
    viewed = out.transpose(1, 2).view(2, 16, 32)  # what upstream's models/layers.py does after attention
    want = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 16, 32)
    assert torch.equal(viewed, want)
