"""The tiny LLaVA: built from configs, saved and reloaded by transformers, generating the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayworks.core.errors import RayworksError
from rayworks.data.tasks import get_task
from rayworks.models import TokenizerSpec, load_causal_lm, train_tokenizer
from rayworks.models.vlm import (
    IMAGE_TOKEN,
    VLMSpec,
    build_vlm,
    encode_multimodal,
    is_multimodal,
    load_processor,
)
from rayworks.platform.rollout import HFEngine, SamplingConfig

SPEC = VLMSpec(vision_d=16, text={"d_model": 32, "n_layer": 1, "n_head": 2, "max_seq_len": 96})


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    examples = get_task("shapes").examples(16, "train", 0)
    tok = train_tokenizer(TokenizerSpec(), [e.text for e in examples] + ["0123456789"])
    torch.manual_seed(0)
    model, processor = build_vlm(SPEC, tok)
    path = tmp_path_factory.mktemp("vlm")
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path, model, examples


def test_processor_expands_one_image_token_per_patch(vlm_dir):
    path, _, examples = vlm_dir
    processor = load_processor(path)
    rows, pixels = encode_multimodal(processor, [examples[0].prompt], [examples[0].image])
    image_id = processor.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert rows[0].count(image_id) == SPEC.image_tokens == 16
    assert rows[0][:16] == [image_id] * 16
    assert pixels.shape == (1, 3, 32, 32)
    assert float(pixels.min()) >= -1.0 and float(pixels.max()) <= 1.0


def test_vlm_reloads_with_identical_logits_and_images_matter(vlm_dir):
    path, model, examples = vlm_dir
    assert is_multimodal(path) and load_processor(path) is not None
    reloaded = load_causal_lm(path).eval()
    assert type(reloaded).__name__ == "LlavaForConditionalGeneration"
    processor = load_processor(path)
    rows, pixels = encode_multimodal(
        processor, [examples[0].prompt] * 2, [examples[0].image, examples[1].image]
    )
    ids = torch.tensor(rows)
    with torch.no_grad():
        a = model.eval()(input_ids=ids, pixel_values=pixels).logits
        b = reloaded(input_ids=ids, pixel_values=pixels).logits
    assert torch.equal(a, b)
    assert not torch.allclose(a[0, -1], a[1, -1])  # same text, different image


def test_engine_generates_identically_after_reload_and_needs_images(vlm_dir, tmp_path):
    path, model, examples = vlm_dir
    prompts, images = [e.prompt for e in examples[:3]], [e.image for e in examples[:3]]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=3)
    first = HFEngine(path).generate(prompts, 2, sampling, images)
    model.save_pretrained(tmp_path)
    load_processor(path).save_pretrained(tmp_path)
    again = HFEngine(tmp_path).generate(prompts, 2, sampling, images)
    assert [r.completion_ids for r in first] == [r.completion_ids for r in again]
    assert [r.logprobs for r in first] == [r.logprobs for r in again]
    assert [r.prompt_index for r in first] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(RayworksError, match="vision-language policy got no images"):
        HFEngine(path).generate(prompts, 1, sampling)


def test_engine_logprobs_match_a_plain_forward(vlm_dir):
    """The learner recomputes log pi with one forward over (image, prompt, response)."""
    path, _, examples = vlm_dir
    engine = HFEngine(path)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=1)
    (r,) = engine.generate([examples[2].prompt], 1, sampling, [examples[2].image])
    _, pixels = encode_multimodal(engine.processor, [examples[2].prompt], [examples[2].image])
    ids = torch.tensor([r.prompt_ids + r.completion_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids, pixel_values=pixels).logits[0]
    p = len(r.prompt_ids)
    logp = torch.log_softmax(logits[p - 1 : -1].float(), -1)
    want = logp.gather(-1, torch.tensor(r.completion_ids)[:, None]).squeeze(-1)
    assert np.allclose(want.numpy(), r.logprobs, atol=1e-5)


def test_engine_never_samples_the_image_placeholder(vlm_dir):
    path, _, examples = vlm_dir
    engine = HFEngine(path)
    image_id = engine.processor.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    with torch.no_grad():  # make <image> the most likely next token everywhere
        engine.model.lm_head.weight[image_id] = (
            5.0 * engine.model.lm_head.weight.abs().max(1).values.max()
        )
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=0)
    out = engine.generate([examples[0].prompt], 4, sampling, [examples[0].image])
    assert all(image_id not in r.completion_ids for r in out)
    assert max(r.logprobs[0] for r in out) < -1.0  # its mass is still in the logprobs
