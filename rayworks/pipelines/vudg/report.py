"""The run's tables (jsonl + markdown), plots and the pass rule."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from rayworks.pipelines.vudg.annotate import TYPES
from rayworks.pipelines.vudg.config import VUDGConfig
from rayworks.platform import tables as tables_md
from rayworks.platform.context import RunContext
from rayworks.platform.tables import Column, Table

Cells = dict[tuple[str, str], tuple[int, int]]
STAGES = (
    ("errors_E1", "label errors after E1 (generator)"),
    ("errors_E2", "label errors after E2 (distractors)"),
    ("flagged", "E3 flagged (fixable + invalid)"),
    ("caught", "E3 flagged, truly wrong"),
    ("missed", "E3 passed, truly wrong"),
    ("false_flags", "E3 flagged, actually right"),
    ("fixed", "humans fixed"),
    ("deleted", "humans deleted"),
    ("errors_final", "residual label errors (final audit)"),
)


def pass_rule(summary: dict[str, float], protocols: list[str]) -> dict[str, float]:
    """Pass rule (reconstructed): all-domain > LODO > single-source on the mean over held-out
    domains, and E3-het leaves fewer residual label errors than E3-self. Only when all three
    ran."""
    if not {"lodo", "all", "single"} <= set(protocols):
        return {}
    order = summary["all_accuracy"] > summary["lodo_accuracy"] > summary["single_accuracy"]
    het = summary["e3_het_residual_errors"] < summary["e3_self_residual_errors"]
    return {
        "pass_ordering": float(order),
        "pass_annotation": float(het),
        "pass_rule": float(order and het),
    }


def merged(tables: dict[str, Cells], labels: list[str]) -> Cells:
    """Cell counts summed over several runs."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for label in labels:
        for key, (c, n) in tables[label].items():
            out[key][0] += c
            out[key][1] += n
    return {k: (v[0], v[1]) for k, v in out.items()}


def by(cells: Cells, axis: int) -> dict[str, float]:
    """Accuracy per domain (axis 0) or per type (axis 1)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, (c, n) in cells.items():
        acc[key[axis]][0] += c
        acc[key[axis]][1] += n
    return {k: c / n for k, (c, n) in acc.items()}


def _share(cells: Cells, domain: str, qtype: str) -> float | None:
    c, n = cells.get((domain, qtype), (0, 0))
    return c / n if n else None


def _grid(title: str, header: list[str], rows: list[list[Any]], spec: str = ".3f") -> Table:
    """A table whose first column names the row and the others hold numbers (`spec`)."""
    columns = [Column(header[0]), *(Column(h, spec=spec, right=True) for h in header[1:])]
    return Table([dict(zip(header, r, strict=True)) for r in rows], columns, title)


def _labels(tables: dict[str, Cells], protocol: str) -> list[str]:
    return [k for k in tables if k == protocol or k.startswith(f"{protocol}-")]


def write_table(
    ctx: RunContext,
    cfg: VUDGConfig,
    scores: dict[str, dict[str, float]],
    tables: dict[str, Cells],
    report: dict[str, Any],
    summary: dict[str, float],
    protocols: list[str],
) -> Path:
    """table.jsonl: one row per (run, domain, type) cell and per annotation branch;
    table.md: protocols, held-out domains, single-source matrix, types, annotation."""
    rows = [
        {
            "run": label,
            "protocol": label.split("-")[0],
            "domain": d,
            "type": t,
            "correct": c,
            "questions": n,
            "accuracy": c / n,
        }
        for label, cells in tables.items()
        for (d, t), (c, n) in sorted(cells.items())
    ]
    rows += [{"annotation_branch": b, **report[b]} for b in ("het", "self")]
    acc = Column("accuracy", spec=".3f", right=True)
    runs = Column("runs", "training runs", "", right=True)
    parts = [
        Table(
            [
                {
                    "protocol": p,
                    "accuracy": summary[f"{p}_accuracy"],
                    "runs": len(_labels(tables, p)),
                }
                for p in protocols
            ],
            [Column("protocol"), acc, runs],
            "Protocols (mean accuracy over held-out test domains; chance = 1/6):",
        )
    ]
    held = [p for p in ("lodo", "all") if p in protocols]
    if held:
        parts.append(
            _grid(
                "Held-out domains (LODO: model trained on the other domains):",
                ["protocol", *cfg.held_out],
                [
                    [p, *(by(merged(tables, _labels(tables, p)), 0).get(d) for d in cfg.held_out)]
                    for p in held
                ],
            )
        )
    if "single" in protocols:
        parts.append(
            _grid(
                "Single-source: row = training domain, column = test domain:",
                ["source", *cfg.data.domains],
                [
                    [s, *(scores[f"single-{s}"].get(f"acc_{d}") for d in cfg.data.domains)]
                    for s in cfg.sources
                ],
            )
        )
    parts.append(
        _grid(
            "Per question type (cells pooled over the protocol's runs):",
            ["protocol", *TYPES],
            [
                [p, *(by(merged(tables, _labels(tables, p)), 1).get(t) for t in TYPES)]
                for p in protocols
            ],
        )
    )
    own = merged(tables, _labels(tables, cfg.protocol))
    parts.append(
        _grid(
            f"Domain x type ({cfg.protocol}):",
            ["domain", *TYPES, "all"],
            [[d, *(_share(own, d, t) for t in TYPES), a] for d, a in sorted(by(own, 0).items())],
        )
    )
    parts.append(
        _grid(
            "Simulated annotation (items of all clips; E3-het = independent verifier, "
            "E3-self = shares E1's errors):",
            ["stage", "E3-het", "E3-self"],
            [[name, report["het"][k], report["self"][k]] for k, name in STAGES],
            spec="",
        )
    )
    parts.append(
        _grid(
            "",
            ["residual errors by type", "E3-het", "E3-self"],
            [
                [
                    t,
                    report["by_type"][t]["het"]["errors_final"],
                    report["by_type"][t]["self"]["errors_final"],
                ]
                for t in TYPES
            ],
            spec="",
        )
    )
    first, *more = parts
    return tables_md.write_table(
        ctx.artifacts_dir, first.rows, first.columns, title=first.title, more=more, jsonl=rows
    )


def write_plots(
    folder: Path,
    cfg: VUDGConfig,
    scores: dict[str, dict[str, float]],
    report: dict[str, Any],
    protocols: list[str],
) -> None:
    """accuracy_by_domain.png, accuracy_by_type.png, annotation_errors.png."""

    import numpy as np

    from rayworks.platform.figures import subplots

    def bars(ax: Any, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
        width = 0.8 / max(1, len(series))
        for k, (name, values) in enumerate(series.items()):
            ax.bar(np.arange(len(groups)) + k * width, values, width, label=name)
        ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups, rotation=30)
        ax.set_ylabel(ylabel)
        ax.legend()

    def acc(label: str, key: str) -> float:
        return scores.get(label, {}).get(key, float("nan"))

    series: dict[str, list[float]] = {}
    if "lodo" in protocols:
        series["LODO"] = [acc(f"lodo-{d}", f"acc_{d}") for d in cfg.held_out]
    if "all" in protocols:
        series["all-domain"] = [acc("all", f"acc_{d}") for d in cfg.held_out]
    if "single" in protocols:
        series["single-source (mean over sources)"] = [
            float(np.nanmean([acc(f"single-{s}", f"acc_{d}") for s in cfg.sources]))
            if any(s != d for s in cfg.sources)
            else float("nan")
            for d in cfg.held_out
        ]
    fig, ax = subplots(figsize=(7, 4))
    bars(ax, cfg.held_out, series, "accuracy on held-out domain")
    ax.axhline(1 / 6, color="gray", linestyle="--")
    fig.tight_layout()
    fig.savefig(folder / "accuracy_by_domain.png", dpi=110)

    fig, ax = subplots(figsize=(7, 4))
    per_type = {
        p: [
            float(
                np.mean(
                    [
                        v[f"acc_{t}"]
                        for k, v in scores.items()
                        if (k == p or k.startswith(f"{p}-")) and f"acc_{t}" in v
                    ]
                )
            )
            for t in TYPES
        ]
        for p in protocols
    }
    bars(ax, list(TYPES), per_type, "accuracy (mean over the protocol's runs)")
    ax.axhline(1 / 6, color="gray", linestyle="--")
    fig.tight_layout()
    fig.savefig(folder / "accuracy_by_type.png", dpi=110)

    fig, ax = subplots(figsize=(7, 4))
    keys = ["errors_E1", "errors_E2", "errors_final"]
    bars(
        ax,
        ["after E1", "after E2", "after E3 + humans"],
        {f"E3-{b}": [report[b][k] for k in keys] for b in ("het", "self")},
        "label errors",
    )
    fig.tight_layout()
    fig.savefig(folder / "annotation_errors.png", dpi=110)


CHANCE = 1 / 6
SEED_METRICS = ("accuracy", *(f"acc_{t}" for t in TYPES))
PROTOCOL_KEYS = {"lodo": "", "all": "all_", "single": "single_"}  # summary key prefixes


def _metric(summary: dict[str, float], protocol: str, metric: str) -> float:
    """One protocol's metric in a `vudg` summary (lodo headline, compared ones prefixed)."""
    if metric == "accuracy":
        return summary[f"{protocol}_accuracy"]
    return summary[PROTOCOL_KEYS[protocol] + metric]


