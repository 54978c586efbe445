"""SignSGD with decoupled weight decay for the sparse puzzle-embedding table.

Each step touches only the rows of the identifiers in the batch (a tiny part of a
table that can hold a million rows), so Adam's moment estimates would be mostly
stale; with so sparse a gradient Adam behaves like sign descent anyway, which is
why upstream uses SignSGD here. Per touched row r (gradients of repeated ids
summed first):

    w[r] *= 1 - lr * weight_decay
    w[r] -= lr * sign(grad[r])

Under torch.distributed every rank gathers all ranks' (ids, grads) before the
update, so all replicas of the table stay identical. Upstream: lr 1e-2 (ARC),
1e-4 (Sudoku), weight_decay 0.1.

On XLA and CUDA the same rule runs in a static-shape form (`static_sign_sgd_`): `unique()` returns as
many rows as there are distinct ids, a shape that changes with every batch: XLA would recompile
the step each time, and CUDA would wait for the count (a host sync every step).
`step(active=...)` takes a 0-dim bool on the device: where it is False the rows keep their values
(a step skipped as not finite, decided without a host read, see `trm_kaggle.train.step_guard`).
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Union

import torch
import torch.distributed as dist

from trm_kaggle import xla
from trm_kaggle.model import PuzzleEmbedding
from trm_kaggle.optim.common import BaseOptimizer, check_hyperparameters, closure_loss
from trm_kaggle.wording import clipped


class SignSGD(BaseOptimizer):
    """Optimizes `PuzzleEmbedding` tables; pass the module(s), not parameters.

    The param group holds each table (`module.weights`) so LR schedulers and
    `state_dict()` work as usual; the gradient comes from `module.touched()`.
    """

    def __init__(self, embeddings: Union[PuzzleEmbedding, Iterable[PuzzleEmbedding]],
                 lr: float = 1e-2, weight_decay: float = 0.1):
        check_hyperparameters(lr, weight_decay)
        self.embeddings: List[PuzzleEmbedding] = _tables(embeddings)
        super().__init__([e.weights for e in self.embeddings], dict(lr=lr, weight_decay=weight_decay))

    def check_group(self, group: dict) -> None:
        """The settings every optimizer here checks, and each table one of a registered `PuzzleEmbedding` (a
        parameter of any other kind failed at the step)."""
        super().check_group(group)
        tables = {id(e.weights) for e in getattr(self, "embeddings", ())}
        if any(id(t) not in tables for t in group.get("params") or []):
            raise ValueError("params: expected the tables (`weights`) of the PuzzleEmbeddings SignSGD was given")

    def _owner(self, table: torch.Tensor) -> PuzzleEmbedding:
        for e in self.embeddings:  # a handful of tables at most
            if e.weights is table:
                return e
        raise RuntimeError("SignSGD: a parameter group holds a tensor that is not a registered puzzle-embedding table")

    @torch.no_grad()
    def step(self, closure=None, active: Optional[torch.Tensor] = None):
        """Apply and forget the recorded rows' gradients; `active` (0-dim bool): False leaves the rows as they
        were (the gradients are forgotten all the same)."""
        if active is not None and not (isinstance(active, torch.Tensor) and active.dtype == torch.bool
                                       and active.dim() == 0):  # torch's where() said it in many lines
            raise ValueError(f"active={clipped(active, 40)}: expected None or a 0-dim bool tensor")
        self.check_loaded()
        loss = closure_loss(closure)
        for group in self.param_groups:
            for table in group["params"]:
                emb = self._owner(table)
                touched = emb.touched()
                emb.clear()  # a forward's gradient is applied once
                if touched is None:
                    continue
                ids, grads = touched
                sparse_sign_sgd_(table, ids, grads, lr=float(group["lr"]), weight_decay=group["weight_decay"],
                                 active=active)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for e in self.embeddings:
            e.clear()


def _tables(embeddings: object) -> List[PuzzleEmbedding]:
    """`embeddings` (one PuzzleEmbedding or an iterable of them) as a list of at least one, else one error naming
    the argument (a parameter was "no attribute 'weights'", None "not iterable")."""
    if isinstance(embeddings, PuzzleEmbedding):
        return [embeddings]
    tables = list(embeddings) if isinstance(embeddings, Iterable) and not isinstance(embeddings, torch.Tensor) else None
    if tables is None or not all(isinstance(e, PuzzleEmbedding) for e in tables):
        raise TypeError(f"embeddings={clipped(embeddings, 40)}: expected a PuzzleEmbedding or a list of them (the "
                        "modules, not their tables)")
    if not tables:
        raise ValueError("SignSGD needs at least one PuzzleEmbedding")
    return tables


def gather_rows(ids: torch.Tensor, grads: torch.Tensor):
    """All ranks' (ids, grads), concatenated; a no-op without an initialised process group.

    Every rank must call this with the same number of rows (the local batch size).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ids, grads
    n = dist.get_world_size()
    all_ids = [torch.empty_like(ids) for _ in range(n)]
    all_grads = [torch.empty_like(grads) for _ in range(n)]
    dist.all_gather(all_ids, ids.contiguous())
    dist.all_gather(all_grads, grads.contiguous())
    return torch.cat(all_ids), torch.cat(all_grads)


def sparse_sign_sgd_(table: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor, lr: float, weight_decay: float,
                     active: Optional[torch.Tensor] = None) -> None:
    """In place: decay and sign-step the rows of `table` named by `ids` (gradients of repeated ids summed);
    where `active` (0-dim bool) is False, nothing changes."""
    if table.device.type in ("xla", "cuda") or active is not None:  # no data-dependent shapes: no host sync
        static_sign_sgd_(table, ids, grads, lr, weight_decay, active)
        return
    ids, grads = gather_rows(ids, grads)
    unique, inverse = ids.unique(return_inverse=True)
    summed = torch.zeros(unique.shape[0], grads.shape[1], dtype=grads.dtype, device=grads.device)
    summed.index_add_(0, inverse, grads)
    rows = table[unique]
    rows.mul_(1.0 - lr * weight_decay).add_(summed.sign().to(rows.dtype), alpha=-lr)
    table[unique] = rows


def static_sign_sgd_(table: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor, lr: float, weight_decay: float,
                     active: Optional[torch.Tensor] = None) -> None:
    """`sparse_sign_sgd_` with every shape fixed by the batch size (for XLA and CUDA; any device computes it).

    Rows with equal ids get the sum of their gradients through an (n x n) equality matrix, a
    matmul of n^2 * dim multiply-adds, where n is the global batch: no `unique()`, and no
    table-sized dense gradient either (the ARC table is gigabytes). Repeated ids then write the
    same new row, so the scatter's order does not matter. On XLA the rows of all replicas are
    gathered inside the step's graph (by gloo on host copies on a CPU host, see trm_kaggle.xla)."""
    if table.device.type == "xla" and xla.replica()[1] > 1:
        if xla.host_collectives():
            host = gather_rows(*xla.to_host([ids, grads]))
            ids, grads = (t.to(table.device) for t in host)
        else:
            ids, grads = xla.all_gather_rows(ids), xla.all_gather_rows(grads)
    elif table.device.type != "xla":
        ids, grads = gather_rows(ids, grads)
    same = (ids.view(-1, 1) == ids.view(1, -1)).to(grads.dtype)
    summed = same @ grads
    old = table[ids]
    rows = old * (1.0 - lr * weight_decay) - lr * summed.sign().to(table.dtype)
    if active is not None:
        rows = torch.where(active, rows, old)
    table.index_copy_(0, ids, rows)
