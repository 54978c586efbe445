"""Training losses and metrics of one ACT step, as upstream's loss head.

    total = lm_loss + 0.5 * (q_halt_loss + q_continue_loss)

* lm_loss: per-token cross-entropy (stablemax by default), averaged over the
  valid tokens of each example, summed over the batch.
* q_halt_loss: BCE-with-logits of q_halt against "the whole sequence is right".
* q_continue_loss: BCE of q_continue against the bootstrapped target the model
  returns when no_ACT_continue is False.

Losses are *sums* over the batch, like upstream: the trainer scales by
1/global_batch_size. Metrics are sums over the rows that halted this step (with
at least one valid label), with `count` to divide by.

Stablemax (Prieto et al., "Grokking at the edge of numerical stability") replaces
exp by s(x) = x + 1 for x >= 0 and 1 / (1 - x) for x < 0. Upstream evaluates it in
float64; here it is float32 with a hand-written backward, arranged so every
quantity is a sum of non-negative terms (no catastrophic cancellation):

    log s(x)  = sign(x) * log1p(|x|)          (finite for every float32 x)
    loss      = (m - l_y) + log1p(sum_{j != argmax} exp(l_j - m)),   l = log s(x), m = max l
    dloss/dx_j = (p_j - [j = y]) / (1 + |x_j|),  p = softmax(l)
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch
import torch.nn.functional as F

from trm_kaggle.data import IGNORE_LABEL_ID



class _StablemaxCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = logits.float()
        l = torch.sign(x) * torch.log1p(x.abs())
        m, arg = l.max(dim=-1, keepdim=True)
        e = torch.exp(l - m).scatter_(-1, arg, 0.0)  # drop the max term (exactly 1) to keep precision
        rest = e.sum(-1)
        lse = m.squeeze(-1) + torch.log1p(rest)
        target = torch.where(valid, labels, 0).long().unsqueeze(-1)
        l_y = l.gather(-1, target).squeeze(-1)
        loss = (m.squeeze(-1) - l_y) + torch.log1p(rest)
        loss = torch.where(valid, loss, 0.0)
        ctx.save_for_backward(logits, target, valid, lse)
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        logits, target, valid, lse = ctx.saved_tensors
        x = logits.float()
        p = torch.exp(torch.sign(x) * torch.log1p(x.abs()) - lse.unsqueeze(-1))
        p.scatter_add_(-1, target, torch.full_like(target, -1.0, dtype=p.dtype))
        g = p / (1.0 + x.abs())
        g = g * torch.where(valid, grad_loss, 0.0).unsqueeze(-1)
        return g.to(logits.dtype), None, None


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_LABEL_ID) -> torch.Tensor:
    """Per-token stablemax cross-entropy in float32, 0 where labels == ignore_index. Shape of labels."""
    return _StablemaxCE.apply(logits, labels, labels != ignore_index)


def softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_LABEL_ID) -> torch.Tensor:
    """Per-token softmax cross-entropy in float32, 0 where labels == ignore_index."""
    flat = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.long().reshape(-1),
                           ignore_index=ignore_index, reduction="none")
    return flat.view(labels.shape)


LOSS_FUNCTIONS = {
    "stablemax_cross_entropy": stablemax_cross_entropy,
    "softmax_cross_entropy": softmax_cross_entropy,
}


def act_loss(outputs: Dict[str, torch.Tensor], labels: torch.Tensor, halted: torch.Tensor, steps: torch.Tensor,
             loss_type: str = "stablemax_cross_entropy", ignore_index: int = IGNORE_LABEL_ID
             ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Loss and metrics of one ACT step.

    outputs: the model's dict (logits, q_halt_logits, q_continue_logits[, target_q_continue]);
    labels, halted, steps: from the carry the model returned (`carry.current_data["labels"]`, ...);
    labels must be a signed integer tensor whose ignored positions equal `ignore_index`
    (upstream's batches map the dataset's ignore label 0 to -100).
    Returns (total loss, metrics); metric tensors are detached sums plus `count`.
    """
    logits = outputs["logits"]
    q_halt = outputs["q_halt_logits"]

    with torch.no_grad():
        mask = labels != ignore_index
        counts = mask.sum(-1)
        preds = logits.argmax(-1)
        correct = mask & (preds == labels)
        seq_correct = correct.sum(-1) == counts
        valid = halted & (counts > 0)
        divisor = counts.clamp_min(1)
        metrics = {
            "count": valid.sum(),
            "token_accuracy": torch.where(valid, correct.sum(-1).float() / divisor, 0.0).sum(),
            "exact_accuracy": (valid & seq_correct).sum(),
            "q_halt_accuracy": (valid & ((q_halt >= 0) == seq_correct)).sum(),
            "steps": torch.where(valid, steps, 0).sum(),
        }

    per_token = LOSS_FUNCTIONS[loss_type](logits, labels, ignore_index)
    lm_loss = (per_token.sum(-1) / divisor).sum()
    q_halt_loss = F.binary_cross_entropy_with_logits(q_halt, seq_correct.to(q_halt.dtype), reduction="sum")
    total = lm_loss + 0.5 * q_halt_loss
    metrics["lm_loss"] = lm_loss.detach()
    metrics["q_halt_loss"] = q_halt_loss.detach()
    if "target_q_continue" in outputs:
        q_continue_loss = F.binary_cross_entropy_with_logits(
            outputs["q_continue_logits"], outputs["target_q_continue"], reduction="sum")
        total = total + 0.5 * q_continue_loss
        metrics["q_continue_loss"] = q_continue_loss.detach()
    return total, metrics
