"""`ppo`: PPO with one critic actor and GAE (the classic actor-critic baseline).

The outcome reward sits on each response's last token; GAE (gamma, lambda from
`critic`) on the critic's values gives advantages and the critic's targets (returns);
advantages are whitened over the batch's response tokens (as OpenRLHF does; our
choice, the AsyPPO sources do not say). With the default critic sizes the critic is
smaller than the policy: the "naive asymmetric" PPO; set `critic.model` to the policy's
size for the symmetric one.
"""

from __future__ import annotations

import torch

from rayworks.pipelines.rl.algo import ADVANTAGES, masked_mean, outcome_to_token_rewards, whiten
from rayworks.pipelines.rl.batch import Estimate, RolloutBatch
from rayworks.pipelines.rl.config import PPOConfig
from rayworks.pipelines.rl.driver import run_rl
from rayworks.platform.context import RunContext
from rayworks.platform.registry import pipeline


def gae(
    cfg: PPOConfig, batch: RolloutBatch, values: torch.Tensor, lam: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) of GAE on `values` (B, T) with the outcome reward at the end."""
    rewards = outcome_to_token_rewards(batch.rewards, batch.response_mask)
    lam = cfg.critic.lam if lam is None else lam
    return ADVANTAGES["gae"](rewards, values, batch.response_mask, cfg.critic.gamma, lam)


def value_stats(batch: RolloutBatch, values: torch.Tensor, returns: torch.Tensor) -> dict:
    """Value mean and explained variance of the returns (1 = perfect critic)."""
    mask = batch.response_mask
    resid = masked_mean((returns - values) ** 2, mask)
    var = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    return {
        "value_mean": float(masked_mean(values, mask)),
        "explained_var": float(1 - resid / var) if float(var) > 0 else float("nan"),
    }


def estimate(cfg: PPOConfig, batch: RolloutBatch, values: torch.Tensor, step: int) -> Estimate:
    v = values.mean(dim=0)  # one critic: (1, B, T) -> (B, T)
    adv, returns = gae(cfg, batch, v)
    rows = list(range(batch.input_ids.shape[0]))
    return Estimate(
        advantages=whiten(adv, batch.response_mask),
        returns=returns,
        critic_rows=[rows] * values.shape[0],
        stats=value_stats(batch, v, returns),
    )


@pipeline("ppo", config=PPOConfig, kind="job", headline=("test_accuracy", "max"))
def run(cfg: PPOConfig, ctx: RunContext) -> dict[str, float]:
    """PPO: one small critic actor, GAE advantages (Ray Train learner + engines)."""
    return run_rl(cfg, ctx, estimate)
