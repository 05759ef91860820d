"""The truncation threshold, chosen on the validation segment (reconstructed).

The paper sets entries below a preset threshold to zero after each M-step (App. G) but
does not state the value. We sweep a grid instead of fixing one:

1. MAP-EM is fitted on the fit segment once per threshold in the grid, every fit from the
   same start and with the same stopping rule (`EMOptions.tol`, `max_iter`).
2. Each fit is scored by the paper's MRE of the one-step-ahead Kalman predictor on the
   validation segment: the filter runs over fit + val, only the val part is scored.
3. The threshold with the lowest validation MRE wins; ties go to the larger threshold
   (the sparser model).

Nothing here reads the test segment, so the chosen threshold cannot depend on it
(tested). MLE + threshold, the reviewers' baseline, is then run at the same chosen value
(`trial.py`), so the two arms differ only in the prior.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from rayworks.pipelines.lssm.kalman import LSSM, predict_one_step
from rayworks.pipelines.lssm.map_em import EMOptions, EMResult, fit_em
from rayworks.pipelines.lssm.systems import Dataset


def mre(y: np.ndarray, y_hat: np.ndarray) -> float:
    """MRE = (1/T) Σ_t ‖y_t - ŷ_t‖² / ‖y_t‖² (paper's metric)."""
    return float(np.mean(((y - y_hat) ** 2).sum(1) / (y**2).sum(1)))


def validation_mre(model: LSSM, ds: Dataset) -> float:
    """One-step-ahead MRE on the validation segment (filter over fit + val; val scored)."""
    if len(ds.y_val) == 0:
        raise ValueError("the dataset has no validation segment (val_fraction = 0)")
    u = np.concatenate([ds.u_train, ds.u_val])
    y = np.concatenate([ds.y_train, ds.y_val])
    return mre(ds.y_val, predict_one_step(model, u, y)[len(ds.y_train) :])


def choose(thresholds: list[float], scores: list[float]) -> int:
    """Index of the lowest score; among equal scores the largest threshold."""
    return min(range(len(thresholds)), key=lambda k: (scores[k], -thresholds[k]))


@dataclass(frozen=True)
class ThresholdSweep:
    thresholds: list[float]
    val_mre: list[float]  # validation MRE of the MAP-EM fit at each threshold
    fits: list[EMResult]  # MAP-EM fit at each threshold (fit segment only)
    index: int  # position of the chosen threshold

    @property
    def threshold(self) -> float:
        return self.thresholds[self.index]

    @property
    def chosen(self) -> EMResult:
        return self.fits[self.index]


def sweep_threshold(
    init: LSSM, ds: Dataset, thresholds: list[float], opts: EMOptions
) -> ThresholdSweep:
    """Fit MAP-EM (`opts`, its threshold replaced) at every threshold; choose on validation.

    A one-value grid needs no choice and runs without a validation segment (score NaN).
    """
    grid = list(thresholds)
    fits = [fit_em(init, ds.u_train, ds.y_train, replace(opts, threshold=t)) for t in grid]
    if len(ds.y_val) == 0 and len(grid) == 1:
        return ThresholdSweep(grid, [float("nan")], fits, 0)
    scores = [validation_mre(f.model, ds) for f in fits]
    return ThresholdSweep(grid, scores, fits, choose(grid, scores))
