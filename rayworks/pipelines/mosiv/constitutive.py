"""Constitutive laws of the 2D MPM (MOSIV Stage III; the paper's constitutive models): Kirchhoff
stresses and plastic return maps, per particle, on (N, 2, 2) deformation gradients.

- elastic: neo-Hookean, τ = μ(FFᵀ - I) + λ log J · I;
- plasticine: StVK on the Hencky strain, τ = 2μ ε + λ tr(ε) I, with von Mises return
  (ε̂ ← ε̂ · min(1, τ_Y / (2μ‖ε̂‖))) (Klar et al. 2016 form, as in PhysGaussian/OmniPhysGS);
- sand: the same elasticity with the Drucker-Prager return of Klar et al. 2016
  (tr ε ≥ 0 → ε = 0; else shrink the deviator onto the cone of slope alpha(θ_fric)).

All plasticity is written on the left Hencky strain ε = ½ log(FFᵀ) with closed-form 2x2
symmetric log/exp (no SVD), so gradients stay finite at F = I where the SVD's are not
(reconstructed implementation choice; the return maps are the standard ones). The new
gradient is F ← exp(ε_new - ε) F, exact because the return only rescales the trace and the
deviator of ε (the eigenvectors do not change).
"""

from __future__ import annotations

import torch

ELASTIC, PLASTICINE, SAND = 0, 1, 2
FAMILIES = ("elastic", "plasticine", "sand")
_SMALL = 1e-4


def lame(log_E: torch.Tensor, nu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ, λ) of Young's modulus exp(log_E) and Poisson ratio nu (plane strain)."""
    E = torch.exp(log_E)
    return E / (2 * (1 + nu)), E * nu / ((1 + nu) * (1 - 2 * nu))


def _safe_ratio(num_fn, x: torch.Tensor, limit) -> torch.Tensor:
    """num_fn(x)/x with the series `limit(x)` near 0 (NaN-free gradients via the where trick)."""
    small = x.abs() < _SMALL
    xs = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, limit(x), num_fn(xs) / xs)


def sym_parts(S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Symmetric S (N,2,2) -> (mean eigenvalue m, deviator S - mI, half eigen-gap d ≥ 0)."""
    m = 0.5 * (S[:, 0, 0] + S[:, 1, 1])
    eye = torch.eye(2, dtype=S.dtype)
    dev = S - m[:, None, None] * eye
    d = torch.sqrt(dev[:, 0, 0] ** 2 + dev[:, 0, 1] ** 2 + 1e-30)
    return m, dev, d


def hencky(F: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left Hencky strain of F: (tr ε, deviator ε̂ (N,2,2), ‖ε̂‖_F).

    b = FFᵀ has eigenvalues m ± d; log b = ½ log det b · I + atanh(d/m)/d · (b - mI)."""
    b = F @ F.transpose(1, 2)
    m, dev, d = sym_parts(b)
    det = m * m - d * d
    beta = _safe_ratio(torch.atanh, d / m, lambda r: 1 + r * r / 3) / m
    eps_dev = 0.5 * beta[:, None, None] * dev
    return 0.5 * torch.log(det), eps_dev, torch.sqrt(2.0 * (0.5 * beta * d) ** 2 + 1e-30)


def exp_shift(tr_shift: torch.Tensor, dev_scale: torch.Tensor, eps_dev, norm) -> torch.Tensor:
    """exp(A) for A = ½ tr_shift · I + dev_scale · ε̂ (ε̂ traceless symmetric, ‖ε̂‖ = norm):
    e^{tr/2} (cosh(s) I + sinh(s)/s · dev_scale ε̂), s = dev_scale · norm/√2."""
    s = dev_scale * norm / 2**0.5
    shc = _safe_ratio(torch.sinh, s, lambda x: 1 + x * x / 6)
    eye = torch.eye(2, dtype=eps_dev.dtype)
    out = torch.cosh(s)[:, None, None] * eye + (shc * dev_scale)[:, None, None] * eps_dev
    return torch.exp(0.5 * tr_shift)[:, None, None] * out


def kirchhoff(F, family, mu, lam) -> torch.Tensor:
    """Kirchhoff stress τ (N,2,2): neo-Hookean for elastic particles, Hencky-StVK else."""
    eye = torch.eye(2, dtype=F.dtype)
    J = torch.det(F)
    neo = mu[:, None, None] * (F @ F.transpose(1, 2) - eye)
    neo = neo + (lam * torch.log(J))[:, None, None] * eye
    tr, eps_dev, _ = hencky(F)
    stvk = 2 * mu[:, None, None] * eps_dev + ((mu + lam) * tr)[:, None, None] * eye
    return torch.where((family == ELASTIC)[:, None, None], neo, stvk)


def drucker_prager_alpha(theta_fric: torch.Tensor) -> torch.Tensor:
    """Cone slope alpha = √(2/3) · 2 sin θ / (3 - sin θ) of friction angle θ (radians)."""
    s = torch.sin(theta_fric)
    return (2.0 / 3.0) ** 0.5 * 2 * s / (3 - s)


def return_map(F, family, mu, lam, yield_stress, theta_fric) -> torch.Tensor:
    """Project F onto the yield surface of each particle's family (elastic: unchanged)."""
    tr, eps_dev, norm = hencky(F)
    # von Mises (plasticine): keep tr ε, shrink the deviator to radius τ_Y/(2μ)
    vm_scale = torch.clamp(yield_stress / (2 * mu * norm), max=1.0)
    # Drucker-Prager (sand), 2D: Δγ = ‖ε̂‖ + (2λ + 2μ)/(2μ) · tr ε · alpha
    alpha = drucker_prager_alpha(theta_fric)
    cone = -(lam + mu) / mu * tr * alpha / norm
    expanding = tr >= 0
    dp_scale = torch.where(expanding, torch.zeros_like(tr), torch.clamp(cone, max=1.0))
    dp_tr = torch.where(expanding, torch.zeros_like(tr), tr)
    is_sand = family == SAND
    is_plastic = family == PLASTICINE
    scale = torch.where(is_sand, dp_scale, torch.where(is_plastic, vm_scale, torch.ones_like(tr)))
    tr_new = torch.where(is_sand, dp_tr, tr)
    return exp_shift(tr_new - tr, scale - 1.0, eps_dev, norm) @ F
