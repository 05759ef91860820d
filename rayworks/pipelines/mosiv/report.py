"""Per-arm aggregation, the pass rule, the results table (jsonl + md), the bar plot
and the fitted-vs-true rollout GIF (matplotlib's PillowWriter)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column, Table

GEOMETRY = (
    "future_cd",
    "observed_cd",
    "future_emd",
    "observed_emd",
    "future_iou",
    "observed_iou",
    "future_obs_cd",
)
PARAMS = ("log_E_err", "nu_err", "yield_err", "theta_err", "mu_err", "v0_err", "family_ok")


def _nanmean(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def aggregate(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Means over scenes (geometry) and over scenes x objects (parameters); the elastic
    objects' log E error separately (the pass rule reads it)."""
    out = {key: _nanmean([r[key] for r in rows]) for key in GEOMETRY}
    for key in PARAMS:
        out[key] = _nanmean([r[f"obj{k}_{key}"] for r in rows for k in range(2)])
    out["log_E_err_elastic"] = _nanmean(
        [
            r[f"obj{k}_log_E_err"]
            for r in rows
            for k in range(2)
            if r["true_families"][k] == "elastic"
        ]
    )
    out["seconds"] = float(np.sum([r["seconds"] for r in rows]))
    return out


def pass_rule(
    per_arm: dict[str, dict[str, float]], ratio: float, log_E_tol: float
) -> dict[str, float]:
    """Pass rule (reconstructed): CD_fut(a) ≤ ratio·CD_fut(e) and ≤ ratio·CD_fut(f),
    CD_fut(a) ≤ CD_fut(b) (means over the scenes), and |log E - log E*| < tol on elastic
    objects under (a). Only in runs holding all four arms."""
    need = ("objectwise", "scenewise", "prototype", "prototype_oracle")
    if not all(a in per_arm for a in need):
        return {}
    a = per_arm["objectwise"]
    parts = {
        "pass_vs_prototype": a["future_cd"] <= ratio * per_arm["prototype"]["future_cd"],
        "pass_vs_oracle": a["future_cd"] <= ratio * per_arm["prototype_oracle"]["future_cd"],
        "pass_vs_scenewise": a["future_cd"] <= per_arm["scenewise"]["future_cd"],
        "pass_log_E": not a["log_E_err_elastic"] >= log_E_tol,
    }
    out = {k: float(v) for k, v in parts.items()}
    out["pass_rule"] = float(all(parts.values()))
    return out


COLUMNS = (
    *GEOMETRY,
    "log_E_err",
    "log_E_err_elastic",
    "nu_err",
    "yield_err",
    "theta_err",
    "mu_err",
    "family_ok",
    "seconds",
)


def write_table(
    ctx: RunContext, rows: list[dict[str, Any]], per_arm: dict[str, dict[str, float]]
) -> Path:
    """table.jsonl: one row per (arm, scene) without curves/rollouts; table.md: per-arm
    means, then future CD per scene."""
    slim = [
        {k: v for k, v in r.items() if k not in ("curve", "rollout", "truth", "obj")} for r in rows
    ]
    means = [{**m, "arm": a} for a, m in per_arm.items()]
    scenes = sorted({(r["scene_index"], r["scene"]) for r in rows})
    per_scene = [
        {"arm": arm, **{f"s{r['scene_index']}": r["future_cd"] for r in rows if r["arm"] == arm}}
        for arm in per_arm
    ]
    return tables.write_table(
        ctx.artifacts_dir,
        means,
        ["arm", *(Column(c, right=True) for c in COLUMNS)],
        title="CD/EMD in domain units (1 = box side), means over scenes; errors over objects.",
        more=[
            Table(
                per_scene,
                ["arm", *(Column(f"s{i}", s, right=True) for i, s in scenes)],
                "Future CD per scene:",
            )
        ],
        jsonl=slim,
    )


def write_plot(folder: Path, per_arm: dict[str, dict[str, float]]) -> None:
    """cd_by_arm.png: observed and future CD per arm (log scale) and elastic log E error."""

    from rayworks.platform.figures import subplots

    arms = list(per_arm)
    pos = np.arange(len(arms))
    fig, (ax0, ax1) = subplots(1, 2, figsize=(10, 4))
    for off, key in ((-0.2, "observed_cd"), (0.2, "future_cd")):
        ax0.bar(pos + off, [per_arm[a][key] for a in arms], width=0.4, label=key)
    ax0.set_yscale("log")
    ax0.set_ylabel("Chamfer distance")
    ax1.bar(pos, [per_arm[a]["log_E_err"] for a in arms], color="tab:green")
    ax1.set_ylabel("mean |log E - log E*|")
    for ax in (ax0, ax1):
        ax.set_xticks(pos, arms, rotation=30, ha="right")
    ax0.legend()
    fig.tight_layout()
    fig.savefig(folder / "cd_by_arm.png", dpi=110)


def write_gif(folder: Path, rows: list[dict[str, Any]], frames_observed: int) -> Path | None:
    """rollout.gif: per arm (scene 0), true particles (grey) under the fitted rollout
    (coloured by object), observed then future frames."""
    kept = [r for r in rows if "rollout" in r]
    if not kept:
        return None

    from matplotlib.animation import FuncAnimation, PillowWriter

    from rayworks.platform.figures import subplots

    truth, obj = np.asarray(kept[0]["truth"]), np.asarray(kept[0]["obj"])
    fig, axes = subplots(1, len(kept), figsize=(3 * len(kept), 3.2), squeeze=False)

    def draw(t: int) -> None:
        for ax, r in zip(axes[0], kept, strict=True):
            ax.clear()
            x = np.asarray(r["rollout"][t])
            ax.scatter(truth[t, :, 0], truth[t, :, 1], s=6, c="lightgrey")
            ax.scatter(x[:, 0], x[:, 1], s=2, c=obj, cmap="coolwarm")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xticks([])
            ax.set_yticks([])
            split = "observed" if t < frames_observed else "future"
            ax.set_title(f"{r['arm']}\n{split} frame {t}", fontsize=8)

    anim = FuncAnimation(fig, draw, frames=len(truth))
    path = folder / "rollout.gif"
    anim.save(path, writer=PillowWriter(fps=5))
    return path
