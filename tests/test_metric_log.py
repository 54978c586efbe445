"""The record a training logs per interval (trm_kaggle.train.metric_log.summarise)."""

from __future__ import annotations

import pytest
import torch

from trm_kaggle.model.losses import act_loss
from trm_kaggle.train.metric_log import summarise


@pytest.mark.parametrize("steps_logged", [1, 3])
def test_the_losses_parts_add_up_to_the_loss_whatever_share_of_rows_halted(steps_logged):
    """lm_loss and q_halt_loss are sums over every row, as the loss is, but were divided by the rows that halted
    alone: with one row in eight halted lm_loss read 6x the loss it is part of, and it moved with log_interval.
    Each is now per row of the batch, as upstream divides them: loss = lm_loss + q_halt_loss / 2."""
    torch.manual_seed(0)
    batch, seq, vocab = 8, 5, 6
    sums = {"loss": 0.0, "steps_logged": steps_logged}
    for _ in range(steps_logged):
        outputs = {"logits": torch.randn(batch, seq, vocab), "q_halt_logits": torch.randn(batch)}
        labels = torch.randint(0, vocab, (batch, seq))
        halted = torch.zeros(batch, dtype=torch.bool)
        halted[0] = True  # one row of eight halted
        total, metrics = act_loss(outputs, labels, halted, torch.full((batch,), 2))
        sums["loss"] += float(total)
        for name, value in metrics.items():
            sums[name] = sums.get(name, 0.0) + float(value)
    record = summarise(sums, step=steps_logged, epoch=0.1, lr=1e-3, global_batch=batch)
    assert record["halted_examples"] == steps_logged
    assert record["lm_loss"] + 0.5 * record["q_halt_loss"] == pytest.approx(record["loss"], rel=1e-6)
    assert record["lm_loss"] < record["loss"]
