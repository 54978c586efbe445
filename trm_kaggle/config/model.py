"""The network's config (upstream's `config/arch/trm.yaml`) and an inference export's `config.json`."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from trm_kaggle.config.common import MAX_PUZZLE_IDENTIFIERS, _Config

RECURSION_FIELDS = ("H_cycles", "L_cycles", "halt_max_steps")  # arch fields a model can change without new weights
#: arch fields that choose how the network computes, not what: the same weights run under any of their values
EXECUTION_FIELDS = ("forward_dtype", "kernels", "fp8")
MAX_HALT_STEPS = 4096  # ACT steps per example: upstream's recipes use 16

# The activation dtype inference runs in (`evaluate --dtype`, `SolveConfig.forward_dtype`): "auto" decides per
# device (`trm_kaggle.model.dtype`) whatever the run that trained the weights was set to; "export" keeps the
# export's own forward_dtype; or a dtype by name.
InferenceDtype = Literal["auto", "export", "float32", "bfloat16", "float16"]


class ArchConfig(_Config):
    """The network. Bounds are far outside every published recipe; they stop a typo (`num_heads: 0`,
    `halt_max_steps: 0`, a hidden size in the millions) before it becomes a traceback or a huge allocation."""

    hidden_size: int = Field(512, ge=2, le=16384, description="width of every token's state")
    num_heads: int = Field(8, ge=1, le=1024, description="attention heads (hidden_size must divide by it)")
    expansion: float = Field(4.0, gt=0, le=64, description="SwiGLU hidden width as a multiple of hidden_size")
    H_cycles: int = Field(3, ge=1, le=256, description="T: recursion cycles per ACT step (the last one carries "
                                                       "gradients)")
    L_cycles: int = Field(6, ge=1, le=256, description="n: latent updates per cycle (upstream's ARC runs use 4)")
    H_layers: int = Field(0, ge=0, le=256, description="kept for upstream configs; TRM has a single network")
    L_layers: int = Field(2, ge=1, le=256, description="layers of the one network")
    halt_max_steps: int = Field(16, ge=1, le=MAX_HALT_STEPS, description="ACT supervision steps per example")
    halt_exploration_prob: float = Field(0.1, ge=0, le=1, description="chance that a training row is held for a "
                                                                      "random minimum number of ACT steps")
    no_ACT_continue: bool = Field(True, description="halting learns from the halt head alone (upstream's "
                                                    "default), not also from a continue target")
    pos_encodings: Literal["rope", "learned", "none"] = Field("rope", description="position encoding")
    rope_theta: float = Field(10000.0, ge=1, allow_inf_nan=False, description="RoPE base (at least 1: a smaller "
                              "one turns faster than a radian per position, a tiny one is 0 in float32)")
    rms_norm_eps: float = Field(1e-5, gt=0, lt=1, description="epsilon of the RMS norms")
    puzzle_emb_ndim: Optional[int] = Field(None, ge=0, le=1 << 20, description="width of a puzzle-embedding row; "
                                           "None = hidden_size (upstream: ${.hidden_size}); 0 = no puzzle embedding")
    puzzle_emb_len: int = Field(16, ge=0, le=4096, description="positions the puzzle embedding takes before the "
                                                               "grid tokens")
    mlp_t: bool = Field(False, description="mix positions with an MLP instead of attention (the paper's Sudoku "
                                           "model)")
    swiglu_norm: bool = Field(False, description="SwiGLU as 'Speed is Confidence' changes it for Muon: "
                                                 "down(sigmoid(gate) * rms_norm(gate * up)) (upstream: "
                                                 "down(silu(gate) * up)); the torch kernels only")
    forward_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="activation dtype; auto = bfloat16 where the device runs it natively and fast, "
                            "float16 with loss scaling on CUDA GPUs without bf16 but with fast float16 (T4, V100), "
                            "else float32 (upstream: bfloat16)")
    loss_type: Literal["stablemax_cross_entropy", "softmax_cross_entropy"] = Field(
        "stablemax_cross_entropy", description="token loss (upstream's stablemax, or softmax)")
    kernels: Literal["auto", "torch", "triton"] = Field(
        "torch", description="the blocks' kernels: torch = the plain path (upstream's arithmetic); triton = fused "
                             "Triton kernels (the norm folded into the next matmul, SwiGLU, RoPE and the residual "
                             "in the matmuls' epilogues; CUDA); auto = triton on CUDA where Triton imports and "
                             "its kernels pass a self-check, else torch (model/fused.py)")
    fp8: Literal["off", "nograd"] = Field(
        "off", description="nograd: the blocks' matmuls in float8 e4m3 with row-wise scales in every network "
                           "call without autograd (the H_cycles - 1 cycles before the gradient's, and inference); "
                           "CUDA compute capability 8.9+, emulated on CPU (model/fp8.py)")

    @model_validator(mode="after")
    def _shapes_fit(self) -> "ArchConfig":
        if self.swiglu_norm and (self.kernels == "triton" or self.fp8 != "off"):
            raise ValueError("swiglu_norm runs on the torch kernels only (the fused and float8 kernels compute "
                             "upstream's SwiGLU): set kernels to torch or auto, and fp8 to off")
        if not self.mlp_t and self.hidden_size % self.num_heads:  # the MLP mixer (mlp_t) has no heads
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if not self.mlp_t and self.pos_encodings == "rope" and (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"rope needs an even head size, hidden_size / num_heads is "
                             f"{self.hidden_size // self.num_heads}")
        if round(self.expansion * self.hidden_size * 2 / 3) < 1:  # the SwiGLU's width (model/layers.swiglu_width)
            raise ValueError(f"expansion {self.expansion:g} x hidden_size {self.hidden_size} x 2/3 rounds to a SwiGLU "
                             f"of no width: raise expansion")
        if self.puzzle_emb_len and self.emb_ndim > self.puzzle_emb_len * self.hidden_size:
            raise ValueError(f"puzzle_emb_ndim {self.emb_ndim} does not fit in puzzle_emb_len {self.puzzle_emb_len} "
                             f"x hidden_size {self.hidden_size}")
        return self

    @property
    def emb_ndim(self) -> int:
        return self.hidden_size if self.puzzle_emb_ndim is None else self.puzzle_emb_ndim

    def with_recursion(self, **changes: int) -> "ArchConfig":
        """This network recursing deeper or stopping sooner (`RECURSION_FIELDS`: H_cycles, L_cycles,
        halt_max_steps), checked like any ArchConfig: what the same weights run under a test-time recipe or a
        recursion curriculum. Any other field would need other weights: refused."""
        unknown = set(changes) - set(RECURSION_FIELDS)
        if unknown:
            raise ValueError(f"only {', '.join(RECURSION_FIELDS)} change without new weights, not {sorted(unknown)}")
        return type(self)(**{**self.model_dump(), **changes})

    def for_inference(self, dtype: InferenceDtype) -> "ArchConfig":
        """This network running in `dtype` (`InferenceDtype`): the same weights in another activation dtype."""
        return self if dtype == "export" else type(self)(**{**self.model_dump(), "forward_dtype": dtype})


class ExportConfig(_Config):
    """`config.json` of an inference export (`trm_kaggle.model.export`): checked in full when read,
    so a hand-edited or foreign file fails with one line naming the field."""

    format: Literal["trm_kaggle.inference"]
    trm_kaggle_version: str
    arch: ArchConfig
    seq_len: int = Field(ge=1, le=1 << 20)
    vocab_size: int = Field(ge=2, le=1 << 20)
    num_puzzle_identifiers: Optional[int] = Field(ge=1, le=MAX_PUZZLE_IDENTIFIERS)  # None: no puzzle embedding
    puzzle_embedding: Literal["full", "mean"]
    info: dict = Field(default_factory=dict)
