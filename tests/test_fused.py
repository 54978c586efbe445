"""The fused block (`arch.kernels`, model/fused.py and model/fused_triton.py).

* The decomposition itself (the first norm folded into the MLP as a row scale, the sub-layers' hand-written
  backwards) in plain torch ("reference" kernels) against the block's own path: always runs.
* The Triton kernels in Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) against the reference and the
  block, a training step against float64 under the GPU suite's parity rule, and under torch.compile: skips only
  where Triton is not installed (and on a machine with a GPU, where the `cuda` tests run the compiled kernels).
* `cuda`: the compiled kernels on a GPU.
Shapes are tiny: the interpreter runs each program in numpy.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import warnings

import pytest
import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model import TinyRecursiveModel, act_loss
from trm_kaggle.model import fused
from trm_kaggle.model.compiling import apply_compile
from trm_kaggle.model.layers import Block, RotaryEmbedding

TRITON = importlib.util.find_spec("triton") is not None
CUDA = torch.cuda.is_available()

B, S, D, H = 2, 20, 64, 2  # head_dim 32
#: block variants: (mlp_t, rope)
VARIANTS = {"attention+rope": (False, True), "attention": (False, False), "mlp_t": (True, False)}


@pytest.fixture(scope="module")
def interpreter():
    """Triton's kernels in its interpreter: tests/conftest.py sets TRITON_INTERPRET=1 where there is no GPU."""
    if not TRITON:
        pytest.skip("Triton is not installed")
    if CUDA:
        pytest.skip("a CUDA GPU is here: the `cuda` tests run the compiled kernels")
    kernels = fused._triton_module()
    assert kernels.INTERPRETED, "Triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it)"
    return kernels


def make_block(variant: str, seed: int = 0, device: str = "cpu"):
    mlp_t, rope = VARIANTS[variant]
    torch.manual_seed(seed)
    block = Block(D, H, 4.0, 1e-5, mlp_t=mlp_t, total_len=S).to(device)
    cos_sin = RotaryEmbedding(D // H, S, 10000.0).to(device)() if rope else None
    return block, cos_sin


def run_block(block, cos_sin, x, kernels, dtype=torch.float32):
    """(output, gradients of x and of every weight) of one block call on `kernels` ("plain": the block's own
    path), against a fixed random projection of the output."""
    block.dispatch = None if kernels == "plain" else functools.partial(fused.dispatch, kernels=kernels, fp8="off")
    weights = [p.to(dtype) for p in block.parameters()]
    casted = [m for m in block.modules() if hasattr(m, "cast_weight")]
    for m, w in zip(casted, weights):
        m.cast_weight = w
    x = x.detach().to(dtype).requires_grad_()
    try:
        y = block(x, cos_sin)
    finally:
        block.dispatch = None
        for m in casted:
            m.cast_weight = None
    proj = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.device)
    grads = torch.autograd.grad((y.float() * proj).sum(), [x] + weights)
    return y.detach().float(), [g.float() for g in grads]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def assert_block_matches(variant: str, kernels: str, tol: float, dtype=torch.float32, device: str = "cpu"):
    block, cos_sin = make_block(variant, device=device)
    x = torch.randn(B, S, D, generator=torch.Generator().manual_seed(1)).to(device)
    y0, g0 = run_block(block, cos_sin, x, "plain", dtype)
    y1, g1 = run_block(block, cos_sin, x, kernels, dtype)
    errors = [rel(y1, y0)] + [rel(a, b) for a, b in zip(g1, g0)]
    assert max(errors) < tol, (variant, kernels, errors)


# ---------------------------------------------------------------------------
# Settings and dispatch
# ---------------------------------------------------------------------------


def test_the_defaults_leave_the_blocks_on_their_own_path():
    arch = ArchConfig()
    assert (arch.kernels, arch.fp8) == ("torch", "off")
    model = TinyRecursiveModel(ArchConfig(hidden_size=32, num_heads=2, L_layers=2, puzzle_emb_len=2), 8, 5, 3)
    assert all(block.dispatch is None for block in model.layers)
    model = TinyRecursiveModel(ArchConfig(hidden_size=32, num_heads=2, puzzle_emb_len=2, kernels="auto"), 8, 5, 3)
    assert all(block.dispatch is not None for block in model.layers)
    with pytest.raises(ValueError):
        ArchConfig(kernels="cuda")


def test_auto_is_the_plain_path_on_a_cpu():
    block, cos_sin = make_block("attention+rope")
    x = torch.randn(B, S, D)
    assert fused.dispatch(block, x, cos_sin, kernels="auto", fp8="off") is None
    assert fused.dispatch(block, x.double(), cos_sin, kernels="reference", fp8="off") is None  # float64: exact path


