"""RL configs: per-pipeline keys, nested defaults kept under overrides, resource totals."""

from __future__ import annotations

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.rl.config import AsyPPOConfig, PPOConfig, RLConfig


def test_setting_one_critic_key_keeps_asyppo_two_critics():
    cfg = build_config(AsyPPOConfig, "smoke", (), ["critic.lr=0.01"])
    assert cfg.critic.n_critics == 2 and cfg.critic.lr == 0.01
    assert cfg.critic.model.d_model == 16  # the smoke preset's critic, merged, not replaced


def test_grpo_has_no_critic_keys():
    with pytest.raises(ConfigError, match="unknown key 'critic'"):
        build_config(RLConfig, "smoke", (), ["critic.lr=0.01"])


def test_rows_must_split_into_minibatches_and_workers():
    with pytest.raises(ConfigError, match=r"loss\.minibatches=3"):
        build_config(PPOConfig, "smoke", (), ["loss.minibatches=3"])


def test_ray_resources_add_up_every_role():
    cfg = build_config(AsyPPOConfig, None, (), ["rollout.num_engines=2"])
    assert cfg.ray_resources() == {"CPU": pytest.approx(1.0 + 2 * 0.4 + 2 * 0.2)}


def test_verifier_reward_defaults_to_the_run_task():
    cfg = build_config(RLConfig, None, (), ["task=countdown"])
    (spec,) = cfg.reward_specs()
    assert spec.name == "verifier" and spec.kwargs == {"task": "countdown"}
