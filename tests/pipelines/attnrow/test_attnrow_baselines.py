"""Baselines and helpers: exact rows against a softmax reference, Performer's kernel
estimate converges, input (b)'s s_λ does not grow with n, slopes and the pass rule."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax

from rayworks.pipelines.attnrow.baselines import (
    build_performer,
    exact_row,
    exact_rows,
    performer_kernel,
)
from rayworks.pipelines.attnrow.config import AttnRowConfig, SyntheticConfig
from rayworks.pipelines.attnrow.inputs import clustered_tokens
from rayworks.pipelines.attnrow.kernel import (
    kernel_eigenvalues,
    kernel_points,
    statistical_dimension,
)
from rayworks.pipelines.attnrow.report import loglog_slope, pass_rule


def test_exact_rows_match_softmax_reference() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((20, 8)) * 3 for _ in range(3))
    ref = softmax(q @ k.T / np.sqrt(8), axis=1) @ v
    assert np.allclose(exact_rows(q, k, v), ref)
    assert np.allclose(exact_row(q[2], k, v), ref[2])


def test_performer_kernel_estimate_converges() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((6, 4)) * 0.7, rng.standard_normal((9, 4)) * 0.7
    truth = np.exp(q @ k.T / 2.0)
    errs = []
    for r in (16, 256, 4096):
        est = np.mean(
            [
                performer_kernel(q, k, np.random.default_rng([r, s]).standard_normal((r, 4)))
                for s in range(8)
            ],
            axis=0,
        )
        errs.append(np.abs(est / truth - 1).mean())
    assert errs[0] > errs[1] > errs[2] and errs[2] < 0.03
    assert loglog_slope([16, 256, 4096], errs) == pytest.approx(-0.5, abs=0.15)


def test_performer_rows_approach_exact_with_many_features() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((30, 4)) * 0.5 for _ in range(3))
    rows = build_performer(k, v, 20000, np.random.default_rng(0)).query_many(q)
    assert np.abs(rows - exact_rows(q, k, v)).max() < 0.05


def test_clustered_tokens_keep_s_lambda_fixed_as_n_grows() -> None:
    cfg = SyntheticConfig(d=8, clusters=4)
    values = []
    for n in (100, 300):
        q, k, v = clustered_tokens(cfg, n, seed=0)
        assert q.shape == k.shape == v.shape == (n, 8)
        values.append(statistical_dimension(kernel_eigenvalues(kernel_points(q, k)), 0.01 * 2 * n))
    assert values[1] == pytest.approx(values[0], rel=0.1)
    q2, _, _ = clustered_tokens(cfg, 100, seed=0, scale=2.0)
    assert np.allclose(q2, 2 * clustered_tokens(cfg, 100, seed=0)[0])


def test_loglog_slope() -> None:
    x = [1.0, 10.0, 100.0]
    assert loglog_slope(x, [3 * a**-0.5 for a in x]) == pytest.approx(-0.5)
    assert np.isnan(loglog_slope([1.0], [1.0]))


def test_pass_rule_reads_every_part() -> None:
    cfg = AttnRowConfig()
    err = [
        {"table": "error", "input": "synthetic", "method": m, "s": s, "row_err": e}
        for m, e in (("analogue", 0.01), ("rls_nystrom", 0.001), ("uniform_nystrom", 0.002))
        for s in (10, 100)
    ]
    samp = [{"table": "sampling", "m": m, "sampling_err": m**-0.5} for m in (10, 100, 1000)]
    timing = [{"table": "timing", "method": "analogue", "n": n, "query_us": 5.0} for n in (1, 8)]
    out = pass_rule(err + samp + timing, 10.0, cfg)  # needs s >= 10·ln 10 = 23
    assert out["pass_rule"] == 1.0 and out["pass_s_needed"] == pytest.approx(23.03, abs=0.01)
    err[1]["row_err"] = 0.5  # analogue above ε at s = 100
    assert pass_rule(err + samp + timing, 10.0, cfg)["pass_eps"] == 0.0
    assert pass_rule(err, 10.0, cfg.model_copy(update={"compare": []})) == {}
