"""Ours' variants in the GPU suite: the one place they are listed, and the one adapter that makes ours compiled.

`ours_compiled(model)` is ours as a user gets it compiled, and ours' best variant's way of compiling: every stage
that runs ours compiled (the throughput's best variant, parity's compiled variants, the evaluation in the user's
dtype, the profile) goes through it. Today it is `trm_kaggle.model.compiling.apply_compile` (the regions: the
recursive net with one block traced once for every layer, the ACT step's rules; lazy: the first calls compile).

`VARIANTS` are ours' sides of the throughput table and of parity: a name, a dtype, and `make`, a function that
turns the freshly built eager model (its weights already set) into the model the variant runs. A new variant
is one row here (the fused Triton kernels and float8 rows run on CUDA only); `BEST` names the one that stands against upstream's compiled bf16 step in
the lend's first stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


def ours_compiled(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    """Ours compiled (see the module docstring). Returns the model to run."""
    from trm_kaggle.model import apply_compile

    apply_compile(model, "on", model.H_init.device, **compile_kwargs)
    return model


def eager(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    return model


def compiled(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    # looked up when called, so that a test can plant a broken compile in the one adapter
    return ours_compiled(model, **compile_kwargs)


def fused(fp8: bool) -> Callable[..., torch.nn.Module]:
    """Ours with the fused Triton block kernels (`arch.kernels=triton`; with `fp8`, float8 in the no-grad net
    calls too: `arch.fp8=nograd`), compiled: the same weights, another way of computing them."""
    def make(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
        from trm_kaggle.config import ArchConfig
        from trm_kaggle.model import block_dispatch, fused_variant

        model.arch = ArchConfig(**fused_variant(model.arch, fp8=fp8))
        dispatch = block_dispatch(model.arch)
        for block in model.layers:
            block.dispatch = dispatch
        return ours_compiled(model, **compile_kwargs)

    return make


@dataclass(frozen=True)
class Variant:
    """One of ours' sides. `make(model, **compile_kwargs)` returns the model to run (the same module changed in
    place, or another one with the same weights). Parity judges the variant within B.PARITY_RATIO x the
    errors of `baseline` (the eager run in its dtype), or by its loss alone when it has none."""

    name: str
    dtype: str  # "float32" or "bfloat16"
    make: Callable[..., torch.nn.Module]
    baseline: str | None = None
    cuda_only: bool = False  # Triton's kernels and float8 matmuls: measured on a GPU, skipped (and said) elsewhere


VARIANTS = (
    Variant("ours eager fp32", "float32", eager),
    Variant("ours eager bf16", "bfloat16", eager),
    Variant("ours compile fp32", "float32", compiled, baseline="ours eager fp32"),
    Variant("ours compile bf16", "bfloat16", compiled, baseline="ours eager bf16"),
    Variant("ours fused compile bf16", "bfloat16", fused(fp8=False), baseline="ours eager bf16", cuda_only=True),
    Variant("ours fused fp8 compile bf16", "bfloat16", fused(fp8=True), baseline="ours eager bf16", cuda_only=True),
)
#: Ours' best variant: timed first, beside upstream's compiled bf16 step (the throughput target).
BEST = "ours compile bf16"
#: Ours eager in each dtype: the baselines, and the side set against upstream's eager step in parity.
EAGER = {"float32": "ours eager fp32", "bfloat16": "ours eager bf16"}


def variant(name: str) -> Variant:
    return next(v for v in VARIANTS if v.name == name)
