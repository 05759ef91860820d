"""Compressed-domain inference computes exactly what the reconstructed dense model does."""

from __future__ import annotations

import pytest
import torch

from rayworks.pipelines.lestd.compress import StageOptions, compress_model, layer_memos
from rayworks.pipelines.lestd.compressed_attention import LowRankLinear, TuckerAttention
from rayworks.pipelines.lestd.evaluate import attention_logit_error

HALF_R2 = StageOptions(r2_fractions=(0.5,))  # R2 < d_h: the V -> O path really drops U2


@pytest.mark.parametrize(
    ("method", "opts"),
    [
        ("lestd", StageOptions()),
        ("lestd", HALF_R2),
        ("lestd_norefit", HALF_R2),
        ("tucker", StageOptions()),
        ("svd", StageOptions()),
    ],
)
def test_compressed_domain_equals_reconstructed_dense(
    tiny_llama, method: str, opts: StageOptions
) -> None:
    memos = layer_memos(tiny_llama, iters=5)
    comp = compress_model(tiny_llama, memos, method, 4, opts)
    kind = LowRankLinear if method == "svd" else TuckerAttention
    layer = comp.compressed.model.layers[0].self_attn
    assert isinstance(layer if kind is TuckerAttention else layer.q_proj, kind)
    ids = torch.randint(4, 40, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = comp.compressed(input_ids=ids).logits
        want = comp.reconstructed(input_ids=ids).logits
        dense = tiny_llama(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    assert (want - dense).abs().max() > 1e-3  # the compression did change the model
    if opts is HALF_R2:
        assert comp.stats["r2"] == 4


def test_logit_error_is_zero_for_the_dense_model_and_grows_with_ratio(tiny_llama) -> None:
    ids = torch.randint(4, 40, (2, 16), generator=torch.Generator().manual_seed(1))
    assert attention_logit_error(tiny_llama, tiny_llama, ids) == 0.0
    memos = layer_memos(tiny_llama, iters=5)
    errs = [
        attention_logit_error(
            tiny_llama,
            compress_model(tiny_llama, memos, "lestd", r, StageOptions()).reconstructed,
            ids,
        )
        for r in (2, 16)
    ]
    assert 0 < errs[0] < errs[1]
