"""The corpus datasheet: what the open output holds and how it was cut, as markdown and as
one self-contained HTML page with plots.

Why: a curated corpus is only usable if its makeup and its losses are documented (Gebru et
al., "Datasheets for Datasets"; Common Corpus publishes counts per collection, language and
license). Both files are built from the same sections, so they never disagree:
- summary: kept documents, characters, tokens, and the reconciliation line
  `in = kept + dropped + rejected` with its numbers (flagged if it does not hold);
- attrition: rows in / removed / left per step, then rows per drop and reject reason;
- kept documents, characters and tokens by collection, language, license status and (when
  the stats carry a `license` column) SPDX license;
- exact and near-duplicate dedup statistics with the cluster-size histogram;
- PII redactions per type (kept and quarantined rows alike: both are redacted);
- the run's metadata (version, config summary, input, tokenizer, seconds).

Input is the runner's group stats (one row per (drop_reason, collection, lang,
license_status[, license]) with summed `docs`, `chars`, `tokens`, `pii_<type>`), so the
datasheet never touches the documents. Plots are drawn on matplotlib's Agg canvas (a bare
`Figure`, no pyplot) and embedded as base64 PNGs with `platform.report`'s helpers, whose
tables escape every cell; the HTML needs no network and no other file.
"""

from __future__ import annotations

import io
import json
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from rayworks.pipelines.corpus.step import DROP
from rayworks.platform.report import CSS, _img, _table, _warn

DATASHEET_MD = "datasheet.md"
DATASHEET_HTML = "datasheet.html"
TOP = 15
"""Bars per plot; smaller groups are summed into one `other` bar (the tables list all)."""
NONE = "(none)"
KEPT_COLOR, REMOVED_COLOR, TOKEN_COLOR = "tab:blue", "tab:red", "tab:green"
RUN_KEYS = ("version", "open_only", "input", "config", "tokenizer_vocab_size", "seconds")


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[tuple[str, bytes]] = field(default_factory=list)
    """(alt text, PNG); shown in the HTML only."""


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _n(v: Any) -> str:
    return f"{_int(v):,}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "—"


def _prepared(stats: pd.DataFrame) -> pd.DataFrame:
    """Stats with every expected column present: missing counts are 0, missing or null
    group keys read `(none)` (`und` for language)."""
    df = stats.copy()
    for col in ("docs", "chars", "tokens"):
        df[col] = pd.to_numeric(df[col], errors="coerce").fillna(0) if col in df else 0
    fills = {DROP: "", "collection": NONE, "lang": "und", "license_status": NONE}
    if "license" in df:  # the SPDX id, once the runner groups by it
        fills["license"] = NONE
    for col, fill in fills.items():
        df[col] = df[col].fillna(fill).astype(str) if col in df else fill
    return df


def _kept(df: pd.DataFrame) -> pd.DataFrame:
    return df[df[DROP] == ""]


def _has_tokens(df: pd.DataFrame) -> bool:
    return bool(df["tokens"].sum() > 0)


def _reconciliation(attrition: Sequence[Mapping[str, Any]], df: pd.DataFrame) -> tuple[str, bool]:
    """(the line `in = kept + dropped + rejected: a = b + c + d`, whether it holds)."""
    kept = _int(_kept(df)["docs"].sum())
    dropped = _int(df.loc[df[DROP] != "", "docs"].sum())
    rows = {str(r.get("step")): r for r in attrition}
    rejected = _int(rows.get("reject", {}).get("removed", 0))
    total = _int(rows["read"].get("left")) if "read" in rows else kept + dropped + rejected
    parts = kept + dropped + rejected
    holds = total == parts
    verdict = "reconciled" if holds else f"DOES NOT RECONCILE: sum is {parts:,}"
    line = "in = kept + dropped + rejected: "
    return f"{line}{total:,} = {kept:,} + {dropped:,} + {rejected:,} ({verdict})", holds


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():  # scripts DejaVu Sans lacks (CJK...) draw as boxes
        warnings.filterwarnings("ignore", message="Glyph .* missing", category=UserWarning)
        fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def _label(text: str, width: int = 28) -> str:
    """A plot label: shortened, and `$` escaped so matplotlib never parses it as math."""
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.replace("$", r"\$")


