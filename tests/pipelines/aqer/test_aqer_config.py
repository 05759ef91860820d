"""Configs: presets load; bad values are errors naming the key."""

from __future__ import annotations

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.aqer.config import AqerConfig
from rayworks.platform.registry import get_pipeline


@pytest.mark.parametrize("name", ["aqer", "aqer_hec", "aqer_mps"])
@pytest.mark.parametrize("preset", ["smoke", "tfim10", None])
def test_presets_load(name, preset) -> None:
    cfg = build_config(get_pipeline(name).config, preset, (), ())
    assert cfg.headline_gates in cfg.gates
    assert name == "aqer" or (cfg.compare == [] and cfg.scaling_qubits == [])


def test_baselines_are_arms_of_the_method() -> None:
    spec = get_pipeline("aqer")
    assert spec.baselines == ("aqer_hec", "aqer_mps")
    for name, arm in (("aqer_hec", "hec"), ("aqer_mps", "mps")):
        assert get_pipeline(name).fn is spec.fn and get_pipeline(name).config().arm == arm


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("headline_gates=7", "headline_gates"),
        ("gates=[0, 10]", "gates"),
        ("scaling_qubits=[200]", "scaling_qubits"),
        ("aqer.lr=-1", "aqer.lr"),
        ("n_qubits=40", "n_qubits"),
        ("compare=[aqer]", "compare"),
        ("targets.families=[mnist]", "targets.families"),
    ],
)
def test_bad_values_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_config(AqerConfig, None, (), (override,))


def test_cnot_counting_needs_even_budgets() -> None:
    with pytest.raises(ConfigError, match="gate_count"):
        build_config(AqerConfig, None, (), ("gate_count=cnot", "gates=[10, 15, 40]"))
    cfg = build_config(AqerConfig, None, (), ("gate_count=cnot",))
    assert cfg.gate_count == "cnot"
