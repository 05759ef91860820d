"""GRPO's update follows the reward: one update from many samples raises the expected reward,
the temperature-scaled policy is the one scored on both sides, and the shuffled-reward control
removes the signal while keeping the true accuracy logged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.pipelines.lm.train_loop import Dist, Learner
from rayworks.pipelines.rl import grpo
from rayworks.pipelines.rl.batch import Estimate, make_batch
from rayworks.pipelines.rl.config import RLConfig
from rayworks.pipelines.rl.learner import logp_of, policy_update, shuffled
from rayworks.platform.registry import get_pipeline
from rayworks.platform.rollout import HFEngine, SamplingConfig

PROMPTS = ["Q: 12+3=\n", "Q: 7-2=\n", "Q: 40+1=\n", "Q: 9-9=\n"]  # different token lengths


@pytest.fixture(scope="module")
def policy_dir(tiny_lm) -> Path:
    return tiny_lm(d_model=32, n_layer=1)


def config(*sets: str) -> RLConfig:
    return build_config(
        RLConfig,
        "smoke",
        (),
        [
            "loss.entropy_coef=0",
            "loss.ppo_epochs=1",
            "loss.minibatches=1",
            "loss.kl_monitor_every=0",
            *sets,
        ],
    )


def digit_first(text: str) -> float:
    """The reward of the one-step check: 1 when the completion starts with a digit."""
    return float(text[:1].isdigit())


@torch.no_grad()
def exact_expected_reward(model, tok) -> float:
    """E[digit_first] under the policy, exactly: the first token's probability mass on
    tokens whose text starts with a digit, averaged over PROMPTS."""
    digit = torch.tensor([tok.decode([i])[:1].isdigit() for i in range(len(tok))])
    total = 0.0
    for prompt in PROMPTS:
        logits = model(input_ids=torch.tensor([tok(prompt).input_ids])).logits[0, -1]
        total += float(torch.softmax(logits.float(), -1)[: len(digit)][digit].sum())
    return total / len(PROMPTS)


@pytest.mark.usefixtures("one_torch_thread")
def test_one_update_from_many_samples_raises_the_expected_reward(policy_dir):
    g = 64
    cfg = config(
        f"rollout.prompts_per_step={len(PROMPTS)}", f"rollout.group_size={g}", "learner.lr=0.01"
    )
    engine, tok = HFEngine(policy_dir), load_tokenizer(policy_dir)
    model = load_causal_lm(policy_dir)
    engine.model = model  # the engine samples from the module being trained
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8)

    def sampled_reward() -> float:  # fresh samples of the same prompts, a fixed seed
        fresh = engine.generate(PROMPTS, 256, sampling.model_copy(update={"seed": 123}))
        return sum(digit_first(r.text) for r in fresh) / len(fresh)

    exact_before, sampled_before = exact_expected_reward(model, tok), sampled_reward()
    rollouts = engine.generate(PROMPTS, g, sampling.model_copy(update={"seed": 0}))
    batch = make_batch(rollouts, [digit_first(r.text) for r in rollouts], engine.pad)
    est = grpo.estimate(cfg, batch, None, 0)
    assert est.stats["informative_groups"] == 1.0  # every group has both outcomes
    learner = Learner(cfg.learner, model, Dist(), micro_batch=len(rollouts))
    policy_update(learner, load_causal_lm(policy_dir).eval(), batch, est, cfg, Dist(), step=0)

    exact_after, sampled_after = exact_expected_reward(model, tok), sampled_reward()
    assert exact_after > exact_before + 0.03, (exact_before, exact_after)  # 0.199 -> 0.259 here
    assert sampled_after > sampled_before + 0.02, (sampled_before, sampled_after)


@pytest.mark.usefixtures("one_torch_thread")
def test_rollout_and_learner_logprobs_agree_at_temperature_0_7(policy_dir):
    engine = HFEngine(policy_dir)
    sampling = SamplingConfig(temperature=0.7, max_new_tokens=10, seed=0)
    batch = make_batch(engine.generate(PROMPTS, 4, sampling), [0.0] * 16, engine.pad)
    model, mask = load_causal_lm(policy_dir), batch.response_mask
    gap = ((logp_of(model, batch, 0.7) - batch.old_logp).abs() * mask).max()
    assert gap < 1e-5
    # the check can fail: scoring the untempered policy is far off
    assert ((logp_of(model, batch) - batch.old_logp).abs() * mask).max() > 1e-2

    cfg = config(
        "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.sampling.temperature=0.7"
    )
    learner = Learner(cfg.learner, model, Dist(), micro_batch=16)
    est = Estimate(advantages=torch.zeros_like(batch.old_logp))
    stats = policy_update(learner, model, batch, est, cfg, Dist(), step=0)
    assert stats["rollout_logp_gap"] < 1e-5  # the learner scores the policy that sampled
    assert stats["entropy"] > 0


def test_shuffled_rewards_are_a_seeded_permutation_of_the_rows():
    totals = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    parts = {"verifier": list(totals), "format": [float(i) for i in range(8)]}
    mixed, mixed_parts = shuffled(totals, parts, seed=3)
    assert sorted(mixed) == sorted(totals) and mixed != totals
    order = [int(v) for v in mixed_parts["format"]]  # where each row's reward came from
    assert sorted(order) == list(range(8))
    assert mixed == [totals[i] for i in order] == mixed_parts["verifier"]
    assert shuffled(totals, parts, seed=3) == (mixed, mixed_parts)  # deterministic per seed
    assert shuffled(totals, parts, seed=4)[0] != mixed


def test_the_shuffled_control_is_a_grpo_arm():
    spec = get_pipeline("grpo")
    assert spec.ablations["shuffled"] == ("shuffle_rewards=true",)
    assert build_config(RLConfig, "smoke", (), list(spec.ablations["shuffled"])).shuffle_rewards


def test_rl_prompts_are_disjoint_from_the_sft_data_and_from_val_and_test():
    from rayworks.data.tasks import get_task
    from rayworks.pipelines.rl.prompts import prompt_set

    cfg = build_config(
        RLConfig, None, (), ["policy.sft.n_train=3000", "eval.n_val=64", "eval.n_test=64"]
    )
    data = prompt_set(cfg)
    sft = {e.prompt for e in get_task(cfg.task).examples(3000, "train", cfg.policy.sft.seed)}
    train = {e.prompt for e in data.train}
    assert len(train) > 1000 and not train & sft  # RL never trains on an SFT prompt
    val, test = {e.prompt for e in data.val}, {e.prompt for e in data.test}
    assert len(val) == 64 and len(test) == 64
    assert not (train & val or train & test or val & test)
    assert {2, 3, 4} <= {e.difficulty for e in data.train}  # multi-digit items all stay
