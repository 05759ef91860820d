"""The pure pieces of benchmarks/rl_learning.py and benchmarks/trl_peer.py (no trl needed)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import rl_learning
import trl_peer

from rayworks.pipelines.rl.learner import StepDriver


def test_step_rows_are_the_step_drivers_prompts_in_order() -> None:
    """TRL's train dataset is our run's prompt sequence, across epochs of the pool too."""
    cfg = trl_peer.rl_config(["rollout.prompts_per_step=4", "seed=3"])
    pool = list(range(50))  # StepDriver.prompts returns pool[i]: here the index itself
    driver = SimpleNamespace(cfg=cfg, data=SimpleNamespace(train=pool))
    rows = trl_peer.step_rows(len(pool), 4, cfg.seed, 30)  # 12 steps per epoch: 3 epochs
    assert rows == [i for s in range(30) for i in StepDriver.prompts(driver, s)]
    assert rows != trl_peer.step_rows(len(pool), 4, 4, 30)  # the seed moves the order


def test_loss_type_matches_our_aggregation() -> None:
    assert trl_peer.loss_type(trl_peer.rl_config()) == "dapo"
    assert trl_peer.loss_type(trl_peer.rl_config(["loss.minibatches=2"])) == "bnpo"
    assert trl_peer.loss_type(trl_peer.rl_config(["loss.agg=seq-mean-token-mean"])) == "grpo"
    assert (
        trl_peer.updates_per_step(trl_peer.rl_config(["loss.minibatches=2", "loss.ppo_epochs=3"]))
        == 6
    )


def test_t_interval_uses_student_t() -> None:
    stat = rl_learning.t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, df=2) x sd 1 / sqrt(3)
    assert stat["mean"] == 2.0 and stat["n"] == 3
    assert math.isclose(stat["ci95"][0], 2 - half) and math.isclose(stat["ci95"][1], 2 + half)
    one = rl_learning.t_interval([0.5, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.5 and one["ci95"] is None
    assert rl_learning.fmt(one) == "0.500 (n=1)"


def test_verdict_ours_within_trls_interval_or_above() -> None:
    trl = {"mean": 0.5, "ci95": [0.4, 0.6], "n": 3}
    assert rl_learning.verdict({"mean": 0.7, "ci95": None, "n": 3}, trl).startswith(
        "yes: ours 0.700 is above"
    )
    assert rl_learning.verdict({"mean": 0.45, "ci95": None, "n": 3}, trl).startswith(
        "yes: ours 0.450 is within"
    )
    assert rl_learning.verdict({"mean": 0.3, "ci95": None, "n": 3}, trl).startswith("no")
    assert rl_learning.verdict(None, trl).startswith("n/a")
