"""The run's table (jsonl + markdown), its plots (scaling, loss curves) and the pass
rule (`docs/mvc.md`)."""

from __future__ import annotations

from typing import Any

from rayworks.pipelines.mvc.metrics import loglog_slope
from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.stats import mean_ci, paired_ci
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


def floor_metrics(mcd: float, floor: float, meanprosody_mcd: float | None) -> dict[str, float]:
    """Where an arm's teacher-forced MCD sits between the decoder floor (the frozen decoder
    on ground-truth features: the best any stack can do) and the mean-prosody arm (flat
    per-utterance prosody: what a stack gets without reading the phonemes).

    `mcd_above_floor` = MCD - floor, the part of the MCD the stack controls;
    `gain_vs_meanprosody` = (MCD_meanprosody - MCD) / (MCD_meanprosody - floor), the share
    of the mean-prosody arm's excess the stack removes (0 = no better than flat prosody,
    1 = as good as ground-truth features; only with a mean-prosody arm of the same seed)."""
    out = {"mcd_above_floor": mcd - floor}
    if meanprosody_mcd is not None:
        out["gain_vs_meanprosody"] = (meanprosody_mcd - mcd) / (meanprosody_mcd - floor)
    return out


def pass_rule(
    method: dict[str, Any],
    base: dict[str, Any] | None,
    floor_arm: dict[str, Any] | None,
    floor: float,
    slope: dict[str, float],
    tolerance: float,
    band: tuple[float, float],
) -> dict[str, float]:
    """Pass rule (reconstructed; `docs/mvc.md`): (b) within ±tolerance of (a) on MCD
    *above the decoder floor* (MCD - `floor`: the part the stack controls; the frozen
    decoder alone accounts for the rest, the same for every arm) and on log-F0 RMSE (whose
    floor is 0); (b) below the mean-prosody arm on MCD (it reads the phonemes to some use);
    (b)'s encoder time and peak memory grow linearly (log-log slope in `band`) while (a)'s
    memory grows faster (slope above the band). Only in runs that trained (a) and the
    mean-prosody arm and ran the scaling benchmark."""
    if base is None or floor_arm is None:
        return {}
    if "mvc_mem_slope" not in slope or "attn_mem_slope" not in slope:
        return {}
    above = (method["mcd"] - floor) / (base["mcd"] - floor)
    checks = {
        "pass_parity_mcd": abs(above - 1) <= tolerance,
        "pass_parity_f0": abs(method["log_f0_rmse"] / base["log_f0_rmse"] - 1) <= tolerance,
        "pass_beats_meanprosody": method["mcd"] < floor_arm["mcd"],
        "pass_linear": all(band[0] <= slope[f"mvc_{k}_slope"] <= band[1] for k in ("time", "mem")),
        "pass_attn_faster": slope["attn_mem_slope"] > band[1],
    }
    out = {k: float(v) for k, v in checks.items()}
    out["above_floor_ratio"] = above
    out["pass_rule"] = float(all(checks.values()))
    return out


SEED_METRICS = ("mcd", "mcd_above_floor", "gain_vs_meanprosody", "log_f0_rmse")


def seed_rows(
    runs: dict[str, dict[int, dict[str, Any]]], floor_arm: str = "mvc_meanprosody"
) -> list[dict[str, Any]]:
    """Rows over seeds (`benchmarks/mvc_seeds.py`): `runs` maps arm -> seed -> summary (each
    with `mcd`, `mcd_decoder_floor`, `log_f0_rmse`). Per arm: mean and 95% Student-t
    interval of MCD, MCD above the floor, the gain over `floor_arm` of the same seed and
    log-F0 RMSE. Then paired-over-seeds differences on the seeds both arms have: mvc -
    mvc_attn (with the per-seed above-floor ratio mvc / mvc_attn, the pass rule's
    quantity), mvc - `floor_arm`, and every other arm (the ablations) - mvc."""
    per: dict[str, dict[int, dict[str, float]]] = {}
    for arm, by_seed in runs.items():
        per[arm] = {}
        for seed, s in by_seed.items():
            flat = runs.get(floor_arm, {}).get(seed)
            m = {"mcd": s["mcd"], "log_f0_rmse": s["log_f0_rmse"]}
            m |= floor_metrics(s["mcd"], s["mcd_decoder_floor"], flat and flat["mcd"])
            per[arm][seed] = m
    rows: list[dict[str, Any]] = []
    for arm, by_seed in per.items():
        row: dict[str, Any] = {"row": arm, "n": len(by_seed)}
        for key in SEED_METRICS:
            values = [m[key] for m in by_seed.values() if key in m]
            row[key], row[f"{key}_lo"], row[f"{key}_hi"] = mean_ci(values)
        rows.append(row)
    pairs = [("mvc", "mvc_attn"), ("mvc", floor_arm)]
    pairs += [(a, "mvc") for a in per if a not in ("mvc", "mvc_attn", floor_arm)]
    for a, b in pairs:
        if a not in per or b not in per:
            continue
        seeds = sorted(set(per[a]) & set(per[b]))
        if not seeds:
            continue
        row = {"row": f"{a} - {b}", "n": len(seeds)}
        for key in SEED_METRICS:
            if all(key in per[x][s] for x in (a, b) for s in seeds):
                row[key], row[f"{key}_lo"], row[f"{key}_hi"] = paired_ci(
                    [per[a][s][key] for s in seeds], [per[b][s][key] for s in seeds]
                )
        if (a, b) == ("mvc", "mvc_attn"):
            ratios = [per[a][s]["mcd_above_floor"] / per[b][s]["mcd_above_floor"] for s in seeds]
            row["ratio"], row["ratio_lo"], row["ratio_hi"] = mean_ci(ratios)
        rows.append(row)
    return rows


def _interval(key: str):
    def render(row: dict[str, Any]) -> str:
        if key not in row:
            return "-"
        return f"{cell(row[key])} [{cell(row[key + '_lo'])}, {cell(row[key + '_hi'])}]"

    return render


SEED_COLUMNS = (
    Column("row", "arm / paired difference"),
    Column("n", "seeds", spec="", right=True),
    *(Column(k, k, render=_interval(k), right=True) for k in SEED_METRICS),
    Column("ratio", "above-floor ratio mvc / attn", render=_interval("ratio"), right=True),
)


ARM_COLUMNS = (
    Column("label", "arm"),
    Column("params", spec="", right=True),
    Column("mcd", "MCD", right=True),
    Column("mcd_above_floor", "MCD above floor", right=True),
    Column("gain_vs_meanprosody", "gain vs mean-prosody", ".3f", right=True),
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
