"""A small numpy matrix-product-state (MPS) simulator for AQER beyond the state vector.

State: site tensors A_i of shape [χ_left, 2, χ_right] (χ = 1 at both ends), qubit 0 first
(the same order as the state vector's most significant bit), and an orthogonality centre
c: sites < c are left-isometric, sites > c right-isometric, so gates and truncations at c
are optimal in the 2-norm. Two-qubit gates on adjacent sites are applied by contracting
the two sites, applying the 4x4 gate and splitting by SVD, keeping at most `max_bond`
singular values and dropping those with relative weight below `cutoff`; the dropped
weight Σ s_dropped² / Σ s² is returned so callers can track it. Non-adjacent gates are
routed with SWAP gates (the far qubit is moved next to the near one and back).

Reduced density matrices are contracted with left/right environments (general, they do
not rely on the canonical form), so every quantity costs O(N χ³). Conversion to and from
dense vectors exists for small N (tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SWAP = np.eye(4)[[0, 2, 1, 3]]


@dataclass
class MPS:
    """Site tensors [χl, 2, χr] and the orthogonality centre."""

    tensors: list[np.ndarray]
    center: int = 0

    @property
    def n(self) -> int:
        return len(self.tensors)

    def copy(self) -> MPS:
        return MPS([t.copy() for t in self.tensors], self.center)

    def max_bond(self) -> int:
        return max(t.shape[2] for t in self.tensors)


# ------------------------------------------------------------------ construction
def from_dense(psi: np.ndarray) -> MPS:
    """Exact MPS of a (2,)*N state by successive SVDs (centre on the last site)."""
    n = psi.ndim
    rest = np.asarray(psi, dtype=complex).reshape(1, -1)
    tensors = []
    for _ in range(n - 1):
        chi = rest.shape[0]
        u, s, vh = np.linalg.svd(rest.reshape(chi * 2, -1), full_matrices=False)
        keep = max(1, int(np.sum(s > 1e-14 * s[0])))
        tensors.append(u[:, :keep].reshape(chi, 2, keep))
        rest = s[:keep, None] * vh[:keep]
    tensors.append(rest.reshape(rest.shape[0], 2, 1))
    return MPS(tensors, n - 1)


def to_dense(m: MPS) -> np.ndarray:
    """The (2,)*N state of an MPS (small N only)."""
    out = m.tensors[0]
    for t in m.tensors[1:]:
        out = np.tensordot(out, t, axes=([-1], [0]))
    return out.reshape((2,) * m.n)


def product_mps(qubits: np.ndarray) -> MPS:
    """⊗_i qubits[i] for qubits (N, 2): a bond-dimension-1 MPS."""
    return MPS([np.asarray(q, dtype=complex).reshape(1, 2, 1) for q in qubits], 0)


# ------------------------------------------------------------------ canonical form
def move_center(m: MPS, site: int) -> None:
    """Move the orthogonality centre to `site` by QR sweeps (in place)."""
    t = m.tensors
    while m.center < site:
        c = m.center
        chl, _, chr_ = t[c].shape
        q, r = np.linalg.qr(t[c].reshape(chl * 2, chr_))
        t[c] = q.reshape(chl, 2, -1)
        t[c + 1] = np.tensordot(r, t[c + 1], axes=([1], [0]))
        m.center += 1
    while m.center > site:
        c = m.center
        chl, _, chr_ = t[c].shape
        q, r = np.linalg.qr(t[c].reshape(chl, 2 * chr_).T)
        t[c] = q.T.reshape(-1, 2, chr_)
        t[c - 1] = np.tensordot(t[c - 1], r.T, axes=([2], [0]))
        m.center -= 1


def _truncate(s: np.ndarray, max_bond: int | None, cutoff: float) -> tuple[int, float]:
    """How many singular values to keep, and the discarded weight (relative)."""
    w = s**2
    total = w.sum()
    keep = max(1, int(np.sum(w > cutoff * total)))
    if max_bond is not None:
        keep = min(keep, max_bond)
    return keep, float(w[keep:].sum() / total)


# ------------------------------------------------------------------ gates
def apply_adjacent(
    m: MPS,
    gate: np.ndarray,
    i: int,
    max_bond: int | None = None,
    cutoff: float = 0.0,
    center_left: bool = False,
) -> float:
    """4x4 `gate` (row index 2*s_i + s_{i+1}) on sites (i, i+1), SVD split, renormalised.

    The centre ends on i+1 (or on i with `center_left`, for right-to-left sweeps).
    Renormalising makes non-unitary gates (imaginary time) usable too. Returns the
    discarded weight."""
    move_center(m, i if m.center <= i else i + 1)
    a, b = m.tensors[i], m.tensors[i + 1]
    chl, chr_ = a.shape[0], b.shape[2]
    theta = np.einsum("asm,mtb->astb", a, b)
    theta = np.einsum("uvst,astb->auvb", np.asarray(gate).reshape(2, 2, 2, 2), theta)
    u, s, vh = np.linalg.svd(theta.reshape(chl * 2, 2 * chr_), full_matrices=False)
    keep, dropped = _truncate(s, max_bond, cutoff)
    s = s[:keep] / np.linalg.norm(s[:keep])
    u, vh = u[:, :keep], vh[:keep]
    if center_left:
        u, m.center = u * s, i
    else:
        vh, m.center = s[:, None] * vh, i + 1
    m.tensors[i] = u.reshape(chl, 2, keep)
    m.tensors[i + 1] = vh.reshape(keep, 2, chr_)
    return dropped


def apply_gate(
    m: MPS, gate: np.ndarray, j: int, k: int, max_bond: int | None = None, cutoff: float = 0.0
) -> float:
    """4x4 `gate` (row index 2*s_j + s_k) on any pair (j, k): qubit k is swapped next to j,
    the gate applied, and k swapped back. Returns the summed discarded weight."""
    if j == k:
        raise ValueError(f"a two-qubit gate needs two distinct qubits, got ({j}, {k})")
    if j > k:
        gate, j, k = SWAP @ gate @ SWAP, k, j
    dropped = 0.0
    for q in range(k - 1, j, -1):
        dropped += apply_adjacent(m, SWAP, q, max_bond, cutoff, center_left=True)
    dropped += apply_adjacent(m, gate, j, max_bond, cutoff)
    for q in range(j + 1, k):
        dropped += apply_adjacent(m, SWAP, q, max_bond, cutoff)
    return dropped


# ------------------------------------------------------------------ contractions
def _step_left_env(env: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """E'[x', y'] = Σ E[x, y] a[x, s, x'] conj(b[y, s, y'])."""
    return np.einsum("xy,xsp,ysq->pq", env, a, b.conj(), optimize=True)


def environments(m: MPS) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Left environments L[i] (sites < i) and right ones R[i] (sites ≥ i, i ≥ 1), χ x χ."""
    t = m.tensors
    left = [np.ones((1, 1), dtype=complex)]
    for a in t[:-1]:
        left.append(_step_left_env(left[-1], a, a))
    right = [np.ones((1, 1), dtype=complex)]
    for a in reversed(t[1:]):
        right.append(np.einsum("pq,xsp,ysq->xy", right[-1], a, a.conj(), optimize=True))
    right = [None, *right[::-1]]  # R[i] covers sites i..N-1 (R[0] unused)
    return left, right


def single_rdms(m: MPS, envs=None) -> np.ndarray:
    """All single-qubit RDMs (N, 2, 2), normalised."""
    left, right = envs or environments(m)
    out = np.stack(
        [
            np.einsum("xy,xsp,ytq,pq->st", left[i], a, a.conj(), right[i + 1], optimize=True)
            for i, a in enumerate(m.tensors)
        ]
    )
    return out / np.trace(out, axis1=1, axis2=2)[:, None, None]


def pair_rdms_from(m: MPS, j: int, ks, envs=None) -> dict[tuple[int, int], np.ndarray]:
    """rho_jk (4x4, row 2*s_lo + s_hi with lo < hi) for every k in `ks` (k > j only),
    by carrying the open-j transfer tensor rightwards: O(N χ³) for all of them."""
    left, right = envs or environments(m)
    t = m.tensors
    ks = sorted(k for k in ks if k > j)
    out = {}
    if not ks:
        return out
    carry = np.einsum("xy,xsp,ytq->stpq", left[j], t[j], t[j].conj(), optimize=True)
    for k in range(j + 1, ks[-1] + 1):
        a = t[k]
        if k in ks:
            rho = np.einsum(
                "stpq,pur,qvw,rw->sutv", carry, a, a.conj(), right[k + 1], optimize=True
            ).reshape(4, 4)
            out[(j, k)] = rho / np.trace(rho)
        carry = np.einsum("stpq,pur,quw->strw", carry, a, a.conj(), optimize=True)
    return out


def pair_rdm(m: MPS, j: int, k: int, envs=None) -> np.ndarray:
    """rho_jk of any pair, row index 2*s_j + s_k (as `entropy.pair_rdm`)."""
    lo, hi = min(j, k), max(j, k)
    rho = pair_rdms_from(m, lo, [hi], envs)[(lo, hi)]
    return rho if j < k else SWAP @ rho @ SWAP


def overlap(a: MPS, b: MPS) -> complex:
    """<a|b> by a left-to-right transfer-matrix contraction."""
    env = np.ones((1, 1), dtype=complex)
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        env = np.einsum("xy,xsp,ysq->pq", env, ta.conj(), tb, optimize=True)
    return complex(env[0, 0])
