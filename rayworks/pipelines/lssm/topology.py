"""Topology recovery up to a generalised permutation (method card §4, metrics).

An estimate (Â, B̂, Ĉ, D̂) equals the truth up to a similarity Φ: Â = Φ A Φ^{-1},
B̂ = Φ B. Sparsity identifies the system only up to generalised permutations Φ = Π Λ
(permutation times non-singular diagonal scaling), so:

1. Φ̂ = B̂ B^{-1} when B is square and invertible (S1, S3; the card's estimator), else
   the least-squares map from the true to the estimated smoothed states,
   Φ̂ = argmin Σ_t ‖x̂_t - Φ x_t‖² (S2; reconstructed).
2. Permutation matching: the permutation π maximising Σ_i Φ̂_{π(i), i}² (Hungarian
   algorithm); off-diagonal energy = 1 - Σ_i Φ̂_{π(i), i}² / ‖Φ̂‖_F². Below `gp_tol`
   (card: 5 %) Φ̂ counts as a generalised permutation: a *success*.
3. Support F1 of {|Â_ij| > support_tol · max|Â|} against supp(Φ_gp A Φ_gp^{-1}), with
   Φ_gp the matched generalised permutation (Φ̂ with its off-matched entries dropped).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def estimate_phi(B_hat: np.ndarray, B: np.ndarray, x_hat=None, x=None) -> np.ndarray:
    """Φ̂ = B̂ B^{-1} for square invertible B, else least squares x̂_t ≈ Φ x_t."""
    if B.shape[0] == B.shape[1] and np.linalg.cond(B) < 1e8:
        return B_hat @ np.linalg.inv(B)
    if x_hat is None or x is None:
        raise ValueError("B is not square and invertible: estimate_phi needs the states")
    return np.linalg.lstsq(x, x_hat, rcond=None)[0].T


def match_generalized_permutation(phi: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """(π, off-diagonal energy fraction, Φ_gp); Φ_gp[π(i), i] = Φ̂[π(i), i], else 0."""
    energy = phi**2
    rows, cols = linear_sum_assignment(-energy)
    perm = np.empty(len(cols), dtype=int)
    perm[cols] = rows
    kept = energy[perm, np.arange(len(perm))].sum()
    off = float(1.0 - kept / max(energy.sum(), 1e-300))
    gp = np.zeros_like(phi)
    gp[perm, np.arange(len(perm))] = phi[perm, np.arange(len(perm))]
    return perm, off, gp


def support(M: np.ndarray, tol: float) -> np.ndarray:
    """Entries above `tol` times the largest magnitude of M."""
    scale = np.abs(M).max()
    return np.abs(M) > tol * scale if scale > 0 else np.zeros(M.shape, dtype=bool)


def support_f1(estimate: np.ndarray, reference: np.ndarray, tol: float) -> float:
    """F1 of supp(estimate) against the exact support (non-zeros) of `reference`."""
    est, ref = support(estimate, tol), reference != 0
    tp = float((est & ref).sum())
    denom = float(est.sum() + ref.sum())
    return 2 * tp / denom if denom else 1.0


def topology_metrics(
    A_hat: np.ndarray, A: np.ndarray, phi: np.ndarray, gp_tol: float, support_tol: float
) -> dict[str, float]:
    """Off-diagonal energy of Φ̂, success (generalised permutation), support F1 of Â."""
    perm, off, gp = match_generalized_permutation(phi)
    ok = bool(off < gp_tol and np.all(gp[perm, np.arange(len(perm))] != 0))
    # without a basis match, compare with the true support as it stands
    reference = gp @ A @ np.linalg.inv(gp) if ok else A
    return {
        "offdiag_energy": off,
        "success": float(ok),
        "support_f1": support_f1(A_hat, reference, support_tol),
    }
