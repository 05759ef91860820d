"""Tables (jsonl + markdown), plots, log-log slope fits and the pass rule of docs/attnrow.md."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column, Table

Row = dict[str, Any]


def loglog_slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y against log x (NaN with fewer than 2 usable points)."""
    pts = [(a, b) for a, b in zip(x, y, strict=True) if a > 0 and b > 0]
    if len(pts) < 2:
        return math.nan
    lx, ly = np.log(np.array(pts)).T
    return float(np.polyfit(lx, ly, 1)[0])


def pass_rule(table: list[Row], s_lambda: float, cfg: Any) -> dict[str, float]:
    """Our reconstructed pass rule (docs/attnrow.md) on input (b), only in runs of
    `analogue` that compare `rls_nystrom` and `uniform_nystrom`:
    (1) analogue median row error <= target_eps at every s >= c·s_λ·ln s_λ of the sweep;
    (2) there, RLS-Nyström error <= uniform-Nyström error (both with exact D, Z);
    errors are the means over the landmark draws of each s;
    (3) sampling-error slope vs m within -0.5 ± 0.1; (4) per-query time slope vs n < 0.1.
    Returns each part and `pass_rule` (1/0); {} when not applicable."""
    if cfg.method != "analogue" or not {"rls_nystrom", "uniform_nystrom"} <= set(cfg.compare):
        return {}
    need = cfg.landmark_constant * s_lambda * math.log(max(s_lambda, math.e))
    err = {
        (r["method"], r["s"]): r["row_err"]
        for r in table
        if r["table"] == "error" and r["input"] == "synthetic"
    }
    big = sorted({s for (_, s) in err if s >= need})
    samp = [r for r in table if r["table"] == "sampling"]
    timing = [r for r in table if r["table"] == "timing" and r["method"] == "analogue"]
    parts = {
        "pass_eps": float(bool(big) and all(err[("analogue", s)] <= cfg.target_eps for s in big)),
        "pass_rls_vs_uniform": float(
            bool(big) and all(err[("rls_nystrom", s)] <= err[("uniform_nystrom", s)] for s in big)
        ),
        "pass_sampling_slope": float(
            abs(loglog_slope([r["m"] for r in samp], [r["sampling_err"] for r in samp]) + 0.5)
            <= 0.1
        ),
        "pass_flat_query": float(
            loglog_slope([r["n"] for r in timing], [r["query_us"] for r in timing]) < 0.1
        ),
    }
    return {"pass_s_needed": need, **parts, "pass_rule": float(all(parts.values()))}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.3e}"
    return str(value)


def _column(key: str) -> Column:
    """`key` as `_fmt` writes it; "-" where a row lacks it."""
    return Column(key, render=lambda r: _fmt(r.get(key, "-")))


SECTIONS = {
    "error": (
        "Relative l2 row error vs landmarks (median / p90 over query rows, mean over "
        "`draws` landmark draws with its 95% t-interval [lo, hi]; row_err_minor: median "
        "over rows in the small clusters of input b')",
        [
            "input",
            "method",
            "n",
            "s",
            "s_over_slambda",
            "draws",
            "row_err",
            "row_err_lo",
            "row_err_hi",
            "row_err_p90",
            "row_err_minor",
            "row_err_minor_lo",
            "row_err_minor_hi",
            "build_s",
        ],
    ),
    "sampling": (
        "Sampling error vs m (analogue vs the same landmarks with exact D, Z; row_err: "
        "vs exact attention), for the run's estimator and the other one (`_other`)",
        [
            "n",
            "s",
            "m",
            "estimator",
            "sampling_err",
            "row_err",
            "other",
            "sampling_err_other",
            "row_err_other",
        ],
    ),
    "sublinear": (
        "Analogue row error at m sublinear in n (m ∝ n^exponent; mean over sample "
        "draws, 95% t-interval; landmark_err: same landmarks with exact D, Z)",
        [
            "n",
            "s",
            "exponent",
            "m",
            "m_over_n",
            "row_err",
            "row_err_lo",
            "row_err_hi",
            "landmark_err",
        ],
    ),
    "timing": (
        "Per-query time vs n; oracle calls (classical, counted) beside the MODELLED "
        "quantum calls (not measured)",
        [
            "method",
            "n",
            "s",
            "query_us",
            "query_ops",
            "row_err",
            "calls_preprocess",
            "calls_query",
            "modelled_quantum_preprocess",
            "calls_match",
        ],
    ),
    "spectrum": (
        "λ-statistical dimension vs norm scale (input b, exact)",
        ["scale", "n", "lambda", "s_lambda", "top_eigenvalue"],
    ),
}


