"""What every part of the GPU suite is given: the mode, the device, the prepared folder and upstream's code."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PREPARED = REPO / ".gpu_suite"
UPSTREAM_ENV = "TRM_UPSTREAM_DIR"
VOCAB = 12  # ARC: PAD, EOS, 10 colours (the training stages and the profile build models of it)
#: Nominal dense (no sparsity) peak matmul rates in TFLOP/s, from the vendors' data sheets, by a substring of
#: torch.cuda.get_device_name(), first match in this order (L40S before L4): (bf16, tf32). MFU is also given
#: against the bf16 matmul rate measured here.
NOMINAL_TFLOPS = {"H200": (989.0, 494.0), "H100 80GB HBM3": (989.0, 494.0), "H100 PCIe": (756.0, 378.0),
                  "H100": (989.0, 494.0), "A100": (312.0, 156.0), "L40S": (362.0, 183.0), "L4": (121.0, 60.0),
                  "T4": (65.0, 8.1)}


def upstream_missing_reason(path: Path | None) -> str | None:
    """Why `path` cannot serve as upstream's code (None when it can: it holds models/recursive_reasoning/trm.py)."""
    if path is None:
        return (f"upstream's code was not found: pass --upstream-dir DIR or set {UPSTREAM_ENV}, or give it to "
                f"`prepare`, which copies it into the prepared folder")
    if not (path / "models" / "recursive_reasoning" / "trm.py").is_file():
        return f"{path} does not hold upstream's models/recursive_reasoning/trm.py"
    return None


def find_upstream(given: str | None, prepared: Path) -> Path | None:
    """Upstream's code: --upstream-dir, else $TRM_UPSTREAM_DIR, else the prepared copy (None when none exists)."""
    for cand in (given, os.environ.get(UPSTREAM_ENV), prepared / "upstream"):
        if cand and Path(cand).is_dir():
            return Path(cand).resolve()
    return None


def upstream_importable(path: Path) -> str | None:
    """Why upstream's model modules cannot be imported from `path` (None when they can)."""
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    try:
        import importlib
        for mod in ("models.recursive_reasoning.trm", "models.losses", "models.sparse_embedding"):
            importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - a missing dependency (einops, pydantic) or broken copy
        return f"cannot import upstream's models from {path}: {type(e).__name__}: {e}"
    from benchmarks.bench_train_cpu import patch_upstream_attention

    patch_upstream_attention()  # float64 on CUDA: the layout upstream's `.view` needs (every use in this process)
    return None


@dataclass
class Context:
    smoke: bool
    prepared: Path
    upstream: Path | None  # a folder holding upstream's models/ (importable), or None
    upstream_why: str | None  # why upstream is not used (None when it is)
    device: torch.device
    say: Callable[[str], None] = print

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def make_context(smoke: bool, prepared: str | None, upstream_dir: str | None, device: str | None,
                 say: Callable[[str], None] = print) -> Context:
    prep = Path(prepared).resolve() if prepared else DEFAULT_PREPARED
    if device:
        dev = torch.device(device)
    else:
        dev = torch.device("cuda" if torch.cuda.is_available() and not smoke else "cpu")
    up = find_upstream(upstream_dir, prep)
    why = upstream_missing_reason(up) or (upstream_importable(up) if up else None)
    return Context(smoke, prep, None if why else up, why, dev, say)


def timed(fn: Callable[[], object], ctx: Context) -> float:
    """Wall seconds of fn(), the device synchronised before and after."""
    ctx.sync()
    t = time.perf_counter()
    fn()
    ctx.sync()
    return time.perf_counter() - t
