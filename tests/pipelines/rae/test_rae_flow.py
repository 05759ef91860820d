"""Flow matching, the shift and the width bound against closed forms (rae/flow.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from rayworks.pipelines.rae.flow import (
    euler_grid,
    euler_sample,
    flow_matching_loss,
    gaussian_velocity,
    interpolate,
    shift_alpha,
    shift_time,
    velocity_residual_covariance,
    width_bound,
)


def test_shift_formula_and_alpha() -> None:
    t0 = torch.linspace(0, 1, 11)
    assert torch.allclose(shift_time(t0, 1.0), t0)
    alpha = shift_alpha(16 * 64, 64)
    assert alpha == pytest.approx(4.0)
    assert shift_alpha(16 * 16 * 768, 4096) == pytest.approx(math.sqrt(48))
    t = shift_time(t0, alpha)
    expected = torch.tensor([alpha * s / (1 + (alpha - 1) * s) for s in t0.tolist()])
    assert torch.allclose(t, expected)
    assert t[0] == 0 and t[-1] == 1 and bool((t >= t0).all())  # pushed toward noise
    # SNR view: the shift rescales the noise-to-signal ratio by alpha: t/(1-t) = alpha t0/(1-t0).
    mid = slice(1, -1)
    ratio = (t[mid] / (1 - t[mid])) / (t0[mid] / (1 - t0[mid]))
    assert torch.allclose(ratio, torch.full_like(ratio, alpha), rtol=1e-4)
    grid = euler_grid(10, alpha)
    assert torch.allclose(grid, shift_time(torch.linspace(1.0, 1e-3, 11), alpha))
    with pytest.raises(ValueError, match="n_base"):
        shift_alpha(64, 0)


def test_exact_gaussian_velocity_minimises_the_loss() -> None:
    """With the exact field E[ε - z | x_t] the loss equals E Var(u | x_t) (checked by Monte
    Carlo in closed form), and any perturbed field does worse."""
    mean, std = torch.tensor(1.5), torch.tensor(0.5)
    z = mean + std * torch.randn(40000, 1, 1, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(len(z), dtype=torch.long)
    exact = gaussian_velocity(mean, std)
    gen = torch.Generator().manual_seed(1)
    loss = float(flow_matching_loss(exact, z, y, 1.0, gen))
    # Var(u | x) = Var(u) - Cov(u, x)² / Var(x) = 1 + sigma² - (t - (1-t)sigma²)² / s², averaged over t.
    t = torch.sigmoid(torch.randn(200000, generator=torch.Generator().manual_seed(2)))
    var_x = (1 - t) ** 2 * std**2 + t**2
    closed = float((1 + std**2 - (t - (1 - t) * std**2) ** 2 / var_x).mean())
    assert loss == pytest.approx(closed, rel=0.03)
    biased = lambda x, t, y: exact(x, t, y) + 0.3  # noqa: E731
    assert float(flow_matching_loss(biased, z, y, 1.0, torch.Generator().manual_seed(1))) > loss


@pytest.mark.parametrize("alpha", [1.0, 4.0])
def test_euler_sampler_recovers_gaussian_target(alpha: float) -> None:
    mean, std = torch.tensor([2.0, -1.0]), torch.tensor([0.5, 1.5])
    noise = torch.randn(4000, 1, 2, generator=torch.Generator().manual_seed(3))
    x = euler_sample(gaussian_velocity(mean, std), noise, torch.zeros(4000), 100, alpha)
    assert torch.allclose(x.mean((0, 1)), mean, atol=0.08)
    assert torch.allclose(x.std((0, 1)), std, rtol=0.05)


def test_interpolate_endpoints() -> None:
    z, eps = torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    assert torch.equal(interpolate(z, eps, torch.zeros(3)), z)
    assert torch.equal(interpolate(z, eps, torch.ones(3)), eps)


def test_width_bound_matches_best_rank_d_fit() -> None:
    """Cov(ε - z) over tokens and draws matches the dense form I + Cov_tokens(z), and the
    bound is its eigenvalue tail / n: zero from d = n on, non-increasing in d."""
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(6, 8, generator=gen, dtype=torch.float64) * torch.linspace(3, 0.1, 8)
    cov = velocity_residual_covariance(z, 4000, torch.Generator().manual_seed(5))
    n = z.shape[1]
    # Dense reference: Cov(ε - z) = I + Cov over tokens of z (population form).
    zc = z - z.mean(0)
    dense = torch.eye(n, dtype=torch.float64) + zc.T @ zc / z.shape[0]
    assert torch.allclose(cov, dense, atol=0.08)
    eig = torch.linalg.eigvalsh(dense).flip(0)
    for d in (0, 3, 7):
        assert width_bound(dense, d) == pytest.approx(float(eig[d:].sum()) / n)
    assert width_bound(dense, n) == 0.0 and width_bound(dense, 2 * n) == 0.0
    bounds = [width_bound(dense, d) for d in range(n + 1)]
    assert all(a >= b for a, b in itertools.pairwise(bounds))
