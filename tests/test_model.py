"""TinyRecursiveModel: sizes, layout, recursion gradient, ACT carry, dtypes."""

import math

import pytest
import torch
import torch.nn.functional as F

from trm_kaggle.config import ArchConfig
from trm_kaggle.model import TinyRecursiveModel, act_loss, prefix_length, resolve_forward_dtype
from trm_kaggle.model.layers import Block, CastedLinear, swiglu_width, trunc_normal_

SEQ, VOCAB, IDS = 12, 10, 7


def tiny_arch(**kw) -> ArchConfig:
    base = dict(hidden_size=32, num_heads=4, expansion=2.0, H_cycles=2, L_cycles=2, L_layers=2,
                halt_max_steps=3, halt_exploration_prob=0.0, puzzle_emb_len=2)
    base.update(kw)
    return ArchConfig(**base)


def tiny_model(seed=0, **kw) -> TinyRecursiveModel:
    torch.manual_seed(seed)
    return TinyRecursiveModel(tiny_arch(**kw), SEQ, VOCAB, IDS)


def make_batch(B=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {
        "inputs": torch.randint(0, VOCAB, (B, SEQ), generator=g),
        "labels": torch.randint(0, VOCAB, (B, SEQ), generator=g),
        "puzzle_identifiers": torch.randint(0, IDS, (B,), generator=g, dtype=torch.int32),
    }


def randomize_puzzle_table(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    model.puzzle_emb.weights.copy_(torch.randn(model.puzzle_emb.weights.shape, generator=g))


# ---------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------


def test_param_count_arc_config_matches_upstream():
    arch = ArchConfig(hidden_size=512, num_heads=8, expansion=4, L_layers=2, pos_encodings="rope",
                      mlp_t=False, puzzle_emb_len=16, L_cycles=4)
    model = TinyRecursiveModel(arch, seq_len=900, vocab_size=12, num_puzzle_identifiers=3)
    assert model.num_parameters() == 6_829_058
    assert sum(p.numel() for p in model.parameters()) == 6_829_058
    # The puzzle table is saved but is not a parameter.
    assert model.state_dict()["puzzle_emb.weights"].shape == (3, 512)
    assert all(p is not model.puzzle_emb.weights for p in model.parameters())


def test_param_count_sudoku_mlp_t_config_matches_upstream():
    arch = ArchConfig(hidden_size=512, num_heads=8, expansion=4, L_layers=2, mlp_t=True,
                      pos_encodings="none", puzzle_emb_len=16, L_cycles=6)
    model = TinyRecursiveModel(arch, seq_len=81, vocab_size=11, num_puzzle_identifiers=1)
    assert model.num_parameters() == 5_028_866
    assert model.layers[0].mlp_t.gate_up_proj.weight.shape == (2 * 512, 97)


def test_swiglu_width_rounds_up_to_256():
    assert swiglu_width(512, 4) == 1536  # round(1365.33) = 1365 -> 1536
    assert swiglu_width(97, 4) == 512  # round(258.67) = 259 -> 512
    assert swiglu_width(32, 2) == 256
    assert swiglu_width(384, 4) == 1024  # exactly 1024 stays


def test_prefix_length_rules():
    assert prefix_length(tiny_arch(puzzle_emb_len=2)) == 2
    assert prefix_length(tiny_arch(puzzle_emb_len=0, puzzle_emb_ndim=70)) == 3  # ceil(70 / 32)
    assert prefix_length(tiny_arch(puzzle_emb_ndim=0)) == 0


# ---------------------------------------------------------------------------
# Initialisation and layers
# ---------------------------------------------------------------------------


def test_init_matches_upstream_conventions():
    torch.manual_seed(0)
    t = trunc_normal_(torch.empty(200_000), std=0.5)
    assert abs(t.std().item() - 0.5) < 0.01  # actual std, not the pre-truncation one
    assert t.abs().max().item() <= 2 * 0.5 / math.sqrt(0.7737413) + 1e-6  # cut at 2 sigma of the unit normal
    model = tiny_model()
    assert torch.all(model.q_head.weight == 0) and torch.all(model.q_head.bias == -5)
    w = model.layers[0].mlp.gate_up_proj.weight
    assert abs(w.std().item() - 32**-0.5) < 0.02  # LeCun: 1/sqrt(fan_in)
    assert abs(model.embed_tokens.weight.std().item() - 32**-0.5) < 0.05
    assert model.H_init.shape == (32,) and model.H_init.dtype == torch.float32


def test_init_draws_are_the_rejection_sampler_of_torch_2_12_on():
    """A seed gives the same initial weights on every supported torch: the draw is standard-normal values with
    those outside [-2, 2] drawn again (what `nn.init.trunc_normal_` does from torch 2.12, not before), then
    scaled. Spelled out here with plain normal draws, so the test holds on any torch."""
    torch.manual_seed(3)
    got = trunc_normal_(torch.empty(4096), std=1.0)
    torch.manual_seed(3)
    want = torch.empty(4096).normal_()
    while ((want < -2) | (want > 2)).any():
        outside = (want < -2) | (want > 2)
        want = torch.where(outside, torch.empty(4096).normal_(), want)
    assert torch.allclose(got, want / math.sqrt(0.7737413), rtol=1e-6, atol=0)  # variance of N(0, 1) cut at +-2


def naive_block(block: Block, x, cos, sin, eps):
    """Straightforward post-norm attention block, for comparison with the fused one."""
    B, S, D = x.shape
    H = block.self_attn.num_heads
    hd = D // H
    wq, wk, wv = block.self_attn.qkv_proj.weight.split(D, dim=0)
    q = (x @ wq.T).view(B, S, H, hd)
    k = (x @ wk.T).view(B, S, H, hd)
    v = (x @ wv.T).view(B, S, H, hd)

    def rot_half(t):
        return torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), dim=-1)

    c, s = cos[:, None, :], sin[:, None, :]
    q = q * c + rot_half(q) * s
    k = k * c + rot_half(k) * s
    att = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
    y = torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), v).reshape(B, S, D)
    y = y @ block.self_attn.o_proj.weight.T

    def norm(t):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)

    x = norm(x + y)
    gate, up = (x @ block.mlp.gate_up_proj.weight.T).chunk(2, dim=-1)
    return norm(x + (F.silu(gate) * up) @ block.mlp.down_proj.weight.T)


