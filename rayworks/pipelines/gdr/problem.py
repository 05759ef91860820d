"""Group least-squares data, the GDR objective F, the ERM warm start, the synthetic
generator of our reconstructed recipe and group duplication (docs/gdr.md).

Groups are contiguous row blocks: group i owns rows `offsets[i]:offsets[i+1]` of A, b.
l_i(x) = (1/n_i)‖A_{S_i}x - b_{S_i}‖², F(x) = max_i l_i(x) (the GDR objective), ERM =
argmin (1/m) Σ_i l_i(x). The theory folds 1/√n_i into the rows (`folded`), so that
f(x) = max_i ‖Â_{S_i}x - b̂_{S_i}‖₂ = √F(x) with the same argmin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.stats import ortho_group


@dataclass(frozen=True)
class GroupData:
    """Rows of A (n, d) and b (n,) split into m contiguous groups by `offsets` (m + 1,)."""

    A: np.ndarray
    b: np.ndarray
    offsets: np.ndarray

    @property
    def m(self) -> int:
        return len(self.offsets) - 1

    @property
    def d(self) -> int:
        return self.A.shape[1]

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def group_of_row(self) -> np.ndarray:
        return np.repeat(np.arange(self.m), self.sizes)

    def indicator(self) -> sp.csr_matrix:
        """P (m, n) with P[i, j] = 1 iff row j is in group i: group sums are P @ rowvalues."""
        n = len(self.b)
        return sp.csr_matrix((np.ones(n), (self.group_of_row, np.arange(n))), shape=(self.m, n))

    def folded(self) -> GroupData:
        """Rows scaled by 1/√n_i (the theory's normalisation): ‖Â_i x - b̂_i‖² = l_i(x)."""
        scale = 1.0 / np.sqrt(np.repeat(self.sizes, self.sizes))
        return GroupData(self.A * scale[:, None], self.b * scale, self.offsets)


def group_losses(data: GroupData, x: np.ndarray) -> np.ndarray:
    """l_i(x) = (1/n_i)‖A_{S_i}x - b_{S_i}‖² for every group, (m,)."""
    r = data.A @ x - data.b
    return np.add.reduceat(r * r, data.offsets[:-1]) / data.sizes


def worst_group_loss(data: GroupData, x: np.ndarray) -> float:
    """F(x) = max_i l_i(x), the GDR objective."""
    return float(group_losses(data, x).max())


def erm(data: GroupData) -> np.ndarray:
    """argmin (1/m) Σ_i l_i(x): least squares with row weights 1/n_i (the warm start)."""
    f = data.folded()
    return np.linalg.lstsq(f.A, f.b, rcond=None)[0]


def duplicate(data: GroupData, k: int) -> GroupData:
    """Every group repeated k times (m → k·m groups); F and ERM's argmin are unchanged."""
    if k < 1:
        raise ValueError(f"duplication factor k={k} must be >= 1")
    blocks = [slice(a, b) for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)]
    order = np.concatenate([np.arange(s.start, s.stop) for s in blocks for _ in range(k)])
    offsets = np.concatenate([[0], np.cumsum(np.repeat(data.sizes, k))])
    return GroupData(data.A[order], data.b[order], offsets)


@dataclass(frozen=True)
class SyntheticSpec:
    """Knobs of the synthetic recipe (all reconstructed; see `GDRConfig.data`)."""

    m: int = 100
    d: int = 10
    n_per_group: int = 50
    n_adversarial: int = 5
    lam_max: float = 30.0
    large_eig: float = 1e5
    kappa_target: float | None = 1e5
    far: float = 10.0
    center_spread: float = 0.1
    normal_noise: float = 0.1
    adversarial_noise: float = 1e-3


def synthetic(spec: SyntheticSpec, seed: int) -> GroupData:
    """Ill-conditioned heterogeneous groups sharing an orthonormal eigenbasis Q (reconstructed).

    Normal group: A_i = G_i diag(√λ) Qᵀ (G_i: orthonormalised Gaussian n_i x d, λ
    log-uniform in [1, lam_max]); b_i = A_i(c + spread·ξ_i) + noise·ε_i. Adversarial group
    j: λ = 1 except λ_{k_j} = large_eig on a direction of its own, optimum c + far·q_{k_j},
    noise adversarial_noise. The adversarial groups come last. With `kappa_target` set,
    large_eig is solved for so that κ(AᵀA) equals it (the recipe: tune until κ ≈ 1e5).
    """
    rng = np.random.default_rng(seed)
    d, n_i = spec.d, spec.n_per_group
    Q = ortho_group.rvs(d, random_state=rng) if d > 1 else np.ones((1, 1))
    c = rng.standard_normal(d)
    G = np.linalg.qr(rng.standard_normal((spec.m, n_i, d)))[0]  # (m, n_i, d), orthonormal cols
    lam = np.exp(rng.uniform(0.0, np.log(spec.lam_max), (spec.m, d)))
    targets = c + spec.center_spread * rng.standard_normal((spec.m, d))
    noise = np.full(spec.m, spec.normal_noise)
    adv = np.arange(spec.m - spec.n_adversarial, spec.m)
    dirs = rng.permutation(d)[np.arange(spec.n_adversarial) % d]
    lam[adv] = 1.0
    lam[adv, dirs] = spec.large_eig
    targets[adv] = c + spec.far * Q[:, dirs].T
    noise[adv] = spec.adversarial_noise
    if spec.kappa_target is not None and spec.n_adversarial:
        lam[adv, dirs] = _large_eig_for_kappa(lam, adv, dirs, spec.kappa_target)
    A = np.einsum("gnk,gk,jk->gnj", G, np.sqrt(lam), Q)  # G_i diag(√λ_i) Qᵀ
    b = np.einsum("gnj,gj->gn", A, targets) + noise[:, None] * rng.standard_normal((spec.m, n_i))
    offsets = np.arange(spec.m + 1) * n_i
    return GroupData(A.reshape(-1, d), b.reshape(-1), offsets)


def _large_eig_for_kappa(lam: np.ndarray, adv: np.ndarray, dirs: np.ndarray, kappa: float) -> float:
    """The λ_big giving κ(AᵀA) = kappa: AᵀA = Q diag(Σ_i λ_i) Qᵀ exactly (G_i orthonormal).

    Eigenvalue k is base_k + count_k·λ_big, count_k = adversarial groups owning direction
    k; the smallest one is a direction no adversarial group owns (needs n_adversarial < d).
    """
    counts = np.bincount(dirs, minlength=lam.shape[1])
    base = lam.sum(axis=0) - counts * lam[adv[0], dirs[0]]
    owned = counts > 0
    if owned.all():
        raise ValueError("data.kappa_target needs data.n_adversarial < data.d")
    target = kappa * base[~owned].min()
    return float(max(((target - base[owned]) / counts[owned]).min(), 1.0))