def seed_rows(summaries: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Over the seeds of `vudg` runs (each ran lodo, all and single on its own seed's data
    and model): per protocol and metric (overall and per question type) the mean with its
    95% Student-t interval and whether it excludes chance (1/6), then the paired-over-seeds
    differences lodo - all, lodo - single, all - single (`rayworks.platform.stats`)."""
    from rayworks.platform.stats import mean_ci, paired_ci

    rows: list[dict[str, Any]] = []
    for metric in SEED_METRICS:
        values = {p: [_metric(s, p, metric) for s in summaries] for p in PROTOCOL_KEYS}
        for p, v in values.items():
            mean, lo, hi = mean_ci(v)
            rows.append(
                {
                    "metric": metric,
                    "what": p,
                    "mean": mean,
                    "lo": lo,
                    "hi": hi,
                    "above_chance": bool(lo > CHANCE),
                    "seeds": v,
                }
            )
        for a, b in (("lodo", "all"), ("lodo", "single"), ("all", "single")):
            mean, lo, hi = paired_ci(values[a], values[b])
            rows.append(
                {
                    "metric": metric,
                    "what": f"{a} - {b}",
                    "mean": mean,
                    "lo": lo,
                    "hi": hi,
                    "excludes_0": bool(lo > 0 or hi < 0),
                    "seeds": [x - y for x, y in zip(values[a], values[b], strict=True)],
                }
            )
    return rows


SEED_COLUMNS = (
    Column("metric"),
    Column("what", "protocol / paired difference"),
    Column("mean", spec=".3f", right=True),
    Column("ci", "95% interval", render=lambda r: f"[{r['lo']:.3f}, {r['hi']:.3f}]", right=True),
    Column(
        "flag",
        "interval",
        render=lambda r: (
            ("above 1/6" if r["above_chance"] else "includes/below 1/6")
            if "above_chance" in r
            else ("excludes 0" if r["excludes_0"] else "includes 0")
        ),
    ),
    Column("seeds", "per seed", render=lambda r: " / ".join(f"{x:.3f}" for x in r["seeds"])),
)