def test_attention_block_matches_naive_reference():
    model = tiny_model()
    S = model.total_len
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
    freqs = torch.outer(torch.arange(S).float(), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    x = torch.randn(3, S, 32)
    block = model.layers[0]
    ours = block(x, model.rotary_emb())
    ref = naive_block(block, x, emb.cos(), emb.sin(), 1e-5)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_mlp_t_mixes_and_normalises_along_the_sequence():
    model = tiny_model(mlp_t=True, pos_encodings="none")
    block = model.layers[0]
    x = torch.randn(2, model.total_len, 32)
    xt = x.transpose(1, 2)
    gate, up = (xt @ block.mlp_t.gate_up_proj.weight.T).chunk(2, -1)
    h = xt + (F.silu(gate) * up) @ block.mlp_t.down_proj.weight.T
    h = (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).transpose(1, 2)
    gate, up = (h @ block.mlp.gate_up_proj.weight.T).chunk(2, -1)
    h = h + (F.silu(gate) * up) @ block.mlp.down_proj.weight.T
    ref = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(block(x, None), ref, rtol=1e-4, atol=1e-4)


def test_input_embedding_layout_prefix_padding_and_scale():
    model = tiny_model(puzzle_emb_ndim=40, puzzle_emb_len=2)  # 40 < 2 * 32: zero-padded
    randomize_puzzle_table(model)
    batch = make_batch(B=3)
    x = model.input_embeddings(batch["inputs"], batch["puzzle_identifiers"], torch.float32)
    assert x.shape == (3, 2 + SEQ, 32)
    rows = model.puzzle_emb.weights[batch["puzzle_identifiers"].long()]
    prefix = F.pad(rows, (0, 24)).view(3, 2, 32) * math.sqrt(32)
    torch.testing.assert_close(x[:, :2], prefix)
    assert torch.all(x[:, 1, 8:] == 0)
    torch.testing.assert_close(x[:, 2:], model.embed_tokens.weight[batch["inputs"]] * math.sqrt(32))


def test_learned_positions_are_added_and_rescaled():
    model = tiny_model(pos_encodings="learned")
    batch = make_batch(B=2)
    x = model.input_embeddings(batch["inputs"], batch["puzzle_identifiers"], torch.float32)
    tok = model.embed_tokens.weight[batch["inputs"]]
    expected = math.sqrt(32) * 0.707106781 * (tok + model.embed_pos.weight[2:])
    torch.testing.assert_close(x[:, 2:], expected)


# ---------------------------------------------------------------------------
# Forward, recursion, gradients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(),
    dict(mlp_t=True, pos_encodings="none"),
    dict(pos_encodings="learned"),
    dict(pos_encodings="none"),
    dict(puzzle_emb_ndim=0),
    dict(no_ACT_continue=False),
])
def test_forward_shapes_and_backward_run(kw):
    model = tiny_model(**kw)
    model.train()
    batch = make_batch(B=4)
    carry = model.initial_carry(batch)
    carry, out = model(carry, batch)
    assert out["logits"].shape == (4, SEQ, VOCAB)
    assert out["q_halt_logits"].shape == (4,) and out["q_continue_logits"].shape == (4,)
    assert out["q_halt_logits"].dtype == torch.float32
    assert carry.z_H.shape == (4, model.total_len, 32) and not carry.z_H.requires_grad
    assert not carry.z_L.requires_grad
    if not model.arch.no_ACT_continue:
        t = out["target_q_continue"]
        assert t.shape == (4,) and torch.all((t >= 0) & (t <= 1))
    loss, metrics = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_forward_is_deterministic_for_a_seed():
    batch = make_batch()
    outs = []
    for _ in range(2):
        model = tiny_model(seed=5).eval()
        randomize_puzzle_table(model)
        carry = model.initial_carry(batch)
        _, out = model(carry, batch)
        _, out2 = model(model.initial_carry(batch), batch)
        torch.testing.assert_close(out["logits"], out2["logits"], rtol=0, atol=0)
        outs.append(out["logits"])
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    other = tiny_model(seed=6).eval()
    _, out3 = other(other.initial_carry(batch), batch)
    assert not torch.allclose(outs[0], out3["logits"])


