"""Block Lewis overestimates for p = ∞ (MO25 Alg. 2 as used by Algorithm 1, step 1).

On Â = [A | b] (rows already folded by 1/√n_i) with W = diag(w_i on the rows of group i):

    w⁽¹⁾ = ((d + 1)/m)·1;   w_i⁽ᵗ⁺¹⁾ = Σ_{j∈S_i} τ_j,   τ_j = W_jj · âⱼᵀ(ÂᵀWÂ)⁻¹âⱼ,
    output w = (3/2)·(1/T)·Σ_{t=1..T} w⁽ᵗ⁾,   T = ⌈c·ln m⌉ (c = 2, reconstructed),
    reset: if Σ_i w_i ≥ m, use w = 1 (W = I).

Each iterate after the first sums to rank(Â) (leverage scores sum to the rank), the first
to d + 1. The guarantee (for every x, c) is the sandwich

    ‖Ax - cb‖_{G,∞} ≤ ‖W^{1/2}(Ax - cb)‖₂ ≤ √(2(rank A + 1))·‖Ax - cb‖_{G,∞},

whose left side holds exactly when every block's "overestimate ratio"
Σ_{j∈S_i} âⱼᵀ(ÂᵀWÂ)⁻¹âⱼ ≤ 1 (`block_ratios`). The iteration is the multiplicative
D-optimal-design update, whose fixed point w_i = τ_i(W^{1/2}Â) are the block Lewis weights.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from rayworks.pipelines.gdr.problem import GroupData


def _row_quadforms(Ahat: np.ndarray, row_w: np.ndarray) -> np.ndarray:
    """âⱼᵀ(ÂᵀWÂ)⁻¹âⱼ for every row j, (n,), by one Cholesky of the (d+1)² Gram matrix."""
    gram = Ahat.T @ (Ahat * row_w[:, None])
    chol = sla.cho_factor(gram + 1e-14 * np.trace(gram) * np.eye(gram.shape[0]), lower=True)
    half = sla.solve_triangular(chol[0], Ahat.T, lower=True)  # (d+1, n)
    return np.einsum("kn,kn->n", half, half)


def block_ratios(folded: GroupData, w: np.ndarray) -> np.ndarray:
    """Σ_{j∈S_i} âⱼᵀ(ÂᵀWÂ)⁻¹âⱼ per group, (m,): ≤ 1 for an overestimate; = 1 at a fixed point
    on every group with w_i > 0."""
    Ahat = np.column_stack([folded.A, folded.b])
    q = _row_quadforms(Ahat, np.repeat(w, folded.sizes))
    return np.add.reduceat(q, folded.offsets[:-1])


def lewis_iterates(folded: GroupData, iters: int) -> np.ndarray:
    """w⁽¹⁾, …, w⁽ᵀ⁾ of the leverage-score iteration, (T, m)."""
    m, d = folded.m, folded.d
    Ahat = np.column_stack([folded.A, folded.b])
    w = np.full(m, (d + 1) / m)
    out = [w]
    for _ in range(iters - 1):
        w = w * np.add.reduceat(
            _row_quadforms(Ahat, np.repeat(w, folded.sizes)), folded.offsets[:-1]
        )
        out.append(w)
    return np.stack(out)


def lewis_overestimates(folded: GroupData, log_factor: float = 2.0) -> np.ndarray:
    """Block Lewis overestimates w (m,): (3/2)·mean of T = ⌈log_factor·ln m⌉ iterates, reset
    to all-ones if Σw ≥ m (then the Lewis geometry is the Euclidean one)."""
    iters = max(1, math.ceil(log_factor * math.log(max(folded.m, 2))))
    w = 1.5 * lewis_iterates(folded, iters).mean(axis=0)
    return np.ones(folded.m) if w.sum() >= folded.m else w


def block_inf_norm(data: GroupData, y: np.ndarray) -> float:
    """‖y‖_{G,∞} = max_i ‖y_{S_i}‖₂."""
    return float(np.sqrt(np.add.reduceat(y * y, data.offsets[:-1]).max()))
