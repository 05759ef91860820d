"""Targets: TFIM ground state vs dense diagonalisation, digits and brickwork states."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.pipelines.aqer.targets import (
    brickwork_state,
    digits_state,
    make_target,
    tfim_hamiltonian,
    tfim_state,
)


def test_tfim_ground_state_matches_dense_diagonalisation() -> None:
    n, h = 4, 0.7
    dense = tfim_hamiltonian(n, h).toarray()
    z = np.diag([1.0, -1.0])
    x = np.array([[0.0, 1.0], [1.0, 0.0]])
    # one term checked by hand: -Z_0 Z_1 contributes -1 on |0000>, -h X_3 couples |0000>,|0001>
    assert dense[0, 0] == pytest.approx(-(n - 1)) and dense[0, 1] == pytest.approx(-h)
    assert np.allclose(z @ z, np.eye(2)) and np.allclose(x @ x, np.eye(2))
    evals, evecs = np.linalg.eigh(dense)
    psi = tfim_state(n, h).reshape(-1)
    assert abs(np.vdot(evecs[:, 0], psi)) ** 2 == pytest.approx(1.0, abs=1e-8)
    assert np.vdot(psi, dense @ psi).real == pytest.approx(evals[0], abs=1e-9)


def test_digits_and_brickwork_states() -> None:
    d = digits_state(6, 0)
    assert d.shape == (2,) * 6 and np.linalg.norm(d) == pytest.approx(1.0)
    assert np.all(d.real >= 0) and np.all(d.imag == 0)
    assert digits_state(5, 0).shape == (2,) * 5
    b = brickwork_state(4, 3, seed=1)
    assert np.linalg.norm(b) == pytest.approx(1.0)
    np.testing.assert_array_equal(b, brickwork_state(4, 3, seed=1))
    assert not np.allclose(b, brickwork_state(4, 3, seed=2))
    with pytest.raises(ValueError, match="unknown target family"):
        make_target("mnist", 4, 0, tfim_fields=[1.0], depth=1, seed=0)
