"""bench: statistics, the written table, and lm against its plain baseline on Ray."""

from __future__ import annotations

import json
import math

import pytest

from rayworks.errors import ConfigError
from rayworks.platform import bench


def test_mean_ci_matches_the_t_interval():
    mean, (_lo, hi) = bench.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert hi - mean == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-4)
    assert bench.mean_ci([5.0]) == (5.0, (5.0, 5.0))
    assert math.isnan(bench.mean_ci([float("nan")])[0])


def test_markdown_starts_with_the_command_and_shows_the_ratio():
    data = bench.summarize(
        "m", "acc", "max", [("m", "method"), ("b", "baseline")], {"m": [0.8, 0.9], "b": [0.4, 0.5]},
        "rayworks bench m --seeds 2", [],
    )  # fmt: skip
    md = bench.to_markdown(data)
    assert md.splitlines()[0] == "`rayworks bench m --seeds 2`"
    assert data["ratio"] == pytest.approx(0.85 / 0.45)
    assert "1.889 vs b" in md


def test_pipeline_without_baseline_is_refused():
    with pytest.raises(ConfigError, match="declares no baseline"):
        bench.bench("lm_plain", seeds=1)


def test_lm_matches_its_plain_pytorch_baseline(ray_session, tmp_path):
    result = bench.bench(
        "lm", seeds=1, preset="smoke", overrides=["train.max_steps=10"], runs_dir=tmp_path
    )
    data = json.loads((result.out_dir / "bench.json").read_text())
    assert [a["name"] for a in data["arms"]] == ["lm", "lm_plain"]
    assert all(len(a["values"]) == 1 and math.isfinite(a["values"][0]) for a in data["arms"])
    # Same data order, init and schedule: DDP over two workers reproduces the plain loop.
    assert data["ratio"] == pytest.approx(1.0, abs=0.01)
    assert (result.out_dir / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((result.out_dir / "runs").glob("*/*/summary.json"))) == 2
