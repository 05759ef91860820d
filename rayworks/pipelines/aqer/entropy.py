"""Reduced density matrices, Rényi-2 entropies and the bounds f1, f2 of Theorem 3.1.

Entanglement measure (paper §3): S(|ψ>) = Σ_i S_i with S_i = -log2 Tr[rho_i²] ∈ [0, 1].
Theorem 3.1 (formulas reconstructed from a secondary statement, see module `bounds` below):
a product state has infidelity ≥ f1(S) = g(S/N), and the product of the marginals' top
eigenvectors has infidelity ≤ f2(S) = ⌊S⌋/2 + g(S - ⌊S⌋), where
g(s) = ½(1 - √(2^{1-s} - 1)) = 1 - λ_max of a qubit with S_i = s.

States are numpy arrays of shape (2,)*N (qubit 0 = most significant bit).
"""

from __future__ import annotations

import numpy as np


def single_rdms(psi: np.ndarray) -> np.ndarray:
    """All single-qubit reduced density matrices rho_i, shape (N, 2, 2)."""
    n = psi.ndim
    out = np.empty((n, 2, 2), dtype=complex)
    for i in range(n):
        m = np.moveaxis(psi, i, 0).reshape(2, -1)
        out[i] = m @ m.conj().T
    return out


def pair_rdm(psi: np.ndarray, j: int, k: int) -> np.ndarray:
    """rho_jk (4x4), row index 2*s_j + s_k."""
    m = np.moveaxis(psi, (j, k), (0, 1)).reshape(4, -1)
    return m @ m.conj().T


def marginals_of_pair(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rho_j, rho_k) = (Tr_k rho_jk, Tr_j rho_jk) of a 4x4 pair RDM."""
    r = rho.reshape(2, 2, 2, 2)
    return np.einsum("abcb->ac", r), np.einsum("abac->bc", r)


def renyi2(rho: np.ndarray) -> np.ndarray:
    """S = -log2 Tr rho² of (..., d, d) density matrices."""
    purity = np.einsum("...ab,...ba->...", rho, rho).real
    return -np.log2(np.clip(purity, 1e-300, None))


def qubit_entropies(psi: np.ndarray) -> np.ndarray:
    """(S_1, ..., S_N) of a state."""
    return renyi2(single_rdms(psi))


def total_entropy(psi: np.ndarray) -> float:
    """S(|ψ>) = Σ_i S_i."""
    return float(qubit_entropies(psi).sum())


def bloch_vectors(rhos: np.ndarray) -> np.ndarray:
    """Bloch vectors r (N, 3) of rho = (I + r·sigma)/2."""
    return np.stack(
        [2 * rhos[:, 0, 1].real, -2 * rhos[:, 0, 1].imag, (rhos[:, 0, 0] - rhos[:, 1, 1]).real],
        axis=1,
    )


def g(s: np.ndarray | float) -> np.ndarray:
    """1 - λ_max(rho) of a qubit with Rényi-2 entropy s ∈ [0, 1]: ½(1 - √(2^{1-s} - 1))."""
    s = np.clip(np.asarray(s, dtype=float), 0.0, 1.0)
    return 0.5 * (1.0 - np.sqrt(np.clip(2.0 ** (1.0 - s) - 1.0, 0.0, None)))


def f1(s: np.ndarray | float, n_qubits: int) -> np.ndarray:
    """Theorem 3.1 lower bound (reconstructed): every product state has infidelity ≥ g(S/N)."""
    return g(np.asarray(s, dtype=float) / n_qubits)


def f2(s: np.ndarray | float) -> np.ndarray:
    """Theorem 3.1 upper bound (reconstructed): the top-eigenvector product has infidelity
    ≤ Σ_i g(S_i) (union bound) ≤ ⌊S⌋/2 + g(S - ⌊S⌋) (g convex, S_i ≤ 1)."""
    s = np.asarray(s, dtype=float)
    whole = np.floor(s)
    return whole / 2 + g(s - whole)
