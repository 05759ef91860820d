"""The shared-sample estimator of u and Z against exact attention: it self-normalises (the
independent-draw estimator does not), it is unbiased, and its row error falls as m grows;
plus the landmark-draw averaging, the paired RLS/uniform ratio and the sublinear-m grid."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import softmax

from rayworks.pipelines.attnrow.config import AttnRowConfig, SyntheticConfig
from rayworks.pipelines.attnrow.evaluate import draw_seed, error_piece, sublinear_m
from rayworks.pipelines.attnrow.inputs import clustered_tokens
from rayworks.pipelines.attnrow.kernel import exp_kernel
from rayworks.pipelines.attnrow.pipeline import rls_over_uniform
from rayworks.pipelines.attnrow.report import loglog_slope
from rayworks.pipelines.attnrow.structure import (
    AttentionRows,
    BuildOptions,
    RowOracle,
    build,
    sample_stages,
)

SYN = SyntheticConfig(d=16, clusters=4)


def dense_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The reference: every row of softmax(QKᵀ/√d) V, formed densely (independent code)."""
    return softmax(q @ k.T / math.sqrt(q.shape[1]), axis=1) @ v


def sampled(q, k, v, landmarks, m_inv, m: int, seed: int, estimator: str) -> np.ndarray:
    """Rows of every query from u, Z sampled with m rows around fixed landmarks."""
    opts = BuildOptions(s=len(landmarks), m=m, lam=1.0, estimator=estimator)
    u, z, alpha = sample_stages(RowOracle(q, k, v), landmarks, opts, np.random.default_rng(seed))
    return AttentionRows(landmarks, m_inv, u, z, alpha).query_many(q)


@pytest.fixture(scope="module")
def tokens():
    q, k, v = clustered_tokens(SYN, 512, seed=0)
    lam = 0.01 * 2 * len(k)
    opts = BuildOptions(
        s=96, m=1, lam=lam, landmarks="rls_exact", normaliser="exact", product="exact"
    )
    exact_dz = build(RowOracle(q, k, v), opts, np.random.default_rng(0))
    return q, k, v, exact_dz


@pytest.mark.parametrize("estimator", ["shared", "independent"])
def test_constant_values_give_constant_rows_only_with_a_shared_sample(tokens, estimator) -> None:
    q, k, _, exact_dz = tokens
    ones = np.ones((len(k), 3))
    rows = sampled(q, k, ones, exact_dz.landmarks, exact_dz.m_inv, 64, 1, estimator)
    gap = np.abs(rows - 1.0).max()
    if estimator == "shared":  # Σ_j ω_ij = 1 for every row: exact up to round-off
        assert gap < 1e-9
    else:  # u and Z from different draws: the ratio is off by the u/Z mismatch
        assert gap > 1e-2


@pytest.mark.parametrize("estimator", ["shared", "independent"])
def test_shifting_values_shifts_rows_exactly_only_with_a_shared_sample(tokens, estimator) -> None:
    """Att(V + 1cᵀ) = Att(V) + 1cᵀ; the shared estimator keeps it (same draws: [1, V + 1cᵀ]
    spans the space of [1, V], so its leverage scores are the same)."""
    q, k, v, exact_dz = tokens
    c = np.array([5.0, -3.0] + [0.0] * (v.shape[1] - 2))
    base = sampled(q, k, v, exact_dz.landmarks, exact_dz.m_inv, 128, 2, estimator)
    moved = sampled(q, k, v + c, exact_dz.landmarks, exact_dz.m_inv, 128, 2, estimator)
    gap = np.abs(moved - base - c).max()
    assert gap < 1e-8 if estimator == "shared" else gap > 1e-2


def test_error_against_dense_attention_falls_with_m(tokens) -> None:
    q, k, v, exact_dz = tokens
    truth = dense_attention(q, k, v)
    rows = np.arange(0, len(q), 8)
    floor = np.median(
        np.linalg.norm(exact_dz.query_many(q[rows]) - truth[rows], axis=1)
        / np.linalg.norm(truth[rows], axis=1)
    )
    ms, err = (32, 256, 2048), {"shared": [], "independent": []}
    for est in err:
        for m in ms:
            runs = []
            for seed in range(6):
                approx = sampled(q[rows], k, v, exact_dz.landmarks, exact_dz.m_inv, m, seed, est)
                rel = np.linalg.norm(approx - truth[rows], axis=1) / np.linalg.norm(
                    truth[rows], axis=1
                )
                runs.append(np.median(rel))
            err[est].append(float(np.mean(runs)))
    shared = err["shared"]
    assert floor < 0.1 * shared[-1]  # the landmarks are not what limits the error here
    assert shared[0] > shared[1] > shared[2] and shared[2] < 0.05
    assert loglog_slope(list(ms), shared) == pytest.approx(-0.5, abs=0.15)
    # the shared sample is the more accurate estimator at every m
    assert all(s < i for s, i in zip(shared, err["independent"], strict=True)), err


