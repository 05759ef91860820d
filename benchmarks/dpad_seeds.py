"""Per-gen-length table over the seeds of `dpad` runs that differ in their seed only.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dpad_seeds.py OUT_DIR RUN_DIR [RUN_DIR ...]

RUN_DIR: a finished `rayworks run dpad` folder (or a `rayworks bench dpad` folder, whose
`runs/dpad/*` are taken); each decoded every decoder on its seed's model and test
prompts. Writes `OUT_DIR/dpad_seeds.md` / `.jsonl`: exact match per decoder (mean and 95%
Student-t interval over seeds, overall and on addition), the paired-over-seeds differences
DPad+ET - vanilla+ET, W=0 - DPad+ET and Gaussian - uniform, and DPad+ET's token-proxy and
wall-clock speedups over vanilla+ET (`rayworks/pipelines/dpad/report.py:seed_rows`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from rayworks.pipelines.dpad.report import SEED_COLUMNS, seed_rows
from rayworks.platform.tables import write_table


def _config(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    runs = []
    for run in args.runs:
        runs += sorted(run.glob("runs/dpad/*")) if (run / "runs").is_dir() else [run]
    runs = [r for r in runs if (r / "summary.json").is_file()]
    summaries = [json.loads((r / "summary.json").read_text()) for r in runs]
    done = [(r, s) for r, s in zip(runs, summaries, strict=True) if s.get("status") == "completed"]
    if not done:
        raise SystemExit("no completed dpad run among the given folders")
    configs = [_config(r) for r, _ in done]
    seeds = [c.pop("seed") for c in configs]
    for c in configs:
        c.pop("num_threads", None)
    if any(c != configs[0] for c in configs) or len(set(seeds)) != len(seeds):
        raise SystemExit(f"the runs must differ in their seed only (seeds {seeds})")
    rows = seed_rows([s for _, s in done])
    title = (
        f"dpad, seeds {sorted(seeds)}, block_length {configs[0]['block_length']}: mean "
        f"[95% Student-t interval over seeds]; runs: {', '.join(r.name for r, _ in done)}"
    )
    print(write_table(args.out_dir, rows, SEED_COLUMNS, name="dpad_seeds", title=title))
    print((args.out_dir / "dpad_seeds.md").read_text())


if __name__ == "__main__":
    main()
