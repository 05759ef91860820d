"""Configs: shipped presets load; bad keys and values are errors that name them; the pass
rule reads the duplication sweep."""

from __future__ import annotations

import math

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.gdr.config import GDRConfig
from rayworks.pipelines.gdr.report import pass_rule
from rayworks.platform.registry import get_pipeline


@pytest.mark.parametrize("name", ["gdr", "gdr_euclid", "gdr_ipm", "gdr_firstorder"])
def test_presets_load(name: str) -> None:
    cls = get_pipeline(name).config
    for preset in (None, *cls.presets):
        cfg = build_config(cls, preset, (), [])
        assert cfg.arm not in cfg.compare
    # a baseline arm runs one instance: no sweeps, in the smoke preset too
    ipm = build_config(get_pipeline("gdr_ipm").config, "smoke", (), [])
    assert (ipm.arm, ipm.dup_ks, ipm.m_sweep, ipm.interp_ps) == ("ipm", [], [], [])
    assert build_config(GDRConfig, None, (), []).dup_ks == [1, 4, 16]


@pytest.mark.parametrize(
    ("override", "names"),
    [
        (["compare=[lewis]"], "compare"),
        (["arm=newton"], "arm"),
        (["oracle.radius_rels=[0, 1]"], r"oracle\.radius_rels"),
        (["baselines.ipm_mus=[1.0]"], r"baselines\.ipm_mus"),
        (["data.n_adversarial=5"], r"data\.n_adversarial=5"),
        (["interp_ps=[1.5]"], "interp_ps"),
        (["dup_ks=[0]"], "dup_ks"),
        (["m_sweep=[2]"], "m_sweep"),
        (["target=2"], "target"),
        (["oracle.stepz=3"], "stepz"),
    ],
)
def test_errors_name_the_bad_key(override: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(GDRConfig, "smoke", (), override)


def _dup(iters: list[float]) -> list[dict[str, float | str]]:
    return [{"arm": "lewis", "k": 4**i, "iters_to_target": n} for i, n in enumerate(iters)]


def test_pass_rule_reads_the_duplication_sweep() -> None:
    assert pass_rule(_dup([3, 4, 5]), "lewis", 2) == {"pass_rule": 1.0}
    assert pass_rule(_dup([3, 4, 6]), "lewis", 2) == {"pass_rule": 0.0}
    assert pass_rule(_dup([3, math.nan]), "lewis", 2) == {"pass_rule": 0.0}
    assert pass_rule(_dup([3]), "lewis", 2) == {}
    assert pass_rule(_dup([3, 3]), "ipm", 2) == {}
