"""The run's table (jsonl + markdown), its plots (scaling, loss curves) and the pass
rule (`docs/mvc.md`)."""

from __future__ import annotations

from typing import Any

from rayworks.pipelines.mvc.metrics import loglog_slope
from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column, Table, cell

QUALITY = ("mcd", "mcd_dtw", "log_f0_rmse", "log_dur_mae", "per")


def slopes(scaling: list[dict[str, Any]], fit_from: int) -> dict[str, float]:
    """Log-log slopes of time and peak memory in T per encoder (points with T ≥ fit_from)."""
    out: dict[str, float] = {}
    for piece in scaling:
        rows = [r for r in piece["rows"] if r["T"] >= fit_from]
        ts = [r["T"] for r in rows]
        out[f"{piece['encoder']}_time_slope"] = loglog_slope(ts, [r["seconds"] for r in rows])
        out[f"{piece['encoder']}_mem_slope"] = loglog_slope(ts, [r["peak_mb"] for r in rows])
    return out


def pass_rule(
    method: dict[str, Any],
    base: dict[str, Any] | None,
    slope: dict[str, float],
    tolerance: float,
    band: tuple[float, float],
) -> dict[str, float]:
    """Pass rule (reconstructed): (b) within ±tolerance of (a) on MCD and log-F0 RMSE; (b)'s
    encoder time and peak memory grow linearly (log-log slope in `band`) while (a)'s memory
    grows faster (slope above the band). Only in runs that trained (a) and ran the scaling
    benchmark."""
    if base is None or "mvc_mem_slope" not in slope or "attn_mem_slope" not in slope:
        return {}
    checks = {
        "pass_parity_mcd": abs(method["mcd"] / base["mcd"] - 1) <= tolerance,
        "pass_parity_f0": abs(method["log_f0_rmse"] / base["log_f0_rmse"] - 1) <= tolerance,
        "pass_linear": all(band[0] <= slope[f"mvc_{k}_slope"] <= band[1] for k in ("time", "mem")),
        "pass_attn_faster": slope["attn_mem_slope"] > band[1],
    }
    out = {k: float(v) for k, v in checks.items()}
    out["pass_rule"] = float(all(checks.values()))
    return out


ARM_COLUMNS = (
    Column("label", "arm"),
    Column("params", spec="", right=True),
    Column("mcd", "MCD", right=True),
    Column("mcd_dtw", "MCD-DTW", right=True),
    Column("log_f0_rmse", "log-F0 RMSE", right=True),
    Column("log_dur_mae", "log-dur MAE", right=True),
    Column("per", "PER", right=True),
    Column("train_seconds", "train s", ".0f", right=True),
)
SCALING_COLUMNS = (
    Column("encoder"),
    Column("T", spec="", right=True),
    Column("seconds", right=True),
    Column("frames_per_s", "frames/s", ".0f", right=True),
    Column("peak_mb", "peak MB", right=True),
)


def write_table(
    ctx: RunContext,
    arms: list[dict[str, Any]],
    floors: dict[str, float],
    scaling: list[dict[str, Any]],
    slope: dict[str, float],
    extra: dict[str, float],
) -> None:
    """table.jsonl: one row per arm and per scaling point; table.md: the same, readable."""
    rows = [{k: v for k, v in a.items() if k != "curve"} for a in arms]
    points = [r for piece in scaling for r in piece["rows"]]
    floor_line = (
        f"Floors: decoder on ground-truth features MCD {cell(floors['mcd_decoder_floor'])}; "
        f"recognizer PER on ground-truth mels {cell(floors['per_ground_truth'])}."
    )
    notes = [] if points else [floor_line]
    more = []
    if points:
        title = f"{floor_line}\n\nEncoder scaling (1 layer, batch 1, no_grad):"
        more.append(Table(points, SCALING_COLUMNS, title))
        notes.append("Log-log slopes: " + ", ".join(f"{k} {v:.2f}" for k, v in slope.items()))
    if extra:
        notes.append(", ".join(f"{k} = {cell(v)}" for k, v in extra.items()))
    tables.write_table(
        ctx.artifacts_dir,
        arms,
        ARM_COLUMNS,
        title="Test split, fixed decoder. MCD = teacher-forced durations (dB, 13 cepstra); "
        "MCD-DTW, duration error and PER use the stack's own durations.",
        more=more,
        jsonl=rows + points + [{"kind": "floors", **floors, **extra}],
        footer="\n\n".join(notes),
    )


def write_plots(ctx: RunContext, arms: list[dict[str, Any]], scaling: list[dict[str, Any]]) -> None:
    """loss_curves.png (every arm) and, with a scaling benchmark, scaling.png (log-log)."""

    from rayworks.platform.figures import subplots

    fig, ax = subplots(figsize=(6, 4))
    for a in arms:
        steps, _, mel = zip(*a["curve"], strict=True) if a["curve"] else ((), (), ())
        ax.plot(steps, mel, label=a["label"])
    ax.set(xlabel="step", ylabel="mel L1 through the fixed decoder", title="training")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.artifacts_dir / "loss_curves.png", dpi=100)
    if not scaling:
        return
    fig, axes = subplots(1, 2, figsize=(10, 4))
    for piece in scaling:
        ts = [r["T"] for r in piece["rows"]]
        axes[0].loglog(ts, [r["seconds"] for r in piece["rows"]], "o-", label=piece["encoder"])
        axes[1].loglog(ts, [r["peak_mb"] for r in piece["rows"]], "o-", label=piece["encoder"])
    axes[0].set(xlabel="sequence length T", ylabel="seconds per forward", title="time")
    axes[1].set(xlabel="sequence length T", ylabel="peak activation MB", title="memory")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.artifacts_dir / "scaling.png", dpi=100)
