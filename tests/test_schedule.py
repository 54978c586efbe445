"""The fine-tuning schedule: which steps train the puzzle rows alone and which every weight."""

import pytest

from trm_kaggle.solve.schedule import MODES, Phase, finetune_phases, steps_by_kind


def test_every_mode_has_a_schedule():
    assert set(MODES) == {"embeddings-then-all", "all", "embeddings", "none"}
    assert finetune_phases("none", 0.5, 100) == []
    assert finetune_phases("embeddings", 0.5, 100) == [Phase(True, 100)]
    assert finetune_phases("all", 0.5, 100) == [Phase(False, 100)]
    assert finetune_phases("embeddings-then-all", 0.5, 100) == [Phase(True, 50), Phase(False, 100)]
    assert finetune_phases("all", 0.5, 0) == []


@pytest.mark.parametrize("fraction, steps, switch", [
    (0.5, 10, 5), (0.25, 10, 3),  # 2.5 rounds up
    (0.3, 10, 3), (0.2, 7, 1),  # 1.4 rounds down
    (0.5, 7, 4), (0.1, 4, 0), (0.9, 4, 4), (1 / 3, 6, 2),
])
def test_the_switch_step_is_the_fraction_of_steps_rounded_half_up(fraction, steps, switch):
    phases = finetune_phases("embeddings-then-all", fraction, steps)
    frozen, weights = steps_by_kind(phases)
    assert (frozen, weights) == (switch, steps - switch)
    assert phases[-1].until_step == steps
    if 0 < switch < steps:
        assert phases == [Phase(True, switch), Phase(False, steps)]


def test_fractions_zero_and_one_are_the_plain_modes():
    assert finetune_phases("embeddings-then-all", 0.0, 20) == finetune_phases("all", 0.5, 20)
    assert finetune_phases("embeddings-then-all", 1.0, 20) == finetune_phases("embeddings", 0.5, 20)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown fine-tuning mode"):
        finetune_phases("rows", 0.5, 10)
