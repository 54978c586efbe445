"""The TRM network, its losses, and import/export of upstream checkpoints."""

from .losses import IGNORE_LABEL_ID, act_loss, softmax_cross_entropy, stablemax_cross_entropy
from .trm import Carry, PuzzleEmbedding, TinyRecursiveModel, prefix_length, resolve_forward_dtype

__all__ = [
    "IGNORE_LABEL_ID",
    "Carry",
    "PuzzleEmbedding",
    "TinyRecursiveModel",
    "act_loss",
    "prefix_length",
    "resolve_forward_dtype",
    "softmax_cross_entropy",
    "stablemax_cross_entropy",
]
