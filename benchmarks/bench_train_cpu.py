"""Benchmark: training examples/s of our TRM against upstream's model code on this CPU.

    python benchmarks/bench_train_cpu.py                                   # ours only
    python benchmarks/bench_train_cpu.py --upstream-dir /tmp/upstream_trm  # + upstream, interleaved
    python benchmarks/bench_train_cpu.py --upstream-dir DIR --compile      # + ours with apply_compile
    python benchmarks/bench_train_cpu.py --upstream-dir DIR --dtype bfloat16  # both sides in bf16
    python benchmarks/bench_train_cpu.py --upstream-dir DIR --ours-dtype auto  # ours as `train` runs here

`--upstream-dir` is a directory holding upstream's `models/` package (the paper's
reference code: models/recursive_reasoning/trm.py, layers.py, common.py,
sparse_embedding.py, losses.py); upstream is never shipped with this project.
Its layers import `einops`, which must be importable (installed, or placed in
that directory). Upstream's TRM attention already calls torch's
scaled_dot_product_attention (its flash_attn import is commented out), so it
runs on CPU unmodified.

Config, identical for both models: hidden 128, 8 heads (upstream's
config/arch/trm.yaml value, head_dim 16), expansion 4 (SwiGLU inner width 512),
seq_len 81, vocab 11, puzzle_emb_len 16 with puzzle_emb_ndim 128 (so 97
positions), 1000 puzzle identifiers, batch 64, H_cycles 3, L_cycles 6, L_layers 2,
rope, attention (mlp_t off), halt_max_steps 16, no_ACT_continue, stablemax loss,
float32 activations (the issue's comparison), or with `--dtype bfloat16` bf16
activations on both sides (upstream's default forward_dtype; float32 weights on
both; ours keeps norms and attention in float32). The line "forward_dtype=auto on
this CPU" says which of the two `trm-kaggle train` would use here.

One training step = one ACT step: forward (carry, batch) -> loss -> backward
(loss / batch_size, as upstream) -> torch.optim.AdamW step on the dense weights
(same hyper-parameters for both) -> each project's own sparse SignSGD step on the
puzzle-embedding rows of the batch -> zero_grad. Both models start from the same
weights (ours are loaded from upstream's), and with --upstream-dir the script first
checks that one step gives the same logits, loss and gradients.

Timing: `--warmup` steps per model, then `--repeats` rounds; in each round each
model runs a block of `--steps` timed steps, alternating A B A B ... so that load
from other processes hits both alike. Reported: the median examples/s over rounds
(wall clock), and the median of the per-round ratios. With --compile a third
model, ours after `apply_compile` (model/compiling.py), joins the rotation; its
first two steps compile (with and without autograd) and the compile time is
printed separately.

Model FLOPs per example (multiply-add = 2 FLOPs), S = prefix + seq_len = 97,
D = hidden = 128, I = SwiGLU inner width = 512:

    per block  F_blk = 2*S*D*3D (qkv) + 2*S*S*D (QK^T) + 2*S*S*D (AV) + 2*S*D*D (o_proj)
                     + 2*S*D*2I (gate_up) + 2*S*I*D (down)
    per net    F_net = L_layers * F_blk
    forward    H_cycles * (L_cycles + 1) * F_net              (every recursion step)
    backward   2 * (L_cycles + 1) * F_net                      (only the last H cycle has gradient)
    heads      3 * 2*seq_len*D*vocab (lm_head fwd + bwd) + 3 * 2*D*2 (q_head)

Element-wise work (norms, rope, softmax, SiLU), the embedding and the optimizer
are not counted.

Kernel floor (float32): every matmul of one training step (forward, input gradient,
weight gradient) and every attention call, each timed alone with the kernel our
model uses for it (oneDNN linear, BLAS for weight gradients, torch's SDPA), best of
5, times its count per step. Everything else is left out, so batch / floor is an
upper bound on the examples/s these kernels allow; the script prints it as a
multiple of upstream's rate, which says whether a target ratio is reachable at all. Achieved GFLOP/s = FLOPs/example * examples/s; it is printed
beside the measured float32 matmul peak (2048x2048 matmul, best and median of 7)
and the bfloat16 matmul rate (256x256, and 2048x2048 when it finishes quickly).
"""

