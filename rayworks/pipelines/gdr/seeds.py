"""Seed aggregation of `gdr` runs: mean and 95% Student-t interval per summary key, laid out
as the results tables (tuned arms, duplication sweep, m sweep, Lewis vs Euclidean per
radius, head-to-head counts).

    for s in 0 1 2; do rayworks run gdr --set seed=$s; done
    python -m rayworks.pipelines.gdr.seeds runs/gdr/*/ > results.md

A seed whose arm never reached the target has NaN there: intervals are over the seeds that
reached it, and every cell says how many did (`(n/N)`). Paired differences (Lewis minus
Euclidean at the same sweep point) use only the seeds where both reached the target.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rayworks.platform.stats import mean_ci

ARMS = ("lewis", "euclid", "ipm", "firstorder")
DUP_ARMS = ("lewis", "euclid", "ipm", "ipm_short")
M_ARMS = ("lewis", "euclid", "ipm")


def mean_ci95(values: Sequence[float]) -> tuple[float, float, float, int]:
    """(mean, lo, hi, n) over the finite values (`platform.stats.mean_ci`: Student-t; lo =
    hi = mean for a single value; all NaN when none is finite)."""
    x = [float(v) for v in values if v is not None and math.isfinite(v)]
    return (*mean_ci(x), len(x))


def fmt_ci(values: Sequence[float], digits: str = ".3g") -> str:
    """`mean [lo, hi] (n/N)`, or `never (0/N)`."""
    mean, lo, hi, n = mean_ci95(values)
    if n == 0:
        return f"never (0/{len(values)})"
    return f"{mean:{digits}} [{lo:{digits}}, {hi:{digits}}] ({n}/{len(values)})"


def _col(summaries: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(s.get(key, math.nan)) for s in summaries]


def _cell(summaries: Sequence[dict[str, Any]], key: str, digits: str = ".3g") -> str:
    """`fmt_ci` of one summary key over the seeds; '-' where no seed logged the key."""
    if not any(key in s for s in summaries):
        return "-"
    return fmt_ci(_col(summaries, key), digits)


def _paired(summaries: Sequence[dict[str, Any]], a: str, b: str) -> list[float]:
    return [x - y for x, y in zip(_col(summaries, a), _col(summaries, b), strict=True)]


def _points(summaries: Sequence[dict[str, Any]], pattern: str) -> list[str]:
    found = {m.group(1) for s in summaries for k in s if (m := re.match(pattern, k))}
    return sorted(found, key=float)


def _prefix(arm: str) -> str:
    return "" if arm == "lewis" else f"{arm}_"


def tables(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines of every results table for `summaries` (one per seed)."""
    s = summaries
    lines = [
        "Tuned arms on the base instance (k = 1):",
        "",
        "| arm | iters to 1% | linear solves to 1% | seconds to 1% | final gap |",
        "|---|---|---|---|---|",
    ]
    for arm in ARMS:
        p = _prefix(arm)
        if not any(f"{p}final_gap" in x for x in s):
            continue
        lines.append(
            f"| {arm} | {_cell(s, f'{p}iters_to_1pct')} "
            f"| {_cell(s, f'{p}solves_to_1pct')} "
            f"| {_cell(s, f'{p}seconds_to_1pct')} "
            f"| {_cell(s, f'{p}final_gap', '.2e')} |"
        )
    for title, pattern, arms, tag in (
        (
            "Duplication sweep (every group k times; k = 1 tuned settings):",
            r"^dup_k(\d+)_",
            DUP_ARMS,
            "dup_k{}",
        ),
        ("m sweep (k = 1 tuned settings; OPT recomputed per m):", r"^m(\d+)_", M_ARMS, "m{}"),
    ):
        points = _points(s, pattern)
        if not points:
            continue
        lines += [
            "",
            title,
            "",
            "| point | arm | iters to 1% | linear solves to 1% | seconds to 1% "
            "| iters to 1%, retuned here | solves to 1%, retuned here |",
            "|---|---|---|---|---|---|---|",
        ]
        for pt in points:
            t = tag.format(pt)
            for arm in arms:
                if not any(f"{t}_{arm}_total_iters" in x for x in s):
                    continue
                lines.append(
                    f"| {t} | {arm} | {_cell(s, f'{t}_{arm}_iters_to_1pct')} "
                    f"| {_cell(s, f'{t}_{arm}_solves_to_1pct')} "
                    f"| {_cell(s, f'{t}_{arm}_seconds_to_1pct')} "
                    f"| {_cell(s, f'{t}_{arm}_retuned_iters_to_1pct')} "
                    f"| {_cell(s, f'{t}_{arm}_retuned_solves_to_1pct')} |"
                )
    lines += ["", *radius_table(s), "", *head_to_head_table(s)]
    return lines


