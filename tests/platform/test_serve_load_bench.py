"""The pure pieces of benchmarks/serve_load.py: schedule, percentiles, summary, checks, table.

No Ray and no server: these run in well under a second.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import serve_load


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", " LocalHost "])
def test_loopback_hosts_pass(host: str) -> None:
    assert serve_load.check_loopback(host) in serve_load.LOOPBACK


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "example.com", "127.0.0.1.evil", "", "::"])
def test_other_hosts_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.1 or localhost"):
        serve_load.check_loopback(host)


def test_cli_refuses_a_remote_host_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="only targets"):
        serve_load.main(["--host", "192.168.1.10"])


def test_parse_rates_relative_and_absolute() -> None:
    assert serve_load.parse_rates("0.5x, 1X,20") == [(0.5, True), (1.0, True), (20.0, False)]
    for bad in ["", "0x", "-3", "abc", "inf"]:
        with pytest.raises(ValueError):
            serve_load.parse_rates(bad)


def test_serve_env_pairs() -> None:
    pairs = ["RAY_SERVE_LOG_TO_STDERR=0", "RAY_SERVE_X=a=b"]
    assert serve_load.parse_env(pairs) == {"RAY_SERVE_LOG_TO_STDERR": "0", "RAY_SERVE_X": "a=b"}
    for bad in ["RAY_SERVE_X", "PATH=/tmp", "=1"]:
        with pytest.raises(ValueError, match="serve-env"):
            serve_load.parse_env([bad])


def test_uniform_arrivals_are_evenly_spaced_and_bounded() -> None:
    times = serve_load.arrival_times(4.0, 100, 2.0, "uniform")
    assert times == [i / 4 for i in range(8)]  # 8 arrivals before 2 s, the first at 0
    assert serve_load.arrival_times(4.0, 3, 2.0, "uniform") == [0.0, 0.25, 0.5]  # count cap


def test_poisson_arrivals_have_the_rate_and_are_seeded() -> None:
    times = serve_load.arrival_times(50.0, 100_000, 200.0, "poisson", seed=1)
    gaps = np.diff([0.0, *times])
    assert len(times) == pytest.approx(50 * 200, rel=0.03)  # ~rate x duration
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert gaps.std() == pytest.approx(1 / 50, rel=0.05)  # exponential: sd = mean
    assert all(b > a for a, b in itertools.pairwise(times)) and times[-1] < 200.0
    assert times[:50] == serve_load.arrival_times(50.0, 50, 200.0, "poisson", seed=1)
    assert times[:50] != serve_load.arrival_times(50.0, 50, 200.0, "poisson", seed=2)


def test_arrival_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        serve_load.arrival_times(0.0, 10, 1.0)
    with pytest.raises(ValueError):
        serve_load.arrival_times(1.0, 10, 1.0, "bursty")
    assert serve_load.arrival_times(1.0, 0, 1.0) == []


def test_percentile_matches_numpy_linear() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        xs = rng.exponential(size=n).tolist()
        for q in (0, 50, 90, 99, 100):
            assert serve_load.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert math.isnan(serve_load.percentile([], 50))
    assert serve_load.percentile([3.0, 1.0, 2.0], 50) == statistics.median([3.0, 1.0, 2.0])


def test_summary_counts_codes_and_uses_only_200s_for_latency() -> None:
    rec = [
        {"status": 200, "latency_s": 0.010, "lag_s": 0.001, "tokens": 8},
        {"status": 200, "latency_s": 0.030, "lag_s": 0.000, "tokens": 6},
        {"status": 503, "latency_s": 0.002, "lag_s": 0.002, "tokens": 0, "detail": "text/plain: x"},
        {"status": 503, "latency_s": 0.004, "lag_s": 0.002, "tokens": 0, "detail": "later"},
        {"status": "ClientConnectorError", "latency_s": 0.5, "lag_s": 0.0, "tokens": 0},
    ]
    s = serve_load.summarize(rec, wall_s=2.0)
    assert s["codes"] == {"200": 2, "503": 2, "ClientConnectorError": 1}
    assert s["examples"] == {"503": "text/plain: x"}  # the first one seen; none without detail
    assert s["sent"] == 5
    assert s["p50_ms"] == pytest.approx(20.0) and s["p99_ms"] == pytest.approx(29.8)
    assert s["req_per_s"] == 1.0 and s["tokens_per_s"] == 7.0
    assert s["non200_p50_ms"] == pytest.approx(4.0)  # of 2, 4, 500 ms
    empty = serve_load.summarize([], 0.0)
    assert empty["codes"] == {} and math.isnan(empty["p50_ms"]) and math.isnan(empty["req_per_s"])


def test_capacity_check() -> None:
    check = serve_load.capacity_check
    assert check({"200": 10}, 0.5) == "ok"
    assert check({"200": 9, "503": 1}, 0.5) == "FAIL: 1x 503"  # any failure below capacity
    assert check({"200": 5, "503": 5}, 2.0) == "ok"  # above: 503 is the overload answer
    assert check({"200": 5, "500": 2, "503": 1}, 2.0) == "FAIL: 2x 500"
    assert check({"200": 5, "503": 5}, 1.0) == "-"  # near capacity: nothing asked


def test_markdown_table_has_command_machine_overhead_and_rows() -> None:
    paths = serve_load.OVERHEAD_PATHS
    summary = serve_load.summarize([], 1.0) | {"codes": {"200": 5, "503": 1}}
    summary["examples"] = {"503": "text/plain:  dropped\n  due to backpressure"}
    row = {"replicas": 1, "capacity": 30.0, "rate": 15.0, "load": 0.5, "load1": 1.25}
    row |= {"check": "ok", "summary": summary}
    report = {
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_load.py --requests 5",
        "machine": "x86_64, 2 CPUs",
        "model": "tiny",
        "arrivals": "poisson",
        "max_tokens": 8,
        "requests": 5,
        "duration_s": 10.0,
        "overhead": {
            "n": 3,
            "load1": 0.5,
            "p50_ms": dict(zip(paths, [2.0, 3.0, 9.0, 20.0, 8.0], strict=True)),
            "p90_ms": dict.fromkeys(paths, 30.0),
            "overhead_p50_ms": 11.0,
            "paired_p50_ms": 10.5,
        },
        "rows": [row],
    }
    text = serve_load.markdown(report)
    assert "`HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_load.py --requests 5`" in text
    assert "2 CPUs" in text and "NOT met" in text and "11.00 ms at p50" in text
    assert "FastAPI app adds 1.00 ms" in text and "handle adds 7.00 ms" in text
    line = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    header = next(line for line in text.splitlines() if line.startswith("| replicas"))
    assert len(cells) == len(header.strip("|").split("|"))
    assert cells[:4] == ["1", "30.0", "15.0", "0.50"] and cells[-1] == "1.25"
    assert "200: 5, 503: 1" in cells
    assert "-" in cells  # NaN latencies shown as '-'
    assert "- 503: `text/plain: dropped due to backpressure`" in text  # whitespace folded
    report["overhead"]["overhead_p50_ms"] = 4.0
    assert "goal ≤ 5 ms: met" in serve_load.markdown(report)
