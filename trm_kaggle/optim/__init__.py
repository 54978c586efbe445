"""Optimizers of upstream's recipe: AdamATan2 for the weights, SignSGD for the puzzle embeddings; Lion as an option."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "AdamATan2": "adam_atan2",
    "EMA": "ema",
    "Lion": "lion",
    "MuonWithAdam": "muon",
    "SignSGD": "sign_sgd",
    "fused_available": "adam_atan2",
    "muon_available": "muon",
    "sparse_sign_sgd_": "sign_sgd",
    "split_hidden_matrices": "muon",
}
_MODULES = ()  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
