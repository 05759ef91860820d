"""The tiny decoder on CUDA in bf16: the path a GPU cluster takes (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

from rayworks.models import DecoderSpec, TokenizerSpec, decoder_for, train_tokenizer


@pytest.mark.gpu
def test_decoder_trains_in_bf16_on_cuda_and_matches_fp32_logits():
    tok = train_tokenizer(TokenizerSpec(), ["Q: 12+34=\n<think>2+4=6 c0|1+3=4 c0</think>A: 46"])
    torch.manual_seed(0)
    model = decoder_for(DecoderSpec(d_model=64, n_layer=2, n_head=4), tok).cuda()
    ids = torch.randint(4, len(tok), (8, 32), device="cuda")
    with torch.no_grad():
        ref = model(input_ids=ids).logits.float()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = model(input_ids=ids).logits.float()
    assert torch.allclose(ref, low, atol=0.1, rtol=0.05)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] - 0.5
