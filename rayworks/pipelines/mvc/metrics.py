"""Quality metrics: mel cepstral distortion (teacher-forced and DTW-aligned), log-F0 RMSE,
log-duration error, edit distance (for the phoneme error rate), log-log slopes."""

from __future__ import annotations

import numpy as np
from scipy.fft import dct

N_CEPS = 13
MCD_SCALE = 10.0 / np.log(10.0) * np.sqrt(2.0)  # dB, the usual MCD constant


def mel_cepstrum(log_mel: np.ndarray) -> np.ndarray:
    """(T, 80) natural-log mel → (T, 13) cepstra c1..c13 (orthonormal DCT-II; c0, the
    energy term, left out as in standard MCD)."""
    return dct(log_mel, type=2, norm="ortho", axis=-1)[:, 1 : N_CEPS + 1]


def mcd(pred: np.ndarray, target: np.ndarray) -> float:
    """Frame-aligned MCD (dB) between two log-mels of equal length."""
    diff = mel_cepstrum(pred) - mel_cepstrum(target)
    return float(MCD_SCALE * np.sqrt((diff**2).sum(1)).mean())


def dtw_path_cost(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DTW with steps (i-1, j), (i-1, j-1), (i-1, j-2): every predicted frame i maps to one
    target frame, the target advancing 0-2 frames per step (rows vectorised). Returns the
    matched (i, j) index arrays of the best path from (0, 0) to (n-1, m-1)."""
    n, m = cost.shape
    acc = np.full((n, m), np.inf)
    back = np.zeros((n, m), dtype=np.int64)
    acc[0, 0] = cost[0, 0]
    for i in range(1, n):
        prev = acc[i - 1]
        options = np.stack([prev, np.r_[np.inf, prev[:-1]], np.r_[np.inf, np.inf, prev[:-2]]])
        back[i] = options.argmin(0)
        acc[i] = options.min(0) + cost[i]
    if not np.isfinite(acc[-1, -1]):  # target more than twice as long: plain diagonal map
        return np.arange(n), np.round(np.linspace(0, m - 1, n)).astype(np.int64)
    js = np.zeros(n, dtype=np.int64)
    js[-1] = m - 1
    for i in range(n - 1, 0, -1):
        js[i - 1] = js[i] - back[i, js[i]]
    return np.arange(n), js


def mcd_dtw(pred: np.ndarray, target: np.ndarray) -> float:
    """MCD (dB) after DTW alignment on the cepstra (free-running synthesis)."""
    cp, ct = mel_cepstrum(pred), mel_cepstrum(target)
    cost = np.sqrt(((cp[:, None] - ct[None]) ** 2).sum(-1))
    i, j = dtw_path_cost(cost)
    return float(MCD_SCALE * cost[i, j].mean())


def log_f0_rmse(pred_lf0: np.ndarray, target_f0: np.ndarray) -> tuple[float, int]:
    """Σ squared ln-F0 error over ground-truth voiced frames, and their count (pool these
    over utterances, then take the root)."""
    voiced = target_f0 > 0
    err = pred_lf0[voiced] - np.log(target_f0[voiced])
    return float((err**2).sum()), int(voiced.sum())


def log_duration_mae(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean |ln(1 + d̂) - ln(1 + d)| over phonemes (frames)."""
    return float(np.abs(np.log1p(pred) - np.log1p(target)).mean())


def edit_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Levenshtein distance, one row at a time (insertions resolved by a running min)."""
    row = np.arange(len(b) + 1)
    for i, x in enumerate(a, 1):
        sub = row[:-1] + (np.asarray(b) != x)
        dele = row[1:] + 1
        best = np.r_[i, np.minimum(sub, dele)]
        # insertions: row[j] = min(best[j], row[j-1] + 1) = min_k≤j (best[k] + j - k)
        ramp = np.arange(len(b) + 1)
        row = np.minimum.accumulate(best - ramp) + ramp
    return int(row[-1])


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x (1 = linear growth, 2 = quadratic)."""
    if len(xs) < 2:
        return float("nan")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])
