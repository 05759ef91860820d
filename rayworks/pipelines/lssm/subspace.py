"""Baselines: N4SID (own implementation) and Ho-Kalman from least-squares Markov parameters.

Both identify the *standard* form s_{t+1} = A s_t + B u_t, y_t = C_s s_t + D_s u_t. The
paper's form (x_t = A x_{t-1} + B u_t, y_t = C x_t + D u_t) is the same system with
s_t = x_{t-1}, C_s = C A and D_s = C B + D, so its Markov parameters are
h_0 = D + C B and h_k = C A^k B (k >= 1). `to_paper_form` maps back with C = C_s A^+
(exact for invertible A; least squares for a singular A such as S3).

- Ho-Kalman: h_0..h_L by least squares of y_t on (u_t, ..., u_{t-L}); SVD of the block
  Hankel matrix [h_{i+j+1}], rank n; C_s, B from the first block row / column, A from the
  shift invariance of the observability factor.
- N4SID (reconstructed, unweighted, ≈ 40 lines): oblique projection of the future
  outputs on the past data along the future inputs, rank-n SVD gives the state sequence,
  then [A B; C_s D_s] by least squares on the shifted state sequence.

Neither method models noise: `fit_noise` estimates diag(R), diag(Q) and the initial state
by EM with A, B, C, D held fixed (reconstructed), so all arms share one Kalman predictor.
"""

from __future__ import annotations

import numpy as np

from rayworks.pipelines.lssm.kalman import LSSM, smooth
from rayworks.pipelines.lssm.map_em import VAR_FLOOR, output_residual, state_residual
from rayworks.pipelines.lssm.map_em import sufficient_stats as stats_of


def block_hankel(z: np.ndarray, start: int, rows: int, cols: int) -> np.ndarray:
    """Rows·d x cols matrix whose block (i, j) is z[start + i + j] (z: (N, d))."""
    idx = start + np.arange(rows)[:, None] + np.arange(cols)[None, :]  # (rows, cols)
    return z[idx].transpose(0, 2, 1).reshape(rows * z.shape[1], cols)


def markov_parameters(u: np.ndarray, y: np.ndarray, lags: int) -> np.ndarray:
    """h_0..h_L, (L+1, p, m), by least squares of y_t on (u_t, u_{t-1}, ..., u_{t-L})."""
    T, m = u.shape
    regs = np.concatenate([u[lags - k : T - k] for k in range(lags + 1)], axis=1)
    coef = np.linalg.lstsq(regs, y[lags:], rcond=None)[0]  # ((L+1) m, p)
    return coef.T.reshape(y.shape[1], lags + 1, m).transpose(1, 0, 2)


def ho_kalman(h: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Standard-form (A, B, C_s, D_s) of order n from Markov parameters h (L+1, p, m)."""
    L, p, m = h.shape[0] - 1, h.shape[1], h.shape[2]
    k1 = L // 2
    k2 = L - k1
    H = np.block([[h[i + j + 1] for j in range(k2)] for i in range(k1)])  # (k1 p, k2 m)
    U, s, Vt = np.linalg.svd(H, full_matrices=False)
    obs = U[:, :n] * np.sqrt(s[:n])
    ctrl = np.sqrt(s[:n])[:, None] * Vt[:n]
    A = np.linalg.lstsq(obs[:-p], obs[p:], rcond=None)[0]
    return A, ctrl[:, :m], obs[:p], h[0]


def n4sid(u: np.ndarray, y: np.ndarray, n: int, block_rows: int) -> tuple[np.ndarray, ...]:
    """Standard-form (A, B, C_s, D_s) of order n from data by the N4SID state sequence."""
    i, T = block_rows, len(u)
    j = T - 2 * i + 1
    Up, Uf = block_hankel(u, 0, i, j), block_hankel(u, i, i, j)
    Yp, Yf = block_hankel(y, 0, i, j), block_hankel(y, i, i, j)
    Wp = np.vstack([Up, Yp])
    coef = np.linalg.lstsq(np.vstack([Wp, Uf]).T, Yf.T, rcond=None)[0].T
    proj = coef[:, : Wp.shape[0]] @ Wp  # oblique projection Yf /_{Uf} Wp = Γ_i X_i
    _, s, Vt = np.linalg.svd(proj, full_matrices=False)
    X = np.sqrt(s[:n])[:, None] * Vt[:n]  # states at times i .. i + j - 1
    lhs = np.vstack([X[:, 1:], y[i : i + j - 1].T])
    rhs = np.vstack([X[:, :-1], u[i : i + j - 1].T])
    theta = np.linalg.lstsq(rhs.T, lhs.T, rcond=None)[0].T
    m = u.shape[1]
    return theta[:n, :n], theta[:n, n : n + m], theta[n:, :n], theta[n:, n : n + m]


def standard_markov(A: np.ndarray, B: np.ndarray, Cs: np.ndarray, Ds: np.ndarray, k: int):
    """h_0 = D_s, h_j = C_s A^{j-1} B, j = 1..k-1, (k, p, m)."""
    out, M = [Ds], B
    for _ in range(k - 1):
        out.append(Cs @ M)
        M = A @ M
    return np.stack(out)


def to_paper_form(A, B, Cs, Ds, rcond: float = 1e-3) -> LSSM:
    """(A, B, C = C_s A^+, D = D_s - C B) with unit noise and x_0 ~ N(0, I)."""
    C = np.linalg.lstsq(A.T, Cs.T, rcond=rcond)[0].T
    n, p = A.shape[0], Cs.shape[0]
    return LSSM(
        A=A, B=B, C=C, D=Ds - C @ B, r=np.ones(n), q=np.ones(p), mu0=np.zeros(n), P0=np.eye(n)
    )


def fit_noise(model: LSSM, u: np.ndarray, y: np.ndarray, iters: int) -> LSSM:
    """EM over (r, q, μ0, P0) only, A, B, C, D fixed (reconstructed)."""
    for _ in range(iters):
        sm = smooth(model, u, y)
        st = stats_of(sm, u, y)
        model = model.with_(
            r=np.maximum(state_residual(st, model.A, model.B) / st.T, VAR_FLOOR),
            q=np.maximum(output_residual(st, model.C, model.D) / st.T, VAR_FLOOR),
            mu0=sm.mean[0].copy(),
            P0=sm.cov[0].copy(),
        )
    return model