def write_table(ctx: RunContext, table: list[Row], header: list[str]) -> Path:
    """table.jsonl (every row) and table.md: `header`, then one section per kind of row."""
    parts = [
        Table(rows, [_column(k) for k in keys], f"### {title}")
        for kind, (title, keys) in SECTIONS.items()
        if (rows := [r for r in table if r["table"] == kind])
    ]
    path = ctx.artifacts_dir / "table.md"
    if not parts:
        ctx.write_jsonl("table.jsonl", table)
        path.write_text("\n".join([*header, ""]))
        return path
    first, *more = parts
    title = "\n".join([*header, "", first.title])
    return tables.write_table(
        ctx.artifacts_dir, first.rows, first.columns, title=title, more=more, jsonl=table
    )


def write_plots(folder: Path, table: list[Row]) -> list[Path]:
    """error_vs_landmarks.png (one panel per input; on input b' also dashed lines for the
    minor-cluster query rows), query_time_vs_n.png,
    s_lambda_vs_scale.png, error_vs_samples.png and error_vs_n_sublinear_m.png (when
    those sweeps ran)."""

    from rayworks.platform.figures import subplots

    def pick(kind: str, **match: Any) -> list[Row]:
        return [r for r in table if r["table"] == kind and all(r[k] == v for k, v in match.items())]

    def save(fig, name: str) -> Path:
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        return folder / name

    paths = []
    inputs = list(dict.fromkeys(r["input"] for r in pick("error")))
    fig, axes = subplots(1, max(1, len(inputs)), figsize=(5.5 * max(1, len(inputs)), 4))
    for ax, data in zip(np.atleast_1d(axes), inputs, strict=False):
        for method in dict.fromkeys(r["method"] for r in pick("error", input=data)):
            rows = pick("error", input=data, method=method)
            line = ax.plot(
                [r["s_over_slambda"] for r in rows],
                [r["row_err"] for r in rows],
                "o-",
                label=method,
            )[0]
            minor = [r for r in rows if r.get("row_err_minor", math.nan) > 0]
            if minor:  # input (b'): rows whose query is in a small cluster
                ax.plot(
                    [r["s_over_slambda"] for r in minor],
                    [r["row_err_minor"] for r in minor],
                    "s--",
                    color=line.get_color(),
                    label=f"{method}, minor-cluster rows",
                )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="s / s_λ",
            ylabel="median relative row error",
            title=f"input: {data}",
        )
        ax.legend(fontsize=8)
    paths.append(save(fig, "error_vs_landmarks.png"))
    fig, ax = subplots(figsize=(5.5, 4))
    for method in dict.fromkeys(r["method"] for r in pick("timing")):
        rows = pick("timing", method=method)
        ax.plot([r["n"] for r in rows], [r["query_us"] for r in rows], "o-", label=method)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="n",
        ylabel="median µs per row query",
        title="per-query time vs n (input b)",
    )
    ax.legend(fontsize=8)
    paths.append(save(fig, "query_time_vs_n.png"))
    rows = pick("spectrum")
    fig, ax = subplots(figsize=(5.5, 4))
    ax.plot([r["scale"] for r in rows], [r["s_lambda"] for r in rows], "o-")
    ax.set(
        yscale="log",
        xlabel="norm scale of Q, K",
        ylabel="s_λ",
        title=f"s_λ vs scale (2n = {2 * rows[0]['n'] if rows else 0})",
    )
    paths.append(save(fig, "s_lambda_vs_scale.png"))
    rows = pick("sampling")
    if rows:
        fig, ax = subplots(figsize=(5.5, 4))
        ms = [r["m"] for r in rows]
        for tag, name in (("", rows[0]["estimator"]), ("_other", rows[0]["other"])):
            line = ax.plot(
                ms, [r[f"sampling_err{tag}"] for r in rows], "o-", label=f"{name}: sampling error"
            )[0]
            ax.plot(
                ms,
                [r[f"row_err{tag}"] for r in rows],
                "s--",
                color=line.get_color(),
                label=f"{name}: error vs exact",
            )
        ref = rows[0]["sampling_err"] * np.sqrt(ms[0] / np.array(ms))
        ax.plot(ms, ref, ":", color="gray", label="m^-1/2")
        ax.set(xscale="log", yscale="log", xlabel="samples m", ylabel="median relative error")
        ax.legend(fontsize=8)
        paths.append(save(fig, "error_vs_samples.png"))
    rows = pick("sublinear")
    if rows:
        fig, ax = subplots(figsize=(5.5, 4))
        for beta in dict.fromkeys(r["exponent"] for r in rows):
            sub = pick("sublinear", exponent=beta)
            ax.errorbar(
                [r["n"] for r in sub],
                [r["row_err"] for r in sub],
                yerr=[
                    [r["row_err"] - r["row_err_lo"] for r in sub],
                    [r["row_err_hi"] - r["row_err"] for r in sub],
                ],
                fmt="o-",
                capsize=3,
                label=f"m ∝ n^{beta:g}",
            )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="n",
            ylabel="median relative row error",
            title="analogue error at m sublinear in n (input b)",
        )
        ax.legend(fontsize=8)
        paths.append(save(fig, "error_vs_n_sublinear_m.png"))
    return paths
