"""Rollout placement and survival: the colocated engine, async bookkeeping (which weights
produced which rows), engine restarts and deadlines (platform/rollout_group.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rayworks.platform.rollout import HFEngine, SamplingConfig, StaleWeightsError, make_engine_group
from rayworks.platform.rollout_group import (
    EngineGroup,
    EngineTimeoutError,
    LocalRollout,
    check_lag,
    resolve_placement,
)

TEXTS = ["the cat sat on the mat", "1+2=3 and 4+5=9", "hello world, hello ray"] * 20
PROMPTS = ["the cat", "1+2=", "hello world, hello"]
SAMPLING = SamplingConfig(max_new_tokens=6, seed=11)


@pytest.fixture(scope="module")
def model_dir(tiny_lm) -> Path:
    return tiny_lm(TEXTS)


def shifted(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: v + 0.5 * torch.randn(v.shape, generator=gen) for k, v in model.state_dict().items()}


def completions(rows) -> list[list[int]]:
    return [r.completion_ids for r in rows]


def reference(model_dir: Path, weights: dict[str, torch.Tensor] | None) -> list[list[int]]:
    """What a fresh engine loaded with `weights` samples for PROMPTS at SAMPLING."""
    engine = HFEngine(model_dir)
    if weights is not None:
        engine.load_weights(weights, 1)
    return completions(engine.generate(PROMPTS, 2, SAMPLING))


def test_resolve_placement():
    assert resolve_placement("auto", "hf", 1) == "colocated"
    assert resolve_placement("auto", "hf", 2) == "separate"
    assert resolve_placement("auto", "vllm", 1) == "separate"
    assert resolve_placement("separate", "hf", 1) == "separate"


def test_colocated_sync_generates_from_the_learner_module(model_dir, one_torch_thread):
    module = AutoModelForCausalLM.from_pretrained(str(model_dir)).train()
    tok = HFEngine(model_dir).tok
    source = LocalRollout.around(module, tok, None, True, background=False)
    rows = source.submit(PROMPTS, 2, SAMPLING, None, "step 0").result()
    assert completions(rows) == reference(model_dir, None)
    assert module.training  # generation put it in eval mode and back
    assert source.engine.model is module  # no copy: the learner's own weights

    with torch.no_grad():  # the learner updates its module in place; a load copies nothing
        for name, value in shifted(module, 1).items():
            module.state_dict()[name].copy_(value)
    source.load(module.state_dict(), 1)
    rows = source.submit(PROMPTS, 2, SAMPLING, None, "step 1").result()
    assert {r.version for r in rows} == {1}
    assert completions(rows) == reference(model_dir, module.state_dict())
    with pytest.raises(StaleWeightsError):
        source.load(module.state_dict(), 1)


def test_colocated_async_rows_come_from_the_version_they_were_submitted_against(
    model_dir, one_torch_thread
):
    module = AutoModelForCausalLM.from_pretrained(str(model_dir))
    base = {k: v.clone() for k, v in module.state_dict().items()}
    tok = HFEngine(model_dir).tok
    source = LocalRollout.around(module, tok, None, True, background=True)
    try:
        first = source.submit(PROMPTS, 2, SAMPLING, None, "step 1")  # queued: version 0
        new = shifted(module, 2)
        module.load_state_dict(new)
        source.load(module.state_dict(), 1, wait=False)  # queued behind `first`
        with torch.no_grad():  # training goes on: the load must have taken a snapshot
            for p in module.parameters():
                p.add_(1.0)
        second = source.submit(PROMPTS, 2, SAMPLING, None, "step 2")
        rows1, rows2 = first.result(), second.result()
    finally:
        source.close()
    assert {r.version for r in rows1} == {0} and {r.version for r in rows2} == {1}
    assert completions(rows1) == reference(model_dir, base)
    assert completions(rows2) == reference(model_dir, new)
    # the behaviour logprobs (the ratio's denominator) are those of the sampling weights
    engine = HFEngine(model_dir)
    engine.load_weights(new, 1)
    assert [r.logprobs for r in rows2] == [
        r.logprobs for r in engine.generate(PROMPTS, 2, SAMPLING)
    ]
    assert check_lag(rows1, 1, 1) == [1] * len(rows1)
    with pytest.raises(StaleWeightsError, match="max_staleness=1"):
        check_lag(rows1, 2, 1)
    with pytest.raises(StaleWeightsError):
        check_lag(rows2, 0, 1)  # rows newer than the step


def wait_for_new_process(actor, old: str, deadline_s: float = 120) -> None:
    import ray

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if ray.get(actor.incarnation.remote(), timeout=deadline_s) != old:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass
        time.sleep(0.05)
    raise AssertionError("the engine actor was not restarted in time")


def test_a_killed_engine_is_restarted_and_reloaded(ray_session, model_dir):
    import ray

    actors = make_engine_group("hf", model_dir, 1, {"CPU": 0.3}, max_restarts=2)
    group = EngineGroup(actors, timeout_s=120, max_restarts=2)
    try:
        group.start()
        new = shifted(AutoModelForCausalLM.from_pretrained(str(model_dir)), 4)
        group.load(new, 1)
        expected = reference(model_dir, new)
        old = ray.get(actors[0].incarnation.remote())

        # killed between calls: the restarted engine would answer from version 0
        ray.kill(actors[0], no_restart=False)
        wait_for_new_process(actors[0], old)
        rows = group.submit(PROMPTS, 2, SAMPLING, None, "step 1").result()
        assert group.restarts == 1
        assert {r.version for r in rows} == {1} and completions(rows) == expected

        # killed while a call is in flight: whether the kill lands before the call ends or
        # after, the rows are version 1's (a lost call is generated again after a reload),
        # and the next call finds the engine reloaded
        before = ray.get(actors[0].incarnation.remote())
        pending = group.submit(PROMPTS, 2, SAMPLING, None, "step 2")
        ray.kill(actors[0], no_restart=False)
        rows = pending.result()
        assert {r.version for r in rows} == {1} and completions(rows) == expected
        wait_for_new_process(actors[0], before)
        rows = group.submit(PROMPTS, 2, SAMPLING, None, "step 3").result()
        assert group.restarts == 2
        assert {r.version for r in rows} == {1} and completions(rows) == expected
        assert ray.get(actors[0].get_version.remote()) == 1
    finally:
        ray.kill(actors[0], no_restart=True)


def test_a_lost_shard_of_the_previous_version_is_generated_again_from_it(ray_session, model_dir):
    """Async step 1: its rows (version 0) are in flight and version 1's load is queued
    behind them when the engine dies. The group reloads version 0 (kept: the learner
    published its start, `StepDriver.begin`), generates the shard again, and leaves the
    engine at version 1 for the next step. Whether the kill lands before the call ends or
    after, the rows are version 0's. An engine killed between calls whose next call is a
    load (which its new process takes) is counted too."""
    import ray

    base = AutoModelForCausalLM.from_pretrained(str(model_dir)).state_dict()
    new = shifted(AutoModelForCausalLM.from_pretrained(str(model_dir)), 5)
    actors = make_engine_group("hf", model_dir, 1, {"CPU": 0.3}, max_restarts=2)
    group = EngineGroup(actors, timeout_s=120, max_restarts=2)
    try:
        group.start()
        group.load(base, 0, rollback=True)
        assert sorted(group.weights) == [0]
        long = SAMPLING.model_copy(update={"max_new_tokens": 60})  # long enough to be in flight
        pending = group.submit(PROMPTS * 8, 4, long, None, "training step 1")
        group.load(new, 1, wait=False)  # StepDriver.finish(0) in async mode
        ray.kill(actors[0], no_restart=False)
        rows = pending.result()
        assert {r.version for r in rows} == {0}
        engine = HFEngine(model_dir)
        assert completions(rows) == completions(engine.generate(PROMPTS * 8, 4, long))
        rows = group.submit(PROMPTS, 2, SAMPLING, None, "training step 2").result()
        assert group.restarts == 1 and sorted(group.weights) == [0, 1]
        assert {r.version for r in rows} == {1} and completions(rows) == reference(model_dir, new)

        before = ray.get(actors[0].incarnation.remote())
        ray.kill(actors[0], no_restart=False)
        wait_for_new_process(actors[0], before)
        group.load(base, 2)
        assert group.restarts == 2 and ray.get(actors[0].get_version.remote()) == 2
    finally:
        ray.kill(actors[0], no_restart=True)


def test_a_hung_call_fails_with_an_error_naming_the_engine_and_step(ray_session, model_dir):
    import ray

    actors = make_engine_group("hf", model_dir, 1, {"CPU": 0.3})
    group = EngineGroup(actors, timeout_s=120, max_restarts=0)
    try:
        group.start()
        group.timeout_s = 0.001  # no 40-token generation answers within a millisecond
        slow = SAMPLING.model_copy(update={"max_new_tokens": 40})
        with pytest.raises(EngineTimeoutError, match=r"rollout engine 0 .*training step 7"):
            group.submit(PROMPTS * 4, 4, slow, None, "training step 7").result()
    finally:
        ray.kill(actors[0], no_restart=True)
