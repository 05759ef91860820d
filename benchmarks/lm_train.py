"""Throughput of `rayworks run lm` against a plain single-process PyTorch loop.

Both train the same model on the same data for the same steps (the `lm_plain` loop, run
here in this process without Ray; the `lm` pipeline on embedded local Ray with its DDP
workers), measured in one script run. Two figures per side:
  steady tokens/s  mean of the logged tokens_per_s after the first log window (warm loop)
  end-to-end       tokens trained / wall time including Ray, worker-group start and eval
and the ratio rayworks / plain for each. The platform's overhead target at the small
preset: steady ratio >= 0.85.

    python benchmarks/lm_train.py [--preset small] [--set train.max_steps=300 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def steady_tokens_per_s(run_dir: Path) -> float:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows if "loss" in r and "val_loss" not in r]
    return statistics.fmean(rates[1:] if len(rates) > 1 else rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()

    from rayworks.core.config import build_config
    from rayworks.pipelines.lm.plain import PlainLMConfig
    from rayworks.pipelines.lm.plain import run as plain_run
    from rayworks.platform import launch
    from rayworks.platform.context import RunContext

    overrides = ["eval.exact_match=false", *args.overrides]
    root = Path(tempfile.mkdtemp(prefix="bench-lm-"))
    cfg = build_config(PlainLMConfig, args.preset, (), overrides)
    tokens = cfg.train.max_steps * cfg.train.batch_size * cfg.data.seq_len

    started = time.perf_counter()
    ctx = RunContext.create("lm_plain", cfg, root)
    plain = plain_run(cfg, ctx)
    plain_wall = time.perf_counter() - started
    plain_steady = steady_tokens_per_s(ctx.run_dir)

    started = time.perf_counter()
    result = launch.run(
        "lm", preset=args.preset, overrides=overrides, runs_dir=root, progress=False
    )
    ray_wall = time.perf_counter() - started
    ray_steady = steady_tokens_per_s(result.run_dir)

    rows = {
        "config": f"preset={args.preset} {' '.join(overrides)}",
        "steps": cfg.train.max_steps,
        "workers": cfg.train.num_workers,
        "plain_threads": cfg.train.num_workers * cfg.train.threads_per_worker,
        "plain_steady_tokens_per_s": plain_steady,
        "rayworks_steady_tokens_per_s": ray_steady,
        "steady_ratio": ray_steady / plain_steady,
        "plain_end_to_end_tokens_per_s": tokens / plain_wall,
        "rayworks_end_to_end_tokens_per_s": tokens / ray_wall,
        "end_to_end_ratio": plain_wall / ray_wall,
        "plain_val_loss": plain["val_loss"],
        "rayworks_val_loss": result.summary["val_loss"],
    }
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(
            f"{key:<{width}}  {value:.4g}"
            if isinstance(value, float)
            else f"{key:<{width}}  {value}"
        )
    (root / "lm_train.json").write_text(json.dumps(rows, indent=2))
    print(f"written to {root / 'lm_train.json'}")


if __name__ == "__main__":
    main()
