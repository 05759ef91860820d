"""Open-loop HTTP load on `rayworks serve model` (1 and 2 replicas), and the HTTP path's overhead.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_load.py [--requests 200]
        [--rates 0.5x,1x,2x] [--replicas 1,2] [--max-tokens 8] [--duration-s 10]
        [--arrivals poisson|uniform] [--overhead-requests 200] [--host 127.0.0.1]
        [--front actor|proxy] [--serve-env RAY_SERVE_<NAME>=<value> ...] [--out benchmarks/results/serve_load.md]

Serves a tiny random decoder (built here, as benchmarks/ttc_serve.py does) with
`serve_model` on an embedded local Ray, loopback only (any other `--host` is refused), with
the server's default slots: `max_ongoing_requests` 4 per replica, `max_queued_requests` 8.
Per `--replicas` arm:

- capacity: closed-loop clients (as many as the arm has slots) for `--calibrate-s`; the
  requests/s they complete is the arm's capacity, and a rate written `0.5x` is that multiple
  of it (a bare number is requests/s);
- per rate, open loop: arrivals on a fixed schedule (Poisson or uniform, seeded), at most
  `--requests` of them and none after `--duration-s`, each sent at its time whatever is
  still in flight. Latency runs from the scheduled time to the last byte, so queueing (and
  any lateness of this client, shown as `send lag`) is inside it. Every answer is counted by
  status code; tokens are the answers' `usage.completion_tokens`.

On the first arm, the HTTP overhead: the same `max_tokens=1` request, one at a time, through
`POST /v1/completions` (the HTTP front of `--front`: the uvicorn actor by default, or Serve's
proxy and the ingress deployment; then FastAPI, key check, JSON) and through the deployment handle
of a model replica (`serve.get_deployment_handle(MODEL_DEPLOYMENT, APP_NAME)
.complete.remote(body)`: `CompletionServer.complete`, the request model and
`engine.complete` that the HTTP route reaches through the ingress), alternating.
Two in-process paths (the engine alone, and its FastAPI app over httpx's ASGI transport)
and `GET /health` over HTTP split the difference into app, Ray hop and proxy.
`--serve-env` sets Ray Serve environment settings (e.g. `RAY_SERVE_LOG_TO_STDERR=0`)
before this script starts its local Ray, to measure what they change.

Writes `--out` (markdown) and the same numbers as .json beside it, with the command, the CPU
count and the 1-minute load average before each measurement. This client runs on the same
CPUs as the server, so at high rates it competes with it. Timings are reported, never
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

ROOT = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "results" / "serve_load.md"
LOOPBACK = ("127.0.0.1", "localhost")
KEY = "bench"
MODEL = "tiny"
SLOTS = 4  # serve_model's max_ongoing_requests per replica (and 8 queued): the defaults
OVERHEAD_PATHS = {  # path -> what it runs (see `overhead`)
    "engine": "`engine.complete` in this process (no HTTP, no Ray)",
    "app": "the FastAPI app in this process (httpx ASGI transport, no Ray)",
    "handle": "deployment handle `.complete.remote(body).result()`",
    "http": "HTTP `POST /v1/completions` (the front, FastAPI, a handle call)",
    "health": "HTTP `GET /health` (the front's round trip, no engine)",
}


# ---- pure parts (tests/platform/test_serve_load_bench.py) ----


def check_loopback(host: str) -> str:
    """`host` if it is 127.0.0.1 or localhost; anything else is refused (ValueError)."""
    if host.strip().lower() not in LOOPBACK:
        raise ValueError(f"--host {host!r}: this load test only targets 127.0.0.1 or localhost")
    return host.strip().lower()


def parse_rates(text: str) -> list[tuple[float, bool]]:
    """'0.5x,1x,20' -> [(0.5, True), (1.0, True), (20.0, False)]: x = times capacity."""
    rates = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        relative = part.lower().endswith("x")
        value = float(part[:-1] if relative else part)
        if not value > 0 or math.isinf(value):
            raise ValueError(f"rate {part!r} must be a positive number (req/s) or multiple (Nx)")
        rates.append((value, relative))
    if not rates:
        raise ValueError("no rates given")
    return rates


def parse_env(pairs: list[str]) -> dict[str, str]:
    """['RAY_SERVE_X=0', ...] -> {'RAY_SERVE_X': '0'}: Serve settings for Ray's processes."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("RAY_SERVE_"):
            raise ValueError(f"--serve-env {pair!r}: expected RAY_SERVE_<NAME>=<value>")
        env[key] = value
    return env


