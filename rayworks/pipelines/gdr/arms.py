"""One piece of a `gdr` run = one solver with one setting on one instance (a pure function
that `fan_out` sends to a Ray task), or one sweep point = every (arm, setting) of the
duplication / m sweeps on one instance. Arms: `lewis` / `euclid` (ball-oracle trust
region, `ball_oracle.py`; the two differ only in the geometry M), `ipm` (log-barrier IPM;
`ipm_short` = the theory's short-step schedule μ = 1 + 1/√m, reconstructed constant),
`firstorder` (subgradient fixed / 1/√t and smoothed GD / heavy-ball / Nesterov,
`baselines.py`), and `interp` (p-interpolation).

Both ball-oracle arms are in every sweep (`DUP_ARMS`, `M_ARMS`): duplication leaves the
Lewis geometry unchanged but scales the Euclidean M = ÂᵀÂ by k, so a sweep without the
Euclidean arm cannot tell the geometry's effect from the objective's invariance.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rayworks.pipelines.gdr.ball_oracle import OracleOptions, accelerated, geometry, trust_region
from rayworks.pipelines.gdr.baselines import (
    cvxpy_optimum,
    log_barrier_ipm,
    smoothed_first_order,
    subgradient,
)
from rayworks.pipelines.gdr.interpolation import interpolation_solve
from rayworks.pipelines.gdr.problem import (
    GroupData,
    SyntheticSpec,
    duplicate,
    erm,
    group_losses,
    synthetic,
)
from rayworks.pipelines.gdr.trace import Trace, gap_ratio, summarize


def instance(data: dict[str, Any], seed: int, m: int | None = None, k: int = 1) -> GroupData:
    """The synthetic instance of `data` (a `DataConfig` dump), optionally with m groups,
    every group duplicated k times."""
    spec = SyntheticSpec(**{**data, **({"m": m} if m else {})})
    return duplicate(synthetic(spec, seed), k)


def grid(arm: str, cfg: Any) -> list[dict[str, Any]]:
    """The small tuning grid of one arm (`cfg` a `GDRConfig`)."""
    o, b = cfg.oracle, cfg.baselines
    if arm in ("lewis", "euclid"):
        return [{"eps_rel": e, "radius_rel": r} for e in o.eps_rels for r in o.radius_rels]
    if arm == "ipm":
        return [{"mu": mu} for mu in b.ipm_mus]
    return [
        {"variant": f"subgrad_{s}", "eta": eta} for s in ("fixed", "sqrt") for eta in b.subgrad_etas
    ] + [
        {"variant": v, "step_mult": c}
        for v in ("gd", "heavy_ball", "nesterov")
        for c in b.fo_step_mults
    ]


BALL_ARMS = ("lewis", "euclid")
DUP_ARMS = ("lewis", "euclid", "ipm", "ipm_short")  # duplication sweep
M_ARMS = ("lewis", "euclid", "ipm")  # m sweep


def _solve(arm: str, p: dict[str, Any], data: GroupData, x0: np.ndarray, cfg: Any) -> Trace:
    trace = Trace()
    o, b = cfg["oracle"], cfg["baselines"]
    if arm in ("lewis", "euclid"):
        opts = OracleOptions(
            eps_rel=p["eps_rel"],
            radius_rel=p["radius_rel"],
            shrink=o["shrink"],
            reg_coef=o["reg_coef"],
            max_newton=o["max_newton"],
            newton_tol=o["newton_tol"],
            lewis_log_factor=o["lewis_log_factor"],
        )
        folded = data.folded()
        M = geometry(folded, arm, opts.lewis_log_factor)  # Lewis weights are in the timing
        solver = accelerated if o["accelerate"] else trust_region
        return solver(folded, M, x0, opts, o["outer_iters"], trace)
    if arm in ("ipm", "ipm_short"):
        mu = p["mu"] if arm == "ipm" else 1 + 1 / math.sqrt(data.m)
        return log_barrier_ipm(data, x0, mu, b["ipm_max_newton"], trace, b["ipm_gap_tol"])
    variant = p["variant"]
    if variant.startswith("subgrad_"):
        schedule = variant.removeprefix("subgrad_")
        return subgradient(data, x0, p["eta"], schedule, b["fo_iters"], trace)
    return smoothed_first_order(
        data, x0, variant, p["step_mult"], b["fo_eps_rel"], b["fo_iters"], trace, b["momentum"]
    )


def solve_piece(
    arm: str,
    params: dict[str, Any],
    cfg: dict[str, Any],
    opt: float | None = None,
    m: int | None = None,
    k: int = 1,
) -> dict[str, Any]:
    """Run one arm with one setting from the ERM warm start; OPT by cvxpy when not given.

    Returns the `summarize` numbers plus the best-so-far gap curve against iterations and
    seconds (for the plots)."""
    data = instance(cfg["data"], cfg["seed"], m, k)
    if opt is None:
        opt = cvxpy_optimum(data)[1]
    return _row(arm, params, data, erm(data), opt, cfg, k)


def _row(
    arm: str,
    params: dict[str, Any],
    data: GroupData,
    x0: np.ndarray,
    opt: float,
    cfg: dict[str, Any],
    k: int,
) -> dict[str, Any]:
    trace = _solve(arm, params, data, x0, cfg)
    out = summarize(trace, opt, cfg["target"])
    curve = gap_ratio(trace.best_so_far(), opt)
    return {
        "arm": arm,
        "params": params,
        "m": data.m,
        "k": k,
        "opt": opt,
        **out,
        "curve": curve.tolist(),
        "curve_seconds": list(trace.seconds),
    }


def sweep_settings(
    arms: tuple[str, ...], cfg: Any, tuned: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The (arm, params, tuned) triples run at one sweep point (`cfg` a `GDRConfig`).

    `tuned[arm]` is the arm's setting chosen on the base instance (k = 1; an untuned
    Euclidean arm takes Lewis's, any other untuned arm its first grid setting); with
    `sweep_full_grid` the ball-oracle arms also run every other grid setting, so that
    Lewis and Euclidean are compared at every (ε, r), not only at their own tuned one."""
    out = []
    for arm in arms:
        fallback = tuned.get("lewis") if arm == "euclid" else None
        chosen = {} if arm == "ipm_short" else tuned.get(arm, fallback) or grid(arm, cfg)[0]
        every = arm in BALL_ARMS and cfg.sweep_full_grid
        for params in grid(arm, cfg) if every else [chosen]:
            out.append({"arm": arm, "params": params, "tuned": params == chosen})
    return out


