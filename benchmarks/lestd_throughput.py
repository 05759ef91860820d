"""LeSTD compressed-domain inference vs the dense model: tokens/s in one process.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/lestd_throughput.py

Two models: the `lestd` default-preset char LM (d = 128, 8 heads; reused from
`runs/cache/lestd_lm/` or trained there first, about 6 CPU-min) and a random-weight wider
decoder (d = 256, 8 heads of 32) where attention FLOPs matter more than per-op overhead
(weights do not change the timing, only the shapes do, so its HOOI runs 2 sweeps only). For each method and ratio, the
dense and the compressed-domain model run the same full-sequence forward, interleaved,
`--reps` times each; tokens/s is the median. The compressed-domain model stores the sparse
core as a dense matrix with zeros (no custom kernel), so its FLOPs are those of the dense
core: R1 · 3 · H · R2 per token for Q, K, V plus the factor products. Writes
`benchmarks/results/lestd_throughput.json`; wall-clock on a shared machine is noisy, read
the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from rayworks.models import DecoderSpec, build_decoder
from rayworks.pipelines.lestd.compress import StageOptions, compress_model, layer_memos
from rayworks.pipelines.lestd.config import LeSTDConfig
from rayworks.pipelines.lestd.evaluate import tokens_per_s
from rayworks.pipelines.lestd.lm import cached_lm, load_lm

OUT = Path(__file__).parent / "results" / "lestd_throughput.json"


def models(cache: Path, seq_len: int) -> dict[str, tuple[torch.nn.Module, torch.Tensor, int]]:
    """name -> (model, token rows, HOOI sweeps)."""
    cfg = LeSTDConfig()
    folder, _ = cached_lm(cfg.lm, cfg.seed, cache)
    lm, val = load_lm(folder)
    torch.manual_seed(0)
    wide = build_decoder(
        DecoderSpec(d_model=256, n_layer=2, n_head=8, ffn_mult=4.0, max_seq_len=seq_len), 100
    ).eval()
    ids = torch.randint(4, 100, val.shape, generator=torch.Generator().manual_seed(0))
    return {"char_lm_d128": (lm, val, 10), "random_d256": (wide, ids[:, :seq_len], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--methods", nargs="+", default=["lestd", "tucker", "svd"])
    parser.add_argument("--rows", type=int, default=8, help="sequences per forward")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--cache", type=Path, default=Path("runs/cache"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for name, (model, ids, iters) in models(args.cache, 128).items():
        model.config.use_cache = False
        batch = ids[: args.rows]
        memos = layer_memos(model, iters=iters)
        for method in args.methods:
            for ratio in args.ratios:
                start = time.perf_counter()
                comp = compress_model(model, memos, method, ratio, StageOptions())
                if comp is None:
                    results.append(
                        {"model": name, "method": method, "ratio": ratio, "reachable": False}
                    )
                    continue
                compress_s = time.perf_counter() - start
                tps = tokens_per_s(
                    {"dense": model, "compressed": comp.compressed}, batch, args.reps
                )
                row = {
                    "model": name,
                    "method": method,
                    "ratio": ratio,
                    "reachable": True,
                    "compress_s": compress_s,
                    "dense_tokens_per_s": tps["dense"],
                    "compressed_tokens_per_s": tps["compressed"],
                    "speedup": tps["compressed"] / tps["dense"],
                    **comp.stats,
                }
                results.append(row)
                print(
                    f"{name:13s} {method:7s} {ratio:3d}x  dense {tps['dense']:9.0f} tok/s  "
                    f"compressed {tps['compressed']:9.0f} tok/s  x{row['speedup']:.2f}"
                )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "rows": args.rows,
        "seq_len": int(batch.shape[1]),
        "reps": args.reps,
        "threads": 1,
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lestd_throughput.py",
    }
    OUT.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
