"""Optimizers of upstream's recipe: AdamATan2 for the weights, SignSGD for the puzzle embeddings."""

from trm_kaggle.optim.adam_atan2 import AdamATan2, fused_available
from trm_kaggle.optim.sign_sgd import SignSGD, sparse_sign_sgd_

__all__ = ["AdamATan2", "SignSGD", "fused_available", "sparse_sign_sgd_"]
