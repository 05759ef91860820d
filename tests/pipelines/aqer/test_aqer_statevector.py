"""The state-vector simulator against dense 2^N x 2^N matrices built with np.kron."""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
import torch

from rayworks.pipelines.aqer.entropy import qubit_entropies, total_entropy
from rayworks.pipelines.aqer.statevector import apply_1q, apply_2q, product_state, zero_state
from rayworks.pipelines.aqer.targets import haar_unitary

KET = (
    np.array([[1, 0], [0, 0]]),
    np.array([[0, 1], [0, 0]]),
    np.array([[0, 0], [1, 0]]),
    np.array([[0, 0], [0, 1]]),
)


def dense_1q(gate: np.ndarray, q: int, n: int) -> np.ndarray:
    return reduce(np.kron, [gate if i == q else np.eye(2) for i in range(n)])


def dense_2q(gate: np.ndarray, j: int, k: int, n: int) -> np.ndarray:
    """Σ_{ab,cd} G[2a+b, 2c+d] |a><c|_j ⊗ |b><d|_k ⊗ I_rest, by np.kron (qubit 0 first)."""
    out = np.zeros((2**n, 2**n), dtype=complex)
    for a in range(2):
        for b in range(2):
            for c in range(2):
                for d in range(2):
                    ops = [np.eye(2)] * n
                    ops[j], ops[k] = KET[2 * a + c], KET[2 * b + d]
                    out += gate[2 * a + b, 2 * c + d] * reduce(np.kron, ops)
    return out


@pytest.mark.parametrize("n", [2, 3, 5])
def test_gate_sequence_matches_dense_unitary_product(n: int) -> None:
    rng = np.random.default_rng(n)
    vec = rng.standard_normal(2**n) + 1j * rng.standard_normal(2**n)
    vec /= np.linalg.norm(vec)
    psi, dense = torch.from_numpy(vec.reshape((2,) * n)), np.eye(2**n, dtype=complex)
    for _ in range(6):
        j, k = rng.choice(n, size=2, replace=False)  # any order, not only neighbours
        g2, g1, q = haar_unitary(4, rng), haar_unitary(2, rng), int(rng.integers(n))
        psi = apply_1q(apply_2q(psi, torch.from_numpy(g2), int(j), int(k)), torch.from_numpy(g1), q)
        dense = dense_1q(g1, q, n) @ dense_2q(g2, int(j), int(k), n) @ dense
    np.testing.assert_allclose(psi.numpy().reshape(-1), dense @ vec, atol=1e-12)


def test_product_state_is_kron() -> None:
    rng = np.random.default_rng(0)
    qubits = rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))
    want = reduce(np.kron, list(qubits))
    got = product_state(torch.from_numpy(qubits)).numpy().reshape(-1)
    np.testing.assert_allclose(got, want, atol=1e-14)


def test_apply_2q_rejects_same_qubit() -> None:
    with pytest.raises(ValueError, match="distinct"):
        apply_2q(zero_state(2), torch.eye(4, dtype=torch.complex128), 1, 1)


@pytest.mark.parametrize("n", [2, 3, 6])
def test_ghz_bell_and_product_entropies(n: int) -> None:
    ghz = np.zeros(2**n, dtype=complex)
    ghz[0] = ghz[-1] = 1 / np.sqrt(2)  # n = 2 is the Bell pair
    np.testing.assert_allclose(qubit_entropies(ghz.reshape((2,) * n)), np.ones(n), atol=1e-12)
    assert total_entropy(ghz.reshape((2,) * n)) == pytest.approx(n)
    rng = np.random.default_rng(n)
    qubits = rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))
    qubits /= np.linalg.norm(qubits, axis=1, keepdims=True)
    assert total_entropy(product_state(torch.from_numpy(qubits)).numpy()) == pytest.approx(
        0.0, abs=1e-12
    )
