"""The alignment teacher: monotonic alignment search (MAS, Glow-TTS / StyleTTS2 training)
over a small Viterbi-trained aligner. Used only to make training durations; dropped at
inference, where the duration predictor's output replaces it.

The aligner (reconstructed; StyleTTS2 uses an ASR-CNN with seq2seq attention): one mean
log-mel vector per phoneme symbol, fit by hard EM — align every utterance with MAS under
log p(frame | phoneme) = -‖m_t - μ_p‖²/2 (mel standardised per utterance), re-estimate the
means from the aligned frames, repeat. Uniform durations start it.
"""

from __future__ import annotations

import numpy as np


def mas(log_lik: np.ndarray) -> np.ndarray:
    """Monotonic alignment search: the path through (Tx, Ty) `log_lik` that maximises the
    summed log-likelihood, every phoneme taking ≥ 1 consecutive frame, in order. Dynamic
    programme over frames, vectorised over phonemes. Returns durations (Tx,), sum = Ty."""
    tx, ty = log_lik.shape
    if ty < tx:
        raise ValueError(f"MAS needs at least one frame per phoneme: {ty} frames < {tx} phonemes")
    q = np.full((tx, ty), -np.inf)
    q[0, 0] = log_lik[0, 0]
    for j in range(1, ty):
        stay = q[:, j - 1]
        move = np.concatenate([[-np.inf], q[:-1, j - 1]])
        q[:, j] = np.maximum(stay, move) + log_lik[:, j]
    durations = np.zeros(tx, dtype=np.int64)
    i = tx - 1
    for j in range(ty - 1, -1, -1):
        durations[i] += 1
        if i > 0 and (i == j or q[i - 1, j - 1] >= q[i, j - 1]) and j > 0:
            i -= 1
    return durations


def uniform_durations(n_tokens: int, n_frames: int) -> np.ndarray:
    edges = np.round(np.linspace(0, n_frames, n_tokens + 1)).astype(np.int64)
    return np.diff(edges)


def _standardise(mel: np.ndarray) -> np.ndarray:
    return (mel - mel.mean(0)) / (mel.std(0) + 1e-3)


def fit_aligner(
    mels: list[np.ndarray], phonemes: list[np.ndarray], vocab_size: int, iters: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Hard-EM aligner. Returns the MAS durations of every utterance and the symbol means."""
    feats = [_standardise(m) for m in mels]
    durations = [uniform_durations(len(p), len(m)) for p, m in zip(phonemes, mels, strict=True)]
    means = np.zeros((vocab_size, mels[0].shape[1]))
    for _ in range(iters):
        sums = np.zeros_like(means)
        counts = np.zeros(vocab_size)
        for f, p, d in zip(feats, phonemes, durations, strict=True):
            frame_sym = np.repeat(p, d)
            np.add.at(sums, frame_sym, f)
            np.add.at(counts, frame_sym, 1.0)
        means = sums / np.maximum(counts, 1.0)[:, None]
        durations = [align(f, p, means) for f, p in zip(feats, phonemes, strict=True)]
    return durations, means


def align(feat: np.ndarray, phonemes: np.ndarray, means: np.ndarray) -> np.ndarray:
    """MAS durations of one standardised utterance under the symbol means."""
    mu = means[phonemes]  # (Tx, M)
    log_lik = -0.5 * (((feat[None] - mu[:, None]) ** 2).sum(-1))  # (Tx, Ty)
    return mas(log_lik)
