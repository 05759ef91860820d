"""The data structure: exactness with all points as landmarks, unbiased sampled D and Z,
oracle counters that count what the code reads, n-free queries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayworks.pipelines.attnrow.baselines import exact_rows
from rayworks.pipelines.attnrow.kernel import exp_kernel
from rayworks.pipelines.attnrow.structure import (
    BuildOptions,
    RowOracle,
    build,
    choose_landmarks,
    classical_calls,
    modelled_quantum_calls,
    normaliser,
    product,
    query_row,
    row_distortion,
    value_leverage,
)


def qkv(n: int = 30, d: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d))


@pytest.mark.parametrize("landmarks", ["uniform", "rls_exact", "rls"])
def test_all_points_as_landmarks_reproduce_exact_attention(landmarks: str) -> None:
    q, k, v = qkv()
    opts = BuildOptions(
        s=60,
        m=1,
        lam=1.0,
        landmarks=landmarks,
        normaliser="exact",
        product="exact",
        pinv_rcond=1e-13,
    )
    rows = build(RowOracle(q, k, v), opts, np.random.default_rng(0))
    err = np.abs(rows.query_many(q) - exact_rows(q, k, v)).max()
    assert err < 1e-6 * np.abs(v).max()
    assert np.allclose(rows.query(q[3]), rows.query_many(q)[3])


def landmark_rows(q, k, s: int = 6):
    opts = BuildOptions(s=s, m=1, lam=1.0, landmarks="uniform")
    return choose_landmarks(RowOracle(q, k, k), opts, np.random.default_rng(5))[1]


def test_sampled_normaliser_and_product_are_unbiased() -> None:
    q, k, v = qkv(n=40)
    lms = landmark_rows(q, k)
    phi = exp_kernel(lms, k / 4**0.25)  # (s, n)
    u_true, z_true = phi.sum(axis=1), phi @ v
    opts = BuildOptions(s=len(lms), m=20, lam=1.0)
    us, zs = [], []
    for seed in range(600):
        rng = np.random.default_rng(seed)
        us.append(normaliser(RowOracle(q, k, v), lms, opts, rng))
        zs.append(product(RowOracle(q, k, v), lms, opts, rng)[0])
    for draws, truth in ((np.array(us), u_true), (np.array(zs), z_true)):
        se = draws.std(axis=0) / np.sqrt(len(draws))
        assert np.all(np.abs(draws.mean(axis=0) - truth) <= 4.5 * se + 1e-12)
        assert np.any(draws.std(axis=0) > 0)  # really sampled


class CountingRows:
    """An array stand-in that counts the rows read through it, independently of the oracle."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.read, self.shape = a, 0, a.shape

    def __len__(self) -> int:
        return len(self.a)

    def __getitem__(self, idx):
        self.read += len(np.atleast_1d(idx))
        return self.a[idx]


@pytest.mark.parametrize(
    ("landmarks", "est", "estimator"),
    [
        ("rls", "sampled", "shared"),
        ("uniform", "exact", "shared"),
        ("rls_exact", "sampled", "independent"),
        ("uniform", "sampled", "shared"),
    ],
)
def test_oracle_counts_what_the_code_reads(landmarks: str, est: str, estimator: str) -> None:
    q, k, v = qkv(n=50)
    wrapped = [CountingRows(a) for a in (q, k, v)]
    oracle = RowOracle(*wrapped)
    opts = BuildOptions(
        s=7, m=13, lam=1.0, landmarks=landmarks, normaliser=est, product=est, estimator=estimator
    )
    rows = build(oracle, opts, np.random.default_rng(0))
    totals = oracle.stage_totals()
    assert sum(totals.values()) == sum(w.read for w in wrapped)
    expected = classical_calls(50, opts)
    assert {st: totals[st] for st in ("landmarks", "normaliser", "product")} == {
        st: expected[st] for st in ("landmarks", "normaliser", "product")
    }
    before = [w.read for w in wrapped]
    query_row(rows, oracle, 4)
    assert [w.read - b for w, b in zip(wrapped, before, strict=True)] == [1, 0, 0]
    assert oracle.stage_totals()["query"] == expected["query"] == 1


def test_value_leverage_and_row_distortion() -> None:
    v = np.random.default_rng(3).standard_normal((40, 5)) * np.array([5, 1, 1, 0.1, 0.01])
    tau = value_leverage(v)
    assert tau.sum() == pytest.approx(5.0) and tau.max() <= 1 + 1e-12
    p = tau / tau.sum()
    srank = np.sum(v**2) / np.linalg.norm(v, 2) ** 2
    assert 1.0 <= row_distortion(v, p) <= 5 / srank + 1e-9


def test_modelled_quantum_counts_scale_as_sqrt() -> None:
    opts = BuildOptions(s=10, m=400, lam=1.0, estimator="independent")
    small, big = modelled_quantum_calls(1000, opts, 10.0), modelled_quantum_calls(4000, opts, 10.0)
    assert big["landmarks"] == pytest.approx(2 * small["landmarks"])
    assert small["normaliser"] == pytest.approx(20.0)  # √m, not m
    shared = modelled_quantum_calls(1000, BuildOptions(s=10, m=400, lam=1.0), 10.0)
    assert shared["normaliser"] == 0.0  # u is a column of the one mean estimation
    assert shared["product"] == pytest.approx(math.sqrt(1000) + 20.0)
    assert classical_calls(4000, opts)["landmarks"] == 4 * classical_calls(1000, opts)["landmarks"]


def test_bad_landmark_count_is_an_error() -> None:
    q, k, v = qkv(n=5)
    with pytest.raises(ValueError, match="s=11"):
        build(RowOracle(q, k, v), BuildOptions(s=11, m=1, lam=1.0), np.random.default_rng(0))
