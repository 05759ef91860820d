"""Configs: shipped presets load; bad keys and values are errors that name them."""

from __future__ import annotations

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.lestd.config import LeSTDConfig
from rayworks.pipelines.lestd.lm import stdlib_files
from rayworks.platform.registry import get_pipeline


@pytest.mark.parametrize("name", ["lestd", "lestd_tucker", "lestd_svd"])
def test_presets_load(name: str) -> None:
    cls = get_pipeline(name).config
    for preset in (None, *cls.presets):
        cfg = build_config(cls, preset, (), [])
        assert cfg.headline_ratio in cfg.ratios
    assert build_config(get_pipeline("lestd_tucker").config, "smoke", (), []).method == "tucker"
    assert build_config(get_pipeline("lestd_svd").config, None, (), []).compare == []


@pytest.mark.parametrize(
    ("override", "names"),
    [
        (["headline_ratio=3"], "headline_ratio=3"),
        (["ratios=[1, 4]", "headline_ratio=4"], "ratios"),
        (["compare=[lestd]"], "compare"),
        (["method=cp"], "method"),
        (["lm.model.n_kv_head=1"], r"lm\.model\.n_kv_head=1"),
        (["r2_fractions=[0, 1]"], "r2_fractions"),
        (["prune_fraction=0"], "prune_fraction"),
        (["lm.seq_len=512"], r"lm\.seq_len=512"),
        (["lm.stepz=3"], "stepz"),
    ],
)
def test_errors_name_the_bad_key(override: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(LeSTDConfig, "smoke", (), override)


def test_stdlib_subset_is_deterministic_and_errors_name_the_key() -> None:
    files = stdlib_files(8, 20)
    assert files == stdlib_files(8, 20) and len(set(files)) == 8
    assert all(f.endswith(".py") for f in files)
    with pytest.raises(ValueError, match=r"lm\.n_files=100000"):
        stdlib_files(100000, 20)
