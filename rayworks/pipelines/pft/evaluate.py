"""Per-subject scores (card §2 metrics) and their 95% intervals over subjects x seeds."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def scores(y: np.ndarray, pred: np.ndarray, n_classes: int) -> dict[str, float]:
    """Accuracy, macro-F1 over all classes, expressive recall (mean recall of the non-neutral
    classes 1..K-1), neutral recall (class 0) and the share of frames predicted neutral."""
    conf = np.zeros((n_classes, n_classes))
    np.add.at(conf, (y, pred), 1)
    tp = np.diag(conf)
    support, predicted = conf.sum(1), conf.sum(0)
    recall = np.divide(tp, support, out=np.zeros(n_classes), where=support > 0)
    precision = np.divide(tp, predicted, out=np.zeros(n_classes), where=predicted > 0)
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros(n_classes), where=denom > 0)
    return {
        "accuracy": float(tp.sum() / len(y)),
        "macro_f1": float(f1.mean()),
        "expressive_recall": float(recall[1:].mean()),
        "neutral_recall": float(recall[0]),
        "predicted_neutral": float((pred == 0).mean()),
    }


def mean_ci(values: list[float] | np.ndarray) -> tuple[float, float, float]:
    """Mean and two-sided 95% Student-t interval (zero width for a single value)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return mean, mean - half, mean + half
