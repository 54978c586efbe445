"""The exponential moving average of the weights: its rate is checked where it is given."""

import numpy as np
import pytest
import torch

from trm_kaggle.optim import EMA


@pytest.mark.parametrize("rate", [float("nan"), 2.0, -1.0, float("inf"), 1.0])
def test_a_rate_outside_0_to_1_is_refused(rate):
    """EMA(rate=nan) made the average NaN at its first update; 2.0 and -1.0 ran away, inf gave NaN."""
    with pytest.raises(ValueError, match=r"^rate=\S+: expected a number from 0 up to, not including, 1"):
        EMA(torch.nn.Linear(2, 2), rate=rate)


def test_a_numpy_rate_averages_as_a_float():
    model = torch.nn.Linear(2, 2)
    ema = EMA(model, rate=np.float64(0.5))
    start = ema.shadow["weight"].clone()
    with torch.no_grad():
        model.weight.add_(2.0)
    ema.update(model)
    torch.testing.assert_close(ema.shadow["weight"], start + 1.0)


def test_an_average_of_no_parameters_is_refused_where_it_is_made():
    """EMA(a module without parameters) was built without a word; its update was torch's "Tensor list must have at
    least one tensor"."""
    with pytest.raises(ValueError, match=r"^model=Module: has no parameters to average"):
        EMA(torch.nn.Module())
    with pytest.raises(TypeError, match=r"^model=None: expected a torch.nn.Module"):
        EMA(None)


def test_frozen_parameters_keep_their_average():
    """The average of weights frozen when it is made (freeze_weights) stays as it is (a loaded one included)."""
    model = torch.nn.Linear(2, 2)
    model.requires_grad_(False)
    ema = EMA(model, 0.5)
    ema.load_state_dict({"weight": torch.ones(2, 2), "bias": torch.zeros(2)})
    ema.update(model)
    assert torch.equal(ema.shadow["weight"], torch.ones(2, 2))


def test_a_tensor_rate_is_kept_as_a_float():
    assert type(EMA(torch.nn.Linear(2, 2), torch.tensor(0.9)).rate) is float


@pytest.mark.parametrize("state, said", [
    ({"weight": torch.arange(3.0), "bias": torch.zeros(3)}, r"^EMA state weight: .*expected a floating-point tensor "
                                                             r"of shape \(3, 3\)"),
    ({"weight": torch.zeros(3, 3), "bias": torch.zeros(3), "nosuch": torch.zeros(1)},
     r"^EMA state holds names this average has not: nosuch"),
    ({"weight": torch.zeros(3, 3)}, r"^EMA state lacks bias"),
    ({"weight": torch.full((3, 3), float("nan")), "bias": torch.zeros(3)}, r"^EMA state weight: holds NaN or inf"),
    ({"weight": torch.zeros(3, 3, dtype=torch.long), "bias": torch.zeros(3)}, r"^EMA state weight: "),
])
def test_a_loaded_average_not_of_this_model_is_refused_naming_the_tensor(state, said):
    """A shape (3,) was broadcast into a (3, 3) average, NaN taken, an unknown name ignored, without a word."""
    ema = EMA(torch.nn.Linear(3, 3))
    before = {n: t.clone() for n, t in ema.shadow.items()}
    with pytest.raises(ValueError, match=said):
        ema.load_state_dict(state)
    assert all(torch.equal(before[n], ema.shadow[n]) for n in before)  # nothing half-loaded


def test_a_loaded_average_that_is_no_dict_is_named():
    with pytest.raises(TypeError, match=r"^state=None: expected a dict of tensors"):
        EMA(torch.nn.Linear(3, 3)).load_state_dict(None)


def test_an_update_from_another_model_is_named():
    """torch's "The size of tensor a (3) must match the size of tensor b (4)" named neither the model nor the EMA."""
    with pytest.raises(ValueError, match=r"^model=Linear: not the model this average was made of"):
        EMA(torch.nn.Linear(3, 3)).update(torch.nn.Linear(4, 4))
