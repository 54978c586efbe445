"""Batches -> predictions: the TRM network and its ACT loop (`trm.py`, `layers.py`, `dtype.py`), its
losses (`losses.py`), inference rollouts (`rollout.py`), inference exports (`export.py`) and upstream's
checkpoints (`upstream.py`)."""

from trm_kaggle.model.losses import act_loss, softmax_cross_entropy, stablemax_cross_entropy
from trm_kaggle.model.trm import Carry, PuzzleEmbedding, TinyRecursiveModel, prefix_length, resolve_forward_dtype

__all__ = [
    "Carry",
    "PuzzleEmbedding",
    "TinyRecursiveModel",
    "act_loss",
    "prefix_length",
    "resolve_forward_dtype",
    "softmax_cross_entropy",
    "stablemax_cross_entropy",
]
