"""Baselines: exact attention rows, and Performer positive-random-feature attention.

Uniform-landmark Nyström is `structure.build` with `landmarks="uniform"` and exact D, Z
(Nyströmformer-style in spirit: uniform points instead of segment means; reconstructed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def exact_rows(q_rows: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Att rows D⁻¹AV for queries (r, d) against all n keys: O(n d) per row, stable softmax."""
    logits = q_rows @ k.T / np.sqrt(k.shape[1])  # (r, n)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (w @ v) / w.sum(axis=1, keepdims=True)


def exact_row(q_row: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """One exact row (the O(nd) query the structure is timed against)."""
    logits = k @ q_row / np.sqrt(k.shape[1])
    w = np.exp(logits - logits.max())
    return (w @ v) / w.sum()


def positive_features(x: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """log φ(x) = ωᵀx - ‖x‖²/2 - ½ log r for x = row/d^{1/4}: (N, d), (r, d) -> (N, r).

    Performer's positive features (Choromanski et al. 2021, FAVOR+ with i.i.d. rather than
    orthogonal ω): E_ω[φ(x)ᵀφ(y)] = exp(⟨x, y⟩). Kept in log space; callers shift it.
    """
    return x @ omega.T - 0.5 * np.sum(x**2, axis=1, keepdims=True) - 0.5 * np.log(len(omega))


def performer_kernel(q: np.ndarray, k: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """Random-feature estimate of exp(QKᵀ/√d): (a, d), (b, d) -> (a, b)."""
    scale = q.shape[1] ** 0.25
    return (
        np.exp(positive_features(q / scale, omega)) @ np.exp(positive_features(k / scale, omega)).T
    )


@dataclass
class PerformerRows:
    """Preprocessed Performer: ω (r, d), Z = Φ_KᵀV (r, d_v), u = Φ_Kᵀ1 (r,); keys shifted
    by one global constant in log space (it cancels in the ratio)."""

    omega: np.ndarray
    z: np.ndarray
    u: np.ndarray

    def query_many(self, q_rows: np.ndarray) -> np.ndarray:
        logf = positive_features(q_rows / q_rows.shape[1] ** 0.25, self.omega)
        t = np.exp(logf - logf.max(axis=1, keepdims=True))  # per-query shift cancels
        return (t @ self.z) / (t @ self.u)[:, None]

    def query(self, q_row: np.ndarray) -> np.ndarray:
        return self.query_many(q_row[None])[0]


def build_performer(
    k: np.ndarray, v: np.ndarray, features: int, rng: np.random.Generator
) -> PerformerRows:
    """Performer preprocessing with `features` i.i.d. Gaussian ω: O(n r d), reads all rows."""
    omega = rng.standard_normal((features, k.shape[1]))
    logf = positive_features(k / k.shape[1] ** 0.25, omega)
    phi = np.exp(logf - logf.max())
    return PerformerRows(omega=omega, z=phi.T @ v, u=phi.sum(axis=0))


def performer_ops(r: int, d: int, d_v: int) -> int:
    """Multiply-adds of one Performer query: Ωq (rd) + tZ (r d_v) + tu (r)."""
    return r * d + r * d_v + r
