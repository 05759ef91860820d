"""RAE stage 2 in one file: flow matching on (normalised) latents, the dimension-dependent
noise-schedule shift, the Euler sampler and the width bound of Theorem 1 (Zheng et al.,
"Diffusion Transformers with Representation Autoencoders", ICLR 2026; official code
`bytetriper/RAE`, `transport/`).

Conventions of the official code (method §3, checked): the linear path
x_t = (1 - t) z + t ε runs from data (t = 0) to pure noise (t = 1); the network predicts the
velocity u = ε - z; the loss is ‖v_θ(x_t, t, y) - u‖² (mean over elements). Training times
are t0 ~ logit-normal(0, 1) followed by the shift t = alpha t0 / (1 + (alpha - 1) t0) with
alpha = √(m / n_base) (m = tokens x channels of the latent); the Euler grid s_k = 1 → 1/K_min is
shifted by the same map. Nothing here has Ray or I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
from torch import Tensor

Velocity = Callable[[Tensor, Tensor, Tensor], Tensor]  # (x_t [B,T,C], t [B], y [B]) -> v


def shift_alpha(latent_numel: int, n_base: int) -> float:
    """alpha = √(m / n_base), the dimension-dependent shift factor (paper §4.2)."""
    if latent_numel <= 0 or n_base <= 0:
        raise ValueError(f"latent_numel={latent_numel} and n_base={n_base} must be positive")
    return math.sqrt(latent_numel / n_base)


def shift_time(t0: Tensor, alpha: float) -> Tensor:
    """t = alpha t0 / (1 + (alpha - 1) t0): maps [0, 1] onto itself, pushes times toward noise
    (t = 1) for alpha > 1 and is the identity for alpha = 1."""
    return alpha * t0 / (1 + (alpha - 1) * t0)


def sample_times(n: int, alpha: float, gen: torch.Generator | None = None) -> Tensor:
    """Training times: t0 = sigmoid(N(0, 1)) (logit-normal), then `shift_time`."""
    t0 = torch.sigmoid(torch.randn(n, generator=gen))
    return shift_time(t0, alpha)


def interpolate(z: Tensor, eps: Tensor, t: Tensor) -> Tensor:
    """x_t = (1 - t) z + t ε, with t [B] broadcast over the remaining dimensions."""
    tb = t.view(-1, *([1] * (z.dim() - 1)))
    return (1 - tb) * z + tb * eps


def flow_matching_loss(
    velocity: Velocity, z: Tensor, y: Tensor, alpha: float, gen: torch.Generator | None = None
) -> Tensor:
    """Mean ‖v(x_t, t, y) - (ε - z)‖² over a batch of latents z [B, T, C]."""
    eps = torch.randn(z.shape, generator=gen)
    t = sample_times(z.shape[0], alpha, gen)
    v = velocity(interpolate(z, eps, t), t, y)
    return ((v - (eps - z)) ** 2).mean()


def euler_grid(steps: int, alpha: float, t_min: float = 1e-3) -> Tensor:
    """K = steps + 1 times: s_k evenly spaced from 1 down to t_min, shifted by alpha."""
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    return shift_time(torch.linspace(1.0, t_min, steps + 1), alpha)


@torch.no_grad()
def euler_sample(
    velocity: Velocity, noise: Tensor, y: Tensor, steps: int, alpha: float, t_min: float = 1e-3
) -> Tensor:
    """Integrate dx/dt = v from t = 1 (x = noise) down the shifted grid: x ← x + (t' - t) v."""
    grid = euler_grid(steps, alpha, t_min)
    x = noise
    for t, t_next in itertools.pairwise(grid):
        x = x + (t_next - t) * velocity(x, t.expand(x.shape[0]), y)
    return x


def gaussian_velocity(mean: Tensor, std: Tensor) -> Velocity:
    """The exact velocity field E[ε - z | x_t] for z ~ N(mean, diag std²), ε ~ N(0, I):
    x_t is Gaussian with var s² = (1 - t)² std² + t², and E[u | x] = a (x - (1 - t) mean)
    - mean with a = (t - (1 - t) std²) / s². A closed form to check loss and sampler."""

    def v(x: Tensor, t: Tensor, _y: Tensor) -> Tensor:
        tb = t.view(-1, *([1] * (x.dim() - 1)))
        var = (1 - tb) ** 2 * std**2 + tb**2
        gain = (tb - (1 - tb) * std**2) / var
        return gain * (x - (1 - tb) * mean) - mean

    return v


def velocity_residual_covariance(z: Tensor, n_noise: int, gen: torch.Generator) -> Tensor:
    """Cov(ε - z) over tokens and noise draws of one latent z [T, n]: [n, n] (centred, since
    the output layer's bias absorbs the mean)."""
    eps = torch.randn((n_noise, *z.shape), generator=gen, dtype=torch.float64)
    u = (eps - z.double()).reshape(-1, z.shape[-1])
    u = u - u.mean(0)
    return u.T @ u / (u.shape[0] - 1)


def width_bound(cov: Tensor, width: int) -> float:
    """Theorem 1: a DiT of width d whose output is a linear map from d channels has per-element
    loss ≥ (1/n) Σ_{i>d} λ_i(Cov(ε - z)) (eigenvalues in decreasing order); 0 when d ≥ n."""
    eig = torch.linalg.eigvalsh(cov).flip(0).clamp_min(0)
    return float(eig[width:].sum() / cov.shape[0])