def test_shared_u_and_z_are_unbiased(tokens) -> None:
    q, k, v, exact_dz = tokens
    lms = exact_dz.landmarks[:8]
    phi = exp_kernel(lms, k / SYN.d**0.25)  # (s, n)
    u_true, z_true = phi.sum(axis=1), phi @ v
    opts = BuildOptions(s=len(lms), m=16, lam=1.0)
    draws = [
        sample_stages(RowOracle(q, k, v), lms, opts, np.random.default_rng(seed))
        for seed in range(500)
    ]
    for got, truth in (
        (np.array([d[0] for d in draws]), u_true),
        (np.array([d[1] for d in draws]), z_true),
    ):
        se = got.std(axis=0) / np.sqrt(len(got))
        assert np.all(np.abs(got.mean(axis=0) - truth) <= 4.5 * se + 1e-12)
        assert np.all(got.std(axis=0) > 0)


def test_rls_over_uniform_pairs_draws() -> None:
    cfg = AttnRowConfig()
    rls, uni = [1.0, 2.0, 4.0], [2.0, 2.0, 2.0]

    def row(method: str, draws: list[float]) -> dict:
        return {
            "table": "error",
            "input": "synthetic",
            "method": method,
            "multiple": 8.0,
            "row_err": float(np.mean(draws)),
            "row_err_draws": draws,
        }

    out = rls_over_uniform(cfg, [row("rls_nystrom", rls), row("uniform_nystrom", uni)])
    logs = np.log(np.array(rls) / np.array(uni))  # -ln 2, 0, ln 2
    ref = stats.t.interval(0.95, 2, loc=logs.mean(), scale=stats.sem(logs))
    assert out["rls_over_uniform"] == pytest.approx(1.0)
    assert (out["rls_over_uniform_lo"], out["rls_over_uniform_hi"]) == pytest.approx(np.exp(ref))
    out = rls_over_uniform(cfg, [row("rls_nystrom", [1.0, 2.0]), row("uniform_nystrom", [4, 8])])
    assert out["rls_over_uniform"] == pytest.approx(0.25) == out["rls_over_uniform_hi"]


def test_error_piece_averages_distinct_landmark_draws() -> None:
    cfg = AttnRowConfig(
        landmark_draws=3,
        landmark_multiples=[1.0],
        headline_multiple=1.0,
        query_rows=20,
        synthetic=SYN,
    )
    q, k, v = clustered_tokens(SYN, 200, seed=0)
    [row] = error_piece(cfg, "synthetic", "uniform_nystrom", q, k, v, s_lambda=12.0)
    draws = row["row_err_draws"]
    assert len(draws) == 3 and len(set(draws)) == 3  # three different landmark sets
    assert row["row_err"] == pytest.approx(np.mean(draws))
    assert row["row_err_lo"] < row["row_err"] < row["row_err_hi"]
    ref = stats.t.interval(0.95, 2, loc=np.mean(draws), scale=stats.sem(draws))
    assert (row["row_err_lo"], row["row_err_hi"]) == pytest.approx(ref)  # 95% t over draws
    assert draw_seed(cfg, 12, 0) == [cfg.seed, 11, 12]  # draw 0: the old single draw


def test_sublinear_m_grows_slower_than_n() -> None:
    cfg = AttnRowConfig()
    grid = sorted(cfg.sublinear.n_grid)
    for beta in cfg.sublinear.exponents:
        ms = [sublinear_m(cfg, n, beta) for n in grid]
        assert ms[0] == cfg.sublinear.m_at_min_n
        ratios = [m / n for m, n in zip(ms, grid, strict=True)]
        assert all(a > b for a, b in itertools.pairwise(ratios))
        assert loglog_slope(grid, ms) == pytest.approx(beta, abs=0.01)
