"""The run's table (jsonl + markdown), its plots and the card's pass rule."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rayworks.platform.context import RunContext
from rayworks.platform.tables import cell


def pass_rule(dup: list[dict[str, Any]], arm: str, tolerance: int) -> dict[str, float]:
    """Card: the ball oracle's iterations to 1% change by at most ±tolerance across the
    duplication sweep (all must reach it). Only in runs with ≥ 2 duplication factors."""
    iters = [r["iters_to_target"] for r in dup if r["arm"] == "lewis"]
    if arm != "lewis" or len(iters) < 2:
        return {}
    ok = all(not math.isnan(i) for i in iters) and max(iters) - min(iters) <= 2 * tolerance
    ok = ok and max(abs(i - iters[0]) for i in iters) <= tolerance
    return {"pass_rule": float(ok)}


def _row_md(r: dict[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items())
    return (f"| {r['arm']} | {params} | {r['m']} | {r['k']} | {cell(r['iters_to_target'], '.3g')} "
            f"| {cell(r['seconds_to_target'], '.3g')} | {cell(r['solves_to_target'], '.3g')} "
            f"| {cell(r['final_gap'], '.2e')} | {cell(r['relopt_iters_to_target'], '.3g')} "
            f"| {cell(r['relopt_final_gap'], '.2e')} | {r['iterations']:.0f} |")  # fmt: skip


HEADER = ("| arm | tuned setting | m | k | iters to 1% | s to 1% | solves to 1% | final gap "
          "| iters to 1% of OPT | final (F-OPT)/OPT | iterations run |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip


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
    ctx.write_jsonl("table.jsonl", slim + interp)
    lines = [f"OPT (cvxpy/CLARABEL) = {opt:.6g}. Gap = (F - OPT)/(F(x₀) - OPT), best so far.",
             "", "Tuned arms:", "", HEADER, *(_row_md(r) for r in best.values())]  # fmt: skip
    if extras:
        lines += ["", "Duplication (k) and m sweep (tuned settings):", "", HEADER,
                  *(_row_md(r) for r in extras)]  # fmt: skip
    if interp:
        lines += ["", "p-interpolation (minimiser of (1/m) Σ l_i^{p/2}):", "",
                  "| p | worst-group loss | average loss |", "|---:|---:|---:|",
                  *(f"| {r['p']:g} | {r['worst']:.6g} | {r['average']:.6g} |" for r in interp),
                  f"| ∞ (GDR) | {opt:.6g} | - |"]  # fmt: skip
    path = ctx.artifacts_dir / "table.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_plots(
    folder: Path, best: dict[str, dict[str, Any]], dup: list[dict[str, Any]], target: float
) -> None:
    """gap_vs_iter.png, gap_vs_time.png (log y, best-so-far) and iters_vs_k.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, xkey, xlabel in (("gap_vs_iter", None, "iteration (outer / Newton / gradient)"),
                               ("gap_vs_time", "curve_seconds", "wall-clock (s)")):  # fmt: skip
        fig, ax = plt.subplots(figsize=(6, 4))
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
        plt.close(fig)
    if dup:
        fig, ax = plt.subplots(figsize=(6, 4))
        for arm, key, label in (
            ("lewis", "iters_to_target", "ball oracle (Lewis): outer iters to 1%"),
            ("ipm", "iters_to_target", "IPM (tuned μ): Newton steps to 1%"),
            ("ipm", "iterations", "IPM (tuned μ): Newton steps to its stop"),
            ("ipm_short", "iters_to_target", "IPM short-step: Newton steps to 1%"),
        ):
            pts = sorted((r["k"], r[key]) for r in dup if r["arm"] == arm)
            ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("duplication factor k (m·k groups)")
        ax.set_ylabel("iterations")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "iters_vs_k.png", dpi=110)
        plt.close(fig)
