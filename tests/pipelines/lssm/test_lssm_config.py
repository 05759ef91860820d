"""Configs: shipped presets load; bad keys and values are errors that name them."""

from __future__ import annotations

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.lssm.config import LSSMConfig
from rayworks.platform.registry import get_pipeline

NAMES = ["lssm", "lssm_mle", "lssm_mle_threshold", "lssm_n4sid", "lssm_hokalman"]


@pytest.mark.parametrize("name", NAMES)
def test_presets_load(name: str) -> None:
    cls = get_pipeline(name).config
    for preset in (None, *cls.presets):
        cfg = build_config(cls, preset, (), [])
        assert cfg.method not in cfg.compare
    default = build_config(cls, None, (), [])
    assert default.n_trials >= 20 and default.noise_levels == [0.1, 0.3]
    assert build_config(LSSMConfig, None, (), []).compare == ["mle"]
    assert name == "lssm" or (default.method, default.compare) == (name[len("lssm_") :], [])
    # one threshold needs no validation segment
    build_config(LSSMConfig, "smoke", (), ["thresholds=[0.2]", "val_fraction=0"])


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
        (["threshold=0.2"], "threshold"),  # replaced by the validated sweep `thresholds`
        (["thresholds=[0.1,0.1]"], "thresholds"),
        (["thresholds=[1.5]"], "thresholds"),
        (["thresholds=[]"], "thresholds"),
        (["val_fraction=0"], "val_fraction=0"),
        (["em_tol=-1"], "em_tol"),
    ],
)
def test_errors_name_the_bad_key(override: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(LSSMConfig, "smoke", (), override)
