"""The results table (markdown and jsonl), the summary numbers and the pass rule, and the plot.

Memory columns are measured on the `mem_batch` probe batch; MACs and CPU time per step on
the training batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rayworks.platform import tables
from rayworks.platform.tables import Column

PASS_EPS = (0.8, 0.9)  # methods file: the pass rule is checked at ε ∈ {0.8, 0.9}
PASS_ACC_DROP = 0.02  # accuracy ≥ vanilla - 2 points
PASS_ACT_RATIO = 10.0  # ≥ 10x less analytic activation memory in the wrapped layers

COLUMNS = (
    Column("setting"),
    Column("lr", spec="g"),
    Column("test_accuracy", "test acc", ".3f"),
    Column("val_accuracy", "val acc", ".3f"),
    Column("act_kib", "act KiB/layer (analytic)", ".1f"),
    Column("act_ratio", "act x less", ".1f"),
    Column("saved_kib", "saved KiB/layer (measured)", ".1f"),
    Column("saved_total_mib", "saved MiB model (measured)", ".2f"),
    Column("saved_wrapped_mib", "of which wrapped layers", ".2f"),
    Column("weight_kib", "weight KiB/layer", ".1f"),
    Column("rss_train_mb", "peak RSS +MB (measured)", ".1f"),
    Column("train_gmacs", "train GMAC/step", ".3f"),
    Column("infer_mmacs", "infer MMAC/image", ".3f"),
    Column("cpu_ms", "CPU ms/step", ".0f"),
    Column("cpu_ratio", "CPU/step ÷ vanilla", ".2f"),
    Column("infer_ms", "infer ms/batch", ".1f"),
)


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat display rows with ratios against the vanilla row of the same run (if any)."""
    vanilla = next((r for r in rows if r["kind"] == "vanilla"), None)
    out = []
    for r in rows:
        flat = {
            "setting": r["setting"],
            "lr": r.get("lr"),
            "test_accuracy": r["test_accuracy"],
            "val_accuracy": r["val_accuracy"],
            "act_kib": r["act_bytes_per_layer"] / 1024,
            "act_ratio": r["act_bytes_dense_per_layer"] / r["act_bytes_per_layer"],
            "saved_kib": r["saved_bytes_per_layer"] / 1024,
            "saved_total_mib": r["saved_bytes_total"] / 2**20,
            "saved_wrapped_mib": r["saved_bytes_wrapped"] / 2**20,
            "weight_kib": r["weight_bytes_per_layer"] / 1024,
            "rss_train_mb": r.get("rss_train_mb"),
            "train_gmacs": r["train_macs_per_step"] / 1e9,
            "infer_mmacs": r["infer_macs_per_image"] / 1e6,
            "cpu_ms": 1000 * r["cpu_s_per_step"],
            "cpu_ratio": r["cpu_s_per_step"] / vanilla["cpu_s_per_step"] if vanilla else None,
            "infer_ms": r["infer_ms"],
        }
        out.append(flat)
    return out


def write_table(folder: Path, rows: list[dict[str, Any]]) -> Path:
    """table.md and table.jsonl: one display row per setting (`table_rows`)."""
    return tables.write_table(folder, table_rows(rows), COLUMNS)


def summarize(rows: list[dict[str, Any]], method_label: str) -> dict[str, float]:
    """Headline (the method's row), one accuracy / ratio per setting, and the pass rule;
    every other setting's headline keys also as `<setting>_<key>` (bench reads the
    in-run baselines' rows from them)."""
    by_label = {r["setting"]: r for r in rows}
    head = by_label[method_label]
    flat = {r["setting"]: r for r in table_rows(rows)}
    out: dict[str, float] = {
        "test_accuracy": head["test_accuracy"],
        "val_accuracy": head["val_accuracy"],
        "act_ratio": flat[method_label]["act_ratio"],
        "train_gmacs": flat[method_label]["train_gmacs"],
        "cpu_s_per_step": head["cpu_s_per_step"],
    }
    for label, r in flat.items():
        if label != method_label:  # every other setting's headline keys, as its own run's
            for key in ("test_accuracy", "val_accuracy", "cpu_s_per_step"):
                out[f"{label}_{key}"] = by_label[label][key]
            out[f"{label}_act_ratio"], out[f"{label}_train_gmacs"] = (
                r["act_ratio"],
                r["train_gmacs"],
            )
        out[f"acc_{label}"] = r["test_accuracy"]
        out[f"act_ratio_{label}"] = r["act_ratio"]
        out[f"val_{label}"] = by_label[label]["val_accuracy"]
        out[f"saved_mib_{label}"] = r["saved_total_mib"]
        if r["rss_train_mb"] is not None:
            out[f"rss_mb_{label}"] = r["rss_train_mb"]
        if r["cpu_ratio"] is not None:
            out[f"cpu_ratio_{label}"] = r["cpu_ratio"]
    vanilla = next((r for r in rows if r["kind"] == "vanilla"), None)
    checked = [r for r in rows if r["kind"] == "wasi" and r["eps"] in PASS_EPS]
    if vanilla and checked:
        ok = all(
            r["test_accuracy"] >= vanilla["test_accuracy"] - PASS_ACC_DROP
            and flat[r["setting"]]["act_ratio"] >= PASS_ACT_RATIO
            and r["fwd_macs_wrapped"] < r["fwd_macs_wrapped_dense"]
            for r in checked
        )
        out["pass_rule"] = float(ok)
        out["acc_gap_vs_vanilla"] = head["test_accuracy"] - vanilla["test_accuracy"]
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Accuracy and activation memory against ε, with the other settings as lines."""

    from rayworks.platform.figures import subplots

    wasi = sorted((r for r in rows if r["kind"] == "wasi"), key=lambda r: r["eps"])
    fig, (ax1, ax2) = subplots(1, 2, figsize=(10, 4))
    if wasi:
        eps = [r["eps"] for r in wasi]
        ax1.plot(eps, [r["test_accuracy"] for r in wasi], "o-", label="WASI")
        ax2.plot(eps, [r["act_bytes_per_layer"] / 1024 for r in wasi], "o-", label="WASI")
    factors = sorted((r for r in rows if r["kind"] == "wasi_factors"), key=lambda r: r["eps"])
    if factors:
        eps = [r["eps"] for r in factors]
        ax1.plot(eps, [r["test_accuracy"] for r in factors], "s--", label="WASI (factors)")
        ax2.plot(eps, [r["act_bytes_per_layer"] / 1024 for r in factors], "s--", label="factors")
    styles = {"vanilla": "k--", "wsi": "g:", "asi": "m-.", "lora": "r--"}
    for r in rows:
        if r["kind"] in styles:
            ax1.axhline(
                r["test_accuracy"],
                ls=styles[r["kind"]][1:],
                color=styles[r["kind"]][0],
                label=r["setting"],
            )
            ax2.axhline(
                r["act_bytes_per_layer"] / 1024,
                ls=styles[r["kind"]][1:],
                color=styles[r["kind"]][0],
                label=r["setting"],
            )
    ax1.set(xlabel="ε (weight energy kept)", ylabel="test accuracy (digits 5-9)")
    ax2.set(xlabel="ε", ylabel="stored activations per wrapped layer (KiB)", yscale="log")
    for ax in (ax1, ax2):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
