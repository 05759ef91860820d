"""The run's artifacts: the grid as JSONL and Markdown, and a plot against gen length."""

from __future__ import annotations

from pathlib import Path

from rayworks.pipelines.dpad.grid import ACC_DIFFS, METRICS, PAIRS
from rayworks.platform.stats import mean_ci, paired_ci


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


# (label, decoder, reference) of the per-seed paired differences `seed_rows` reports.
SEED_DIFFS = (
    ("dpad-van", "dpad_et", "vanilla_et"),
    ("w0-dpad", "w0_et", "dpad_et"),
    ("dpad-unif", "dpad_et", "dpad_uniform_et"),
)
SEED_ACCS = ("vanilla", "vanilla_et", "dpad_et", "w0_et", "dpad_uniform_et")


def _put(row: dict, key: str, stat: tuple[float, float, float], sign: str = "") -> None:
    """`row[key]` = "mean [low, high]", and the three numbers as `<key>_mean/_lo/_hi`."""
    mean, lo, hi = stat
    row[key] = f"{mean:{sign}.3f} [{lo:{sign}.3f}, {hi:{sign}.3f}]"
    row[f"{key}_mean"], row[f"{key}_lo"], row[f"{key}_hi"] = stat


def seed_rows(summaries: list[dict[str, float]]) -> list[dict[str, float | str]]:
    """One row per gen length over the seeds' `dpad` summaries (one per seed, same config):
    each decoder's exact match (overall and on addition), mean and 95% Student-t interval
    over seeds; the paired-over-seeds differences of `SEED_DIFFS`; and DPad+ET's token-proxy
    and wall-clock speedups over vanilla+ET. Cells are "mean [low, high]" strings, the
    numbers are kept beside them (`<key>_mean`, `_lo`, `_hi`) for the jsonl."""
    gens = sorted(int(k.rsplit("_g", 1)[1]) for k in summaries[0] if k.startswith("accuracy_g"))
    rows: list[dict[str, float | str]] = []
    for g in gens:
        row: dict[str, float | str] = {"gen": g, "seeds": len(summaries)}
        for name in SEED_ACCS:
            for suffix in ("acc", "acc_add_lsb"):
                key = f"{name}_{suffix}_g{g}"
                if key in summaries[0]:
                    _put(row, f"{name}_{suffix}", mean_ci([s[key] for s in summaries]))
        for label, name, ref in SEED_DIFFS:
            a, b = f"{name}_acc_g{g}", f"{ref}_acc_g{g}"
            if a in summaries[0] and b in summaries[0]:
                _put(
                    row, label, paired_ci([s[a] for s in summaries], [s[b] for s in summaries]), "+"
                )
        for kind in ("tokens", "wall"):
            key = f"dpad_et_speedup_{kind}_vs_vanilla_et_g{g}"
            if key in summaries[0]:
                _put(row, f"speedup_{kind}", mean_ci([s[key] for s in summaries]))
        rows.append(row)
    return rows


SEED_COLUMNS = (
    "gen",
    "vanilla_et_acc",
    "dpad_et_acc",
    "w0_et_acc",
    "dpad_uniform_et_acc",
    "dpad-van",
    "w0-dpad",
    "dpad-unif",
    "vanilla_et_acc_add_lsb",
    "dpad_et_acc_add_lsb",
    "w0_et_acc_add_lsb",
    "speedup_tokens",
    "speedup_wall",
)
