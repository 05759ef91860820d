"""The `rae` run's pass rule, table (jsonl + markdown), plots and sample grid."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.figures import subplots
from rayworks.platform.tables import Column, Table, cell


def pass_rule(
    widths: list[dict[str, Any]],
    n: int,
    gfd: float,
    gfd_noshift: float,
    margin: float,
    ratio: float,
) -> dict[str, float]:
    """Pass rule (reconstructed): E1 — every d < n has final loss ≥ its eigenvalue bound (2%
    sampling slack) and ≥ margin x the worst d ≥ n loss; E2 — gFD(shift) ≤ gFD(no shift) /
    ratio."""
    below = [w for w in widths if w["width"] < n]
    above = [w for w in widths if w["width"] >= n]
    if not below or not above or math.isnan(gfd_noshift):
        return {}
    worst = max(w["loss"] for w in above)
    e1 = all(w["loss"] >= 0.98 * w["bound"] and w["loss"] >= margin * worst for w in below)
    e2 = gfd <= gfd_noshift / ratio
    return {"pass_e1": float(e1), "pass_e2": float(e2), "pass_rule": float(e1 and e2)}


_f = partial(cell, spec=".3g")


ARM_COLUMNS = (
    Column("arm", "DiT arm"),
    Column("latent"),
    Column("alpha", spec=".3g", right=True),
    Column("steps", spec="", right=True),
    Column("flops", "FLOPs/forward", ",", right=True),
    Column("train_loss_final", "final loss", ".3g", right=True),
    Column("gfd", "gFD", ".3g", right=True),
    Column("gacc", "sample acc", ".3g", right=True),
    Column("rfd", "rFD", ".3g", right=True),
)
WIDTH_COLUMNS = (
    Column("width", "width d", "", right=True),
    Column("loss", "final loss", ".4f", right=True),
    Column("bound", spec=".4f", right=True),
)


def write_table(
    ctx: RunContext,
    arms: list[dict[str, Any]],
    widths: list[dict[str, Any]],
    stage1: dict[str, float],
) -> Path:
    """table.jsonl (one row per DiT arm and per E1 width) and table.md."""
    title = "E1 single-image overfit (per-element loss vs (1/n) Σ_{i>d} λ_i):"
    return tables.write_table(
        ctx.artifacts_dir,
        arms,
        ARM_COLUMNS,
        title="Stage 1: " + ", ".join(f"{k} = {_f(v)}" for k, v in stage1.items()),
        more=[Table(widths, WIDTH_COLUMNS, title)] if widths else [],
        jsonl=arms + [{k: v for k, v in w.items() if k != "losses"} for w in widths],
    )


def smooth(values: list[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    window = max(1, min(window, len(v)))
    return np.convolve(v, np.ones(window) / window, mode="valid")


def write_plots(
    folder: Path,
    curves: dict[str, list[float]],
    widths: list[dict[str, Any]],
    gfd_curves: dict[str, list[tuple[int, float]]],
) -> None:
    """loss_curves.png (smoothed DiT losses), gfd_curve.png, width_overfit.png (E1)."""
    fig, (ax1, ax2) = subplots(1, 2, figsize=(10, 4))
    for name, losses in curves.items():
        ax1.plot(smooth(losses, max(1, len(losses) // 30)), label=name)
    ax1.set_xlabel("DiT step")
    ax1.set_ylabel("flow-matching loss (smoothed)")
    ax1.set_yscale("log")
    ax1.legend()
    for name, pts in gfd_curves.items():
        ax2.plot(*zip(*pts, strict=True), marker="o", label=name)
    ax2.set_xlabel("DiT step")
    ax2.set_ylabel("gFD (classifier features)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(folder / "loss_curves.png", dpi=110)
    if widths:
        fig, ax = subplots(figsize=(5, 4))
        d = [w["width"] for w in widths]
        ax.plot(d, [w["loss"] for w in widths], marker="o", label="final loss (one image)")
        ax.plot(d, [w["bound"] for w in widths], marker="x", ls="--", label="Σ_{i>d} λ_i / n")
        ax.set_xlabel("DiT width d")
        ax.set_ylabel("per-element loss")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "width_overfit.png", dpi=110)


def write_grid(path: Path, images: torch.Tensor, labels: torch.Tensor, per_class: int = 10) -> None:
    """PNG grid: one row per class, `per_class` samples each; images in [-1, 1]."""
    rows = []
    for c in range(10):
        pick = images[labels == c][:per_class]
        pad = torch.full((per_class - len(pick), *images.shape[1:]), -1.0)
        rows.append(torch.cat([pick, pad]))
    grid = torch.stack(rows)[:, :, 0]  # [10, k, H, W]
    big = grid.permute(0, 2, 1, 3).reshape(10 * images.shape[-2], per_class * images.shape[-1])
    fig, ax = subplots(figsize=(per_class * 0.5, 5))
    ax.imshow(big.clamp(-1, 1).numpy(), cmap="gray", vmin=-1, vmax=1)
    ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
