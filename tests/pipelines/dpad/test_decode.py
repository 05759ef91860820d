"""Block decoding with DPad: original positions, once-per-block masks, costs, ET, parallel."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from rayworks.models.decoder import DecoderSpec
from rayworks.models.diffusion_lm import build_diffusion_lm, diffusion_logits
from rayworks.pipelines.dpad import decode as decode_mod
from rayworks.pipelines.dpad.decode import Decoder, generate, pruned_index
from rayworks.pipelines.dpad.dropout import SuffixDropout

MASK_ID, EOS, VOCAB = 3, 2, 19
LAYERS = 2


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    spec = DecoderSpec(d_model=32, n_layer=LAYERS, n_head=4, max_seq_len=128)
    return build_diffusion_lm(spec, VOCAB, MASK_ID, 1, EOS, 0).eval()


def prompts(n: int = 3, p: int = 6) -> torch.Tensor:
    return torch.randint(4, VOCAB, (n, p), generator=torch.Generator().manual_seed(1))


def test_pruned_index_keeps_prefix_block_and_kept_suffix_in_order() -> None:
    keep = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    index, valid = pruned_index(3, keep)
    assert index.tolist() == [[0, 1, 2, 3, 5], [0, 1, 2, 6, 0]]
    assert valid.tolist() == [[True] * 5, [True] * 4 + [False]]


@torch.no_grad()
def test_nothing_dropped_equals_the_full_sequence(model) -> None:
    x = torch.randint(4, VOCAB, (2, 20))
    index, valid = pruned_index(12, SuffixDropout("full").sample(2, 8, torch.Generator()))
    assert valid.all() and torch.equal(index[0], torch.arange(20))
    pruned = diffusion_logits(model, x.gather(1, index), index, logits_rows=slice(8, 12))
    full = diffusion_logits(model, x)[:, 8:12]
    assert torch.allclose(pruned, full, atol=1e-5)


@torch.no_grad()
def test_dropped_tokens_leave_and_kept_tokens_keep_original_positions(model) -> None:
    x = torch.randint(4, VOCAB, (2, 24))
    keep = torch.zeros(2, 12, dtype=torch.bool)
    keep[0, [0, 3, 9]] = True
    keep[1, [5]] = True
    index, valid = pruned_index(12, keep)
    batched = diffusion_logits(model, x.gather(1, index), index, key_keep=valid)
    for b in range(2):
        pos = index[b, valid[b]]
        alone = diffusion_logits(model, x[b : b + 1, pos], pos[None])  # explicit positions
        assert torch.allclose(batched[b : b + 1, : pos.numel()], alone, atol=1e-6)
        renumbered = diffusion_logits(model, x[b : b + 1, pos])  # positions 0..n-1
        assert float((alone - renumbered).abs().max()) > 1e-4  # 100x the match tolerance


@dataclass(frozen=True)
class CountingDropout(SuffixDropout):
    calls: list = field(default_factory=list)

    def sample(self, rows, n_suffix, generator):
        self.calls.append((rows, n_suffix))
        return super().sample(rows, n_suffix, generator)


def test_mask_drawn_once_per_block_and_vanilla_costs_in_closed_form(model) -> None:
    drop = CountingDropout("full")
    res = generate(model, prompts(), 32, 8, Decoder(dropout=drop), EOS, torch.Generator())
    assert [c[1] for c in drop.calls] == [24, 16, 8, 0]  # 4 blocks, once each
    assert not (res.tokens == MASK_ID).any()
    total = 6 + 32
    assert res.nfe.tolist() == [32] * 3  # one token per step
    assert res.token_cost.tolist() == [LAYERS * 32 * total] * 3
    assert res.pair_cost.tolist() == [LAYERS * 32 * total * total] * 3

    gauss = CountingDropout("gaussian", window=16, k=3.0, a=2.0)
    res = generate(model, prompts(), 32, 8, Decoder(dropout=gauss), EOS, torch.Generator())
    assert len(gauss.calls) == 4 and res.nfe.tolist() == [32] * 3
    assert (res.token_cost < LAYERS * 32 * total).all()


def always(token: int):
    """A stand-in forward whose argmax is `token` everywhere, with confidence ~1."""

    def fake(model, ids, positions=None, *, cache=None, key_keep=None, logits_rows=slice(None)):
        rows = len(range(*logits_rows.indices(ids.shape[1])))
        logits = torch.zeros(ids.shape[0], rows, VOCAB)
        logits[..., token] = 20.0
        return logits

    return fake


def test_early_termination_fills_eos_and_stops(model, monkeypatch) -> None:
    monkeypatch.setattr(decode_mod, "diffusion_logits", always(EOS))
    dec = Decoder(early_stop=True)
    res = generate(model, prompts(), 32, 8, dec, EOS, torch.Generator())
    assert res.nfe.tolist() == [8] * 3  # one block, then stop
    assert (res.tokens[:, 6:] == EOS).all()
    res = generate(model, prompts(), 32, 8, Decoder(), EOS, torch.Generator())
    assert res.nfe.tolist() == [32] * 3  # without ET every block is decoded


def test_parallel_threshold_commits_every_confident_token(model, monkeypatch) -> None:
    monkeypatch.setattr(decode_mod, "diffusion_logits", always(9))
    res = generate(model, prompts(), 32, 8, Decoder(threshold=0.9), EOS, torch.Generator())
    assert res.nfe.tolist() == [4] * 3  # one step per block
    assert (res.tokens[:, 6:] == 9).all()


@torch.no_grad()
def test_prefix_cache_first_step_is_exact_and_later_steps_feed_only_block_and_suffix(
    model,
) -> None:
    p = prompts(2)
    drop = SuffixDropout("gaussian", window=16, k=3.0, a=2.0)
    plain = Decoder(threshold=0.9, dropout=drop)
    cached = Decoder(threshold=0.9, prefix_cache=True, dropout=drop)
    # one block: the first forward is the same full forward with or without the cache
    one_a = generate(model, p, 8, 8, Decoder(threshold=0.0), EOS, torch.Generator())
    one_b = generate(
        model, p, 8, 8, Decoder(threshold=0.0, prefix_cache=True), EOS, torch.Generator()
    )
    assert torch.equal(one_a.tokens, one_b.tokens) and one_a.nfe.tolist() == [1, 1]
    a = generate(model, p, 32, 8, plain, EOS, torch.Generator().manual_seed(0))
    b = generate(model, p, 32, 8, cached, EOS, torch.Generator().manual_seed(0))
    assert not (b.tokens == MASK_ID).any()
    per_a = a.token_cost / a.nfe
    per_b = b.token_cost / b.nfe
    assert (per_b < per_a).all()  # cached steps skip the prefix
