"""`vulcan` end to end through the CLI (smoke preset), and config errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.models.vit import load_vit
from rayworks.pipelines.vulcan.budget import vit_params
from rayworks.pipelines.vulcan.config import VulcanConfig
from rayworks.platform.registry import get_pipeline


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"classes=\[3, 3\]"):
        build_config(VulcanConfig, "smoke", (), ["classes=[3,3]"])
    with pytest.raises(ConfigError, match=r"model\.n_classes=5"):
        build_config(VulcanConfig, "smoke", (), ["model.n_classes=5"])
    with pytest.raises(ConfigError, match=r"rate=1\.5"):
        build_config(VulcanConfig, "smoke", (), ["rate=1.5"])
    with pytest.raises(ConfigError, match="width_rule"):
        build_config(VulcanConfig, "smoke", (), ["width_rule=random"])
    with pytest.raises(ConfigError, match=r"unknown key .post\.lamda_lr."):
        build_config(VulcanConfig, "smoke", (), ["post.lamda_lr=0.1"])
    with pytest.raises(ConfigError, match="width_multiple=32"):
        build_config(VulcanConfig, "smoke", (), ["width_multiple=32"])


def test_presets_load_and_steps_follow_the_formula() -> None:
    cfg = build_config(VulcanConfig, "default")
    assert cfg.post_steps() == 500 and cfg.method == "vulcan"
    assert build_config(VulcanConfig, "default", (), ["rate=0.6"]).post_steps() == 300
    assert build_config(get_pipeline("vulcan_prune_ft").config, "smoke").method == "prune_ft"


def test_smoke_run_through_cli(cli, cli_env) -> None:
    cli(["run", "vulcan", "--preset", "smoke", "--no-progress"])
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    [run_dir] = list(runs.glob("vulcan/*/"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    for key in (
        "test_accuracy",
        "base_test_accuracy",
        "base_ft_test_accuracy",
        "direct_test_accuracy",
        "prune_gap",
        "speedup",
    ):
        assert key in summary
    assert 0 <= summary["test_accuracy"] <= 1 and 0 < summary["param_ratio"] < 1
    pruned = load_vit(run_dir / "checkpoints" / "pruned")
    assert summary["params"] == vit_params(pruned.spec)
    assert pruned.spec.ffn_dims is not None and max(pruned.spec.ffn_dims) < 64
    rows = [json.loads(line) for line in (run_dir / "artifacts" / "table.jsonl").open()]
    assert [r["model"] for r in rows] == ["base", "base_ft", "direct", "vulcan_unpruned", "vulcan"]
    assert (run_dir / "artifacts" / "vulcan.png").stat().st_size > 0
    logged = [r["step"] for r in map(json.loads, (run_dir / "metrics.jsonl").open())]
    assert logged == [8, 16, 24, 32, 40, 48]  # two lrs of 24 steps, one after the other
    lrs = [json.loads(line) for line in (run_dir / "artifacts" / "lr_selection.jsonl").open()]
    assert {(r["arm"], r["lr"]) for r in lrs} == {
        (a, lr) for a in ("base_ft", "vulcan") for lr in (3e-3, 1e-2)
    }
    assert summary["vulcan_lr"] in (3e-3, 1e-2) and "base_ft_lr" in summary
