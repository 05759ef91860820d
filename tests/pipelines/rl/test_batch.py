"""RolloutBatch layout: the learner's forward over a batch reproduces the engine's logprobs."""

from __future__ import annotations

import pytest
import torch

from rayworks.pipelines.rl.batch import make_batch
from rayworks.pipelines.rl.learner import response_logits, token_logp
from rayworks.platform.rollout import HFEngine, Rollout, SamplingConfig


@pytest.fixture(scope="module")
def engine(tiny_lm) -> HFEngine:
    return HFEngine(tiny_lm())


def test_rows_are_left_padded_prompts_then_right_padded_responses():
    rollouts = [
        Rollout(0, [5, 6, 7], [8, 9], [-0.1, -0.2], "", True, 0),
        Rollout(1, [5], [8, 9, 10, 11], [-0.1, -0.2, -0.3, -0.4], "", False, 0),
    ]
    batch = make_batch(rollouts, [1.0, 0.0], pad=0)
    assert batch.prompt_width == 3
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 0, 0], [0, 0, 5, 8, 9, 10, 11]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1]]
    assert batch.response_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch.position_ids[1].tolist() == [0, 0, 0, 1, 2, 3, 4]
    assert batch.old_logp[0].tolist() == pytest.approx([-0.1, -0.2, 0, 0])
    assert batch.rewards.tolist() == [1.0, 0.0]
    sub = batch.rows([1])
    assert sub.input_ids.tolist() == [batch.input_ids[1].tolist()] and sub.prompt_width == 3


def test_learner_forward_matches_engine_logprobs(engine):
    prompts = ["Q: 12+3=\n", "Q: 1+2=\n", "Q: 123+45=\n"]  # different lengths
    rollouts = engine.generate(prompts, 2, SamplingConfig(max_new_tokens=12, seed=3))
    batch = make_batch(rollouts, [0.0] * len(rollouts), pad=engine.pad)
    with torch.no_grad():
        logp = token_logp(response_logits(engine.model, batch), batch.responses)
    mask = batch.response_mask
    torch.testing.assert_close(logp * mask, batch.old_logp, atol=1e-4, rtol=0)


def test_rows_carry_pixels_and_reward_parts_and_feed_the_forward():
    rollouts = [Rollout(i, [4 + i, 5], [6, 2], [-0.1, -0.2], "x", True, 0) for i in range(3)]
    pixels = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 3, 2, 2)
    batch = make_batch(
        rollouts,
        [1.0, 0.0, 0.5],
        0,
        pixels,
        {"outcome": [1.0, 0.0, 1.0], "thinking": [0.2, 0.9, 0.4]},
    )
    sub = batch.rows([2, 0])
    assert sub.pixel_values[:, 0, 0, 0].tolist() == [2.0, 0.0]
    assert sub.parts["thinking"].tolist() == pytest.approx([0.4, 0.2])
    assert sub.rewards.tolist() == [0.5, 1.0] and sub.prompt_width == 2
    assert set(sub.model_inputs) == {"input_ids", "attention_mask", "position_ids", "pixel_values"}
    text_only = make_batch(rollouts, [1.0, 0.0, 0.5], 0)
    assert "pixel_values" not in text_only.rows([1]).model_inputs
    assert text_only.parts == {}
