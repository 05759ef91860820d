"""Aggregate per-prompt results: the table, paired SpecKV - SnapKV CIs, the pass rule, a plot.

Pass rule (methods file): at every C in {8, 16, 32} among the budgets, SpecKV accuracy >=
SnapKV accuracy (paired mean difference >= 0) and SpecKV recall@C > SnapKV recall@C (the
lower end of the paired 95% CI above 0), and weak-draft SpecKV <= SpecKV <= oracle in
accuracy, judged by paired intervals over the prompts: the ordering fails only where the
data contradict it (SpecKV significantly above the oracle, or significantly below the weak
draft: the 95% CI of the paired difference excludes 0 on the wrong side), not where one
prompt of hundreds tips a point comparison. A target that solves nothing with the full
cache fails the rule (its accuracy comparisons would hold vacuously). CIs are Student-t
intervals of the paired per-prompt differences (`stats.paired_ci`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.pipelines.speckv.evaluate import PromptResult
from rayworks.platform import tables
from rayworks.platform.stats import paired_ci
from rayworks.platform.tables import Column

PASS_BUDGETS = (8, 16, 32)


def table_rows(results: list[PromptResult]) -> list[dict[str, Any]]:
    """One row per (method row, budget): accuracy (overall and per task), agreement with the
    full-cache answer, recall@C and KV bytes of the prompt part; plus the full-cache row."""
    keys = list(dict.fromkeys(k for r in results for k in r.outcomes))
    tasks = sorted({r.task for r in results})
    rows = []
    for row, budget in keys:
        outs = [(r.task, r.outcomes[(row, budget)]) for r in results]
        entry: dict[str, Any] = {
            "row": row,
            "budget": budget,
            "accuracy": float(np.mean([o.correct for _, o in outs])),
            "agree": float(np.mean([o.agrees for _, o in outs])),
            "recall": float(np.mean([o.recall for _, o in outs])),
            "kv_bytes": float(np.mean([o.kv_bytes for _, o in outs])),
        }
        for task in tasks:
            entry[f"acc_{task}"] = float(np.mean([o.correct for t, o in outs if t == task]))
        rows.append(entry)
    full = {
        "row": "full",
        "budget": 0,
        "accuracy": float(np.mean([r.full_correct for r in results])),
        "agree": 1.0,
        "recall": 1.0,
        "kv_bytes": float(np.mean([r.timings["kv_bytes_full"] for r in results])),
    }
    for task in tasks:
        full[f"acc_{task}"] = float(np.mean([r.full_correct for r in results if r.task == task]))
    return [full, *rows]


def _col(results: list[PromptResult], row: str, budget: int, attr: str) -> list[float]:
    return [float(getattr(r.outcomes[(row, budget)], attr)) for r in results]


def paired_summary(results: list[PromptResult], cfg: Any) -> dict[str, float]:
    """Headline, per-budget accuracies / recalls, paired differences and the pass rule."""
    out: dict[str, float] = {}
    have = {k for k in results[0].outcomes}
    for row, budget in sorted(have):
        out[f"acc_{row}_c{budget}"] = float(np.mean(_col(results, row, budget, "correct")))
        out[f"agree_{row}_c{budget}"] = float(np.mean(_col(results, row, budget, "agrees")))
        rec = _col(results, row, budget, "recall")
        if not any(math.isnan(x) for x in rec):
            out[f"recall_{row}_c{budget}"] = float(np.mean(rec))
    out["accuracy"] = out[f"acc_{cfg.method}_c{cfg.budget}"]
    out["recall"] = out[f"recall_{cfg.method}_c{cfg.budget}"]
    checks: list[bool] = []
    for budget in sorted(cfg.budgets):
        if ("speckv", budget) not in have or ("snapkv", budget) not in have:
            continue
        for attr, name in (("correct", "acc"), ("agrees", "agree"), ("recall", "recall")):
            mean, lo, hi = paired_ci(
                _col(results, "speckv", budget, attr), _col(results, "snapkv", budget, attr)
            )
            out[f"{name}_diff_c{budget}"], out[f"{name}_diff_lo_c{budget}"] = mean, lo
            out[f"{name}_diff_hi_c{budget}"] = hi
        if budget in PASS_BUDGETS:
            checks.append(out[f"acc_diff_c{budget}"] >= 0 and out[f"recall_diff_lo_c{budget}"] > 0)
            if ("speckv_weak", budget) in have and ("oracle", budget) in have:
                spec = _col(results, "speckv", budget, "correct")
                for other, name in (
                    ("oracle", "speckv_minus_oracle"),
                    ("speckv_weak", "speckv_minus_weak"),
                ):
                    mean, lo, hi = paired_ci(spec, _col(results, other, budget, "correct"))
                    out[f"{name}_c{budget}"], out[f"{name}_lo_c{budget}"] = mean, lo
                    out[f"{name}_hi_c{budget}"] = hi
                checks.append(out[f"speckv_minus_oracle_lo_c{budget}"] <= 0)
                checks.append(out[f"speckv_minus_weak_hi_c{budget}"] >= 0)
    if f"acc_diff_c{cfg.budget}" in out:
        out["speckv_minus_snapkv"] = out[f"acc_diff_c{cfg.budget}"]
    if checks:
        full_acc = float(np.mean([r.full_correct for r in results]))
        out["pass_rule"] = float(all(checks) and full_acc > 0)
    for key in ("prefill_seconds", "decode_seconds", "draft_seconds", "lookahead_seconds"):
        vals = [r.timings[key] for r in results if key in r.timings]
        if vals:
            out[f"mean_{key}"] = float(np.mean(vals))
    if "mean_draft_seconds" in out:
        spent = out["mean_draft_seconds"] + out.get("mean_lookahead_seconds", 0.0)
        out["draft_overhead"] = spent / out["mean_prefill_seconds"]
    return out


def columns(rows: list[dict[str, Any]]) -> list[Column]:
    """row, budget C ("all" for the full cache), accuracy overall and per task, agreement
    with the full-cache answer, recall@C (KV rows only) and the KV bytes."""
    tasks = [k for k in rows[0] if k.startswith("acc_")]
    return [
        Column("row"),
        Column("budget", "C", render=lambda r: str(r["budget"] or "all")),
        Column("accuracy", spec=".3f"),
        *(Column(t, spec=".3f") for t in tasks),
        Column("agree", spec=".3f"),
        Column("recall", "recall@C", ".3f"),
        Column("kv_bytes", "KV bytes", ".0f"),
    ]


def write_report(
    folder: Path, rows: list[dict[str, Any]], results: list[PromptResult], cfg: Any
) -> None:
    """`table.jsonl`, `table.md` and `accuracy_vs_budget.png` (accuracy of the KV and the
    prompt-compression rows, recall@C of the KV rows) under `folder`."""
    from rayworks.platform.figures import subplots

    tables.write_table(folder, rows, columns(rows))
    fig, axes = subplots(1, 3, figsize=(16, 4))
    for name in cfg.kv_rows:
        pts = sorted((r["budget"], r["recall"]) for r in rows if r["row"] == name)
        axes[2].plot(*zip(*pts, strict=True), marker="o", label=name)
    axes[2].set_xscale("log", base=2)
    axes[2].set_xlabel("budget C (KV entries per head)")
    axes[2].set_ylabel("recall@C of decode-time attention mass")
    axes[2].set_title("KV dropping: recall@C")
    axes[2].legend(fontsize=7)
    for ax, prefix in zip(axes[:2], ("kv", "pc"), strict=True):
        names = list(cfg.kv_rows) if prefix == "kv" else list(cfg.pc_rows)
        if prefix == "pc":
            names += sorted({r["row"] for r in rows if r["row"].startswith("speckv_pc")})
        for name in names:
            pts = sorted((r["budget"], r["accuracy"]) for r in rows if r["row"] == name)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        ax.axhline(rows[0]["accuracy"], color="k", ls="--", label="full")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget C (KV entries per head / prompt tokens)")
        ax.set_ylabel("exact-match accuracy")
        ax.set_title("KV dropping" if prefix == "kv" else "prompt compression")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "accuracy_vs_budget.png", dpi=100)
