"""Kalman filter / RTS smoother against brute-force Gaussian conditioning (T = 4)."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.pipelines.lssm.kalman import LSSM, covariances, log_likelihood, smooth
from rayworks.pipelines.lssm.systems import simulate


def _model(seed: int, n: int = 3, m: int = 2, p: int = 2) -> LSSM:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n))
    A *= 0.8 / np.abs(np.linalg.eigvals(A)).max()
    L = rng.standard_normal((n, n))
    return LSSM(
        A=A,
        B=rng.standard_normal((n, m)),
        C=rng.standard_normal((p, n)),
        D=rng.standard_normal((p, m)),
        r=rng.uniform(0.1, 0.5, n),
        q=rng.uniform(0.1, 0.5, p),
        mu0=rng.standard_normal(n),
        P0=L @ L.T / n + 0.1 * np.eye(n),
    )


def _joint(model: LSSM, u: np.ndarray):
    """Mean and covariance of (x_0..x_T, y_1..y_T) as one dense Gaussian."""
    n, p, T = model.n, model.C.shape[0], len(u)
    # x = M ξ + c with ξ = (x_0 - μ0, ε_1..ε_T); y = H x + d + ω
    M = np.zeros(((T + 1) * n, (T + 1) * n))
    for t in range(T + 1):
        for s in range(t + 1):
            M[t * n : (t + 1) * n, s * n : (s + 1) * n] = np.linalg.matrix_power(model.A, t - s)
    c = np.zeros((T + 1) * n)
    c[:n] = model.mu0
    for t in range(1, T + 1):
        c[t * n : (t + 1) * n] = model.A @ c[(t - 1) * n : t * n] + model.B @ u[t - 1]
    cov_xi = np.zeros_like(M)
    cov_xi[:n, :n] = model.P0
    for t in range(1, T + 1):
        cov_xi[t * n : (t + 1) * n, t * n : (t + 1) * n] = np.diag(model.r)
    Sx = M @ cov_xi @ M.T
    H = np.zeros((T * p, (T + 1) * n))
    for t in range(1, T + 1):
        H[(t - 1) * p : t * p, t * n : (t + 1) * n] = model.C
    my = H @ c + (u @ model.D.T).ravel()
    Sy = H @ Sx @ H.T + np.kron(np.eye(T), np.diag(model.q))
    return c, Sx, my, Sy, Sx @ H.T


def test_smoother_matches_dense_conditioning() -> None:
    model, T = _model(0), 4
    u, _, y = simulate(model, T, seed=3)
    mx, Sx, my, Sy, Sxy = _joint(model, u)
    gain = Sxy @ np.linalg.inv(Sy)
    post_mean = mx + gain @ (y.ravel() - my)
    post_cov = Sx - gain @ Sxy.T
    sm = smooth(model, u, y)
    n = model.n
    np.testing.assert_allclose(sm.mean.ravel(), post_mean, atol=1e-9)
    for t in range(T + 1):
        block = post_cov[t * n : (t + 1) * n, t * n : (t + 1) * n]
        np.testing.assert_allclose(sm.cov[t], block, atol=1e-9)
    for t in range(1, T + 1):  # Cov(x_t, x_{t-1} | y)
        block = post_cov[t * n : (t + 1) * n, (t - 1) * n : t * n]
        np.testing.assert_allclose(sm.lag[t], block, atol=1e-9)
    _, logdet = np.linalg.slogdet(2 * np.pi * Sy)
    resid = y.ravel() - my
    dense_ll = -0.5 * (logdet + resid @ np.linalg.solve(Sy, resid))
    assert sm.loglik == pytest.approx(dense_ll, rel=1e-10)
    assert log_likelihood(model, u, y) == pytest.approx(dense_ll, rel=1e-10)


def test_frozen_covariances_match_the_full_recursion() -> None:
    """The steady-state shortcut agrees with running every step (freeze_tol = 0)."""
    model = _model(1)
    fast, full = covariances(model, 200), covariances(model, 200, freeze_tol=0.0)
    for name in ("filt", "smooth", "lag", "gain"):
        np.testing.assert_allclose(getattr(fast, name), getattr(full, name), atol=1e-10)
