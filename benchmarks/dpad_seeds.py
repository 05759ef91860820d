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
from pathlib import Path

from seed_runs import completed_runs

from rayworks.pipelines.dpad.report import SEED_COLUMNS, seed_rows
from rayworks.platform.tables import write_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    found = completed_runs(args.runs, "dpad")
    done = [(r, s) for r, s, _ in found]
    configs = [c for _, _, c in found]
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
