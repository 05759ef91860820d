"""N4SID and Ho-Kalman recover a noiseless transfer function; the generalised-permutation
matcher accepts Π Λ and rejects a dense Φ; support F1."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.pipelines.lssm.subspace import (
    ho_kalman,
    markov_parameters,
    n4sid,
    standard_markov,
    to_paper_form,
)
from rayworks.pipelines.lssm.systems import make_system, simulate
from rayworks.pipelines.lssm.topology import (
    estimate_phi,
    match_generalized_permutation,
    support_f1,
    support_scores,
    topology_metrics,
)


def _noiseless(name: str, T: int = 300, shrink: float = 1.0):
    truth = make_system(name, 1e-12, seed=4)
    truth = truth.with_(A=shrink * truth.A, P0=1e-30 * truth.P0)
    u, _, y = simulate(truth, T, seed=4)
    A, B, C, D = truth.A, truth.B, truth.C, truth.D
    return truth, u, y, standard_markov(A, B, C @ A, C @ B + D, 8)


@pytest.mark.parametrize("name", ["s2", "s3"])
def test_n4sid_recovers_markov_parameters(name: str) -> None:
    truth, u, y, h_true = _noiseless(name)
    est = n4sid(u, y, truth.n, block_rows=4)
    np.testing.assert_allclose(standard_markov(*est, 8), h_true, atol=1e-6)


@pytest.mark.parametrize(("name", "T", "lags"), [("s2", 500, 40), ("s1", 800, 20)])
def test_ho_kalman_recovers_markov_parameters_and_paper_form(name, T, lags) -> None:
    truth, u, y, h_true = _noiseless(name, T=T, shrink=0.5)  # A^L negligible: FIR exact
    est = ho_kalman(markov_parameters(u, y, lags=lags), truth.n)
    np.testing.assert_allclose(standard_markov(*est, 8), h_true, atol=1e-4)
    if name == "s1":  # invertible A: the paper form has the same C A^k B and D + C B
        paper = to_paper_form(*est)
        A, B, C, D = truth.A, truth.B, truth.C, truth.D
        np.testing.assert_allclose(paper.D + paper.C @ paper.B, D + C @ B, atol=1e-4)
        np.testing.assert_allclose(paper.C @ paper.A @ paper.B, C @ A @ B, atol=1e-4)


def test_matcher_accepts_generalised_permutation_rejects_dense() -> None:
    truth = make_system("s1", 0.1, seed=0)
    rng = np.random.default_rng(0)
    perm = rng.permutation(10)
    phi = np.eye(10)[perm] * rng.uniform(0.5, 2.0, 10) * rng.choice([-1, 1], 10)
    A_hat, B_hat = phi @ truth.A @ np.linalg.inv(phi), phi @ truth.B
    got_perm, off, _ = match_generalized_permutation(estimate_phi(B_hat, truth.B))
    assert off < 1e-12 and np.array_equal(got_perm, np.argsort(perm))  # column j -> row
    ok = topology_metrics(A_hat, truth.A, estimate_phi(B_hat, truth.B), 0.05, 0.01)
    assert ok["success"] == 1.0 and ok["support_f1"] == 1.0
    dense = np.eye(10) + 0.5 * rng.standard_normal((10, 10))
    bad = topology_metrics(dense @ truth.A @ np.linalg.inv(dense), truth.A, dense, 0.05, 0.01)
    assert bad["success"] == 0.0 and bad["offdiag_energy"] > 0.05 and bad["support_f1"] < 0.5


def test_state_regression_phi_and_support_f1() -> None:
    rng = np.random.default_rng(1)
    phi = rng.standard_normal((4, 4))
    x = rng.standard_normal((50, 4))
    np.testing.assert_allclose(estimate_phi(np.ones((4, 2)), np.ones((4, 2)), x @ phi.T, x), phi)
    ref = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert support_f1(np.array([[1.0, 0.5], [0.0, 2.0]]), ref, 0.01) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="states"):
        estimate_phi(np.ones((4, 2)), np.ones((4, 2)))


def test_support_precision_recall_hand_computed() -> None:
    """True pattern {(0,0), (0,1), (2,1)}; Φ = Π Λ with Π[perm[i], i] = 1, perm = (2, 0, 1),
    carries it to {(2,2), (2,0), (1,0)}. Â claims {(2,2), (2,0), (0,0)} ((1,1) is below
    1 % of max): 2 of 3 right, 2 of 3 found."""
    A = np.zeros((3, 3))
    A[0, 0], A[0, 1], A[2, 1] = 0.5, -0.7, 0.9
    phi = np.zeros((3, 3))
    phi[2, 0], phi[0, 1], phi[1, 2] = 2.0, -1.0, 0.5
    A_hat = np.zeros((3, 3))
    A_hat[2, 2], A_hat[2, 0], A_hat[0, 0], A_hat[1, 1] = 1.0, 0.5, 0.3, 0.005
    got = topology_metrics(A_hat, A, phi, 0.05, 0.01)
    assert got["success"] == 1.0 and got["offdiag_energy"] == pytest.approx(0.0)
    assert got["support_precision"] == pytest.approx(2 / 3)
    assert got["support_recall"] == pytest.approx(2 / 3)
    assert got["support_f1"] == pytest.approx(2 / 3) and got["exact_support"] == 0.0
    exact = topology_metrics(phi @ A @ np.linalg.inv(phi), A, phi, 0.05, 0.01)
    assert exact["support_precision"] == exact["support_recall"] == exact["exact_support"] == 1.0
    # against the unpermuted pattern: {(2,2)} is all wrong; {(0,0), (2,2)} is 1 of 2 right,
    # 1 of 3 found; an empty estimate claims nothing wrong and finds nothing
    one = support_scores(np.diag([0.0, 0.0, 1.0]), A, 0.01)
    assert one["support_precision"] == 0.0 and one["support_recall"] == 0.0
    two = support_scores(np.array([[1.0, 0, 0], [0, 0, 0], [0, 0, 1.0]]), A, 0.01)
    assert (two["support_precision"], two["support_recall"]) == (0.5, pytest.approx(1 / 3))
    empty = support_scores(np.zeros((3, 3)), A, 0.01)
    assert (empty["support_precision"], empty["support_recall"]) == (1.0, 0.0)
