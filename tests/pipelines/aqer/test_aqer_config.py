"""Configs: presets load; bad values are errors naming the key."""

from __future__ import annotations

import pytest

from rayworks.errors import ConfigError
from rayworks.pipelines.aqer.config import AqerConfig, AqerHecConfig, AqerMpsConfig
from rayworks.platform.config import build_config


@pytest.mark.parametrize("cls", [AqerConfig, AqerHecConfig, AqerMpsConfig])
@pytest.mark.parametrize("preset", ["smoke", None])
def test_presets_load(cls, preset) -> None:
    cfg = build_config(cls, preset, (), ())
    assert cfg.headline_gates in cfg.gates


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
