"""The masked diffusion LM: bidirectional forward, save/load marker, LLaDA SFT loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rayworks.core.errors import CheckpointNotFoundError
from rayworks.models.decoder import DecoderSpec, build_decoder
from rayworks.models.diffusion_lm import (
    build_diffusion_lm,
    diffusion_logits,
    load_diffusion_lm,
    mask_response,
    sample_t,
    sft_loss_from_logits,
)

SPEC = DecoderSpec(d_model=32, n_layer=2, n_head=4, max_seq_len=64)
MASK_ID = 3


def tiny(seed: int = 0):
    torch.manual_seed(seed)
    return build_diffusion_lm(SPEC, 19, MASK_ID, 1, 2, 0).eval()


def test_loss_weighting_matches_hand_computation() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    x0 = torch.randint(0, 7, (2, 5))
    masked = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 0, 1, 1]], dtype=torch.bool)
    p_mask = torch.tensor([0.25, 0.8])
    resp_len = torch.tensor([3.0, 4.0])
    expected = 0.0
    for b in range(2):
        total = 0.0
        for i in range(5):
            if masked[b, i]:
                total += -F.log_softmax(logits[b, i], -1)[x0[b, i]].item()
        expected += total / (float(p_mask[b]) * float(resp_len[b]))
    got = sft_loss_from_logits(logits, x0, masked, p_mask, resp_len)
    assert float(got) == pytest.approx(expected / 2, rel=1e-5)
    # the 1/t weight: the same masked CE at half the mask rate counts twice
    half = sft_loss_from_logits(logits[:1], x0[:1], masked[:1], p_mask[:1] / 2, resp_len[:1])
    one = sft_loss_from_logits(logits[:1], x0[:1], masked[:1], p_mask[:1], resp_len[:1])
    assert float(half) == pytest.approx(2 * float(one))


def test_mask_response_never_masks_the_prompt_and_masks_at_rate_t() -> None:
    x0 = torch.randint(5, 19, (4000, 30))
    response = torch.zeros_like(x0, dtype=torch.bool)
    response[:, 10:] = True
    xt, masked, p_mask = mask_response(x0, response, MASK_ID, torch.Generator().manual_seed(0))
    assert not masked[:, :10].any()
    assert torch.equal(xt[masked], torch.full_like(xt[masked], MASK_ID))
    assert torch.equal(xt[~masked], x0[~masked])
    rate = masked[:, 10:].float().mean(1)
    assert float((rate - p_mask).abs().mean()) < 0.1  # per-sample rate tracks its t
    assert float(p_mask.min()) >= 1e-3


def test_stratified_t_has_one_draw_per_stratum() -> None:
    t = sample_t(16, torch.Generator().manual_seed(0), stratified=True)
    assert sorted(int(v * 16) for v in t) == list(range(16))
    assert (t >= 0).all() and (t < 1).all()
    plain = sample_t(16, torch.Generator().manual_seed(0))
    assert sorted(int(v * 16) for v in plain) != list(range(16))


def test_forward_is_bidirectional() -> None:
    model = tiny()
    ids = torch.randint(4, 19, (1, 12))
    other = ids.clone()
    other[0, -1] = 4 if int(ids[0, -1]) != 4 else 5
    a, b = diffusion_logits(model, ids), diffusion_logits(model, other)
    assert not torch.allclose(a[:, 0], b[:, 0])  # a later token changes the first logits


def test_save_load_roundtrip_and_marker(tmp_path: Path) -> None:
    model = tiny()
    model.save_pretrained(tmp_path / "mdlm")
    assert list((tmp_path / "mdlm").glob("*.safetensors"))
    loaded = load_diffusion_lm(tmp_path / "mdlm")
    assert loaded.config.mask_token_id == MASK_ID
    ids = torch.randint(4, 19, (2, 10))
    assert torch.allclose(diffusion_logits(model, ids), diffusion_logits(loaded, ids))
    build_decoder(SPEC, 19).save_pretrained(tmp_path / "causal")
    with pytest.raises(CheckpointNotFoundError, match="not a masked diffusion LM"):
        load_diffusion_lm(tmp_path / "causal")
    with pytest.raises(ValueError, match="mask_id=40"):
        build_diffusion_lm(SPEC, 19, 40, 1, 2, 0)
