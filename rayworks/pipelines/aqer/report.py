"""Summary, pass rule, table (jsonl + markdown) and plots of an `aqer` run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from rayworks.pipelines.aqer.config import AqerConfig
from rayworks.pipelines.aqer.entropy import f1, f2
from rayworks.platform import tables
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column, Table

PASS_WIN_RATE = 0.8  # pass rule: AQER wins on >= 80% of (state, G) cells


def _mean(rows: list[dict[str, Any]], key: str = "infidelity") -> float:
    return float(np.mean([r[key] for r in rows])) if rows else float("nan")


def bound_violations(table: list[dict[str, Any]]) -> int:
    """AQER points outside Theorem 3.1: Step II outside [f1, f2], or final below f1."""
    rows = [r for r in table if r["arm"] == "aqer"]
    return sum(int(not r["step2_in_bounds"]) + int(not r["final_above_f1"]) for r in rows)


def win_rates(table: list[dict[str, Any]]) -> dict[str, float]:
    """Share of (target, G) cells where AQER's infidelity is <= each rival's (and all)."""
    cells: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in table:
        cells[(r["target"], r["g"])][r["arm"]] = r["infidelity"]
    rivals = sorted({r["arm"] for r in table} - {"aqer"})
    full = [c for c in cells.values() if "aqer" in c and all(a in c for a in rivals)]
    if not rivals or not full:
        return {}
    out = {f"win_rate_vs_{a}": float(np.mean([c["aqer"] <= c[a] for c in full])) for a in rivals}
    out["win_rate"] = float(np.mean([all(c["aqer"] <= c[a] for a in rivals) for c in full]))
    return out


def summarise(
    cfg: AqerConfig, table: list[dict[str, Any]], scaling: list[dict[str, Any]]
) -> dict[str, float]:
    """Headline (mean infidelity of `arm` at `headline_gates`), per-arm/G/family means,
    bound violations, win rates and the pass rule of docs/aqer.md (method run with both rivals)."""
    head = [r for r in table if r["arm"] == cfg.arm and r["g"] == cfg.headline_gates]
    summary: dict[str, float] = {"infidelity": _mean(head), "n_targets": float(len(head))}
    for arm in dict.fromkeys(r["arm"] for r in table):
        if arm != cfg.arm:  # a compared arm's headline, as its own run reports it
            summary[f"{arm}_infidelity"] = _mean(
                [r for r in table if r["arm"] == arm and r["g"] == cfg.headline_gates]
            )
        for g in cfg.gates:
            rows = [r for r in table if r["arm"] == arm and r["g"] == g]
            summary[f"{arm}_infidelity_g{g}"] = _mean(rows)
            if arm == "aqer":
                summary[f"aqer_step2_infidelity_g{g}"] = _mean(rows, "infidelity_step2")
        for fam in cfg.targets.families:
            rows = [
                r
                for r in table
                if r["arm"] == arm and r["family"] == fam and r["g"] == cfg.headline_gates
            ]
            summary[f"{arm}_{fam}_infidelity"] = _mean(rows)
    if any(r["arm"] == "aqer" for r in table):
        aq = [r for r in table if r["arm"] == "aqer"]
        summary["bound_violations"] = float(bound_violations(table))
        summary["infidelity_step2"] = _mean(
            [r for r in aq if r["g"] == cfg.headline_gates], "infidelity_step2"
        )
        summary["finetune_worse"] = float(sum(r["infidelity"] > r["finetune_start"] for r in aq))
    summary.update(win_rates(table))
    if cfg.arm == "aqer" and {"hec", "mps"} <= set(cfg.compare) and "win_rate" in summary:
        summary["pass_rule"] = float(
            summary["win_rate"] >= PASS_WIN_RATE and summary["bound_violations"] == 0
        )
    for row in scaling:
        n = row["n_qubits"]
        summary[f"scaling_n{n}_infidelity_step2"] = row["infidelity_step2"]
        summary[f"scaling_n{n}_seconds"] = row["seconds"]
    if scaling:
        summary["scaling_max_qubits"] = float(max(r["n_qubits"] for r in scaling))
        summary["scaling_bound_violations"] = float(sum(not r["in_bounds"] for r in scaling))
    return summary


def _aqer_only(key: str, spec: str) -> Column:
    """A column only AQER's rows fill (Step II and the Theorem 3.1 check)."""
    return Column(
        key,
        render=lambda r: format(r[key], spec) if r["arm"] == "aqer" else "-",
        right=True,
    )


def _in_bounds(r: Mapping[str, Any]) -> str:
    if r["arm"] != "aqer":
        return "-"
    return "yes" if r["step2_in_bounds"] and r["final_above_f1"] else "NO"


COLUMNS = (
    Column("target"),
    Column("g", "G", "", right=True),
    Column("arm"),
    Column("g_used", "G used", "", right=True),
    Column("infidelity", spec=".4f", right=True),
    replace(_aqer_only("infidelity_step2", ".4f"), header="Step II"),
    replace(_aqer_only("entropy_step1", ".3f"), header="S"),
    replace(_aqer_only("f1", ".4f"), header="f1(S)"),
    replace(_aqer_only("f2", ".4f"), header="f2(S)"),
    Column("step2_in_bounds", "in bounds", render=_in_bounds),
)


def write_table(
    ctx: RunContext, cfg: AqerConfig, table: list[dict[str, Any]], scaling: list[dict[str, Any]]
) -> None:
    order = {a: i for i, a in enumerate([cfg.arm, *cfg.compare])}
    table.sort(key=lambda r: (r["target"], r["g"], order[r["arm"]]))
    more = []
    if scaling:
        ctx.write_jsonl("scaling.jsonl", scaling)
        more.append(scaling_table(scaling))
        scaling_plot(ctx, scaling)
    tables.write_table(
        ctx.artifacts_dir,
        table,
        COLUMNS,
        title=f"N = {cfg.n_qubits} qubits, gate_count = {cfg.gate_count}. AQER columns: S "
        "after Step I, Step II infidelity and Theorem 3.1 bounds [f1(S), f2(S)].",
        more=more,
    )


