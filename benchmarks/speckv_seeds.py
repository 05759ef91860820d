"""SpecKV against SnapKV and the oracle over training seeds: the accuracy table of issue 28.

    RAYWORKS_RUNS_DIR=R HF_HUB_OFFLINE=1 .venv/bin/python -m rayworks run speckv --set seed=S
        (S = 0, 1, 2: each seed trains its own target and draft, then evaluates every row)
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speckv_seeds.py OUT_DIR RUN_DIR [RUN_DIR ...]

RUN_DIR: a `rayworks run speckv` folder or a `rayworks bench speckv` folder (its
`runs/speckv/*`). Writes `OUT_DIR/speckv_seeds.md` / `.jsonl`: per budget C, each KV
row's exact-match accuracy as mean and 95% Student-t interval over the seeds, and the
paired-over-seeds differences SpecKV - SnapKV and SpecKV - oracle; then, per seed, the
full-cache accuracy, the pass rule and the per-prompt paired intervals of those two
differences that the pass rule reads (`rayworks/pipelines/speckv/report.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seed_runs import completed_runs

from rayworks.platform.stats import mean_ci, paired_ci
from rayworks.platform.tables import Column, Table, write_table

ROWS = ("snapkv", "speckv", "speckv_weak", "oracle", "h2o", "streaming", "random")


def _interval(mean: float, lo: float, hi: float) -> str:
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def across_seeds(summaries: list[dict], budgets: list[int]) -> list[dict]:
    """One row per C: every KV row's accuracy over seeds and the paired differences."""
    rows = []
    for c in budgets:
        row: dict = {"C": c}
        for name in ROWS:
            vals = [s.get(f"acc_{name}_c{c}") for s in summaries]
            if None not in vals:
                m, lo, hi = mean_ci(vals)
                row[name] = f"{m:.3f} [{lo:.3f}, {hi:.3f}]"
        spec = [s[f"acc_speckv_c{c}"] for s in summaries]
        for other in ("snapkv", "oracle"):
            vals = [s.get(f"acc_{other}_c{c}") for s in summaries]
            if None not in vals:
                row[f"speckv_minus_{other}"] = _interval(*paired_ci(spec, vals))
        rows.append(row)
    return rows


def per_seed(found: list[tuple[Path, dict, dict]], budgets: list[int]) -> list[dict]:
    rows = []
    for run, s, cfg in found:
        row = {
            "seed": cfg.get("seed"),
            "run": run.name,
            "full": s["accuracy_full"],
            "pass_rule": s.get("pass_rule"),
            "prompt_tokens": s.get("mean_prompt_tokens"),
        }
        for c in budgets:
            if f"acc_diff_c{c}" in s:
                row[f"snap_c{c}"] = _interval(
                    s[f"acc_diff_c{c}"], s[f"acc_diff_lo_c{c}"], s[f"acc_diff_hi_c{c}"]
                )
            if f"speckv_minus_oracle_c{c}" in s:
                row[f"oracle_c{c}"] = _interval(
                    s[f"speckv_minus_oracle_c{c}"],
                    s[f"speckv_minus_oracle_lo_c{c}"],
                    s[f"speckv_minus_oracle_hi_c{c}"],
                )
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    found = sorted(completed_runs(args.runs, "speckv"), key=lambda f: f[2].get("seed", 0))
    budgets = sorted(found[0][2]["budgets"])
    summaries = [s for _, s, _ in found]
    seeds = [c.get("seed") for _, _, c in found]
    columns = [
        Column("C"),
        *(Column(name) for name in ROWS),
        Column("speckv_minus_snapkv", "SpecKV - SnapKV"),
        Column("speckv_minus_oracle", "SpecKV - oracle"),
    ]
    seed_columns = [
        Column("seed"),
        Column("run"),
        Column("prompt_tokens", "prompt tokens", ".1f"),
        Column("full", "full cache", ".3f"),
        Column("pass_rule", "pass rule", ".0f"),
        *(Column(f"snap_c{c}", f"SpecKV - SnapKV, C={c}") for c in budgets),
        *(Column(f"oracle_c{c}", f"SpecKV - oracle, C={c}") for c in budgets if c <= 32),
    ]
    path = write_table(
        args.out_dir,
        across_seeds(summaries, budgets),
        columns,
        name="speckv_seeds",
        title=(
            f"Exact-match accuracy over {len(found)} training seeds ({seeds}): mean [95% t "
            "interval over seeds]; differences paired over seeds:"
        ),
        more=[
            Table(
                per_seed(found, budgets),
                seed_columns,
                "Per seed: differences paired over the test prompts (what the pass rule reads):",
            )
        ],
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
