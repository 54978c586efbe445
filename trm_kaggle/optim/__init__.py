"""Optimizers of upstream's recipe: AdamATan2 for the weights, SignSGD for the puzzle embeddings; Lion as an option."""

from trm_kaggle.optim.adam_atan2 import AdamATan2, fused_available
from trm_kaggle.optim.lion import Lion
from trm_kaggle.optim.sign_sgd import SignSGD, sparse_sign_sgd_

__all__ = ["AdamATan2", "Lion", "SignSGD", "fused_available", "sparse_sign_sgd_"]
