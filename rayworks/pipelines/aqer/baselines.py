"""Baselines at matched two-qubit gate budgets G (our reconstructed CPU recipe, docs/aqer.md).

- Hardware-efficient circuit (HEC): |0..0> through layers of RY·RZ on every qubit, each
  followed by an RZZ ladder (0,1), (1,2), ..., (N-2, N-1); exactly G RZZ gates (the last
  ladder is cut short) and a final rotation layer. Adam on all angles from a uniform random
  start, best of `restarts` starts (reconstructed recipe: best of 3 seeds).
- MPS-layer loader (Ran 2020 style): repeatedly (i) truncate the current state |ψ_k> to an
  MPS of bond dimension 2 (right-canonical, SVD sweep from the right), (ii) turn that MPS
  into one staircase layer L_{k+1} of N-1 general two-qubit gates with
  L_{k+1}|0..0> = |MPS>, (iii) set |ψ_{k+1}> = L_{k+1}†|ψ_k>. The loader is
  L_1 ⋯ L_k |0..0> with fidelity |<0..0|ψ_k>|^2 and G = k·(N-1) two-qubit gates, so a
  budget G uses ⌊G/(N-1)⌋ layers (reported as `g_used`). Its gates are arbitrary SU(4),
  AQER's each hold one RZZ: gate counts favour this baseline.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.linalg import null_space

from rayworks.pipelines.aqer.blocks import ZZ_SIGNS, ry_rz
from rayworks.pipelines.aqer.optim import adam_best
from rayworks.pipelines.aqer.statevector import apply_1q, apply_2q, overlap, zero_state


# -------------------------------------------------------------------------------- HEC
def hec_state(rot: torch.Tensor, zz: torch.Tensor, n_qubits: int) -> torch.Tensor:
    """HEC|0>: rot (L, N, 2) angles (rz, ry) of L = ceil(G/(N-1)) + 1 layers, zz (G,)."""
    psi = zero_state(n_qubits)
    mats = ry_rz(rot[..., 0], rot[..., 1])  # (L, N, 2, 2)
    phases = torch.exp(-0.5j * (zz[:, None] * torch.as_tensor(ZZ_SIGNS)).to(torch.complex128))
    per_layer = n_qubits - 1
    for layer in range(rot.shape[0]):
        for q in range(n_qubits):
            psi = apply_1q(psi, mats[layer, q], q)
        for g in range(layer * per_layer, min((layer + 1) * per_layer, zz.shape[0])):
            j = g % per_layer
            psi = apply_2q(psi, torch.diag(phases[g]), j, j + 1)
    return psi


def hec_load(
    target: np.ndarray, g: int, *, steps: int, lr: float, restarts: int, seed: int
) -> dict[str, float]:
    """Best-of-`restarts` Adam fit of the HEC with exactly `g` RZZ gates."""
    n = target.ndim
    v = torch.from_numpy(np.asarray(target, dtype=complex))
    n_layers = -(-g // (n - 1)) + 1
    gen = torch.Generator().manual_seed(seed)
    best = 1.0
    for _ in range(restarts):
        rot = torch.rand((n_layers, n, 2), generator=gen, dtype=torch.float64) * 2 * np.pi
        zz = torch.rand((g,), generator=gen, dtype=torch.float64) * 2 * np.pi
        _, losses = adam_best(
            lambda r, z: 1.0 - overlap(v, hec_state(r, z, n)).abs() ** 2, [rot, zz], steps, lr
        )
        best = min(best, *losses)
    return {"infidelity": best, "g_used": float(g)}


# -------------------------------------------------------------------------- MPS layers
def right_canonical_mps(psi: np.ndarray, chi: int) -> list[np.ndarray]:
    """Truncated right-canonical MPS B_n (left, 2, right) of psi (2,)*N, bond dim <= chi.

    SVD sweep from the right; every B_n with n >= 1 has orthonormal rows (Σ_{s,b} B B* = I);
    B_0 (1, 2, χ_1) carries the norm and is renormalised (the truncated state, normalised).
    """
    n = psi.ndim
    tensors: list[np.ndarray] = []
    right = 1
    m = psi.reshape(2 ** (n - 1), 2)
    for site in range(n - 1, 0, -1):
        u, s, vh = np.linalg.svd(m, full_matrices=False)
        keep = max(1, min(chi, int(np.sum(s > 1e-12 * s[0]))))
        tensors.insert(0, vh[:keep].reshape(keep, 2, right))
        m = (u[:, :keep] * s[:keep]).reshape(2 ** (site - 1), 2 * keep)
        right = keep
    tensors.insert(0, (m / np.linalg.norm(m)).reshape(1, 2, right))
    return tensors


def complete_unitary(columns: dict[int, np.ndarray], dim: int) -> np.ndarray:
    """A dim x dim unitary whose column c is columns[c] (orthonormal); the rest completed."""
    u = np.zeros((dim, dim), dtype=complex)
    given = np.array(list(columns.values())).T if columns else np.zeros((dim, 0))
    for c, col in columns.items():
        u[:, c] = col
    free = [c for c in range(dim) if c not in columns]
    if free:
        u[:, free] = null_space(given.conj().T) if given.size else np.eye(dim)[:, : len(free)]
    return u


def mps_layer_gates(tensors: list[np.ndarray]) -> list[np.ndarray]:
    """Staircase gates G_0..G_{N-2} on qubits (n, n+1) with G_{N-2}⋯G_0|0..0> = |MPS>.

    G_n maps |a>_n|0>_{n+1} -> Σ_{s,b} B_n[a, s, b] |s>_n|b>_{n+1} (qubit n+1 carries the
    bond); the last gate also maps the bond |b> to Σ_s B_{N-1}[b, s]|s>.
    """
    n = len(tensors)
    gates = []
    for site in range(n - 1):
        b = np.pad(tensors[site], ((0, 0), (0, 0), (0, 2 - tensors[site].shape[2])))
        cols = {2 * a: b[a].reshape(4) for a in range(b.shape[0])}
        gate = complete_unitary(cols, 4)
        if site == n - 2:
            last = tensors[-1][:, :, 0]  # (χ, 2), orthonormal rows
            fold = complete_unitary({r: last[r] for r in range(last.shape[0])}, 2)
            gate = np.kron(np.eye(2), fold) @ gate
        gates.append(gate)
    return gates


def mps_layer_load(target: np.ndarray, max_layers: int, chi: int = 2) -> list[float]:
    """Infidelity after k = 1..max_layers MPS layers (G = k·(N-1))."""
    n = target.ndim
    psi = torch.from_numpy(np.array(target, dtype=complex))
    out = []
    for _ in range(max_layers):
        gates = mps_layer_gates(right_canonical_mps(psi.numpy(), chi))
        for site in range(n - 2, -1, -1):
            psi = apply_2q(psi, torch.from_numpy(gates[site].conj().T), site, site + 1)
        out.append(1.0 - float(abs(psi.reshape(-1)[0]) ** 2))
    return out
