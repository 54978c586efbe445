"""95 % Wilson intervals against hand-worked values, and the breakdown of test outputs by category."""

import math

import numpy as np
import pytest

from trm_kaggle.evaluate.stats import SIZE_EDGES, category_breakdown, size_bucket, wilson_interval

Z2 = 1.959963984540054 ** 2


def test_wilson_interval_hand_worked_values():
    # k = 0: the lower end is 0 and the upper end z^2 / (n + z^2) = 3.841459 / 13.841459
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.277533), abs=1e-6)
    # k = n: the mirror image
    assert wilson_interval(10, 10) == pytest.approx((0.722467, 1.0), abs=1e-6)
    # 5 of 10: centre 0.5, half-width z / 1.384146 * sqrt(0.025 + 0.009604) = 0.263407
    assert wilson_interval(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    # 3 of 20: p = 0.15, centre (0.15 + 0.096036) / 1.192073 = 0.206394, half = 1.644181 * 0.093477 = 0.154026
    assert wilson_interval(3, 20) == pytest.approx((0.052369, 0.360419), abs=1e-6)
    # 1 of 167 (an ARC-AGI-2 evaluation's test outputs, one solved)
    p, n = 1 / 167, 167
    centre = (p + Z2 / (2 * n)) / (1 + Z2 / n)
    half = math.sqrt(Z2) / (1 + Z2 / n) * math.sqrt(p * (1 - p) / n + Z2 / (4 * n * n))
    assert wilson_interval(1, 167) == pytest.approx((centre - half, centre + half))
    assert wilson_interval(1, 167) == pytest.approx((0.001058, 0.033134), abs=1e-6)


def test_wilson_interval_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(1.5, 3)  # a sum of fractions (pass@2 over tasks) is accepted
    assert lo < 0.5 < hi and hi - lo > wilson_interval(5, 10)[1] - wilson_interval(5, 10)[0]  # fewer tasks: wider
    with pytest.raises(ValueError):
        wilson_interval(4, 3)
    with pytest.raises(ValueError):  # 5 of none is no interval either (it was "0 to 1")
        wilson_interval(5, 0)


def test_size_buckets_follow_the_stated_edges():
    assert SIZE_EDGES == (10, 20, 30)
    assert [size_bucket(s) for s in [(1, 1), (10, 3), (11, 2), (5, 20), (21, 21), (30, 30)]] == \
        ["1-10", "1-10", "11-20", "11-20", "21-30", "21-30"]


def test_breakdown_counts_each_output_in_its_categories():
    g = lambda h, w: np.zeros((h, w), dtype=np.uint8)  # noqa: E731
    slots = [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    inputs = {("a", 0): g(3, 3), ("a", 1): g(3, 3), ("b", 0): g(5, 5), ("c", 0): g(2, 2)}
    truths = {("a", 0): g(3, 3), ("a", 1): g(6, 6), ("b", 0): g(15, 12), ("c", 0): g(25, 2)}
    solved = {("a", 0): True, ("a", 1): False, ("b", 0): True}  # ("c", 0) never predicted: unsolved
    b = category_breakdown(slots, inputs, truths, solved)
    assert (b["same shape"]["solved"], b["same shape"]["test_outputs"]) == (1, 1)
    assert (b["reshaped"]["solved"], b["reshaped"]["test_outputs"]) == (1, 3)
    assert (b["largest side 1-10"]["solved"], b["largest side 1-10"]["test_outputs"]) == (1, 2)
    assert (b["largest side 11-20"]["solved"], b["largest side 11-20"]["test_outputs"]) == (1, 1)
    assert (b["largest side 21-30"]["solved"], b["largest side 21-30"]["test_outputs"]) == (0, 1)
    assert b["reshaped"]["ci95"] == pytest.approx(list(wilson_interval(1, 3)))
    assert b["reshaped"]["arc_prize_score"] == pytest.approx(1 / 3)
