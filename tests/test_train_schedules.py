"""The learning-rate schedule's library functions: their arguments are checked where they are given."""

import pytest

from trm_kaggle.train import load_train_config, schedule_at, total_train_steps


@pytest.fixture(scope="module")
def cfg():
    return load_train_config()


@pytest.mark.parametrize("args, said", [
    ((0, 0.0, 100, float("nan")), r"^lr_factor=nan: expected a number from 0 to 1e\+30"),
    ((0, 0.0, 100, -1.0), r"^lr_factor=-1.0: expected"),
    ((0, 0.0, 100, 1e40), r"^lr_factor=1e\+40: expected"),
    ((-5, 0.0, 100), r"^step=-5: expected a whole number from 0"),
    ((0.5, 0.0, 100), r"^step=0.5: expected a whole number"),
    ((0, 0.0, 0), r"^total_steps=0: expected a whole number from 1"),
    ((0, float("nan"), 100), r"^epoch=nan: expected a number from 0"),
])
def test_schedule_at_names_an_argument_out_of_bounds(cfg, args, said):
    """A NaN factor gave NaN rates, step -5 negative ones and a factor of 1e40 rates above 1e30, without a word."""
    with pytest.raises(ValueError, match=said):
        schedule_at(cfg, *args)


def test_schedule_at_takes_a_train_config_only():
    """A dict was "'dict' object has no attribute 'lr'"."""
    with pytest.raises(TypeError, match=r"^cfg=\{\}: expected a TrainConfig"):
        schedule_at({}, 0, 0.0, 100)


def test_a_factor_whose_rate_passes_the_bound_is_named(cfg):
    big = cfg.model_copy(update={"puzzle_emb_lr": 1e30, "lr_warmup_steps": 0})
    with pytest.raises(ValueError, match=r"^lr_factor=2.0: gives a rate of 2e\+30, above 1e\+30"):
        schedule_at(big, 5, 0.0, 100, 2.0)


def test_schedule_at_in_bounds_is_unchanged(cfg):
    assert schedule_at(cfg, 3, 0.5, 100, 0.5).lr == 0.5 * schedule_at(cfg, 3, 0.5, 100).lr


@pytest.mark.parametrize("args, said", [
    ((1, 10, 1.0, 0), r"^global_batch_size=0: expected a whole number from 1"),
    ((1, 10, float("nan"), 8), r"^mean_puzzle_examples=nan: expected a number from 0"),
    ((1, -10, 1.0, 8), r"^total_groups=-10: expected a whole number from 0"),
    ((1.5, 10, 1.0, 8), r"^epochs=1.5: expected a whole number from 0"),
])
def test_total_train_steps_names_an_argument_out_of_bounds(args, said):
    """0 was a ZeroDivisionError, NaN int()'s error and -10 groups a schedule of 1 step."""
    with pytest.raises(ValueError, match=said):
        total_train_steps(*args)


def test_total_train_steps_in_bounds_is_upstream_s_product():
    assert total_train_steps(3, 10, 2.5, 8) == int(3 * 10 * 2.5 / 8)
