"""Where training runs: device, precision, processes, threads, seeds.

Device auto-detection is `trm_kaggle.hardware.pick_device`'s: XLA (torch_xla installed and PJRT_DEVICE
set) > CUDA > MPS > CPU.
Under torchrun (WORLD_SIZE > 1) the process group is initialised with NCCL on GPUs and
gloo on CPU; each rank uses `cuda:LOCAL_RANK` when GPUs are present. On XLA the replicas
and their collectives are torch_xla's (`trm_kaggle.xla`). torchrun numbers the restarts of
its worker group (`--max-restarts`) in TORCHELASTIC_RESTART_COUNT; a restarted group
resumes from the newest train state like any rerun (`trm_kaggle.train.loop`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trm_kaggle import xla
from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.hardware import env_count, local_processes, pick_device, set_cpu_threads
from trm_kaggle.names import ascii_number
from trm_kaggle.wording import shown

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    device: torch.device
    dtype: torch.dtype
    dtype_reason: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart: int = 0  # torchrun's count of worker-group restarts (0: the first start)
    threads: str = ""  # on a CPU: the threads and why ("1 CPU thread (OMP_NUM_THREADS=1)")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_device_settings(cfg: TrainConfig, device: torch.device, say: bool) -> None:
    """Settings that need a device this run lacks, before anything is made: `arch.kernels=triton` off CUDA is
    refused (as the blocks would refuse it at the first step: `trm_kaggle.model.fused`; Triton's interpreter,
    TRITON_INTERPRET=1, runs it on a CPU for tests), and `cuda_graphs=True` where it cannot apply is said."""
    interpreting = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    if cfg.arch.kernels == "triton":
        if importlib.util.find_spec("triton") is None:
            raise TRMError("arch.kernels=triton needs Triton (pip install triton; Linux, CUDA): set arch.kernels=auto "
                           "or torch")
        if device.type != "cuda" and not (device.type == "cpu" and interpreting):
            raise TRMError(f"arch.kernels=triton runs on CUDA GPUs, not on {device.type}: set arch.kernels=auto or "
                           "torch")
    if cfg.cuda_graphs and say:
        from trm_kaggle.model import resolve_compile

        if device.type != "cuda":
            log.warning("cuda_graphs=True: %s has no CUDA graphs; the setting is ignored (CUDA, with compile)",
                        device.type)
        elif not resolve_compile(cfg.compile, device):
            log.warning("cuda_graphs=True: ignored, the network is not compiled (compile=%s); set compile=on",
                        cfg.compile)


def torchrun_ranks() -> tuple[int, int, int]:
    """(world size, rank, local rank) as torchrun sets them in the environment; (1, 0, 0) alone. A partial or
    stray set (WORLD_SIZE=2 left in a shell, RANK not below it) is refused here, in one line, rather than by
    torch.distributed's rendezvous as a traceback."""
    world_size = env_count("WORLD_SIZE", 1)
    if world_size == 0:
        raise TRMError("WORLD_SIZE=0 in the environment is no number of ranks: unset it, or start the ranks with "
                       "`trm-kaggle torchrun`")
    rank, local_rank = env_count("RANK", 0), env_count("LOCAL_RANK", 0)
    # the env:// rendezvous reads the address too, unless a process group is already up (a caller's own)
    needed = ("RANK",) if dist.is_initialized() else ("RANK", "MASTER_ADDR", "MASTER_PORT")
    missing = [name for name in needed if not os.environ.get(name, "").strip()]
    if world_size > 1 and missing:
        raise TRMError(f"WORLD_SIZE={world_size} is set in the environment but {', '.join(missing)} "
                       f"{'is' if len(missing) == 1 else 'are'} not: start the ranks with `trm-kaggle torchrun` "
                       "(which sets them all), or unset WORLD_SIZE")
    port = os.environ.get("MASTER_PORT", "")
    if world_size > 1 and "MASTER_PORT" in needed and not 1 <= (ascii_number(port) or 0) <= 65535:
        raise TRMError(f"MASTER_PORT='{shown(port)}' in the environment is no port (1 to 65535 in ASCII digits): "
                       "start the ranks with `trm-kaggle torchrun`, or set it right")
    if rank >= world_size:
        raise TRMError(f"RANK={rank} in the environment is not below WORLD_SIZE={world_size}: start the ranks with "
                       "`trm-kaggle torchrun`, or unset RANK")
    if world_size > 1 and not dist.is_initialized() and not dist.is_torchelastic_launched():
        # a rank nobody started waits in the rendezvous for its peers, deaf to SIGTERM, for half an hour
        raise TRMError(f"WORLD_SIZE={world_size} is set in the environment, but this process was not started by "
                       "torchrun: start the ranks with `trm-kaggle torchrun`, or unset WORLD_SIZE")
    return world_size, rank, local_rank


