"""Topology recovery up to a generalised permutation (metrics of docs/lssm.md).

An estimate (Â, B̂, Ĉ, D̂) equals the truth up to a similarity Φ: Â = Φ A Φ^{-1},
B̂ = Φ B. Sparsity identifies the system only up to generalised permutations Φ = Π Λ
(permutation times non-singular diagonal scaling), so:

1. Φ̂ = B̂ B^{-1} when B is square and invertible (S1, S3; our recipe's estimator), else
   the least-squares map from the true to the estimated smoothed states,
   Φ̂ = argmin Σ_t ‖x̂_t - Φ x_t‖² (S2; reconstructed).
2. Permutation matching: the permutation π maximising Σ_i Φ̂_{π(i), i}² (Hungarian
   algorithm); off-diagonal energy = 1 - Σ_i Φ̂_{π(i), i}² / ‖Φ̂‖_F². Below `gp_tol`
   (recipe: 5 %) Φ̂ counts as a generalised permutation: a *success*.
3. Support recovery of the nonzero pattern of Â: supp(Â) = {|Â_ij| > support_tol · max|Â|}
   against the true pattern carried into Â's basis by the matched permutation,
   supp(Π A Πᵀ) = supp(Φ_gp A Φ_gp^{-1}) (diagonal scaling keeps the pattern). Precision =
   |supp(Â) ∩ ref| / |supp(Â)|, recall = |supp(Â) ∩ ref| / |ref|, their F1, and exact
   support recovery (supp(Â) = ref). The permutation is always the Hungarian match of Φ̂,
   also when Φ̂ is not a generalised permutation (then it is Φ̂'s dominant pairing).
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


def support_scores(estimate: np.ndarray, reference: np.ndarray, tol: float) -> dict[str, float]:
    """Precision, recall, F1 of supp(estimate) against the non-zeros of `reference`, and
    exact recovery (the two patterns are equal). 0/0 counts as 1: an empty estimate makes no
    false claim, an empty reference has nothing to miss."""
    est, ref = support(estimate, tol), reference != 0
    tp, n_est, n_ref = float((est & ref).sum()), float(est.sum()), float(ref.sum())
    return {
        "support_precision": tp / n_est if n_est else 1.0,
        "support_recall": tp / n_ref if n_ref else 1.0,
        "support_f1": 2 * tp / (n_est + n_ref) if n_est + n_ref else 1.0,
        "exact_support": float(np.array_equal(est, ref)),
    }


def support_f1(estimate: np.ndarray, reference: np.ndarray, tol: float) -> float:
    """F1 of supp(estimate) against the exact support (non-zeros) of `reference`."""
    return support_scores(estimate, reference, tol)["support_f1"]


def aligned_pattern(A: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """supp(Π A Πᵀ) with Π[perm[i], i] = 1: the true pattern in the estimate's basis."""
    P = np.zeros(A.shape)
    P[perm, np.arange(len(perm))] = 1.0
    return (P @ (A != 0) @ P.T) != 0


def topology_metrics(
    A_hat: np.ndarray, A: np.ndarray, phi: np.ndarray, gp_tol: float, support_tol: float
) -> dict[str, float]:
    """Off-diagonal energy of Φ̂, success (generalised permutation), support scores of Â."""
    perm, off, gp = match_generalized_permutation(phi)
    ok = bool(off < gp_tol and np.all(gp[perm, np.arange(len(perm))] != 0))
    return {
        "offdiag_energy": off,
        "success": float(ok),
        **support_scores(A_hat, aligned_pattern(A, perm), support_tol),
    }
