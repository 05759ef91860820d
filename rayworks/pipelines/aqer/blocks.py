"""The AQER block V_I(alpha) and the single-qubit rotations it is built from.

Block gate list (reconstructed; the secondary summary says "an R_ZZ with R_Y / R_Z and
single-qubit rotations on both sides"):

    V(alpha) = (U3(alpha5..7) ⊗ U3(alpha8..10)) · RZZ(alpha4) · (RY(alpha1) RZ(alpha0) ⊗ RY(alpha3) RZ(alpha2))

11 parameters per block, row index of the 4x4 matrix = 2*s_j + s_k. One block holds one
two-qubit gate (the RZZ), so a budget of G two-qubit gates is G / `gates_per_block` blocks
(1 by default: the paper probably counts G = T; 2 counts the RZZ as two CNOTs).

Step I only needs the first five parameters: the U3 layer after the RZZ is local, so it
cannot change single-qubit entropies; Step I leaves it at U3(0) = I and Step III tunes it.
"""

from __future__ import annotations

import cmath
import math

import numpy as np
import torch

N_PARAMS = 11  # per block
N_STEP1_PARAMS = 5  # rz_j, ry_j, rz_k, ry_k, zz
ZZ_SIGNS = np.array([1.0, -1.0, -1.0, 1.0])


def blocks_for_gates(g: int, gates_per_block: int) -> int:
    """Number of blocks T that a budget of `g` two-qubit gates buys (G = gates_per_block·T)."""
    if g % gates_per_block:
        raise ValueError(
            f"gate budget G={g} is not a multiple of gates_per_block={gates_per_block}"
        )
    return g // gates_per_block


# ------------------------------------------------------------------ numpy (Step I, fast)
def ry_rz_np(rz: float, ry: float) -> list[list[complex]]:
    """RY(ry) · RZ(rz) as a nested 2x2 list (scalar math: Step I calls this ~10^5 times)."""
    c, s = math.cos(ry / 2), math.sin(ry / 2)
    ph = cmath.exp(-0.5j * rz)
    return [[c * ph, -s * ph.conjugate()], [s * ph, c * ph.conjugate()]]


def step1_block_np(p: np.ndarray) -> np.ndarray:
    """V with U3 = I from the five Step-I parameters (rz_j, ry_j, rz_k, ry_k, zz), 4x4."""
    a, b = ry_rz_np(p[0], p[1]), ry_rz_np(p[2], p[3])
    zz = cmath.exp(-0.5j * p[4])
    phases = (zz, zz.conjugate(), zz.conjugate(), zz)  # exp(-i zz/2 · z_j z_k)
    return np.array(
        [
            [phases[2 * r + q] * a[r][c] * b[q][d] for c in (0, 1) for d in (0, 1)]
            for r in (0, 1)
            for q in (0, 1)
        ]
    )


# ------------------------------------------------------------ torch (batched, autograd)
def _rz(a: torch.Tensor) -> torch.Tensor:
    ph = torch.exp(-0.5j * a.to(torch.complex128))
    zero = torch.zeros_like(ph)
    return torch.stack([torch.stack([ph, zero], -1), torch.stack([zero, ph.conj()], -1)], -2)


def _ry(b: torch.Tensor) -> torch.Tensor:
    c, s = torch.cos(b / 2).to(torch.complex128), torch.sin(b / 2).to(torch.complex128)
    return torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)


def u3(theta: torch.Tensor, phi: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """U3(θ, φ, λ) (..., 2, 2), the OpenQASM convention; U3(0, 0, 0) = I."""
    c, s = torch.cos(theta / 2).to(torch.complex128), torch.sin(theta / 2).to(torch.complex128)
    ep, el = torch.exp(1j * phi.to(torch.complex128)), torch.exp(1j * lam.to(torch.complex128))
    return torch.stack([torch.stack([c, -el * s], -1), torch.stack([ep * s, ep * el * c], -1)], -2)


def ry_rz(rz: torch.Tensor, ry: torch.Tensor) -> torch.Tensor:
    """RY(ry) · RZ(rz), batched (..., 2, 2)."""
    return _ry(ry) @ _rz(rz)


def kron2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batched Kronecker product of (..., 2, 2) matrices -> (..., 4, 4)."""
    return torch.einsum("...ab,...cd->...acbd", a, b).reshape(*a.shape[:-2], 4, 4)


def block_matrices(params: torch.Tensor) -> torch.Tensor:
    """V(alpha) for params (T, 11) -> (T, 4, 4) complex, differentiable."""
    p = params
    first = kron2(ry_rz(p[:, 0], p[:, 1]), ry_rz(p[:, 2], p[:, 3]))
    signs = torch.as_tensor(ZZ_SIGNS, dtype=p.dtype)
    zz = torch.exp(-0.5j * (p[:, 4:5] * signs).to(torch.complex128))
    last = kron2(u3(p[:, 5], p[:, 6], p[:, 7]), u3(p[:, 8], p[:, 9], p[:, 10]))
    return last @ (zz.unsqueeze(-1) * first)


def product_layer(beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """Step II's W|0>: per qubit RZ(β) RY(gamma)|0>, shape (N, 2)."""
    c, s = torch.cos(gamma / 2).to(torch.complex128), torch.sin(gamma / 2).to(torch.complex128)
    ph = torch.exp(-0.5j * beta.to(torch.complex128))
    return torch.stack([ph * c, ph.conj() * s], -1)
