"""PyTorch/XLA (TPUs; CPUs with PJRT_DEVICE=CPU for testing): what is XLA-specific, in one place.

torch_xla records operations lazily, compiles the recorded graph at a step boundary
(`torch_xla.sync()`), caches the program by the graph's shape and runs it. A training
step costs a compilation the first time and none afterwards as long as every step
records the same graph: the same tensor shapes, no host read of a device value in the
middle of a step, no Python branch on one. What that takes in this package:

* the ACT carry, halting and losses use `torch.where`, never boolean indexing (model/);
* the puzzle-embedding update has a static-shape form (`optim.sign_sgd.static_sign_sgd_`);
* inference runs every ACT step; early exit masks rows instead of compacting the batch
  (`model.rollout`), and evaluation keeps the padded last batch (`evaluate.predict`);
* one `step_boundary()` per optimizer step; `DeviceBatches` moves batches to the device
  ahead of use (torch_xla's `ParallelLoader`);
* gradients, metrics and the puzzle rows of a step are combined across replicas.

Replicas and their collectives:
* TPU: `launch` (torch_xla's launcher) starts one process per chip on each host, or
  torchrun starts them and they join the "xla" process group. Collectives are XLA's own,
  inside the step's graph (`all_reduce_`, `all_gather_rows`).
* CPU (PJRT_DEVICE=CPU, for testing): PJRT's CPU client has no collectives between
  processes, and those between threads of one process (CPU_NUM_DEVICES=N) abort
  unless every thread runs the very same compiled program (pytorch/xla#5005, #9089).
  So CPU replicas are torchrun processes and gloo carries the collectives on host copies
  (`host_collectives()`): each costs a step boundary, three per step instead of one,
  which is fine for checking the data-parallel logic and not meant for speed.

`CompileWatch` reads torch_xla's metrics (compilations, compile and execute time) for the
training log and warns when a step compiles after the warm-up.
torch_xla is imported lazily: the package works without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from typing import Any, Callable

import torch
import torch.distributed as dist

from trm_kaggle.errors import TRMError
from trm_kaggle.names import ascii_number

log = logging.getLogger(__name__)

# Steps (of one process) that may compile. Step 1 records fresh carries and creates the optimizer
# states; step 2 is the first whose inputs are all device data; from step 3 on, every step runs
# step 2's program (tests/test_xla.py checks that no compilation follows step 3).
WARMUP_STEPS = 3

# Thread replicas of one process (TPU v2/v3 cores) take it to initialise their models one at a time.
_LOCK = threading.RLock()

BATCH_KEYS = ("inputs", "labels", "puzzle_identifiers")


def installed() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def wanted() -> bool:
    """device=auto picks XLA when torch_xla is installed and PJRT_DEVICE names a device (TPU, CPU, ...)."""
    return bool(os.environ.get("PJRT_DEVICE")) and installed()


def _torch_xla(part: str = ""):
    """torch_xla, or its module `part` ("runtime", "core.xla_model", ...): each helper imports what it uses here,
    so that without torch_xla every one says the same line (most raised a bare ModuleNotFoundError)."""
    try:
        return importlib.import_module("torch_xla" + (f".{part}" if part else ""))
    except ImportError:
        raise TRMError("device=xla needs torch_xla built for this torch version (pip install torch_xla==<the torch "
                       "version>; see docs/tpu.md)") from None


def _torchrun_world() -> int:
    if not dist.is_torchelastic_launched():
        return 1
    return ascii_number(os.environ.get("WORLD_SIZE", "")) or 1  # torchrun's own value; `train` checked it first


def device() -> torch.device:
    """This replica's XLA device. Under torchrun the process group comes first: on a TPU the "xla"
    group, whose rendezvous tells PJRT which chips belong to this process before the runtime
    starts; on a CPU host a gloo group (see the module docstring)."""
    torch_xla = _torch_xla()
    if _torchrun_world() > 1 and not dist.is_initialized():
        if _cpu_requested():
            dist.init_process_group("gloo")
        else:
            _torch_xla("distributed.xla_backend")  # registers the "xla" backend
            dist.init_process_group("xla", init_method="xla://")
    return torch_xla.device()


def _cpu_requested() -> bool:
    return os.environ.get("PJRT_DEVICE", "").upper().startswith("CPU")


def host_collectives() -> bool:
    """True on a CPU host under torchrun: gloo carries the collectives (module docstring)."""
    return dist.is_initialized() and dist.get_backend() == "gloo"


def device_kind() -> str:
    """PJRT's device type: "TPU", "CPU", "CUDA", ..."""
    xr = _torch_xla("runtime")
    return xr.device_type() or "CPU"


