"""Tiny Recursive Model ("Less is More: Recursive Reasoning with Tiny Networks").

One small network `net` (L_layers post-norm blocks) is applied recursively to two
latent states of shape (batch, puzzle_emb_len + seq_len, hidden):

    for each of H_cycles cycles:
        L_cycles times:  z_L = net(z_L, z_H + x)      # reason: refine the latent
        once:            z_H = net(z_H, z_L)          # answer: refine the solution
    logits = lm_head(z_H)[:, puzzle_emb_len:]
    q_halt, q_continue = q_head(z_H[:, 0])

where x is the embedded input (a puzzle-embedding prefix + scaled token
embeddings) and net(h, inj) runs the blocks on h + inj. Only the last H cycle is
differentiated; the H_cycles - 1 before it run without autograd (inference_mode
in eager, no_grad under torch.compile: deep supervision with a one-step gradient,
as the paper). With `grad_checkpointing`, each net call of that last cycle keeps only
its inputs and runs again in backward (the same gradients, less memory, more time).

Around that sits ACT (adaptive computation time): a `Carry` holding (z_H, z_L,
steps, halted, current_data) persists across batches. Every call is one
supervision step; rows that halted on the previous call restart from
H_init/L_init on a fresh example taken from the new batch.

A step runs through three callables held as attributes: `net` and the ACT step's `act_begin`
(restart) and `act_end` (halting rule). The model knows nothing of compiling:
`trm_kaggle.model.compiling.apply_compile` swaps compiled versions in from outside (regions, not the
whole model: one block traced once for every layer).

The per-puzzle embedding table is *not* a parameter: it is a float32 buffer
(upstream: `puzzle_emb.weights`) updated sparsely by SignSGD on the rows a step
touched (`PuzzleEmbedding.touched()`), so `model.parameters()` holds exactly the
weights AdamATan2 trains and upstream's parameter counts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trm_kaggle.config import MAX_PUZZLE_IDENTIFIERS, ArchConfig, flag_argument, revalidated, whole_argument
from trm_kaggle.errors import TRMError
from trm_kaggle.model.dtype import DTYPES, resolve_forward_dtype
from trm_kaggle.model.layers import Block, CastedEmbedding, CastedLinear, CosSin, RotaryEmbedding, trunc_normal_
from trm_kaggle.wording import clipped, type_name

#: The longest sequence and the widest vocabulary a model is built for, the bounds an export's config and a
#: dataset's metadata give them (`ExportConfig`, `DatasetMetadata`).
MAX_SEQ_LEN = MAX_VOCAB_SIZE = 1 << 20
#: The dtypes a batch's tokens and identifiers may have: integers torch indexes with (a float 2.7 was cut to 2, a
#: bool taken as 0 and 1, without a word).
INDEX_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def act_begin(halted: torch.Tensor, z_H: torch.Tensor, z_L: torch.Tensor, steps: torch.Tensor,
              current: Dict[str, torch.Tensor], batch: Dict[str, torch.Tensor], H_init: torch.Tensor,
              L_init: torch.Tensor):
    """The ACT step's start: halted rows restart from the initial states on the new batch's example."""
    reset = halted.view(-1, 1, 1)
    z_H = torch.where(reset, H_init.to(z_H.dtype), z_H)
    z_L = torch.where(reset, L_init.to(z_L.dtype), z_L)
    steps = torch.where(halted, 0, steps)
    data = {k: torch.where(halted.view((-1,) + (1,) * (v.ndim - 1)), v, current[k]) for k, v in batch.items()}
    return z_H, z_L, steps, data


def act_end(steps: torch.Tensor, q_halt: torch.Tensor, q_continue: torch.Tensor,
            explore: Optional[Tuple[torch.Tensor, torch.Tensor]], halt_max_steps: int, no_ACT_continue: bool,
            training: bool, early_exit: bool):
    """The halting rule after one step: (steps, is_last, halted). `explore` = (the rows that explore, their
    drawn minimum of steps), in training only."""
    steps = steps + 1
    is_last = steps >= halt_max_steps
    halted = is_last
    if training and halt_max_steps > 1:
        halted = halted | ((q_halt > 0) if no_ACT_continue else (q_halt > q_continue))
        # Exploration: some rows must run at least U{2..halt_max_steps} steps.
        below, draw = explore
        halted = halted & (steps >= below * draw)
    elif not training and early_exit:
        halted = halted | (q_halt > 0)
    return steps, is_last, halted


def prefix_length(arch: ArchConfig) -> int:
    """Positions taken by the puzzle embedding in front of the sequence (upstream's rule)."""
    if arch.emb_ndim == 0:
        return 0
    if arch.puzzle_emb_len == 0:
        return -(arch.emb_ndim // -arch.hidden_size)  # ceil(emb_ndim / hidden)
    return arch.puzzle_emb_len


def checked_arch(arch: object) -> ArchConfig:
    """`arch` when its validators take it as it is, else one error naming the field: a TypeError for what is no
    ArchConfig (a dict failed on its first attribute), a ValueError for one built around them
    (`model_copy(update=...)`: hidden_size=0 was a division by zero, L_layers=-1 a model without blocks)."""
    if not isinstance(arch, ArchConfig):
        raise TypeError(f"arch: expected an ArchConfig (ArchConfig.model_validate reads a dict), got {type_name(arch)}")
    try:
        revalidated(arch)
    except TRMError as e:
        raise ValueError(f"arch: {e}") from None
    return arch


def forward_dtype_argument(value: object) -> Optional[torch.dtype]:
    """The dtype a model computes in: None or "auto" (decided per device), a dtype `arch.forward_dtype` names, or
    its name; else one ValueError naming it ("float16" was kept as a str, torch.int64 failed in the first matmul)."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    if any(value is dtype for dtype in DTYPES.values()):  # dtypes are singletons (`in` would compare a tensor)
        return value
    raise ValueError(f"forward_dtype={clipped(value, 40)}: expected None, 'auto' or one of "
                     f"{', '.join(DTYPES)} (a name or the torch dtype)")


@dataclass(frozen=True)
class ParameterCount:
    """Parameters without and with the puzzle-embedding table.

    The paper's parameter count (and `num_parameters()`) is the trained weights alone; the table, one row per
    training puzzle identifier, is learned too and grows with the dataset, so both figures are printed.
    """

    weights: int
    puzzle_rows: int
    puzzle_dim: int

    @property
    def puzzle_table(self) -> int:
        return self.puzzle_rows * self.puzzle_dim

    @property
    def total(self) -> int:
        return self.weights + self.puzzle_table

    def __str__(self) -> str:
        if not self.puzzle_table:  # puzzle_emb_ndim=0 (e.g. code repair): there is no table to count
            return f"{self.weights:,} parameters (no puzzle-embedding table)"
        return (f"{self.weights:,} parameters without the puzzle-embedding table, {self.total:,} with it "
                f"({self.puzzle_rows:,} rows x {self.puzzle_dim})")


# ---------------------------------------------------------------------------
# Sparse puzzle embedding
# ---------------------------------------------------------------------------


class PuzzleEmbedding(nn.Module):
    """One learned vector per puzzle identifier, trained sparsely (SignSGD), zero-initialised.

    `weights` is a persistent buffer, so it is saved with the model but stays out of
    `parameters()`. In training with grad enabled, `forward` copies the rows of the
    batch into a fresh leaf tensor that receives the gradient. After backward,
    `touched()` returns (ids, grads) of every such forward since the last `clear()`
    (several with gradient accumulation); the optimizer applies them and clears.
    """

    max_pending = 1024  # forwards kept when nobody clears (guards against unbounded memory)

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        # whole numbers from 1, named (2.5 and '3' were torch.zeros' "takes 1 positional argument")
        num_embeddings = whole_argument("num_embeddings", num_embeddings, 1, MAX_PUZZLE_IDENTIFIERS)
        embedding_dim = whole_argument("embedding_dim", embedding_dim, 1, MAX_SEQ_LEN)
        self.register_buffer("weights", torch.zeros(num_embeddings, embedding_dim), persistent=True)
        self._pending: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.reshape(-1).long()
        rows = self.weights[ids]
        if self.training and torch.is_grad_enabled():
            # Gradient goes to this per-batch copy, never to the (large) table itself.
            rows.requires_grad_(True)
            if len(self._pending) >= self.max_pending:
                warnings.warn("PuzzleEmbedding: rows of old forwards were never applied (no optimizer step); dropping them")
                self._pending = self._pending[-(self.max_pending // 2):]
            self._pending.append((ids, rows))
        return rows

    def touched(self) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """(ids, grads) of the rows used in training forwards since the last clear(); None if no gradient."""
        done = [(ids, rows.grad) for ids, rows in self._pending if rows.grad is not None]
        if not done:
            return None
        if len(done) == 1:
            return done[0]
        return torch.cat([i for i, _ in done]), torch.cat([g for _, g in done])

    def rows_with_grad(self) -> List[torch.Tensor]:
        """The recorded row copies that received a gradient (loss scaling unscales and checks them in place)."""
        return [rows for _, rows in self._pending if rows.grad is not None]

    def clear(self) -> None:
        """Forget the recorded rows (the optimizer calls this after its step)."""
        self._pending = []


# ---------------------------------------------------------------------------
# Batches a library caller gives
# ---------------------------------------------------------------------------


def check_batch(model: nn.Module, batch: object, *, labels: bool = False, where: str = "batch") -> None:
    """`batch`, given to `model` for inference, when the model can run it; else one TypeError or ValueError naming
    `where` and the key. Wanted: a mapping of torch tensors with the same rows, among them "inputs" (rows, seq_len)
    of tokens 0..vocab_size - 1 and "puzzle_identifiers" (rows,) of rows of the puzzle-embedding table (and
    "labels" shaped as the inputs with `labels`), integers all three. What torch made of the rest: a negative
    identifier took another puzzle's row and a float token was cut to a whole one, silently; a token past the
    vocabulary was its "index out of range" (on CUDA, a device-side assert); a numpy array, a short row or a
    missing key an error naming torch's internals.

    The inference entry points call it (`act_rollout`, each batch of `ContinuousRollout`'s source), never
    `forward` or the training step, which stay free of host reads: the bounds cost one (min and max)."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"{where}: expected a dict of torch tensors, got {type_name(batch)}")
    needed = ("inputs", "puzzle_identifiers", "labels") if labels else ("inputs", "puzzle_identifiers")
    missing = [k for k in needed if k not in batch]
    if missing:
        raise ValueError(f"{where} has no {', '.join(map(repr, missing))} (needed: {', '.join(needed)})")
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{where}[{clipped(key, 40)}]: expected a torch tensor, got {type_name(value)}")
    inputs = batch["inputs"]
    seq_len = getattr(model, "seq_len", None)
    if inputs.ndim != 2 or (seq_len is not None and inputs.shape[1] != seq_len):
        raise ValueError(f"{where}['inputs']: expected (rows, {seq_len or 'seq_len'}) tokens, got shape "
                         f"{tuple(inputs.shape)}" + (f" (the model was built for seq_len {seq_len})" if seq_len else ""))
    rows = inputs.shape[0]
    for key, value in batch.items():  # rows leave the batch and join it together (compaction, refills)
        if value.ndim == 0 or value.shape[0] != rows:
            raise ValueError(f"{where}[{clipped(key, 40)}]: expected {rows} rows as the inputs, got shape "
                             f"{tuple(value.shape)}")
    if batch["puzzle_identifiers"].ndim != 1:
        raise ValueError(f"{where}['puzzle_identifiers']: expected one per row, shape ({rows},), got "
                         f"{tuple(batch['puzzle_identifiers'].shape)}")
    if labels and batch["labels"].shape != inputs.shape:
        raise ValueError(f"{where}['labels']: expected the inputs' shape {tuple(inputs.shape)}, got "
                         f"{tuple(batch['labels'].shape)}")
    for key in needed:
        if batch[key].dtype not in INDEX_DTYPES:
            raise TypeError(f"{where}[{key!r}]: expected whole numbers (an integer dtype), got {batch[key].dtype}")
    # the values: tokens of the vocabulary, identifiers of the table's rows (a model without a table reads none)
    table = getattr(getattr(model, "puzzle_emb", None), "weights", None)
    bounds = [(key, n, what) for key, n, what in (
        ("inputs", getattr(model, "vocab_size", None), "tokens of the model's vocabulary, 0..{}"),
        ("puzzle_identifiers", None if table is None else table.shape[0],
         "rows of the model's puzzle-embedding table, 0..{} (load_inference_model's num_puzzle_identifiers "
         "resizes it)"))
        if n is not None]
    if not rows or not bounds:
        return
    seen = torch.stack([torch.stack(torch.aminmax(batch[key])).long().to(inputs.device) for key, _, _ in bounds])
    # one read: of a device's batch, a sync; of a CPU batch (a loader's), its memory in place, no device waits
    seen = (seen.numpy() if seen.device.type == "cpu" else seen.cpu()).tolist()
    for (key, n, what), (low, high) in zip(bounds, seen):
        if low < 0 or high >= n:
            raise ValueError(f"{where}[{key!r}] holds values from {low} to {high}: expected {what.format(n - 1)}")


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


@dataclass
class Carry:
    """ACT state persisting across batches; one row per batch slot."""

    z_H: torch.Tensor  # (B, prefix + seq_len, hidden), compute dtype
    z_L: torch.Tensor
    steps: torch.Tensor  # (B,) int32: supervision steps taken on the current example
    halted: torch.Tensor  # (B,) bool: the slot takes a new example on the next call
    current_data: Dict[str, torch.Tensor] = field(default_factory=dict)


class TinyRecursiveModel(nn.Module):
    """The network and its ACT step (module docstring).

    arch: an `ArchConfig` (a dict is refused with a TypeError: `ArchConfig.model_validate` reads one, with its
    checks); seq_len, vocab_size, num_puzzle_identifiers: whole numbers (numpy's too) from 1 to the bounds an
    export's config gives them, else one ValueError naming the argument (seq_len=16.5 or 0 built a model that
    failed in torch on its first batch)."""

    def __init__(self, arch: ArchConfig, seq_len: int, vocab_size: int, num_puzzle_identifiers: int,
                 *, forward_dtype: Optional[torch.dtype] = None, early_exit: bool = False,
                 grad_checkpointing: bool = False):
        super().__init__()
        arch = checked_arch(arch)
        seq_len = whole_argument("seq_len", seq_len, 1, MAX_SEQ_LEN)
        vocab_size = whole_argument("vocab_size", vocab_size, 1, MAX_VOCAB_SIZE)
        num_puzzle_identifiers = whole_argument("num_puzzle_identifiers", num_puzzle_identifiers, 1,
                                                MAX_PUZZLE_IDENTIFIERS)
        self.arch = arch
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.num_puzzle_identifiers = num_puzzle_identifiers
        self.prefix_len = prefix_length(arch)
        self.total_len = self.prefix_len + seq_len
        # None: resolve `arch.forward_dtype` from the device of each batch (so .to("cuda") picks bf16).
        self.forward_dtype = forward_dtype_argument(forward_dtype)
        # Eval only: stop a row as soon as q_halt > 0 instead of running halt_max_steps.
        self.early_exit = flag_argument("early_exit", early_exit)
        # Training only: recompute the grad-carrying cycle's activations in backward (TrainConfig.grad_checkpointing).
        self.grad_checkpointing = flag_argument("grad_checkpointing", grad_checkpointing)
        # What a step runs through, attributes so that they can be replaced from outside
        # (`trm_kaggle.model.compiling.apply_compile` swaps in compiled ones): the recursive network, where
        # nearly all the time goes, and the ACT step's restart of halted rows and its halting rule.
        self.net: Callable[[torch.Tensor, torch.Tensor, Optional[CosSin]], torch.Tensor] = self.run_layers
        self.act_begin, self.act_end = act_begin, act_end
        # The gradient-free cycles run under inference_mode, which skips all autograd bookkeeping (~8 % faster
        # than no_grad on CPU). A compiled network does not mix with it (its cached graph state would become
        # inference tensors): apply_compile turns this off, and they run under no_grad.
        self.cycles_in_inference_mode = True
        # The halting-exploration schedule changes this during training (the recursion curriculum changes
        # `arch` itself: set_recursion).
        self.halt_exploration_prob = arch.halt_exploration_prob

        D = arch.hidden_size
        if arch.emb_ndim > self.prefix_len * D:
            raise ValueError(f"puzzle_emb_ndim {arch.emb_ndim} does not fit in puzzle_emb_len {self.prefix_len} x hidden {D}")
        self.embed_scale = math.sqrt(D)
        embed_std = 1.0 / self.embed_scale  # scaled back to unit variance by embed_scale

        # I/O
        self.embed_tokens = CastedEmbedding(vocab_size, D, init_std=embed_std)
        self.lm_head = CastedLinear(D, vocab_size, bias=False)
        self.q_head = CastedLinear(D, 2, bias=True)  # (halt, continue) logits
        if arch.emb_ndim > 0:
            self.puzzle_emb = PuzzleEmbedding(num_puzzle_identifiers, arch.emb_ndim)
        else:
            self.puzzle_emb = None

        # Position encodings over prefix + sequence
        self.rotary_emb = None
        self.embed_pos = None
        if arch.pos_encodings == "rope":
            self.rotary_emb = RotaryEmbedding(D // arch.num_heads, self.total_len, arch.rope_theta)
        elif arch.pos_encodings == "learned":
            self.embed_pos = CastedEmbedding(self.total_len, D, init_std=embed_std)

        # The single recursive network
        self.layers = nn.ModuleList(
            Block(D, arch.num_heads, arch.expansion, arch.rms_norm_eps, mlp_t=arch.mlp_t, total_len=self.total_len,
                  swiglu_norm=arch.swiglu_norm)
            for _ in range(arch.L_layers)
        )
        # the fused kernels or float8: each block dispatches (their SwiGLU is upstream's: arch.swiglu_norm takes the
        # plain path, which its config allows with kernels=auto only)
        if (arch.kernels != "torch" or arch.fp8 != "off") and not arch.swiglu_norm:
            # imported here: its compile-time constants import torch._dynamo, a second and a half of start-up
            # that the default path (no dispatch at all) never pays
            from trm_kaggle.model.fused import block_dispatch

            dispatch = block_dispatch(arch)  # one for every block: a compiled block is traced once
            for block in self.layers:
                block.dispatch = dispatch

        # Initial latent states: fixed random vectors (buffers, saved, not trained)
        self.register_buffer("H_init", trunc_normal_(torch.empty(D), std=1.0), persistent=True)
        self.register_buffer("L_init", trunc_normal_(torch.empty(D), std=1.0), persistent=True)

        # Q head starts at "almost never halt" (sigmoid(-5) ~ 0.007) for stable bootstrapping
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)

    # -- helpers ------------------------------------------------------------

    def compute_dtype(self, device: Union[str, torch.device]) -> torch.dtype:
        if self.forward_dtype is not None:
            return self.forward_dtype
        return resolve_forward_dtype(self.arch, device)[0]

    def num_parameters(self) -> int:
        """Trainable weights; the puzzle-embedding table is a buffer and is not counted (as upstream)."""
        return sum(p.numel() for p in self.parameters())

    def parameter_count(self, puzzle_rows: Optional[int] = None) -> ParameterCount:
        """Weights with and without the table; `puzzle_rows` (default: the rows held) e.g. for a trained table
        that an export shrank to its mean row."""
        rows = self.num_puzzle_identifiers if puzzle_rows is None else puzzle_rows
        return ParameterCount(self.num_parameters(), rows if self.puzzle_emb is not None else 0, self.arch.emb_ndim)

    def set_recursion(self, **changes: int) -> None:
        """Recurse deeper or stop sooner with the same weights (test-time recipes): H_cycles, L_cycles,
        halt_max_steps."""
        self.arch = self.arch.with_recursion(**changes)

    @property
    def H_cycles(self) -> int:
        """Recursion cycles per ACT step: held by `arch` alone (set_recursion changes it)."""
        return self.arch.H_cycles

    @property
    def L_cycles(self) -> int:
        """Latent updates per cycle: held by `arch` alone (set_recursion changes it)."""
        return self.arch.L_cycles

    def input_embeddings(self, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(B, prefix + seq_len, hidden): puzzle-embedding prefix + token embeddings, scaled by sqrt(hidden)."""
        x = self.embed_tokens(inputs.long(), dtype)
        B, D = x.shape[0], self.arch.hidden_size
        if self.puzzle_emb is not None:
            p = self.puzzle_emb(puzzle_identifiers).to(dtype)
            pad = self.prefix_len * D - p.shape[-1]
            if pad > 0:  # a narrower table is zero-padded, then folded into prefix_len positions
                p = F.pad(p, (0, pad))
            x = torch.cat((p.view(B, self.prefix_len, D), x), dim=1)
        if self.embed_pos is not None:
            # 1/sqrt(2) keeps the variance of a sum of two unit-variance terms at 1
            x = 0.707106781 * (x + self.embed_pos.weight.to(dtype))
        return self.embed_scale * x

    def run_layers(self, h: torch.Tensor, injection: torch.Tensor, cos_sin: Optional[CosSin],
                   run_block: Optional[Callable] = None) -> torch.Tensor:
        """The recursive network (`net`): the L_layers blocks applied to h + injection. `run_block(block, h,
        cos_sin)` runs each block where given (apply_compile's region of one block)."""
        h = h + injection
        for block in self.layers:
            h = block(h, cos_sin) if run_block is None else run_block(block, h, cos_sin)
        return h

    def recurse(self, z_H: torch.Tensor, z_L: torch.Tensor, x: torch.Tensor,
                cos_sin: Optional[CosSin]) -> Tuple[torch.Tensor, torch.Tensor]:
        """H_cycles cycles of (L_cycles latent updates, one answer update); gradient through the last only.

        z_H does not change during a cycle's L_cycles updates, so its injection z_H + x is
        formed once per cycle (upstream adds it again at every step; the values are identical).
        """
        if self.H_cycles > 1:
            # No gradient here: inference_mode where it may (see __init__), else no_grad: compiled, and on
            # XLA, whose tensors cannot be inference tensors.
            fast = (self.cycles_in_inference_mode and not torch.compiler.is_compiling()
                    and z_H.device.type != "xla")
            with torch.inference_mode() if fast else torch.no_grad():
                for _ in range(self.H_cycles - 1):
                    injection = z_H + x
                    for _ in range(self.L_cycles):
                        z_L = self.net(z_L, injection, cos_sin)
                    z_H = self.net(z_H, z_L, cos_sin)
            if fast:  # inference tensors may not be saved for backward: ordinary copies
                z_H, z_L = z_H.clone(), z_L.clone()
        injection = z_H + x
        net = self._checkpointed_net if self.grad_checkpointing and torch.is_grad_enabled() else self.net
        for _ in range(self.L_cycles):
            z_L = net(z_L, injection, cos_sin)
        z_H = net(z_H, z_L, cos_sin)
        return z_H, z_L

    def _checkpointed_net(self, h: torch.Tensor, injection: torch.Tensor, cos_sin: Optional[CosSin]) -> torch.Tensor:
        """`net` keeping only its inputs for backward, where it runs again to rebuild its activations.

        The memory of the grad-carrying cycle drops from every block's intermediates of L_cycles + 1 calls to
        their inputs plus one call's intermediates. Non-reentrant checkpointing: the gradient graph is the
        first pass's, so the weights cast for a reduced-precision pass (`_set_cast_weights`) still receive
        their gradients; the recomputation casts them again (same values)."""
        return checkpoint(self.net, h, injection, cos_sin, use_reentrant=False)

    def _set_cast_weights(self, dtype: Optional[torch.dtype]) -> None:
        # In reduced precision, cast each float32 weight once per pass (autograd
        # flows through the cast) instead of once per recursion step.
        for m in self.layers.modules():
            if isinstance(m, CastedLinear):
                m.cast_weight = None if dtype is None else m.weight.to(dtype)

    def decode(self, z_H: torch.Tensor) -> torch.Tensor:
        """Token logits (B, seq_len, vocab) of the answer positions of z_H (its prefix positions hold no tokens)."""
        return self.lm_head(z_H[:, self.prefix_len:])

    def inner(self, z_H: torch.Tensor, z_L: torch.Tensor, batch: Dict[str, torch.Tensor], logits: bool = True
              ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        """One supervision step from (z_H, z_L): returns new z_H, z_L (detached), logits (None with
        logits=False: a caller that decodes only some rows calls `decode` on them), q_halt, q_continue."""
        dtype = z_H.dtype
        cos_sin = self.rotary_emb() if self.rotary_emb is not None else None  # float32 tables
        x = self.input_embeddings(batch["inputs"], batch["puzzle_identifiers"], dtype)
        cast = dtype != torch.float32
        if cast:
            self._set_cast_weights(dtype)
        try:
            z_H, z_L = self.recurse(z_H, z_L, x, cos_sin)
        finally:
            if cast:
                self._set_cast_weights(None)
        q = self.q_head(z_H[:, 0]).float()  # first prefix position summarises the state
        return z_H.detach(), z_L.detach(), self.decode(z_H) if logits else None, q[..., 0], q[..., 1]

    # -- ACT ----------------------------------------------------------------

    def initial_carry(self, batch: Dict[str, torch.Tensor]) -> Carry:
        """A carry with every row halted, so the first call loads the whole batch."""
        B = batch["inputs"].shape[0]
        device = batch["inputs"].device
        dtype = self.compute_dtype(device)
        z = torch.zeros(B, self.total_len, self.arch.hidden_size, dtype=dtype, device=device)
        return Carry(
            z_H=z,
            z_L=z.clone(),
            steps=torch.zeros(B, dtype=torch.int32, device=device),
            halted=torch.ones(B, dtype=torch.bool, device=device),
            current_data={k: torch.zeros_like(v) for k, v in batch.items()},
        )

    def forward(self, carry: Carry, batch: Dict[str, torch.Tensor],
                exploration: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                logits: bool = True) -> Tuple[Carry, Dict[str, torch.Tensor]]:
        """One supervision step. `exploration` = (uniform (B,), min_steps (B,)) draws for the halting
        exploration; the trainer derives them from (seed, step) and the row's place in the global batch,
        so runs are identical across resumes and across any number of ranks. Without it, torch's RNG is used.
        `logits=False` leaves "logits" out of the outputs (inference decodes the rows that stop: `decode`)."""
        a = self.arch
        z_H, z_L, steps, data = self.act_begin(carry.halted, carry.z_H, carry.z_L, carry.steps, carry.current_data,
                                               batch, self.H_init, self.L_init)

        z_H, z_L, token_logits, q_halt, q_continue = self.inner(z_H, z_L, data, logits)
        outputs = {"logits": token_logits} if logits else {}
        outputs.update(q_halt_logits=q_halt, q_continue_logits=q_continue)

        with torch.no_grad():
            explore = None
            if self.training and a.halt_max_steps > 1:
                if exploration is None:
                    exploration = (torch.rand_like(q_halt), torch.randint_like(steps, 2, a.halt_max_steps + 1))
                # compared here: the probability follows a schedule, and a compiled rule would recompile per value
                explore = (exploration[0] < self.halt_exploration_prob, exploration[1])
            steps, is_last, halted = self.act_end(steps, q_halt, q_continue, explore, a.halt_max_steps,
                                                  a.no_ACT_continue, self.training, self.early_exit)
            if self.training and a.halt_max_steps > 1 and not a.no_ACT_continue:
                # Q-learning target for "continue" from one more step (no replay buffer / target net, as upstream).
                _, _, _, next_halt, next_cont = self.inner(z_H, z_L, data, logits=False)
                outputs["target_q_continue"] = torch.sigmoid(
                    torch.where(is_last, next_halt, torch.maximum(next_halt, next_cont)))

        return Carry(z_H, z_L, steps, halted, data), outputs
