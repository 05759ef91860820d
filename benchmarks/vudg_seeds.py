"""Per-protocol, per-question-type table over the seeds of a `rayworks bench vudg` folder.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/vudg_seeds.py OUT_DIR BENCH_DIR [BENCH_DIR ...]

BENCH_DIR: a finished `rayworks bench vudg` folder (its `runs/vudg/*` are taken) or a
`rayworks run vudg` folder; every such run trained and scored LODO, all-domain and
single-source on its own seed's data. Writes `OUT_DIR/vudg_seeds.md` / `.jsonl`
(`rayworks/pipelines/vudg/report.py:seed_rows`): accuracy overall and per question type
(action, attribute, object, temporal) per protocol, mean and 95% Student-t interval over
seeds against chance 1/6, and the paired-over-seeds protocol differences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from rayworks.pipelines.vudg.report import SEED_COLUMNS, seed_rows
from rayworks.platform.tables import write_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    runs = []
    for run in args.runs:
        runs += sorted(run.glob("runs/vudg/*")) if (run / "runs").is_dir() else [run]
    runs = [r for r in runs if (r / "summary.json").is_file()]
    pairs = [(r, json.loads((r / "summary.json").read_text())) for r in runs]
    pairs = [(r, s) for r, s in pairs if s.get("status", "completed") == "completed"]
    if not pairs:
        raise SystemExit(f"no completed vudg run under {[str(r) for r in args.runs]}")
    seeds = [yaml.safe_load((r / "config.yaml").read_text()).get("seed") for r, _ in pairs]
    done = [s for _, s in pairs]
    path = write_table(
        args.out_dir,
        seed_rows(done),
        SEED_COLUMNS,
        name="vudg_seeds",
        title=f"VUDG-mini over {len(done)} seeds ({seeds}); chance = 1/6:",
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
