"""Target states |v> of the reproduction (our CPU recipe, docs/aqer.md; all reconstructed).

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


def make_target(
    family: str, n_qubits: int, index: int, *, tfim_fields: list[float], depth: int, seed: int
) -> np.ndarray:
    """Target `index` of `family` (digit image index / field h = tfim_fields[index] / seed)."""
    if family == "digits":
        return digits_state(n_qubits, index)
    if family == "tfim":
        return tfim_state(n_qubits, tfim_fields[index])
    if family == "brickwork":
        return brickwork_state(n_qubits, depth, seed * 1000 + index)
    raise ValueError(f"unknown target family {family!r}; known: {FAMILIES}")


# ------------------------------------------------- TFIM beyond exact diagonalisation
def tfim_bond_hamiltonian(n_qubits: int, h: float, bond: int) -> np.ndarray:
    """4x4 term of bond (i, i+1): -Z_i Z_{i+1} - h (w_l X_i + w_r X_{i+1}), the field of
    each inner site split half/half between its two bonds (w = 1 on the chain ends)."""
    x, z, eye = np.array([[0, 1], [1, 0]]), np.diag([1.0, -1.0]), np.eye(2)
    w_l = 1.0 if bond == 0 else 0.5
    w_r = 1.0 if bond == n_qubits - 2 else 0.5
    return -np.kron(z, z) - h * (w_l * np.kron(x, eye) + w_r * np.kron(eye, x))


def tfim_energy_mps(m, h: float) -> float:
    """<H> of a normalised MPS from its neighbour-pair and single-site RDMs."""
    from rayworks.pipelines.aqer import mps

    envs = mps.environments(m)
    zz = sum(
        float(np.real(np.diag(mps.pair_rdm(m, i, i + 1, envs)) @ np.array([1, -1, -1, 1])))
        for i in range(m.n - 1)
    )
    x = float(np.sum(2 * mps.single_rdms(m, envs)[:, 0, 1].real))
    return -zz - h * x


def tfim_mps_state(
    n_qubits: int,
    h: float,
    max_bond: int = 32,
    cutoff: float = 1e-12,
    taus: tuple[float, ...] = (0.2, 0.1, 0.05, 0.02),
    tol: float = 1e-9,
    max_sweeps: int = 600,
):
    """TFIM ground state as an MPS by imaginary-time TEBD (reconstructed choice over DMRG:
    it reuses the gate code). One step is a symmetric (second-order) sweep
    e^{-dτ/2 h_0} ⋯ e^{-dτ/2 h_{N-2}} e^{-dτ/2 h_{N-2}} ⋯ e^{-dτ/2 h_0}, starting from
    |+>^N; each dτ in `taus` runs until the energy per 10 steps changes by < `tol`·N.
    Returns (MPS, energy, summed discarded weight)."""
    from scipy.linalg import expm

    from rayworks.pipelines.aqer import mps

    m = mps.product_mps(np.full((n_qubits, 2), 1 / np.sqrt(2)))
    bonds = [tfim_bond_hamiltonian(n_qubits, h, b) for b in range(n_qubits - 1)]
    dropped, energy = 0.0, tfim_energy_mps(m, h)
    for tau in taus:
        gates = [expm(-0.5 * tau * hb) for hb in bonds]
        for step in range(max_sweeps):
            for b in range(n_qubits - 1):
                dropped += mps.apply_adjacent(m, gates[b], b, max_bond, cutoff)
            for b in range(n_qubits - 2, -1, -1):
                dropped += mps.apply_adjacent(m, gates[b], b, max_bond, cutoff, True)
            if step % 10 == 9:
                new = tfim_energy_mps(m, h)
                done, energy = abs(new - energy) < tol * n_qubits, new
                if done:
                    break
    return m, energy, dropped
