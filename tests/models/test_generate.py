"""The one KV-cached decode loop (`models/generate.py`) against full forwards."""

from __future__ import annotations

import pytest
import torch

from rayworks.models import load_causal_lm
from rayworks.models.generate import KVDecoder


# RoPE (our decoder) is blind to a per-row position shift; GPT-2's learned absolute
# positions are not, so it checks that positions restart after each row's padding.
@pytest.mark.parametrize("builder", ["tiny_lm", "tiny_gpt2"])
def test_padded_cached_decoding_equals_each_row_decoded_alone(builder, request, one_torch_thread):
    model = load_causal_lm(request.getfixturevalue(builder)()).eval()
    rows = [[5, 9, 13, 2, 7], [11, 4], [3, 3, 8]]
    steps = [torch.tensor([6, 12, 1]), torch.tensor([10, 2, 9])]
    decoder = KVDecoder(model, rows, pad=0)
    seen = [decoder.logits]
    for tokens in steps:
        seen.append(decoder.step(tokens))
    with torch.no_grad():
        for i, row in enumerate(rows):
            for t in range(len(steps) + 1):
                ids = torch.tensor([row + [int(s[i]) for s in steps[:t]]])
                alone = model(input_ids=ids).logits[0, -1]
                torch.testing.assert_close(seen[t][i], alone, atol=1e-5, rtol=1e-4)