def test_triton_where_it_cannot_run_is_one_clear_error(monkeypatch):
    block, cos_sin = make_block("attention+rope")
    x = torch.randn(B, S, D)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(fused, "triton_installed", lambda: True)
    with pytest.raises(TRMError, match="arch.kernels=triton runs on CUDA GPUs, not on cpu"):
        fused.dispatch(block, x, cos_sin, kernels="triton", fp8="off")
    monkeypatch.setattr(fused, "triton_installed", lambda: False)
    with pytest.raises(TRMError, match="needs Triton"):
        fused.dispatch(block, x, cos_sin, kernels="triton", fp8="off")


def test_auto_falls_back_to_torch_when_the_self_check_fails(monkeypatch):
    monkeypatch.setattr(fused, "triton_installed", lambda: True)
    monkeypatch.setattr(fused, "self_check", lambda device_type: "qkv_rope in torch.bfloat16: relative error 1")
    with pytest.warns(UserWarning, match="failed their self-check.*qkv_rope"):
        assert fused._auto_checked.__wrapped__("cuda") is False
    monkeypatch.setattr(fused, "self_check", lambda device_type: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fused._auto_checked.__wrapped__("cuda") is True


def test_fused_variant_names_the_fields():
    a = fused.fused_variant({"hidden_size": 64})
    assert a == {"hidden_size": 64, "kernels": "triton", "fp8": "nograd"}
    assert ArchConfig(**fused.fused_variant(ArchConfig(), fp8=False)).kernels == "triton"


# ---------------------------------------------------------------------------
# The decomposition in plain torch
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_folded_norm_and_hand_written_backwards_are_the_block(variant):
    """float32: the same function and the same gradients (x, every weight) up to rounding order."""
    assert_block_matches(variant, "reference", 2e-6)


def test_the_reference_check_fails_on_a_wrong_gradient(monkeypatch):
    """The comparison above catches a backward that drops the norm factor's gradient."""
    original = fused._MLP.backward

    def no_drs(ctx, dv):
        dx, _, *rest = original(ctx, dv)
        return (dx, torch.zeros_like(ctx.saved_tensors[1]) if ctx.saved_tensors[1] is not None else None, *rest)

    monkeypatch.setattr(fused._MLP, "backward", staticmethod(no_drs))
    with pytest.raises(AssertionError):
        assert_block_matches("attention+rope", "reference", 2e-6)


# ---------------------------------------------------------------------------
# The Triton kernels, in the interpreter
# ---------------------------------------------------------------------------


def test_each_kernel_matches_the_reference(interpreter):
    assert fused.self_check("cpu", (torch.float32, torch.bfloat16)) is None


def test_the_self_check_sees_a_wrong_kernel(interpreter, monkeypatch):
    monkeypatch.setattr(fused._Reference, "qkv_rope", staticmethod(lambda x, w, cos, sin: (x @ w.t())))
    assert "qkv_rope" in fused.self_check("cpu")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_triton_block_is_the_block(interpreter, variant):
    assert_block_matches(variant, "triton", 2e-6)


def test_triton_block_in_bfloat16(interpreter):
    """bf16 against the plain path in bf16: both round differently (the fused path less often), so the bound is
    a few bf16 units, far below what a wrong kernel gives (tens of percent)."""
    assert_block_matches("attention+rope", "triton", 3e-2, dtype=torch.bfloat16)


SMALL = dict(hidden_size=32, num_heads=2, expansion=2, H_cycles=2, L_cycles=1, H_layers=0, L_layers=2,
             halt_max_steps=4, halt_exploration_prob=0.1, no_ACT_continue=True, pos_encodings="rope",
             rope_theta=10000.0, rms_norm_eps=1e-5, puzzle_emb_ndim=32, puzzle_emb_len=2, mlp_t=False)


def suite_errors(arch: dict, dtype: str, batches, state, exact, compile_kwargs=None):
    """Typical (logits, loss, grads) errors against float64 of one training step per batch, as the GPU suite's
    parity stage measures them (benchmarks/bench_train_cpu.py)."""
    from benchmarks import bench_train_cpu as Bench

    t = Bench.Ours(arch, 2, compile_kwargs is not None, dtype, seq_len=16, vocab=12, num_ids=8,
                   compile_kwargs=compile_kwargs)
    t.model.load_state_dict(state)
    steps = [Bench.step_outputs(t, b, i) for i, b in enumerate(batches)]
    return Bench.typical_errors([Bench.relative_errors(o, r) for o, r in zip(steps, exact)]), steps


@pytest.fixture(scope="module")
def float64_reference():
    if "benchmarks" not in sys.modules and importlib.util.find_spec("benchmarks") is None:
        pytest.skip("benchmarks/ is not importable from here")
    from benchmarks import bench_train_cpu as Bench

    batches = Bench.make_batches(2, 2, 5, 16, 12, 8, "cpu")
    torch.manual_seed(0)
    base = Bench.Ours(SMALL, 2, False, "float32", seq_len=16, vocab=12, num_ids=8)
    with torch.no_grad():  # a non-zero puzzle table, so that its rows matter
        w = base.model.puzzle_emb.weights
        w.copy_(torch.randn(w.shape, generator=torch.Generator().manual_seed(7)))
    state = {k: v.clone() for k, v in base.model.state_dict().items()}
    return batches, state, [Bench.step_outputs(Bench.float64_copy(base), b, i) for i, b in enumerate(batches)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_triton_training_step_passes_the_gpu_suites_parity_rule(interpreter, float64_reference, dtype):
    """One training step (forward, ACT loss, backward) against float64: the fused variant's typical errors
    within PARITY_RATIO x the plain path's in the same dtype + the dtype's floor, the rule the suite applies to a
    compiled variant against eager."""
    from benchmarks import bench_train_cpu as Bench

    batches, state, exact = float64_reference
    plain, _ = suite_errors(SMALL, dtype, batches, state, exact)
    ours, _ = suite_errors(dict(SMALL, kernels="triton"), dtype, batches, state, exact)
    assert Bench.within(ours, plain, dtype), (dtype, ours, plain)


@pytest.mark.slow
def test_triton_block_under_torch_compile(interpreter, float64_reference):
    """dynamo traces the autograd Functions and keeps the kernels as opaque custom ops: no graph break, and the
    step equals the eager one (aot_eager: no C++ compiler needed)."""
    import torch._dynamo

    batches, state, exact = float64_reference
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    _, eager = suite_errors(dict(SMALL, kernels="triton"), "float32", batches[:1], state, exact)
    _, compiled = suite_errors(dict(SMALL, kernels="triton"), "float32", batches[:1], state, exact,
                               compile_kwargs={"backend": "aot_eager"})
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    (le, loss_e, ge), (lc, loss_c, gc) = eager[0], compiled[0]
    assert rel(lc, le) < 1e-6 and abs(loss_c - loss_e) <= 1e-6 * abs(loss_e)
    assert max(rel(gc[n], g) for n, g in ge.items()) < 1e-5


# ---------------------------------------------------------------------------
# CUDA: the compiled kernels
# ---------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.skipif(not TRITON, reason="Triton is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cuda_triton_block_is_the_block(variant, dtype):
    assert_block_matches(variant, "triton", 2e-5 if dtype == torch.float32 else 3e-2, dtype=dtype, device="cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.skipif(not TRITON, reason="Triton is not installed")
def test_cuda_auto_takes_triton_after_its_self_check():
    assert fused.self_check("cuda") is None
    assert fused._use_triton("auto", "cuda") is True


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.skipif(not TRITON, reason="Triton is not installed")
def test_cuda_triton_training_step_compiles_and_matches_eager():
    """kernels=triton under torch.compile (inductor) on the GPU: the same step as eager, in float32."""
    arch = ArchConfig(**SMALL, kernels="triton", forward_dtype="float32")
    torch.manual_seed(0)
    eager = TinyRecursiveModel(arch, 16, 12, 8).cuda()
    compiled = TinyRecursiveModel(arch, 16, 12, 8).cuda()
    compiled.load_state_dict(eager.state_dict())
    apply_compile(compiled, "on", "cuda")
    g = torch.Generator().manual_seed(1)
    data = {"inputs": torch.randint(0, 12, (4, 16), generator=g), "labels": torch.randint(1, 12, (4, 16), generator=g),
            "puzzle_identifiers": torch.randint(0, 8, (4,), generator=g, dtype=torch.int32)}
    data = {k: v.cuda() for k, v in data.items()}
    outs = []
    for model in (eager, compiled):
        torch.manual_seed(5)
        carry, out = model(model.initial_carry(data), data)
        loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
        loss.backward()
        outs.append((out["logits"].detach().float(), {n: p.grad.float() for n, p in model.named_parameters()
                                                      if p.grad is not None}))
    (le, ge), (lc, gc) = outs
    assert rel(lc, le) < 1e-5
    assert max(rel(gc[n], g) for n, g in ge.items()) < 1e-4
