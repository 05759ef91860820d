"""`asyppo`: Asymmetric PPO with mini-critics (Liu et al., ICLR 2026).

M small pretrained critics, each a Ray actor with its own value model and optimizer,
run in parallel. Per step (the paper's algorithm as we read it, steps 1-9: 1 samples G
responses per prompt, 3 updates each critic on its subset; no official code exists, the
equations come from secondary summaries of the paper):
2. each prompt's G responses are split into M disjoint subsets and critic m trains
   only on subset m, so every critic sees every prompt when G >= M
   (`asyppo.critic_data=prompts` deals whole prompts instead, the abstract's wording;
   `identical` trains every critic on every row, the ablation);
4. V-bar = mean of the critics' values (`asyppo.aggregate=min` is the option);
5. GAE on V-bar (whitened over the batch; our choice);
6. sigma_t = population std of the critics' values per token;
7. advantage mask: zero the advantage on the lowest-k% sigma tokens (k = 0.2);
8. entropy filter: drop the entropy bonus on the highest-h% sigma tokens (h = 0.2);
9. the clipped objective with both masks (the shared learner, `algo.clipped_policy_loss`).
Ranking is over the batch's response tokens, padding excluded (reconstructed; per
sequence with `asyppo.per_sequence=true`). Logged: mean sigma, the masked and filtered
shares, and corr(sigma, |Monte-Carlo return - V-bar|), claim (a)'s "sigma tracks the
critics' error".
"""

from __future__ import annotations

import torch

from rayworks.pipelines.rl.algo import (
    ensemble_values,
    low_k_mask,
    masked_corr,
    masked_mean,
    split_responses,
    top_h_mask,
    whiten,
)
from rayworks.pipelines.rl.batch import Estimate, RolloutBatch
from rayworks.pipelines.rl.config import AsyPPOConfig
from rayworks.pipelines.rl.driver import run_rl
from rayworks.pipelines.rl.ppo import gae, value_stats
from rayworks.platform.context import RunContext
from rayworks.platform.registry import pipeline

# Secondary metrics `rayworks bench asyppo` tabulates for every arm (rl/evaluate.py defines
# the held-out ones; `_gain` is the change from the base at step 0 of the same run).
REPORT = (
    "test_accuracy_gain",
    "test_sampled_accuracy",
    "test_sampled_accuracy_gain",
    "test_pass_at_k",
    "test_kl_base",
    "test_entropy",
    "test_response_len",
    "mean_sigma",
    "sigma_err_corr",
    "explained_var",
    "masked_frac",
    "seconds_per_step",
    "critic_params",
)
CURVES = ("test_sampled_accuracy", "test_entropy", "test_kl_base", "entropy")
# PPO with a critic as large as the policy (the paper's symmetric-PPO baseline), spelled as
# AsyPPO with one critic and both masks off, which is PPO's estimate exactly (tested), so one
# bench holds it.
SYMMETRIC_PPO = (
    "critic.n_critics=1",
    "asyppo.critic_data=identical",
    "asyppo.mask_low=0",
    "asyppo.filter_high=0",
    "critic.symmetric=true",
)


def critic_rows(cfg: AsyPPOConfig, n_rows: int, step: int) -> list[list[int]]:
    """Step 2: each critic's rows of this batch (a fresh random deal every step)."""
    m, g = cfg.critic.n_critics, cfg.rollout.group_size
    if cfg.asyppo.critic_data == "identical":
        return [list(range(n_rows))] * m
    return split_responses(
        n_rows // g, g, m, seed=cfg.seed * 100_003 + step, mode=cfg.asyppo.critic_data
    )


def estimate(cfg: AsyPPOConfig, batch: RolloutBatch, values: torch.Tensor, step: int) -> Estimate:
    knobs, mask = cfg.asyppo, batch.response_mask
    v_bar, sigma = ensemble_values(values, knobs.aggregate)  # steps 4 and 6
    adv, returns = gae(cfg, batch, v_bar)  # step 5
    adv_mask = low_k_mask(sigma, mask, knobs.mask_low, knobs.per_sequence)  # step 7
    entropy_mask = top_h_mask(sigma, mask, knobs.filter_high, knobs.per_sequence)  # step 8
    _, mc_returns = gae(cfg, batch, v_bar, lam=1.0)
    stats = {
        "mean_sigma": float(masked_mean(sigma, mask)),
        "sigma_err_corr": masked_corr(sigma, (mc_returns - v_bar).abs(), mask),
        "masked_frac": 1.0 - float(masked_mean(adv_mask, mask)),
        "filtered_frac": 1.0 - float(masked_mean(entropy_mask, mask)),
        **value_stats(batch, v_bar, returns),
    }
    return Estimate(
        advantages=whiten(adv, mask),
        returns=returns,
        adv_mask=adv_mask,
        entropy_mask=entropy_mask,
        critic_rows=critic_rows(cfg, batch.input_ids.shape[0], step),
        stats=stats,
    )


@pipeline(
    "asyppo",
    config=AsyPPOConfig,
    kind="job",
    baseline=("grpo", "ppo"),
    headline=("test_accuracy", "max"),
    ablations={
        "identical-data": ("asyppo.critic_data=identical",),
        "no-mask": ("asyppo.mask_low=0",),
        "no-entropy-filter": ("asyppo.filter_high=0",),
        "ppo-symmetric": SYMMETRIC_PPO,
    },
    report=REPORT,
    curves=CURVES,
)
def run(cfg: AsyPPOConfig, ctx: RunContext) -> dict[str, float]:
    """AsyPPO: M mini-critic actors on split responses; sigma-based advantage mask and entropy filter."""
    return run_rl(cfg, ctx, estimate)