def arrival_times(
    rate: float, requests: int, duration_s: float, arrivals: str = "poisson", seed: int = 0
) -> list[float]:
    """Send offsets (s from the start) of an open-loop schedule at `rate` req/s: Poisson
    (exponential gaps, seeded) or uniform (every 1/rate s, the first at 0); at most
    `requests` of them, all before `duration_s`."""
    if rate <= 0 or requests < 0 or duration_s <= 0:
        raise ValueError("rate and duration_s must be > 0 and requests >= 0")
    if arrivals not in ("poisson", "uniform"):
        raise ValueError(f"arrivals must be poisson or uniform, not {arrivals!r}")
    rng, times, t = random.Random(seed), [], 0.0
    while len(times) < requests:
        if arrivals == "poisson":
            t += rng.expovariate(rate)
        else:
            t = len(times) / rate
        if t >= duration_s:
            break
        times.append(t)
    return times


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); NaN if empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(results: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """Per-rate numbers from request records {status, latency_s, lag_s, tokens, detail}:
    latency percentiles of 200s (ms), of the rest, throughput over `wall_s`, counts by
    status, and the first answer seen of each other status (`detail`)."""
    ok = [r for r in results if r["status"] == 200]
    other = [r["latency_s"] * 1000 for r in results if r["status"] != 200]
    lat = [r["latency_s"] * 1000 for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    codes = Counter(str(r["status"]) for r in results)
    examples: dict[str, str] = {}
    for r in results:
        if r["status"] != 200 and r.get("detail"):
            examples.setdefault(str(r["status"]), r["detail"])
    return {
        "sent": len(results),
        "codes": dict(sorted(codes.items())),
        "examples": dict(sorted(examples.items())),
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "non200_p50_ms": percentile(other, 50),
        "lag_p99_ms": percentile([r["lag_s"] * 1000 for r in results], 99),
        "wall_s": wall_s,
        "req_per_s": len(ok) / wall_s if wall_s > 0 else math.nan,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else math.nan,
    }


def capacity_check(codes: dict[str, int], load: float) -> str:
    """What we require of a rate at `load` x capacity: below (< 0.9) every answer is
    200; above (> 1.1) the only failures are 503s. Near capacity nothing is asked."""
    bad = {c: n for c, n in codes.items() if c != "200"}
    if load < 0.9:
        return "ok" if not bad else "FAIL: " + ", ".join(f"{n}x {c}" for c, n in bad.items())
    if load > 1.1:
        worse = {c: n for c, n in bad.items() if c != "503"}
        return "ok" if not worse else "FAIL: " + ", ".join(f"{n}x {c}" for c, n in worse.items())
    return "-"


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}"


def markdown(report: dict[str, Any]) -> str:
    """The results file: command, machine, overhead, then one row per arm and rate."""
    lines = [
        f"# `rayworks serve model` under open-loop load ({report['arrivals']} arrivals, "
        f"max_tokens {report['max_tokens']}, ≤ {report['requests']} requests or "
        f"{report['duration_s']:g} s per rate)",
        "",
        f"`{report['command']}`",
        "",
        f"Machine: {report['machine']}. Model: {report['model']}. Slots: {SLOTS} running per "
        "replica, 8 queued (serve_model's defaults). HTTP front: "
        f"{report.get('front', 'proxy')}. Ray Serve settings: "
        + (", ".join(f"`{k}={v}`" for k, v in report.get("serve_env", {}).items()) or "defaults")
        + ".",
        "",
    ]
    if ov := report.get("overhead"):
        p50, p90 = ov["p50_ms"], ov["p90_ms"]
        lines += [
            f"## HTTP overhead ({ov['n']} sequential requests per path, max_tokens 1, "
            f"load avg before {ov['load1']:.2f})",
            "",
            "| path | p50 ms | p90 ms |",
            "|---|---:|---:|",
            *(f"| {what} | {p50[k]:.2f} | {p90[k]:.2f} |" for k, what in OVERHEAD_PATHS.items()),
            "",
            f"HTTP minus handle: {ov['overhead_p50_ms']:.2f} ms at p50 (p50 of paired differences "
            f"{ov['paired_p50_ms']:.2f} ms); goal ≤ 5 ms: "
            f"{'met' if ov['overhead_p50_ms'] <= 5 else 'NOT met'}. In this process, the "
            f"FastAPI app adds {p50['app'] - p50['engine']:.2f} ms to the engine call; the "
            f"handle adds {p50['handle'] - p50['engine']:.2f} ms (Ray hop, other process).",
            "",
        ]
    lines += [
        "## Load",
        "",
        "| replicas | capacity req/s | offered req/s | x cap | sent | p50 ms | p90 ms | p99 ms "
        "| req/s | tokens/s | status codes | non-200 p50 ms | send lag p99 ms | check "
        "| load avg |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|",
    ]
    for row in report["rows"]:
        s = row["summary"]
        codes = ", ".join(f"{c}: {n}" for c, n in s["codes"].items())
        lines.append(
            f"| {row['replicas']} | {row['capacity']:.1f} | {row['rate']:.1f} | "
            f"{row['load']:.2f} | {s['sent']} | {_ms(s['p50_ms'])} | {_ms(s['p90_ms'])} | "
            f"{_ms(s['p99_ms'])} | {s['req_per_s']:.1f} | {s['tokens_per_s']:.0f} | {codes} | "
            f"{_ms(s['non200_p50_ms'])} | {_ms(s['lag_p99_ms'])} | {row['check']} | "
            f"{row['load1']:.2f} |"
        )
    seen: dict[str, str] = {}
    for row in report["rows"]:
        for code, detail in row["summary"].get("examples", {}).items():
            seen.setdefault(code, detail)
    if seen:
        lines += ["", "What the other answers were (the first of each status):", ""]
        lines += [f"- {code}: `{' '.join(d.split())}`" for code, d in seen.items()]
    lines += [
        "",
        "Latency: scheduled send time to last byte, 200s only. req/s and tokens/s: 200s over "
        "the time from the first scheduled send to the last answer. check: below 0.9x "
        "capacity every answer must be 200, above 1.1x only 503s may fail. load avg: 1-minute "
        "load average before the rate (or the overhead) ran.",
    ]
    return "\n".join(lines) + "\n"


# ---- Ray Serve parts ----


def body(i: int, max_tokens: int) -> dict[str, Any]:
    prompt = f"Q: {(i * 37) % 100}+{(i * 11) % 100}=\n"
    return {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": i,
    }


async def _post(http: Any, url: str, payload: dict) -> tuple[int | str, int, str]:
    """(status or the client error's name, completion tokens of a 200, what a non-200
    answer was: its content type and the start of its body)."""
    import aiohttp

    try:
        async with http.post(url, json=payload) as resp:
            data = await resp.read()
            if resp.status == 200:
                return 200, json.loads(data)["usage"]["completion_tokens"], ""
            text = data[:160].decode(errors="replace")
            return resp.status, 0, f"{resp.headers.get('content-type')}: {text}"
    except (TimeoutError, aiohttp.ClientError) as err:
        return type(err).__name__, 0, str(err)[:160]


def _session() -> Any:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),  # no client-side queue: open loop
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=aiohttp.ClientTimeout(total=120),
        trust_env=False,  # loopback: never through a proxy from the environment
    )


