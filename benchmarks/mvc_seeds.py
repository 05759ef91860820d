"""Over-seeds table of a `rayworks bench mvc` folder: MCD above the decoder floor, gain
over the mean-prosody arm, paired differences (`rayworks/pipelines/mvc/report.py:seed_rows`).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/mvc_seeds.py BENCH_DIR [OUT_DIR]

BENCH_DIR: a finished (or `--collect`ed) `rayworks bench mvc` folder. The method runs
(`runs/mvc/*`) hold the attention and mean-prosody arms of the same seed under the prefixes
`attn_` and `meanprosody_`; the ablation runs are `runs/ablation/<label>/mvc/*`. Writes
`OUT_DIR/mvc_seeds.md` / `.jsonl` (OUT_DIR defaults to BENCH_DIR): per arm the mean and
95% Student-t interval over seeds of MCD, MCD above the floor, the gain over the
mean-prosody arm of the same seed and log-F0 RMSE; then the paired-over-seeds differences
mvc - mvc_attn (with the above-floor ratio, the pass rule's quantity), mvc -
mvc_meanprosody and each ablation - mvc.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from rayworks.pipelines.mvc.pipeline import FLOORS
from rayworks.pipelines.mvc.report import SEED_COLUMNS, seed_rows
from rayworks.platform.tables import write_table

IN_RUN = {"mvc_attn": "attn_", "mvc_meanprosody": "meanprosody_"}


def _completed(root: Path) -> dict[int, dict[str, Any]]:
    """seed -> summary of the completed runs under `root` (one pipeline's run folders)."""
    out = {}
    for run in sorted(root.glob("*")):
        path = run / "summary.json"
        if not path.is_file():
            continue
        summary = json.loads(path.read_text())
        if summary.get("status", "completed") != "completed":
            continue
        out[int(yaml.safe_load((run / "config.yaml").read_text())["seed"])] = summary
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir", type=Path)
    parser.add_argument("out_dir", type=Path, nargs="?")
    args = parser.parse_args()
    method = _completed(args.bench_dir / "runs" / "mvc")
    if not method:
        raise SystemExit(f"no completed mvc run under {args.bench_dir / 'runs' / 'mvc'}")
    runs: dict[str, dict[int, dict[str, Any]]] = {"mvc": method}
    for arm, prefix in IN_RUN.items():
        n = len(prefix)
        runs[arm] = {
            seed: {
                **{k: s[k] for k in FLOORS},
                **{k[n:]: v for k, v in s.items() if k.startswith(prefix)},
            }
            for seed, s in method.items()
            if f"{prefix}mcd" in s
        }
    for folder in sorted((args.bench_dir / "runs" / "ablation").glob("*")):
        runs[f"mvc[{folder.name}]"] = _completed(folder / "mvc")
    rows = seed_rows({k: v for k, v in runs.items() if v})
    title = (
        f"mvc, seeds {sorted(method)}: mean [95% Student-t interval over seeds]; paired rows "
        "are differences over the seeds both arms have; bench: " + str(args.bench_dir)
    )
    out = args.out_dir or args.bench_dir
    print(write_table(out, rows, SEED_COLUMNS, name="mvc_seeds", title=title))
    print((out / "mvc_seeds.md").read_text())


if __name__ == "__main__":
    main()
