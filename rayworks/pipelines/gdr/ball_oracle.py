"""The method: ball-oracle trust region on the smoothed GDR objective (Algorithm 1 of Manoj &
Patel; docs/gdr.md), in the Lewis geometry M = ÂᵀWÂ or the Euclidean M = ÂᵀÂ.

Pieces, top to bottom:
1. `geometry`: M from block Lewis overestimates w (`lewis.py`, step 1-2) or W = I.
2. `Regularised`: f̂ = f̃_{β,δ} + reg·‖x - x₀‖²_M with β = ε/(4 log m), δ = ε/4 and
   reg = reg_coef·ε/min{rank, m} (steps 3-4; the theory's reg_coef is 1/1000).
3. `ball_oracle`: argmin_{‖x - q‖_M ≤ r} f̂(x) by damped Newton (step 5). Each Newton step
   solves the trust-region model min gᵀp + ½pᵀHp s.t. ‖x + p - q‖_M ≤ r exactly (KKT:
   (H + nuM)(x + p - q) = Hy - g with y = x - q, nu ≥ 0 found from the secular equation on
   the generalised eigenbasis of (H, M)), then backtracks (quasi-self-concordance makes
   the damped step valid, Lemma C.3 / 6.3). One Newton step = one solve with AᵀBA.
4. `trust_region`: what the paper ran (experiments §8): q ← x₀; repeat {q ← oracle(q);
   r ← shrink·r}.
5. `accelerated`: Monteiro-Svaiter acceleration with a ball oracle (Carmon et al. 2020,
   Alg. 1-2; step 6, the theory's rate), offered as an option.

Reconstructed: ε = eps_rel·f(x₀) and r = radius_rel·f(x₀) (both grid-tuned; the theory's
r = C/ε has no stated C), the Newton stopping rule, the MS λ-search acceptance band.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.optimize import brentq

from rayworks.pipelines.gdr.lewis import lewis_overestimates
from rayworks.pipelines.gdr.problem import GroupData
from rayworks.pipelines.gdr.smoothing import (
    Smoothing,
    max_group_norm,
    smoothed_grad,
    smoothed_hessian,
    smoothed_value,
    smoothing_constants,
)
from rayworks.pipelines.gdr.trace import Trace


@dataclass(frozen=True)
class OracleOptions:
    eps_rel: float = 1e-3
    radius_rel: float = 1.0
    shrink: float = 1.0
    reg_coef: float = 1e-3
    max_newton: int = 30
    newton_tol: float = 1e-6
    lewis_log_factor: float = 2.0


def geometry(folded: GroupData, kind: str, log_factor: float = 2.0) -> np.ndarray:
    """M = ÂᵀWÂ with block Lewis overestimates (`lewis`) or M = ÂᵀÂ (`euclid`), (d, d)."""
    if kind == "euclid":
        return folded.A.T @ folded.A
    w = np.repeat(lewis_overestimates(folded, log_factor), folded.sizes)
    return folded.A.T @ (folded.A * w[:, None])


@dataclass
class Regularised:
    """f̂(x) = f̃_{β,δ}(x) + reg·‖x - x₀‖²_M with value, gradient and Hessian."""

    folded: GroupData
    sm: Smoothing
    M: np.ndarray
    x0: np.ndarray
    reg: float

    def value(self, x: np.ndarray) -> float:
        e = x - self.x0
        return smoothed_value(self.folded, x, self.sm) + self.reg * e @ self.M @ e

    def grad(self, x: np.ndarray) -> np.ndarray:
        return smoothed_grad(self.folded, x, self.sm)[1] + 2 * self.reg * self.M @ (x - self.x0)

    def hessian(self, x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        v, g, H = smoothed_hessian(self.folded, x, self.sm)
        e = x - self.x0
        Me = self.M @ e
        return v + self.reg * e @ Me, g + 2 * self.reg * Me, H + 2 * self.reg * self.M


def make_objective(
    folded: GroupData, M: np.ndarray, x0: np.ndarray, opts: OracleOptions
) -> Regularised:
    eps = opts.eps_rel * max_group_norm(folded, x0)
    rank = min(np.linalg.matrix_rank(folded.A), folded.m)
    sm = smoothing_constants(eps, folded.m)
    return Regularised(folded, sm, M, x0, opts.reg_coef * eps / rank)


def trust_region_step(
    g: np.ndarray, H: np.ndarray, M: np.ndarray, y: np.ndarray, r: float
) -> tuple[np.ndarray, float]:
    """Exact minimiser p of gᵀp + ½pᵀHp over ‖y + p‖_M ≤ r (y = x - q), and its nu ≥ 0."""
    lam, V = sla.eigh(H, M)  # H V = M V Λ, VᵀMV = I
    lam = np.maximum(lam, 0.0)
    c = V.T @ (H @ y - g)  # x_new - q = V diag(1/(λ+nu)) c

    def norm(nu: float) -> float:
        return float(np.sqrt(np.sum((c / np.maximum(lam + nu, 1e-300)) ** 2)))

    nu = 0.0
    if lam.min() <= 1e-14 * max(lam.max(), 1e-300) or norm(0.0) > r:
        hi = np.linalg.norm(c) / r + 1e-300
        nu = brentq(lambda t: norm(t) - r, 1e-300, hi, xtol=1e-14 * hi, rtol=1e-12)
    return V @ (c / (lam + nu)) - y, nu


def ball_oracle(
    obj: Regularised, q: np.ndarray, r: float, opts: OracleOptions, x: np.ndarray | None = None
) -> tuple[np.ndarray, int, float, bool]:
    """≈ argmin_{‖x - q‖_M ≤ r} f̂(x) by damped trust-region Newton.

    Returns (x, Newton steps, nu of the last step, converged): `converged` is False when
    the `max_newton` budget ran out before the Newton decrement fell below tolerance."""
    x = q.copy() if x is None else x.copy()
    tol = opts.newton_tol * obj.sm.delta * 4  # a fraction of ε
    nu, steps = 0.0, 0
    while steps < opts.max_newton:
        steps += 1
        v, g, H = obj.hessian(x)
        p, nu = trust_region_step(g, H, obj.M, x - q, r)
        slope = float(g @ p)
        if -slope <= tol:
            return x, steps, nu, True
        t = 1.0
        while obj.value(x + t * p) > v + 0.25 * t * slope and t > 1e-10:
            t *= 0.5
        x = x + t * p
    return x, steps, nu, False


def _record(trace: Trace, folded: GroupData, x: np.ndarray, solves: int) -> None:
    trace.add(max_group_norm(folded, x) ** 2, solves, x)


def trust_region(
    folded: GroupData,
    M: np.ndarray,
    x0: np.ndarray,
    opts: OracleOptions,
    outer_iters: int,
    trace: Trace,
    stop: Callable[[float], bool] = lambda _: False,
) -> Trace:
    """Unaccelerated trust region (what the paper ran): q ← oracle(q), r ← shrink·r."""
    obj = make_objective(folded, M, x0, opts)
    r = opts.radius_rel * max_group_norm(folded, x0)
    q, solves = x0.copy(), 0
    _record(trace, folded, q, solves)
    for _ in range(outer_iters):
        q, steps, nu, converged = ball_oracle(obj, q, r, opts)
        solves += steps
        _record(trace, folded, q, solves)
        # interior and converged: q minimises f̂, so further calls are no-ops. An interior
        # call that ran out of Newton steps (a large radius) has not minimised f̂: go on.
        if (nu == 0.0 and converged) or stop(trace.best):
            break
        r *= opts.shrink
    return trace


def accelerated(
    folded: GroupData,
    M: np.ndarray,
    x0: np.ndarray,
    opts: OracleOptions,
    outer_iters: int,
    trace: Trace,
    stop: Callable[[float], bool] = lambda _: False,
    max_search: int = 8,
) -> Trace:
    """Monteiro-Svaiter acceleration with the ball oracle (Carmon et al. 2020, Alg. 1-2).

    Per step: search λ (bisection in log λ, ≤ max_search oracle calls) so that the oracle
    output x⁺ at y = (A·x + a·v)/(A + a), a = (λ + √(λ² + 4λA))/2, satisfies the
    large-step condition λ‖∇f̂(x⁺)‖_{M⁻¹} ∈ [½, 2]·‖x⁺ - y‖_M (band reconstructed); then
    A ← A + a, v ← v - a·M⁻¹∇f̂(x⁺), x ← x⁺.
    """
    obj = make_objective(folded, M, x0, opts)
    r = opts.radius_rel * max_group_norm(folded, x0)
    M_chol = sla.cho_factor(M)
    x, v, A_sum, solves = x0.copy(), x0.copy(), 0.0, 0
    g0 = obj.grad(x0)
    lam = r / max(math.sqrt(g0 @ sla.cho_solve(M_chol, g0)), 1e-300)
    _record(trace, folded, x, solves)
    for _ in range(outer_iters):
        lo, hi = 0.0, math.inf
        for _ in range(max_search):
            a = (lam + math.sqrt(lam * lam + 4 * lam * A_sum)) / 2
            y = (A_sum * x + a * v) / (A_sum + a)
            xp, steps, nu, converged = ball_oracle(obj, y, r, opts)
            solves += steps
            g = obj.grad(xp)
            Minv_g = sla.cho_solve(M_chol, g)
            step = math.sqrt(max((xp - y) @ M @ (xp - y), 0.0))
            ratio = lam * math.sqrt(max(g @ Minv_g, 0.0)) / max(step, 1e-300)
            if (nu == 0.0 and converged) or 0.5 <= ratio <= 2.0:
                break
            lo, hi = (lo, lam) if ratio > 2.0 else (lam, hi)
            bracketed = lo > 0 and hi < math.inf
            lam = math.sqrt(lo * hi) if bracketed else (lam / 4 if ratio > 2 else lam * 4)
        A_sum += a
        v = v - a * Minv_g
        x = xp
        _record(trace, folded, x, solves)
        if (nu == 0.0 and converged) or stop(trace.best):  # interior: x⁺ minimises f̂
            break
    return trace