def radius_table(s: Sequence[dict[str, Any]]) -> list[str]:
    """Lewis vs Euclidean per sweep point and radius (each arm at its own tuned ε)."""
    lines = [
        "Lewis vs Euclidean per sweep point and radius r/f(x₀) (each at its k = 1 tuned ε); "
        "Δ = Lewis - Euclidean, paired by seed (seeds where both reached 1%):",
        "",
        "| point | r | Lewis iters | Euclid iters | Δ iters | Lewis solves | Euclid solves "
        "| Δ solves |",
        "|---|---:|---|---|---|---|---|---|",
    ]
    tags = [f"dup_k{k}" for k in _points(s, r"^dup_k(\d+)_")]
    tags += [f"m{m}" for m in _points(s, r"^m(\d+)_")]
    for t in tags:
        for r in _points(s, rf"^{t}_lewis_r([0-9.e+-]+)_iters_to_1pct$"):
            lw, eu = f"{t}_lewis_r{r}", f"{t}_euclid_r{r}"
            lines.append(
                f"| {t} | {r} | {_cell(s, f'{lw}_iters_to_1pct')} "
                f"| {_cell(s, f'{eu}_iters_to_1pct')} "
                f"| {fmt_ci(_paired(s, f'{lw}_iters_to_1pct', f'{eu}_iters_to_1pct'))} "
                f"| {_cell(s, f'{lw}_solves_to_1pct')} "
                f"| {_cell(s, f'{eu}_solves_to_1pct')} "
                f"| {fmt_ci(_paired(s, f'{lw}_solves_to_1pct', f'{eu}_solves_to_1pct'))} |"
            )
    return lines


def head_to_head_table(s: Sequence[dict[str, Any]]) -> list[str]:
    """Cells (sweep point x grid setting) where each geometry needs fewer iterations /
    solves to 1%, and the pass rule for both geometries, as means over seeds."""
    lines = [
        "Head to head over every (sweep point, ε, r) cell, per seed:",
        "",
        "| count | Lewis fewer | Euclid fewer | tie |",
        "|---|---|---|---|",
    ]
    for name in ("iters", "solves"):
        keys = [f"h2h_{name}_{w}" for w in ("lewis_wins", "euclid_wins", "ties")]
        lines.append(f"| {name} to 1% | " + " | ".join(_cell(s, k) for k in keys) + " |")
    lines += [
        "",
        "Pass rule (iterations to 1% at the k = 1 tuned setting within ±2 of k = 1 "
        f"across k), seeds passing: Lewis {_passes(s, 'pass_rule')}, "
        f"Euclidean {_passes(s, 'pass_rule_euclid')}.",
    ]
    return lines


def _passes(s: Sequence[dict[str, Any]], key: str) -> str:
    flags = [x[key] for x in s if key in x]
    return f"{sum(f == 1.0 for f in flags)}/{len(flags)}" if flags else "-"


def load(run_dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """summary.json of each completed run directory (its `seed` from config.yaml), in seed
    order."""
    out = []
    for d in map(Path, run_dirs):
        summary = json.loads((d / "summary.json").read_text())
        if summary.get("status", "completed") == "completed":
            summary["seed"] = yaml.safe_load((d / "config.yaml").read_text()).get("seed")
            out.append(summary)
    return sorted(out, key=lambda x: x["seed"])


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    summaries = load(args.run_dirs)
    seeds = [x.get("seed") for x in summaries]
    print(f"{len(summaries)} seeds {seeds}; cells: mean [95% t-interval] (seeds reaching it/N)\n")
    print("\n".join(tables(summaries)))


if __name__ == "__main__":
    main()
