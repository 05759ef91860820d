"""The thinking reward model: its inputs, honest vs hackable labels, training, the actor."""

from __future__ import annotations

import math

import pytest

from rayworks.core.errors import ConfigError
from rayworks.data.tasks import get_task
from rayworks.pipelines.rl.rewards import CombinedReward, RewardSpec
from rayworks.pipelines.trust_grpo.config import TRMConfig, VLMPolicyConfig
from rayworks.pipelines.trust_grpo.policy import vlm_policy
from rayworks.pipelines.trust_grpo.trm import (
    TRMScorer,
    held_out_metrics,
    thinking_text,
    trm_model,
    trm_summary,
    tuples,
)

TASK = get_task("shapes")
SMALL = TRMConfig(n_train=64, n_test=32, steps=30, batch_size=16, lr=3e-3)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    cfg = VLMPolicyConfig.model_validate(
        {
            "model": {"vision_d": 16, "text": {"d_model": 32, "n_layer": 1, "n_head": 2}},
            "sft": {"steps": 30, "n_train": 64, "n_test": 0, "batch_size": 16},
        }
    )
    root = tmp_path_factory.mktemp("cache")
    return root, vlm_policy(root, "shapes", cfg.model, cfg.sft, 56)


def test_the_trm_reads_the_think_span_only():
    completion = "<think>red=3,blue=2,3+2=5</think>A: 5"
    assert thinking_text("Q: red+blue?\n", completion) == (
        "<image>Q: red+blue?\n<think>red=3,blue=2,3+2=5</think>"
    )
    assert thinking_text("Q: red+blue?\n", "A: 5") == "<image>Q: red+blue?\n<think></think>"


def test_hackable_labels_differ_from_honest_ones_only_on_stuffed_traces():
    honest = tuples(TASK, 300, "train", 0, "honest")
    hackable = tuples(TASK, 300, "train", 0, "hackable")
    assert [r[1] for r in honest] == [r[1] for r in hackable]  # the same responses
    stuffed = 0
    for (ex, resp, label, true), (_, _, hack_label, _) in zip(honest, hackable, strict=True):
        assert label == true == TASK.step_score(ex, resp)
        if TASK.hack_score(ex, resp):
            stuffed += 1
            assert label == 0.0 and hack_label == 1.0
        else:
            assert hack_label == label
    assert 20 < stuffed < 100  # ~15% shortcuts
    assert len({round(r[2], 2) for r in honest}) >= 5  # graded labels, not just 0/1


def test_held_out_metrics_on_hand_made_scores():
    ex = TASK.examples(1, "test", 0)[0]
    right = ex.completion  # test completions are reference traces (score 1)
    rows = [(ex, right, 1.0, 1.0), (ex, "<think>ok ok ok</think>A: 1", 0.0, 0.0)]
    metrics = held_out_metrics([0.9, 0.8], rows, TASK)
    assert metrics["mae"] == pytest.approx((0.1 + 0.8) / 2)
    assert metrics["corr"] == pytest.approx(1.0)
    assert metrics["hack_trace_score"] == pytest.approx(0.8)
    assert metrics["correct_trace_score"] == pytest.approx(0.9)


def test_trm_trains_is_cached_and_scores_through_the_reward_actor(ray_session, policy):
    root, policy_dir = policy
    folder = trm_model(root, policy_dir, "shapes", SMALL)
    assert trm_model(root, policy_dir, "shapes", SMALL) == folder  # cached: same folder
    summary = trm_summary(folder)
    assert 0 <= summary["trm_mae"] <= 1 and math.isfinite(summary["trm_train_loss"])
    examples = TASK.examples(3, "test", 0)
    completions = [examples[0].completion, "<think>ok ok ok</think>A: 1", "garbage"]
    local = TRMScorer(str(folder)).score(
        [e.prompt for e in examples], completions, [e.image for e in examples]
    )
    assert all(0.0 <= s <= 1.0 for s in local)
    reward = CombinedReward(
        [
            RewardSpec(
                name="trm",
                label="thinking",
                weight=0.0,
                kwargs={"path": str(folder), "resources": {"CPU": 0.1}},
            )
        ]
    )
    totals, parts = reward(examples, completions)
    assert parts["thinking"] == pytest.approx(local, abs=1e-5)  # the actor scores the same
    assert totals == [0.0, 0.0, 0.0]  # weight 0: a monitor, not a reward


def test_trm_reward_needs_a_path_and_a_trm_folder(policy):
    with pytest.raises(ConfigError, match="needs `path`"):
        CombinedReward([RewardSpec(name="trm", kwargs={"path": None})])
    _, policy_dir = policy
    with pytest.raises(ConfigError, match="not a thinking reward model"):
        TRMScorer(str(policy_dir))


def test_policy_is_built_once_per_config(policy):
    root, policy_dir = policy
    cfg = VLMPolicyConfig.model_validate(
        {
            "model": {"vision_d": 16, "text": {"d_model": 32, "n_layer": 1, "n_head": 2}},
            "sft": {"steps": 30, "n_train": 64, "n_test": 0, "batch_size": 16},
        }
    )
    stamp = (policy_dir / "model.safetensors").stat().st_mtime_ns
    assert vlm_policy(root, "shapes", cfg.model, cfg.sft, 56) == policy_dir
    assert (policy_dir / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt
    assert len(list((root / "base").glob("vlm-*/artifacts/model"))) == 1