async def open_loop(url: str, offsets: list[float], max_tokens: int) -> dict[str, Any]:
    """Send one request at each offset regardless of completions; summarize them."""
    loop = asyncio.get_running_loop()
    async with _session() as http:
        t0 = loop.time() + 0.05

        async def one(i: int, at: float) -> dict[str, Any]:
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            sent = loop.time()
            status, tokens, detail = await _post(http, url, body(i, max_tokens))
            done = loop.time()
            return {
                "status": status,
                "latency_s": done - t0 - at,
                "lag_s": sent - t0 - at,
                "tokens": tokens,
                "detail": detail,
                "done": done,
            }

        results = await asyncio.gather(*(one(i, at) for i, at in enumerate(offsets)))
    wall = max((r.pop("done") for r in results), default=t0) - t0
    return summarize(results, wall)


async def closed_loop(url: str, clients: int, seconds: float, max_tokens: int) -> float:
    """Completed 200s per second of `clients` back-to-back clients: the arm's capacity."""
    loop = asyncio.get_running_loop()
    ok = 0
    async with _session() as http:
        start = loop.time()

        async def client(c: int) -> None:
            nonlocal ok
            i = c
            while loop.time() - start < seconds:
                status, _, _ = await _post(http, url, body(i, max_tokens))
                ok += status == 200
                i += clients

        await asyncio.gather(*(client(c) for c in range(clients)))
        return ok / (loop.time() - start)


