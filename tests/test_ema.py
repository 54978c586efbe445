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
