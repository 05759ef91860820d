"""Choose each setting's fine-tuning learning rate on the validation split.

`python -m rayworks.pipelines.wasi.tune_lr --cache DIR --seeds 0 1 --out FILE.json` fine-tunes
every (setting, lr) pair of the grid in this one process (one torch thread; the same cached
bases, data, batch order and epochs as `rayworks run wasi` with the same seeds) and picks,
per setting, the lr with the highest validation accuracy averaged over the seeds (ties go to
the lr closest to the paper's 0.05 in log scale). `--previous` reuses the (seed, setting, lr)
records of an earlier output, so a grid can be extended without rerunning it. Test accuracy is recorded in the output as
well, but plays no part in the choice. No memory probe runs here.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from rayworks.models.vit_train import pretrained_vit
from rayworks.pipelines.wasi.config import WASIConfig
from rayworks.pipelines.wasi.finetune import SettingSpec, load_target_data, run_setting

PAPER_LR = 0.05
GRID = {
    "vanilla": [0.02, 0.05, 0.1, 0.2],
    "wasi": [0.02, 0.05, 0.1, 0.2],
    "wasi_factors": [0.02, 0.05, 0.1, 0.2],
    "lora": [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0],
}


def choose(records: list[dict[str, Any]]) -> dict[str, float]:
    """Per setting kind, the lr of the best mean validation accuracy (ties: nearest 0.05)."""
    best: dict[str, float] = {}
    for kind in sorted({r["kind"] for r in records}):
        lrs = sorted({r["lr"] for r in records if r["kind"] == kind})
        mean = {  # rounded: equal counts of correct images must tie exactly
            lr: round(
                statistics.fmean(
                    r["val_accuracy"] for r in records if r["kind"] == kind and r["lr"] == lr
                ),
                9,
            )
            for lr in lrs
        }
        best[kind] = max(lrs, key=lambda lr: (mean[lr], -abs(math.log(lr / PAPER_LR))))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True, help="pretrained-base cache root")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--eps", type=float, default=0.8, help="ε of the WASI settings")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--previous", type=Path, help="an earlier --out file: its (seed, kind, lr) are reused"
    )
    args = parser.parse_args()
    records: list[dict[str, Any]] = []
    if args.previous is not None:
        records = json.loads(args.previous.read_text())["records"]
    done = {(r["seed"], r["kind"], r["lr"]) for r in records}
    for seed in args.seeds:
        cfg = WASIConfig(seed=seed, measure_rss=False, mem_batch=128, latency_reps=1)
        spec = cfg.model.model_copy(update={"n_classes": len(cfg.source_classes)})
        base = pretrained_vit(
            args.cache,
            spec,
            cfg.pretrain.model_copy(update={"seed": seed}),
            cfg.data,
            cfg.source_classes,
        )
        data = load_target_data(cfg)
        for kind, grid in GRID.items():
            update = "factors" if kind == "wasi_factors" else "full"
            eps = args.eps if kind.startswith("wasi") else None
            for lr in grid:
                if (seed, kind, lr) in done:
                    continue
                run_cfg = cfg.model_copy(update={"setting_lr": {kind: lr}})
                row = run_setting(base, SettingSpec(kind, eps, update), run_cfg, data, seed)
                rec = {k: row[k] for k in ("kind", "lr", "val_accuracy", "test_accuracy")}
                records.append({**rec, "seed": seed})
                print(json.dumps(records[-1]), flush=True)
                args.out.write_text(json.dumps({"records": records}, indent=1))
    chosen = choose(records)
    args.out.write_text(json.dumps({"records": records, "chosen": chosen}, indent=1))
    print(json.dumps({"chosen": chosen}))


if __name__ == "__main__":
    main()
