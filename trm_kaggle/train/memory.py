"""How much memory a training run needs, the largest micro-batch that fits, and the largest batch a step
may take (`fitting_batch`: the solver's plans on CPU and MPS).

A run holds, besides the Python/torch process itself:

    weights 4P, gradients 4P, optimizer moments (AdamATan2/AdamW 8P), EMA shadow 4P
    (P = trainable parameters, float32), reduced-precision weight casts 2P (bf16/fp16),
    the puzzle-embedding table (identifiers x emb_ndim x 4), the ACT carry of the local
    batch (z_H and z_L, B x (prefix + seq_len) x hidden), and per example of a
    micro-batch: the activations autograd keeps for the one recursion cycle that carries
    gradients, plus the transient work of one network call and of the loss. With
    grad_checkpointing the cycle keeps only the inputs of its network calls, and backward
    rebuilds one call's activations at a time: those count as work, once more.

The activations are not guessed from a formula: `probe_activations` runs one forward
of a one-row and a two-row batch through the real model (puzzle table of 2 rows,
one H cycle) on the target device under `saved_tensors_hooks` and counts the bytes
autograd keeps per extra row, so the figure follows the code paths this device runs
(oneDNN on CPU, bf16 casts, attention kernels), and with grad_checkpointing what the
checkpoints themselves keep. The rest is arithmetic on the config.
`benchmarks/bench_memory.py` compares the estimate with the measured peak RSS of real
runs, and tests/test_memory.py holds it within a stated error.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from trm_kaggle.config import MAX_BATCH_SIZE, ArchConfig, TrainConfig, number_argument, whole_argument
from trm_kaggle.errors import TRMError
from trm_kaggle.wording import type_name

GB = 1024**3
MAX_BYTES = 1 << 62  # a count of bytes (memory available, a baseline) past any machine's, within int64
# Of the memory available when training starts, the share a memory-aware run plans to use.
# The rest is headroom: the allocator keeps memory that tensors freed between micro-batches
# (benchmarks/bench_memory.py measures real peaks up to about a quarter above the estimate),
# the loader maps data pages, and the machine runs other things.
DEFAULT_MEMORY_FRACTION = 0.75
# float32 state per trained weight. Muon keeps one momentum buffer for each matrix of the blocks and AdamATan2's
# two moments for the other weights: its figure (1) is the matrices'; `optimizer_state_floats` counts both parts.
OPTIMIZER_STATE_FLOATS = {"adam_atan2": 2, "adamw": 2, "lion": 1, "muon": 1}
# The loader's in-memory index arrays: puzzle starts and sizes (int64), identifiers (int32), and the
# split's own puzzle_indices / puzzle_identifiers as read (the example arrays stay memory-mapped).
LOADER_BYTES_PER_PUZZLE = 8 + 8 + 4 + 8 + 4


@dataclass
class MemoryEstimate:
    """Bytes, by part; `total(micro)` is the expected peak for a micro-batch of `micro` rows."""

    baseline: int  # the process before the model: Python, torch, the dataset's index arrays
    weights: int
    gradients: int
    optimizer: int
    ema: int
    weight_casts: int
    puzzle_table: int
    carry: int  # the local batch's ACT carry
    activations_per_example: int  # kept by autograd for the grad-carrying cycle
    workspace_per_example: int  # transient: one network call's temporaries and the loss
    parameters: int = 0
    checkpointed: bool = False  # grad_checkpointing: the activations are the checkpointed calls' inputs
    measured: bool = True  # False: the fixed part alone exceeded the budget; the activations were not probed (0)

    def fixed(self) -> int:
        return (self.baseline + self.weights + self.gradients + self.optimizer + self.ema + self.weight_casts
                + self.puzzle_table + self.carry)

    def total(self, micro: int) -> int:
        micro = whole_argument("micro", micro, 0, MAX_BATCH_SIZE)  # -5 rows was a negative peak, NaN a NaN one
        return self.fixed() + micro * (self.activations_per_example + self.workspace_per_example)

    def parts(self, micro: int) -> dict[str, int]:
        return {"process": self.baseline, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "EMA": self.ema, "forward-dtype weight casts": self.weight_casts,
                "puzzle table": self.puzzle_table, "ACT carry": self.carry,
                f"activations ({micro} per micro-batch{self._kept()})" if self.measured
                else "activations (not measured: the rest alone does not fit)": micro * self.activations_per_example,
                "workspace" + (" (one call rebuilt in backward)" if self.checkpointed else ""):
                    micro * self.workspace_per_example}

    def _kept(self) -> str:
        return ", grad_checkpointing: the network calls' inputs" if self.checkpointed else ""


def _dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


# Sequence lengths of the probe's forwards when the real one is long (see probe_activations).
PROBE_LENGTHS = (32, 64, 96)


def probe_activations(arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device | str,
                      dtype: torch.dtype, grad_checkpointing: bool = False) -> tuple[int, int]:
    """(bytes autograd keeps per example for one training step, bytes of one network call's share).

    Each figure is the difference between a two-row and a one-row forward (with the loss), so
    that what does not grow with the batch (weight casts, RoPE tables) drops out. A long
    sequence is not run at its length: the bytes are a quadratic in the length (attention
    kernels that keep the score matrix add the square term), fitted exactly through probes at
    PROBE_LENGTHS and evaluated at `seq_len`. With `mlp_t` the token-mixing width itself
    depends on the length, so the probe runs at the real length. Cached per configuration.

    `grad_checkpointing`: the first figure is what the model keeps so (the inputs its checkpoints save, the
    heads' and the loss's tensors); the second is still a call's share of the plain forward's, the
    activations backward rebuilds for one call at a time."""
    full = _fitted_probe(arch, seq_len, vocab_size, device, dtype, False)
    kept = _fitted_probe(arch, seq_len, vocab_size, device, dtype, True) if grad_checkpointing else full
    return kept, full // (arch.L_cycles + 1)


def _fitted_probe(arch: ArchConfig, seq_len: int, vocab_size: int, device: torch.device | str, dtype: torch.dtype,
                  grad_checkpointing: bool) -> int:
    """`_probe` at `seq_len`, or for a long sequence the quadratic through its probes (see probe_activations)."""
    key = (arch.model_dump_json(), vocab_size, str(torch.device(device)), dtype, grad_checkpointing)
    if arch.mlp_t or seq_len <= PROBE_LENGTHS[-1]:
        return _probe(key[0], seq_len, *key[1:])
    per_example = 0.0  # the quadratic through the three probes, in Lagrange form
    for i, xi in enumerate(PROBE_LENGTHS):
        term = float(_probe(key[0], xi, *key[1:]))
        for j, xj in enumerate(PROBE_LENGTHS):
            if j != i:
                term *= (seq_len - xj) / (xi - xj)
        per_example += term
    return max(0, int(round(per_example)))


@functools.lru_cache(maxsize=64)
def _probe(arch_json: str, seq_len: int, vocab_size: int, device: str, dtype: torch.dtype,
           grad_checkpointing: bool = False) -> int:
    from trm_kaggle.model import TinyRecursiveModel, act_loss

    arch = ArchConfig.model_validate_json(arch_json)
    dev = torch.device(device)
    small = arch.model_copy(update={"H_cycles": 1})  # the no-grad cycles keep nothing
    # Built on the meta device and given zero-filled memory: what autograd keeps depends on the
    # shapes and code paths only, and random initialisation of a large model would cost seconds.
    with torch.device("meta"):
        # checkpointed calls save their inputs through the hooks below, and nothing of their insides
        model = TinyRecursiveModel(small, seq_len, vocab_size, 2, forward_dtype=dtype,
                                   grad_checkpointing=grad_checkpointing)
    model = model.to_empty(device=dev).train()
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.zero_()
    weights = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}

    def saved(rows: int) -> int:
        batch = {"inputs": torch.zeros(rows, seq_len, dtype=torch.int32, device=dev),
                 "labels": torch.ones(rows, seq_len, dtype=torch.int64, device=dev),
                 "puzzle_identifiers": torch.ones(rows, dtype=torch.int32, device=dev)}
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            st = t.untyped_storage()
            if st.data_ptr() not in weights:
                storages[st.data_ptr()] = max(storages.get(st.data_ptr(), 0), st.nbytes())
            return t

        no_exploration = (torch.ones(rows, device=dev), torch.zeros(rows, dtype=torch.int32, device=dev))
        # fork_rng: the probe must not move the generator that initialises the run's model
        with torch.random.fork_rng(devices=[]), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            carry, out = model(model.initial_carry(batch), batch, exploration=no_exploration)
            act_loss(out, carry.current_data["labels"], carry.halted, carry.steps, arch.loss_type)
        if model.puzzle_emb is not None:
            model.puzzle_emb.clear()
        return sum(storages.values())

    return max(0, saved(2) - saved(1))


def count_parameters(arch: ArchConfig, seq_len: int, vocab_size: int) -> int:
    """Trainable parameters of the model (built on the meta device: nothing is allocated)."""
    from trm_kaggle.model import TinyRecursiveModel

    with torch.device("meta"):
        return TinyRecursiveModel(arch, seq_len, vocab_size, 1).num_parameters()


def optimizer_state_floats(cfg: TrainConfig, seq_len: int, vocab_size: int, parameters: int) -> int:
    """float32 values of the optimizer's state: per weight as OPTIMIZER_STATE_FLOATS says, except Muon's, whose
    matrices keep one (momentum) and whose other weights (embedding, heads) keep AdamATan2's two."""
    if cfg.optimizer != "muon":
        return parameters * OPTIMIZER_STATE_FLOATS.get(cfg.optimizer, 2)
    from trm_kaggle.model import TinyRecursiveModel
    from trm_kaggle.optim import split_hidden_matrices

    with torch.device("meta"):
        model = TinyRecursiveModel(cfg.arch, seq_len, vocab_size, 1)
    hidden, rest = split_hidden_matrices(model.layers.parameters(), list(model.parameters()))
    return OPTIMIZER_STATE_FLOATS["muon"] * sum(p.numel() for p in hidden) + 2 * sum(p.numel() for p in rest)


def estimate_training_memory(cfg: TrainConfig, *, seq_len: int, vocab_size: int, num_puzzle_identifiers: int,
                             num_puzzles: int = 0, device: torch.device | str = "cpu",
                             dtype: torch.dtype = torch.float32, baseline: int = 0, world_size: int = 1,
                             budget: int | None = None) -> MemoryEstimate:
    """The parts of a run's memory on one rank (see the module docstring). An argument of the wrong type or out
    of bounds is one TypeError or ValueError naming it (a NaN or negative count made a NaN or negative estimate,
    world_size=0 a division by zero, device='xyz' or dtype='bf16' torch's own words).

    `budget`: the bytes the run may use. When the parts known from the shapes alone (weights, optimizer state,
    puzzle table, carry) exceed it, the activations are not probed (the probe allocates the model: a model of
    tens of GB ran the machine out of memory to find that it does not fit) and count 0, `measured` False."""
    from trm_kaggle.model import prefix_length

    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg: expected a TrainConfig, got {type_name(cfg)}")
    num_puzzle_identifiers = whole_argument("num_puzzle_identifiers", num_puzzle_identifiers, 0, MAX_BYTES)
    num_puzzles = whole_argument("num_puzzles", num_puzzles, 0, MAX_BYTES // LOADER_BYTES_PER_PUZZLE)
    baseline = whole_argument("baseline", baseline, 0, MAX_BYTES)
    budget = None if budget is None else whole_argument("budget", budget, 0, MAX_BYTES)
    world_size = whole_argument("world_size", world_size, 1, MAX_BATCH_SIZE)
    device = checked_device(device)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype (torch.float32, torch.bfloat16), got "
                        f"{dtype if isinstance(dtype, torch.dtype) else type_name(dtype)}")

    arch = cfg.arch
    P = count_parameters(arch, seq_len, vocab_size)
    trains_weights = not cfg.freeze_weights
    local_batch = max(1, cfg.global_batch_size // world_size)
    width = prefix_length(arch) + seq_len
    act_bytes = _dtype_bytes(dtype)
    est = MemoryEstimate(
        baseline=baseline + LOADER_BYTES_PER_PUZZLE * num_puzzles,
        weights=4 * P,
        gradients=4 * P if trains_weights else 0,
        optimizer=4 * optimizer_state_floats(cfg, seq_len, vocab_size, P) if trains_weights else 0,
        ema=4 * P if cfg.ema and trains_weights else 0,
        weight_casts=act_bytes * P if dtype != torch.float32 else 0,
        puzzle_table=num_puzzle_identifiers * arch.emb_ndim * 4 if arch.emb_ndim else 0,
        carry=local_batch * (2 * width * arch.hidden_size * act_bytes + seq_len * (4 + 8)),
        activations_per_example=0, workspace_per_example=0, parameters=P, checkpointed=cfg.grad_checkpointing)
    if budget is not None and est.fixed() > budget:  # does not fit whatever the activations: the probe is skipped
        est.measured = False
        return est
    per_example, per_call = probe_activations(arch, seq_len, vocab_size, device, dtype, cfg.grad_checkpointing)
    # The loss works on float32 logits: the upcast, stablemax's log-probabilities and its gradient.
    loss_work = 3 * seq_len * vocab_size * 4
    # Checkpointed, backward rebuilds one call's activations and then works through them: that call's share on top
    # of the temporaries (9x9 Sudoku, hidden 256, 128 of 512 rows: 1.39 GB measured, 1.25 GB estimated so, 0.91 GB
    # without the rebuilt call).
    rebuilt = per_call if cfg.grad_checkpointing else 0
    est.activations_per_example = per_example
    est.workspace_per_example = per_call + rebuilt + loss_work
    return est


def checked_device(device: object) -> torch.device:
    """`device` (a torch.device or its name) as a torch.device, else one ValueError or TypeError naming the
    argument: 'xyz' was torch's "Expected one of cpu, cuda, ..." and 5 an accelerator error."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device: expected a torch.device or its name ('cpu', 'cuda:0'), got {type_name(device)}")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(f"device={device!r:.40}: expected a torch device name ('cpu', 'cuda:0', 'mps')") from None


def micro_batch_problem(micro: int, local_batch: int) -> str | None:
    """Why `train` refuses a micro-batch (it must split the per-rank batch into equal parts), or None."""
    micro = whole_argument("micro", micro, 1, MAX_BATCH_SIZE)
    local_batch = whole_argument("local_batch", local_batch, 1, MAX_BATCH_SIZE)
    return f"micro_batch_size {micro} must divide the per-rank batch {local_batch}" if local_batch % micro else None


def largest_fitting_micro_batch(est: MemoryEstimate, local_batch: int, budget: int) -> int | None:
    """The largest divisor of `local_batch` whose expected peak fits in `budget` bytes; None if even 1 does not.
    The divisors are found in pairs up to the square root (never by counting to the batch itself)."""
    local_batch = whole_argument("local_batch", local_batch, 1, MAX_BATCH_SIZE)
    budget = whole_argument("budget", budget, 0, MAX_BYTES)
    small = [d for d in range(1, math.isqrt(local_batch) + 1) if local_batch % d == 0]
    for micro in sorted({*small, *(local_batch // d for d in small)}, reverse=True):
        if est.total(micro) <= budget:
            return micro
    return None


def plan_micro_batch(est: MemoryEstimate, local_batch: int, available: int, fraction: float = DEFAULT_MEMORY_FRACTION,
                     requested: int | None = None) -> int:
    """The micro-batch a memory-aware run uses: the largest that fits `fraction` of the memory available
    (never above `requested`); refuses, before anything starts, when a single example does not fit. An argument
    out of bounds is one ValueError or TypeError naming it (fraction=5 planned with 500 % of the memory, a local
    batch of 0 blamed the machine's memory, requested=-3 divided by zero)."""
    if not isinstance(est, MemoryEstimate):
        raise TypeError(f"est: expected a MemoryEstimate, got {type_name(est)}")
    local_batch = whole_argument("local_batch", local_batch, 1, MAX_BATCH_SIZE)
    available = whole_argument("available", available, 0, MAX_BYTES)
    fraction = number_argument("fraction", fraction, 0, 1)
    requested = None if requested is None else whole_argument("requested", requested, 0, MAX_BATCH_SIZE)  # 0: none
    budget = int(fraction * available)
    cap = min(requested or local_batch, local_batch)
    micro = largest_fitting_micro_batch(est, local_batch, budget)
    if micro is None:
        raise TRMError(f"this run needs {'about' if est.measured else 'over'} {est.total(1) / GB:.2f} GB even with micro_batch_size=1 "
                       f"(fixed {est.fixed() / GB:.2f} GB: puzzle table {est.puzzle_table / GB:.2f} GB, "
                       f"weights and optimizer {(est.weights + est.gradients + est.optimizer + est.ema) / GB:.2f} GB; "
                       + (f"one example's activations {est.activations_per_example / GB:.2f} GB), but " if est.measured
                          else "activations not measured), but ")
                       + f"{fraction:.0%} of the {available / GB:.2f} GB available is {budget / GB:.2f} GB: "
                       "use a smaller model or dataset, or a machine with more memory")
    while local_batch % micro or micro > cap:  # a divisor of the local batch, at most the one asked for
        micro -= 1
    return max(1, micro)


def memory_share(processes: int = 1) -> int | None:
    """Bytes this process may plan with: its share of the memory available now, split evenly between the
    `processes` that start together on this machine, plus what it already holds. None where unreadable.
    `processes` out of bounds is one ValueError naming it (2.5 gave a float byte count, 0 and NaN the whole)."""
    from trm_kaggle import hardware

    processes = whole_argument("processes", processes, 1, hardware.MAX_THREADS)

    _, available = hardware.memory()
    if available is None:
        return None
    return available // processes + hardware.current_rss()


def training_rss(compiling: bool = False) -> int:
    """This process's resident memory, the estimate's baseline. `compiling`: the run will import torch._dynamo
    (about 0.15-0.2 GB; see `run_rss`): it is imported first, so that the baseline holds it."""
    if compiling:
        import torch._dynamo  # noqa: F401
    from trm_kaggle import hardware

    return hardware.current_rss()


def run_rss(cfg: TrainConfig, device: torch.device | str) -> int:
    """`training_rss` for a run of `cfg` on `device`: torch._dynamo counted where the run imports it, when it
    compiles and when it checkpoints (torch.utils.checkpoint imports it at its first call: a checkpointed run
    measured 0.2 GB above the estimate that left it out)."""
    from trm_kaggle.model import resolve_compile

    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg: expected a TrainConfig, got {type_name(cfg)}")
    return training_rss(resolve_compile(cfg.compile, checked_device(device)) or cfg.grad_checkpointing)


def largest_fitting_batch(est_one: MemoryEstimate, budget: int) -> int:
    """The most rows one batch (a single micro-batch: no accumulation) may have for the expected peak to fit
    in `budget` bytes, from the estimate of a one-row batch (its ACT carry grows with the rows too); 0 when
    not even one row fits."""
    per_row = est_one.carry + est_one.activations_per_example + est_one.workspace_per_example
    return max(0, (budget - est_one.fixed() + est_one.carry) // max(1, per_row))


def fitting_batch(arch: ArchConfig, *, seq_len: int, vocab_size: int, num_puzzle_identifiers: int,
                  device: torch.device, processes: int = 1, fraction: float = DEFAULT_MEMORY_FRACTION,
                  compiling: bool = False) -> tuple[int, int] | None:
    """(rows, bytes): the largest batch a training step of every weight of `arch` may take on `device` within
    `fraction` of this process's memory share (`memory_share`), and that share; None where the memory
    cannot be read. A prediction batch keeps no activations for autograd, so it fits wherever a training
    batch of as many rows does (an upper bound used for both). `compiling`: see `training_rss`."""
    from trm_kaggle.model import resolve_forward_dtype

    share = memory_share(processes)
    if share is None:
        return None
    dtype, _ = resolve_forward_dtype(arch, device)
    est = estimate_training_memory(TrainConfig(arch=arch, global_batch_size=1, ema=False), seq_len=seq_len,
                                   vocab_size=vocab_size, num_puzzle_identifiers=num_puzzle_identifiers,
                                   device=device, dtype=dtype, baseline=training_rss(compiling))
    return largest_fitting_batch(est, int(fraction * share)), share


def memory_aware_micro_batch(cfg: TrainConfig, *, seq_len: int, vocab_size: int, num_puzzle_identifiers: int,
                             num_puzzles: int, device: torch.device, dtype: torch.dtype, local_batch: int,
                             world_size: int = 1, log=None) -> int:
    """`micro_batch_size` for an `auto_batch=True` run on CPU or MPS: from the estimate and the memory
    available now (see `plan_micro_batch`). CUDA runs keep the configured size and halve it on
    out-of-memory errors, which CUDA raises as exceptions (a CPU run that overcommits is killed by the
    operating system instead, with no chance to retry)."""
    requested = min(cfg.micro_batch_size or local_batch, local_batch)
    if not cfg.auto_batch or device.type not in ("cpu", "mps"):
        return requested
    # Available memory is shared by the ranks of one machine
    from trm_kaggle.hardware import local_processes

    share = memory_share(local_processes()[0])  # doctor's rule too (setup_runtime says a stray one ignored)
    if share is None:
        if log:
            log.warning("auto_batch: the available memory cannot be read here; keeping micro_batch_size=%d", requested)
        return requested
    est = estimate_training_memory(cfg, seq_len=seq_len, vocab_size=vocab_size,
                                   num_puzzle_identifiers=num_puzzle_identifiers, num_puzzles=num_puzzles,
                                   device=device, dtype=dtype, world_size=world_size,
                                   baseline=run_rss(cfg, device), budget=int(DEFAULT_MEMORY_FRACTION * share))
    micro = plan_micro_batch(est, local_batch, share, requested=requested)
    if log:
        log.info("auto_batch: micro_batch_size=%d of the local batch %d (expected peak %.2f GB of %.2f GB "
                 "available to this process; gradient accumulation keeps the global batch)",
                 micro, local_batch, est.total(micro) / GB, share / GB)
    return micro


# What the allocators say when memory runs out: CUDA and MPS raise torch.OutOfMemoryError (MPS: a RuntimeError in
# older torch); the CPU allocator a RuntimeError ("DefaultCPUAllocator: can't allocate memory: you tried to
# allocate ..."), Python and numpy a MemoryError: a memory limit (ulimit -v, a container's) shows as one of them.
_OOM_MESSAGES = ("can't allocate memory", "out of memory", "not enough memory", "cannot allocate memory")


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` is an allocation that failed for want of memory, on any device."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(e, RuntimeError) and any(m in str(e).lower() for m in _OOM_MESSAGES)


def out_of_memory_error(cfg: TrainConfig, micro: int, device: torch.device | str, during: str) -> TRMError:
    """One line for a run out of memory: where, and the settings that lower what it needs, first things first."""
    kind = device if isinstance(device, str) else device.type
    steps = [f"lower micro_batch_size (now {micro}; gradient accumulation keeps the global batch)"] if micro > 1 else []
    if not cfg.auto_batch:
        steps.append("set auto_batch=True (" + ("it halves the micro-batch on out-of-memory)" if kind == "cuda"
                                                else "it sizes the micro-batch from the free memory)"))
    steps.append(f"lower global_batch_size (now {cfg.global_batch_size}), set grad_checkpointing=True or lower "
                 f"arch.hidden_size (now {cfg.arch.hidden_size})")
    return TRMError(f"out of memory{'' if kind == 'auto' else ' on ' + kind} {during}: {'; or '.join(steps)}; "
                    f"`trm-kaggle doctor` prints the expected peak of these settings")


class MemoryWatch:
    """Peak memory per log interval, and a warning when it nears what the machine has.

    CPU/MPS: the peak resident memory of the process in the interval (sampled; see
    `hardware.RSSSampler`) and the lifetime peak the kernel records. CUDA: torch's max
    allocated bytes in the interval."""

    WARN_FRACTION = 0.9

    def __init__(self, device: torch.device, log=None):
        from trm_kaggle import hardware

        self.device, self.log, self.hw = device, log, hardware
        self.warned = False
        self.sampler = None
        self.lifetime = 0  # the highest resident memory seen: the kernel's mark, or a sample above it
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        else:
            self.sampler = hardware.RSSSampler()

    def sample(self) -> dict[str, float]:
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            limit = torch.cuda.mem_get_info(self.device)[1]
            record = {"cuda_max_allocated_gb": peak / GB}
        else:
            peak = self.sampler.take()
            _, available = self.hw.memory()
            limit = None if available is None else available + self.hw.current_rss()
            # the kernel raises its high-water mark lazily (per-thread RSS counters): a sample could read above it,
            # and the lifetime peak was logged below the interval's
            self.lifetime = max(self.lifetime, peak, self.hw.peak_rss())
            record = {"peak_rss_gb": peak / GB, "max_rss_gb": self.lifetime / GB}
        if limit and peak > self.WARN_FRACTION * limit and not self.warned and self.log:
            self.warned = True
            self.log.warning("memory: the peak of the last interval, %.2f GB, is above %d %% of the %.2f GB this "
                             "process can use; set auto_batch=True or a smaller micro_batch_size before it runs out",
                             peak / GB, round(100 * self.WARN_FRACTION), limit / GB)
        return record

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
