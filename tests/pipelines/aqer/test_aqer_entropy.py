"""Rényi-2 entropies, the pair-RDM shortcut of Step I, and the bounds f1, f2 (Thm 3.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayworks.pipelines.aqer.aqer import apply_block_np, pair_objective, step_two
from rayworks.pipelines.aqer.blocks import block_matrices, product_layer
from rayworks.pipelines.aqer.entropy import (
    f1,
    f2,
    g,
    pair_rdm,
    qubit_entropies,
    renyi2,
    single_rdms,
    total_entropy,
)
from rayworks.pipelines.aqer.statevector import product_state


def random_state(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(2**n) + 1j * rng.standard_normal(2**n)
    return (v / np.linalg.norm(v)).reshape((2,) * n)


def test_bounds_at_zero_and_small_s_slopes() -> None:
    n = 7
    assert f1(0.0, n) == pytest.approx(0.0, abs=1e-15)
    assert f2(0.0) == pytest.approx(0.0, abs=1e-15)
    eps = 1e-6
    assert f1(eps, n) / eps == pytest.approx(math.log(2) / (2 * n), rel=1e-4)
    assert f2(eps) / eps == pytest.approx(math.log(2) / 2, rel=1e-4)


def test_f1_below_f2_everywhere_and_f2_at_integers() -> None:
    for n in (2, 5, 10):
        s = np.linspace(0, n, 2001)
        assert np.all(f1(s, n) <= f2(s) + 1e-15)
    np.testing.assert_allclose(f2(np.arange(6.0)), np.arange(6.0) / 2, atol=1e-15)
    assert f1(10.0, 10) == pytest.approx(0.5)  # all qubits maximally mixed


def test_g_is_one_minus_top_eigenvalue() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        m = rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2))
        rho = m @ m.conj().T
        rho /= np.trace(rho).real
        assert 1 - np.linalg.eigvalsh(rho)[-1] == pytest.approx(float(g(renyi2(rho))), abs=1e-12)


def test_pair_rdm_shortcut_equals_full_state_entropy_change() -> None:
    psi = random_state(5, 2)
    rng = np.random.default_rng(3)
    for j, k in [(0, 1), (3, 1), (0, 4)]:
        p = rng.uniform(-np.pi, np.pi, 11)
        p[5:] = 0.0  # Step I blocks: U3 layer at identity
        v = block_matrices(torch.from_numpy(p[None]))[0].numpy()
        before, after = qubit_entropies(psi), qubit_entropies(apply_block_np(psi, v, j, k))
        shortcut = pair_objective(p[:5], pair_rdm(psi, j, k))
        assert after[j] + after[k] == pytest.approx(shortcut, abs=1e-10)
        others = [i for i in range(5) if i not in (j, k)]
        np.testing.assert_allclose(after[others], before[others], atol=1e-12)


def test_pair_rdm_traces_to_single_rdms() -> None:
    psi = random_state(4, 4)
    rho = pair_rdm(psi, 2, 0).reshape(2, 2, 2, 2)
    singles = single_rdms(psi)
    np.testing.assert_allclose(np.einsum("abcb->ac", rho), singles[2], atol=1e-12)
    np.testing.assert_allclose(np.einsum("abac->bc", rho), singles[0], atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_theorem_bounds_hold_for_top_eigenvector_products(seed: int) -> None:
    """Brute force: for random states, the Step II product's infidelity lies in [f1, f2]
    and no random product state beats f1 (N = 4)."""
    psi = random_state(4, seed) if seed % 2 else _weakly_entangled(4, seed)
    s = total_entropy(psi)
    beta, gamma = step_two(psi)
    prod = product_state(product_layer(torch.from_numpy(beta), torch.from_numpy(gamma)))
    inf = 1 - abs(np.vdot(psi.reshape(-1), prod.numpy().reshape(-1))) ** 2
    assert f1(s, 4) - 1e-12 <= inf <= f2(s) + 1e-12
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((200, 4, 2)) + 1j * rng.standard_normal((200, 4, 2))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    fids = [abs(np.vdot(product_state(torch.from_numpy(x)).numpy(), psi)) ** 2 for x in q]
    assert 1 - max(fids) >= f1(s, 4) - 1e-12


def _weakly_entangled(n: int, seed: int) -> np.ndarray:
    """A product state plus a small random component (small S: the near-linear regime)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    v = product_state(torch.from_numpy(q)).numpy() + 0.1 * random_state(n, seed + 100)
    return v / np.linalg.norm(v)
