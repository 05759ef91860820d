"""`trust_grpo`: SophiaVL-R1's Trust-GRPO; `vl_grpo`: outcome-only GRPO on the same VLM.

For each prompt's group of G responses with outcome rewards R^o_i and thinking rewards
R^t_i (the TRM's score of the think span, in [0, 1]) (paper Sec 3.4):

  correct = {i : R^o_i >= 0.5},  wrong = {i : R^o_i < 0.5}                        (eq 2)
  mu_c = mean_{i in correct} R^t_i,  mu_w = mean_{i in wrong} R^t_i                (eq 3)
  gamma = 1 if mu_c >= mu_w else exp(mu_c - mu_w)                                   (eq 4)
  R_i = R^o_i + gamma * alpha * exp(-step / T) * R^t_i,  alpha = 0.3, T = total steps (eq 5)

then GRPO: A_i = (R_i - mean_group R) / (std_group R + eps) on every response token, and
the shared learner's clipped-ratio loss (eqs 6-7). The trust weight drops when wrong
answers get more thinking reward than right ones (the TRM is unreliable on that group);
annealing hands the reward back to the exact outcome late in training.

Open cases (the paper defines gamma only for groups with both sides; reconstructed): a
group whose responses are all correct or all wrong gets gamma = 1 (`empty_side=trust`,
default) or no thinking reward (`empty_side=skip`). All-equal R in a group gives zero
advantages (the std is guarded by eps), never NaN.

`thinking.released_compat` reproduces the authors' code (kxfan2002/SophiaVL-R1,
`CustomRewardManager`): R^t is used only where R^o >= 0.2 (else 0), and is zeroed for a
group whose outcome scores are all >= 0.9 or all <= 0.1. With a binary outcome this makes
mu_w = 0 <= mu_c, so gamma = 1 always: trust only acts with partial-credit outcomes
(`thinking.outcome=digits`). The ablation switches are `thinking.trust` / `thinking.anneal`.
"""

from __future__ import annotations

import math

import torch

from rayworks.models import resolve_model_dir
from rayworks.pipelines.rl.algo import ADVANTAGES, masked_mean
from rayworks.pipelines.rl.batch import Estimate, RolloutBatch
from rayworks.pipelines.rl.driver import run_rl
from rayworks.pipelines.trust_grpo.config import ThinkingConfig, TrustGRPOConfig
from rayworks.pipelines.trust_grpo.policy import policy_summary, vlm_policy
from rayworks.pipelines.trust_grpo.trm import trm_model, trm_summary
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, pipeline

COMPAT_ALL_RIGHT, COMPAT_ALL_WRONG = 0.9, 0.1  # the released code's group thresholds


def trust_weight(outcome: torch.Tensor, thinking: torch.Tensor, cfg: ThinkingConfig) -> float:
    """gamma of one group (eq 4); the open one-sided case per `cfg.empty_side`."""
    correct = outcome >= cfg.correct_threshold
    if bool(correct.all()) or not bool(correct.any()):
        return 1.0 if cfg.empty_side == "trust" else 0.0
    mu_c, mu_w = float(thinking[correct].mean()), float(thinking[~correct].mean())
    return 1.0 if mu_c >= mu_w else math.exp(mu_c - mu_w)


def anneal_factor(step: int, horizon: int) -> float:
    """exp(-step / T): 1 at step 0, e^-1 at step T (eq 5)."""
    return math.exp(-step / horizon)


def released_thinking(outcome: torch.Tensor, thinking: torch.Tensor, query: float) -> torch.Tensor:
    """The released code's R^t for one group: 0 where R^o < `query`, and 0 for the whole
    group when its outcome scores are all >= 0.9 or all <= 0.1."""
    if bool((outcome >= COMPAT_ALL_RIGHT).all()) or bool((outcome <= COMPAT_ALL_WRONG).all()):
        return torch.zeros_like(thinking)
    return torch.where(outcome >= query, thinking, torch.zeros_like(thinking))


