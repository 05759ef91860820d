"""Token tensors for `lm`: tokenizer training, packing/padding, and the resumable batch order.

Everything a training worker needs is built once by the driver (`prepare`) and shipped to
workers through Ray's object store as plain tensors. The batch order is a pure function of
(seed, step), so a resumed run continues exactly where the killed one stopped instead of
replaying the data from the start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rayworks.data.tasks import Example, get_task
from rayworks.data.text import load_texts
from rayworks.models import train_tokenizer
from rayworks.pipelines.lm.config import LMConfig

IGNORE = -100


@dataclass
class LMData:
    train_ids: torch.Tensor  # (N, T) int64
    train_labels: torch.Tensor  # (N, T) int64, IGNORE on padding
    val_ids: torch.Tensor
    val_labels: torch.Tensor
    test: list[Example] = field(default_factory=list)
    rejects: list[dict[str, str]] = field(default_factory=list)
    rows_in: int = 0


def _pack(docs: list[list[int]], seq_len: int, eos: int) -> torch.Tensor:
    """Concatenate documents with EOS separators and cut into full rows of `seq_len`."""
    stream = [tok for doc in docs for tok in (*doc, eos)]
    n_rows = max(1, len(stream) // seq_len)
    if len(stream) < seq_len:
        stream = stream + [eos] * (seq_len - len(stream))
    return torch.tensor(stream[: n_rows * seq_len], dtype=torch.long).view(n_rows, seq_len)


def _pad(
    docs: list[list[int]], seq_len: int, eos: int, pad: int, prompt_lens: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One example per row, EOS-terminated and padded; the first `prompt_lens[i]` labels
    of row i are IGNORE, so the loss covers the completion only (SFT)."""
    ids = torch.full((len(docs), seq_len), pad, dtype=torch.long)
    labels = torch.full((len(docs), seq_len), IGNORE, dtype=torch.long)
    for i, doc in enumerate(docs):
        row = [*doc, eos][:seq_len]
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.tensor(row)
        if prompt_lens is not None:
            labels[i, : prompt_lens[i]] = IGNORE
    return ids, labels


def _rows(
    pairs: list[tuple[str, str]], tokenizer: Any, cfg: LMConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of (prompt, completion) pairs; file documents come as ("", text)."""
    if cfg.data.loss_on == "completion":
        prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
        comps = tokenizer([c for _, c in pairs], add_special_tokens=False)["input_ids"]
        docs = [p + c for p, c in zip(prompts, comps, strict=True)]
        lens = [len(p) for p in prompts]
        return _pad(docs, cfg.data.seq_len, tokenizer.eos_token_id, tokenizer.pad_token_id, lens)
    docs = tokenizer([p + c for p, c in pairs], add_special_tokens=False)["input_ids"]
    if cfg.data.packing:
        ids = _pack(docs, cfg.data.seq_len, tokenizer.eos_token_id)
        return ids, ids.clone()
    return _pad(docs, cfg.data.seq_len, tokenizer.eos_token_id, tokenizer.pad_token_id)


Pairs = list[tuple[str, str]]


def load_corpus(cfg: LMConfig) -> tuple[Pairs, Pairs, list[Example], list[dict[str, str]], int]:
    """(train pairs, val pairs, test examples, rejects, rows read) for the configured source.

    Task examples are (prompt, completion) pairs; file documents are ("", text).
    """
    if cfg.data.source == "task":
        task = get_task(cfg.data.task)
        train = task.examples(cfg.data.n_train, "train", cfg.seed)
        val = task.examples(cfg.data.n_val, "val", cfg.seed)
        test = task.examples(cfg.data.n_test, "test", cfg.seed) if cfg.data.n_test else []
        pairs = [[(e.prompt, e.completion) for e in split] for split in (train, val)]
        return pairs[0], pairs[1], test, [], len(train) + len(val)
    corpus = load_texts(cfg.data.files, cfg.data.text_field)
    if len(corpus.texts) < 2:
        raise ValueError(f"data.files yielded {len(corpus.texts)} documents; need at least 2")
    order = torch.randperm(len(corpus.texts), generator=torch.Generator().manual_seed(cfg.seed))
    n_val = max(1, int(len(order) * cfg.data.val_fraction))
    docs = [("", corpus.texts[i]) for i in order.tolist()]
    return docs[n_val:], docs[:n_val], [], corpus.rejects, corpus.rows_in


def prepare(cfg: LMConfig, tokenizer: Any = None) -> tuple[Any, LMData]:
    """Tokenize every split, training the tokenizer on the training text unless given one."""
    train, val, test, rejects, rows_in = load_corpus(cfg)
    tokenizer = tokenizer or train_tokenizer(cfg.tokenizer, [p + c for p, c in train])
    train_ids, train_labels = _rows(train, tokenizer, cfg)
    val_ids, val_labels = _rows(val, tokenizer, cfg)
    data = LMData(train_ids, train_labels, val_ids, val_labels, test, rejects, rows_in)
    return tokenizer, data


def batch_rows(n_rows: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """Row indices of the global batch at `step`: a fresh seeded permutation each epoch.

    Epochs drop the last partial batch, so every step's batch is full and the order depends
    only on (seed, step) — the whole dataloader state a checkpoint needs.
    """
    per_epoch = max(1, n_rows // batch_size)
    epoch, index = divmod(step, per_epoch)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n_rows, generator=gen)
    if n_rows < batch_size:  # tiny corpora: sample with wrap-around
        perm = perm.repeat(batch_size // n_rows + 1)
    return perm[index * batch_size : (index + 1) * batch_size]


def data_state(n_rows: int, batch_size: int, seed: int, step: int) -> dict[str, int]:
    per_epoch = max(1, n_rows // batch_size)
    return {
        "seed": seed,
        "epoch": step // per_epoch,
        "index_in_epoch": step % per_epoch,
        "next_step": step,
    }
