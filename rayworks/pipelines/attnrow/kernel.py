"""The exponential kernel over X = [Q; K] / d^{1/4}, its λ-statistical dimension and its
ridge leverage scores (exact, and by recursive RLS sampling à la Musco & Musco 2017).

Step 1 of our reconstruction (docs/attnrow.md): K_xy = exp(⟨x, y⟩) on the 2n points of X, so
that A = exp(QKᵀ/√d) is the (Q rows, K rows) block of K. K is PSD (Schur product
theorem). s_λ = tr(K(K + λI)⁻¹) = Σ sig_i/(sig_i + λ); τ_i = [K(K + λI)⁻¹]_ii, Σ τ_i = s_λ.

Recursive RLS (Musco & Musco 2017, Alg. 2 "RecursiveRLS-Nyström"), with these
simplifications (reconstructed, each a config key): the oversampling factor
16·log(Σ l̃/δ) is a fixed constant `rls.oversample`; the recursion stops at a fixed leaf
size `rls.leaf_size` instead of 192·log(1/δ); and the ridge at a level of N_l points is
λ·N_l/N, so a half sample estimates the same normalised problem (λ ∝ n throughout).
"""

from __future__ import annotations

import numpy as np


def kernel_points(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """X = [Q; K] / d^{1/4}: (2n, d); ⟨x_i, x_j⟩ = q·k/√d for a (Q row, K row) pair."""
    return np.vstack([q, k]) / q.shape[1] ** 0.25


def exp_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """K(x, y) = exp(x yᵀ): (a, d), (b, d) -> (a, b). Raises on overflow (norms too large)."""
    with np.errstate(over="raise"):
        try:
            return np.exp(x @ y.T)
        except FloatingPointError:
            raise ValueError(
                "exp kernel overflows float64: ⟨q, k⟩/√d exceeds ~709; lower the norm scale"
            ) from None


def kernel_eigenvalues(x: np.ndarray) -> np.ndarray:
    """Eigenvalues of K(X, X), clipped at 0 (it is PSD up to round-off), ascending."""
    return np.clip(np.linalg.eigvalsh(exp_kernel(x, x)), 0.0, None)


def statistical_dimension(eigenvalues: np.ndarray, lam: float) -> float:
    """s_λ = Σ sig_i / (sig_i + λ) (step 1, see the module docstring)."""
    return float(np.sum(eigenvalues / (eigenvalues + lam)))


def ridge_leverage_scores(kmat: np.ndarray, lam: float) -> np.ndarray:
    """Exact τ_i = [K(K + λI)⁻¹]_ii, from the eigendecomposition K = U Σ Uᵀ: (N,)."""
    sig, u = np.linalg.eigh(kmat)
    sig = np.clip(sig, 0.0, None)
    return np.einsum("ij,j,ij->i", u, sig / (sig + lam), u)


def nystrom_scores(
    x: np.ndarray, landmarks: np.ndarray, weights: np.ndarray, lam: float
) -> np.ndarray:
    """RLS estimate l̃_i = (K_ii - K_iS (K_SS + λW⁻²)⁻¹ K_Si) / λ for every row of x.

    The weighted Nyström residual of Musco & Musco (2017), eq. (3): landmarks S (s, d)
    sampled with probabilities p carry weights w = 1/√p. Clipped to [0, 1].
    """
    k_xs = exp_kernel(x, landmarks)  # (N, s)
    k_ss = exp_kernel(landmarks, landmarks) + np.diag(lam / weights**2)
    fit = np.linalg.solve(k_ss, k_xs.T).T  # (N, s)
    diag = np.exp(np.einsum("ij,ij->i", x, x))
    return np.clip((diag - np.einsum("ij,ij->i", k_xs, fit)) / lam, 0.0, 1.0)


def recursive_rls(
    x: np.ndarray, lam: float, rng: np.random.Generator, oversample: float, leaf_size: int
) -> np.ndarray:
    """Approximate ridge leverage scores of K(X, X) by recursive halving (Musco & Musco
    2017, Alg. 2; simplifications in the module docstring): (N,) scores.

    Halve the points uniformly until `leaf_size` remain; from the leaf up, estimate each
    level's scores with the weighted landmarks of the level below (`nystrom_scores`), then
    keep each point with p_i = min(1, oversample · l̃_i) and weight 1/√p_i.
    """
    n = len(x)
    levels = [np.arange(n)]
    while len(levels[-1]) > leaf_size:
        parent = levels[-1]
        levels.append(parent[rng.random(len(parent)) < 0.5])
    chosen, weights = levels[-1], np.ones(len(levels[-1]))
    scores = np.ones(n)
    for level in reversed(levels[:-1]):
        scores = nystrom_scores(x[level], x[chosen], weights, lam * len(level) / n)
        p = np.minimum(1.0, oversample * scores)
        keep = rng.random(len(level)) < p
        chosen, weights = level[keep], 1.0 / np.sqrt(p[keep])
    if len(levels) == 1:  # already a leaf: exact scores are cheap
        scores = ridge_leverage_scores(exp_kernel(x, x), lam)
    return scores


def sample_without_replacement(
    weights: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """`size` distinct indices drawn successively with probability ∝ `weights`
    (Efraimidis-Spirakis keys E_i / w_i, smallest first); zero weights come last."""
    if size > len(weights):
        raise ValueError(f"cannot draw {size} distinct points out of {len(weights)}")
    with np.errstate(divide="ignore"):
        keys = rng.exponential(size=len(weights)) / weights
    return np.sort(np.argpartition(keys, size - 1)[:size]) if size else np.array([], int)
