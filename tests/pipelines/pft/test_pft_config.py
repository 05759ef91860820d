"""Configs: shipped presets load; bad keys and values are errors that name them; pools too
small for the frames asked fail before any work; the pass rule reads its two limits
(accuracy gain, recall drop)."""

from __future__ import annotations

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.pft.config import PFTConfig
from rayworks.pipelines.pft.report import pass_rule
from rayworks.platform.registry import get_pipeline

NAMES = ["pft", "pft_source", "pft_adabn", "pft_tent", "pft_shot", "pft_neutral_ce", "pft_oracle"]


@pytest.mark.parametrize("name", NAMES)
def test_presets_load(name: str) -> None:
    cls = get_pipeline(name).config
    for preset in (None, *cls.presets):
        cfg = build_config(cls, preset, (), [])
        assert cfg.arm not in cfg.compare
        assert name == "pft" or cfg.compare == []
    default = build_config(PFTConfig, None, (), [])
    assert (default.data.n_source_subjects, default.data.n_target_subjects) == (16, 8)
    assert default.replicates == 3 and default.adapt.epochs == 25 and default.adapt.lr == 1e-4


@pytest.mark.parametrize(
    ("override", "names"),
    [
        (["compare=[pft]"], "compare"),
        (["arm=dann"], "arm"),
        (["data.classes=[1, 1]"], r"data\.classes"),
        (["data.classes=[1]"], r"data\.classes"),
        (["data.bias_range=[0.5, 0.2]"], r"data\.bias_range"),
        (["data.gamma_range=[0.0, 1.0]"], r"data\.gamma_range"),
        (["pft.translator=pooled_mlp"], r"pft\.lambda_style"),
        (["pft.style_layers=[0, 2]"], r"pft\.style_layers"),
        (["pft.translator=cnn"], r"pft\.translator"),
        (["data.split=train"], r"data\.split"),
        (["pft.style_layers=[3]"], r"pft\.style_layers"),
        (["adapt.lr=0"], r"adapt\.lr"),
        (["replicates=0"], "replicates"),
        (["data.test_frames_per_class=500"], r"data\.test_frames_per_class=500"),
        (["adapt.oracle_frames_per_class=80"], r"oracle_frames_per_class=80"),
        (["pft.gamma=3"], "gamma"),
    ],
)
def test_errors_name_the_bad_key(override: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(PFTConfig, "smoke", (), override)


def _agg(pft: tuple[float, float], source: tuple[float, float]) -> dict:
    return {
        a: {"accuracy": (acc,), "expressive_recall": (rec,)}
        for a, (acc, rec) in (("pft", pft), ("source", source))
    }


def test_pass_rule_reads_accuracy_gain_and_recall_drop() -> None:
    assert pass_rule(_agg((0.83, 0.76), (0.80, 0.80)), "pft", 0.03, 0.05)["pass_rule"] == 1.0
    assert pass_rule(_agg((0.82, 0.90), (0.80, 0.80)), "pft", 0.03, 0.05)["pass_rule"] == 0.0
    assert pass_rule(_agg((0.90, 0.74), (0.80, 0.80)), "pft", 0.03, 0.05)["pass_rule"] == 0.0
    assert pass_rule(_agg((0.9, 0.9), (0.8, 0.8)), "tent", 0.03, 0.05) == {}
    assert pass_rule({"pft": _agg((0.9, 0.9), (0.8, 0.8))["pft"]}, "pft", 0.03, 0.05) == {}
