"""SpecKV scoring, pooling, GQA reduction and per-head selection; `compressed_prefill`."""

from __future__ import annotations

import pytest
import torch

from rayworks.models import DecoderSpec
from rayworks.models.kv_forward import KVCache, forward
from rayworks.pipelines.speckv.kv_policies import (
    KVPolicyConfig,
    compressed_prefill,
    group_max,
    keep_indices,
    max_pool,
    top_with_window,
    window_scores,
)


def attention_map() -> torch.Tensor:
    """[1, 4 query heads, 2 rows, 10 keys]; heads 0-1 share KV head 0, heads 2-3 KV head 1."""
    p = torch.zeros(1, 4, 2, 10)
    p[0, 0, 0, 2] = 0.5  # KV head 0: key 2 (0.5, row 0 of head 0)
    p[0, 1, 1, 2] = 0.7  #            key 2 (0.7, row 1 of head 1) -> max 0.7
    p[0, 1, 0, 5] = 0.4  #            key 5
    p[0, 2, 1, 7] = 0.9  # KV head 1: key 7
    p[0, 3, 0, 0] = 0.3  #            key 0
    p[0, :, :, 9] = 0.05  # a window key: never scored
    return p


def test_group_max_reduces_rows_and_the_heads_of_each_group() -> None:
    s = group_max(attention_map(), n_kv=2)
    assert s.shape == (1, 2, 10)
    assert s[0, 0].tolist() == pytest.approx([0, 0, 0.7, 0, 0, 0.4, 0, 0, 0, 0.05])
    assert s[0, 1].tolist() == pytest.approx([0.3, 0, 0, 0, 0, 0, 0, 0.9, 0, 0.05])


def test_max_pool_is_centred_stride_one_same_length() -> None:
    x = torch.tensor([0.0, 0, 5, 0, 0, 0, 1, 0])
    assert max_pool(x, 3).tolist() == [0, 5, 5, 5, 0, 1, 1, 1]
    assert max_pool(x, 1).tolist() == x.tolist()
    assert max_pool(x, 5).tolist() == [5, 5, 5, 5, 5, 1, 1, 1]


def test_window_scores_pool_and_top_k_per_head() -> None:
    # n = 10 prompt keys, window w = 2: keys 8, 9 are the window, keys 0..7 are scored
    s = window_scores(attention_map(), n_kv=2, n_prompt=10, window=2, kernel=3)
    assert s.shape == (1, 2, 8)
    assert s[0, 0].tolist() == pytest.approx([0, 0.7, 0.7, 0.7, 0.4, 0.4, 0.4, 0])
    assert s[0, 1].tolist() == pytest.approx([0.3, 0.3, 0, 0, 0, 0, 0.9, 0.9])
    keep = top_with_window(s, n_prompt=10, budget=5, window=2)
    assert keep.shape == (1, 2, 5)
    assert keep[0, 0].tolist() == [1, 2, 3, 8, 9]  # key 2 and its pooled neighbours + window
    head1 = keep[0, 1].tolist()  # a different set on the other KV head (0 and 1 tie at 0.3)
    assert head1[1:] == [6, 7, 8, 9] and head1[0] in (0, 1)


def test_speckv_lookahead_rows_change_the_selection() -> None:
    """The window points at key 1; the (draft) lookahead query points at key 6."""
    window = torch.zeros(1, 2, 3, 10)
    window[..., 1] = 1.0
    look = torch.zeros(1, 2, 1, 10)
    look[..., 6] = 1.0
    cfg = KVPolicyConfig(window=2, kernel=1)
    snap = keep_indices("snapkv", 10, 3, 1, cfg, window)
    spec = keep_indices("speckv", 10, 4, 1, cfg, torch.cat([window, look], 2))
    assert snap[0, 0].tolist() == [1, 8, 9]
    assert spec[0, 0].tolist() == [1, 6, 8, 9]