class PeerLost(TRMError):
    """A rank's collective failed because another rank of the group ended (its own line says why): not bad input,
    exit status 1, as a failed worker group."""

    exit_status = 1


_LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "Connection refused", "Broken pipe")


def peer_lost(e: BaseException) -> PeerLost | None:
    """The one line for a collective that failed under torchrun because a peer rank ended (it refused a run folder
    another training holds, it was stopped, it crashed): torch raised it as a traceback on every other rank, which
    buried the line of the rank that said why. None for any other error."""
    if env_count("WORLD_SIZE", 1) <= 1 or not isinstance(e, RuntimeError):
        return None
    mark = next((mark for mark in _LOST_PEER if mark in str(e)), None)
    if mark is None and not isinstance(e, getattr(dist, "DistError", ())):
        return None
    return PeerLost(f"rank {env_count('RANK', 0)}: the group's connection was lost ({mark or type(e).__name__}): "
                    "another rank ended, and its own line above says why")


@contextlib.contextmanager
def torch_settings_kept():
    """Put torch's process-wide settings that `setup_runtime` changes (deterministic algorithms, the CPU thread
    count) back as they were when the block ends, however it ends: a run's `deterministic=True` stayed on for the
    next run of the same process (which asked for False) and for the caller's own torch code, where on CUDA it makes
    some operations raise."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        # only when changed: the call imports torch._inductor (and torch._dynamo), 1.2 s an eager CPU run never needs
        if (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) != (deterministic, warn_only):
            torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def setup_runtime(cfg: TrainConfig) -> Runtime:
    """The run's device, dtype, ranks and threads; sets torch's threads and deterministic mode for the process
    (`train` holds `torch_settings_kept` around it)."""
    from trm_kaggle.model import resolve_forward_dtype

    world_size, rank, local_rank = torchrun_ranks()
    device = pick_device(cfg.device)
    if device.type == "xla":  # XLA's replicas (processes or threads), not torch.distributed's ranks
        rank, world_size = xla.replica()
        local_rank = rank
        _check_xla_config(cfg, world_size)
    elif device.type == "cuda":
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    _check_device_settings(cfg, device, say=rank == 0)
    if world_size > 1 and device.type != "xla" and not dist.is_initialized():
        join_process_group(device, rank, world_size)
    if world_size > 1 and device.type != "xla":
        check_same_settings(cfg, rank, world_size)
    threads = ""
    if device.type == "cpu":  # one rule everywhere (threads, else OMP_NUM_THREADS, else the free cores)
        local_world, note = local_processes()  # doctor's rule too: a stray LOCAL_WORLD_SIZE is ignored, said
        n, why = set_cpu_threads(cfg.threads, share=local_world)
        threads = f"{n} CPU thread{'s' if n != 1 else ''} ({why}{'; ' + note if note else ''})"
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
        if device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(cfg.seed)  # identical on every rank: the model is initialised the same everywhere
    dtype, reason = resolve_forward_dtype(cfg.arch, device)
    if world_size > 1 and device.type == "cpu" and cfg.arch.forward_dtype == "auto":
        # "auto" on CPU is a timing measurement, which could come out differently on two ranks:
        # every rank takes rank 0's choice, so all of them run the same arithmetic.
        choice = torch.tensor([1 if dtype == torch.bfloat16 else 0])
        dist.broadcast(choice, src=0)
        if (dtype == torch.bfloat16) != bool(choice.item()):
            dtype = torch.bfloat16 if choice.item() else torch.float32
            reason = f"auto: {dtype_name(dtype)}, rank 0's choice (this rank measured otherwise: {reason})"
    restart = env_count("TORCHELASTIC_RESTART_COUNT", 0)
    return Runtime(device, dtype, reason, rank, world_size, local_rank, restart, threads)


RDZV_SAY_S = 10.0  # seconds of waiting for the other ranks before the wait is said


def join_process_group(device: torch.device, rank: int, world_size: int) -> None:
    """dist.init_process_group, waited for in Python. Its env:// rendezvous waits inside C++ for the other ranks (up
    to 30 minutes), where no signal handler runs: a plain `train` with a stray TORCHELASTIC_RUN_ID and WORLD_SIZE=2
    waited there without a word, deaf to SIGTERM. It runs in a thread; this one says what it waits for after
    RDZV_SAY_S and takes a stop signal at once (the thread, still waiting, ends with the process)."""
    import threading
    import time

    outcome: list[BaseException | None] = []

    def join() -> None:
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)  # the current device is the thread's own
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
            outcome.append(None)
        except BaseException as err:  # re-raised where the caller is
            outcome.append(err)

    waiting = threading.Thread(target=join, name="process-group rendezvous", daemon=True)
    waiting.start()
    started, said = time.monotonic(), False
    while waiting.is_alive():
        waiting.join(0.2)  # between the slices the main thread's signal handlers run
        if not said and waiting.is_alive() and time.monotonic() - started >= RDZV_SAY_S:
            said = True
            log.warning("rank %d of %d: waiting for the other ranks at %s:%s (MASTER_ADDR:MASTER_PORT); ranks start "
                        "together under `trm-kaggle torchrun`: one started alone (WORLD_SIZE and TORCHELASTIC_RUN_ID "
                        "left in its environment) waits for peers that never come", rank, world_size,
                        shown(os.environ.get("MASTER_ADDR", "")), shown(os.environ.get("MASTER_PORT", "")))
    if outcome and outcome[0] is not None:
        raise outcome[0]


#: Settings each rank may hold its own value of: where it reads and writes (each node its own mount of the shared
#: folder), how it shows its work, and its own machine's threads and compiler. Every other one changes what or how
#: long the ranks compute together.
PER_RANK_SETTINGS = frozenset({"data_paths", "data_paths_test", "checkpoint_path", "load_checkpoint", "progress",
                               "tensorboard", "wandb", "threads", "device", "compile", "cuda_graphs", "project_name",
                               "run_name"})


def check_same_settings(cfg: TrainConfig, rank: int, world_size: int) -> None:
    """Refuse (TRMError, on every rank) settings that differ from rank 0's: two nodes started by hand with
    max_steps 10 and 30 trained apart until one waited in a collective for the other forever, with no word and
    no save."""
    def flat(block: dict, prefix: str = "") -> dict:  # `arch.L_cycles`, not the whole arch block, is named
        return {k: v for key, value in block.items()
                for k, v in (flat(value, f"{prefix}{key}.") if isinstance(value, dict)
                             else {f"{prefix}{key}": value}).items()}

    mine = flat(cfg.model_dump(mode="json", exclude=set(PER_RANK_SETTINGS)))
    everyone: list = [None] * world_size
    dist.all_gather_object(everyone, mine)
    first = everyone[0]
    for other, theirs in enumerate(everyone[1:], start=1):
        keys = sorted(k for k in first.keys() | theirs.keys() if first.get(k) != theirs.get(k))
        if keys:
            said = "; ".join(f"{k}: {shown(str(first.get(k)))} on rank 0, {shown(str(theirs.get(k)))} on rank "
                             f"{other}" for k in keys[:2])
            raise TRMError(f"the ranks were given different settings ({said}{' ...' if len(keys) > 2 else ''}): "
                           "every rank of a run trains with the same ones; start every node with the same line")


def _check_xla_config(cfg: TrainConfig, world_size: int) -> None:
    if cfg.compile == "on":  # auto is off here
        raise TRMError("compile=on is torch.compile (inductor), which does not run on XLA devices; XLA compiles "
                       "the whole training step itself: use compile=auto or compile=off")
    if cfg.auto_batch:
        raise TRMError("auto_batch=True retries a step after an out-of-memory error, which XLA reports when the step "
                       "is compiled, not while it is recorded; set micro_batch_size=N instead")
    if world_size == 1 and xla.device_kind() != "CPU" and xla.local_devices() > 1:
        log.warning("this host has %d XLA devices and this run uses one: `trm-kaggle train --xla-launch ...` runs a "
                    "replica on each", xla.local_devices())


def broadcast_model_(model: torch.nn.Module, rank: int = 0) -> None:
    """Rank 0's parameters and buffers to every rank (so all ranks start from the same weights)."""
    tensors = [t.data for t in list(model.parameters()) + list(model.buffers())]
    on_xla = bool(tensors) and tensors[0].device.type == "xla"
    if on_xla and not xla.host_collectives():
        xla.broadcast_(tensors, rank)
        return
    host = xla.to_host(tensors) if on_xla else tensors  # XLA on a CPU host: gloo, on host copies
    for t in host:
        dist.broadcast(t, src=0)
    if on_xla:
        xla.from_host_(tensors, host)


def all_reduce_(tensors: list[torch.Tensor]) -> None:
    """Sum tensors across ranks in one flat buffer (one collective instead of one per tensor)."""
    if not tensors:
        return
    if tensors[0].device.type == "xla":
        if not xla.host_collectives():
            xla.all_reduce_(tensors)  # inside the step's graph: one XLA all-reduce of the whole list
            return
        host = xla.to_host(tensors)  # XLA on a CPU host: gloo, on host copies (trm_kaggle.xla)
        all_reduce_(host)
        xla.from_host_(tensors, host)
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n
