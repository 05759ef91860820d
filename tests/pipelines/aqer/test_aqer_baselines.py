"""Baselines: the MPS-layer loader's construction and the HEC's gate count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayworks.pipelines.aqer import baselines
from rayworks.pipelines.aqer.baselines import (
    hec_load,
    hec_state,
    mps_layer_gates,
    mps_layer_load,
    right_canonical_mps,
)
from rayworks.pipelines.aqer.statevector import apply_2q, zero_state


def random_chi2_state(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dims = [1] + [2] * (n - 1) + [1]
    ts = [
        rng.standard_normal((dims[i], 2, dims[i + 1]))
        + 1j * rng.standard_normal((dims[i], 2, dims[i + 1]))
        for i in range(n)
    ]
    psi = ts[0]
    for t in ts[1:]:
        psi = np.tensordot(psi, t, axes=([-1], [0]))
    psi = psi.reshape((2,) * n)
    return psi / np.linalg.norm(psi)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_mps_layer_prepares_the_truncated_mps_exactly(n: int) -> None:
    psi = random_chi2_state(n, n)
    tensors = right_canonical_mps(psi, 2)
    for b in tensors[1:]:  # right-canonical: orthonormal rows
        m = b.reshape(b.shape[0], -1)
        np.testing.assert_allclose(m @ m.conj().T, np.eye(b.shape[0]), atol=1e-12)
    gates = mps_layer_gates(tensors)
    assert len(gates) == n - 1
    state = zero_state(n)
    for site, gate in enumerate(gates):
        np.testing.assert_allclose(gate @ gate.conj().T, np.eye(4), atol=1e-12)
        state = apply_2q(state, torch.from_numpy(gate), site, site + 1)
    assert abs(np.vdot(psi, state.numpy())) ** 2 == pytest.approx(1.0, abs=1e-10)
    assert mps_layer_load(psi, 1)[0] < 1e-10


def test_mps_layers_improve_on_an_entangled_state() -> None:
    rng = np.random.default_rng(0)
    v = rng.standard_normal(64) + 1j * rng.standard_normal(64)
    curve = mps_layer_load((v / np.linalg.norm(v)).reshape((2,) * 6), 4)
    assert curve[0] > 0.05 and curve[-1] < curve[0]


def test_hec_uses_exactly_g_rzz_gates(monkeypatch) -> None:
    calls = []
    real = baselines.apply_2q

    def counting(psi, gate, j, k):
        calls.append((j, k))
        return real(psi, gate, j, k)

    monkeypatch.setattr(baselines, "apply_2q", counting)
    n, g = 4, 7
    n_layers = -(-g // (n - 1)) + 1
    hec_state(
        torch.zeros((n_layers, n, 2), dtype=torch.float64), torch.ones(g, dtype=torch.float64), n
    )
    assert len(calls) == g and calls[:4] == [(0, 1), (1, 2), (2, 3), (0, 1)]


def test_hec_fits_a_product_state() -> None:
    target = np.zeros((2,) * 3, dtype=complex)
    target[1, 0, 1] = 1.0
    row = hec_load(target, 2, steps=150, lr=0.05, restarts=1, seed=0)
    assert row["infidelity"] < 1e-2 and row["g_used"] == 2
