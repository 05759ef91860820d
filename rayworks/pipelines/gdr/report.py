"""The run's table (jsonl + markdown), its plots, the pass rule (docs/gdr.md) and the sweep
summary: Lewis vs Euclidean ball oracle (and the IPM) at every duplication factor k and
group count m, at the k = 1 tuned setting, retuned per point, and per radius."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column, Table


def pass_rule(
    dup: list[dict[str, Any]], arm: str, tolerance: int, ball: str = "lewis"
) -> dict[str, float]:
    """Card: the ball oracle's iterations to 1% (at its k = 1 tuned setting) change by at
    most ±tolerance across the duplication sweep (all must reach it). Only in runs of the
    `lewis` arm with ≥ 2 duplication factors. `ball="euclid"` applies the same rule to the
    Euclidean arm (key `pass_rule_euclid`): the rule tells the geometries apart only when
    the Euclidean arm fails it."""
    iters = [r["iters_to_target"] for r in dup if r["arm"] == ball and r.get("tuned", True)]
    if arm != "lewis" or len(iters) < 2:
        return {}
    ok = all(not math.isnan(i) for i in iters) and max(iters) - min(iters) <= 2 * tolerance
    ok = ok and max(abs(i - iters[0]) for i in iters) <= tolerance
    return {"pass_rule" if ball == "lewis" else f"pass_rule_{ball}": float(ok)}


def _never_is_worst(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _tag(r: dict[str, Any]) -> str:
    return f"dup_k{r['k']}" if r["sweep"] == "dup" else f"m{r['m']}"


def head_to_head(sweep: list[dict[str, Any]], key: str = "iters_to_target") -> dict[str, float]:
    """Lewis vs Euclidean on every (sweep point, grid setting) both ran: how many cells each
    needs fewer `key` (never reaching the target counts as worse than any count; both
    never = tie)."""
    cells: dict[tuple, dict[str, float]] = {}
    for r in sweep:
        if r["arm"] in ("lewis", "euclid"):
            cell_key = (_tag(r), tuple(sorted(r["params"].items())))
            cells.setdefault(cell_key, {})[r["arm"]] = _never_is_worst(r[key])
    pairs = [c for c in cells.values() if len(c) == 2]
    name = key.removesuffix("_to_target")
    return {
        f"h2h_{name}_lewis_wins": float(sum(c["lewis"] < c["euclid"] for c in pairs)),
        f"h2h_{name}_euclid_wins": float(sum(c["euclid"] < c["lewis"] for c in pairs)),
        f"h2h_{name}_ties": float(sum(c["lewis"] == c["euclid"] for c in pairs)),
    }


def _rank(r: dict[str, Any]) -> tuple[float, float]:
    return (_never_is_worst(r["iters_to_target"]), r["final_gap"])


def sweep_summary(sweep: list[dict[str, Any]]) -> dict[str, float]:
    """Summary keys of the duplication (`dup_k{k}_`) and m (`m{m}_`) sweeps, per arm:
    at the k = 1 tuned setting (`_iters_to_1pct`, `_solves_to_1pct`, `_seconds_to_1pct`,
    `_total_iters`); retuned at that point over the grid (`_retuned_*`, ball arms); and
    per radius at the arm's tuned ε (`_r{r}_*`, ball arms). Plus `head_to_head` counts."""
    out: dict[str, float] = {}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sweep:
        groups.setdefault((_tag(r), r["arm"]), []).append(r)
    for (tag, arm), rows in groups.items():
        tuned = next(r for r in rows if r["tuned"])  # a repeated grid value repeats it
        picks = [("", tuned)]
        if len(rows) > 1:
            picks.append(("_retuned", min(rows, key=_rank)))
            eps = tuned["params"]["eps_rel"]
            picks += [
                (f"_r{r['params']['radius_rel']:g}", r)
                for r in rows
                if r["params"]["eps_rel"] == eps
            ]
        for label, r in picks:
            for key in ("iters", "solves", "seconds"):
                out[f"{tag}_{arm}{label}_{key}_to_1pct"] = r[f"{key}_to_target"]
        out[f"{tag}_{arm}_total_iters"] = tuned["iterations"]
    return {**out, **head_to_head(sweep), **head_to_head(sweep, "solves_to_target")}


def _params(r: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items())


ARM_COLUMNS = (
    Column("arm"),
    Column("params", "tuned setting", render=_params),
    Column("m", spec="", right=True),
    Column("k", spec="", right=True),
    Column("iters_to_target", "iters to 1%", ".3g", right=True),
    Column("seconds_to_target", "s to 1%", ".3g", right=True),
    Column("solves_to_target", "solves to 1%", ".3g", right=True),
    Column("final_gap", "final gap", ".2e", right=True),
    Column("relopt_iters_to_target", "iters to 1% of OPT", ".3g", right=True),
    Column("relopt_final_gap", "final (F-OPT)/OPT", ".2e", right=True),
    Column("iterations", "iterations run", ".0f", right=True),
)
INTERP_COLUMNS = (
    Column("p", spec="g", right=True),
    Column("worst", "worst-group loss", ".6g", right=True),
    Column("average", "average loss", ".6g", right=True),
)
H2H_COLUMNS = (
    Column("sweep"),
    Column("k", spec="", right=True),
    Column("m", "m·k", "", right=True),
    Column("eps", "ε/f(x₀)", "g", right=True),
    Column("radius", "r/f(x₀)", "g", right=True),
    Column("lewis_iters", "Lewis iters", ".3g", right=True),
    Column("euclid_iters", "Euclid iters", ".3g", right=True),
    Column("lewis_solves", "Lewis solves", ".3g", right=True),
    Column("euclid_solves", "Euclid solves", ".3g", right=True),
    Column("win", "fewer iters"),
)


