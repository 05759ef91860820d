"""Baselines (docs/gdr.md): the exact optimum (cvxpy + CLARABEL on the epigraph),
subgradient descent (fixed and 1/√t steps), smoothed GD / heavy-ball / Nesterov on f̃,
and a log-barrier interior-point method on the epigraph whose Newton steps are counted.

All work on the original F(x) = max_i l_i(x) (or its folded √F form) and record into a
`Trace`. Step-size scales are reconstructed: subgradient steps are η₀·(1 + ‖x₀‖)
(normalised subgradients), smoothed first-order steps are c/L with the global bound
L = max_i ‖Â_i‖²₂·(1/β + 1/δ) on ∇²f̃.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import cvxpy as cp
import numpy as np

from rayworks.pipelines.gdr.problem import GroupData, group_losses, worst_group_loss
from rayworks.pipelines.gdr.smoothing import max_group_norm, smoothed_grad, smoothing_constants
from rayworks.pipelines.gdr.trace import Trace


def cvxpy_optimum(data: GroupData) -> tuple[np.ndarray, float]:
    """min t s.t. ‖Â_i x - b̂_i‖₂ ≤ t for all i (SOC epigraph of f = √F), by CLARABEL;
    returns (x*, OPT = F(x*))."""
    f = data.folded()
    x, t = cp.Variable(data.d), cp.Variable()
    sizes = data.sizes
    if np.all(sizes == sizes[0]):  # one vectorised SOC over the (n_i, m) residual matrix
        res = cp.reshape(f.A @ x - f.b, (int(sizes[0]), data.m), order="F")
        cons = [cp.SOC(t * np.ones(data.m), res, axis=0)]
    else:
        cons = [
            cp.SOC(t, f.A[a:b] @ x - f.b[a:b])
            for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)
        ]
    cp.Problem(cp.Minimize(t), cons).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-9, tol_gap_rel=1e-9, tol_feas=1e-9
    )
    if x.value is None:
        raise RuntimeError("cvxpy/CLARABEL returned no solution for the GDR epigraph")
    return x.value, worst_group_loss(data, x.value)


def subgradient(
    data: GroupData, x0: np.ndarray, eta0: float, schedule: str, iters: int, trace: Trace
) -> Trace:
    """x ← x - η_t·g/‖g‖, g = ∇l_{i*}(x) = (2/n_i)A_iᵀr_i of the worst group; η_t = η₀·s
    (`fixed`) or η₀·s/√(t+1) (`sqrt`), s = 1 + ‖x₀‖."""
    scale = 1.0 + np.linalg.norm(x0)
    x = x0.copy()
    trace.add(worst_group_loss(data, x), 0, x)
    for t in range(iters):
        losses = group_losses(data, x)
        i = int(np.argmax(losses))
        a, b = data.offsets[i], data.offsets[i + 1]
        g = 2.0 / (b - a) * data.A[a:b].T @ (data.A[a:b] @ x - data.b[a:b])
        eta = eta0 * scale / (math.sqrt(t + 1) if schedule == "sqrt" else 1.0)
        x = x - eta * g / max(np.linalg.norm(g), 1e-300)
        trace.add(worst_group_loss(data, x), t + 1, x)
    return trace


def smoothed_first_order(
    data: GroupData,
    x0: np.ndarray,
    method: str,
    step_mult: float,
    eps_rel: float,
    iters: int,
    trace: Trace,
    momentum: float = 0.9,
) -> Trace:
    """GD, heavy-ball (x ← x - ηg + μ(x - x_prev)) or Nesterov (FISTA momentum) on f̃_{β,δ}
    with ε = eps_rel·f(x₀), step η = step_mult/L."""
    f = data.folded()
    sm = smoothing_constants(eps_rel * max_group_norm(f, x0), f.m)
    block_norm2 = max(
        np.linalg.norm(f.A[a:b], 2) ** 2 for a, b in zip(f.offsets[:-1], f.offsets[1:], strict=True)
    )
    eta = step_mult / (block_norm2 * (1 / sm.beta + 1 / sm.delta))
    x, prev, y, tk = x0.copy(), x0.copy(), x0.copy(), 1.0
    trace.add(max_group_norm(f, x) ** 2, 0, x)
    for t in range(iters):
        if method == "nesterov":
            x_new = y - eta * smoothed_grad(f, y, sm)[1]
            tk_new = (1 + math.sqrt(1 + 4 * tk * tk)) / 2
            y = x_new + (tk - 1) / tk_new * (x_new - x)
            x, tk = x_new, tk_new
        else:
            mu = momentum if method == "heavy_ball" else 0.0
            x, prev = x - eta * smoothed_grad(f, x, sm)[1] + mu * (x - prev), x
        value = max_group_norm(f, x) ** 2
        trace.add(value if np.isfinite(value) else math.inf, t + 1, x)
    return trace


def _barrier_parts(f: GroupData, x: np.ndarray, t: float, tau: float):
    """φ(x, t) = τ·t - Σ_i log(t - l_i(x)) on folded data (l_i = ‖Â_i x - b̂_i‖²): value,
    gradient (d+1,) and Hessian (d+1, d+1), or None outside the domain."""
    r = f.A @ x - f.b
    ell = np.add.reduceat(r * r, f.offsets[:-1])
    u = t - ell
    if np.any(u <= 0):
        return None
    dl = 2 * np.add.reduceat(f.A * r[:, None], f.offsets[:-1])  # ∇l_i, (m, d)
    du = np.column_stack([-dl, np.ones(f.m)])  # ∇u_i
    grad = np.concatenate([np.zeros(f.d), [tau]]) - du.T @ (1 / u)
    hess = du.T @ (du / (u * u)[:, None])
    row_w = np.repeat(2 / u, f.sizes)
    hess[: f.d, : f.d] += f.A.T @ (f.A * row_w[:, None])
    return tau * t - np.log(u).sum(), grad, hess


def log_barrier_ipm(
    data: GroupData,
    x0: np.ndarray,
    mu: float,
    max_newton: int,
    trace: Trace,
    gap_tol: float = 1e-6,
    stop: Callable[[float], bool] = lambda _: False,
) -> Trace:
    """Barrier method on min t s.t. l_i(x) ≤ t: centre φ_τ by damped Newton (backtracking,
    feasibility kept), then τ ← μτ, until the duality-gap bound m/τ ≤ gap_tol·t.
    Every Newton step (one (d+1)² solve) is one iteration of the trace."""
    f = data.folded()
    x = x0.copy()
    t = 1.1 * worst_group_loss(data, x) + 1e-12
    tau = f.m / t  # the first centring starts where m/τ equals t
    steps = 0
    trace.add(worst_group_loss(data, x), 0, x)
    while steps < max_newton:
        while steps < max_newton:
            val, g, H = _barrier_parts(f, x, t, tau)
            dz = -np.linalg.solve(H, g)
            decrement2 = -g @ dz
            if decrement2 / 2 <= 1e-8:
                break
            s = 1.0
            while True:
                cand = _barrier_parts(f, x + s * dz[:-1], t + s * dz[-1], tau)
                if cand is not None and cand[0] <= val - 0.25 * s * decrement2:
                    break
                s *= 0.5
                if s < 1e-12:
                    break
            x, t = x + s * dz[:-1], t + s * dz[-1]
            steps += 1
            trace.add(worst_group_loss(data, x), steps, x)
            if stop(trace.best):
                return trace
        if f.m / tau <= gap_tol * t:
            break
        tau *= mu
    return trace
