"""What each method computes before the policy update: GRPO, PPO and AsyPPO estimates."""

from __future__ import annotations

import math

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.pipelines.rl import asyppo, grpo, ppo
from rayworks.pipelines.rl.batch import RolloutBatch
from rayworks.pipelines.rl.config import AsyPPOConfig, PPOConfig, RLConfig


def batch_of(rewards: list[float], lengths: list[int], t: int = 6) -> RolloutBatch:
    b = len(rewards)
    mask = torch.zeros(b, t)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    ids = torch.ones(b, 2 + t, dtype=torch.long)
    attn = torch.cat([torch.ones(b, 2, dtype=torch.long), mask.long()], dim=1)
    return RolloutBatch(
        ids, attn, mask, torch.zeros(b, t), torch.tensor(rewards, dtype=torch.float), 2
    )


def config(cls, *sets: str):
    return build_config(
        cls,
        "smoke",
        (),
        ["rollout.prompts_per_step=2", "rollout.group_size=4", "loss.minibatches=1", *sets],
    )


def test_grpo_all_equal_groups_give_zero_advantage_and_no_nan():
    cfg = config(RLConfig)
    batch = batch_of([1, 1, 1, 1, 0, 1, 0, 0], [3, 4, 5, 6, 2, 2, 2, 2])
    est = grpo.estimate(cfg, batch, None, 0)
    assert torch.isfinite(est.advantages).all()
    assert est.advantages[:4].abs().sum() == 0
    assert est.advantages[5, 0] > 0 > est.advantages[4, 0]
    assert est.returns is None and est.stats["informative_groups"] == 0.5
    assert (est.advantages * (1 - batch.response_mask)).abs().sum() == 0


def test_ppo_gae_on_one_critic_and_all_rows_for_it():
    cfg = config(PPOConfig, "critic.lam=1.0", "critic.gamma=1.0")
    batch = batch_of([1, 0, 1, 0, 1, 0, 1, 0], [2] * 8)
    values = torch.full((1, 8, 6), 0.25) * batch.response_mask
    est = ppo.estimate(cfg, batch, values, 0)
    # lambda = gamma = 1: return = outcome on every token, advantage = R - V (then whitened).
    assert torch.allclose(est.returns[:, :2], batch.rewards[:, None].expand(8, 2))
    raw = (batch.rewards[:, None] - 0.25).expand(8, 2)
    want = (raw - raw.mean()) / raw.std(unbiased=False)
    torch.testing.assert_close(est.advantages[:, :2], want, atol=1e-4, rtol=0)
    assert est.critic_rows == [list(range(8))]


def test_asyppo_masks_sigma_and_response_split():
    cfg = config(AsyPPOConfig)
    batch = batch_of([1, 0, 0, 1, 1, 1, 0, 0], [6, 5, 4, 6, 3, 6, 6, 2])
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(2, 8, 6, generator=gen) * batch.response_mask
    est = asyppo.estimate(cfg, batch, values, step=3)
    n_valid = int(batch.response_mask.sum())
    dropped = int(((1 - est.adv_mask) * batch.response_mask).sum())
    assert dropped == int(0.2 * n_valid)  # exact count, padding never ranked
    assert est.stats["masked_frac"] == pytest.approx(dropped / n_valid)
    sigma = values.std(dim=0, unbiased=False)
    valid = batch.response_mask > 0
    masked_sigma = sigma[(est.adv_mask == 0) & valid]
    kept_sigma = sigma[(est.adv_mask == 1) & valid]
    assert masked_sigma.max() <= kept_sigma.min()  # the lowest-sigma tokens are the masked ones
    filtered = sigma[(est.entropy_mask == 0) & valid]
    assert filtered.min() >= sigma[(est.entropy_mask == 1) & valid].max()
    assert est.stats["mean_sigma"] == pytest.approx(float(sigma[valid].mean()), rel=1e-5)
    # Each critic gets G/M = 2 responses of every prompt; together they cover each row once.
    rows = est.critic_rows
    assert sorted(rows[0] + rows[1]) == list(range(8))
    for shard in rows:
        assert sorted(r // 4 for r in shard) == [0, 0, 1, 1]


def test_asyppo_identical_data_and_prompt_shards_options():
    batch = batch_of([1, 0] * 4, [3] * 8)
    values = torch.rand(2, 8, 6) * batch.response_mask
    same = asyppo.estimate(config(AsyPPOConfig, "asyppo.critic_data=identical"), batch, values, 0)
    assert same.critic_rows == [list(range(8))] * 2
    shards = asyppo.estimate(config(AsyPPOConfig, "asyppo.critic_data=prompts"), batch, values, 0)
    assert sorted(len({r // 4 for r in s}) for s in shards.critic_rows) == [1, 1]


def test_asyppo_k_zero_and_h_zero_keep_every_token():
    cfg = config(AsyPPOConfig, "asyppo.mask_low=0", "asyppo.filter_high=0")
    batch = batch_of([1, 0] * 4, [3, 4, 5, 6] * 2)
    est = asyppo.estimate(cfg, batch, torch.rand(2, 8, 6), 0)
    assert torch.equal(est.adv_mask, batch.response_mask)
    assert torch.equal(est.entropy_mask, batch.response_mask)


def test_identical_critics_have_zero_sigma_and_undefined_correlation():
    cfg = config(AsyPPOConfig)
    batch = batch_of([1, 0] * 4, [3] * 8)
    one = torch.rand(1, 8, 6)
    est = asyppo.estimate(cfg, batch, torch.cat([one, one]), 0)
    assert est.stats["mean_sigma"] == 0.0 and math.isnan(est.stats["sigma_err_corr"])


def test_asyppo_symmetric_ppo_arm_is_ppo_with_a_policy_sized_critic():
    overrides = asyppo.SYMMETRIC_PPO
    cfg = config(AsyPPOConfig, *overrides)
    assert cfg.critic.n_critics == 1 and cfg.critic.symmetric
    batch = batch_of([1, 0, 0, 1, 1, 1, 0, 0], [6, 5, 4, 6, 3, 6, 6, 2])
    values = torch.rand(1, 8, 6) * batch.response_mask
    sym = asyppo.estimate(cfg, batch, values, 0)
    ref = ppo.estimate(config(PPOConfig), batch, values, 0)
    torch.testing.assert_close(sym.advantages, ref.advantages)
    torch.testing.assert_close(sym.returns, ref.returns)
    assert sym.critic_rows == ref.critic_rows
    assert torch.equal(sym.adv_mask, batch.response_mask)  # no mask, no filter: plain PPO
    assert torch.equal(sym.entropy_mask, batch.response_mask)
