"""The `hf` rollout engine: exact logprobs, sampling contracts, weight-sync versions, Ray group."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rayworks.core.errors import UnknownNameError
from rayworks.platform.rollout import (
    HFEngine,
    SamplingConfig,
    StaleWeightsError,
    get_engine,
    make_engine_group,
)
from rayworks.platform.rollout_group import EngineGroup

TEXTS = ["the cat sat on the mat", "1+2=3 and 4+5=9", "hello world, hello ray"] * 20
PROMPTS = ["the cat", "1+2=", "hello world, hello", "a"]  # different lengths in one batch


@pytest.fixture(scope="module")
def model_dir(tiny_lm) -> Path:
    return tiny_lm(TEXTS)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> HFEngine:
    return HFEngine(model_dir)


def teacher_forced(
    model, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """log pi_T(o_t | s_t) from one forward over prompt + completion (no cache, no padding)."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def assert_logprobs_exact(model, rollouts, temperature: float = 1.0) -> None:
    for r in rollouts:
        assert len(r.logprobs) == len(r.completion_ids) > 0
        want = teacher_forced(model, r.prompt_ids, r.completion_ids, temperature)
        torch.testing.assert_close(torch.tensor(r.logprobs), want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_logprobs_match_teacher_forcing_across_padded_batch(engine, temperature, top_p):
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=12, seed=1)
    rollouts = engine.generate(PROMPTS, 3, sampling)
    assert len({len(r.prompt_ids) for r in rollouts}) == len(PROMPTS)
    # the sampling policy's logprobs: logits / temperature (raw logits for greedy), no top-p
    assert_logprobs_exact(engine.model, rollouts, temperature or 1.0)


def test_tempered_logprobs_are_not_the_raw_ones(engine):
    rollouts = engine.generate(
        PROMPTS, 3, SamplingConfig(temperature=0.7, max_new_tokens=12, seed=1)
    )
    gaps = [
        (torch.tensor(r.logprobs) - teacher_forced(engine.model, r.prompt_ids, r.completion_ids))
        .abs()
        .max()
        for r in rollouts
    ]
    assert max(gaps) > 1e-2  # the check above would catch raw logprobs at temperature 0.7


def test_rollouts_grouped_per_prompt_and_bounded(engine):
    rollouts = engine.generate(PROMPTS, 4, SamplingConfig(max_new_tokens=7, seed=0))
    assert [r.prompt_index for r in rollouts] == [i for i in range(len(PROMPTS)) for _ in range(4)]
    for r in rollouts:
        assert r.prompt_ids == engine.tok(PROMPTS[r.prompt_index]).input_ids
        assert 1 <= len(r.completion_ids) <= 7
        assert r.version == 0
        assert r.text == engine.tok.decode(r.completion_ids, skip_special_tokens=True)


def test_greedy_equals_transformers_generate(engine):
    rollouts = engine.generate(PROMPTS, 1, SamplingConfig(temperature=0, max_new_tokens=10))
    for r in rollouts:
        ref = engine.model.generate(
            input_ids=torch.tensor([r.prompt_ids]),
            max_new_tokens=10,
            do_sample=False,
            pad_token_id=engine.pad,
        )[0, len(r.prompt_ids) :].tolist()
        assert r.completion_ids == ref[: len(r.completion_ids)]
        assert len(r.completion_ids) == len(ref) or not r.finished


def test_seed_reproducible_and_top_p_tiny_is_greedy(engine):
    def run(**kw):
        cfg = SamplingConfig(max_new_tokens=10, **kw)
        return [r.completion_ids for r in engine.generate(PROMPTS, 2, cfg)]

    assert run(seed=5) == run(seed=5)
    assert run(seed=5) != run(seed=6)
    assert run(top_p=1e-6, seed=1) == run(top_p=1e-6, seed=2) == run(temperature=0)


