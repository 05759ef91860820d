"""The learner's policy update (single process), the step driver's data position and where
it starts the engines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.models import load_causal_lm
from rayworks.pipelines.lm.data import batch_rows
from rayworks.pipelines.lm.train_loop import Dist, Learner
from rayworks.pipelines.rl.batch import Estimate, make_batch
from rayworks.pipelines.rl.config import RLConfig
from rayworks.pipelines.rl.grpo import estimate
from rayworks.pipelines.rl.learner import (
    StepDriver,
    broadcast,
    policy_update,
    response_logits,
    token_logp,
)
from rayworks.platform.rollout import HFEngine, SamplingConfig, make_engine_group
from rayworks.platform.rollout_group import EngineGroup


@pytest.fixture(scope="module")
def policy_dir(tiny_lm) -> Path:
    return tiny_lm(n_layer=1)


def seq_logp(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logp = token_logp(response_logits(model, batch), batch.responses)
    return (logp * batch.response_mask).sum(1)


def setup(policy_dir: Path, *sets: str):
    cfg = build_config(
        RLConfig, "smoke", (), ["rollout.prompts_per_step=1", "rollout.group_size=4", *sets]
    )
    engine = HFEngine(policy_dir)
    rollouts = engine.generate(["Q: 12+3=\n"], 4, SamplingConfig(max_new_tokens=10, seed=0))
    batch = make_batch(rollouts, [1.0, 0.0, 0.0, 0.0], engine.pad)
    model = load_causal_lm(policy_dir)
    learner = Learner(cfg.learner, model, Dist(), micro_batch=4)
    return cfg, batch, learner, load_causal_lm(policy_dir).eval()


def test_update_raises_the_rewarded_response_and_lowers_the_others(policy_dir):
    cfg, batch, learner, ref = setup(
        policy_dir,
        "loss.entropy_coef=0",
        "learner.lr=0.01",
        "loss.ppo_epochs=4",
        "loss.minibatches=1",
    )
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5])[:, None] * batch.response_mask
    before = seq_logp(learner.module, batch)
    stats = policy_update(learner, ref, batch, Estimate(advantages=adv), cfg, Dist(), step=0)
    after = seq_logp(learner.module, batch)
    assert after[0] > before[0] and (after[1:] < before[1:]).all()
    assert stats["rollout_logp_gap"] < 1e-4  # engine and learner agree: IS correction is a no-op
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == reference
    assert 0 < stats["clip_frac"] <= 1


def test_zero_advantage_leaves_a_zero_loss(policy_dir):
    cfg, batch, learner, ref = setup(
        policy_dir, "loss.entropy_coef=0", "loss.minibatches=1", "loss.ppo_epochs=1"
    )
    stats = policy_update(
        learner,
        ref,
        batch,
        Estimate(advantages=torch.zeros(4, batch.old_logp.shape[1])),
        cfg,
        Dist(),
        step=0,
    )
    assert stats["policy_loss"] == 0.0  # ratio 1, advantage 0: exactly 0, as expected


def test_masked_advantages_do_not_move_the_policy(policy_dir):
    cfg, batch, learner, ref = setup(policy_dir, "loss.entropy_coef=0", "learner.lr=0.01")
    adv = torch.ones_like(batch.old_logp)
    before = {k: v.clone() for k, v in learner.module.state_dict().items()}
    est = Estimate(advantages=adv, adv_mask=torch.zeros_like(adv))
    policy_update(learner, ref, batch, est, cfg, Dist(), step=0)
    for key, value in learner.module.state_dict().items():
        torch.testing.assert_close(value, before[key])


def test_data_position_is_the_step():
    cfg = build_config(RLConfig, "smoke")
    first = batch_rows(5000, cfg.rollout.prompts_per_step, cfg.seed, 7)
    assert torch.equal(first, batch_rows(5000, cfg.rollout.prompts_per_step, cfg.seed, 7))
    assert not torch.equal(first, batch_rows(5000, cfg.rollout.prompts_per_step, cfg.seed, 8))
    assert broadcast({"a": 1}, Dist()) == {"a": 1}  # single process: passthrough


def test_a_fresh_start_rolls_engines_left_ahead_by_a_failed_attempt_back_to_version_0(
    ray_session, policy_dir
):
    """Engine actors outlive a Ray Train attempt: one restarted before the first checkpoint
    finds them at the version the failed attempt reached. `begin` rolls them back to the
    learner's initial weights as version 0 (and keeps that copy), so the new attempt's
    step-0 evaluation gets the base policy's rows."""
    import ray

    cfg = build_config(RLConfig, "smoke", (), ["rollout.placement=separate"])
    base = load_causal_lm(policy_dir).state_dict()
    ahead = {k: v + 0.5 if v.is_floating_point() else v for k, v in base.items()}
    actors = make_engine_group("hf", policy_dir, 1, {"CPU": 0.3}, max_restarts=1)
    try:
        failed = EngineGroup(actors, timeout_s=120, max_restarts=1)  # the failed attempt's
        failed.start()
        failed.load(ahead, 1)
        group = EngineGroup(actors, timeout_s=120, max_restarts=1)
        group.start()
        driver = StepDriver(cfg, None, group, [], estimate, pad=0)
        driver.begin(None, 0, base)
        examples = driver.data.split("test")
        greedy = SamplingConfig(temperature=0.0, max_new_tokens=10, seed=0)
        rows = driver.rollouts(examples, 1, greedy, 0)  # raises unless all are version 0's
        want = HFEngine(policy_dir).generate([e.prompt for e in examples], 1, greedy)
        assert [r.completion_ids for r in rows] == [r.completion_ids for r in want]
        assert sorted(group.weights) == [0] and group.restarts == 0
    finally:
        ray.kill(actors[0], no_restart=True)
