"""Trust-GRPO's reward (eqs 2-5), its open cases and the released-code switch."""

from __future__ import annotations

import math

import pytest
import torch

from rayworks.pipelines.rl.batch import make_batch
from rayworks.pipelines.trust_grpo.config import ThinkingConfig, TrustGRPOConfig
from rayworks.pipelines.trust_grpo.trust import (
    anneal_factor,
    combined_rewards,
    estimate,
    released_thinking,
    trust_weight,
)
from rayworks.platform.rollout import Rollout

T = torch.tensor


def test_gamma_is_one_when_correct_answers_think_at_least_as_well():
    cfg = ThinkingConfig()
    assert trust_weight(T([1.0, 1.0, 0.0, 0.0]), T([0.9, 0.7, 0.2, 0.4]), cfg) == 1.0
    assert trust_weight(T([1.0, 0.0]), T([0.5, 0.5]), cfg) == 1.0  # mu_c == mu_w


def test_gamma_is_exp_of_the_gap_when_wrong_answers_think_better():
    cfg = ThinkingConfig()
    gamma = trust_weight(T([1.0, 1.0, 0.0, 0.0]), T([0.2, 0.4, 0.9, 0.7]), cfg)
    assert gamma == pytest.approx(math.exp(0.3 - 0.8))
    # partial-credit outcomes split at 0.5: 0.4 counts as wrong, 0.5 as correct
    gamma = trust_weight(T([0.5, 0.4]), T([0.1, 0.6]), cfg)
    assert gamma == pytest.approx(math.exp(0.1 - 0.6))


@pytest.mark.parametrize("outcome", [[1.0, 1.0, 1.0], [0.0, 0.0, 0.3]])
def test_one_sided_groups_follow_the_named_choice(outcome):
    thinking = T([0.1, 0.9, 0.5])
    assert trust_weight(T(outcome), thinking, ThinkingConfig(empty_side="trust")) == 1.0
    assert trust_weight(T(outcome), thinking, ThinkingConfig(empty_side="skip")) == 0.0


def test_anneal_factor_is_one_at_start_and_inverse_e_at_the_horizon():
    assert anneal_factor(0, 60) == 1.0
    assert anneal_factor(60, 60) == pytest.approx(math.exp(-1))
    assert anneal_factor(30, 60) == pytest.approx(math.exp(-0.5))


def test_combined_reward_applies_gamma_alpha_and_annealing_per_group():
    outcome = T([1.0, 0.0, 1.0, 0.0])
    thinking = T([0.2, 0.8, 0.9, 0.1])  # group 0 distrusted, group 1 trusted
    cfg = ThinkingConfig(alpha=0.3)
    rewards, stats = combined_rewards(outcome, thinking, 2, step=10, horizon=20, cfg=cfg)
    gamma0, anneal = math.exp(0.2 - 0.8), math.exp(-0.5)
    want = [
        1 + gamma0 * 0.3 * anneal * 0.2,
        gamma0 * 0.3 * anneal * 0.8,
        1 + 0.3 * anneal * 0.9,
        0.3 * anneal * 0.1,
    ]
    assert rewards.tolist() == pytest.approx(want)
    assert stats["gamma_mean"] == pytest.approx((gamma0 + 1) / 2)
    assert stats["gamma_lt1_frac"] == 0.5
    assert stats["eff_weight"] == pytest.approx(0.3 * anneal * (gamma0 + 1) / 2)


def test_switches_turn_trust_and_annealing_off():
    outcome, thinking = T([1.0, 0.0]), T([0.2, 0.8])
    off = ThinkingConfig(trust=False, anneal=False)
    rewards, stats = combined_rewards(outcome, thinking, 2, step=50, horizon=60, cfg=off)
    assert rewards.tolist() == pytest.approx([1 + 0.3 * 0.2, 0.3 * 0.8])
    assert stats["gamma_mean"] == 1.0 and stats["anneal"] == 1.0
    outcome_only = ThinkingConfig(alpha=0.0)
    rewards, _ = combined_rewards(outcome, thinking, 2, step=0, horizon=60, cfg=outcome_only)
    assert rewards.tolist() == [1.0, 0.0]