from __future__ import annotations

import copy
import importlib
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.entry import check_options, loading, upstream_problem  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import torch
    import torch.nn.functional as F
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.errors import TRMError
    from trm_kaggle.model import TinyRecursiveModel, act_loss, resolve_forward_dtype
    from trm_kaggle.model import cpu_kernels, layers
    from trm_kaggle.model import apply_compile
    from trm_kaggle.model import swiglu_width
    from trm_kaggle.model import from_upstream_state_dict
    from trm_kaggle.optim import SignSGD
    from trm_kaggle.train import dtype_name

SEQ_LEN, VOCAB, NUM_IDS = 81, 11, 1000
ADAMW = dict(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
SPARSE = dict(lr=1e-2, weight_decay=0.1)


def arch_dict(args) -> dict:
    return dict(hidden_size=128, num_heads=args.heads, expansion=4, H_cycles=3, L_cycles=6, H_layers=0, L_layers=2,
                halt_max_steps=16, halt_exploration_prob=0.1, no_ACT_continue=True, pos_encodings="rope",
                rope_theta=10000.0, rms_norm_eps=1e-5, puzzle_emb_ndim=128, puzzle_emb_len=16, mlp_t=False)


def flops_per_example(a: dict, seq_len: int = SEQ_LEN, vocab: int = VOCAB) -> float:
    S, D = a["puzzle_emb_len"] + seq_len, a["hidden_size"]
    inner = swiglu_width(D, a["expansion"])
    blk = 2 * S * D * 3 * D + 2 * S * S * D + 2 * S * S * D + 2 * S * D * D + 2 * S * D * 2 * inner + 2 * S * inner * D
    net = a["L_layers"] * blk
    fwd = a["H_cycles"] * (a["L_cycles"] + 1) * net
    bwd = 2 * (a["L_cycles"] + 1) * net
    heads = 3 * 2 * seq_len * D * vocab + 3 * 2 * D * 2
    return float(fwd + bwd + heads)


def matmul_rate(n: int, dtype: torch.dtype, reps: int):
    """GFLOP/s of an n x n @ n x n matmul after one warm-up: (median, best) of `reps`.

    On a shared machine the best is the better estimate of what the core can do."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(3):  # the first calls of a new shape/dtype build (JIT) kernels
        a @ b
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    flop = 2 * n**3 / 1e9
    return flop / statistics.median(times), flop / min(times)


def kernel_floor(a: dict, batch: int, reps: int = 5) -> tuple[float, dict]:
    """Seconds per training step that our float32 kernels alone need: every matmul (forward, input
    gradient, weight gradient) and attention call of one step, each timed in isolation (best of
    `reps`) with the kernel our model uses for it, times its count per step. Element-wise work,
    norms, embeddings, loss and optimizer are left out, so this is a lower bound on the step time:
    batch / floor is the most examples/s these kernels allow."""
    S, D = a["puzzle_emb_len"] + SEQ_LEN, a["hidden_size"]
    inner, M = swiglu_width(D, a["expansion"]), batch * S
    H, hd = a["num_heads"], D // a["num_heads"]
    fwd_calls = a["H_cycles"] * (a["L_cycles"] + 1) * a["L_layers"]  # every recursion step, every layer
    bwd_calls = (a["L_cycles"] + 1) * a["L_layers"]  # the last H cycle only

    def best(fn) -> float:
        for _ in range(2):
            fn()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    def linear_time(k: int, n: int) -> float:  # x (M, k) @ w.T (n, k): the forward's and dx's kernel
        x, w = torch.randn(batch, S, k), torch.randn(n, k)
        return best(lambda: layers.linear(x, w))

    def dw_time(k: int, n: int) -> float:  # dy.T (n, M) @ x (M, k): the weight gradient (BLAS)
        dy, x = torch.randn(M, n), torch.randn(M, k)
        return best(lambda: dy.t() @ x)

    # (in, out) of qkv, o, gate, up, down
    shapes = [(D, 3 * D), (D, D), (D, inner), (D, inner), (inner, D)]
    t_fwd = sum(linear_time(k, n) for k, n in shapes)
    t_dx = sum(linear_time(n, k) for k, n in shapes)
    t_dw = sum(dw_time(k, n) for k, n in shapes)
    q, k, v = (torch.randn(batch, H, S, hd, requires_grad=True) for _ in range(3))
    t_att_fwd = best(lambda: F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach()))
    g = torch.randn(batch, H, S, hd)

    def att_fwd_bwd():
        y = F.scaled_dot_product_attention(q, k, v)
        y.backward(g)

    t_att_bwd = max(best(att_fwd_bwd) - t_att_fwd, 0.0)
    parts = {"matmuls forward": fwd_calls * t_fwd, "matmuls backward (dx)": bwd_calls * t_dx,
             "matmuls backward (dw)": bwd_calls * t_dw, "attention forward": fwd_calls * t_att_fwd,
             "attention backward": bwd_calls * t_att_bwd}
    return sum(parts.values()), parts


def make_batches(n: int, batch: int, seed: int, seq_len: int = SEQ_LEN, vocab: int = VOCAB, num_ids: int = NUM_IDS,
                 device: str | torch.device = "cpu") -> List[Dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        b = {
            "inputs": torch.randint(0, vocab, (batch, seq_len), generator=g, dtype=torch.int32),
            "labels": torch.randint(1, vocab, (batch, seq_len), generator=g, dtype=torch.int32).long(),
            "puzzle_identifiers": torch.randint(0, num_ids, (batch,), generator=g, dtype=torch.int32),
        }
        out.append({k: v.to(device) for k, v in b.items()})
    return out


# ---------------------------------------------------------------------------
# The two trainers: each returns step() running one full training step
# ---------------------------------------------------------------------------


class Ours:
    def __init__(self, a: dict, batch: int, compiled: bool, dtype: str = "float32", *,
                 device: str | torch.device = "cpu", seq_len: int = SEQ_LEN, vocab: int = VOCAB,
                 num_ids: int = NUM_IDS, compile_kwargs: dict | None = None):
        arch = ArchConfig(**{k: v for k, v in a.items()}, forward_dtype=dtype, loss_type="stablemax_cross_entropy")
        self.model = TinyRecursiveModel(arch, seq_len, vocab, num_ids).to(device).train()
        self.dtype = dtype
        self.name = "ours+compile" if compiled else "ours"
        self.batch = batch
        if compiled:
            apply_compile(self.model, "on", device, **(compile_kwargs or {}))  # lazy: the first step compiles
        self.make_optimizers()
        self.carry = None

    def make_optimizers(self):
        self.opt = torch.optim.AdamW(self.model.parameters(), **ADAMW)
        self.sparse = SignSGD(self.model.puzzle_emb, **SPARSE)

    def forward_loss(self, data):
        if self.carry is None:
            self.carry = self.model.initial_carry(data)
        self.carry, out = self.model(self.carry, data)
        c = self.carry
        loss, _ = act_loss(out, c.current_data["labels"], c.halted, c.steps, "stablemax_cross_entropy")
        return loss / self.batch, out

    def step(self, data):
        loss, _ = self.forward_loss(data)
        loss.backward()
        self.opt.step()
        self.sparse.step()
        self.opt.zero_grad(set_to_none=True)
        self.sparse.zero_grad()


def flash_layout(sdpa: Callable) -> Callable:
    """`sdpa` (torch's scaled_dot_product_attention as upstream's models/layers.py imports it) with its
    (B, H, S, D) output laid out as the flash, memory-efficient and cuDNN kernels (and the CPU's) lay it out:
    heads and head dimension adjacent in memory. Upstream moves the heads behind the positions and calls
    `.view(B, S, H * D)`, which needs that layout; the math kernel, CUDA's only one for float64 (the
    reference of the parity checks), returns a plain contiguous (B, H, S, D) tensor, and `.view` fails. Any
    other output is returned as it is (no copy), so timed runs are untouched."""

    def attention(*args, **kwargs):
        out = sdpa(*args, **kwargs)
        if out.dim() == 4 and not (out.stride(-1) == 1 and out.stride(1) == out.shape[-1]):
            out = out.transpose(1, 2).contiguous().transpose(1, 2)
        return out

    attention.flash_layout = True
    return attention


def patch_upstream_attention() -> None:
    """Give upstream's attention (`models.layers`, imported) the layout `.view` needs (`flash_layout`), at
    import time and inside this process only: upstream's files are never edited."""
    layers = importlib.import_module("models.layers")
    if not getattr(layers.scaled_dot_product_attention, "flash_layout", False):
        layers.scaled_dot_product_attention = flash_layout(layers.scaled_dot_product_attention)


class Upstream:
    name = "upstream"

    def __init__(self, a: dict, batch: int, upstream_dir: str, dtype: str = "float32", *,
                 device: str | torch.device = "cpu", seq_len: int = SEQ_LEN, vocab: int = VOCAB,
                 num_ids: int = NUM_IDS):
        if upstream_dir not in sys.path:
            sys.path.insert(0, upstream_dir)
        trm = importlib.import_module("models.recursive_reasoning.trm")
        losses = importlib.import_module("models.losses")
        sparse = importlib.import_module("models.sparse_embedding")
        patch_upstream_attention()
        cfg = dict(a, batch_size=batch, seq_len=seq_len, vocab_size=vocab, num_puzzle_identifiers=num_ids,
                   forward_dtype=dtype)
        # Upstream makes its tensors (weights, carries) under `with torch.device("cuda")`, as pretrain.py does.
        self.device = torch.device(device)
        with self.device:
            self.model = losses.ACTLossHead(trm.TinyRecursiveReasoningModel_ACTV1(cfg),
                                            loss_type="stablemax_cross_entropy")
        self.model.train()
        self.dtype = dtype
        self.batch = batch
        self._sparse_module = sparse
        self.make_optimizers()
        self.carry = None

    def make_optimizers(self):
        # As upstream's pretrain.py: the sparse table's buffers go to its SignSGD, parameters to the dense optimizer.
        self.sparse = self._sparse_module.CastedSparseEmbeddingSignSGD_Distributed(
            self.model.model.puzzle_emb.buffers(), world_size=1, **SPARSE)
        self.opt = torch.optim.AdamW(self.model.parameters(), **ADAMW)

    def forward_loss(self, data):
        with self.device:
            if self.carry is None:
                self.carry = self.model.initial_carry(data)
            self.carry, loss, _, out, _ = self.model(carry=self.carry, batch=data, return_keys=["logits"])
        return (1 / self.batch) * loss, out

    def step(self, data):
        loss, _ = self.forward_loss(data)
        loss.backward()
        with self.device:
            self.sparse.step()
        self.opt.step()
        self.sparse.zero_grad()
        self.opt.zero_grad()


def _upstream_name(name: str) -> str:
    name = re.sub(r"^layers\.", "L_level.layers.", name)
    return "model.inner." + name.replace("embed_tokens.weight", "embed_tokens.embedding_weight")


#: One side's typical error passes when within PARITY_RATIO x the baseline's, plus a floor of a few units of
#: its dtype's rounding (so that two near-exact sides are not judged by the ratio of two tiny numbers).
PARITY_RATIO = 4.0
PARITY_FLOOR = {"float32": 1e-6, "bfloat16": 2.0**-8, "float64": 1e-12}
ERROR_NAMES = ("logits", "loss", "grads")


def step_outputs(t, data, seed: int = 0):
    """One training step's (logits, loss, gradients by parameter name) in float64, the trainer left as it was
    (gradients zeroed, carry dropped). The seed fixes the halting-exploration draws."""
    torch.manual_seed(seed)
    loss, out = t.forward_loss(data)
    loss.backward()
    grads = {n: p.grad.detach().double().clone() for n, p in t.model.named_parameters() if p.grad is not None}
    t.opt.zero_grad(set_to_none=True)
    t.sparse.zero_grad()
    t.carry = None
    return out["logits"].detach().double(), float(loss.item()), grads


def relative_errors(result, reference) -> tuple[float, float, float]:
    """(logits, loss, gradients) of one step against a reference step: the largest |difference| of the logits
    over the largest |reference logit|, |loss difference| / |reference loss|, and the worst parameter's
    ||gradient difference|| / ||reference gradient||."""
    logits, loss, grads = result
    r_logits, r_loss, r_grads = reference
    dl = (logits - r_logits).abs().max().item() / max(r_logits.abs().max().item(), 1e-30)
    dloss = abs(loss - r_loss) / max(abs(r_loss), 1e-30)
    dg = max(((grads[n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in r_grads.items())
    return dl, dloss, dg


def typical_errors(per_batch) -> tuple[float, ...]:
    """Each figure's geometric mean over the batches. Rounding grows through the recursion by a factor that
    varies tenfold from one batch to the next (two float32 implementations swap places from batch to batch),
    so one batch says little and a geometric mean over several tames an unlucky one."""
    cols = list(zip(*per_batch))
    return tuple(math.exp(sum(math.log(max(v, 1e-30)) for v in col) / len(col)) for col in cols)


def within(errors, baseline, dtype: str) -> bool:
    return all(e <= PARITY_RATIO * b + PARITY_FLOOR[dtype] for e, b in zip(errors, baseline))


def float64_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of ours (TinyRecursiveModel) or of upstream's model (its ACTLossHead): weights, buffers and
    activations, the exact answer their arithmetic approximates."""
    ref = copy.deepcopy(model)
    # Upstream's sparse rows are a buffer that takes gradients: cast under no_grad so that it stays a leaf.
    trained = [n for n, b in ref.named_buffers() if b.requires_grad]
    with torch.no_grad():
        ref.double()
    for n, b in ref.named_buffers():
        b.requires_grad_(n in trained)
    if hasattr(ref, "model") and hasattr(ref.model, "inner"):  # upstream's ACTLossHead
        inner = ref.model.inner
        inner.forward_dtype = inner.embed_tokens.cast_to = inner.puzzle_emb.cast_to = torch.float64
    else:
        ref.forward_dtype = torch.float64
    return ref


def float64_copy(t):
    """A float64 copy of a trainer (`float64_model` of its model, its own optimizers)."""
    ref = copy.copy(t)
    ref.carry = None
    ref.model = float64_model(t.model)
    ref.make_optimizers()  # the copy's own (an optimizer's deepcopy keeps only its state, not its tables)
    return ref


def compare_with_upstream(ours: Ours, up: Upstream, batches) -> dict:
    """Load upstream's initial weights into ours and run one step of each, and of a float64 copy of upstream,
    on each batch. Both projects' rounding differs and grows through the recursive net calls, so both are
    measured against the float64 answer: ours passes when its typical error is within PARITY_RATIO x
    upstream's own in the same dtype (+ a floor)."""
    if isinstance(batches, dict):
        batches = [batches]
    sd = from_upstream_state_dict(up.model.state_dict(), "upstream model")
    missing, unexpected = ours.model.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    with torch.no_grad():  # a non-zero puzzle table, so that the rows matter
        g = torch.Generator().manual_seed(7)
        table = torch.randn(up.model.model.puzzle_emb.weights.shape, generator=g)
        up.model.model.puzzle_emb.weights.copy_(table)
        ours.model.puzzle_emb.weights.copy_(table)
    ref = float64_copy(up)
    errs = {"ours": [], "upstream": []}
    for i, data in enumerate(batches):
        r = step_outputs(ref, data, i)
        o, u = step_outputs(ours, data, i), step_outputs(up, data, i)
        errs["ours"].append(relative_errors((o[0], o[1], {_upstream_name(n): v for n, v in o[2].items()}), r))
        errs["upstream"].append(relative_errors(u, r))
    eo, eu = typical_errors(errs["ours"]), typical_errors(errs["upstream"])
    return {"dtype": up.dtype, "batches": len(batches), "ours": dict(zip(ERROR_NAMES, eo)),
            "upstream": dict(zip(ERROR_NAMES, eu)), "ok": within(eo, eu, up.dtype)}


def check_same_line(c: dict) -> str:
    """A `compare_with_upstream` result as one line."""
    fmt = lambda e: ", ".join(f"{k} {v:.1e}" for k, v in e.items())  # noqa: E731
    over = "" if c["batches"] == 1 else f" (geometric mean over {c['batches']} batches)"
    return (f"{'OK' if c['ok'] else 'MISMATCH'}: relative error against a float64 run of upstream{over}: "
            f"ours [{fmt(c['ours'])}], upstream in the same dtype ({c['dtype']}) [{fmt(c['upstream'])}]")


def check_same(ours: Ours, up: Upstream, batches) -> str:
    return check_same_line(compare_with_upstream(ours, up, batches))


def time_block(step: Callable, batches, start: int, n: int):
    """(wall seconds, CPU seconds of this process) for n training steps."""
    t, c = time.perf_counter(), time.process_time()
    for i in range(n):
        step(batches[(start + i) % len(batches)])
    return time.perf_counter() - t, time.process_time() - c


def main(argv=None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--upstream-dir", default=None, help="directory holding upstream's models/ package")
    p.add_argument("--steps", type=int, default=4, help="timed training steps per block")
    p.add_argument("--repeats", type=int, default=5, help="rounds of (ours block, upstream block)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave torch's default)")
    p.add_argument("--compile", action="store_true",
                   help="also time ours after apply_compile (torch.compile of the recursive net)")
    p.add_argument("--no-check", action="store_true", help="skip the same-outputs check against upstream")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="activation dtype of both models (default float32, the issue's comparison)")
    p.add_argument("--ours-dtype", choices=("float32", "bfloat16", "auto"), default=None,
                   help="ours in another dtype than upstream (auto: what `trm-kaggle train` picks on this CPU)")
    args = p.parse_args(argv)
    check_options(threads={"--threads": args.threads or None})  # 0: torch's default
    if args.upstream_dir and (problem := upstream_problem(args.upstream_dir)):
        raise TRMError(problem)

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    a = arch_dict(args)
    batches = make_batches(8, args.batch, seed=1)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, os.cpu_count() {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f} (other processes share these cores: compare ratios, not absolutes)")
    print(f"our float32 CPU matmuls through oneDNN: {cpu_kernels.ONEDNN_LINEAR}")
    print(f"config: hidden 128, heads {args.heads}, expansion 4, seq_len {SEQ_LEN} (+16 prefix = 97), vocab {VOCAB}, "
          f"batch {args.batch}, H_cycles 3, L_cycles 6, L_layers 2, rope, {args.dtype} activations, AdamW {ADAMW}")
    print("forward_dtype=auto on this CPU:", resolve_forward_dtype(ArchConfig(**a), "cpu")[1])

    up = None
    if args.upstream_dir:
        up = Upstream(a, args.batch, args.upstream_dir, args.dtype)
    ours_dtype = args.ours_dtype or args.dtype
    if ours_dtype == "auto":
        ours_dtype = dtype_name(resolve_forward_dtype(ArchConfig(**a), "cpu")[0])
    if ours_dtype != args.dtype:
        print(f"ours runs in {ours_dtype}, upstream in {args.dtype}")
    ours = Ours(a, args.batch, False, ours_dtype)
    if up is not None and not args.no_check:
        # Like with like: the check runs upstream in ours' dtype, even when the timed upstream runs in
        # another (bf16 rounding through 21 recursive calls is far larger than float32's; comparing
        # ours in bf16 with upstream in float32 would only measure that).
        twin = up if ours_dtype == args.dtype else Upstream(a, args.batch, args.upstream_dir, ours_dtype)
        print(f"same weights, one step, ours vs upstream, both in {ours_dtype}:", check_same(ours, twin, batches[0]))
    trainers = [ours] + ([up] if up is not None else [])
    if args.compile:
        compiled = Ours(a, args.batch, True, ours_dtype)
        compiled.model.load_state_dict(ours.model.state_dict())
        trainers.append(compiled)

    for t in trainers:
        times = []
        for i in range(max(args.warmup, 2 if t.name == "ours+compile" else 0)):
            w = time.perf_counter()
            t.step(batches[i % len(batches)])
            times.append(time.perf_counter() - w)
        if t.name == "ours+compile":
            # Steps 1 and 2 compile the network (without and with autograd); the last warm-up step does not.
            print(f"warm-up {t.name}: {len(times)} steps in {sum(times):.1f} s; compile time "
                  f"~{times[0] + times[1] - 2 * times[-1]:.1f} s (first two steps minus two ordinary ones)")
        else:
            print(f"warm-up {t.name}: {len(times)} steps in {sum(times):.1f} s")

    rates: Dict[str, List[float]] = {t.name: [] for t in trainers}
    cpu_rates: Dict[str, List[float]] = {t.name: [] for t in trainers}
    for r in range(args.repeats):
        line = []
        for t in trainers:
            wall, cpu = time_block(t.step, batches, r * args.steps, args.steps)
            rates[t.name].append(args.batch * args.steps / wall)
            cpu_rates[t.name].append(args.batch * args.steps / cpu)
            line.append(f"{t.name} {rates[t.name][-1]:6.1f} ex/s")
        print(f"round {r + 1}/{args.repeats}: " + ", ".join(line), flush=True)

    flops = flops_per_example(a)
    peak_med, peak = matmul_rate(2048, torch.float32, 7)
    bf16_med, bf16 = matmul_rate(256, torch.bfloat16, 5)
    # 2048^3 in bf16 only where it takes seconds, not minutes (CPUs without native bf16 run ~0.3 GFLOP/s)
    bf16_big = matmul_rate(2048, torch.bfloat16, 3)[1] if bf16 > 10 else float("nan")
    print()
    print(f"model FLOPs per example: {flops / 1e9:.3f} GFLOP (formula in this script's docstring)")
    print(f"fp32 matmul peak (2048x2048, 7 runs): best {peak:.1f} GFLOP/s, median {peak_med:.1f} GFLOP/s")
    print(f"bf16 matmul (256x256, 5 runs): best {bf16:.1f} GFLOP/s, median {bf16_med:.1f} GFLOP/s; 2048x2048 best "
          f"{bf16_big:.1f} GFLOP/s = {bf16_big / peak:.2f}x the fp32 peak (forward_dtype='auto' measures this "
          f"ratio and uses bf16 on CPUs where it is >= 1.3)")
    floor, parts = kernel_floor(a, args.batch) if args.dtype == "float32" else (float("nan"), {})
    if parts:
        print(f"float32 kernel floor of one step (each kernel timed alone, best of 5, times its count per step; "
              f"element-wise work, norms, loss and optimizer excluded): {floor:.2f} s = at most "
              f"{args.batch / floor:.1f} examples/s: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()))
    med = {k: statistics.median(v) for k, v in rates.items()}
    dtypes = {t.name: t.dtype for t in trainers}
    for name, v in med.items():
        ref_peak, peak_name = (peak, "fp32") if dtypes[name] == "float32" else (bf16_big, "bf16")
        gf = flops * v / 1e9
        print(f"{name:12s}: {v:7.2f} examples/s (median of {args.repeats} x {args.steps} steps), {gf:6.1f} GFLOP/s = "
              f"{100 * gf / ref_peak:4.1f} % of the {peak_name} peak; "
              f"{statistics.median(cpu_rates[name]):6.2f} examples "
              f"per CPU-second of this process")
    if up is not None:
        for name in [t.name for t in trainers if t.name != "upstream"]:
            pair = [o / u for o, u in zip(rates[name], rates["upstream"])]
            cpu_pair = [o / u for o, u in zip(cpu_rates[name], cpu_rates["upstream"])]
            print(f"ratio {name}/upstream: {med[name] / med['upstream']:.2f}x (median of per-round ratios "
                  f"{statistics.median(pair):.2f}x, range {min(pair):.2f}-{max(pair):.2f}; per CPU-second "
                  f"{statistics.median(cpu_pair):.2f}x); target >= 1.5x")
        if parts and ours_dtype == "float32":
            print(f"the float32 kernel floor allows at most {args.batch / floor / med['upstream']:.2f}x upstream's "
                  f"median rate; ours reaches {100 * med['ours'] * floor / args.batch:.0f} % of that floor's rate")
    else:
        print("upstream baseline not run (pass --upstream-dir DIR holding upstream's models/ package)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