def replica() -> tuple[int, int]:
    """(rank, number of replicas) of this process or thread."""
    xr = _torch_xla("runtime")
    if host_collectives():
        return dist.get_rank(), dist.get_world_size()
    rank, world = xr.global_ordinal(), xr.world_size()
    launched = _torchrun_world()
    if launched > 1 and world != launched:
        raise TRMError(f"torchrun started {launched} processes but PJRT ({device_kind()}) sees {world} replica(s) "
                       "in this one, so they cannot exchange gradients")
    return rank, world


def local_devices() -> int:
    """XLA devices this host offers (replicas `launch` would start here)."""
    xr = _torch_xla("runtime")
    return xr.local_device_count()


def launch(fn: Callable[..., Any], *args: Any) -> None:
    """Run `fn(*args)` in every replica of this host with torch_xla's launcher: one process per TPU
    chip. Each host of a pod runs the same command; PJRT numbers the replicas across hosts."""
    if _cpu_requested() and (ascii_number(os.environ.get("CPU_NUM_DEVICES", "")) or 1) > 1:
        raise TRMError("PJRT_DEVICE=CPU with CPU_NUM_DEVICES > 1 runs replicas as threads of one process, whose XLA "
                       "collectives abort on CPU (pytorch/xla#9089); on a CPU host start the replicas with torchrun: "
                       "`PJRT_DEVICE=CPU torchrun --nproc-per-node N -m trm_kaggle train device=xla ...`")
    _torch_xla().launch(_Replica(fn, args))


class _Replica:
    """Picklable `fn(*args)` that ignores the replica index the launcher passes first."""

    def __init__(self, fn: Callable[..., Any], args: tuple):
        self.fn, self.args = fn, args

    def __call__(self, index: int) -> None:
        self.fn(*self.args)


def step_boundary() -> None:
    """Cut the recorded graph here, compile it (once per distinct graph) and start running it."""
    _torch_xla().sync()


def wait() -> None:
    """Run everything recorded so far and wait for the device (for timing)."""
    xm = _torch_xla("core.xla_model")
    step_boundary()
    xm.wait_device_ops()


def one_at_a_time() -> threading.RLock:
    """A process-wide lock. Thread replicas share torch's CPU generator: seeding and drawing (model
    initialisation) must not interleave, or replica 0 would not get the single-process weights."""
    return _LOCK


def to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """CPU copies of device tensors (after a step boundary, so the copies read computed values)."""
    step_boundary()
    return [t.detach().cpu() for t in tensors]


def from_host_(tensors: list[torch.Tensor], host: list[torch.Tensor]) -> None:
    """Write CPU values back into the device tensors, in place."""
    for t, h in zip(tensors, host):
        t.copy_(h.to(t.device))


def no_grad_for(device: torch.device):
    """The no-gradient mode for inference on `device`: inference_mode, except on XLA, whose tensors
    cannot be inference tensors (no_grad there)."""
    return torch.no_grad() if torch.device(device).type == "xla" else torch.inference_mode()


def all_reduce_(tensors: list[torch.Tensor]) -> None:
    """Sum each tensor across replicas, in place: one XLA all-reduce inside the step's graph."""
    xm = _torch_xla("core.xla_model")
    if tensors:
        xm.all_reduce(xm.REDUCE_SUM, list(tensors))


