"""MAP-EM / ML-EM: monotone objective, the M-step row update solves its normal equations."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.pipelines.lssm.kalman import smooth
from rayworks.pipelines.lssm.map_em import (
    EMOptions,
    fit_em,
    m_step,
    random_init,
    sufficient_stats,
    truncate,
    update_gamma,
)
from rayworks.pipelines.lssm.systems import make_dataset, make_system


@pytest.fixture(scope="module")
def data():
    truth = make_system("s3", 0.3, seed=2)
    return truth, make_dataset(truth, 120, 2 / 3, seed=2)


@pytest.mark.parametrize("prior", [True, False])
def test_objective_never_decreases(data, prior: bool) -> None:
    truth, ds = data
    init = random_init(truth.n, truth.n, truth.n, seed=5)
    res = fit_em(init, ds.u_train, ds.y_train, EMOptions(prior=prior, max_iter=25))
    obj = np.asarray(res.objective)
    assert len(obj) == 25 and np.all(np.diff(obj) >= -1e-7 * np.abs(obj[1:]))
    assert obj[-1] > obj[0] + 10  # it actually moves
    if not prior:
        assert res.objective == res.loglik


def test_a_row_update_solves_its_normal_equations(data) -> None:
    """Row r of A from the batched solve = argmin of the explicit per-time objective."""
    truth, ds = data
    u, y = ds.u_train, ds.y_train
    model = random_init(truth.n, truth.n, truth.n, seed=1)
    gamma = update_gamma(model, 1e-6, 1e-6)
    sm = smooth(model, u, y)
    new = m_step(model, sufficient_stats(sm, u, y), sm, gamma)
    m, P, lag = sm.mean, sm.cov, sm.lag
    for r in range(truth.n):
        # d/dA_r of Σ_t E[(x_{t,r} - A_r x_{t-1} - B_r u_t)²] / (2 r_r) + Σ_j A_rj² / (2 Γ_rj)
        gram = sum(P[t - 1] + np.outer(m[t - 1], m[t - 1]) for t in range(1, len(m)))
        rhs = sum(
            lag[t][r] + m[t, r] * m[t - 1] - (model.B[r] @ u[t - 1]) * m[t - 1]
            for t in range(1, len(m))
        )
        normal = gram / model.r[r] + np.diag(1 / gamma["A"][r])
        expected = np.linalg.solve(normal, rhs / model.r[r])
        np.testing.assert_allclose(new.A[r], expected, rtol=1e-8, atol=1e-12)
    # the C rows: Σ_t (y_{t,r} - D_r u_t) m_tᵀ against Σ_t E[x_t x_tᵀ] + q_r diag(1/Γ)
    gram_c = sum(P[t] + np.outer(m[t], m[t]) for t in range(1, len(m)))
    for r in range(truth.n):
        rhs = sum((y[t - 1, r] - model.D[r] @ u[t - 1]) * m[t] for t in range(1, len(m)))
        expected = np.linalg.solve(gram_c + model.q[r] * np.diag(1 / gamma["C"][r]), rhs)
        np.testing.assert_allclose(new.C[r], expected, rtol=1e-8, atol=1e-12)


def test_gamma_is_the_inverse_gamma_posterior_mode_and_truncation_zeros(data) -> None:
    truth, _ = data
    g = update_gamma(truth, 2.0, 0.5)["A"]
    theta = truth.A
    # mode of IG(a0 + 1/2, b0 + θ²/2) is (b0 + θ²/2) / (a0 + 3/2)
    np.testing.assert_allclose(g, (0.5 + theta**2 / 2) / (2.0 + 1.5))
    cut = truncate(truth.with_(A=truth.A + 1e-4), 1e-2)
    assert np.all((cut.A == 0) == (np.abs(truth.A + 1e-4) < 1e-2 * np.abs(truth.A + 1e-4).max()))


def test_map_em_zeroes_entries_that_ml_em_keeps(data) -> None:
    truth, ds = data
    init = random_init(truth.n, truth.n, truth.n, seed=5)
    opts = {"max_iter": 40}
    mapm = fit_em(init, ds.u_train, ds.y_train, EMOptions(prior=True, threshold=1e-3, **opts))
    mle = fit_em(init, ds.u_train, ds.y_train, EMOptions(prior=False, **opts))
    small = lambda M: int((np.abs(M) < 1e-3 * np.abs(M).max()).sum())  # noqa: E731
    assert small(mapm.model.B) > small(mle.model.B)


@pytest.mark.parametrize("prior", [True, False])
def test_em_stops_at_the_first_iterate_within_tolerance(data, prior: bool) -> None:
    """Against the same run without a tolerance: EM stops at the first k with
    |obj_k - obj_{k-1}| <= tol |obj_k|, returns that iterate, and says it converged."""
    truth, ds = data
    init = random_init(truth.n, truth.n, truth.n, seed=5)
    tol, cap = 1e-3, 200
    full = fit_em(init, ds.u_train, ds.y_train, EMOptions(prior=prior, max_iter=cap))
    obj = np.asarray(full.objective)
    first = next(k for k in range(1, cap) if abs(obj[k] - obj[k - 1]) <= tol * abs(obj[k]))
    res = fit_em(init, ds.u_train, ds.y_train, EMOptions(prior=prior, max_iter=cap, tol=tol))
    assert res.converged and not full.converged
    assert len(res.objective) == first + 1 < cap
    np.testing.assert_array_equal(res.objective, obj[: first + 1])
    # the returned model is iterate `first`: its objective is the last one recorded
    again = fit_em(res.model, ds.u_train, ds.y_train, EMOptions(prior=False, max_iter=1))
    assert again.loglik[0] == pytest.approx(res.loglik[-1], rel=1e-12)


def test_em_cap_applies_when_tolerance_is_not_met(data) -> None:
    truth, ds = data
    init = random_init(truth.n, truth.n, truth.n, seed=5)
    res = fit_em(init, ds.u_train, ds.y_train, EMOptions(max_iter=7, tol=1e-12))
    assert len(res.objective) == 7 and not res.converged


def test_config_knobs_reach_em(data) -> None:
    from rayworks.pipelines.lssm.config import LSSMConfig
    from rayworks.pipelines.lssm.trial import em_options

    cfg = LSSMConfig(em_tol=3e-4, em_iters=42, a0=2e-6)
    opts = em_options(cfg, prior=True, threshold=0.2)
    assert (opts.tol, opts.max_iter, opts.a0, opts.threshold, opts.prior) == (
        3e-4,
        42,
        2e-6,
        0.2,
        True,
    )
