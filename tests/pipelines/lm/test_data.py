"""`lm` data: the resumable batch order, packing/padding, and `prepare` on the smoke preset."""

from __future__ import annotations

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.data.tasks import Example
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.lm.data import (
    IGNORE,
    _pack,
    _pad,
    batch_rows,
    data_state,
    load_corpus,
    prepare,
)

# ------------------------------------------------------------------ batch order


def test_batch_rows_is_a_pure_function_of_seed_and_step() -> None:
    for step in (0, 3, 17, 250):
        assert torch.equal(
            batch_rows(100, 8, seed=5, step=step), batch_rows(100, 8, seed=5, step=step)
        )
    assert not torch.equal(batch_rows(100, 8, seed=5, step=0), batch_rows(100, 8, seed=6, step=0))


@pytest.mark.parametrize(("n_rows", "batch"), [(100, 8), (64, 16), (10, 3), (7, 7)])
def test_every_epoch_is_a_permutation(n_rows: int, batch: int) -> None:
    per_epoch = n_rows // batch
    for epoch in range(3):
        rows = torch.cat(
            [batch_rows(n_rows, batch, 0, epoch * per_epoch + i) for i in range(per_epoch)]
        )
        assert rows.shape == (per_epoch * batch,)
        assert len(set(rows.tolist())) == per_epoch * batch  # distinct within the epoch
        assert rows.min() >= 0 and rows.max() < n_rows


def test_every_batch_is_full_and_in_range() -> None:
    for step in range(40):
        rows = batch_rows(30, 8, seed=1, step=step)
        assert rows.shape == (8,)
        assert rows.dtype == torch.long
        assert int(rows.max()) < 30


def test_epochs_differ() -> None:
    per_epoch = 100 // 10
    epoch0 = [batch_rows(100, 10, 0, s).tolist() for s in range(per_epoch)]
    epoch1 = [batch_rows(100, 10, 0, s + per_epoch).tolist() for s in range(per_epoch)]
    assert epoch0 != epoch1
    # an exact multiple covers every row once per epoch
    assert (
        sorted(r for batch in epoch0 for r in batch)
        == list(range(100))
        == sorted(r for batch in epoch1 for r in batch)
    )


def test_resuming_at_step_k_continues_the_uninterrupted_sequence() -> None:
    uninterrupted = [batch_rows(50, 4, seed=3, step=s) for s in range(40)]

    def resumed_from(k: int) -> list[torch.Tensor]:
        state = data_state(50, 4, seed=3, step=k)  # all a checkpoint stores about the data
        return [batch_rows(50, 4, state["seed"], s) for s in range(state["next_step"], 40)]

    for k in (1, 12, 13, 27):
        resumed = resumed_from(k)
        assert all(torch.equal(a, b) for a, b in zip(uninterrupted[k:], resumed, strict=True))


def test_data_state_counts_epochs() -> None:
    assert data_state(50, 4, seed=3, step=25) == {
        "seed": 3,
        "epoch": 2,  # 12 steps per epoch
        "index_in_epoch": 1,
        "next_step": 25,
    }


def test_tiny_corpus_smaller_than_a_batch_wraps_around() -> None:
    rows = batch_rows(3, 8, seed=0, step=0)
    assert rows.shape == (8,)
    assert set(rows.tolist()) == {0, 1, 2}


# ------------------------------------------------------------------ pack / pad


def test_pack_concatenates_with_eos_and_cuts_full_rows() -> None:
    eos = 2
    docs = [[10, 11, 12], [20, 21], [30, 31, 32, 33]]
    packed = _pack(docs, seq_len=4, eos=eos)
    # stream: 10 11 12 2 20 21 2 30 31 32 33 2  -> 12 tokens = 3 rows of 4
    assert packed.dtype == torch.long
    assert packed.tolist() == [[10, 11, 12, 2], [20, 21, 2, 30], [31, 32, 33, 2]]


def test_pack_drops_the_partial_tail() -> None:
    packed = _pack([[5] * 9], seq_len=4, eos=2)  # 10 tokens -> 2 full rows
    assert packed.shape == (2, 4)
    assert packed.flatten().tolist() == [5] * 8


def test_pack_pads_a_stream_shorter_than_one_row_with_eos() -> None:
    packed = _pack([[7, 8]], seq_len=6, eos=2)
    assert packed.tolist() == [[7, 8, 2, 2, 2, 2]]


def test_pad_masks_padding_in_labels_and_truncates() -> None:
    eos, pad = 2, 0
    ids, labels = _pad([[5, 6], [7, 8, 9, 10, 11], []], seq_len=4, eos=eos, pad=pad)
    assert ids.shape == labels.shape == (3, 4)
    assert ids.tolist() == [[5, 6, 2, 0], [7, 8, 9, 10], [2, 0, 0, 0]]
    assert labels.tolist() == [[5, 6, 2, IGNORE], [7, 8, 9, 10], [2, IGNORE, IGNORE, IGNORE]]
    assert IGNORE == -100  # what HF losses ignore
    assert (labels[ids == pad] == IGNORE).all()  # pad id 0 never appears as a real token here


