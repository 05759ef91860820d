"""The critic model: per-token values, trainable head, pickle-free round trip."""

from __future__ import annotations

import torch

from rayworks.models import DecoderSpec, TokenizerSpec, decoder_for, train_tokenizer
from rayworks.models.value import HEAD_FILE, ValueModel


def _critic() -> tuple[ValueModel, int]:
    tok = train_tokenizer(TokenizerSpec(), ["Q: 1+2=\nA: 3"])
    torch.manual_seed(0)
    return ValueModel(decoder_for(DecoderSpec(d_model=16, n_layer=1, n_head=2), tok)), len(tok)


def test_values_are_per_token_and_start_at_zero():
    critic, vocab = _critic()
    ids = torch.randint(4, vocab, (3, 7))
    values = critic(ids)
    assert values.shape == (3, 7) and torch.equal(values, torch.zeros(3, 7))


def test_values_are_causal_and_regress_to_targets():
    critic, vocab = _critic()
    ids = torch.randint(4, vocab, (4, 6))
    target = torch.linspace(-1, 1, 6).expand(4, 6)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    first = None
    for _ in range(60):
        loss = ((critic(ids) - target) ** 2).mean()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2 * first
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1 - 4) % (vocab - 4) + 4
    with torch.no_grad():  # changing the last token cannot change earlier values
        assert torch.allclose(critic(ids)[:, :-1], critic(changed)[:, :-1], atol=1e-6)


def test_round_trip_restores_head_and_backbone(tmp_path):
    critic, vocab = _critic()
    with torch.no_grad():
        critic.head.bias.fill_(0.7)
    critic.save_pretrained(tmp_path)
    assert (tmp_path / HEAD_FILE).is_file() and (tmp_path / "config.json").is_file()
    again = ValueModel.from_pretrained(tmp_path)
    ids = torch.randint(4, vocab, (2, 5))
    with torch.no_grad():
        assert torch.allclose(critic(ids), again(ids), atol=1e-6)
    (tmp_path / HEAD_FILE).unlink()  # an LM folder alone gives a fresh zero head
    assert torch.equal(ValueModel.from_pretrained(tmp_path)(ids).detach(), torch.zeros(2, 5))