def test_streaming_and_random_keep_budget_entries() -> None:
    cfg = KVPolicyConfig(window=2, sinks=2)
    keep = keep_indices("streaming", 20, 6, 3, cfg)
    assert keep.shape == (1, 3, 6) and keep[0, 0].tolist() == [0, 1, 16, 17, 18, 19]
    rnd = keep_indices("random", 20, 6, 3, cfg, generator=torch.Generator().manual_seed(0))
    assert rnd.shape == (1, 3, 6)
    assert all(r[-2:] == [18, 19] and len(set(r)) == 6 for r in rnd[0].tolist())
    assert keep_indices("snapkv", 20, 30, 3, cfg).shape == (1, 3, 20)  # C >= n keeps all


@pytest.fixture(scope="module")
def tiny_pair():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)

    def make(layers: int, d: int) -> LlamaForCausalLM:
        spec = DecoderSpec(d_model=d, n_layer=layers, n_head=4, n_kv_head=2, max_seq_len=128)
        cfg = LlamaConfig(
            vocab_size=40,
            hidden_size=d,
            intermediate_size=2 * d,
            num_hidden_layers=spec.n_layer,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            eos_token_id=2,
        )
        return LlamaForCausalLM(cfg).eval()

    return make(2, 32), make(1, 16)


def greedy_from(target, cache: KVCache, logits: torch.Tensor, steps: int) -> list[int]:
    out = []
    for _ in range(steps):
        tok = int(logits[0].argmax())
        out.append(tok)
        logits = forward(target, torch.tensor([[tok]]), cache=cache, logits_rows=slice(-1, None))[
            :, -1
        ]
    return out


def reference_greedy(target, ids: torch.Tensor, steps: int) -> list[int]:
    """Plain full-cache greedy decoding through transformers' own forward (no KVCache)."""
    seq = ids
    with torch.no_grad():
        for _ in range(steps):
            tok = target(input_ids=seq).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, tok], 1)
    return seq[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("policy", ["full", "snapkv", "speckv", "h2o", "streaming", "random"])
def test_budget_at_least_context_decodes_like_the_full_cache(tiny_pair, policy) -> None:
    target, draft = tiny_pair
    ids = torch.randint(4, 40, (1, 24), generator=torch.Generator().manual_seed(1))
    budget = 1000 if policy != "full" else 4
    with torch.no_grad():
        cache, logits, stats = compressed_prefill(
            target, ids, policy, budget, draft, max_new_tokens=5
        )
        got = greedy_from(target, cache, logits, 8)
    assert got == reference_greedy(target, ids, 8)
    assert stats["kv_bytes"] == stats["kv_bytes_full"] > 0


@pytest.mark.parametrize("policy", ["snapkv", "speckv", "h2o", "streaming", "random"])
def test_compressed_cache_keeps_budget_entries_per_head(tiny_pair, policy) -> None:
    target, draft = tiny_pair
    ids = torch.randint(4, 40, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache, logits, stats = compressed_prefill(target, ids, policy, 10, draft, max_new_tokens=4)
        ref = forward(target, ids, logits_rows=slice(-1, None))[:, -1]
    assert torch.allclose(logits, ref, atol=1e-5)  # the prefill itself is exact
    assert cache.lengths() == [10, 10]
    for layer in cache.layers:
        assert layer.pos.shape == (1, 2, 10)
        assert int(layer.pos.max()) == 29 and int(layer.pos.min()) >= 0  # lookahead cropped
        for head in layer.pos[0]:
            assert head.unique().numel() == 10
            assert head[-4:].tolist() == [26, 27, 28, 29]  # the window w = 4
    assert stats["kv_bytes"] == pytest.approx(stats["kv_bytes_full"] * 10 / 30)
    if policy == "speckv":
        assert stats["lookahead_tokens"] >= 1 and stats["draft_seconds"] > 0


def test_bad_policy_and_missing_draft_raise(tiny_pair) -> None:
    target, _ = tiny_pair
    ids = torch.randint(4, 40, (1, 12))
    with pytest.raises(ValueError, match=r"'pyramid'.*allowed.*snapkv"):
        compressed_prefill(target, ids, "pyramid", 4)
    with pytest.raises(ValueError, match=r"speckv.*draft"):
        compressed_prefill(target, ids, "speckv", 4)