def combined_rewards(
    outcome: torch.Tensor,
    thinking: torch.Tensor,
    group: int,
    step: int,
    horizon: int,
    cfg: ThinkingConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """R_i of eq 5 for a batch of contiguous groups, and the logged trust statistics."""
    anneal = anneal_factor(step, horizon) if cfg.anneal else 1.0
    rewards, gammas, one_sided = [], [], 0
    for ro, rt in zip(outcome.view(-1, group), thinking.view(-1, group), strict=True):
        if cfg.released_compat:
            rt = released_thinking(ro, rt, cfg.query_threshold)
        correct = ro >= cfg.correct_threshold
        one_sided += bool(correct.all()) or not bool(correct.any())
        gamma = trust_weight(ro, rt, cfg) if cfg.trust else 1.0
        gammas.append(gamma)
        rewards.append(ro + gamma * cfg.alpha * anneal * rt)
    g = torch.tensor(gammas)
    stats = {
        "gamma_mean": float(g.mean()),
        "gamma_lt1_frac": float((g < 1).float().mean()),
        "eff_weight": cfg.alpha * anneal * float(g.mean()),
        "anneal": anneal,
        "one_sided_frac": one_sided / len(gammas),
    }
    return torch.cat(rewards), stats


def estimate(cfg: TrustGRPOConfig, batch: RolloutBatch, values: None, step: int) -> Estimate:
    """GRPO advantages of the trust-weighted, annealed reward."""
    g = cfg.rollout.group_size
    rewards, stats = combined_rewards(
        batch.parts["outcome"],
        batch.parts["thinking"],
        g,
        step,
        cfg.anneal_horizon(),
        cfg.thinking,
    )
    adv, _ = ADVANTAGES["grpo"](rewards, batch.response_mask, g, scale=cfg.loss.grpo_scale)
    spread = rewards.view(-1, g).std(dim=1, unbiased=False) > 0
    stats.update(
        {
            "combined_reward": float(rewards.mean()),
            "adv_abs": float(masked_mean(adv.abs(), batch.response_mask)),
            "informative_groups": float(spread.float().mean()),
        }
    )
    return Estimate(advantages=adv, stats=stats)


def run_trust(cfg: TrustGRPOConfig, ctx: RunContext) -> dict[str, float]:
    """Build (or find) the SFT'd VLM and the TRM, then run the RL learner with `estimate`."""
    max_new = cfg.rollout.sampling.max_new_tokens
    if cfg.policy.init_from:
        policy = resolve_model_dir(cfg.policy.init_from)
    else:
        policy = vlm_policy(ctx.cache_root, cfg.task, cfg.policy.model, cfg.policy.sft, max_new)
    trm = trm_model(ctx.cache_root, policy, cfg.task, cfg.trm)
    cfg = cfg.model_copy(update={"trm": cfg.trm.model_copy(update={"path": str(trm)})})
    extra = {**policy_summary(policy), **trm_summary(trm)}
    return run_rl(cfg, ctx, estimate, models=(policy, None, extra))


REPORT = (
    "base_test_accuracy",
    "test_step_correct",
    "test_hack",
    "reward/hack",
    "gamma_mean",
    "gamma_lt1_frac",
    "eff_weight",
    "reward/thinking",
    "trm_corr",
    "test_sampled_accuracy",
    "test_pass_at_k",
    "test_kl_base",
    "test_entropy",
    "test_response_len",
)
CURVES = (
    "reward/hack",
    "reward/steps",
    "reward/outcome",
    "test_step_correct",
    "gamma_mean",
    "eff_weight",
)
VARIANTS = {
    "no-trust-no-anneal": ("thinking.trust=false", "thinking.anneal=false"),
    "anneal-only": ("thinking.trust=false",),
    "trust-only": ("thinking.anneal=false",),
}


@pipeline(
    "trust_grpo",
    config=TrustGRPOConfig,
    kind="job",
    arms={
        "vl_grpo": Arm(
            "Outcome-only GRPO on the Trust-GRPO VLM and task (the TRM is logged, not rewarded).",
            {"thinking": ThinkingConfig(alpha=0.0)},
        ),
    },
    headline=("test_accuracy", "max"),
    ablations={
        **VARIANTS,
        "hackable": ("trm.kind=hackable",),
        **{f"hackable-{k}": ("trm.kind=hackable", *v) for k, v in VARIANTS.items()},
    },
    report=REPORT,
    curves=CURVES,
)
def run(cfg: TrustGRPOConfig, ctx: RunContext) -> dict[str, float]:
    """Trust-GRPO (SophiaVL-R1): VLM policy, TRM actor, trust-weighted annealed thinking reward."""
    return run_trust(cfg, ctx)
