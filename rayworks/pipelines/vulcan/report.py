"""The run's table (jsonl + markdown), its figure and the per-run checks of the claims.

Rows: every model of the run at its own size (base, base fine-tuned on S, direct prune,
Vulcan's unpruned twin, the derived model). Accuracies are on S-test with the argmax over
all ten logits. The claim "Vulcan ≥ prune + fine-tune" needs the `vulcan_prune_ft` arm:
`rayworks bench vulcan` tabulates it beside this run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column


def claim_checks(summary: dict[str, float], gap_tolerance: float) -> dict[str, float]:
    """1.0 / 0.0 per claim this run can check alone (Vulcan runs only).

    The prune gap (points lost on S-test at the pruning step) passes when it is at most
    the tolerance; a negative gap (the pruned model is better) passes.
    """
    if "prune_gap" not in summary:
        return {}
    acc = summary["test_accuracy"]
    return {
        "gap_within_tolerance": float(summary["prune_gap"] <= gap_tolerance),
        "beats_base": float(acc >= summary["base_test_accuracy"]),
        "beats_direct": float(acc >= summary["direct_test_accuracy"]),
    }


def columns(base: dict[str, Any]) -> list[Column]:
    """The table's columns; the ratios are to `base` (the first row)."""

    def ratio(key: str) -> Callable[[Mapping[str, Any]], str]:
        return lambda r: f"{r[key] / base[key]:.3f}"

    def speed(r: Mapping[str, Any]) -> str:
        return f"{base['latency_ms'] / r['latency_ms']:.2f}x" if "latency_ms" in r else "-"

    return [
        Column("model"),
        Column(
            "test_accuracy",
            "S-test acc (%)",
            render=lambda r: f"{100 * r['test_accuracy']:.2f}",
            right=True,
        ),
        Column("params", spec=".0f", right=True),
        Column("params", "params vs base", render=ratio("params"), right=True),
        Column("macs", "MACs", ".0f", right=True),
        Column("macs", "MACs vs base", render=ratio("macs"), right=True),
        Column("latency_ms", "ms / 1000 img", ".1f", right=True),
        Column("latency_ms", "speedup", render=speed, right=True),
    ]


def write_table(ctx: RunContext, rows: list[dict[str, Any]], header: str) -> Path:
    return tables.write_table(ctx.artifacts_dir, rows, columns(rows[0]), title=header)


def write_plot(path: Path, rows: list[dict[str, Any]], history: list[dict[str, Any]]) -> Path:
    """S-test accuracy per model; for Vulcan also S-val accuracy before/after pruning."""

    from rayworks.platform.figures import subplots

    fig, axes = subplots(1, 2 if history else 1, figsize=(11 if history else 6, 4))
    ax = axes[0] if history else axes
    names = [r["model"] for r in rows]
    ax.bar(names, [100 * r["test_accuracy"] for r in rows], color="tab:blue")
    for i, r in enumerate(rows):
        ax.text(
            i,
            100 * r["test_accuracy"],
            f"{r['params'] / rows[0]['params']:.0%}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("S-test accuracy (%) (label: params vs base)")
    ax.tick_params(axis="x", rotation=20)
    if history:
        steps = [h["step"] for h in history]
        axes[1].plot(
            steps,
            [100 * h["val_accuracy"] for h in history],
            marker="o",
            label="post-trained (unpruned)",
        )
        axes[1].plot(
            steps,
            [100 * h["pruned_val_accuracy"] for h in history],
            marker="s",
            label="pruned copy",
        )
        axes[1].set_xlabel("post-training step")
        axes[1].set_ylabel("S-val accuracy (%)")
        axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
