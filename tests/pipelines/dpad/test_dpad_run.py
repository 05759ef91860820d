"""`dpad` end to end through the CLI (smoke), the shared model cache, and config errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.dpad.config import GRID, DPadConfig
from rayworks.pipelines.dpad.pipeline import TEST_SEED_OFFSET, run_grid
from rayworks.pipelines.dpad.tasks import make_batch
from rayworks.platform.context import RunContext
from rayworks.platform.registry import get_pipeline


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="gen_lengths entry 40"):
        build_config(DPadConfig, "smoke", (), ["gen_lengths=[40,64]"])
    with pytest.raises(ConfigError, match=r"dropout\.a"):
        build_config(DPadConfig, "smoke", (), ["dropout.a=3.0"])
    with pytest.raises(ConfigError, match="decoders"):
        build_config(DPadConfig, "smoke", (), ["decoders=[dpad_et]"])
    with pytest.raises(ConfigError, match="wrong_decoder"):
        build_config(DPadConfig, "smoke", (), ["method=wrong_decoder"])
    with pytest.raises(ConfigError, match="max_seq_len"):
        build_config(DPadConfig, "default", (), ["model.max_seq_len=64"])
    with pytest.raises(ConfigError, match=r"train\.extra_lengths \[4\]"):
        build_config(DPadConfig, "smoke", (), ["train.extra_lengths=[4]"])
    vanilla = get_pipeline("dpad_vanilla").config
    assert build_config(vanilla, "smoke", (), []).decoders == ["vanilla", "vanilla_et"]


def test_smoke_run_and_baseline_share_the_cached_model(cli, cli_env) -> None:
    """`dpad` through the CLI; the baseline in process on the same runs folder (its cache)."""
    cli(["run", "dpad", "--preset", "smoke", "--no-progress"])
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    cfg = build_config(get_pipeline("dpad_vanilla").config, "smoke", (), [])
    base = run_grid(cfg, RunContext.create("dpad_vanilla", cfg, runs_dir=runs))
    assert len(list((runs / "cache" / "dpad_model").glob("*/artifacts/model/config.json"))) == 1
    [summary] = [json.loads(p.read_text()) for p in runs.glob("dpad/*/summary.json")]
    assert summary["status"] == "completed"
    assert summary["accuracy"] == summary["accuracy_g64"]
    assert summary["accuracy_vanilla"] == base["accuracy"]  # same model, prompts, seed
    assert summary["vanilla_nfe_g64"] == 64.0  # one token per step, no ET
    assert summary["speedup_tokens_vs_vanilla_et"] > 1.0  # DPad feeds fewer tokens
    assert summary["w0_et_tokens_g64"] < summary["dpad_et_tokens_g64"]
    assert summary["speedup_pairs_vs_vanilla"] > summary["speedup_tokens_vs_vanilla"]
    assert base["speedup_tokens_vs_vanilla"] == 1.0
    [art] = list(runs.glob("dpad/*/artifacts"))
    rows = [json.loads(line) for line in (art / "grid.jsonl").read_text().splitlines()]
    assert [r["gen_length"] for r in rows] == [32, 64]
    assert all(f"{name}/acc" in rows[0] for name in GRID)
    test = make_batch(cfg.n_test, cfg.data, np.random.default_rng(cfg.seed + TEST_SEED_OFFSET))
    counts = Counter(test.tasks)  # per-task accuracies average back to the overall one
    weighted = sum(n * summary[f"accuracy_{t}"] for t, n in counts.items()) / cfg.n_test
    assert weighted == pytest.approx(summary["accuracy"])
    assert summary["accuracy_copy"] == rows[-1]["dpad_et/acc_copy"]
    assert (art / "grid.png").stat().st_size > 0
    assert "parallel_cache_dpad_et" in (art / "grid.md").read_text()
