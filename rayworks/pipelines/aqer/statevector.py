"""A differentiable torch state-vector simulator: states of shape (2,)*N, gates on axes.

Qubit 0 is the most significant bit of the amplitude index (row-major reshape of a
2^N vector). Gates are applied by `tensordot` over the target axes and the output axes are
moved back in place, so every operation is differentiable (Step III's Adam, HEC) and costs
O(2^N) per gate instead of the O(4^N) of a dense matrix.
"""

from __future__ import annotations

import torch

DTYPE = torch.complex128


def zero_state(n_qubits: int) -> torch.Tensor:
    """|0...0> as a (2,)*N complex tensor."""
    psi = torch.zeros((2,) * n_qubits, dtype=DTYPE)
    psi[(0,) * n_qubits] = 1.0
    return psi


def from_vector(vec) -> torch.Tensor:
    """A length-2^N amplitude vector (numpy or torch) as a (2,)*N complex tensor."""
    vec = torch.as_tensor(vec).to(DTYPE).reshape(-1)
    n = vec.numel().bit_length() - 1
    if 2**n != vec.numel():
        raise ValueError(f"state length {vec.numel()} is not a power of 2")
    return vec.reshape((2,) * n)


def product_state(qubits: torch.Tensor) -> torch.Tensor:
    """⊗_i qubits[i] for qubits of shape (N, 2): the (2,)*N product state."""
    psi = qubits[0]
    for q in qubits[1:]:
        psi = (psi.unsqueeze(-1) * q).reshape(-1)
    return psi.reshape((2,) * qubits.shape[0])


def apply_1q(psi: torch.Tensor, gate: torch.Tensor, q: int) -> torch.Tensor:
    """Apply the 2x2 `gate` to qubit `q` of `psi` (2,)*N."""
    out = torch.tensordot(gate, psi, dims=([1], [q]))
    return torch.movedim(out, 0, q)


def apply_2q(psi: torch.Tensor, gate: torch.Tensor, j: int, k: int) -> torch.Tensor:
    """Apply the 4x4 `gate` to qubits (j, k) of `psi`; row index = 2*out_j + out_k."""
    if j == k:
        raise ValueError(f"a two-qubit gate needs two distinct qubits, got ({j}, {k})")
    out = torch.tensordot(gate.reshape(2, 2, 2, 2), psi, dims=([2, 3], [j, k]))
    return torch.movedim(out, (0, 1), (j, k))


def overlap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """<a|b> of two states of the same shape."""
    return torch.sum(a.conj() * b)


def infidelity(target: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """1 - |<target|psi>|^2 (both normalised)."""
    return 1.0 - overlap(target, psi).abs() ** 2
