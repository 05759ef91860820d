"""The run's aggregates (mean and 95% t-interval over target subjects x seeds), table
(jsonl + markdown), the per-subject plot and the pass rule."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.platform.context import RunContext
from rayworks.platform.stats import mean_ci

Row = dict[str, Any]
METRICS = (
    "accuracy",
    "macro_f1",
    "expressive_recall",
    "neutral_recall",
    "predicted_neutral",
    "adapt_predicted_neutral",
    "adapt_seconds",
    "adapted_params",
)
SHOWN = ("accuracy", "macro_f1", "expressive_recall", "neutral_recall", "adapt_predicted_neutral")


def aggregate(rows: list[Row], arms: list[str]) -> dict[str, dict[str, tuple[float, ...]]]:
    """arm -> metric -> (mean, lo, hi) over every (subject, replicate) row of that arm."""
    return {a: {m: mean_ci([r[m] for r in rows if r["arm"] == a]) for m in METRICS} for a in arms}


def pass_rule(agg: dict[str, Any], arm: str, gain: float, drop: float) -> dict[str, float]:
    """Pass rule (reconstructed): PFT accuracy ≥ source-only + gain and PFT expressive
    recall ≥ source-only recall - drop (means over subjects x seeds). Only in `pft` runs
    that compare `source`."""
    if arm != "pft" or "source" not in agg:
        return {}
    acc_gain = agg["pft"]["accuracy"][0] - agg["source"]["accuracy"][0]
    recall_change = agg["pft"]["expressive_recall"][0] - agg["source"]["expressive_recall"][0]
    ok = acc_gain >= gain - 1e-12 and recall_change >= -drop - 1e-12
    return {
        "pass_accuracy_gain": acc_gain,
        "pass_recall_change": recall_change,
        "pass_rule": float(ok),
    }


def summary_of(agg: dict[str, Any], arm: str) -> dict[str, float]:
    """Run arm's numbers unprefixed (headline `target_accuracy`), others as `{arm}_...`;
    intervals as `_lo` / `_hi`."""
    out: dict[str, float] = {}
    for a, metrics in agg.items():
        prefix = "" if a == arm else f"{a}_"
        for m, (mean, lo, hi) in metrics.items():
            name = prefix + ("target_accuracy" if m == "accuracy" else m)
            out[name] = mean
            if m in SHOWN:
                out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
    return out


def _ci(stat: tuple[float, ...]) -> str:
    mean, lo, hi = stat
    return "-" if math.isnan(mean) else f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def write_table(ctx: RunContext, rows: list[Row], agg: dict[str, Any], n: int) -> Path:
    """table.jsonl: one row per (arm, subject, seed) plus one `arm_mean` row per arm;
    table.md: the arm table (mean [95% CI]) and the per-subject accuracy table."""
    means = [
        {
            "table": "arm_mean",
            "arm": a,
            **{m: v[0] for m, v in s.items()},
            **{f"{m}_ci95": [v[1], v[2]] for m, v in s.items()},
        }
        for a, s in agg.items()
    ]
    ctx.write_jsonl("table.jsonl", [{"table": "subject", **r} for r in rows] + means)
    lines = [
        f"Target subjects x seeds: n = {n} per arm; mean [95% t-interval].",
        "",
        "| arm | accuracy | macro-F1 | expressive recall | neutral recall "
        "| adapt frames → neutral | adapted params | adapt s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a, s in agg.items():
        lines.append(
            f"| {a} | "
            + " | ".join(_ci(s[m]) for m in SHOWN)
            + f" | {s['adapted_params'][0]:.0f} | {s['adapt_seconds'][0]:.2f} |"
        )
    subjects = sorted({r["subject"] for r in rows})
    lines += [
        "",
        "Per-subject accuracy (mean over seeds):",
        "",
        "| arm | " + " | ".join(f"s{t}" for t in subjects) + " |",
        "|---|" + "---:|" * len(subjects),
    ]
    for a in agg:
        per = [
            np.mean([r["accuracy"] for r in rows if r["arm"] == a and r["subject"] == t])
            for t in subjects
        ]
        lines.append(f"| {a} | " + " | ".join(f"{v:.3f}" for v in per) + " |")
    path = ctx.artifacts_dir / "table.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_plot(folder: Path, rows: list[Row], arms: list[str]) -> Path:
    """per_subject.png: accuracy and expressive recall per target subject (mean over seeds,
    min-max over seeds as error bars), one marker series per arm."""

    from rayworks.platform.figures import subplots

    subjects = sorted({r["subject"] for r in rows})
    fig, axes = subplots(1, 2, figsize=(12, 4), sharex=True)
    width = 0.8 / max(len(arms), 1)
    for ax, metric in zip(axes, ("accuracy", "expressive_recall"), strict=True):
        for i, a in enumerate(arms):
            vals = [
                [r[metric] for r in rows if r["arm"] == a and r["subject"] == t] for t in subjects
            ]
            mid = np.array([np.mean(v) for v in vals])
            spread = [[m - min(v), max(v) - m] for m, v in zip(mid, vals, strict=True)]
            err = np.clip(np.array(spread).T, 0, None)  # equal seeds: rounding below zero
            xs = np.array(subjects) + (i - (len(arms) - 1) / 2) * width
            ax.errorbar(xs, mid, yerr=err, fmt="o", ms=4, capsize=2, label=a)
        ax.set_xlabel("target subject")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(subjects)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    path = folder / "per_subject.png"
    fig.savefig(path, dpi=110)
    return path
