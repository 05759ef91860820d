"""Student-t intervals of means and of paired differences (`platform/stats.py`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayworks.platform.stats import mean_ci, paired_ci, t95


def test_t_quantiles_match_the_printed_table() -> None:
    # two-sided 95% Student-t quantiles from a printed table, and the normal limit
    table = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 30: 2.042, 120: 1.980}
    assert {df: round(t95(df), 3) for df in table} == table
    assert t95(10**6) == pytest.approx(1.95996, abs=1e-4)


def test_mean_ci_is_the_t_interval_of_the_finite_values() -> None:
    values = [1.0, 2.0, 3.0, float("nan")]
    mean, lo, hi = mean_ci(values)
    half = 4.302652729911275 * 1.0 / math.sqrt(3)
    assert (mean, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)
    assert all(math.isnan(x) for x in mean_ci([float("nan")]))


def test_paired_ci_of_differences_uses_t_not_z() -> None:
    mean, lo, hi = paired_ci([1, 1, 0, 1], [0, 1, 0, 0])
    half = 3.182446305284263 * 0.5773502691896258 / 2  # t(0.975, 3) x sd / sqrt(4)
    assert (mean, lo, hi) == pytest.approx((0.5, 0.5 - half, 0.5 + half))
    # pairing: a shared per-item offset leaves the interval unchanged
    rng = np.random.default_rng(0)
    a, b, offset = rng.normal(size=20), rng.normal(size=20), rng.normal(scale=100, size=20)
    assert paired_ci(a + offset, b + offset) == pytest.approx(paired_ci(a, b))


def test_identical_arms_give_a_zero_width_interval_and_one_item_an_infinite_one() -> None:
    assert paired_ci([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)
    mean, lo, hi = paired_ci([1], [0])
    assert mean == 1 and math.isinf(lo) and math.isinf(hi)


def test_unequal_or_empty_lists_are_an_error() -> None:
    with pytest.raises(ValueError, match="equally long"):
        paired_ci([1, 0], [1])
    with pytest.raises(ValueError, match="non-empty"):
        paired_ci([], [])
