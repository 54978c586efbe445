"""Reading torch files without running their code, and without torch's own words on the console.

Every `.pt` file we read (a train state, upstream's `step_N` checkpoint) is loaded with `weights_only=True`:
a pickle of foreign objects is refused, never executed. For such a file torch also warns (a pickle protocol
it did not write, a storage type) before it refuses; the caller reports the file in one line of its own, so
the warning, with its source line from torch's site-packages, would only make that refusal three lines."""

from __future__ import annotations

import warnings
from typing import Any

import torch


def load_weights_only(source: Any, *, mmap: bool = False) -> Any:
    """`torch.load(source)` on the CPU with `weights_only=True` (`mmap` for a path), torch's warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mmap:
            return torch.load(source, map_location="cpu", weights_only=True, mmap=True)
        return torch.load(source, map_location="cpu", weights_only=True)
