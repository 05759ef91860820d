"""The sweep's table (jsonl + markdown), the bits/char-vs-ratio plot and the pass rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column

RIVALS = ("tucker", "svd", "lestd_norefit")


def pass_rule(table: list[dict[str, Any]], method: str) -> dict[str, float]:
    """Our pass rule (reconstructed, `docs/lestd.md`): at ratios >= 16, LeSTD bits/char below
    Tucker, SVD and no-refit.

    Only evaluated when `method` is `lestd` and some ratio >= 16 has every rival in the
    table; an unreachable rival counts as beaten, an unreachable LeSTD as a failure.
    """
    if method != "lestd":
        return {}
    by = {(r["method"], r["ratio"]): r for r in table}
    checked, ok = 0, True
    for ratio in sorted({r["ratio"] for r in table if r["ratio"] >= 16}):
        if not all((m, ratio) in by for m in RIVALS):
            continue
        checked += 1
        mine = by[("lestd", ratio)]
        if not mine["reachable"]:
            ok = False
            continue
        for rival in RIVALS:
            other = by[(rival, ratio)]
            ok &= not other["reachable"] or mine["val_bpc"] < other["val_bpc"]
    return {"pass_rule": float(ok)} if checked else {}


def _interval(row: dict[str, Any], key: str) -> str:
    if f"{key}_lo" not in row:
        return "-"
    return f"{row[key]:.4f} [{row[f'{key}_lo']:.4f}, {row[f'{key}_hi']:.4f}]"


def _reached(render: Callable[[Mapping[str, Any]], str], gap: str = "-"):
    """`render` on a reachable row; `gap` on a ratio the method cannot meet."""
    return lambda r: render(r) if r["reachable"] else gap


def _ranks(r: Mapping[str, Any]) -> str:
    return f"{r['r1']:.1f} / {r['r2']:.1f}" if "r1" in r else f"rank {r['rank']:.0f}"


def columns(dense_bpc: float) -> list[Column]:
    """The table's columns; Δ vs dense needs the dense model's bits/char."""
    return [
        Column("ratio", right=True),
        Column("method"),
        Column(
            "achieved_ratio",
            "achieved",
            render=_reached(lambda r: f"{r['achieved_ratio']:.2f}", "unreachable"),
            right=True,
        ),
        Column(
            "val_bpc",
            "val bits/char [CI]",
            render=_reached(lambda r: _interval(r, "val_bpc")),
            right=True,
        ),
        Column(
            "val_bpc",
            "Δ vs dense",
            render=_reached(lambda r: f"{r['val_bpc'] - dense_bpc:+.4f}"),
            right=True,
        ),
        Column(
            "diff",
            "this - method [CI]",
            render=_reached(lambda r: _interval(r, "diff")),
            right=True,
        ),
        Column(
            "logit_err", "logit err", render=_reached(lambda r: f"{r['logit_err']:.4f}"), right=True
        ),
        Column(
            "weight_err",
            "weight err",
            render=_reached(lambda r: f"{r['weight_err']:.4f}"),
            right=True,
        ),
        Column("r1", "R1 / R2 or rank", render=_reached(_ranks)),
        Column("density", "core density", ".3f", right=True),
        Column("speedup", "tokens/s vs dense", ".2f", right=True),
    ]


def write_table(ctx: RunContext, table: list[dict[str, Any]], dense_bpc: float) -> Path:
    """Markdown table; bits/char and the paired "rival - method" difference carry their
    bootstrap intervals in brackets."""
    title = f"Dense model: {dense_bpc:.4f} bits/char."
    return tables.write_table(ctx.artifacts_dir, table, columns(dense_bpc), title=title)


def write_plot(path: Path, table: list[dict[str, Any]], dense_bpc: float) -> Path:

    from rayworks.platform.figures import subplots

    fig, ax = subplots(figsize=(6, 4))
    for method in dict.fromkeys(r["method"] for r in table):
        pts = [
            (r["ratio"], r["val_bpc"]) for r in table if r["method"] == method and r["reachable"]
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=method)
    ax.axhline(dense_bpc, color="gray", linestyle="--", label="dense")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("MHA compression ratio")
    ax.set_ylabel("validation bits/char")
    ax.set_title("LeSTD (reconstructed) vs baselines")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
