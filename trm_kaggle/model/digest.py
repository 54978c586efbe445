"""A checksum of tensors and the values around them, the same however they were stored.

Train states and exports carry `content_digest` of what they hold, written inside the very file
(so the checksum and what it covers are replaced in one atomic rename): bytes flipped on a disk
or in a copy change the tensors without breaking the file's structure, and only a checksum
notices. The digest reads values, not file bytes, so it is computed before writing and checked
after loading, with no second pass over the file.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from trm_kaggle.model.finite import no_plain_data


def content_digest(value: Any) -> str:
    """sha256 (hex) of a nested structure of dicts, lists, tuples, tensors and plain values.

    Dict entries are taken in key order (by repr: keys may be ints and strings); a list and a tuple
    with the same items hash alike (a round trip through torch.save may turn one into the other).
    """
    h = hashlib.sha256()
    _update(h, value)
    return h.hexdigest()


def _update(h, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        if kind := no_plain_data(value):  # no plain bytes to hash: no writer of ours saves one
            raise ValueError(f"a {kind} tensor (no plain data to check)")
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
        if t.numel():
            h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    elif isinstance(value, dict):
        h.update(f"D{len(value)}:".encode())
        for key in sorted(value, key=repr):
            h.update(f"{key!r}=".encode())
            _update(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}:".encode())
        for item in value:
            _update(h, item)
    else:  # str, int, float, bool, None, bytes
        h.update(f"V{type(value).__name__}:{value!r};".encode())
