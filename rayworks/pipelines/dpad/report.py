"""The run's artifacts: the grid as JSONL and Markdown, and a plot against gen length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rayworks.pipelines.dpad.grid import ACC_DIFFS, METRICS, PAIRS
from rayworks.platform.stats import mean_ci, paired_ci
from rayworks.platform.tables import Column, Table, markdown, write_table

GRID_COLUMNS = (
    Column("gen", spec="d"),
    Column("decoder"),
    Column("acc", spec=".3f"),
    Column("sec", "s/sample", ".4f"),
    Column("nfe", "NFE", ".1f"),
    Column("tokens", "token proxy", ".3g"),
    Column("pairs", "pair proxy", ".3g"),
    Column("tok", "token acc", ".3f"),
    Column("vs_vanilla", "speedup tok/pair/wall vs vanilla"),
    Column("vs_vanilla_et", "vs vanilla_et"),
    Column("vs_own", "vs own baseline"),
)


def grid_view(rows: list[dict[str, float]], decoders: list[str]) -> list[dict[str, Any]]:
    """One row per (gen length, decoder): its metrics and its speedups (token proxy / pair
    proxy / wall) over vanilla, vanilla_et and its own baseline (`PAIRS`), "-" if absent."""
    view = []
    for row in rows:
        for name in decoders:
            out: dict[str, Any] = {"gen": int(row["gen_length"]), "decoder": name}
            out.update({m: row[f"{name}/{m}"] for m in METRICS})
            for col, ref in (("vs_vanilla", "vanilla"), ("vs_vanilla_et", "vanilla_et")):
                out[col] = _speedups(row, name, ref)
            out["vs_own"] = _speedups(row, name, PAIRS.get(name))
            view.append(out)
    return view


def _speedups(row: dict[str, float], name: str, ref: str | None) -> str | None:
    key = f"{name}/speedup_%s_vs_{ref}"
    if not ref or key % "tokens" not in row:
        return None
    return "/".join(f"{row[key % k]:.2f}" for k in ("tokens", "pairs", "wall"))


def diff_view(rows: list[dict[str, float]]) -> tuple[list[dict[str, str]], list[Column]]:
    """Paired exact-match differences (decoder - reference) with 95% CIs: a row per pair
    that ran, a column per gen length."""
    pairs = [(n, r) for n, r in ACC_DIFFS if f"{n}/acc_diff_vs_{r}" in rows[0]]
    gens = [f"gen {int(r['gen_length'])}" for r in rows]
    view = []
    for name, ref in pairs:
        key = f"{name}/acc_diff_vs_{ref}"
        cells = [f"{r[key]:+.3f} [{r[key + '_lo']:+.3f}, {r[key + '_hi']:+.3f}]" for r in rows]
        view.append(
            {"decoder - reference": f"{name} - {ref}", **dict(zip(gens, cells, strict=True))}
        )
    return view, [Column("decoder - reference"), *(Column(g) for g in gens)]


def diff_table(rows: list[dict[str, float]]) -> str:
    """`diff_view` as markdown; "" when no pair ran."""
    view, columns = diff_view(rows)
    return markdown(view, columns) if view else ""


def write_grid(folder: Path, rows: list[dict[str, float]], decoders: list[str]) -> Path:
    """`grid.jsonl` (the rows, one per gen length) and `grid.md` (`grid_view`, then the
    paired differences when any pair ran)."""
    view, columns = diff_view(rows)
    more = [Table(view, columns)] if view else []
    return write_table(
        folder, grid_view(rows, decoders), GRID_COLUMNS, name="grid", more=more, jsonl=rows
    )


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
