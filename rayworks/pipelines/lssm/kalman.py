"""Linear-Gaussian state-space model: Kalman filter, RTS smoother with lag-one covariances,
log-likelihood, one-step-ahead predictor and free simulation.

Model (paper §2, in the form we reconstruct it from a secondary summary; docs/lssm.md):

    x_0 ~ N(mu0, P0)
    x_t = A x_{t-1} + B u_t + eps_t,   eps_t ~ N(0, diag(r))     t = 1..T
    y_t = C x_t     + D u_t + om_t,    om_t  ~ N(0, diag(q))

Shapes: n states, m inputs, p outputs; u (T, m), y (T, p). State arrays are indexed
0..T (index 0 = the initial state x_0).

The covariance recursions do not depend on the data, so they run once per E-step in
`covariances`; a time-invariant model's Riccati recursion converges geometrically, and
once two consecutive matrices agree to `freeze_tol` (relative) the rest are filled with
the converged value (exact up to that tolerance; tested against dense conditioning).
The mean recursions then loop over t with the precomputed gains.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

FREEZE_TOL = 1e-12


@dataclass(frozen=True)
class LSSM:
    """Parameters Θ = (A, B, C, D, r, q) plus the initial-state prior (mu0, P0)."""

    A: np.ndarray  # (n, n)
    B: np.ndarray  # (n, m)
    C: np.ndarray  # (p, n)
    D: np.ndarray  # (p, m)
    r: np.ndarray  # (n,) process-noise variances, R = diag(r)
    q: np.ndarray  # (p,) measurement-noise variances, Q = diag(q)
    mu0: np.ndarray  # (n,)
    P0: np.ndarray  # (n, n)

    @property
    def n(self) -> int:
        return self.A.shape[0]

    def with_(self, **changes: np.ndarray) -> LSSM:
        return replace(self, **changes)


@dataclass(frozen=True)
class Covariances:
    """Data-independent part of the filter/smoother for a horizon T."""

    pred: np.ndarray  # (T+1, n, n) Σ_{t|t-1}; [0] unused (= P0)
    filt: np.ndarray  # (T+1, n, n) Σ_{t|t}; [0] = P0
    gain: np.ndarray  # (T+1, n, p) Kalman gain K_t; [0] unused
    s_inv: np.ndarray  # (T+1, p, p) innovation precision S_t^{-1}; [0] unused
    s_logdet: np.ndarray  # (T+1,) log det S_t; [0] unused
    smooth_gain: np.ndarray  # (T, n, n) G_t = Σ_{t|t} Aᵀ Σ_{t+1|t}^{-1}, t = 0..T-1
    smooth: np.ndarray  # (T+1, n, n) P_t = Cov(x_t | y_{1:T})
    lag: np.ndarray  # (T+1, n, n) Cov(x_t, x_{t-1} | y_{1:T}); [0] unused


@dataclass(frozen=True)
class Smoothed:
    """E-step output: smoothed moments and the log-likelihood log p(y_{1:T} | Θ)."""

    mean: np.ndarray  # (T+1, n) m_t = E[x_t | y_{1:T}]
    cov: np.ndarray  # (T+1, n, n) P_t
    lag: np.ndarray  # (T+1, n, n) P_{t,t-1}; [0] unused
    loglik: float


def _sym(M: np.ndarray) -> np.ndarray:
    return 0.5 * (M + np.swapaxes(M, -1, -2))


def _close(a: np.ndarray, b: np.ndarray, tol: float) -> bool:
    return float(np.abs(a - b).max()) <= tol * max(float(np.abs(a).max()), 1e-300)


def covariances(model: LSSM, T: int, freeze_tol: float = FREEZE_TOL) -> Covariances:
    """Forward Riccati recursion (filter) and backward RTS covariance recursion."""
    A, C = model.A, model.C
    n, p = model.n, C.shape[0]
    R, Q = np.diag(model.r), np.diag(model.q)
    pred = np.empty((T + 1, n, n))
    filt = np.empty((T + 1, n, n))
    gain = np.zeros((T + 1, n, p))
    s_inv = np.zeros((T + 1, p, p))
    s_logdet = np.zeros(T + 1)
    pred[0] = filt[0] = model.P0
    frozen = T + 1  # first index from which the forward quantities are constant
    for t in range(1, T + 1):
        pred[t] = A @ filt[t - 1] @ A.T + R
        S = C @ pred[t] @ C.T + Q
        s_inv[t] = np.linalg.inv(S)
        s_logdet[t] = np.linalg.slogdet(S)[1]
        gain[t] = pred[t] @ C.T @ s_inv[t]
        filt[t] = _sym(pred[t] - gain[t] @ S @ gain[t].T)
        if t >= 2 and _close(filt[t], filt[t - 1], freeze_tol):
            frozen = t
            for arr in (pred, filt, gain, s_inv, s_logdet):
                arr[t + 1 :] = arr[t]
            break
    # G_t = Σ_{t|t} Aᵀ Σ_{t+1|t}^{-1}; constant for t >= frozen
    k = min(frozen, T)
    G = np.empty((T, n, n))
    G[:k] = np.linalg.solve(pred[1 : k + 1], A @ filt[:k]).transpose(0, 2, 1)
    G[k:] = np.linalg.solve(pred[k + 1], A @ filt[k]).T if k < T else 0.0
    smooth = np.empty((T + 1, n, n))
    smooth[T] = filt[T]
    steady = False
    for t in range(T - 1, -1, -1):
        if steady and t >= frozen:
            smooth[t] = smooth[t + 1]
            continue
        smooth[t] = _sym(filt[t] + G[t] @ (smooth[t + 1] - pred[t + 1]) @ G[t].T)
        steady = t >= frozen and _close(smooth[t], smooth[t + 1], freeze_tol)
    lag = np.zeros((T + 1, n, n))
    lag[1:] = smooth[1:] @ G.transpose(0, 2, 1)  # Cov(x_{t+1}, x_t) = P_{t+1} G_tᵀ
    return Covariances(pred, filt, gain, s_inv, s_logdet, G, smooth, lag)


def filter_means(
    model: LSSM, cov: Covariances, u: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward means: predicted x_{t|t-1} (T+1, n), filtered μ_t (T+1, n), innovations (T, p)."""
    A, C = model.A, model.C
    T = len(y)
    drive = u @ model.B.T  # (T, n)
    target = y - u @ model.D.T  # (T, p)
    pred = np.empty((T + 1, model.n))
    filt = np.empty((T + 1, model.n))
    innov = np.empty_like(target)
    pred[0] = filt[0] = model.mu0
    for t in range(1, T + 1):
        pred[t] = A @ filt[t - 1] + drive[t - 1]
        innov[t - 1] = target[t - 1] - C @ pred[t]
        filt[t] = pred[t] + cov.gain[t] @ innov[t - 1]
    return pred, filt, innov


