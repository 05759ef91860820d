"""Paired differences between two arms scored on the same items (prompts, tasks, seeds).

Pairing removes the between-item variance, which dominates when two decoders or two
cache policies see the same prompts: the normal-approximation 95% interval of the mean
difference is what the pipelines' claims are checked against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def paired_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(mean of a - b, 95% CI low, high) over paired samples; an infinite interval for one."""
    if len(a) != len(b) or not len(a):
        raise ValueError(f"paired_ci needs two equally long, non-empty lists (got {len(a)}, "
                         f"{len(b)})")  # fmt: skip
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    half = 1.96 * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("inf")
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)