def broadcast_(tensors: list[torch.Tensor], rank: int) -> None:
    """Replica 0's values to every replica, in place: an all-reduce of (value on 0, zeros elsewhere).

    The keep flag is a 1-element tensor: a 0-dim 0 or 1 would become a constant of the graph, and
    replicas with different graphs never meet in the collective."""
    keep = torch.tensor([rank == 0])
    for t in tensors:
        t.copy_(torch.where(keep.to(t.device), t, torch.zeros_like(t)))
    all_reduce_(tensors)
    step_boundary()


def all_gather_rows(t: torch.Tensor) -> torch.Tensor:
    """Every replica's `t` (same shape on all) concatenated along dim 0, in replica order, inside the graph."""
    xm = _torch_xla("core.xla_model")
    return xm.all_gather(t, dim=0)


def gather_to_cpu(tensors: list[torch.Tensor], world: int) -> list[list[torch.Tensor]]:
    """result[r][i] = replica r's tensors[i], on the CPU (every replica's tensors must have the same shapes)."""
    stacked = [all_gather_rows(t.unsqueeze(0).to(torch.uint8) if t.dtype == torch.bool else t.unsqueeze(0))
               for t in tensors]
    step_boundary()
    cpu = [s.cpu() for s in stacked]
    return [[c[r].to(t.dtype) for c, t in zip(cpu, tensors)] for r in range(world)]


class DeviceBatches:
    """Training batches moved to the XLA device ahead of use by a background thread.

    The wrapped loader runs ahead of the training loop, so its own state_dict() is past the
    batches in flight; `state_dict()` here is the loader's position after the last batch handed
    out, which is what a train state must hold for an exact resume."""

    def __init__(self, loader, device: torch.device, prefetch: int = 2):
        pl = _torch_xla("distributed.parallel_loader")
        self._state = loader.state_dict()

        def with_positions():
            for batch in loader:
                yield {k: batch[k] for k in BATCH_KEYS}, loader.state_dict()

        self._parallel = pl.ParallelLoader(with_positions(), [device], loader_prefetch_size=prefetch,
                                           device_prefetch_size=prefetch)
        self._batches = self._parallel.per_device_loader(device)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        batch, self._state = next(self._batches)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return self._state

    def close(self) -> None:
        self._parallel.close()


def compile_stats() -> tuple[int, float, float]:
    """(compilations, seconds compiling, seconds executing) of this process so far (torch_xla's metrics)."""
    met = _torch_xla("debug.metrics")
    compiled, executed = met.metric_data("CompileTime"), met.metric_data("ExecuteTime")
    return (int(compiled[0]) if compiled else 0, compiled[1] / 1e9 if compiled else 0.0,
            executed[1] / 1e9 if executed else 0.0)


class CompileWatch:
    """Compilations during training steps: a step after the warm-up that compiles is a recompilation
    (a shape or a graph constant changed) and costs a compile every time it happens; it is logged."""

    def __init__(self, warn: bool = True, warmup: int = WARMUP_STEPS):
        self.warn, self.warmup = warn, warmup
        self.steps = self.recompiles = 0
        self._before = 0

    def begin_step(self) -> None:
        self._before = compile_stats()[0]

    def end_step(self, step: int) -> None:
        """The step boundary of optimizer step `step`, then the compilations it took."""
        step_boundary()
        self.steps += 1
        new = compile_stats()[0] - self._before
        if self.steps > self.warmup and new:
            self.recompiles += new
            if self.warn:
                log.warning("XLA recompiled (%d new graph(s)) in step %d, after the %d warm-up steps: a tensor shape "
                            "or a graph constant changed (micro-batch size, a curriculum's cycle counts, a schedule "
                            "reaching exactly 0 or 1); each such step pays a compilation", new, step, self.warmup)

    def record(self) -> dict[str, float]:
        compiles, compile_s, execute_s = compile_stats()
        return {"xla_compiles": compiles, "xla_compile_s": compile_s, "xla_execute_s": execute_s,
                "xla_recompiles": self.recompiles}

    @staticmethod
    def describe(step: int, record: dict[str, float]) -> str:
        return (f"xla step {step}: {record['xla_compiles']} compilations so far ({record['xla_compile_s']:.1f} s "
                f"compiling, {record['xla_execute_s']:.1f} s executing), {record['xla_recompiles']} after warm-up")
