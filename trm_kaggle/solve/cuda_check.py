"""Whether the GPUs this machine shows can run this torch build, asked before any worker starts.

A torch wheel carries kernels for a list of GPU architectures (`torch.cuda.get_arch_list()`); a GPU whose
compute capability is missing there (no matching `sm_XY`, nor PTX old enough to be compiled for it) fails at its
first CUDA operation, in every worker and on every task. The check runs in a child process, so that this one
never starts CUDA (the workers need their GPUs whole); the solve then falls back to the CPU with one warning.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

PROBE_TIMEOUT_S = 180.0


def _number(arch: str) -> int | None:
    digits = re.sub(r"\D", "", arch.split("_", 1)[-1])
    return int(digits) if digits else None


def arch_problem(capability: tuple[int, int], arch_list: list[str]) -> str | None:
    """Why a GPU of `capability` has no kernels in `arch_list` (None when it has: its own sm_XY, or PTX of
    an equal or older architecture, which the driver compiles for it)."""
    major, minor = capability
    own = major * 10 + minor
    if not arch_list:
        return None  # a build that does not say: let the first operation decide
    for arch in arch_list:
        n = _number(arch)
        if n is None:
            continue
        if arch.startswith("sm_") and n == own:
            return None
        if arch.startswith("compute_") and n <= own:
            return None
    return f"compute capability {major}.{minor} (sm_{own}) is not among this torch build's ({', '.join(arch_list)})"


def probe() -> str | None:
    """In this process: why CUDA cannot run here (None when every visible GPU can). Starts CUDA."""
    import torch

    if not torch.cuda.is_available():
        return "torch sees no usable CUDA device"
    arch_list = list(torch.cuda.get_arch_list())
    for i in range(torch.cuda.device_count()):
        problem = arch_problem(tuple(torch.cuda.get_device_capability(i)), arch_list)
        name = torch.cuda.get_device_name(i)
        if problem:
            return f"GPU {i} ({name}): {problem}"
        try:
            torch.ones(4, device=f"cuda:{i}").add_(1).sum().item()
        except Exception as e:  # noqa: BLE001 - any failure of the first operation means: not usable
            return f"GPU {i} ({name}): the first CUDA operation failed ({type(e).__name__}: {str(e)[:200]})"
    return None


_CHILD = ("import json, sys\nfrom trm_kaggle.solve.cuda_check import probe\n"
          "print(json.dumps({'problem': probe()}))\n")


_ANSWERS: dict[str | None, str | None] = {}  # per CUDA_VISIBLE_DEVICES: the GPUs do not change within a process


def cuda_problem(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why this machine's GPUs cannot run this torch build (asked once per process, in a child), or None."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible not in _ANSWERS:
        _ANSWERS[visible] = _ask_child(timeout)
    return _ANSWERS[visible]


def _ask_child(timeout: float) -> str | None:
    try:
        res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"the CUDA check did not finish in {timeout:.0f} s"
    except OSError as e:
        return f"the CUDA check could not start ({e})"
    lines = res.stdout.strip().splitlines()
    if res.returncode != 0 or not lines:
        last = (res.stderr.strip().splitlines() or [f"status {res.returncode}"])[-1]
        return f"the CUDA check failed ({last})"
    try:
        return json.loads(lines[-1])["problem"]
    except (ValueError, KeyError, TypeError):
        return f"the CUDA check answered {lines[-1][:200]!r}"
