"""`kv_forward`: the explicit forward equals HF's, and its cache selects per head."""

from __future__ import annotations

import pytest
import torch

from rayworks.models.decoder import DecoderSpec, build_decoder
from rayworks.models.kv_forward import KVCache, forward


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    spec = DecoderSpec(d_model=32, n_layer=2, n_head=4, n_kv_head=2, max_seq_len=128)
    return build_decoder(spec, vocab_size=40).eval()


@torch.no_grad()
def test_logits_equal_hf_forward_with_and_without_cache(model) -> None:
    ids = torch.randint(4, 40, (2, 24), generator=torch.Generator().manual_seed(1))
    ref = model(ids).logits
    assert torch.allclose(forward(model, ids), ref, atol=1e-5)
    cache = KVCache()
    first = forward(model, ids[:, :17], cache=cache)
    rest = forward(model, ids[:, 17:], cache=cache)
    assert torch.allclose(torch.cat([first, rest], 1), ref, atol=1e-5)
    assert len(cache) == 24 and cache.lengths() == [24, 24]
    assert (
        cache.nbytes() == 2 * 2 * 2 * 2 * 24 * 8 * 4
    )  # layers x (k, v) x B x kv heads x T x head_dim x fp32


@torch.no_grad()
def test_positions_not_indices_decide_rope_and_causality(model) -> None:
    """A sequence with a hole, fed at its original positions, equals masking that key out."""
    ids = torch.randint(4, 40, (1, 12), generator=torch.Generator().manual_seed(2))
    kept = torch.tensor([i for i in range(12) if i not in (3, 4, 7)])
    holey = forward(model, ids[:, kept], positions=kept[None])
    keep = torch.ones(1, 12, dtype=torch.bool)
    keep[0, [3, 4, 7]] = False
    masked = forward(model, ids, key_keep=keep)
    assert torch.allclose(holey, masked[:, kept], atol=1e-5)
    renumbered = forward(model, ids[:, kept])
    assert not torch.allclose(holey, renumbered, atol=1e-3)


@torch.no_grad()
def test_per_head_selection_and_bidirectional_mode(model) -> None:
    ids = torch.randint(4, 40, (1, 16), generator=torch.Generator().manual_seed(3))
    cache = KVCache()
    forward(model, ids[:, :15], cache=cache)
    everything = [torch.arange(15).expand(1, 2, 15).flip(-1) for _ in range(2)]
    nxt = ids[:, 15:]
    full = forward(model, nxt, cache=cache.select(everything))
    assert torch.allclose(full, model(ids).logits[:, -1:], atol=1e-5)
    # head 0 keeps the first 5 entries, head 1 the last 5: different, and differs from full
    per_head = [torch.stack([torch.arange(5), torch.arange(10, 15)])[None] for _ in range(2)]
    small = cache.select(per_head)
    assert small.layers[0].pos[0, 0].tolist() == [0, 1, 2, 3, 4]
    assert small.layers[0].pos[0, 1].tolist() == [10, 11, 12, 13, 14]
    assert not torch.allclose(forward(model, nxt, cache=small), full, atol=1e-4)
    assert small.crop(3).lengths() == [3, 3]
    with pytest.raises(ValueError, match="same count on every head"):
        small.drop_positions(3)
    shifted = cache.select([torch.arange(15).flip(-1).expand(1, 2, 15)] * 2).drop_positions(12)
    assert shifted.layers[1].pos[0, 1].tolist() == list(range(11, -1, -1))  # order kept
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1 - 4) % 36 + 4  # a different last token
    same = forward(model, ids)[:, :-1], forward(model, changed)[:, :-1]
    assert torch.allclose(*same, atol=1e-6)  # causal: earlier tokens never see it
    bidir = forward(model, ids, mask="none")[:, 0], forward(model, changed, mask="none")[:, 0]
    assert not torch.allclose(*bidir, atol=1e-4)  # bidirectional: the first token does


@torch.no_grad()
def test_recorded_rows_are_the_softmax_of_the_chosen_queries(model) -> None:
    ids = torch.randint(4, 40, (1, 10), generator=torch.Generator().manual_seed(4))
    rows: dict[int, torch.Tensor] = {}
    forward(
        model, ids, record=lambda layer, p: rows.__setitem__(layer, p), record_rows=slice(-3, None)
    )
    assert sorted(rows) == [0, 1] and rows[0].shape == (1, 4, 3, 10)
    assert torch.allclose(rows[1].sum(-1), torch.ones(1, 4, 3))
    assert (rows[0][0, :, 0, 8:] == 0).all()  # query at position 7 sees no later key
