"""Paired differences and their normal-approximation 95% interval."""

from __future__ import annotations

import math

import pytest

from rayworks.evals.paired import paired_ci


def test_paired_ci_of_differences() -> None:
    mean, lo, hi = paired_ci([1, 1, 0, 1], [0, 1, 0, 0])
    assert mean == pytest.approx(0.5)
    assert lo == pytest.approx(0.5 - 1.96 * 0.5773502691896258 / 2)
    assert hi == pytest.approx(0.5 + 1.96 * 0.5773502691896258 / 2)


def test_identical_arms_give_a_zero_width_interval_and_one_item_an_infinite_one() -> None:
    assert paired_ci([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)
    mean, lo, hi = paired_ci([1], [0])
    assert mean == 1 and math.isinf(lo) and math.isinf(hi)


def test_unequal_or_empty_lists_are_an_error() -> None:
    with pytest.raises(ValueError, match="equally long"):
        paired_ci([1, 0], [1])
    with pytest.raises(ValueError, match="non-empty"):
        paired_ci([], [])
