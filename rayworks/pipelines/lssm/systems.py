"""The true systems of the study and their simulation (our reconstructed CPU recipe, docs/lssm.md).

- S1 (the paper's synthetic system): n = p = m = 10, A = 0.8 · anti-diagonal,
  B = C = D = 2 I.
- S2 (reconstructed): n = 8, p = 4, m = 2; random sparse A (density 0.2, spectral radius
  0.9), sparse B, C (density 0.5), D = 0. Drawn per seed.
- S3 (reconstructed; the paper's non-invertible case, App. I): n = p = m = 6, random
  sparse A (density 0.3, spectral radius 0.9) with one row zeroed so A is singular,
  B = C = D = 2 I. Drawn per seed.

Noise: R = Q = sigma² I; inputs u_t ~ N(0, I); x_0 = 0. The sequence of length T is split
2:1 into train / test (the paper's split); the last `val_fraction` of the train segment is
held out as a validation segment (reconstructed; the paper states no validation split), on
which knobs such as the truncation threshold are chosen. Order in time: fit | val | test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from rayworks.pipelines.lssm.kalman import LSSM

SystemName = Literal["s1", "s2", "s3"]


@dataclass(frozen=True)
class Dataset:
    """One simulated sequence split fit | val | test; `x_train` is the true state (for Φ̂ on S2).

    `u_train`, `y_train` are the segment the models are fitted on (the train share minus the
    validation segment); `u_val`, `y_val` follow it in time and are empty when
    `val_fraction = 0`.
    """

    u_train: np.ndarray  # (T_fit, m)
    y_train: np.ndarray  # (T_fit, p)
    u_test: np.ndarray  # (T_test, m)
    y_test: np.ndarray  # (T_test, p)
    x_train: np.ndarray  # (T_fit + 1, n), index 0 = x_0
    u_val: np.ndarray  # (T_val, m)
    y_val: np.ndarray  # (T_val, p)

    def with_(self, **changes: np.ndarray) -> Dataset:
        return replace(self, **changes)


def _noise(n: int, p: int, sigma: float) -> dict[str, np.ndarray]:
    return {"r": np.full(n, sigma**2), "q": np.full(p, sigma**2)}


def _init(n: int) -> dict[str, np.ndarray]:
    return {"mu0": np.zeros(n), "P0": 1e-6 * np.eye(n)}


def _sparse(rng: np.random.Generator, shape: tuple[int, int], density: float) -> np.ndarray:
    """Entries ±U[0.5, 1] on a random support; every column keeps at least one entry."""
    mask = rng.random(shape) < density
    mask[rng.integers(shape[0], size=shape[1]), np.arange(shape[1])] = True
    values = rng.uniform(0.5, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    return np.where(mask, values, 0.0)


def _scaled_sparse_a(rng: np.random.Generator, n: int, density: float, zero_row: bool):
    """Sparse A rescaled to spectral radius 0.9 (redrawn while nilpotent)."""
    while True:
        A = _sparse(rng, (n, n), density)
        if zero_row:
            A[rng.integers(n)] = 0.0
        rho = float(np.abs(np.linalg.eigvals(A)).max())
        if rho > 1e-3:
            return 0.9 * A / rho


def make_system(name: SystemName, sigma: float, seed: int) -> LSSM:
    """The true LSSM of family `name` at noise level sigma (S2, S3 drawn from `seed`)."""
    rng = np.random.default_rng([seed, 7])
    if name == "s1":
        n = 10
        eye = 2.0 * np.eye(n)
        A = 0.8 * np.fliplr(np.eye(n))
        return LSSM(A=A, B=eye, C=eye, D=eye, **_noise(n, n, sigma), **_init(n))
    if name == "s2":
        n, p, m = 8, 4, 2
        A = _scaled_sparse_a(rng, n, 0.2, zero_row=False)
        B = _sparse(rng, (n, m), 0.5)
        C = _sparse(rng, (p, n), 0.5)
        return LSSM(A=A, B=B, C=C, D=np.zeros((p, m)), **_noise(n, p, sigma), **_init(n))
    if name == "s3":
        n = 6
        eye = 2.0 * np.eye(n)
        A = _scaled_sparse_a(rng, n, 0.3, zero_row=True)
        return LSSM(A=A, B=eye, C=eye, D=eye, **_noise(n, n, sigma), **_init(n))
    raise ValueError(f"system={name!r} is unknown (s1, s2, s3)")


def simulate(model: LSSM, T: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw u (T, m), x (T+1, n), y (T, p) from `model` with seeded noise."""
    rng = np.random.default_rng([seed, 11])
    n, m, p = model.n, model.B.shape[1], model.C.shape[0]
    u = rng.standard_normal((T, m))
    eps = rng.standard_normal((T, n)) * np.sqrt(model.r)
    om = rng.standard_normal((T, p)) * np.sqrt(model.q)
    x = np.empty((T + 1, n))
    x[0] = model.mu0 + np.linalg.cholesky(model.P0) @ rng.standard_normal(n)
    drive = u @ model.B.T + eps
    for t in range(T):
        x[t + 1] = model.A @ x[t] + drive[t]
    y = x[1:] @ model.C.T + u @ model.D.T + om
    return u, x, y


def make_dataset(
    model: LSSM, T: int, train_fraction: float, seed: int, val_fraction: float = 0.0
) -> Dataset:
    """Simulate T steps; the first `train_fraction` is train (paper: 2/3), of which the last
    `val_fraction` is the validation segment; the rest is test."""
    u, x, y = simulate(model, T, seed)
    k = round(train_fraction * T)
    f = k - round(val_fraction * k)
    return Dataset(u[:f], y[:f], u[k:], y[k:], x[: f + 1], u[f:k], y[f:k])