def _top(labels: list[str], values: list[float], n: int = TOP) -> tuple[list[str], list[float]]:
    """The first `n - 1` bars (callers sort by documents) and one `other (k)` bar summing
    the rest."""
    if len(labels) <= n:
        return labels, values
    rest = sum(values[n - 1 :])
    return [*labels[: n - 1], f"other ({len(labels) - n + 1})"], [*values[: n - 1], rest]


def plot_bars(title: str, panels: Sequence[tuple[str, list[str], list[float], str]]) -> bytes:
    """One row of horizontal bar charts, one per (title, labels, values, color); the first
    label on top."""
    tall = max(len(labels) for _, labels, _, _ in panels)
    fig = Figure(figsize=(4.6 * len(panels), 1.2 + 0.28 * max(tall, 3)))
    fig.suptitle(title)
    for ax, (name, labels, values, color) in zip(
        fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True
    ):
        labels, values = _top(labels, values)
        ax.barh([_label(s) for s in labels][::-1], values[::-1], color=color)
        ax.set_title(name, fontsize=10)
        ax.tick_params(labelsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def plot_waterfall(steps: Sequence[Mapping[str, Any]]) -> bytes:
    """Rows left after each step (blue) and rows that step removed (red), first step on top."""
    names = [_label(str(r.get("step"))) for r in steps][::-1]
    left = [_int(r.get("left")) for r in steps][::-1]
    removed = [_int(r.get("removed")) for r in steps][::-1]
    fig = Figure(figsize=(7.5, 1.2 + 0.32 * max(len(steps), 3)))
    ax = fig.add_subplot()
    ax.barh(names, left, color=KEPT_COLOR)
    bars = ax.barh(names, removed, left=left, color=REMOVED_COLOR)
    ax.bar_label(bars, labels=[f"-{n:,}" if n else "" for n in removed], fontsize=7, padding=2)
    ax.set_xlim(0, 1.1 * max([a + b for a, b in zip(left, removed, strict=True)] + [1]))
    ax.set(title="Attrition: rows left (blue) and removed (red) per step", xlabel="rows")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def plot_cluster_sizes(sizes: Mapping[int, int]) -> bytes:
    """Near-duplicate clusters per size (log scale when the counts span 20x or more)."""
    xs = sorted(sizes)
    counts = [sizes[x] for x in xs]
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.add_subplot()
    bars = ax.bar([str(x) for x in xs], counts, color="tab:purple")
    if len(xs) <= 30:
        ax.bar_label(bars, labels=[f"{c:,}" for c in counts], fontsize=7)
    log = max(counts) > 20 * min(counts)
    ax.set(
        title="Near-duplicate clusters by size" + (" (log scale)" if log else ""),
        xlabel="documents in cluster",
        ylabel="clusters",
        yscale="log" if log else "linear",
    )
    ax.tick_params(axis="x", labelsize=8, labelrotation=90 if len(xs) > 20 else 0)
    if not log:
        ax.yaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return _png(fig)


def _by(kept: pd.DataFrame, key: str) -> pd.DataFrame:
    """Docs, chars and tokens per value of `key`, most documents first."""
    g = kept.groupby(key)[["docs", "chars", "tokens"]].sum().reset_index()
    return g.sort_values(["docs", key], ascending=[False, True], kind="stable")


def _breakdown_table(kept: pd.DataFrame, key: str, label: str, tokens: bool) -> Table:
    g, total = _by(kept, key), kept["docs"].sum()
    header = [label, "docs", "% docs", "characters"] + (["tokens", "chars/token"] if tokens else [])
    rows = []
    for _, r in g.iterrows():
        row = [str(r[key]), _n(r["docs"]), _pct(r["docs"], total), _n(r["chars"])]
        if tokens:
            ratio = f"{r['chars'] / r['tokens']:.2f}" if r["tokens"] else "—"
            row += [_n(r["tokens"]), ratio]
        rows.append(row)
    return Table(header, rows, f"kept documents by {label}")


def _breakdown_plot(kept: pd.DataFrame, key: str, label: str, tokens: bool) -> bytes:
    g = _by(kept, key)
    labels = [str(v) for v in g[key]]
    panels = [("documents", labels, [float(v) for v in g["docs"]], KEPT_COLOR)]
    size = "tokens" if tokens else "chars"
    panels.append((size, labels, [float(v) for v in g[size]], TOKEN_COLOR))
    return plot_bars(f"Kept by {label}", panels)


def _breakdown_section(kept: pd.DataFrame, key: str, label: str, tokens: bool) -> Section:
    section = Section(f"Kept by {label}", tables=[_breakdown_table(kept, key, label, tokens)])
    if len(kept):
        section.plots.append((f"kept by {label}", _breakdown_plot(kept, key, label, tokens)))
    return section


def _license_section(kept: pd.DataFrame, tokens: bool) -> Section:
    keys = [("license_status", "license status")]
    if "license" in kept:
        keys.append(("license", "SPDX license"))
    section = Section("Kept by license")
    section.tables = [_breakdown_table(kept, k, label, tokens) for k, label in keys]
    if len(kept):
        panels = []
        for k, label in keys:
            g = _by(kept, k)
            panels.append(
                (label, [str(v) for v in g[k]], [float(v) for v in g["docs"]], KEPT_COLOR)
            )
        section.plots.append(("license mix", plot_bars("License mix (kept documents)", panels)))
    return section


def _dropped(df: pd.DataFrame) -> Counter[str]:
    rows = df[df[DROP] != ""].groupby(DROP)["docs"].sum()
    return Counter({str(r): _int(n) for r, n in rows.items()})


def _attrition_section(attrition: Sequence[Mapping[str, Any]], df: pd.DataFrame) -> Section:
    """Steps in order, then every reason (reader rejects from the `reject` row's optional
    `reasons` mapping, drops from the stats) with its step."""
    read = next((_int(r.get("left")) for r in attrition if r.get("step") == "read"), 0)
    steps = Table(["step", "in", "removed", "left", "% of read removed"], [])
    for r in attrition:
        removed, left = _int(r.get("removed")), _int(r.get("left"))
        steps.rows.append(
            [str(r.get("step")), _n(left + removed), _n(removed), _n(left), _pct(removed, read)]
        )
    reasons = Table(["kind", "step", "reason", "rows", "% of read"], [], "removed rows per reason")
    reject = next((r for r in attrition if r.get("step") == "reject"), {})
    rejected = reject.get("reasons") or {}
    if _int(reject.get("removed")) and not rejected:
        rejected = {"(reasons not recorded)": reject.get("removed")}
    for kind, counts in (("rejected", rejected), ("dropped", _dropped(df))):
        for reason, n in sorted(counts.items(), key=lambda kv: (-_int(kv[1]), str(kv[0]))):
            step = "reject" if kind == "rejected" else str(reason).split(":", 1)[0]
            reasons.rows.append([kind, step, str(reason), _n(n), _pct(_int(n), read)])
    note = "A row counts for the first step that dropped it; later steps do not see it."
    section = Section("Attrition", [note], [steps, reasons])
    if attrition:
        section.plots.append(("attrition per step", plot_waterfall(attrition)))
    return section


def _cluster_sizes(near: Mapping[str, Any]) -> dict[int, int]:
    sizes = near.get("cluster_sizes") or {}
    return {_int(k): _int(v) for k, v in sizes.items() if _int(v)}


def _dedup_section(dedup: Mapping[str, Any], df: pd.DataFrame) -> Section:
    dropped = _dropped(df)
    near = dedup.get("near") or {}
    section = Section("Deduplication")
    if not dedup and not any(r.startswith("dedup:") for r in dropped):
        section.paragraphs.append("No dedup statistics were recorded.")
        return section
    rows = []
    if "exact_duplicate_ids" in dedup:
        rows.append(["exact: ids held by more than one live row", _n(dedup["exact_duplicate_ids"])])
    rows += [
        [f"removed as {r}", _n(n)] for r, n in sorted(dropped.items()) if r.startswith("dedup:")
    ]
    fields = (
        ("threshold", "near: Jaccard threshold"),
        ("bands", "near: LSH bands"),
        ("rows", "near: rows per band"),
        ("n_candidate_pairs", "near: candidate pairs"),
        ("n_verified_pairs", "near: verified pairs"),
        ("n_clusters", "near: clusters"),
        ("docs_in_clusters", "near: documents in clusters"),
        ("docs_removed", "near: documents removed"),
    )
    for key, label in fields:
        if key in near:
            value = near[key]
            rows.append([label, f"{value:g}" if isinstance(value, float) else _n(value)])
    section.tables.append(Table(["statistic", "value"], rows))
    sizes = _cluster_sizes(near)
    if sizes:
        hist = [[str(s), _n(c), _n(s * c)] for s, c in sorted(sizes.items())]
        section.tables.append(
            Table(
                ["cluster size", "clusters", "documents"], hist, "near-duplicate clusters by size"
            )
        )
        section.plots.append(("near-duplicate cluster sizes", plot_cluster_sizes(sizes)))
    return section


def _pii_section(df: pd.DataFrame) -> Section:
    kinds = sorted(c for c in df.columns if c.startswith("pii_"))
    section = Section("PII redacted")
    if not kinds:
        section.paragraphs.append("No PII counts were recorded.")
        return section
    section.paragraphs.append(
        "Redactions per type (typed placeholders such as <EMAIL>), in kept and in "
        "quarantined rows alike: dropped rows are redacted before they are written."
    )
    kept, gone = _kept(df), df[df[DROP] != ""]
    counts = [(c.removeprefix("pii_"), _int(kept[c].sum()), _int(gone[c].sum())) for c in kinds]
    counts.sort(key=lambda t: (-(t[1] + t[2]), t[0]))
    rows = [[k, _n(a + b), _n(a), _n(b)] for k, a, b in counts]
    section.tables.append(Table(["type", "total", "in kept rows", "in dropped rows"], rows))
    if any(a + b for _, a, b in counts):
        panel = (
            "redactions",
            [k for k, _, _ in counts],
            [float(a + b) for _, a, b in counts],
            "tab:orange",
        )
        section.plots.append(("PII redactions per type", plot_bars("PII redactions", [panel])))
    return section


def _meta_value(key: str, value: Any) -> str:
    if key == "seconds" and isinstance(value, int | float):
        return f"{value:.1f}"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _run_section(meta: Mapping[str, Any]) -> Section:
    keys = [k for k in RUN_KEYS if k in meta] + sorted(k for k in meta if k not in RUN_KEYS)
    rows = [[str(k), _meta_value(str(k), meta[k])] for k in keys]
    return Section("Run", tables=[Table(["key", "value"], rows)] if rows else [])


def _summary_section(df: pd.DataFrame, meta: Mapping[str, Any], line: str, holds: bool) -> Section:
    kept = _kept(df)
    text = f"Kept {_n(kept['docs'].sum())} documents, {_n(kept['chars'].sum())} characters"
    if _has_tokens(df):
        vocab = meta.get("tokenizer_vocab_size")
        of = f" of a byte-level BPE tokenizer (vocabulary {_n(vocab)})" if vocab else ""
        text += f", {_n(kept['tokens'].sum())} tokens{of} trained on the kept documents."
    else:
        text += ". No tokenizer ran: token counts are not reported."
    paragraphs = [text]
    if "open_only" in meta:
        paragraphs.append(f"Open output only (public-domain and permissive): {meta['open_only']}.")
    paragraphs.append(line if holds else f"WARNING: {line}")
    return Section("Summary", paragraphs)


def _profile_section(profile: Mapping[str, Any] | None) -> Section:
    """Where the run's time went: seconds per scoring step (CPU time summed over the
    tasks) and per global execution (wall time), and per 1,000 documents read, and each
    execution's tasks over time, so the next regression (or lost scaling) shows up here
    first."""
    if not profile or not profile.get("rows"):
        return Section("Time per step", ["No step ran."])
    rows = [
        [r["stage"], r["step"], f"{r['seconds']:.2f}", f"{r['per_1000_docs']:.2f}"]
        for r in profile["rows"]
    ]
    note = (
        f"{_n(profile['docs'])} documents read. Scoring steps: seconds summed over the "
        "scoring tasks; global executions: wall seconds."
    )
    tables = [Table(["stage", "step", "seconds", "s / 1,000 docs"], rows)]
    if phases := profile.get("phases"):
        tables.append(
            Table(
                ["execution", "tasks", "workers", "from s", "to s", "busy s", "CPUs idle"],
                [
                    [
                        p["phase"],
                        str(p["tasks"]),
                        str(p["workers"]),
                        f"{p['start_s']:.2f}",
                        f"{p['end_s']:.2f}",
                        f"{p['busy_s']:.2f}",
                        f"{p['idle_share']:.0%}",
                    ]
                    for p in phases
                ],
                caption="The executions' tasks over the run (seconds after its start): "
                "'CPUs idle' is the share of the run's CPUs x the execution's span its "
                "tasks left unused (its tail, scheduling); the driver works alone between "
                "executions.",
            )
        )
    return Section("Time per step", [note], tables=tables)


def build_sections(
    stats: pd.DataFrame,
    attrition: Sequence[Mapping[str, Any]],
    dedup: Mapping[str, Any],
    meta: Mapping[str, Any],
    profile: Mapping[str, Any] | None = None,
) -> list[Section]:
    """Every section of the datasheet, in reading order."""
    df = _prepared(stats)
    kept, tokens = _kept(df), _has_tokens(df)
    line, holds = _reconciliation(attrition, df)
    return [
        _summary_section(df, meta, line, holds),
        _attrition_section(attrition, df),
        _breakdown_section(kept, "collection", "collection", tokens),
        _breakdown_section(kept, "lang", "language", tokens),
        _license_section(kept, tokens),
        _dedup_section(dedup, df),
        _pii_section(df),
        _run_section(meta),
        _profile_section(profile),
    ]


def _md_cell(text: str) -> str:
    return escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def _md_align(table: Table, col: int) -> str:
    """`---:|` (right) for a column of numbers, `---|` otherwise."""
    cells = [row[col] for row in table.rows]
    numeric = bool(cells) and all(
        c.strip("%—").replace(",", "").replace(".", "").isdigit() or c == "—" for c in cells
    )
    return "---:|" if numeric else "---|"


def render_markdown(sections: Sequence[Section]) -> str:
    lines = ["# Corpus datasheet", "", "Plots: see datasheet.html next to this file.", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        lines += [p for para in s.paragraphs for p in (_md_cell(para), "")]
        for t in s.tables:
            lines += [f"*{t.caption}*", ""] if t.caption else []
            lines.append("| " + " | ".join(_md_cell(h) for h in t.header) + " |")
            lines.append("|" + "".join(_md_align(t, i) for i in range(len(t.header))))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
            lines.append("")
    return "\n".join(lines)


def render_html(sections: Sequence[Section]) -> str:
    parts = [
        '<!doctype html><html><head><meta charset="utf-8"><title>Corpus datasheet</title>',
        f"<style>{CSS}</style></head><body><h1>Corpus datasheet</h1>",
    ]
    for s in sections:
        parts.append(f"<section><h2>{escape(s.title)}</h2>")
        parts += [
            _warn(p) if p.startswith("WARNING") else f"<p>{escape(p)}</p>" for p in s.paragraphs
        ]
        for t in s.tables:
            parts.append(f"<h3>{escape(t.caption)}</h3>" if t.caption else "")
            parts.append(_table(t.header, t.rows))
        parts += [_img(png, alt) for alt, png in s.plots]
        parts.append("</section>")
    return "".join(parts) + "</body></html>"


def write_datasheet(
    out_dir: Path,
    stats: pd.DataFrame,
    attrition: Sequence[Mapping[str, Any]],
    dedup: Mapping[str, Any],
    meta: Mapping[str, Any],
    profile: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write `datasheet.md` and `datasheet.html` into `out_dir`; return their paths.

    stats: the runner's group stats (`docs`, `chars`, optional `tokens` and `pii_<type>`
      per drop_reason / collection / lang / license_status [/ license]).
    attrition: `{"step", "removed", "left"}` rows in order, starting with `read` and
      `reject`; the `reject` row may carry `reasons: {reason: rows}`.
    dedup: `{"exact_duplicate_ids": n, "near": {...}}`, any key may be missing.
    meta: run facts shown as they are (version, open_only, config, input,
      tokenizer_vocab_size, seconds, ...).
    profile: the runner's time per step (`{"docs", "rows": [{"stage", "step", "seconds",
      "per_1000_docs"}]}`), shown as a table; None leaves the section empty.
    """
    sections = build_sections(stats, attrition, dedup, meta, profile)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, page = out_dir / DATASHEET_MD, out_dir / DATASHEET_HTML
    md.write_text(render_markdown(sections))
    page.write_text(render_html(sections))
    return md, page
