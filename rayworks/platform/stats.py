"""The intervals every report states: Student-t 95% intervals of a mean and of paired
differences (scipy's t quantiles at every sample size; no normal approximation).

Pairing removes the between-item variance, which dominates when two decoders or two cache
policies see the same prompts, so claims over shared items are checked on `paired_ci`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile with `df` degrees of freedom."""
    return float(stats.t.ppf(0.975, df))


def mean_ci(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """(mean, 95% low, high) of the finite values; one value has a zero-width interval and
    none gives NaNs."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, mean, mean
    half = t95(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return mean, mean - half, mean + half


def paired_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(mean of a - b, 95% low, high) over paired samples; one pair has an infinite one."""
    if len(a) != len(b) or not len(a):
        raise ValueError(
            f"paired_ci needs two equally long, non-empty lists (got {len(a)}, {len(b)})"
        )
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    mean = float(d.mean())
    if len(d) < 2:
        return mean, -math.inf, math.inf
    half = t95(len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return mean, mean - half, mean + half
