"""`rayworks run gdr` / `rayworks bench gdr`: group-DRO least squares with block Lewis weights
(Manoj & Patel; docs/gdr.md).

One run builds the synthetic instance (`problem.py`), computes OPT with cvxpy/CLARABEL
and the ERM warm start, then fans out every (arm, grid setting) as one Ray task
(`arms.solve_piece`), keeps each arm's best setting (fewest iterations to `target` gap,
then lowest final gap) and, in the method run, the extras: duplication k and the m
sweep (both ball-oracle arms, Lewis and Euclidean, at every grid setting, beside the IPM's
Newton steps; one Ray task per sweep instance, `arms.sweep_piece`) and the
p-interpolation. Gap = best-so-far
(F - OPT)/(F(x₀) - OPT) (headline); (F - OPT)/OPT is reported beside it (`relopt_`).
The baselines are declared in-run: the method run tunes every arm on the same instance and
OPT (one CLARABEL solve) and the duplication / m sweeps start the Euclidean ball oracle
from its tuned setting, so bench reads their rows from the method's summary (`<arm>_`
keys) instead of solving them again.
Artifacts: `table.jsonl`, `table.md`, `gap_vs_iter.png`, `gap_vs_time.png`,
`iters_vs_k.png`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rayworks.pipelines.gdr.arms import (
    grid,
    instance,
    interp_piece,
    solve_piece,
    sweep_calls,
    sweep_piece,
)
from rayworks.pipelines.gdr.baselines import cvxpy_optimum
from rayworks.pipelines.gdr.config import (
    GDRConfig,
)
from rayworks.pipelines.gdr.problem import erm, worst_group_loss
from rayworks.pipelines.gdr.report import pass_rule, sweep_summary, write_plots, write_table
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, InRun, pipeline

NUMBERS = (
    "iters_to_target",
    "seconds_to_target",
    "solves_to_target",
    "final_gap",
    "relopt_iters_to_target",
    "relopt_final_gap",
    "iterations",
    "seconds",
    "solves",
)
REPORT = (
    "seconds_to_1pct",
    "solves_to_1pct",
    "final_gap",
    "relopt_iters_to_1pct",
    "pass_rule",
    "pass_rule_euclid",
    "h2h_iters_lewis_wins",
    "h2h_iters_euclid_wins",
)


def _rank(row: dict[str, Any]) -> tuple[float, float]:
    """Tuning order: reached the target in fewest iterations, then lowest final gap."""
    hit = row["iters_to_target"]
    return (math.inf if math.isnan(hit) else hit, row["final_gap"])


def _scalars(row: dict[str, Any]) -> dict[str, float]:
    return {k: row[k] for k in NUMBERS}


class _Logger:
    """Logs each finished piece as one metrics record and moves the progress bar."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx, self.step = ctx, 0

    def piece(self, _i: int, row: dict[str, Any]) -> None:
        self.step += 1
        label = {k: v for k, v in row.items() if k in ("arm", "m", "k", "p")}
        params = {f"param_{k}": v for k, v in row.get("params", {}).items()}
        numbers = _scalars(row) if "iters_to_target" in row else {}
        extra = {k: row[k] for k in ("worst", "average") if k in row}
        self.ctx.log(self.step, **label, **params, **numbers, **extra)

    def sweep(self, i: int, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            self.piece(i, r)


def run_gdr(cfg: GDRConfig, ctx: RunContext) -> dict[str, float]:
    """All arms on one instance (tuned on a grid), then the method run's extras."""
    dump = cfg.model_dump(mode="json")
    data = instance(dump["data"], cfg.seed)
    opt = cvxpy_optimum(data)[1]
    f0 = worst_group_loss(data, erm(data))
    arms = [cfg.arm, *cfg.compare]
    calls = [{"arm": a, "params": p, "cfg": dump, "opt": opt} for a in arms for p in grid(a, cfg)]
    n_sweep = sum(len(c["settings"]) for c in sweep_calls(cfg, {}, opt))  # same size tuned
    n_extra = n_sweep + len(cfg.interp_ps)
    ctx.progress(len(calls) + n_extra, f"gdr {cfg.arm} ({len(arms)} arms)")
    log = _Logger(ctx)
    rows = fan_out(solve_piece, calls, threads=1, on_done=log.piece)
    best = {a: min((r for r in rows if r["arm"] == a), key=_rank) for a in arms}

    tuned = {a: r["params"] for a, r in best.items()}
    pieces = fan_out(sweep_piece, sweep_calls(cfg, tuned, opt), threads=1, on_done=log.sweep)
    extras = [r for piece in pieces for r in piece]
    dup = [r for r in extras if r["sweep"] == "dup"]
    interp = fan_out(
        interp_piece, [{"p": p, "cfg": dump} for p in cfg.interp_ps], threads=1, on_done=log.piece
    )

    summary: dict[str, float] = {
        "opt": opt,
        "F0": f0,
        "erm_relopt_gap": (f0 - opt) / opt,
        "kappa": float(np.linalg.cond(data.A.T @ data.A)),
    }
    for a in arms:
        prefix = "" if a == cfg.arm else f"{a}_"
        for key, value in _scalars(best[a]).items():
            summary[prefix + key.replace("_target", "_1pct")] = value
    if extras:
        summary.update(sweep_summary(extras))
    for r in interp:
        summary[f"p{r['p']:g}_worst"], summary[f"p{r['p']:g}_average"] = r["worst"], r["average"]
    summary.update(pass_rule(dup, cfg.arm, cfg.pass_tolerance))
    summary.update(pass_rule(dup, cfg.arm, cfg.pass_tolerance, ball="euclid"))
    write_table(ctx, rows, best, extras, interp, opt)
    write_plots(ctx.artifacts_dir, best, dup, cfg.target)
    return summary


# A baseline arm runs one instance: no method-only sweeps, no arms compared inside it.
_ONE_INSTANCE = {"compare": [], "dup_ks": [], "m_sweep": [], "interp_ps": []}
_SMOKE = {"smoke": {"dup_ks": [], "m_sweep": [], "interp_ps": []}}


def _in_run(arm: str) -> InRun:
    """`arm` as the method run computes it: tuned on the same instance, OPT and grid."""
    reason = "tuned in the method run on the same instance and OPT; the sweeps start from it"
    return InRun(reason, member=arm, prefix=f"{arm}_")


@pipeline(
    "gdr",
    config=GDRConfig,
    kind="task",
    arms={
        "gdr_euclid": Arm(
            "Ball-oracle trust region in the Euclidean geometry M = AᵀA.",
            {"arm": "euclid", **_ONE_INSTANCE},
            _SMOKE,
            in_run=_in_run("euclid"),
        ),
        "gdr_ipm": Arm(
            "Log-barrier interior-point method on the epigraph; iterations = Newton steps.",
            {"arm": "ipm", **_ONE_INSTANCE},
            _SMOKE,
            in_run=_in_run("ipm"),
        ),
        "gdr_firstorder": Arm(
            "Subgradient and smoothed GD / heavy-ball / Nesterov (best tuned variant reported).",
            {"arm": "firstorder", **_ONE_INSTANCE},
            _SMOKE,
            in_run=_in_run("firstorder"),
        ),
    },
    headline=("iters_to_1pct", "min"),
    ablations={
        "accel": ("oracle.accelerate=true", "compare=[]", "dup_ks=[]", "m_sweep=[]", "interp_ps=[]")
    },
    report=REPORT,
)
def run(cfg: GDRConfig, ctx: RunContext) -> dict[str, float]:
    """Ball-oracle trust region in the block-Lewis geometry vs baselines (GDR least squares)."""
    return run_gdr(cfg, ctx)
