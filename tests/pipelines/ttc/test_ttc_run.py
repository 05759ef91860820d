"""`ttc` end to end: the simulator level in process, the real-sampler level through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.ttc.config import TTCConfig
from rayworks.pipelines.ttc.pipeline import run_ttc
from rayworks.pipelines.ttc.sampler import cached_pool, queries
from rayworks.platform.context import RunContext


def test_simulator_level_curve_efficiency_and_theory(tmp_path: Path) -> None:
    cfg = build_config(TTCConfig, "smoke", (), ["budgets=[1,4,8]", "budget=8"])
    ctx = RunContext.create("ttc", cfg, runs_dir=tmp_path)
    summary = run_ttc(cfg, ctx)
    steps = [row["step"] for row in ctx.metrics()]
    assert steps == [1, 4, 8]
    assert summary["coverage"] == summary["coverage_b8"] >= summary["uniform_coverage"]
    assert summary["spent"] <= 8 * cfg.simulator.n_queries
    assert summary["efficiency"] >= 1.0 and summary["coverage_gain"] >= 0
    assert 0 <= summary["unsolvable_share"] <= 1
    assert summary["theory_ratio_n8"] == pytest.approx(8 / sum(1 / i for i in range(1, 9)))
    uniform = build_config(TTCConfig, "smoke", (), ["allocator.rule=uniform", "theory_sizes=[]"])
    flat = run_ttc(uniform, RunContext.create("ttc", uniform, runs_dir=tmp_path))
    assert flat["efficiency"] == 1.0 and flat["coverage_gain"] == 0.0
    assert "theory_fit" not in flat


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="budget=3"):
        build_config(TTCConfig, "smoke", (), ["budget=3"])
    with pytest.raises(ConfigError, match="pool_size"):
        build_config(TTCConfig, "smoke", (), ["level=sampler", "budgets=[1,64]", "budget=1"])
    with pytest.raises(ConfigError, match=r"allocator\.rule"):
        build_config(TTCConfig, "smoke", (), ["allocator.rule=greedy"])
    with pytest.raises(ConfigError, match="lam_grid"):
        build_config(TTCConfig, "smoke", (), ["lam_grid=[0.1,-1]"])


def test_sampler_level_through_cli(cli, cli_env) -> None:
    """SFT'd base (smoke), a response pool drawn by Ray tasks once, then replayed."""
    cli(
        [
            "run",
            "ttc",
            "--preset",
            "smoke",
            "--no-progress",
            "--set",
            "level=sampler",
            "--set",
            "allocator.rule=entropy",
        ]
    )
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    [summary] = [json.loads(p.read_text()) for p in runs.glob("ttc/*/summary.json")]
    assert summary["status"] == "completed"
    # the entropy rule's lam came from a pool of validation queries, disjoint from test
    cfg = build_config(TTCConfig, "smoke", (), ["level=sampler"])
    pools = {}
    for path in (runs / "cache" / "ttc_pool").glob("*/pool.json"):
        pools[path] = json.loads(path.read_text())
    test_prompts = [e.prompt for e in queries(cfg.sampler, cfg.seed, "test")]
    [pool] = [p for p, d in pools.items() if d["prompts"] == test_prompts]
    [val] = [d for p, d in pools.items() if p != pool]
    assert not set(val["prompts"]) & set(test_prompts) and len(val["prompts"]) == 6
    assert summary["lam"] in cfg.lam_grid
    [selection] = list(runs.glob("ttc/*/artifacts/lam_selection.jsonl"))
    assert [json.loads(r)["lam"] for r in selection.read_text().splitlines()] == cfg.lam_grid
    data = pools[pool]
    assert len(data["prompts"]) == 6 and all(len(row) == 8 for row in data["pool"])
    assert summary["spent"] <= 4 * 6 and 0 <= summary["coverage"] <= 1
    total = summary["share_easy"] + summary["share_hard"] + summary["share_unsolvable"]
    assert total == pytest.approx(1)
    [listing] = list(runs.glob("ttc/*/artifacts/queries.jsonl"))
    first = json.loads(listing.read_text().splitlines()[0])
    assert set(first) == {"prompt", "answer", "difficulty", "pass_rate", "malformed", "answers"}
    assert len(first["answers"]) == 4
    assert sum(summary[f"queries_d{d}"] for d in range(1, 6) if f"queries_d{d}" in summary) == 6
    # a second run of any rule replays the cached pool: same queries, nothing redrawn
    mtime = pool.stat().st_mtime_ns
    items, again = cached_pool(cfg.sampler, runs / "cache", cfg.seed)
    assert again == data["pool"] and [e.prompt for e in items] == data["prompts"]
    assert pool.stat().st_mtime_ns == mtime
