"""How long the kernel takes: the step timer and the extrapolation built on it."""

from __future__ import annotations

import pytest
import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.solve.estimate import KAGGLE_LIMIT_S, estimate, format_estimate, seconds_per_call
from trm_kaggle.solve.schedule import MODES

ARCH = ArchConfig(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                  puzzle_emb_len=1, forward_dtype="float32")


def test_step_timer_warms_up_once_then_averages():
    calls = []
    seconds = seconds_per_call(lambda: calls.append(1), torch.device("cpu"), repeats=3)
    assert len(calls) == 4 and seconds >= 0.0


def test_estimate_times_both_kinds_of_step_and_prices_every_mode():
    e = estimate(ARCH, tasks=2, num_aug=1, finetune_steps=10, finetune="embeddings-then-all", embeddings_fraction=0.3,
                 batch_size=2, eval_batch_size=4, seq_len=16, vocab_size=12, repeats=1)
    assert e.finetune_step_s > 0 and e.embeddings_step_s > 0 and e.row_step_s > 0
    # 3 steps on the rows alone, then 7 on every weight
    assert e.finetune_s == pytest.approx(3 * e.embeddings_step_s + 7 * e.finetune_step_s)
    assert e.finetune_seconds("all") == pytest.approx(10 * e.finetune_step_s)
    assert e.finetune_seconds("embeddings") == pytest.approx(10 * e.embeddings_step_s)
    assert e.finetune_seconds("none") == 0.0
    assert e.total_s == e.finetune_s + e.inference_s < KAGGLE_LIMIT_S
    text = format_estimate(e, 2, 1)
    assert "fits in Kaggle's 12 h limit" in text
    assert all(mode in text for mode in MODES) and "* embeddings-then-all" in text


def test_each_kind_of_step_is_timed_with_the_optimizers_submit_builds(monkeypatch):
    """The embeddings step is timed with the optimizers `submit` builds for it: no AdamATan2, SignSGD on the rows."""
    import trm_kaggle.solve.estimate as E

    built = []
    real = E.make_optimizers
    monkeypatch.setattr(E, "make_optimizers", lambda cfg, model: built.append(cfg.freeze_weights) or real(cfg, model))
    estimate(ARCH, tasks=2, num_aug=1, finetune_steps=4, batch_size=2, eval_batch_size=2, seq_len=16, repeats=1)
    assert built == [False, True]


def test_estimate_command_applies_a_recipe(capsys, tmp_path, monkeypatch):
    import trm_kaggle.solve.estimate as E
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel

    export_inference(tmp_path / "w", TinyRecursiveModel(ARCH, 16, 12, 3), arch=ARCH, seq_len=16, vocab_size=12)
    timed, real = [], E.estimate
    monkeypatch.setattr(E, "estimate", lambda arch, **kw: timed.append(arch) or real(arch, **kw))
    assert main(["estimate", "--weights", str(tmp_path / "w"), "--tasks", "2", "--recipe", "nvarc",
                 "--finetune-steps", "4", "--batch-size", "2", "--eval-batch-size", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "num_aug 128, 4 fine-tuning steps (embeddings-then-all)" in out
    assert (timed[0].H_cycles, timed[0].halt_max_steps, timed[0].hidden_size) == (4, 10, ARCH.hidden_size)
    assert main(["estimate", "--tasks", "2"]) == 2
    assert "needs --weights EXPORT_DIR or --preset NAME" in capsys.readouterr().err
