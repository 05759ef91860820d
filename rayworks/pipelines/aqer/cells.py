"""Per-cell table of one or more `aqer` runs or benches: every (target, G, arm) cell as the
mean over seeds with a 95% Student-t interval, and AQER's wins per cell.

    python -m rayworks.pipelines.aqer.cells /tmp/runs_aqer_cnot/bench/aqer/<id> [...]

Reads each run's `config.yaml` (seed, gate_count, n_qubits) and `artifacts/table.jsonl`
under the given folders. A cell counts a seed once per arm (an `aqer` run that also ran
its baselines and a bench's separate baseline runs both contribute, first one kept).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rayworks.platform.stats import mean_ci

ARMS = ("aqer", "hec", "mps")


def fmt(m: float, lo: float, hi: float, n: int) -> str:
    """`mean [lo, hi] (n)` with three significant digits (infidelities span 1e-4 to 0.5)."""
    return f"{m:.3g} [{lo:.3g}, {hi:.3g}] ({n})"


def collect(folders: list[Path]) -> tuple[dict[str, Any], dict[tuple, dict[int, dict]]]:
    """(settings shared by the runs, {(target, g, arm): {seed: table row}})."""
    cells: dict[tuple, dict[int, dict]] = defaultdict(dict)
    settings: dict[str, Any] = {}
    for folder in folders:
        for table in sorted(folder.rglob("artifacts/table.jsonl")):
            cfg = yaml.safe_load((table.parent.parent / "config.yaml").read_text())
            run_settings = {"gate_count": cfg["gate_count"], "n_qubits": cfg["n_qubits"]}
            if settings and run_settings != settings:
                raise ValueError(f"{table}: {run_settings} differs from the others' {settings}")
            settings = run_settings
            for line in table.read_text().splitlines():
                row = json.loads(line)
                cells[(row["target"], row["g"], row["arm"])].setdefault(cfg["seed"], row)
    return settings, cells


def cell_lines(cells: dict[tuple, dict[int, dict]]) -> list[str]:
    """Markdown: one line per (target, G) with each arm's mean [95% CI] (seeds), G used."""
    lines = [
        "| target | G | AQER | HEC | MPS-layer (G used) | AQER ≤ HEC / ≤ MPS (seeds) |",
        "|---|---:|---|---|---|---|",
    ]
    keys = sorted({(t, g) for t, g, _ in cells}, key=lambda k: (k[0], k[1]))
    for target, g in keys:
        out = []
        for arm in ARMS:
            by_seed = cells.get((target, g, arm), {})
            if not by_seed:
                out.append("-")
                continue
            m, lo, hi = mean_ci([r["infidelity"] for r in by_seed.values()])
            used = {r["g_used"] for r in by_seed.values()}
            extra = f" ({'/'.join(str(int(u)) for u in sorted(used))})" if arm == "mps" else ""
            out.append(fmt(m, lo, hi, len(by_seed)) + extra)
        wins = []
        for rival in ("hec", "mps"):
            mine, theirs = cells.get((target, g, "aqer"), {}), cells.get((target, g, rival), {})
            seeds = sorted(set(mine) & set(theirs))
            n_win = sum(mine[s]["infidelity"] <= theirs[s]["infidelity"] for s in seeds)
            wins.append(f"{n_win}/{len(seeds)}")
        lines.append(f"| {target} | {g} | {' | '.join(out)} | {' / '.join(wins)} |")
    return lines


def headline_lines(cells: dict[tuple, dict[int, dict]]) -> list[str]:
    """Markdown: per G and arm, the mean over targets per seed, then mean [95% CI] over seeds."""
    lines = ["| G | AQER | HEC | MPS-layer |", "|---:|---|---|---|"]
    for g in sorted({g for _, g, _ in cells}):
        out = []
        for arm in ARMS:
            per_seed: dict[int, list[float]] = defaultdict(list)
            for (_, gg, a), by_seed in cells.items():
                if gg == g and a == arm:
                    for seed, row in by_seed.items():
                        per_seed[seed].append(row["infidelity"])
            if not per_seed:
                out.append("-")
                continue
            m, lo, hi = mean_ci([float(np.mean(v)) for v in per_seed.values()])
            out.append(fmt(m, lo, hi, len(per_seed)))
        lines.append(f"| {g} | {' | '.join(out)} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    settings, cells = collect(args.folders)
    print(
        f"N = {settings.get('n_qubits')}, gate_count = {settings.get('gate_count')}; "
        "mean infidelity [95% t-interval] (seeds)\n"
    )
    print("\n".join(headline_lines(cells)))
    print()
    print("\n".join(cell_lines(cells)))


if __name__ == "__main__":
    main()
