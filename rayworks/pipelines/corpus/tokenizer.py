"""A byte-level BPE tokenizer trained on the kept corpus, and per-document token counts.

Why: a datasheet reports corpus size in tokens, the unit training budgets are set in, and
characters per token differ a lot between languages and code. Nothing may download at run
time (issue 6), so the tokenizer is trained locally with Hugging Face `tokenizers` (0.23,
`shared/methods/corpus.md` 4.5) instead of fetching a pretrained one.

- `train_bpe` trains GPT-2-style byte-level BPE (every byte is in the base alphabet, so no
  text is ever out of vocabulary; the GPT-2 split regex keeps merges within words) from an
  iterator of texts with `train_from_iterator`, and saves `tokenizer.json`. Same texts in
  the same order give byte-identical files (checked by the tests), so the feeder must
  yield a stable order (e.g. the kept rows sorted, or Ray Data with `preserve_order`).
- Step `tokens` (`TokenCount`, stateful: it holds the loaded tokenizer, so it runs in an
  actor pool) adds the int column `tokens`: tokens per document, special tokens excluded.
  Only kept rows are counted; rows an earlier step dropped get 0, so summing the column
  over any group gives the tokens that reach the output and dropped rows cost nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from rayworks.pipelines.corpus.step import Batch, alive

TOKENS = "tokens"
END_OF_TEXT = "<|endoftext|>"
BYTE_ALPHABET = 256


@dataclass(frozen=True)
class TokenizerConfig:
    """vocab_size: final vocabulary, bytes, merges and special tokens included.
    min_frequency: a pair seen fewer times is never merged.
    special_tokens: added first, with ids 0..n-1 (e.g. the document separator).
    max_chars: stop reading texts once this many characters were taken (whole documents;
      None: read them all); bounds training time and memory on a large corpus.
    """

    vocab_size: int = 8192
    min_frequency: int = 2
    special_tokens: tuple[str, ...] = (END_OF_TEXT,)
    max_chars: int | None = None

    def __post_init__(self) -> None:
        floor = BYTE_ALPHABET + len(self.special_tokens)
        if self.vocab_size < floor:
            raise ValueError(
                f"TokenizerConfig.vocab_size: {self.vocab_size} < {floor} (256 bytes + "
                f"{len(self.special_tokens)} special tokens)"
            )
        if self.min_frequency < 1:
            raise ValueError(f"TokenizerConfig.min_frequency: {self.min_frequency} < 1")
        if any(not t for t in self.special_tokens):
            raise ValueError("TokenizerConfig.special_tokens: holds an empty token")
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise ValueError(f"TokenizerConfig.special_tokens: duplicates in {self.special_tokens}")
        if self.max_chars is not None and self.max_chars < 1:
            raise ValueError(f"TokenizerConfig.max_chars: {self.max_chars} < 1")


def _bounded(texts: Iterator[str], max_chars: int | None) -> Iterator[str]:
    """Non-empty texts, stopping after the document that reaches `max_chars`."""
    taken = 0
    for text in texts:
        if not text:
            continue
        yield text
        taken += len(text)
        if max_chars is not None and taken >= max_chars:
            return


def _empty_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(texts: Iterable[str], cfg: TokenizerConfig, out_path: Path) -> Path:
    """Train byte-level BPE on `texts` (None and "" skipped) and save it as `out_path`
    (tokenizer.json); raise ValueError when there is no text at all."""
    stream = _bounded((str(t) for t in texts if t is not None), cfg.max_chars)
    first = next(stream, None)
    if first is None:
        raise ValueError("train_bpe: no text to train on (the iterator is empty or all '')")
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(cfg.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok = _empty_bpe()
    tok.train_from_iterator(itertools.chain([first], stream), trainer=trainer)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_path), pretty=True)
    return out_path


def vocab_size(path: Path) -> int:
    """Vocabulary size of a saved tokenizer (special tokens included), for the datasheet."""
    return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)


class TokenCount:
    """Step `tokens`: int column `tokens` (tokens per kept document, 0 for dropped rows);
    no reasons (never drops)."""

    name: ClassVar[str] = "tokens"
    stateful: ClassVar[bool] = True

    def __init__(self, path: str | Path, text_column: str = "text") -> None:
        self.tokenizer = Tokenizer.from_file(str(path))
        self.text_column = text_column

    def __call__(self, batch: Batch) -> Batch:
        keep = alive(batch)
        texts = [str(t) for t, k in zip(batch[self.text_column], keep, strict=True) if k]
        # encode_batch_fast: the ids of encode_batch without computing offsets (~2x faster)
        encoded = iter(self.tokenizer.encode_batch_fast(texts, add_special_tokens=False))
        counts = [len(next(encoded).ids) if k else 0 for k in keep]
        return {**batch, TOKENS: np.asarray(counts, dtype=np.int64)}