def overhead(url: str, checkpoint: Path, n: int, warmup: int = 10) -> dict[str, Any]:
    """The same max_tokens=1 request, one at a time, along five paths in turn (ms):
    `engine` and `app` run a CompletionServer inside this process (engine.complete alone,
    then its FastAPI app through httpx's ASGI transport), `handle` and `http` reach the
    served replica, and `health` is `GET /health` over HTTP (the proxy's round trip)."""
    import httpx
    import requests
    from ray import serve

    from rayworks.platform.openai_schema import CompletionRequest
    from rayworks.platform.serve import APP_NAME, MODEL_DEPLOYMENT, CompletionApp

    local = CompletionApp(str(checkpoint), MODEL, KEY)  # as in a replica, in-process
    loop = asyncio.new_event_loop()  # not running between calls: handle.result() is allowed
    auth = {"Authorization": f"Bearer {KEY}"}
    asgi = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=local.__serve_build_asgi_app__()),
        base_url="http://app",
        headers=auth,
    )
    handle = serve.get_deployment_handle(MODEL_DEPLOYMENT, APP_NAME)  # a model replica
    load1 = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in OVERHEAD_PATHS}
    with requests.Session() as http:
        http.trust_env = False
        http.headers.update(auth)
        calls = {
            "engine": lambda p: local.engine.complete(CompletionRequest.model_validate(p)),
            "app": lambda p: loop.run_until_complete(asgi.post("/v1/completions", json=p)).json(),
            "handle": lambda p: handle.complete.remote(p).result(),
            "http": lambda p: http.post(f"{url}/v1/completions", json=p, timeout=60).json(),
            "health": lambda p: http.get(f"{url}/health", timeout=60).json(),
        }
        for i in range(warmup + n):
            payload = {**body(i, 1), "temperature": 0.0}
            answers = {}
            for path, call in calls.items():
                start = time.perf_counter()
                answers[path] = call(payload)
                if i >= warmup:
                    times[path].append((time.perf_counter() - start) * 1000)
            texts = {
                k: [c["text"] for c in a.get("choices", [])]
                for k, a in answers.items()
                if k != "health"
            }
            if len({json.dumps(t) for t in texts.values()}) != 1:
                raise RuntimeError(f"the paths answered differently: {texts}")
    loop.run_until_complete(asgi.aclose())
    loop.close()
    p50 = {k: percentile(v, 50) for k, v in times.items()}
    paired = [b - a for a, b in zip(times["handle"], times["http"], strict=True)]
    return {
        "n": n,
        "load1": load1,
        "p50_ms": p50,
        "p90_ms": {k: percentile(v, 90) for k, v in times.items()},
        "overhead_p50_ms": p50["http"] - p50["handle"],
        "paired_p50_ms": percentile(paired, 50),
    }


