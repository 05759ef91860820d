"""The p-interpolation between average (p = 2, ERM) and worst-group loss (p → ∞):
min_x Φ_p(x) = (1/m) Σ_i l_i(x)^{p/2} (docs/gdr.md).

Φ_p is convex for p ≥ 2 (a convex non-decreasing power of a convex quadratic) and is
minimised by damped Newton from the ERM warm start, with

    ∇Φ_p = (1/m) Σ_i q l_i^{q-1} ∇l_i,
    ∇²Φ_p = (1/m) Σ_i [q(q-1) l_i^{q-2} ∇l_i∇l_iᵀ + q l_i^{q-1} ∇²l_i],   q = p/2,

∇l_i = 2Â_iᵀr_i, ∇²l_i = 2Â_iᵀÂ_i on folded rows. The objective is divided by its value at
the start so that the Newton stopping rule is scale-free.
"""

from __future__ import annotations

import numpy as np

from rayworks.pipelines.gdr.problem import GroupData, erm


def _parts(f: GroupData, x: np.ndarray, q: float):
    r = f.A @ x - f.b
    ell = np.add.reduceat(r * r, f.offsets[:-1])
    dl = 2 * np.add.reduceat(f.A * r[:, None], f.offsets[:-1])  # (m, d)
    value = np.mean(ell**q)
    grad = (q * ell ** (q - 1)) @ dl / f.m
    hess = dl.T @ (dl * (q * (q - 1) * ell ** (q - 2))[:, None]) / f.m
    hess += 2 * f.A.T @ (f.A * np.repeat(q * ell ** (q - 1), f.sizes)[:, None]) / f.m
    return value, grad, hess


def interpolation_objective(data: GroupData, x: np.ndarray, p: float) -> float:
    """Φ_p(x) = (1/m) Σ_i l_i(x)^{p/2}."""
    return float(_parts(data.folded(), x, p / 2)[0])


def interpolation_solve(
    data: GroupData, p: float, max_newton: int = 100, tol: float = 1e-12
) -> np.ndarray:
    """argmin_x Φ_p(x) by damped Newton (Armijo backtracking) from ERM."""
    if p < 2:
        raise ValueError(f"interpolation p={p} must be >= 2")
    f, q = data.folded(), p / 2
    x = erm(data)
    scale = _parts(f, x, q)[0]
    for _ in range(max_newton):
        value, g, H = _parts(f, x, q)
        dx = -np.linalg.solve(H, g)
        decrement2 = -g @ dx
        if decrement2 <= tol * scale:
            break
        s = 1.0
        while _parts(f, x + s * dx, q)[0] > value - 0.25 * s * decrement2 and s > 1e-12:
            s *= 0.5
        x = x + s * dx
    return x