def write_table(
    ctx: RunContext,
    rows: list[dict[str, Any]],
    best: dict[str, dict[str, Any]],
    extras: list[dict[str, Any]],
    interp: list[dict[str, Any]],
    opt: float,
) -> Path:
    """table.jsonl: every piece without its curves; table.md: tuned arms, extras, interp."""
    slim = [{k: v for k, v in r.items() if not k.startswith("curve")} for r in rows + extras]
    more = []
    if extras:
        tuned = [r for r in extras if r.get("tuned", True)]
        more += [
            Table(tuned, ARM_COLUMNS, "Duplication (k) and m sweep (k = 1 tuned settings):"),
            Table(h2h_rows(extras), H2H_COLUMNS, H2H_TITLE),
        ]
    if interp:
        gdr = {"p": "∞ (GDR)", "worst": opt, "average": None}
        title = "p-interpolation (minimiser of (1/m) Σ l_i^{p/2}):"
        more.append(Table([*interp, gdr], INTERP_COLUMNS, title))
    return tables.write_table(
        ctx.artifacts_dir,
        list(best.values()),
        ARM_COLUMNS,
        title=f"OPT (cvxpy/CLARABEL) = {opt:.6g}. Gap = (F - OPT)/(F(x₀) - OPT), best so "
        "far.\n\nTuned arms:",
        more=more,
        jsonl=slim + interp,
    )


H2H_TITLE = (
    "Lewis vs Euclidean ball oracle at every sweep cell (iterations / linear solves "
    "to 1%; '-' = never):"
)


def h2h_rows(sweep: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lewis vs Euclidean iterations / solves to 1% per sweep cell both ran."""
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in sweep:
        if r["arm"] in ("lewis", "euclid"):
            p = r["params"]
            cells.setdefault((r["sweep"], r["k"], r["m"], p["eps_rel"], p["radius_rel"]), {})[
                r["arm"]
            ] = r
    out = []
    for (sweep_name, k, m, eps, rad), c in sorted(cells.items()):
        if len(c) < 2:
            continue
        lw, eu = c["lewis"], c["euclid"]
        a, b = _never_is_worst(lw["iters_to_target"]), _never_is_worst(eu["iters_to_target"])
        out.append(
            {
                "sweep": sweep_name,
                "k": k,
                "m": m,
                "eps": eps,
                "radius": rad,
                "lewis_iters": lw["iters_to_target"],
                "euclid_iters": eu["iters_to_target"],
                "lewis_solves": lw["solves_to_target"],
                "euclid_solves": eu["solves_to_target"],
                "win": "Lewis" if a < b else "Euclid" if b < a else "tie",
            }
        )
    return out


def write_plots(
    folder: Path, best: dict[str, dict[str, Any]], dup: list[dict[str, Any]], target: float
) -> None:
    """gap_vs_iter.png, gap_vs_time.png (log y, best-so-far) and iters_vs_k.png."""

    from rayworks.platform.figures import subplots

    for name, xkey, xlabel in (
        ("gap_vs_iter", None, "iteration (outer / Newton / gradient)"),
        ("gap_vs_time", "curve_seconds", "wall-clock (s)"),
    ):
        fig, ax = subplots(figsize=(6, 4))
        for arm, r in best.items():
            ys = [max(g, 1e-12) for g in r["curve"]]
            xs = r[xkey] if xkey else range(len(ys))
            ax.plot(xs, ys, label=arm)
        ax.axhline(target, color="gray", linestyle="--", label=f"{target:g}")
        ax.set_yscale("log")
        ax.set_xscale("symlog" if xkey is None else "log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("best-so-far (F - OPT)/(F(x₀) - OPT)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / f"{name}.png", dpi=110)
    if dup:
        fig, ax = subplots(figsize=(6, 4))
        for arm, key, label in (
            ("lewis", "iters_to_target", "ball oracle (Lewis): outer iters to 1%"),
            ("euclid", "iters_to_target", "ball oracle (Euclidean): outer iters to 1%"),
            ("ipm", "iters_to_target", "IPM (tuned μ): Newton steps to 1%"),
            ("ipm", "iterations", "IPM (tuned μ): Newton steps to its stop"),
            ("ipm_short", "iters_to_target", "IPM short-step: Newton steps to 1%"),
        ):
            pts = sorted((r["k"], r[key]) for r in dup if r["arm"] == arm and r["tuned"])
            if not pts:
                continue
            ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("duplication factor k (m·k groups)")
        ax.set_ylabel("iterations")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "iters_vs_k.png", dpi=110)
