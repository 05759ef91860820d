"""The smoothed max-of-group-norms surrogate f̃_{β,δ} with closed-form gradient and Hessian
(Algorithm 1, step 3; docs/gdr.md).

On folded data (rows scaled by 1/√n_i), f(x) = max_i ‖r_i‖, r_i = Â_{S_i}x - b̂_{S_i}, and

    h_i = √(δ² + ‖r_i‖²),  s_i = h_i - δ,  f̃(x) = β·log Σ_i exp(s_i/β),
    |f̃ - f| ≤ β log m + δ,
    ∇f̃ = Σ_i sig_i ∇s_i,  sig = softmax(s/β),  ∇s_i = Â_iᵀ r_i / h_i,
    ∇²f̃ = (1/β)(Σ_i sig_i ∇s_i∇s_iᵀ - ggᵀ) + Σ_i (sig_i/h_i) Â_iᵀ(I - r_i r_iᵀ/h_i²)Â_i.

The last sum is Âᵀdiag(sig/h per row)Â - Σ_i (sig_i/h_i)∇s_i∇s_iᵀ (since Â_iᵀr_i = h_i∇s_i),
so everything is a few (n, d) matrix products. Constants of the theory: β = ε/(4 log m),
δ = ε/4 (`smoothing_constants`), which make the surrogate error ≤ ε/2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp, softmax

from rayworks.pipelines.gdr.problem import GroupData


@dataclass(frozen=True)
class Smoothing:
    beta: float
    delta: float


def smoothing_constants(eps: float, m: int) -> Smoothing:
    """β = ε/(4 log m), δ = ε/4 (Algorithm 1, step 4)."""
    return Smoothing(beta=eps / (4 * math.log(max(m, 2))), delta=eps / 4)


def _pieces(folded: GroupData, x: np.ndarray, sm: Smoothing):
    r = folded.A @ x - folded.b
    h = np.sqrt(sm.delta**2 + np.add.reduceat(r * r, folded.offsets[:-1]))
    s = h - sm.delta
    return r, h, s


def smoothed_value(folded: GroupData, x: np.ndarray, sm: Smoothing) -> float:
    """f̃_{β,δ}(x)."""
    _, _, s = _pieces(folded, x, sm)
    return float(sm.beta * logsumexp(s / sm.beta))


def smoothed_grad(folded: GroupData, x: np.ndarray, sm: Smoothing) -> tuple[float, np.ndarray]:
    """(f̃(x), ∇f̃(x)) with ∇f̃ = Σ_i sig_i Â_iᵀr_i/h_i."""
    r, h, s = _pieces(folded, x, sm)
    sigma = softmax(s / sm.beta)
    row_w = np.repeat(sigma / h, folded.sizes)
    return float(sm.beta * logsumexp(s / sm.beta)), folded.A.T @ (row_w * r)


def smoothed_hessian(
    folded: GroupData, x: np.ndarray, sm: Smoothing
) -> tuple[float, np.ndarray, np.ndarray]:
    """(f̃(x), ∇f̃(x), ∇²f̃(x)) in closed form, (), (d,), (d, d)."""
    r, h, s = _pieces(folded, x, sm)
    sigma = softmax(s / sm.beta)
    ar = folded.A * r[:, None]
    grads = np.add.reduceat(ar, folded.offsets[:-1]) / h[:, None]  # ∇s_i, (m, d)
    g = sigma @ grads
    row_w = np.repeat(sigma / h, folded.sizes)
    curvature = folded.A.T @ (folded.A * row_w[:, None]) - grads.T @ (grads * (sigma / h)[:, None])
    lse = grads.T @ (grads * sigma[:, None]) - np.outer(g, g)
    return float(sm.beta * logsumexp(s / sm.beta)), g, lse / sm.beta + curvature


def max_group_norm(folded: GroupData, x: np.ndarray) -> float:
    """f(x) = max_i ‖r_i‖ = √F(x) on folded data."""
    r = folded.A @ x - folded.b
    return float(np.sqrt(np.add.reduceat(r * r, folded.offsets[:-1]).max()))
