"""Critic actors: values on response states, idempotent updates, restart restores the weights."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from rayworks.pipelines.rl.batch import RolloutBatch
from rayworks.pipelines.rl.config import CriticConfig
from rayworks.pipelines.rl.critic import NAMESPACE, actor_name, make_critics


@pytest.fixture(scope="module")
def backbone(tiny_lm) -> Path:
    return tiny_lm(["Q: 1+2=\n<think>1+2=3 c0</think>A: 3"] * 20, d_model=16, n_layer=1)


def batch() -> RolloutBatch:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 12, (6, 9), generator=gen)
    mask = torch.ones(6, 6)
    mask[0, 4:] = 0
    attn = torch.cat([torch.ones(6, 3, dtype=torch.long), mask.long()], dim=1)
    return RolloutBatch(ids, attn, mask, torch.zeros(6, 6), torch.zeros(6), 3)


def test_critic_values_update_and_restart(ray_session, backbone, tmp_path):
    import ray

    cfg = CriticConfig(n_critics=2, resources={"CPU": 0.1}, epochs=3, minibatches=1)
    critics = make_critics(cfg, backbone, tmp_path, "t1", seed=0)
    b = batch()
    v0, v1 = ray.get([c.values.remote(b) for c in critics])
    assert v0.shape == (6, 6) and (v0[0, 4:] == 0).all()  # padding is zeroed
    assert not torch.allclose(v0, v1), "critics start from distinct heads"

    returns = torch.ones(6, 6) * b.response_mask
    first = ray.get(critics[0].update.remote(b, returns, [0, 1, 2], 1))
    again = ray.get(critics[0].update.remote(b, returns, [0, 1, 2], 1))
    assert again == first, "a repeated step is a no-op returning the recorded stats"
    second = ray.get(critics[0].update.remote(b, returns, [0, 1, 2], 2))
    assert second["critic_loss"] < first["critic_loss"]
    trained = ray.get(critics[0].values.remote(b))

    actor = ray.get_actor(actor_name("t1", 0), namespace=NAMESPACE)
    ray.kill(actor, no_restart=False)
    deadline = time.time() + 60
    while True:  # ray.kill is asynchronous: wait for the restarted incarnation to answer
        try:
            info = ray.get(critics[0].info.remote(), timeout=30)
            if info["restarts"] >= 1:
                break
        except ray.exceptions.RayActorError:
            pass
        assert time.time() < deadline, "the critic actor was not restarted within 60 s"
        time.sleep(0.1)
    after = ray.get(critics[0].values.remote(b), timeout=30)
    torch.testing.assert_close(after, trained)
    assert info["restarts"] == 1 and info["step"] == 2

    # Learner checkpoints hold every critic; restore rolls a critic back to that state.
    ray.get(critics[0].save.remote(str(tmp_path / "ckpt")))
    ray.get(critics[0].update.remote(b, returns, [3, 4, 5], 3))
    assert ray.get(critics[0].restore.remote(str(tmp_path / "ckpt"))) == 2
    torch.testing.assert_close(ray.get(critics[0].values.remote(b)), trained)
    for c in critics:
        ray.kill(c, no_restart=True)
