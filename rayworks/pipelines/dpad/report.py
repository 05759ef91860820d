"""The run's artifacts: the grid as JSONL and Markdown, and a plot against gen length."""

from __future__ import annotations

from pathlib import Path

from rayworks.pipelines.dpad.grid import ACC_DIFFS, METRICS, PAIRS


def markdown_table(rows: list[dict[str, float]], decoders: list[str]) -> str:
    """One line per (gen length, decoder), with speedups vs vanilla, vanilla_et and the pair."""
    head = (
        "| gen | decoder | acc | s/sample | NFE | token proxy | pair proxy | token acc | "
        "speedup tok/pair/wall vs vanilla | vs vanilla_et | vs own baseline |"
    )
    lines = [head, "|" + "---|" * 11]
    for row in rows:
        g = int(row["gen_length"])
        for name in decoders:
            vals = [row[f"{name}/{m}"] for m in METRICS]
            cells = [
                f"{vals[0]:.3f}",
                f"{vals[1]:.4f}",
                f"{vals[2]:.1f}",
                f"{vals[3]:.3g}",
                f"{vals[4]:.3g}",
                f"{vals[5]:.3f}",
            ]
            for ref in ("vanilla", "vanilla_et", PAIRS.get(name)):
                key = f"{name}/speedup_%s_vs_{ref}"
                if ref and key % "tokens" in row:
                    cells.append(
                        "/".join(f"{row[key % k]:.2f}" for k in ("tokens", "pairs", "wall"))
                    )
                else:
                    cells.append("-")
            lines.append(f"| {g} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def diff_table(rows: list[dict[str, float]]) -> str:
    """Paired exact-match differences (decoder - reference) with 95% CIs, per gen length."""
    pairs = [(n, r) for n, r in ACC_DIFFS if f"{n}/acc_diff_vs_{r}" in rows[0]]
    if not pairs:
        return ""
    head = "| decoder - reference | " + " | ".join(f"gen {int(r['gen_length'])}" for r in rows)
    lines = [head + " |", "|" + "---|" * (len(rows) + 1)]
    for name, ref in pairs:
        key = f"{name}/acc_diff_vs_{ref}"
        cells = [f"{r[key]:+.3f} [{r[key + '_lo']:+.3f}, {r[key + '_hi']:+.3f}]" for r in rows]
        lines.append(f"| {name} - {ref} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, float]], decoders: list[str], path: Path) -> Path:
    """Accuracy and token-proxy / wall-clock speedup vs vanilla_et, against gen length."""
    import matplotlib

    from rayworks.platform.figures import subplots

    gens = [int(r["gen_length"]) for r in rows]
    fig, axes = subplots(1, 3, figsize=(14, 4))
    palette = matplotlib.colormaps["tab20"]
    for i, name in enumerate(decoders):  # one colour per decoder in every panel
        style = {
            "marker": "o",
            "color": palette(i % 20),
            "label": name,
            "linestyle": "--" if name.startswith("parallel") else "-",
        }
        axes[0].plot(gens, [r[f"{name}/acc"] for r in rows], **style)
        for ax, kind in ((axes[1], "tokens"), (axes[2], "wall")):
            key = f"{name}/speedup_{kind}_vs_vanilla_et"
            if all(key in r for r in rows):
                ax.plot(gens, [r[key] for r in rows], **style)
    titles = (
        "exact-match accuracy",
        "token-proxy speedup vs vanilla+ET",
        "wall-clock speedup vs vanilla+ET",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(gens, [str(g) for g in gens])
        ax.set_xlabel("gen length")
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
