"""Load on the TTC router vs the model deployment called directly, in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ttc_serve.py --clients 4 --seconds 8

Serves one checkpoint (`--checkpoint`, or a tiny random decoder built here) behind
`rayworks serve ttc` with the plain model endpoint next to it under `/direct`, then runs
`--clients` closed-loop HTTP clients on 127.0.0.1 for `--seconds` per arm:

- `direct n=B`: `POST /direct/v1/completions` with `n=budget` (one engine call, B samples);
- `router uniform k=B`: the router with the same B samples in one round (its overhead:
  window wait, allocation, answer extraction, one extra Serve hop);
- `router uniform k=1`: B rounds of one sample (what a round-by-round allocation costs);
- `router elimination k=1`: the paper's rule with self-consistency stops (fewer samples).

Prints a markdown table (p50/p99 latency, requests/s, errors, samples per request, p50
relative to direct) and writes it to `--out`. Timings are for this machine and model size:
at 30k parameters they measure serving overhead, not model compute.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def tiny_checkpoint(folder: Path) -> Path:
    """A random tiny decoder with a char tokenizer trained on arithmetic prompts."""
    import torch

    from rayworks.data.tasks.arithmetic import ArithmeticTask
    from rayworks.models import DecoderSpec, TokenizerSpec, decoder_for, train_tokenizer

    examples = ArithmeticTask().examples(200, "train", seed=0)
    tok = train_tokenizer(TokenizerSpec(), [e.prompt + e.completion for e in examples])
    torch.manual_seed(0)
    decoder_for(DecoderSpec(d_model=64, n_layer=2, n_head=2), tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def load(url: str, body: dict, clients: int, seconds: float, headers: dict) -> dict:
    """Closed-loop clients for `seconds`; latency percentiles, throughput, errors, samples."""
    lat: list[float] = []
    samples: list[int] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    prompts = [f"Q: {random.randint(0, 99)}+{random.randint(0, 99)}=\n" for _ in range(64)]

    def client(i: int) -> None:
        with requests.Session() as http:
            http.trust_env = False  # loopback: never through a proxy from the environment
            j = i
            while time.monotonic() < stop_at:
                j += clients
                start = time.monotonic()
                try:
                    resp = http.post(
                        url, json={**body, "prompt": prompts[j % 64]}, headers=headers, timeout=120
                    )
                    code = str(resp.status_code)
                except requests.RequestException as err:
                    code = type(err).__name__
                with lock:
                    if code == "200":
                        lat.append(time.monotonic() - start)
                        usage = resp.json()["usage"]
                        samples.append(usage.get("samples", body.get("n", 1)))
                    else:
                        errors[code] = errors.get(code, 0) + 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ms = np.array(lat) * 1000 if lat else np.array([np.nan])
    return {
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "rps": len(lat) / wall,
        "ok": len(lat),
        "errors": errors,
        "samples": float(np.mean(samples)) if samples else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", help="model folder (default: a tiny random decoder)")
    p.add_argument("--address", help="Ray cluster address (default: a local Ray)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--budget", type=int, default=4, help="samples per request")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--window-ms", type=float, default=20.0)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "ttc_serve.md"))
    args = p.parse_args(argv)

    from ray import serve

    from rayworks.pipelines.ttc.router import DIRECT_PREFIX, serve_ttc
    from rayworks.platform.cluster import connect

    key = "bench"
    checkpoint = args.checkpoint or tiny_checkpoint(Path(tempfile.mkdtemp(prefix="ttc-bench-")))
    connect(args.address)
    settings = {"budget": args.budget, "window_ms": args.window_ms, "cap_factor": 1.0}
    url = serve_ttc(
        [checkpoint],
        settings,
        port=args.port,
        api_key=key,
        min_replicas=1,
        max_replicas=1,
        model_cpus=0.5,
        direct=True,
        blocking=False,
    )
    headers = {"Authorization": f"Bearer {key}"}
    common = {"max_tokens": args.max_tokens, "temperature": 1.0}
    b = args.budget
    arms = [
        (f"direct n={b}", f"{url}{DIRECT_PREFIX}/v1/completions", {**common, "n": b}),
        (
            f"router uniform k={b}",
            f"{url}/v1/completions",
            {**common, "ttc": {"allocator": {"rule": "uniform", "k": b}}},
        ),
        (
            "router uniform k=1",
            f"{url}/v1/completions",
            {**common, "ttc": {"allocator": {"rule": "uniform", "k": 1}}},
        ),
        (
            "router elimination k=1",
            f"{url}/v1/completions",
            {**common, "ttc": {"allocator": {"rule": "elimination", "k": 1, "min_samples": 2}}},
        ),
    ]
    try:
        for _, arm_url, body in arms:  # warm-up: first calls load code paths
            requests.post(
                arm_url, json={**body, "prompt": "Q: 1+1=\n"}, headers=headers, timeout=120
            )
        results = [
            (name, load(u, body, args.clients, args.seconds, headers)) for name, u, body in arms
        ]
    finally:
        serve.shutdown()
    base = results[0][1]["p50"]
    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ttc_serve.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    lines = [
        f"# TTC router vs direct model calls ({args.clients} clients x {args.seconds:.0f} s "
        f"per arm, budget {b}, max_tokens {args.max_tokens}, window {args.window_ms:.0f} ms)",
        "",
        f"`{command.strip()}`",
        "",
        "| arm | p50 ms | p99 ms | req/s | ok | errors | samples/req | p50 vs direct |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for name, r in results:
        errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
        lines.append(
            f"| {name} | {r['p50']:.1f} | {r['p99']:.1f} | {r['rps']:.2f} | {r['ok']} "
            f"| {errs} | {r['samples']:.2f} | {r['p50'] / base:.2f}x |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
