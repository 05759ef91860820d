"""Name lookup imports only the package that registers the name (fresh interpreters)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from rayworks.platform.registry import PIPELINES, get_evaluation, get_pipeline
def loaded():
    prefix = "rayworks.pipelines."
    return sorted(m for m in sys.modules if m.startswith(prefix) and m.count(".") == 2)
get_pipeline("gdr_euclid")
gdr = loaded()
get_pipeline("wasi_lora")  # an arm: declared in wasi's @pipeline(arms=...)
wasi = loaded()
get_pipeline("grpo")
rl = loaded()
get_evaluation("calibration")
evals = sorted(m for m in sys.modules if m.startswith("rayworks.evals."))
print(json.dumps({"gdr": gdr, "wasi": wasi, "rl": rl, "evals": evals, "n": len(PIPELINES)}))
"""


def test_lookup_imports_only_the_package_that_registers_the_name() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["gdr"] == ["rayworks.pipelines.gdr"]
    assert got["wasi"] == ["rayworks.pipelines.gdr", "rayworks.pipelines.wasi"]
    # grpo lives in rl/grpo.py: found by the source scan, not by a package named grpo
    assert "rayworks.pipelines.rl" in got["rl"] and "rayworks.pipelines.aqer" not in got["rl"]
    assert "rayworks.evals.calibration" in got["evals"]
    assert "rayworks.evals.lm_eval" not in got["evals"]
    assert got["n"] < 20  # not every pipeline was imported (tests/test_cli.py: the fallback)


# -- arms: baselines declared as the method's config with other defaults -------------------


def test_an_arm_is_a_pipeline_of_its_own_name_with_the_methods_function() -> None:
    from rayworks.core.config import build_config
    from rayworks.pipelines.wasi.config import WASIConfig
    from rayworks.platform.registry import get_pipeline

    method, arm = get_pipeline("wasi"), get_pipeline("wasi_lora")
    assert arm.fn is method.fn and "wasi_lora" in method.baselines
    assert issubclass(arm.config, WASIConfig) and arm.config.presets == WASIConfig.presets
    cfg = build_config(arm.config, "smoke", overrides=["seed=3"])
    assert cfg.settings == ["lora"] and cfg.seed == 3  # the arm's default, the user's override
    assert build_config(arm.config, None, overrides=["settings=[vanilla]"]).settings == ["vanilla"]
    assert WASIConfig().settings != ["lora"]  # the method's own defaults are untouched


def test_an_arm_naming_a_missing_field_or_a_bad_value_fails_at_registration() -> None:
    from rayworks.pipelines.wasi.config import WASIConfig
    from rayworks.platform.registry import Arm, arm_config

    with pytest.raises(ValueError, match="has no field 'no_such_key'"):
        arm_config(WASIConfig, "bad", Arm("x", {"no_such_key": 1}))
    with pytest.raises(ValueError, match="do not validate"):
        arm_config(WASIConfig, "bad", Arm("x", {"settings": ["not_a_setting"]}))


def test_run_name_with_an_ablation_label_applies_its_overrides_first() -> None:
    from rayworks.core.errors import ConfigError
    from rayworks.platform.launch import resolve

    spec, cfg, _ = resolve("wasi[attn]", preset="smoke", overrides=["seed=4"])
    assert spec.name == "wasi" and cfg.seed == 4
    assert cfg.targets == ["fc1", "fc2", "q", "k", "v", "o"]  # the ablation's override
    _, plain, _ = resolve("wasi", preset="smoke")
    assert plain.targets != cfg.targets
    # the request's own overrides come after the ablation's
    _, mine, _ = resolve("wasi[attn]", preset="smoke", overrides=["targets=[fc1]"])
    assert mine.targets == ["fc1"]
    with pytest.raises(ConfigError, match="has no ablation 'nope'; its ablations: attn"):
        resolve("wasi[nope]")


def test_an_arms_presets_extend_the_methods_presets_of_the_same_name() -> None:
    from rayworks.core.config import build_config
    from rayworks.pipelines.gdr.config import GDRConfig
    from rayworks.platform.registry import Arm, arm_config

    one = Arm("x", {"arm": "ipm", "compare": []}, {"smoke": {"dup_ks": []}})
    arm = arm_config(GDRConfig, "one", one)
    assert build_config(GDRConfig, "smoke").dup_ks != []  # the method's smoke keeps its sweep
    cfg = build_config(arm, "smoke")
    assert cfg.dup_ks == [] and cfg.arm == "ipm"
    assert {k: v for k, v in arm.presets["smoke"].items() if k != "dup_ks"} == {
        k: v for k, v in GDRConfig.presets["smoke"].items() if k != "dup_ks"
    }
    with pytest.raises(ValueError, match="has no preset 'tiny'"):
        arm_config(GDRConfig, "bad", Arm("x", {}, {"tiny": {"dup_ks": []}}))


def test_list_names_every_baseline_also_those_read_from_the_methods_run(capsys, monkeypatch):
    from rayworks.cli import console, main
    from rayworks.platform.registry import all_pipelines, describe

    monkeypatch.setattr(console, "width", 1000)  # one line per pipeline: no name is wrapped
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    specs = all_pipelines()
    in_run = {arm for spec in specs for arm in spec.in_run}
    assert {"lssm_mle", "gdr_euclid", "wasi_vanilla", "wasi_lora", "mvc_attn"} <= in_run
    for spec in specs:
        assert set(spec.in_run) <= set(spec.baselines), spec.name
        for name in spec.baselines:
            assert name in describe(spec)["baseline"].split(", ") and name in out, name
