"""Configs: shipped presets load; bad keys and values are errors that name them."""

from __future__ import annotations

import pytest

from rayworks.errors import ConfigError
from rayworks.pipelines.lssm.config import (
    LSSMConfig,
    LSSMHoKalmanConfig,
    LSSMMLEConfig,
    LSSMMLEThresholdConfig,
    LSSMN4SIDConfig,
)
from rayworks.platform.config import build_config

CLASSES = [LSSMConfig, LSSMMLEConfig, LSSMMLEThresholdConfig, LSSMN4SIDConfig,
           LSSMHoKalmanConfig]  # fmt: skip


@pytest.mark.parametrize("cls", CLASSES)
def test_presets_load(cls: type[LSSMConfig]) -> None:
    for preset in (None, *cls.presets):
        cfg = build_config(cls, preset, (), [])
        assert cfg.method not in cfg.compare
    default = build_config(cls, None, (), [])
    assert default.n_trials >= 20 and default.noise_levels == [0.1, 0.3]
    assert build_config(LSSMConfig, None, (), []).compare == ["mle"]


@pytest.mark.parametrize(
    ("override", "names"),
    [
        (["compare=[map]"], "compare"),
        (["method=pem"], "method"),
        (["system=s4"], "system"),
        (["noise_levels=[]"], "noise_levels"),
        (["n4sid_block_rows=200"], "n4sid_block_rows=200"),
        (["markov_lags=150"], "markov_lags=150"),
        (["heatmap_trial=5"], "heatmap_trial=5"),
        (["gp_tol=0"], "gp_tol"),
        (["em_iterz=3"], "em_iterz"),
    ],
)
def test_errors_name_the_bad_key(override: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(LSSMConfig, "smoke", (), override)
