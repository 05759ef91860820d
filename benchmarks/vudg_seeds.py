"""Per-protocol, per-question-type table over the seeds of a `rayworks bench vudg` folder.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/vudg_seeds.py OUT_DIR BENCH_DIR [BENCH_DIR ...]

BENCH_DIR: a finished `rayworks bench vudg` folder (its `runs/vudg/*` are taken) or a
`rayworks run vudg` folder; every such run trained and scored LODO, all-domain and
single-source on its own seed's data. Writes `OUT_DIR/vudg_seeds.md` / `.jsonl`
(`rayworks/pipelines/vudg/report.py:seed_rows`): accuracy overall and per question type
(action, attribute, object, temporal) per protocol, mean and 95% Student-t interval over
seeds against chance 1/6, and the paired-over-seeds protocol differences; then, per seed,
the held-out questions of each protocol's runs pooled per type (from each run's
`artifacts/table.jsonl`) with their exact binomial (Clopper-Pearson) 95% interval, which
says whether that seed alone is above chance.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scipy.stats import binomtest
from seed_runs import completed_runs

from rayworks.pipelines.vudg.annotate import TYPES
from rayworks.pipelines.vudg.report import SEED_COLUMNS, seed_rows
from rayworks.platform.tables import Column, Table, write_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    found = completed_runs(args.runs, "vudg")
    pairs = [(r, s) for r, s, _ in found]
    seeds = [c.get("seed") for _, _, c in found]
    done = [s for _, s in pairs]
    pooled = []
    for (run, _), seed in zip(pairs, seeds, strict=True):
        cells = [json.loads(x) for x in (run / "artifacts/table.jsonl").read_text().splitlines()]
        for protocol in ("lodo", "all", "single"):
            for qtype in TYPES:
                mine = [c for c in cells if c.get("protocol") == protocol and c["type"] == qtype]
                k, n = sum(c["correct"] for c in mine), sum(c["questions"] for c in mine)
                ci = binomtest(k, n).proportion_ci(0.95, method="exact")
                pooled.append(
                    {
                        "seed": seed,
                        "protocol": protocol,
                        "type": qtype,
                        "correct": k,
                        "questions": n,
                        "accuracy": k / n,
                        "lo": ci.low,
                        "hi": ci.high,
                        "above_chance": bool(ci.low > 1 / 6),
                    }
                )
    columns = [
        Column("seed"),
        Column("protocol"),
        Column("type"),
        Column("n", "correct / questions", render=lambda r: f"{r['correct']} / {r['questions']}"),
        Column("accuracy", spec=".3f", right=True),
        Column("ci", "95% (exact)", render=lambda r: f"[{r['lo']:.3f}, {r['hi']:.3f}]"),
        Column("above", "above 1/6", render=lambda r: "yes" if r["above_chance"] else "no"),
    ]
    per_seed = Table(pooled, columns, "Per seed, held-out questions pooled over the runs:")
    path = write_table(
        args.out_dir,
        seed_rows(done),
        SEED_COLUMNS,
        name="vudg_seeds",
        title=f"VUDG-mini over {len(done)} seeds ({seeds}); chance = 1/6:",
        more=[per_seed],
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
