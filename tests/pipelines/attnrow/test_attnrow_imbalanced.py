"""Input (b'), imbalanced clusters: the cluster law, input (b) left bit-for-bit as it was,
ridge leverage favouring the small clusters, and the `exact_dz` bench ablation."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rayworks.pipelines.attnrow.pipeline  # noqa: F401  (registers attnrow and baselines)
from rayworks.pipelines.attnrow.config import AttnRowConfig, ImbalancedConfig, SyntheticConfig
from rayworks.pipelines.attnrow.inputs import (
    cluster_weights,
    clustered_tokens,
    imbalanced_tokens,
    minor_clusters,
)
from rayworks.pipelines.attnrow.kernel import (
    exp_kernel,
    kernel_points,
    recursive_rls,
)
from rayworks.platform import bench, registry


def test_cluster_weights_are_geometric_and_minor_clusters_the_small_tail() -> None:
    w = cluster_weights(8, 0.5)
    assert w.sum() == pytest.approx(1.0)
    assert np.allclose(w[1:] / w[:-1], 0.5)
    assert np.allclose(cluster_weights(5, 1.0), 0.2)  # decay 1 = balanced
    assert minor_clusters(w, 0.05).tolist() == [5, 6, 7]  # 2.7% of the points
    assert w[minor_clusters(w, 0.05)].sum() <= 0.05 < w[minor_clusters(w, 0.07)].sum()
    assert minor_clusters(cluster_weights(8, 1.0), 0.05).tolist() == []


def test_cluster_proportions_follow_the_configured_law() -> None:
    syn, imb, n = SyntheticConfig(), ImbalancedConfig(cluster_decay=0.6), 40_000
    w = cluster_weights(syn.clusters, imb.cluster_decay)
    q, k, v, q_labels = imbalanced_tokens(syn, imb, n, seed=3)
    assert q.shape == k.shape == v.shape == (n, syn.d)
    # K's clusters, recovered by the nearest Q-cluster mean (tight clusters: exact).
    means = np.stack([q[q_labels == c].mean(axis=0) for c in range(syn.clusters)])
    k_labels = np.argmin(((k[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    for labels in (q_labels, k_labels):
        share = np.bincount(labels, minlength=syn.clusters) / n
        assert np.all(np.abs(share - w) <= 4 * np.sqrt(w * (1 - w) / n))  # 4 binomial sigma
    # Same centres as input (b): its Q-cluster means sit on the same points.
    qb, _, _ = clustered_tokens(syn, 2000, seed=3)
    nearest = np.min(((qb[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    radius2 = syn.center_logit * math.sqrt(syn.d)
    assert np.all(nearest < 0.1 * radius2)


def test_input_b_is_still_the_original_draw() -> None:
    cfg, n, seed = SyntheticConfig(), 64, 5
    law = np.random.default_rng([seed, 0])
    radius = math.sqrt(cfg.center_logit * math.sqrt(cfg.d))
    centres = law.standard_normal((cfg.clusters, cfg.d))
    centres *= radius / np.linalg.norm(centres, axis=1, keepdims=True)
    value_means = law.standard_normal((cfg.clusters, cfg.d))
    rng = np.random.default_rng([seed, 1, n])
    noise = cfg.spread * radius / math.sqrt(cfg.d)
    q = centres[rng.integers(cfg.clusters, size=n)] + noise * rng.standard_normal((n, cfg.d))
    labels = rng.integers(cfg.clusters, size=n)
    k = centres[labels] + noise * rng.standard_normal((n, cfg.d))
    v = value_means[labels] + cfg.value_noise * rng.standard_normal((n, cfg.d))
    for got, want in zip(
        clustered_tokens(cfg, n, seed, 1.25), (1.25 * q, 1.25 * k, v), strict=True
    ):
        assert np.array_equal(got, want)


def test_ridge_leverage_puts_more_mass_per_point_on_small_clusters() -> None:
    syn, imb, n = SyntheticConfig(clusters=4), ImbalancedConfig(cluster_decay=0.3), 400
    q, k, _, q_labels = imbalanced_tokens(syn, imb, n, seed=0)
    x = kernel_points(q, k)
    means = np.stack([x[:n][q_labels == c].mean(axis=0) for c in range(syn.clusters)])
    labels = np.argmin(((x[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)  # Q and K
    lam = AttnRowConfig().lambda_rel * 2 * n
    small, big = minor_clusters(cluster_weights(4, 0.3), 0.1), 0
    assert small.tolist() == [2, 3] and np.isin(labels, small).sum() >= 20
    # exact tau = diag(K (K + lam I)^-1) = 1 - lam diag((K + lam I)^-1): faster than eigh
    exact = 1.0 - lam * np.diag(np.linalg.inv(exp_kernel(x, x) + lam * np.eye(2 * n)))
    approx = recursive_rls(x, lam, np.random.default_rng(1), 4.0, 256)
    # measured ≈ 2.6x for both at this instance (and ≈ 2.4-3.1x over seeds 0-2, n = 250/400)
    for tau, factor in ((exact, 2.0), (approx, 1.8)):
        per_point_small = tau[np.isin(labels, small)].mean()
        per_point_big = tau[labels == big].mean()
        assert per_point_small > factor * per_point_big, (per_point_small, per_point_big)


def test_exact_dz_ablation_is_registered_and_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "load_all", lambda: None)  # attnrow is imported above
    spec = registry.get_pipeline("attnrow")
    assert spec.ablations == {"exact_dz": ("method=rls_nystrom", "compare=[]")}
    assert "imb_row_err" in spec.report
    arms = bench.plan_arms("attnrow")
    assert [(a.name, a.role) for a in arms] == [
        ("attnrow", "method"),
        ("attnrow_uniform", "baseline"),
        ("attnrow_performer", "baseline"),
        ("attnrow[exact_dz]", "ablation"),
    ]
    plan = bench.plan_runs(arms, seeds=1, preset="smoke", overrides=["n_ref=256"])
    cfg = {r.arm.name: r.cfg for r in plan}
    ablated, uniform = cfg["attnrow[exact_dz]"], cfg["attnrow_uniform"]
    assert (ablated.method, ablated.compare, ablated.n_ref) == ("rls_nystrom", [], 256)
    assert (uniform.method, uniform.compare) == ("uniform_nystrom", [])
    assert ablated.imbalanced.enabled and ablated.imbalanced == uniform.imbalanced
