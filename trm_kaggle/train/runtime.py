"""Where training runs: device, precision, processes, threads, seeds.

Device auto-detection is CUDA > MPS > CPU. Under torchrun (WORLD_SIZE > 1) the
process group is initialised with NCCL on GPUs and gloo on CPU; each rank uses
`cuda:LOCAL_RANK` when GPUs are present.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    device: torch.device
    dtype: torch.dtype
    dtype_reason: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise TRMError("device=cuda requested but no CUDA device is available (use device=auto or device=cpu)")
    if requested == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise TRMError("device=mps requested but MPS is not available")
    return torch.device(requested)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def setup_runtime(cfg: TrainConfig) -> Runtime:
    from trm_kaggle.model.trm import resolve_forward_dtype

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(cfg.device)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if device.type == "cpu":
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
        torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // max(1, local_world)))
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
    return Runtime(device, dtype, reason, rank, world_size, local_rank)


def broadcast_model_(model: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers to every rank (so all ranks start from the same weights)."""
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=0)


def all_reduce_(tensors: list[torch.Tensor]) -> None:
    """Sum tensors across ranks in one flat buffer (one collective instead of one per tensor)."""
    if not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n