def test_eos_stops_a_row_and_sets_finished(model_dir):
    eng = HFEngine(model_dir)
    greedy = SamplingConfig(temperature=0, max_new_tokens=9)
    eos = eng.generate(["a"], 1, greedy)[0].completion_ids[2]
    eng.eos = torch.tensor([eos])  # a token the greedy row emits third acts as EOS
    rollouts = eng.generate(PROMPTS, 1, greedy)
    assert rollouts[PROMPTS.index("a")].finished
    for r in rollouts:
        if r.finished:
            assert r.completion_ids[-1] == eos and eos not in r.completion_ids[:-1]
        else:
            assert len(r.completion_ids) == 9 and eos not in r.completion_ids
    assert len({len(r.completion_ids) for r in rollouts}) > 1
    assert_logprobs_exact(eng.model, rollouts)


def test_config_bounds_and_unknown_engine():
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0)
    with pytest.raises(ValueError):
        SamplingConfig(temperature=-1)
    with pytest.raises(UnknownNameError, match="known rollout engines: hf, vllm"):
        get_engine("sglang")


def perturbed(model, scale: float = 0.5) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {
        k: v + scale * torch.randn(v.shape, generator=gen) for k, v in model.state_dict().items()
    }


def test_weight_sync_versions(model_dir):
    eng = HFEngine(model_dir)
    sampling = SamplingConfig(max_new_tokens=8, seed=4)
    before = eng.generate(PROMPTS, 2, sampling)
    fresh = AutoModelForCausalLM.from_pretrained(str(model_dir))
    new = perturbed(fresh)
    fresh.load_state_dict(new)
    eng.load_weights(new, version=1)
    after = eng.generate(PROMPTS, 2, sampling)
    assert {r.version for r in before} == {0} and {r.version for r in after} == {1}
    assert_logprobs_exact(fresh, after)  # the new weights produced them
    assert [r.logprobs for r in after] != [r.logprobs for r in before]
    for stale in (1, 0):
        with pytest.raises(StaleWeightsError, match=f"version {stale} offered .* version 1"):
            eng.load_weights(new, version=stale)
    with pytest.raises(Exception, match="do not match"):
        eng.load_weights({"nope": torch.zeros(1)}, version=2)
    assert eng.version == 1


def test_load_during_generate_waits(model_dir):
    eng = HFEngine(model_dir)
    forwards: list[float] = []

    def slow_forward(*_):  # ~0.3 s of decoding; remembers when each forward ran
        time.sleep(0.01)
        forwards.append(time.perf_counter())

    eng.model.register_forward_pre_hook(slow_forward)
    result, times = {}, {}

    def load():
        times["load_started"] = time.perf_counter()
        eng.load_weights(perturbed(eng.model), version=7)
        times["loaded"] = time.perf_counter()

    gen_thread = threading.Thread(
        target=lambda: result.update(
            rollouts=eng.generate(PROMPTS, 2, SamplingConfig(max_new_tokens=30, seed=0))
        )
    )
    gen_thread.start()
    while not eng._lock.locked():
        time.sleep(0.001)
    load_thread = threading.Thread(target=load)
    load_thread.start()
    gen_thread.join()
    load_thread.join()
    assert {r.version for r in result["rollouts"]} == {0}
    # The load was issued mid-generation and completed only after its last forward pass.
    assert times["load_started"] < forwards[-1] < times["loaded"] and eng.version == 7


def test_ray_engine_group(ray_session, model_dir):
    import ray

    actors = make_engine_group("hf", model_dir, 2, resources={"CPU": 0.5})
    group = EngineGroup(actors, timeout_s=120, max_restarts=0)
    try:
        group.start()
        new = perturbed(AutoModelForCausalLM.from_pretrained(str(model_dir)))
        group.load(new, version=1)
        assert ray.get([a.get_version.remote() for a in actors]) == [1, 1]
        prompts = [*PROMPTS, "cat"]
        sampling = SamplingConfig(max_new_tokens=5, seed=0)
        rollouts = group.submit(prompts, 2, sampling, None, "a test").result()
        assert [r.prompt_index for r in rollouts] == [i for i in range(len(prompts)) for _ in "ab"]
        assert {r.version for r in rollouts} == {1}
        with pytest.raises(StaleWeightsError):
            group.load(new, version=1)
    finally:
        for actor in actors:
            ray.kill(actor)
