"""The sweep's table (jsonl + markdown), the bits/char-vs-ratio plot and the pass rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rayworks.platform.context import RunContext

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


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    return format(row[key], fmt) if key in row else "-"


def _interval(row: dict[str, Any], key: str) -> str:
    if f"{key}_lo" not in row:
        return "-"
    return f"{row[key]:.4f} [{row[f'{key}_lo']:.4f}, {row[f'{key}_hi']:.4f}]"


def write_table(ctx: RunContext, table: list[dict[str, Any]], dense_bpc: float) -> Path:
    """Markdown table; bits/char and the paired "rival - method" difference carry their
    bootstrap intervals in brackets."""
    ctx.write_jsonl("table.jsonl", table)
    lines = [
        f"Dense model: {dense_bpc:.4f} bits/char.",
        "",
        "| ratio | method | achieved | val bits/char [CI] | Δ vs dense | this - method [CI] "
        "| logit err | weight err | R1 / R2 or rank | core density | tokens/s vs dense |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in table:
        if not r["reachable"]:
            lines.append(
                f"| {r['ratio']} | {r['method']} | unreachable | - | - | - | - | - | - | - | - |"
            )
            continue
        ranks = f"{r['r1']:.1f} / {r['r2']:.1f}" if "r1" in r else f"rank {r['rank']:.0f}"
        lines.append(
            f"| {r['ratio']} | {r['method']} | {r['achieved_ratio']:.2f} "
            f"| {_interval(r, 'val_bpc')} | {r['val_bpc'] - dense_bpc:+.4f} "
            f"| {_interval(r, 'diff')} | {r['logit_err']:.4f} | {r['weight_err']:.4f} "
            f"| {ranks} | {_cell(r, 'density', '.3f')} | {_cell(r, 'speedup', '.2f')} |"
        )
    path = ctx.artifacts_dir / "table.md"
    path.write_text("\n".join(lines) + "\n")
    return path


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