def sweep_calls(cfg: Any, tuned: dict[str, dict[str, Any]], opt: float) -> list[dict[str, Any]]:
    """`sweep_piece` keyword arguments: one per duplication factor k (OPT unchanged by
    duplication, so the base OPT is passed) and one per group count m (OPT recomputed)."""
    dump = cfg.model_dump(mode="json")
    dup = sweep_settings(DUP_ARMS, cfg, tuned)
    ms = sweep_settings(M_ARMS, cfg, tuned)
    return [
        {"cfg": dump, "settings": dup, "sweep": "dup", "opt": opt, "k": k} for k in cfg.dup_ks
    ] + [{"cfg": dump, "settings": ms, "sweep": "m", "m": m} for m in cfg.m_sweep]


def sweep_piece(
    cfg: dict[str, Any],
    settings: list[dict[str, Any]],
    sweep: str,
    opt: float | None = None,
    m: int | None = None,
    k: int = 1,
) -> list[dict[str, Any]]:
    """Every (arm, params) of `settings` on one sweep instance (m groups, each duplicated k
    times), from its ERM warm start; every row comes from the same `_row` as the tuning grid,
    so Lewis and Euclidean iterations are counted by one code path."""
    data = instance(cfg["data"], cfg["seed"], m, k)
    if opt is None:
        opt = cvxpy_optimum(data)[1]
    x0 = erm(data)
    return [
        {**_row(s["arm"], s["params"], data, x0, opt, cfg, k), "tuned": s["tuned"], "sweep": sweep}
        for s in settings
    ]


def interp_piece(p: float, cfg: dict[str, Any]) -> dict[str, Any]:
    """Worst-group and average loss of the p-interpolation minimiser."""
    data = instance(cfg["data"], cfg["seed"])
    losses = group_losses(data, interpolation_solve(data, p))
    return {"p": p, "worst": float(losses.max()), "average": float(losses.mean())}
