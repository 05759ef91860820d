"""Per-subject scores (accuracy, macro-F1, recalls) and their 95% intervals over subjects x
seeds."""

from __future__ import annotations

import numpy as np


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
