"""The two optimizers of a TRM run, as upstream: one for the weights, SignSGD for the puzzle rows.

The weights take AdamATan2 (upstream's), AdamW, Lion or Muon (`optimizer=`; Muon for the recursive blocks'
matrices, AdamATan2 for the rest, as one optimizer); the puzzle-embedding table takes SignSGD on the rows a batch
touched. Both start at lr 0: the schedule sets each step's rate (`set_learning_rates`).
"""

from __future__ import annotations

import torch

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model import TinyRecursiveModel
from trm_kaggle.optim import AdamATan2, Lion, MuonWithAdam, SignSGD, muon_available, split_hidden_matrices


def make_optimizers(cfg: TrainConfig, model: TinyRecursiveModel, capturable: bool | None = None):
    """The weights' optimizer and the puzzle rows' SignSGD. `capturable`: step counts on the device (no host read
    per step; None: where the optimizer chooses, on the device for CUDA)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.freeze_weights:
        for p in params:
            p.requires_grad_(False)
        dense = None
    elif cfg.optimizer == "adamw":
        dense = torch.optim.AdamW(params, lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                                  capturable=bool(capturable) and bool(params) and params[0].is_cuda)
    elif cfg.optimizer == "lion":
        dense = Lion(params, lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    elif cfg.optimizer == "muon":
        dense = make_muon(cfg, model, params, capturable)
    else:
        dense = AdamATan2(params, lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                          capturable=capturable)
    sparse = None
    if model.puzzle_emb is not None:
        sparse = SignSGD(model.puzzle_emb, lr=0.0, weight_decay=cfg.puzzle_emb_weight_decay)
    return dense, sparse


def make_muon(cfg: TrainConfig, model: TinyRecursiveModel, params: list[torch.Tensor],
              capturable: bool | None) -> MuonWithAdam:
    """Muon for the 2-D weights of the recursive blocks (attention and MLP projections, the MLP across the
    sequence), AdamATan2 for the rest: token embedding, lm and q heads, biases, norms (the puzzle rows are
    SignSGD's, outside `parameters()`)."""
    if not muon_available():
        raise TRMError(f"optimizer=muon needs torch 2.9 or newer (torch.optim.Muon); this torch is "
                       f"{torch.__version__}")
    hidden, rest = split_hidden_matrices(model.layers.parameters(), params)
    return MuonWithAdam(hidden, rest, lr=0.0, lr_ratio=cfg.muon_ratio, momentum=cfg.muon_momentum,
                        ns_steps=cfg.muon_ns_steps, adjust_lr_fn=cfg.muon_scale, betas=(cfg.beta1, cfg.beta2),
                        weight_decay=cfg.weight_decay, muon_weight_decay=cfg.muon_weight_decay,
                        capturable=capturable)


def set_learning_rates(dense, sparse, lr: float, emb_lr: float) -> None:
    """The coming step's rates: `lr` for the weights, `emb_lr` for the puzzle rows."""
    for optimizer, rate in ((dense, lr), (sparse, emb_lr)):
        if optimizer is not None:
            for g in optimizer.param_groups:
                g["lr"] = rate


def optimizer_step(dense, sparse, active: torch.Tensor | None = None) -> None:
    """Apply a step's gradients: the weights' optimizer (its gradients then dropped) and the puzzle rows' (which
    keeps its own sparse gradients). Either may be None (frozen weights; a model without puzzle rows).
    `active` (0-dim bool on the device): False leaves the puzzle rows as they were (see StepGuard)."""
    if dense is not None:
        dense.step()
        dense.zero_grad(set_to_none=True)
    if sparse is not None:
        sparse.step(active=active)