def _manual_step(model, batch, grad_cycles):
    """Recursion from H_init/L_init, the last `grad_cycles` H cycles with gradient."""
    a = model.arch
    B = batch["inputs"].shape[0]
    z_H = model.H_init.expand(B, model.total_len, -1)
    z_L = model.L_init.expand(B, model.total_len, -1)
    x = model.input_embeddings(batch["inputs"], batch["puzzle_identifiers"], torch.float32)
    cs = model.rotary_emb()
    for h in range(a.H_cycles):
        with torch.set_grad_enabled(h >= a.H_cycles - grad_cycles):
            for _ in range(a.L_cycles):
                z_L = model.net(z_L, z_H + x, cs)
            z_H = model.net(z_H, z_L, cs)
    return model.lm_head(z_H[:, model.prefix_len:])


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_only_the_last_h_cycle_carries_gradient():
    model = tiny_model(H_cycles=3, L_cycles=2).train()
    batch = make_batch()
    _, out = model(model.initial_carry(batch), batch)
    ours = _grads(model, out["logits"].square().sum())

    manual_last = _manual_step(model, batch, grad_cycles=1)
    torch.testing.assert_close(out["logits"], manual_last)
    expected = _grads(model, manual_last.square().sum())
    manual_all = _manual_step(model, batch, grad_cycles=3)
    full = _grads(model, manual_all.square().sum())

    key = "layers.0.mlp.down_proj.weight"
    for n in expected:
        torch.testing.assert_close(ours[n], expected[n], rtol=1e-4, atol=1e-6)
    # Backpropagating through every cycle gives different gradients, so the check above has teeth.
    assert not torch.allclose(full[key], expected[key], rtol=1e-3, atol=1e-6)


