"""DPad speed: wall-clock and FLOP-proxy speedups vs vanilla and vs vanilla + ET, one script.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dpad_speed.py
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dpad_speed.py --preset smoke

Uses the `dpad` pipeline's cached model for the given preset / overrides (trained under
`runs/cache/dpad_model/` first if absent, exactly as `rayworks run dpad` would), the same
test prompts, and decodes them with vanilla, vanilla + ET, DPad + ET, parallel + prefix
cache + ET and the same + DPad, at every gen length, `--repeats` times in a rotating order
so a load spike does not hit one decoder only. Wall-clock is the median over repeats of the
seconds per sample; FLOP proxies (tokens x layers, query-key pairs x layers; see
`rayworks/pipelines/dpad/decode.py`) are exact counts. Speedups are ratios of numbers
measured in this one process. Writes benchmarks/results/dpad_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

DECODERS = ["vanilla", "vanilla_et", "dpad_et", "parallel_cache_et", "parallel_cache_dpad_et"]
REFS = {
    "dpad_et": ("vanilla", "vanilla_et"),
    "parallel_cache_et": ("vanilla", "vanilla_et"),
    "parallel_cache_dpad_et": ("vanilla", "vanilla_et", "parallel_cache_et"),
}


def main() -> None:
    import numpy as np
    import torch

    from rayworks.core.config import build_config
    from rayworks.models.diffusion_lm import load_diffusion_lm
    from rayworks.pipelines.dpad.config import DPadConfig
    from rayworks.pipelines.dpad.grid import evaluate
    from rayworks.pipelines.dpad.pipeline import TEST_SEED_OFFSET
    from rayworks.pipelines.dpad.tasks import make_batch
    from rayworks.pipelines.dpad.train import cached_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--n-test", type=int, default=32, help="test prompts (pipeline: n_test)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default="runs/cache", help="the pipelines' shared cache root")
    ap.add_argument("--out", default="benchmarks/results/dpad_speed.json")
    args = ap.parse_args()

    cfg = build_config(DPadConfig, args.preset, (), [*args.sets, f"n_test={args.n_test}"])
    torch.set_num_threads(args.threads)
    model_dir = cached_model(cfg, Path(args.cache))
    model = load_diffusion_lm(model_dir)
    test = make_batch(cfg.n_test, cfg.data, np.random.default_rng(cfg.seed + TEST_SEED_OFFSET))
    lengths = sorted(cfg.gen_lengths)
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    load_before = os.getloadavg()
    t0 = time.time()
    for rep in range(args.repeats):
        for g in lengths:
            order = DECODERS[rep % len(DECODERS) :] + DECODERS[: rep % len(DECODERS)]
            for name in order:
                row, _, _ = evaluate(model, test, g, name, cfg)
                runs.setdefault((g, name), []).append(row)
                print(f"rep {rep} gen {g} {name}: {row}", flush=True)
    rows = []
    for g in lengths:
        res = {}
        for name in DECODERS:
            reps = runs[(g, name)]
            res[name] = {
                "acc": reps[0]["acc"],
                "nfe": reps[0]["nfe"],
                "tokens": reps[0]["tokens"],
                "pairs": reps[0]["pairs"],
                "sec": statistics.median(r["sec"] for r in reps),
                "sec_all": [r["sec"] for r in reps],
            }
        for name, refs in REFS.items():
            for ref in refs:
                for k, key in (("tokens", "tokens"), ("pairs", "pairs"), ("wall", "sec")):
                    res[name][f"speedup_{k}_vs_{ref}"] = res[ref][key] / res[name][key]
        rows.append({"gen_length": g, "decoders": res})
        print(
            f"gen {g}: DPad+ET vs vanilla  tokens {res['dpad_et']['speedup_tokens_vs_vanilla']:.2f}x "
            f"wall {res['dpad_et']['speedup_wall_vs_vanilla']:.2f}x | vs vanilla+ET tokens "
            f"{res['dpad_et']['speedup_tokens_vs_vanilla_et']:.2f}x wall "
            f"{res['dpad_et']['speedup_wall_vs_vanilla_et']:.2f}x"
        )
    out = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "model_dir": str(model_dir),
        "config": {
            "preset": args.preset,
            "sets": args.sets,
            "n_test": cfg.n_test,
            "block_length": cfg.block_length,
            "dropout": cfg.dropout.model_dump(),
            "threshold": cfg.threshold,
            "threads": args.threads,
            "repeats": args.repeats,
        },
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "seconds": time.time() - t0,
        "rows": rows,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