def _mps(r: Mapping[str, Any]) -> bool:
    return r.get("path") == "mps"


SCALING_COLUMNS = (
    Column("n_qubits", "N", "", right=True),
    Column("path", render=lambda r: "mps" if _mps(r) else "sv"),
    Column("blocks", "blocks T", "", right=True),
    Column("entropy_target", "S target", ".3f", right=True),
    Column("entropy_step1", "S after Step I", ".3f", right=True),
    Column("infidelity_step2", "Step II infidelity", ".4f", right=True),
    Column("f1", spec=".4f", right=True),
    Column("f2", spec=".4f", right=True),
    Column("in_bounds", "in bounds", render=lambda r: "yes" if r["in_bounds"] else "NO"),
    Column(
        "bond_target",
        "χ",
        render=lambda r: f"{r['bond_target']} / {r['bond_reduced']}" if _mps(r) else "exact",
    ),
    Column(
        "discarded_target",
        "discarded",
        render=lambda r: (
            f"{r['discarded_target']:.1e} / {r['discarded_step1']:.1e}" if _mps(r) else "0"
        ),
    ),
    Column("seconds", spec=".1f", right=True),
)


def scaling_table(scaling: list[dict[str, Any]]) -> Table:
    """The scaling table: state vector up to `mps_above`, MPS (TEBD target) beyond."""
    return Table(
        sorted(scaling, key=lambda r: r["n_qubits"]),
        SCALING_COLUMNS,
        "AQER Steps I-II on the TFIM (h = 1) ground state (sv = state vector, "
        "mps = MPS path; χ = max bond of target / reduced state; discarded = summed "
        "SVD weight of TEBD / Step I):",
    )


def scaling_plot(ctx: RunContext, scaling: list[dict[str, Any]]) -> None:
    """scaling.png: Step-II infidelity with [f1, f2] and seconds against N."""

    from rayworks.platform.figures import subplots

    rows = sorted(scaling, key=lambda r: r["n_qubits"])
    n = [r["n_qubits"] for r in rows]
    fig, ax = subplots(figsize=(5.5, 4))
    ax.plot(n, [r["infidelity_step2"] for r in rows], "-o", label="Step II infidelity")
    ax.fill_between(
        n,
        [r["f1"] for r in rows],
        [min(r["f2"], 1.0) for r in rows],
        alpha=0.2,
        label="[f1(S), f2(S)]",
    )
    ax.set_xlabel("qubits N (TFIM h = 1)")
    ax.set_ylabel("infidelity")
    ax.legend(fontsize=8, loc="upper left")
    twin = ax.twinx()
    twin.plot(n, [r["seconds"] for r in rows], "k:s", label="seconds")
    twin.set_ylabel("seconds (Steps I-II, incl. target)")
    ax.set_title("AQER Steps I-II scaling (sv ≤ mps_above < MPS)")
    fig.tight_layout()
    fig.savefig(ctx.artifacts_dir / "scaling.png", dpi=110)


def write_plots(ctx: RunContext, cfg: AqerConfig, table: list[dict[str, Any]]) -> None:
    """infidelity_vs_g.png (per family, mean over targets) and bounds.png (S, infidelity)."""

    from rayworks.platform.figures import subplots

    fams = list(dict.fromkeys(r["family"] for r in table))
    fig, axes = subplots(1, len(fams), figsize=(4.5 * len(fams), 3.8), squeeze=False)
    for ax, fam in zip(axes[0], fams, strict=True):
        for arm in dict.fromkeys(r["arm"] for r in table):
            for key, style in (("infidelity", "-o"), ("infidelity_step2", "--x")):
                if key == "infidelity_step2" and arm != "aqer":
                    continue
                pts = [
                    (
                        g,
                        _mean(
                            [
                                r
                                for r in table
                                if r["arm"] == arm and r["family"] == fam and r["g"] == g
                            ],
                            key,
                        ),
                    )
                    for g in cfg.gates
                ]
                label = arm if key == "infidelity" else "aqer (no Step III)"
                ax.plot(*zip(*pts, strict=True), style, label=label)
        ax.set_yscale("log")
        ax.set_xlabel("two-qubit gates G")
        ax.set_ylabel("mean infidelity")
        ax.set_title(fam)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.artifacts_dir / "infidelity_vs_g.png", dpi=110)

    aq = [r for r in table if r["arm"] == "aqer"]
    if not aq:
        return
    fig, ax = subplots(figsize=(5.5, 4))
    s_max = max(max(r["entropy_step1"], r["entropy_final"]) for r in aq) * 1.1 + 1e-3
    s = np.linspace(0, s_max, 200)
    ax.plot(s, f1(s, cfg.n_qubits), "k-", label="f1(S) lower")
    ax.plot(s, np.minimum(f2(s), 1.0), "k--", label="f2(S) upper")
    ax.scatter(
        [r["entropy_step1"] for r in aq],
        [r["infidelity_step2"] for r in aq],
        s=14,
        label="after Step II",
    )
    ax.scatter(
        [r["entropy_final"] for r in aq],
        [r["infidelity"] for r in aq],
        s=14,
        marker="x",
        label="after Step III",
    )
    ax.set_xlabel("total Rényi-2 entropy S of V|v>")
    ax.set_ylabel("infidelity")
    ax.set_title("Theorem 3.1 bounds (reconstructed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.artifacts_dir / "bounds.png", dpi=110)
