"""Latency and KV memory of SpecKV vs SnapKV vs the full cache, measured in one script.

For each prompt length, the same target (and draft) run `compressed_prefill` with policy
`full`, `snapkv` and `speckv` at one budget C, then greedy-decode `new_tokens` tokens from
the returned cache. Reported per policy (median over `repeats`): draft seconds (SpecKV's
lookahead generation, `new_tokens` tokens: a random draft never stops early), prefill seconds (the target prefill, scoring and selection,
lookahead re-encoding included), decode seconds and KV bytes after prefill, and ratios
against the full cache measured in the same run. Models: the `speckv` pipeline's cached
models when `--models DIR` points at a `speckv_models/<hash>` folder, else random ones of
the default sizes (latency does not depend on the weights). Writes
`benchmarks/results/speckv_latency.json`.

    python benchmarks/speckv_latency.py [--lengths 256 1024 2048] [--budget 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--budget", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/speckv_latency.json"))
    args = parser.parse_args()

    import torch

    from rayworks.models.decoder import decoder_for, load_causal_lm
    from rayworks.models.kv_forward import forward
    from rayworks.pipelines.speckv.config import SpecKVConfig
    from rayworks.pipelines.speckv.kv_policies import compressed_prefill
    from rayworks.pipelines.speckv.tasks import make_tokenizer

    torch.set_num_threads(args.threads)
    cfg = SpecKVConfig()
    tok = make_tokenizer()
    longest = max(args.lengths) + args.new_tokens + 32
    if args.models is not None:
        target, draft = (load_causal_lm(args.models / n).eval() for n in ("target", "draft"))
    else:
        torch.manual_seed(0)
        target = decoder_for(cfg.target.model_copy(update={"max_seq_len": longest}), tok).eval()
        draft = decoder_for(cfg.draft.model_copy(update={"max_seq_len": longest}), tok).eval()

    def one(policy: str, ids: torch.Tensor) -> dict[str, float]:
        cache, logits, stats = compressed_prefill(
            target, ids, policy, args.budget, draft, max_new_tokens=args.new_tokens
        )
        t0 = time.perf_counter()
        for _ in range(args.new_tokens):
            tok_id = logits[0].argmax().view(1, 1)  # a fixed count of tokens for every policy
            logits = forward(target, tok_id, cache=cache, logits_rows=slice(-1, None))[:, -1]
        stats["decode_seconds"] = time.perf_counter() - t0
        return stats

    rows = []
    with torch.no_grad():
        for n in args.lengths:
            ids = torch.randint(8, len(tok), (1, n), generator=torch.Generator().manual_seed(n))
            for policy in ("full", "snapkv", "speckv"):
                one(policy, ids)  # warm-up
                runs = [one(policy, ids) for _ in range(args.repeats)]
                row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                row.update(policy=policy, prompt_tokens=n, budget=args.budget)
                row["total_seconds"] = (
                    row["draft_seconds"] + row["prefill_seconds"] + row["decode_seconds"]
                )
                rows.append(row)
            full = next(r for r in rows if r["prompt_tokens"] == n and r["policy"] == "full")
            for r in rows:
                if r["prompt_tokens"] == n:
                    r["total_vs_full"] = r["total_seconds"] / full["total_seconds"]
                    r["decode_vs_full"] = r["decode_seconds"] / full["decode_seconds"]
                    r["kv_vs_full"] = r["kv_bytes"] / full["kv_bytes"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=1))
    head = (
        "n",
        "policy",
        "draft s",
        "prefill s",
        "decode s",
        "total/full",
        "decode/full",
        "KV/full",
    )
    print(" | ".join(head))
    for r in rows:
        print(
            f"{r['prompt_tokens']} | {r['policy']} | {r['draft_seconds']:.4f} | "
            f"{r['prefill_seconds']:.4f} | {r['decode_seconds']:.4f} | {r['total_vs_full']:.2f} | "
            f"{r['decode_vs_full']:.2f} | {r['kv_vs_full']:.3f}"
        )


if __name__ == "__main__":
    main()
