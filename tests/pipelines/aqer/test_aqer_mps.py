"""MPS path: gates, RDMs and overlaps equal the state vector's; TFIM by TEBD equals eigsh;
AQER Steps I-II on an MPS equal the state-vector path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.sparse.linalg import eigsh

from rayworks.pipelines.aqer import mps
from rayworks.pipelines.aqer.aqer import step_one, steps_two_three
from rayworks.pipelines.aqer.aqer_mps import candidate_pairs, step_one_mps, step_two_mps
from rayworks.pipelines.aqer.entropy import pair_rdm, single_rdms
from rayworks.pipelines.aqer.pieces import scaling_piece
from rayworks.pipelines.aqer.statevector import apply_2q
from rayworks.pipelines.aqer.targets import (
    haar_unitary,
    tfim_hamiltonian,
    tfim_mps_state,
    tfim_state,
)


def random_state(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    psi = rng.standard_normal((2,) * n) + 1j * rng.standard_normal((2,) * n)
    return psi / np.linalg.norm(psi)


def test_dense_round_trip_and_overlap() -> None:
    a, b = random_state(5, 0), random_state(5, 1)
    ma, mb = mps.from_dense(a), mps.from_dense(b)
    np.testing.assert_allclose(mps.to_dense(ma), a, atol=1e-12)
    assert abs(mps.overlap(ma, mb) - np.vdot(a, b)) < 1e-12
    mps.move_center(ma, 0)  # canonical moves do not change the state
    np.testing.assert_allclose(mps.to_dense(ma), a, atol=1e-12)


@pytest.mark.parametrize(("j", "k"), [(1, 2), (2, 1), (0, 5), (4, 1), (3, 5)])
def test_gates_match_state_vector(j: int, k: int) -> None:
    psi = random_state(6, 2)
    m = mps.from_dense(psi)
    gate = haar_unitary(4, np.random.default_rng(3))
    dropped = mps.apply_gate(m, gate, j, k)  # no truncation
    want = apply_2q(torch.from_numpy(psi), torch.from_numpy(gate), j, k).numpy()
    np.testing.assert_allclose(mps.to_dense(m), want, atol=1e-12)
    assert dropped < 1e-20


def test_truncation_reports_discarded_weight() -> None:
    m = mps.from_dense(random_state(6, 4))
    dropped = mps.apply_gate(m, haar_unitary(4, np.random.default_rng(5)), 2, 3, max_bond=2)
    assert m.max_bond() <= 4 and 0 < dropped < 1  # bond (2,3) capped; others untouched
    assert abs(mps.overlap(m, m) - 1) < 1e-12  # renormalised


def test_rdms_match_dense() -> None:
    psi = random_state(6, 6)
    m = mps.from_dense(psi)
    np.testing.assert_allclose(mps.single_rdms(m), single_rdms(psi), atol=1e-12)
    for j in range(6):
        for k in range(6):
            if j != k:
                np.testing.assert_allclose(mps.pair_rdm(m, j, k), pair_rdm(psi, j, k), atol=1e-12)


def test_tfim_tebd_matches_eigsh() -> None:
    n, h = 10, 1.0
    m, energy, dropped = tfim_mps_state(n, h)
    exact = tfim_state(n, h).reshape(-1)
    e0 = eigsh(tfim_hamiltonian(n, h), k=1, which="SA")[0][0]
    assert abs(np.vdot(exact, mps.to_dense(m).reshape(-1))) ** 2 > 0.999
    assert abs(energy - e0) < 1e-6 * abs(e0)
    assert abs(e0 - (1 - 1 / np.sin(np.pi / (2 * (2 * n + 1))))) < 1e-9  # closed form
    assert dropped < 1e-6


def test_aqer_steps_one_two_match_state_vector() -> None:
    psi = tfim_state(6, 1.0)
    sv = step_one(psi, 6)
    one, reduced, dropped = step_one_mps(mps.from_dense(psi), 6)
    assert one.pairs == sv.pairs and dropped < 1e-20
    np.testing.assert_allclose(one.entropy, sv.entropy, atol=1e-5)
    want = steps_two_three(psi, sv.pairs, sv.params, adam_steps=0, lr=1e-2)
    got = step_two_mps(mps.from_dense(psi), reduced, one)
    assert abs(got["infidelity_step2"] - want["infidelity_step2"]) < 1e-5
    assert abs(got["infidelity_step2_loader"] - want["infidelity_step2"]) < 1e-5
    assert abs(got["entropy_step1"] - want["entropy_step1"]) < 1e-5


def test_pair_range_and_mps_scaling_piece() -> None:
    assert candidate_pairs(5, 2) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (2, 4), (3, 4)]
    settings = {"nm_tol": 1e-4, "nm_max_evals": 300, "nm_init_step": 0.5, "lr": 1e-2}
    row = scaling_piece(6, 3, settings, {"max_bond": 8, "cutoff": 1e-12, "pair_range": 2})
    assert row["path"] == "mps" and row["in_bounds"] == 1.0
    assert row["entropy_step1"] < row["entropy_target"]
    assert abs(row["infidelity_step2_loader"] - row["infidelity_step2"]) < 1e-6
