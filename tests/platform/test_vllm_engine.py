"""The `vllm` rollout engine: a clear error without vLLM (CPU); real runs on CUDA (gpu)."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest
import torch

from rayworks.core.errors import RayworksError
from rayworks.models import DecoderSpec, TokenizerSpec, decoder_for, train_tokenizer
from rayworks.platform.rollout import SamplingConfig, StaleWeightsError, get_engine
from rayworks.platform.vllm_engine import VLLMEngine

TEXTS = ["the cat sat on the mat", "1+2=3 and 4+5=9", "hello world, hello ray"] * 20
PROMPTS = ["the cat", "1+2=", "hello world, hello"]


def test_missing_vllm_names_the_install_command(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    assert get_engine("vllm") is VLLMEngine  # registered without importing vLLM
    with pytest.raises(RayworksError, match=r'pip install -e "\.\[gpu\]"'):
        VLLMEngine(tmp_path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vllm-policy")
    tok = train_tokenizer(TokenizerSpec(), TEXTS)
    torch.manual_seed(0)
    # vLLM's attention kernels want a head size it supports (64 here).
    decoder_for(DecoderSpec(d_model=128, n_layer=2, n_head=2), tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def teacher_forced(model, prompt_ids, completion_ids) -> torch.Tensor:
    ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    target = torch.tensor(completion_ids, device=model.device)[:, None]
    return torch.log_softmax(logits, -1).gather(-1, target)[:, 0].cpu()


@pytest.mark.gpu
def test_vllm_rollouts_logprobs_and_weight_sync(model_dir):
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM

    engine = VLLMEngine(model_dir, dtype="float32", gpu_memory_utilization=0.2)
    ref = AutoModelForCausalLM.from_pretrained(str(model_dir)).cuda().eval()
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=12, seed=0)
    rollouts = engine.generate(PROMPTS, 3, sampling)
    assert [r.prompt_index for r in rollouts] == [i for i in range(3) for _ in range(3)]
    for r in rollouts:
        assert len(r.logprobs) == len(r.completion_ids) > 0 and r.version == 0
        want = teacher_forced(ref, r.prompt_ids, r.completion_ids)
        torch.testing.assert_close(torch.tensor(r.logprobs), want, atol=2e-3, rtol=0)

    greedy = SamplingConfig(temperature=0, max_new_tokens=8)
    assert engine.generate(PROMPTS, 1, greedy) == engine.generate(PROMPTS, 1, greedy)

    new = {k: v + 0.3 * torch.randn_like(v) for k, v in ref.state_dict().items()}
    ref.load_state_dict(new)
    engine.load_weights(new, version=1)
    after = engine.generate(PROMPTS, 2, sampling)
    assert {r.version for r in after} == {1}
    for r in after:
        want = teacher_forced(ref, r.prompt_ids, r.completion_ids)
        torch.testing.assert_close(torch.tensor(r.logprobs), want, atol=2e-3, rtol=0)
    with pytest.raises(StaleWeightsError):
        engine.load_weights(new, version=1)


@pytest.mark.gpu
def test_vllm_vlm_rollouts_match_the_hf_forward_and_sync(tmp_path):
    """The tiny LLaVA through vLLM: expanded image tokens in prompt_ids, logprobs that a
    teacher-forced HF forward with the same pixels reproduces, weights synced in place."""
    pytest.importorskip("vllm")
    from rayworks.data.tasks import get_task
    from rayworks.models.vlm import VLMSpec, build_vlm, encode_multimodal

    examples = get_task("shapes").examples(3, "test", 0)
    tok = train_tokenizer(TokenizerSpec(), [e.text for e in examples] + ["0123456789"])
    torch.manual_seed(0)
    spec = VLMSpec(vision_d=64, text=DecoderSpec(d_model=128, n_layer=2, n_head=2, max_seq_len=128))
    model, processor = build_vlm(spec, tok)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    engine = VLLMEngine(tmp_path, dtype="float32", gpu_memory_utilization=0.2)
    prompts, images = [e.prompt for e in examples], [e.image for e in examples]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10, seed=0)
    rollouts = engine.generate(prompts, 2, sampling, images)
    rows, pixels = encode_multimodal(processor, prompts, images)
    model = model.cuda().eval()
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    for r in rollouts:
        assert r.prompt_ids == rows[r.prompt_index]  # vLLM expanded <image> as we do
        assert image_id not in r.completion_ids
        ids = torch.tensor([r.prompt_ids + r.completion_ids], device="cuda")
        with torch.no_grad():
            out = model(
                input_ids=ids, pixel_values=pixels[r.prompt_index : r.prompt_index + 1].cuda()
            )
        logits = out.logits[0, len(r.prompt_ids) - 1 : -1].float()
        want = (
            torch.log_softmax(logits, -1)
            .gather(-1, torch.tensor(r.completion_ids, device="cuda")[:, None])[:, 0]
            .cpu()
        )
        torch.testing.assert_close(torch.tensor(r.logprobs), want, atol=2e-3, rtol=0)
    new = {k: v + 0.1 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.load_weights(new, version=1)
    assert {r.version for r in engine.generate(prompts, 1, sampling, images)} == {1}
