"""Kernel math: s_λ against an eigendecomposition, ridge leverage scores, recursive RLS,
weighted sampling without replacement."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.pipelines.attnrow.kernel import (
    exp_kernel,
    kernel_eigenvalues,
    kernel_points,
    recursive_rls,
    ridge_leverage_scores,
    sample_without_replacement,
    statistical_dimension,
)


def points(n: int = 150, d: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return kernel_points(rng.standard_normal((n, d)), rng.standard_normal((n, d)))


def test_kernel_is_psd_and_holds_the_attention_block() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((5, 8)), rng.standard_normal((5, 8))
    kmat = exp_kernel(kernel_points(q, k), kernel_points(q, k))
    assert np.allclose(kmat[:5, 5:], np.exp(q @ k.T / np.sqrt(8)))
    assert kernel_eigenvalues(kernel_points(q, k)).min() >= 0
    assert np.linalg.eigvalsh(kmat).min() > -1e-9 * np.abs(kmat).max()


@pytest.mark.parametrize("lam", [0.1, 3.0, 50.0])
def test_statistical_dimension_matches_trace_formula(lam: float) -> None:
    x = points()
    kmat = exp_kernel(x, x)
    trace = np.trace(np.linalg.solve(kmat + lam * np.eye(len(x)), kmat))
    s_lam = statistical_dimension(kernel_eigenvalues(x), lam)
    assert s_lam == pytest.approx(trace, rel=1e-8)
    assert 0 < s_lam < len(x)


def test_ridge_leverage_scores_sum_to_s_lambda_and_match_the_diagonal() -> None:
    x, lam = points(), 2.0
    kmat = exp_kernel(x, x)
    tau = ridge_leverage_scores(kmat, lam)
    direct = np.diag(kmat @ np.linalg.inv(kmat + lam * np.eye(len(x))))
    assert np.allclose(tau, direct, atol=1e-8)
    assert tau.sum() == pytest.approx(statistical_dimension(kernel_eigenvalues(x), lam), rel=1e-8)
    assert tau.min() >= 0 and tau.max() <= 1


def test_recursive_rls_tracks_exact_scores() -> None:
    x, lam = points(n=400, d=3, seed=2), 4.0
    exact = ridge_leverage_scores(exp_kernel(x, x), lam)
    approx = recursive_rls(x, lam, np.random.default_rng(0), oversample=4.0, leaf_size=64)
    ratio = approx / exact
    # the weighted Nyström residual never under-estimates τ (Musco & Musco 2017, Lemma 6),
    # and with enough landmarks over-estimates by a small constant factor
    assert ratio.min() >= 1 - 1e-9
    assert 1.0 <= np.median(ratio) <= 3.0 and np.quantile(ratio, 0.95) < 3.5
    assert np.corrcoef(approx, exact)[0, 1] > 0.9
    leaf = recursive_rls(x[:50], lam, np.random.default_rng(0), 4.0, 64)  # a leaf: exact
    assert np.allclose(leaf, ridge_leverage_scores(exp_kernel(x[:50], x[:50]), lam))


def test_sampling_without_replacement() -> None:
    rng = np.random.default_rng(0)
    w = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    picks = sample_without_replacement(w, 4, rng)
    assert sorted(picks.tolist()) == [1, 2, 3, 4]
    first = np.array([sample_without_replacement(w, 1, rng)[0] for _ in range(4000)])
    freq = np.bincount(first, minlength=5) / 4000
    assert np.allclose(freq, w / w.sum(), atol=0.03)
    with pytest.raises(ValueError, match="distinct"):
        sample_without_replacement(w, 6, rng)
