"""`rayworks bench` outputs: bench.md (the table, failures, curve tables), bench.json and
the bar and curve figures, all from the summary `bench_stats.summarize` builds."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rayworks.platform.bench_stats import Stat


def fmt(x: float) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.4g}"


def _ci(s: Stat) -> str:
    lo, hi = s["ci95"]
    return f"{fmt(s['mean'])} [{fmt(lo)}, {fmt(hi)}]"


def _ratios(row: dict[str, Any], base_means: dict[str, float]) -> str:
    """The ratio cell: '-' for a baseline, else this row's mean over each baseline's."""
    if row["role"] == "baseline":
        return "-"
    return ", ".join(
        f"{fmt(row['mean'] / m) if m else 'nan'} vs {b}" for b, m in base_means.items()
    )


def to_markdown(data: dict[str, Any]) -> str:
    """The command line, the arms table, failed runs, then the curve table (if any)."""
    key, mode = data["headline"]
    report = data.get("report", [])
    head = ["arm", "role", f"{key} ({mode}) mean", "95% CI", "seeds", "ratio to baseline"]
    paired = any("paired" in r for r in data["arms"])
    head += [f"{key} - {data['arms'][0]['name']}, paired [95% CI]"] if paired else []
    head += [f"{k} mean [95% CI]" for k in report]
    lines = [f"`{data['command']}`", "", _md_row(head), _md_row(["---"] * len(head))]
    base_means = {r["name"]: r["mean"] for r in data["arms"] if r["role"] == "baseline"}
    for row in data["arms"]:
        lo, hi = row["ci95"]
        cells = [
            row["name"],
            row["role"],
            fmt(row["mean"]),
            f"[{fmt(lo)}, {fmt(hi)}]",
            str(len(row["values"])),
            _ratios(row, base_means),
        ]
        cells += [_ci(row["paired"]) if "paired" in row else "-"] if paired else []
        cells += [_ci(row["secondary"][k]) for k in report]
        lines.append(_md_row(cells))
    lines += [f"\nfailed runs: {f}" for f in data["failures"]]
    in_run = data.get("in_run", {})
    lines += [
        f"\n{arm}: read from the runs of {data['pipeline']} ({why})" for arm, why in in_run.items()
    ]
    if data.get("curves"):
        lines += ["", curve_markdown(key, data["curves"])]
    plotted = [k for k, c in data.get("extra_curves", {}).items() if c]
    if plotted:
        files = ", ".join(f"`{curve_file(k)}`" for k in plotted)
        lines += ["", f"Also plotted against the step (mean and 95% CI over seeds): {files}."]
    return "\n".join(lines) + "\n"


def curve_file(key: str) -> str:
    """The figure of metric `key` against the step: curve_<key with / as _>.png."""
    return "curve_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in key) + ".png"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def curve_markdown(key: str, curves: Mapping[str, Mapping[str, Stat]]) -> str:
    """Table "KEY vs step": one row per step of any arm, `mean [lo, hi] (n)` per arm.

    n counts the seeds with a finite value at that step; '-' marks an arm without one.
    """
    arms = list(curves)
    steps = sorted({int(s) for c in curves.values() for s in c})
    lines = [
        f"**{key} vs step** (mean [95% CI] (n seeds))",
        "",
        _md_row(["step", *arms]),
        _md_row(["---"] * (len(arms) + 1)),
    ]
    for step in steps:
        cells = [str(step)]
        for arm in arms:
            s = curves[arm].get(str(step))
            n = sum(math.isfinite(v) for v in s["values"]) if s else 0
            cells.append(f"{_ci(s)} ({n})" if s else "-")
        lines.append(_md_row(cells))
    return "\n".join(lines)


def write_outputs(out_dir: Path, data: dict[str, Any]) -> str:
    """Write bench.md, bench.json, bench.png and (with curves) curve.png; return the markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(data)
    (out_dir / "bench.md").write_text(markdown)
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2))
    plot(out_dir / "bench.png", data)
    if data.get("curves"):
        plot_curves(out_dir / "curve.png", data)
    for key, extra in data.get("extra_curves", {}).items():
        if extra:
            plot_curves(out_dir / curve_file(key), data, key, extra)
    return markdown


ROLE_COLORS = {"method": "tab:blue", "baseline": "tab:gray", "ablation": "tab:orange"}


def _finite(value: Any, default: float | None = None) -> float | None:
    """`value` as a float when it is a finite number, else `default` (NaN, None, "nan")."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _ci_span(mean: float | None, ci: Sequence[Any]) -> tuple[float, float]:
    """Error-bar lengths below and above `mean` (none for an undefined mean or CI end)."""
    if mean is None:
        return 0.0, 0.0
    return mean - _finite(ci[0], mean), _finite(ci[1], mean) - mean


def plot(path: Path, data: dict[str, Any]) -> None:
    """Bar per arm: mean with its 95% CI, each seed's value as a dot."""
    from matplotlib.figure import Figure

    names = [r["name"] for r in data["arms"]]
    tilted = len(names) > 4 or max(map(len, names)) > 16  # long arm names would overlap
    fig = Figure(figsize=(1.6 + 1.4 * len(names), 4.6 if tilted else 3.2))
    ax = fig.add_subplot()
    # an arm whose headline is undefined (e.g. "iterations to 1%" never reached) gets no
    # bar and an "n/a" mark instead of breaking the chart
    means = [_finite(r["mean"]) for r in data["arms"]]
    spans = [_ci_span(m, r["ci95"]) for m, r in zip(means, data["arms"], strict=True)]
    errs = [list(side) for side in zip(*spans, strict=True)]
    colors = [ROLE_COLORS[r["role"]] for r in data["arms"]]
    ax.bar(names, [0.0 if m is None else m for m in means], yerr=errs, capsize=6, color=colors)
    for i, row in enumerate(data["arms"]):
        values = [v for v in map(_finite, row["values"]) if v is not None]
        ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
        if means[i] is None:
            ax.annotate("n/a", (i, 0), ha="center", va="bottom", color="dimgray")
    if tilted:
        ax.tick_params(axis="x", labelrotation=25)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    key, mode = data["headline"]
    ax.set_ylabel(f"{key} ({'higher' if mode == 'max' else 'lower'} is better)")
    ax.set_title(f"{data['pipeline']}: mean and 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_curves(
    path: Path,
    data: dict[str, Any],
    key: str | None = None,
    arm_curves: Mapping[str, Mapping[str, Stat]] | None = None,
) -> None:
    """A metric vs step (default: the headline): a line per arm (mean over seeds) in a
    shaded 95% CI band."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    roles = {r["name"]: r["role"] for r in data["arms"]}
    headline, mode = data["headline"]
    for arm, curve in (data["curves"] if arm_curves is None else arm_curves).items():
        if not curve:
            continue
        steps = sorted(curve, key=int)
        x = [int(s) for s in steps]
        mean = [curve[s]["mean"] for s in steps]
        lo, hi = ([curve[s]["ci95"][i] for s in steps] for i in (0, 1))
        style = "--" if roles.get(arm) == "ablation" else "-"
        (line,) = ax.plot(x, mean, style, marker="o", markersize=3, label=arm)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    key = key or headline
    better = f" ({'higher' if mode == 'max' else 'lower'} is better)" if key == headline else ""
    ax.set_xlabel("step")
    ax.set_ylabel(f"{key}{better}")
    ax.set_title(f"{data['pipeline']}: {key} vs step, mean and 95% CI over seeds")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
