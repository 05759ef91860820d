"""Target states |v> of the reproduction (method card §1, CPU recipe; all reconstructed).

- `digits`: scikit-learn's 8x8 `load_digits` images, bicubically resized to
  2^ceil(N/2) x 2^floor(N/2) pixels (8x8 -> 32x32 at N = 10), flattened and L2-normalised
  (amplitude encoding; a stand-in for the paper's MNIST).
- `tfim`: ground state of H = -Σ Z_i Z_{i+1} - h Σ X_i (open chain) by sparse `eigsh`.
- `brickwork`: |0...0> through `depth` brickwork layers of Haar-random two-qubit gates
  (a stand-in for the paper's S-RQC).

Every target is a numpy array of shape (2,)*N, normalised, built from its own seed.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import qr
from scipy.ndimage import zoom
from scipy.sparse.linalg import eigsh
from sklearn.datasets import load_digits

from rayworks.pipelines.aqer.statevector import apply_2q, zero_state

FAMILIES = ("digits", "tfim", "brickwork")


def digits_state(n_qubits: int, index: int) -> np.ndarray:
    """Digit image `index` of `load_digits`, resized (cubic spline) to 2^N pixels."""
    image = load_digits().images[index]
    shape = (2 ** ((n_qubits + 1) // 2), 2 ** (n_qubits // 2))
    big = np.clip(zoom(image, (shape[0] / 8, shape[1] / 8), order=3), 0.0, None)
    vec = big.reshape(-1).astype(complex)
    return (vec / np.linalg.norm(vec)).reshape((2,) * n_qubits)


def tfim_hamiltonian(n_qubits: int, h: float) -> sp.csr_matrix:
    """H = -Σ_i Z_i Z_{i+1} - h Σ_i X_i on an open chain, sparse 2^N x 2^N."""
    eye, x, z = (
        sp.identity(2, format="csr"),
        sp.csr_matrix([[0, 1], [1, 0]]),
        sp.csr_matrix([[1, 0], [0, -1]]),
    )

    def site(ops: dict[int, sp.csr_matrix]) -> sp.csr_matrix:
        out = sp.identity(1, format="csr")
        for i in range(n_qubits):
            out = sp.kron(out, ops.get(i, eye), format="csr")
        return out

    ham = sp.csr_matrix((2**n_qubits, 2**n_qubits))
    for i in range(n_qubits - 1):
        ham = ham - site({i: z, i + 1: z})
    for i in range(n_qubits):
        ham = ham - h * site({i: x})
    return ham


def tfim_state(n_qubits: int, h: float) -> np.ndarray:
    """TFIM ground state by exact (sparse) diagonalisation; sign fixed by largest amplitude."""
    _, vecs = eigsh(
        tfim_hamiltonian(n_qubits, h), k=1, which="SA", tol=1e-12, v0=np.ones(2**n_qubits)
    )
    vec = vecs[:, 0]
    vec = vec * np.sign(vec[np.argmax(np.abs(vec))])
    return (vec / np.linalg.norm(vec)).astype(complex).reshape((2,) * n_qubits)


def haar_unitary(dim: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-random unitary (QR of a complex Gaussian with the phase fix of Mezzadri 2007)."""
    z = (rng.standard_normal((dim, dim)) + 1j * rng.standard_normal((dim, dim))) / np.sqrt(2)
    q, r = qr(z)
    d = np.diag(r)
    return q * (d / np.abs(d))


def brickwork_state(n_qubits: int, depth: int, seed: int) -> np.ndarray:
    """|0...0> through `depth` layers of Haar two-qubit gates on (0,1),(2,3).. / (1,2),(3,4).."""
    import torch

    rng = np.random.default_rng(seed)
    psi = zero_state(n_qubits)
    for layer in range(depth):
        for j in range(layer % 2, n_qubits - 1, 2):
            psi = apply_2q(psi, torch.from_numpy(haar_unitary(4, rng)), j, j + 1)
    return psi.numpy()


def make_target(family: str, n_qubits: int, index: int, *, tfim_fields: list[float],
                depth: int, seed: int) -> np.ndarray:  # fmt: skip
    """Target `index` of `family` (digit image index / field h = tfim_fields[index] / seed)."""
    if family == "digits":
        return digits_state(n_qubits, index)
    if family == "tfim":
        return tfim_state(n_qubits, tfim_fields[index])
    if family == "brickwork":
        return brickwork_state(n_qubits, depth, seed * 1000 + index)
    raise ValueError(f"unknown target family {family!r}; known: {FAMILIES}")