def test_released_code_queries_only_above_threshold_and_zeroes_uniform_groups():
    thinking = T([0.9, 0.8, 0.7, 0.6])
    assert released_thinking(T([1.0, 0.3, 0.1, 0.0]), thinking, 0.2).tolist() == pytest.approx(
        [0.9, 0.8, 0.0, 0.0]
    )
    assert released_thinking(T([1.0, 0.95, 0.9, 1.0]), thinking, 0.2).tolist() == [0.0] * 4
    assert released_thinking(T([0.0, 0.1, 0.05, 0.0]), thinking, 0.2).tolist() == [0.0] * 4
    # with binary outcomes wrong answers never get R^t, so gamma stays 1
    cfg = ThinkingConfig(released_compat=True)
    _, stats = combined_rewards(T([1.0, 0.0]), T([0.1, 0.9]), 2, 0, 10, cfg)
    assert stats["gamma_mean"] == 1.0
    # partial credit in [0.2, 0.5) keeps R^t on a wrong answer: trust acts again
    _, stats = combined_rewards(T([1.0, 0.3]), T([0.1, 0.9]), 2, 0, 10, cfg)
    assert stats["gamma_mean"] == pytest.approx(math.exp(0.1 - 0.9))


def _batch(outcome: list[float], thinking: list[float]):
    rollouts = [
        Rollout(i // 2, [5, 6], [7, 8, 2], [-0.5, -0.4, -0.1], "x", True, 0)
        for i in range(len(outcome))
    ]
    return make_batch(rollouts, outcome, 0, parts={"outcome": outcome, "thinking": thinking})


def test_all_equal_group_rewards_give_zero_advantages_without_nan():
    cfg = TrustGRPOConfig.model_validate({"rollout": {"group_size": 2}})
    est = estimate(cfg, _batch([1.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.3, 0.3]), None, step=0)
    assert torch.isfinite(est.advantages).all()
    assert est.advantages.abs().max() == 0.0
    assert est.stats["informative_groups"] == 0.0


def test_estimate_ranks_by_the_combined_reward():
    cfg = TrustGRPOConfig.model_validate({"rollout": {"group_size": 2}})
    est = estimate(cfg, _batch([1.0, 1.0, 1.0, 0.0], [0.9, 0.1, 0.5, 0.5]), None, step=0)
    per_row = est.advantages[:, 0]
    assert per_row[0] > 0 > per_row[1]  # same outcome, better thinking wins
    assert per_row[2] > 0 > per_row[3]  # the outcome dominates
    assert est.stats["combined_reward"] == pytest.approx((1.27 + 1.03 + 1.15 + 0.15) / 4, rel=1e-5)


def test_config_owns_its_rewards_and_reserves_the_trm_actor():
    cfg = TrustGRPOConfig()
    assert [s.label for s in cfg.reward_specs()] == ["outcome", "thinking", "steps", "hack"]
    assert [s.weight for s in cfg.reward_specs()] == [1.0, 0.0, 0.0, 0.0]
    digits = TrustGRPOConfig.model_validate({"thinking": {"outcome": "digits"}})
    assert digits.reward_specs()[0].kwargs["metric"] == "digit_score"
    assert cfg.ray_resources()["CPU"] == pytest.approx(1.0 + 0.4 + 0.2)
    assert cfg.anneal_horizon() == cfg.learner.max_steps
    assert (
        TrustGRPOConfig.model_validate({"thinking": {"anneal_steps": 500}}).anneal_horizon() == 500
    )
    with pytest.raises(ValueError, match="leave `rewards` empty"):
        TrustGRPOConfig.model_validate({"rewards": [{"name": "format"}]})