def run_arm(
    args: argparse.Namespace, checkpoint: Path, replicas: int, first: bool
) -> tuple[list[dict], dict | None]:
    """Deploy `replicas`, measure overhead (first arm), capacity, then each rate."""
    from ray import serve

    from rayworks.platform.serve import APP_NAME, serve_model

    url = serve_model(
        checkpoint,
        front=args.front,
        host=args.host,
        port=args.port,
        api_key=KEY,
        num_replicas=replicas,
        model_name=MODEL,
        blocking=False,
    )
    completions = f"{url}/v1/completions"
    try:
        asyncio.run(closed_loop(completions, SLOTS * replicas, 2.0, args.max_tokens))  # warm-up
        ov = None
        if first and args.overhead_requests:
            ov = overhead(url, checkpoint, args.overhead_requests)
        capacity = asyncio.run(
            closed_loop(completions, SLOTS * replicas, args.calibrate_s, args.max_tokens)
        )
        print(f"replicas={replicas}: capacity {capacity:.1f} req/s", flush=True)
        rows = []
        for k, (value, relative) in enumerate(parse_rates(args.rates)):
            rate = value * capacity if relative else value
            offsets = arrival_times(
                rate, args.requests, args.duration_s, args.arrivals, args.seed + k
            )
            load1 = os.getloadavg()[0]
            summary = asyncio.run(open_loop(completions, offsets, args.max_tokens))
            load = rate / capacity
            rows.append(
                {
                    "replicas": replicas,
                    "capacity": capacity,
                    "rate": rate,
                    "load": load,
                    "load1": load1,
                    "summary": summary,
                    "check": capacity_check(summary["codes"], load),
                }
            )
            print(
                f"  {rate:.1f} req/s ({load:.2f}x): {summary['codes']} p50 "
                f"{summary['p50_ms']:.1f} ms p99 {summary['p99_ms']:.1f} ms",
                flush=True,
            )
            time.sleep(1.0)  # let the last rate's stragglers and 503s settle
    finally:
        serve.delete(APP_NAME)
    return rows, ov


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200, help="at most this many per rate")
    p.add_argument(
        "--rates",
        default="0.5x,1x,2x",
        help="req/s, or multiples of the arm's measured capacity (Nx)",
    )
    p.add_argument("--replicas", default="1,2", help="comma-separated replica counts (arms)")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--duration-s", type=float, default=10.0, help="no arrival after this")
    p.add_argument("--arrivals", choices=["poisson", "uniform"], default="poisson")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calibrate-s", type=float, default=5.0, help="closed-loop capacity run")
    p.add_argument("--overhead-requests", type=int, default=200, help="0: skip")
    p.add_argument("--host", default="127.0.0.1", help="127.0.0.1 or localhost only")
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    p.add_argument(
        "--serve-env",
        action="append",
        default=[],
        metavar="RAY_SERVE_X=V",
        help="a Ray Serve setting for this run's local Ray (repeatable)",
    )
    p.add_argument(
        "--front",
        choices=["actor", "proxy"],
        default="actor",
        help="the model endpoint's HTTP front (serve_model's front)",
    )
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    args.host = check_loopback(args.host)
    serve_env = parse_env(args.serve_env)
    parse_rates(args.rates)  # fail before Ray starts
    replicas = [int(r) for r in args.replicas.split(",") if r.strip()]
    if not replicas or min(replicas) < 1:
        p.error(f"--replicas {args.replicas!r}: give replica counts >= 1, e.g. 1,2")
    if os.environ.get("RAY_ADDRESS"):  # serve_model would replace that cluster's app
        p.error("RAY_ADDRESS is set: this benchmark starts its own local Ray; unset it")
    if args.port == 0:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            args.port = sock.getsockname()[1]

    from ttc_serve import tiny_checkpoint

    from rayworks.platform.cluster import connect
    from rayworks.platform.serve import shutdown

    checkpoint = tiny_checkpoint(Path(tempfile.mkdtemp(prefix="serve-load-")))
    os.environ.update(serve_env)  # before Ray starts: its proxy and replicas inherit them
    connect()
    rows: list[dict] = []
    ov = None
    try:
        for j, r in enumerate(replicas):
            arm_rows, arm_ov = run_arm(args, checkpoint, r, first=j == 0)
            rows += arm_rows
            ov = ov or arm_ov
    finally:
        shutdown()
    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_load.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    report = {
        "command": command.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        "model": "random decoder d_model 64, 2 layers (benchmarks/ttc_serve.py tiny_checkpoint)",
        "arrivals": args.arrivals,
        "max_tokens": args.max_tokens,
        "requests": args.requests,
        "duration_s": args.duration_s,
        "serve_env": serve_env,
        "front": args.front,
        "overhead": ov,
        "rows": rows,
    }
    text = markdown(report)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