# ------------------------------------------------------------------ prepare


@pytest.fixture(scope="module")
def smoke() -> LMConfig:
    return build_config(LMConfig, "smoke")


@pytest.fixture(scope="module")
def prepared(smoke: LMConfig):
    return prepare(smoke)


def test_prepare_packs_the_smoke_task(smoke: LMConfig, prepared) -> None:
    tokenizer, data = prepared
    seq_len = smoke.data.seq_len
    for ids, labels in ((data.train_ids, data.train_labels), (data.val_ids, data.val_labels)):
        assert ids.dtype == labels.dtype == torch.long
        assert ids.ndim == 2 and ids.shape[1] == seq_len
        assert ids.shape == labels.shape
        assert torch.equal(ids, labels)  # packed rows have no padding
        assert int(ids.max()) < len(tokenizer)
    # every training character is one token plus an EOS per example
    assert data.train_ids.shape[0] > smoke.data.n_train * 20 // seq_len
    assert data.rows_in == smoke.data.n_train + smoke.data.n_val
    assert data.rejects == []


def test_prepare_returns_test_examples(smoke: LMConfig, prepared) -> None:
    _, data = prepared
    assert len(data.test) == smoke.data.n_test
    assert all(isinstance(e, Example) for e in data.test)
    assert all(e.prompt.startswith("Q: ") for e in data.test)


def test_prepare_train_rows_are_the_task_text_joined_by_eos(smoke: LMConfig, prepared) -> None:
    tokenizer, data = prepared
    train_texts = [prompt + completion for prompt, completion in load_corpus(smoke)[0]]
    decoded = tokenizer.decode(data.train_ids.flatten().tolist(), skip_special_tokens=False)
    stream = "".join(text + tokenizer.eos_token for text in train_texts)
    assert stream.startswith(decoded)  # packed rows are the stream, cut at a row boundary
    n_eos = int((data.train_ids == tokenizer.eos_token_id).sum())
    assert decoded.count(tokenizer.eos_token) == n_eos
    # only the partial last row (< seq_len tokens, at most len("</s>") chars each) is dropped
    assert len(stream) - len(decoded) < 4 * smoke.data.seq_len


def test_prepare_without_packing_pads_per_example(smoke: LMConfig, prepared) -> None:
    tokenizer, _ = prepared
    cfg = build_config(LMConfig, "smoke", overrides=["data.packing=false"])
    _, data = prepare(cfg, tokenizer=tokenizer)  # a given tokenizer is reused as is
    assert data.train_ids.shape == (cfg.data.n_train, cfg.data.seq_len)
    assert data.val_ids.shape == (cfg.data.n_val, cfg.data.seq_len)
    padding = data.train_ids == tokenizer.pad_token_id
    assert padding.any()
    assert (data.train_labels[padding] == IGNORE).all()
    assert (data.train_labels[~padding] == data.train_ids[~padding]).all()
    # every row ends its example with EOS right before the padding
    first_pad = padding.int().argmax(dim=1)
    rows = torch.arange(len(first_pad))
    has_pad = padding.any(dim=1)
    assert (data.train_ids[rows[has_pad], first_pad[has_pad] - 1] == tokenizer.eos_token_id).all()


def test_prepare_is_deterministic(smoke: LMConfig, prepared) -> None:
    tokenizer, data = prepared
    _, again = prepare(smoke, tokenizer=tokenizer)
    assert torch.equal(data.train_ids, again.train_ids)
    assert torch.equal(data.val_ids, again.val_ids)
    assert data.test == again.test


def test_completion_only_loss_masks_each_prompt() -> None:
    cfg = build_config(
        LMConfig, "smoke", overrides=["data.packing=false", "data.loss_on=completion"]
    )
    tokenizer, data = prepare(cfg)
    train = load_corpus(cfg)[0]
    fitting = [(i, p, c) for i, (p, c) in enumerate(train) if len(p + c) < cfg.data.seq_len]
    assert len(fitting) >= 20  # char tokenizer: one token per character
    for row, prompt, completion in fitting[:20]:
        n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        labels = data.train_labels[row]
        assert (labels[:n_prompt] == -100).all()
        kept = labels[labels != -100].tolist()
        assert tokenizer.decode(kept[:-1]) == completion and kept[-1] == tokenizer.eos_token_id


def test_completion_only_loss_requires_unpacked_task_rows() -> None:
    with pytest.raises(ConfigError, match="loss_on=completion"):
        build_config(LMConfig, "smoke", overrides=["data.loss_on=completion"])