def _step_grads(model, batch):
    """Gradients of two supervision steps (weights and touched puzzle rows), and the bytes autograd saved."""
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    model.zero_grad()
    carry = model.initial_carry(batch)
    total = 0.0
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for _ in range(2):
            carry, out = model(carry, batch)
            loss, _ = act_loss(out, carry.current_data["labels"], torch.ones_like(carry.halted), carry.steps)
            total = total + loss
    total.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    ids, rows = model.puzzle_emb.touched()
    grads["puzzle_rows"] = rows.clone()
    model.puzzle_emb.clear()
    return grads, sum(saved)


@pytest.mark.parametrize("kw", [dict(), dict(mlp_t=True, pos_encodings="none"), dict(forward_dtype="bfloat16")])
def test_grad_checkpointing_gives_the_same_gradients_with_less_saved(kw):
    """Checkpointing the grad-carrying cycle changes neither the loss's gradients nor the halting; autograd
    keeps fewer bytes, and the network runs again in backward (L_cycles + 1 recomputed calls per step)."""
    batch = make_batch(B=4)
    results = []
    for on in (False, True):
        model = tiny_model(seed=2, H_cycles=2, L_cycles=3, **kw).train()
        randomize_puzzle_table(model)
        model.grad_checkpointing = on
        calls = []
        inner_net = model.net
        model.net = lambda *a: calls.append(1) or inner_net(*a)
        grads, saved = _step_grads(model, batch)
        results.append((grads, saved, len(calls)))
    (plain, saved_plain, calls_plain), (ckpt, saved_ckpt, calls_ckpt) = results
    assert calls_plain == 2 * 2 * (3 + 1)  # 2 supervision steps x H_cycles x (L_cycles + 1)
    assert calls_ckpt == calls_plain + 2 * (3 + 1)  # the grad-carrying cycle of each step runs again
    assert saved_ckpt < 0.5 * saved_plain, (saved_ckpt, saved_plain)
    assert plain.keys() == ckpt.keys()
    for name, g in plain.items():
        torch.testing.assert_close(ckpt[name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_grad_checkpointing_is_off_without_autograd():
    model = tiny_model(seed=2).eval()
    model.grad_checkpointing = True
    batch = make_batch()
    with torch.no_grad():
        _, out = model(model.initial_carry(batch), batch)
    _, ref = tiny_model(seed=2).eval()(model.initial_carry(batch), batch)
    torch.testing.assert_close(out["logits"], ref["logits"], rtol=0, atol=0)


def test_logits_read_the_positions_after_the_prefix():
    model = tiny_model().eval()
    batch = make_batch()
    B = 4
    z_H = model.H_init.expand(B, model.total_len, -1).clone()
    z_L = model.L_init.expand(B, model.total_len, -1).clone()
    new_H, _, logits, q_halt, q_cont = model.inner(z_H, z_L, batch)
    torch.testing.assert_close(logits, new_H[:, 2:] @ model.lm_head.weight.T)
    q = new_H[:, 0] @ model.q_head.weight.T + model.q_head.bias
    torch.testing.assert_close(q_halt, q[:, 0])
    torch.testing.assert_close(q_cont, q[:, 1])


# ---------------------------------------------------------------------------
# ACT carry
# ---------------------------------------------------------------------------


def test_halted_rows_reset_and_take_the_new_batch():
    model = tiny_model(halt_max_steps=5).train()
    b1, b2 = make_batch(seed=1), make_batch(seed=2)
    carry = model.initial_carry(b1)
    carry, _ = model(carry, b1)  # all rows were halted: everything comes from b1
    for k in b1:
        assert torch.equal(carry.current_data[k], b1[k])
    assert torch.equal(carry.steps, torch.ones(4, dtype=torch.int32))
    assert not carry.halted.any()  # q_halt starts at -5: no row halts on its own

    carry.halted = torch.tensor([True, False, True, False])
    carry, out = model(carry, b2)
    keep = torch.tensor([False, True, False, True])
    for k in b1:
        assert torch.equal(carry.current_data[k][keep], b1[k][keep])
        assert torch.equal(carry.current_data[k][~keep], b2[k][~keep])
    assert carry.steps.tolist() == [1, 2, 1, 2]
    # Reset rows started from H_init/L_init: the same logits as a fresh carry on b2.
    _, fresh = model(model.initial_carry(b2), b2)
    torch.testing.assert_close(out["logits"][~keep], fresh["logits"][~keep])
    assert not torch.allclose(out["logits"][keep], fresh["logits"][keep])


def test_rows_halt_at_halt_max_steps():
    model = tiny_model(halt_max_steps=3).train()
    batch = make_batch()
    carry = model.initial_carry(batch)
    seen = []
    for _ in range(3):
        carry, _ = model(carry, batch)
        seen.append(carry.halted.clone())
    assert not seen[0].any() and not seen[1].any() and seen[2].all()
    carry, _ = model(carry, batch)  # halted rows restart
    assert torch.equal(carry.steps, torch.ones(4, dtype=torch.int32))


def _confident(model):
    with torch.no_grad():
        model.q_head.bias.copy_(torch.tensor([5.0, -5.0]))  # q_halt > 0 everywhere


def test_eval_runs_halt_max_steps_unless_early_exit():
    model = tiny_model(halt_max_steps=4)
    _confident(model)
    batch = make_batch()

    model.train()
    carry, _ = model(model.initial_carry(batch), batch)
    assert carry.halted.all()  # training halts on q_halt > 0

    model.eval()
    carry = model.initial_carry(batch)
    for step in range(1, 5):
        carry, _ = model(carry, batch)
        assert carry.halted.all() == (step == 4)
        assert torch.all(carry.steps == step)

    model.early_exit = True
    carry, _ = model(model.initial_carry(batch), batch)
    assert carry.halted.all()


def test_exploration_enforces_a_minimum_number_of_steps():
    model = tiny_model(halt_max_steps=6, halt_exploration_prob=1.0).train()
    _confident(model)
    batch = make_batch(B=64)
    carry, _ = model(model.initial_carry(batch), batch)
    assert not carry.halted.any()  # every row explores: at least 2 steps


def test_q_continue_mode_halts_on_q_halt_above_q_continue():
    model = tiny_model(halt_max_steps=4, no_ACT_continue=False).train()
    batch = make_batch()
    with torch.no_grad():
        model.q_head.bias.copy_(torch.tensor([-1.0, -3.0]))  # q_halt < 0 but > q_continue
    carry, out = model(model.initial_carry(batch), batch)
    assert carry.halted.all()
    assert "target_q_continue" in out


# ---------------------------------------------------------------------------
# Puzzle embedding and dtypes
# ---------------------------------------------------------------------------


def test_puzzle_embedding_records_touched_rows_in_training_only():
    model = tiny_model().train()
    batch = make_batch()
    carry, out = model(model.initial_carry(batch), batch)
    out["logits"].float().square().sum().backward()
    ids, grads = model.puzzle_emb.touched()
    assert torch.equal(ids, batch["puzzle_identifiers"].long())
    assert grads.shape == (4, 32) and grads.abs().sum() > 0
    assert model.puzzle_emb.weights.grad is None

    model.eval()
    model.puzzle_emb.clear()
    model(model.initial_carry(batch), batch)
    assert model.puzzle_emb.touched() is None


def test_resolve_forward_dtype(monkeypatch):
    from trm_kaggle.model import dtype as dtype_mod

    # auto on CPU follows the measured bf16/fp32 matmul rate (stubbed here: the real one is the machine's)
    monkeypatch.setattr(dtype_mod, "cpu_bf16_speedup", lambda threads: 0.003)  # AVX2-only CPU: bf16 emulated
    dtype, why = resolve_forward_dtype(ArchConfig(), "cpu")
    assert dtype == torch.float32 and "auto" in why and "0.003x" in why
    dtype, why = resolve_forward_dtype(ArchConfig(forward_dtype="bfloat16"), "cpu")
    assert dtype == torch.bfloat16 and "warning" in why and "no fast bf16" in why
    monkeypatch.setattr(dtype_mod, "cpu_bf16_speedup", lambda threads: 2.2)  # AVX512_BF16 / AMX
    dtype, why = resolve_forward_dtype(ArchConfig(), "cpu")
    assert dtype == torch.bfloat16 and "2.2x faster" in why
    _, why = resolve_forward_dtype(ArchConfig(forward_dtype="bfloat16"), "cpu")
    assert why == "forward_dtype=bfloat16 set explicitly"  # no warning where bf16 is fast
    # narrow models stay float32 whatever the CPU
    dtype, why = resolve_forward_dtype(ArchConfig(hidden_size=64, num_heads=4), "cpu")
    assert dtype == torch.float32 and "hidden_size 64" in why
    monkeypatch.setattr(dtype_mod, "cpu_bf16_speedup", lambda threads: 1.1)  # not worth the precision
    assert resolve_forward_dtype(ArchConfig(), "cpu")[0] == torch.float32
    dtype, _ = resolve_forward_dtype(ArchConfig(forward_dtype="float32"), "cuda")
    assert dtype == torch.float32
    if not torch.cuda.is_available():
        assert resolve_forward_dtype(ArchConfig(), "cuda")[0] == torch.float32
    assert resolve_forward_dtype(ArchConfig(), "mps")[0] == torch.float32
    # CUDA: native bf16 from compute capability 8.0; a T4 (7.5, emulated bf16) or V100 gets float16 (trained
    # with loss scaling), as does a P100 (6.0); consumer Pascal (6.1: float16 at 1/64 the rate) float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    for capability, expected in (((7, 5), torch.float16), ((7, 0), torch.float16), ((6, 0), torch.float16),
                                 ((6, 1), torch.float32), ((5, 2), torch.float32), ((8, 0), torch.bfloat16),
                                 ((8, 9), torch.bfloat16), ((9, 0), torch.bfloat16)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        dtype, why = resolve_forward_dtype(ArchConfig(), "cuda")
        assert dtype == expected and f"{capability[0]}.{capability[1]}" in why


def test_cpu_bf16_speedup_is_a_measured_positive_rate():
    from trm_kaggle.model.dtype import cpu_bf16_speedup

    r = cpu_bf16_speedup(torch.get_num_threads())
    assert r > 0 and r == cpu_bf16_speedup(torch.get_num_threads())  # measured once per thread count


def test_bfloat16_activations_keep_float32_parameters():
    model = tiny_model(forward_dtype="bfloat16").train()
    batch = make_batch()
    carry = model.initial_carry(batch)
    assert carry.z_H.dtype == torch.bfloat16
    carry, out = model(carry, batch)
    assert out["logits"].dtype == torch.bfloat16
    loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.layers[0].self_attn.qkv_proj.weight.grad.dtype == torch.float32
    assert model.layers[0].self_attn.qkv_proj.weight.grad.abs().sum() > 0
    assert all(m.cast_weight is None for m in model.modules() if isinstance(m, CastedLinear))
    # Close to the float32 model with the same weights.
    ref = tiny_model().train()
    _, out32 = ref(ref.initial_carry(batch), batch)
    assert (out["logits"].float() - out32["logits"]).abs().max() < 0.25 * out32["logits"].abs().max()


def _has_cxx() -> bool:
    import shutil

    return any(shutil.which(c) for c in ("c++", "g++", "clang++"))


@pytest.mark.slow  # inductor's C++ compile: 45-100 s on two shared cores
@pytest.mark.skipif(not _has_cxx(), reason="torch.compile on CPU needs a C++ compiler")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_apply_compile_matches_eager(dtype):
    """apply_compile (inductor on CPU) gives the eager model's logits and gradients."""
    from trm_kaggle.model.compiling import apply_compile

    torch._dynamo.reset()
    eager = tiny_model(forward_dtype=dtype).train()
    compiled = tiny_model(forward_dtype=dtype).train()
    apply_compile(compiled, "on", "cpu")
    batch = make_batch()
    results = []
    for m in (eager, compiled):
        carry, out = m(m.initial_carry(batch), batch)
        loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)
        loss.backward()
        results.append((out["logits"].float(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    (l_e, g_e), (l_c, g_c) = results
    tol = 1e-4 if dtype == "float32" else 5e-2
    assert (l_e - l_c).abs().max() <= tol * l_e.abs().max()
    for n, g in g_e.items():
        assert (g - g_c[n]).norm() <= tol * 3 * g.norm() + 1e-8, n


def test_set_recursion_changes_depth_and_act_steps_with_the_same_weights():
    model = tiny_model()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    model.set_recursion(H_cycles=4, halt_max_steps=7)
    assert (model.H_cycles, model.arch.H_cycles, model.arch.halt_max_steps) == (4, 4, 7)
    assert model.L_cycles == model.arch.L_cycles == tiny_arch().L_cycles
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="only H_cycles, L_cycles, halt_max_steps"):
        model.set_recursion(hidden_size=8)


def test_the_cycle_counts_have_one_owner_the_arch():
    """The model reads its cycle counts from `arch`: no second copy that a schedule could leave behind."""
    model = tiny_model()
    with pytest.raises(AttributeError):
        model.L_cycles = 1  # only set_recursion changes them, and it changes `arch`
    model.set_recursion(L_cycles=1)
    assert model.L_cycles == model.arch.L_cycles == 1
    arch = tiny_arch()
    assert arch.with_recursion(H_cycles=5) == tiny_arch(H_cycles=5) and arch.H_cycles == tiny_arch().H_cycles
    with pytest.raises(ValueError):
        arch.with_recursion(H_cycles=0)  # checked like any ArchConfig


@pytest.mark.parametrize("dtype", [torch.int64, "int8", "float64", 5])
def test_a_forward_dtype_no_config_names_is_refused(dtype):
    """"float16" was kept as a str (the rollout's torch.zeros failed on it), torch.int64 failed in the first matmul."""
    with pytest.raises(ValueError, match=r"^forward_dtype=.*: expected None, 'auto' or one of float32, bfloat16, "
                                         r"float16"):
        TinyRecursiveModel(tiny_arch(), SEQ, VOCAB, IDS, forward_dtype=dtype)


@pytest.mark.parametrize("dtype, expected", [("float16", torch.float16), (torch.bfloat16, torch.bfloat16),
                                             ("auto", None), (None, None)])
def test_a_forward_dtype_may_be_named(dtype, expected):
    assert TinyRecursiveModel(tiny_arch(), SEQ, VOCAB, IDS, forward_dtype=dtype).forward_dtype is expected


@pytest.mark.parametrize("change, said", [({"hidden_size": 0}, r"hidden_size"), ({"L_layers": -1}, r"L_layers"),
                                          ({"H_cycles": 0}, r"H_cycles"), ({"expansion": float("nan")}, r"expansion")])
def test_an_arch_built_around_its_validators_is_refused_naming_the_field(change, said):
    """model_copy(update=...): hidden_size=0 was a ZeroDivisionError, L_layers=-1 and H_cycles=0 built a model."""
    with pytest.raises(ValueError, match=rf"^arch: ArchConfig: {said}"):
        TinyRecursiveModel(tiny_arch().model_copy(update=change), SEQ, VOCAB, IDS)


@pytest.mark.parametrize("name", ["early_exit", "grad_checkpointing"])
def test_the_model_s_flags_are_booleans(name):
    """early_exit="no" was taken as yes."""
    with pytest.raises(ValueError, match=rf"^{name}='no': expected True or False"):
        TinyRecursiveModel(tiny_arch(), SEQ, VOCAB, IDS, **{name: "no"})


@pytest.mark.parametrize("lower, upper", [(2.0, -2.0), (1.0, 1.0), (float("nan"), 2.0), (40.0, 50.0)])
def test_a_truncation_range_no_draw_falls_in_is_refused(lower, upper):
    """lower > upper redrew for ever."""
    with pytest.raises(ValueError, match=r"^lower=.*, upper=.*: expected lower < upper"):
        trunc_normal_(torch.empty(3), lower=lower, upper=upper)
