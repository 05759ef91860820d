"""`grpo`: Group Relative Policy Optimization, no critic.

Each prompt's G responses share one group; a response's advantage is its reward minus
the group mean, divided by the group std (`loss.grpo_scale=false` only centres), on every
token of the response. Groups whose rewards are all equal give zero advantage (and a
policy loss of exactly 0 at ratio 1: expected). The rest of the step (clipped ratio,
token-mean, KL, entropy bonus) is the shared learner's.
"""

from __future__ import annotations

from rayworks.pipelines.rl.algo import ADVANTAGES, masked_mean
from rayworks.pipelines.rl.batch import Estimate, RolloutBatch
from rayworks.pipelines.rl.config import RLConfig
from rayworks.pipelines.rl.driver import run_rl
from rayworks.platform.context import RunContext
from rayworks.platform.registry import pipeline


def estimate(cfg: RLConfig, batch: RolloutBatch, values: None, step: int) -> Estimate:
    g = cfg.rollout.group_size
    adv, _ = ADVANTAGES["grpo"](batch.rewards, batch.response_mask, g, scale=cfg.loss.grpo_scale)
    spread = batch.rewards.view(-1, g).std(dim=1, unbiased=False) > 0
    stats = {
        "adv_abs": float(masked_mean(adv.abs(), batch.response_mask)),
        "informative_groups": float(spread.float().mean()),
    }
    return Estimate(advantages=adv, stats=stats)


# What `rayworks bench grpo` tabulates and plots beside the headline (greedy test accuracy):
# rl/evaluate.py defines each; `_gain` is the change from the base (step 0) in the same run.
REPORT = (
    "test_accuracy_gain",
    "test_sampled_accuracy",
    "test_sampled_accuracy_gain",
    "test_pass_at_k",
    "test_kl_base",
    "test_entropy",
    "test_response_len",
    "val_accuracy",
    "val_sampled_accuracy",
    "seconds_per_step",
)
CURVES = (
    "test_sampled_accuracy",
    "test_pass_at_k",
    "test_kl_base",
    "test_entropy",
    "test_response_len",
)


@pipeline(
    "grpo",
    config=RLConfig,
    kind="job",
    headline=("test_accuracy", "max"),
    # the no-signal control: the same run with each batch's rewards permuted over its rows
    # `async`: the same run one step off-policy (generation overlaps the update)
    ablations={"shuffled": ("shuffle_rewards=true",), "async": ("rollout.mode=async",)},
    report=REPORT,
    curves=CURVES,
)
def run(cfg: RLConfig, ctx: RunContext) -> dict[str, float]:
    """GRPO: group-normalised outcome advantages, no critic (Ray Train learner + engines)."""
    return run_rl(cfg, ctx, estimate)
