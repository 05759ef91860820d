"""What every solver records: F at each of its iterations, wall-clock, linear solves.

Index 0 is the common warm start (ERM). Gaps are read on the best-so-far curve (every arm
keeps its lowest worst-group loss). Two gap definitions (the paper does not say what the
1% is relative to): `gap_ratio` = (F - OPT)/(F(x₀) - OPT), the headline (what the
third-party reproduction used), and `rel_gap` = (F - OPT)/OPT, reported beside it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Trace:
    """F(x_t), seconds since the solver started and cumulative linear solves, per iteration."""

    values: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    solves: list[int] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)
    x_best: np.ndarray | None = None
    best: float = math.inf

    def add(self, value: float, solves: int, x: np.ndarray) -> None:
        self.values.append(float(value))
        self.seconds.append(time.perf_counter() - self.start)
        self.solves.append(int(solves))
        if value < self.best:
            self.best, self.x_best = float(value), x.copy()

    def best_so_far(self) -> np.ndarray:
        return np.minimum.accumulate(np.asarray(self.values))


def gap_ratio(values: np.ndarray, opt: float) -> np.ndarray:
    """(F - OPT)/(F(x₀) - OPT) on a best-so-far curve (values[0] = F(x₀))."""
    return (values - opt) / max(values[0] - opt, 1e-300)


def rel_gap(values: np.ndarray, opt: float) -> np.ndarray:
    """(F - OPT)/OPT."""
    return (values - opt) / opt


def first_below(gaps: np.ndarray, target: float) -> int | None:
    """First iteration index whose gap is ≤ target, or None."""
    hits = np.flatnonzero(gaps <= target)
    return int(hits[0]) if len(hits) else None


def summarize(trace: Trace, opt: float, target: float) -> dict[str, float]:
    """Iterations, seconds and solves to `target` under both gap definitions, final gaps."""
    best = trace.best_so_far()
    out: dict[str, float] = {"iterations": float(len(best) - 1), "final_F": float(best[-1])}
    for name, gaps in (("", gap_ratio(best, opt)), ("relopt_", rel_gap(best, opt))):
        hit = first_below(gaps, target)
        out[f"{name}iters_to_target"] = math.nan if hit is None else float(hit)
        out[f"{name}seconds_to_target"] = math.nan if hit is None else trace.seconds[hit]
        out[f"{name}solves_to_target"] = math.nan if hit is None else float(trace.solves[hit])
        out[f"{name}final_gap"] = float(gaps[-1])
    out["seconds"] = trace.seconds[-1]
    out["solves"] = float(trace.solves[-1])
    return out