def _loglik(cov: Covariances, innov: np.ndarray) -> float:
    p = innov.shape[1]
    quad = np.einsum("ti,tij,tj->", innov, cov.s_inv[1:], innov)
    return float(-0.5 * (len(innov) * p * np.log(2 * np.pi) + cov.s_logdet[1:].sum() + quad))


def log_likelihood(model: LSSM, u: np.ndarray, y: np.ndarray) -> float:
    """log p(y_{1:T} | u, Θ) by the prediction-error decomposition."""
    cov = covariances(model, len(y))
    return _loglik(cov, filter_means(model, cov, u, y)[2])


def smooth(model: LSSM, u: np.ndarray, y: np.ndarray) -> Smoothed:
    """Kalman filter forward, RTS smoother backward (the E-step, step 1 in `map_em`).

    m_t = μ_t + G_t (m_{t+1} - A μ_t - B u_{t+1}); P_t, P_{t,t-1} from `covariances`.
    """
    cov = covariances(model, len(y))
    pred, filt, innov = filter_means(model, cov, u, y)
    T = len(y)
    mean = np.empty_like(filt)
    mean[T] = filt[T]
    for t in range(T - 1, -1, -1):
        mean[t] = filt[t] + cov.smooth_gain[t] @ (mean[t + 1] - pred[t + 1])
    return Smoothed(mean, cov.smooth, cov.lag, _loglik(cov, innov))


def predict_one_step(model: LSSM, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ŷ_{t|t-1} = C x_{t|t-1} + D u_t for t = 1..T, (T, p)."""
    cov = covariances(model, len(y))
    pred = filter_means(model, cov, u, y)[0]
    return pred[1:] @ model.C.T + u @ model.D.T


def filtered_state(model: LSSM, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """E[x_T | y_{1:T}], the state a free simulation of the next segment starts from."""
    cov = covariances(model, len(y))
    return filter_means(model, cov, u, y)[1][-1]


def simulate_free(model: LSSM, u: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """Noise-free output y_t = C x_t + D u_t with x_t = A x_{t-1} + B u_t from x0, (T, p)."""
    drive = u @ model.B.T
    x = np.empty((len(u), model.n))
    prev = x0
    for t in range(len(u)):
        prev = x[t] = model.A @ prev + drive[t]
    return x @ model.C.T + u @ model.D.T
