"""A byte-level BPE tokenizer trained on the kept corpus, and per-document token counts.

Why: a datasheet reports corpus size in tokens, the unit training budgets are set in, and
characters per token differ a lot between languages and code. Nothing may download at run
time, so the tokenizer is trained locally with Hugging Face `tokenizers` (0.23) instead of
fetching a pretrained one.

- `train_bpe` trains GPT-2-style byte-level BPE (every byte is in the base alphabet, so no
  text is ever out of vocabulary; the GPT-2 split regex keeps merges within words) from an
  iterator of texts with `train_from_iterator`, and saves `tokenizer.json`. Same texts in
  the same order give byte-identical files (checked by the tests), so the feeder must
  yield a stable order (e.g. the kept rows sorted, or Ray Data with `preserve_order`).
- Step `tokens` (`TokenCount`, stateful: it holds the loaded tokenizer) adds the int column `tokens`:
  tokens per document, special tokens excluded. Only kept rows are counted; rows an earlier
  step dropped get 0, so summing the column over any group gives the tokens that reach the
  output and dropped rows cost nothing.
- `PretokenCounter` is how `TokenCount` counts, equal to `encode_batch_fast` (checked by
  the tests on random Unicode text): byte-level BPE merges never cross the GPT-2 split
  regex, so a document's count is the sum of its pieces' counts, and no piece crosses
  from a non-space into whitespace (`SEGMENT`), so it is the sum of its whitespace
  segments' counts. A segment is counted once and cached (code and prose repeat most
  words), its new pieces through the BPE model alone; per document only a stdlib regex
  runs. 1,864 documents, 21M characters, one thread: 1.8 s from empty caches, 0.5 s
  warm, against 5.1 s for `encode_batch_fast`. A document that holds a special token's
  text, where the tokenizer would match the special token, is encoded whole.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import regex
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.step import Batch, alive

TOKENS = "tokens"
END_OF_TEXT = "<|endoftext|>"
BYTE_ALPHABET = 256
GPT2_SPLIT = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
"""The split of `pre_tokenizers.ByteLevel(use_regex=True)` (the GPT-2 pattern)."""


SEGMENT = re.compile(r"[^\S\x1c-\x1f]*[\S\x1c-\x1f]+|[^\S\x1c-\x1f]+")
"""Whitespace then non-space (or trailing whitespace): no GPT-2 piece crosses a boundary
between a non-space and a following whitespace character (a piece holding non-space
characters holds at most one leading space, and whitespace pieces hold only whitespace),
so a text's pieces are its segments' pieces, concatenated. Whitespace is `regex`'s
(`GPT2_SPLIT`'s): the stdlib's whitespace class also holds U+001C-U+001F, which GPT-2
treats as punctuation, so they count as non-space here. The stdlib `re` finds segments
5x faster than `GPT2_SPLIT` finds the pieces (21M characters: 0.32 s against 1.61 s)."""


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> character table of byte-level BPE: printable bytes map to
    themselves, the other 68 to characters from U+0100 on, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    moved = [b for b in range(BYTE_ALPHABET) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(BYTE_ALPHABET + i) for i, b in enumerate(moved)})
    return table


BYTE_CHARS = _byte_chars()
"""As a `str.translate` table over latin-1-decoded bytes (`PretokenCounter._segment_counts`)."""


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


def train_bpe(
    texts: Iterable[str], cfg: TokenizerConfig, out_path: Path, threads: int | None = None
) -> Path:
    """Train byte-level BPE on `texts` (None and "" skipped) and save it as `out_path`
    (tokenizer.json); raise ValueError when there is no text at all. `threads`: train in
    a child process on that many threads (`train_in_child`); None: in this process, on
    the thread pool of `tokenizers` (every core, unless RAYON_NUM_THREADS was set)."""
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
    texts = itertools.chain([first], stream)
    if threads is None:
        tok.train_from_iterator(texts, trainer=trainer)
    else:
        tok = train_in_child(tok, trainer, texts, threads)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_path), pretty=True)
    return out_path


_TRAIN_CHILD = """
import os, pickle, struct, sys
source = sys.stdin.buffer
tokenizer, trainer = pickle.load(source)
def texts_then_one_thread():
    while head := source.read(8):
        yield source.read(struct.unpack("<Q", head)[0]).decode()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
tokenizer.train_from_iterator(texts_then_one_thread(), trainer=trainer)
sys.stdout.buffer.write(tokenizer.to_str().encode())
"""
"""The trainer's program: it imports nothing but `tokenizers` (by unpickling); the texts
arrive as they are read, each as its UTF-8 length then its bytes."""


def train_in_child(
    tokenizer: Tokenizer, trainer: trainers.Trainer, texts: Iterable[str], threads: int
) -> Tokenizer:
    """`tokenizer.train_from_iterator(texts, trainer)` in a child process whose thread pool
    holds `threads` threads, the merges on one of them; returns the trained tokenizer
    (the same as training in this process: the tests compare the files).

    Why a child: `tokenizers` trains on Rayon's global pool, sized once per process from
    RAYON_NUM_THREADS or else to every core of the machine, so a corpus run holding `cpus`
    CPUs trained on all of them. And its BPE trainer has two parts that want different
    threads: counting the texts' words (pre-tokenizing) splits well across threads, the
    merge loop does not (each of thousands of merges is a parallel pass over the few
    words holding its pair). On the corpus bench's 8M-character sample (vocabulary 8192,
    docs/results.md, corpus) counting took 1.64 s on one thread and 0.85 s on two, the
    merges 0.27 s on one and 0.55 s on two. `tokenizers` reads TOKENIZERS_PARALLELISM at
    each parallel section, so the child, started with it on, turns it off once the texts
    are consumed: on two cores 1.35 s -> 0.95 s, the same file. The child is a fresh
    interpreter that imports `tokenizers` alone (~0.03 s); the texts stream to it, so the
    driver never holds them all as Python strings.
    """
    if threads < 1:
        raise ValueError(f"train_in_child: threads must be >= 1, got {threads}")
    env = {
        **os.environ,
        "RAYON_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "true" if threads > 1 else "false",
    }
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [sys.executable, "-c", _TRAIN_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,  # a file: a chatty child cannot block on a full pipe
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            try:
                with proc.stdin as sink:
                    pickle.dump((tokenizer, trainer), sink, protocol=pickle.HIGHEST_PROTOCOL)
                    for text in texts:
                        data = text.encode()
                        sink.write(struct.pack("<Q", len(data)))
                        sink.write(data)
            except BrokenPipeError:  # the child died: its exit status and stderr say why
                pass
            with proc.stdout as source:
                out = source.read()
            code = proc.wait()
        except BaseException:  # e.g. a text with a lone surrogate: stop the child
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            errors.seek(0)
            tail = errors.read().decode(errors="replace")[-2000:]
            raise RayworksError(
                f"training the tokenizer failed in its process (exit {code}):\n{tail}"
            )
    return Tokenizer.from_str(out.decode())


def vocab_size(path: Path) -> int:
    """Vocabulary size of a saved tokenizer (special tokens included), for the datasheet."""
    return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)


def splits_like_gpt2(tokenizer: Tokenizer) -> bool:
    """True when `tokenizer` is what `train_bpe` builds: no normaliser, one byte-level
    pre-tokenizer with the GPT-2 regex, BPE without dropout. Then a text's tokens are its
    `GPT2_SPLIT` pieces' tokens, concatenated."""
    spec = json.loads(tokenizer.to_str())
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    return (
        spec.get("normalizer") is None
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space", True)
        and model.get("type") == "BPE"
        and model.get("dropout") is None
    )


class PretokenCounter:
    """Token counts of texts, equal to `len(encode_batch_fast(texts)[i].ids)` (see the
    module docstring); other tokenizers are encoded whole. `max_cached` segments and as
    many pieces are kept (a cache is emptied when full: memory stays bounded on any
    corpus)."""

    def __init__(self, tokenizer: Tokenizer, max_cached: int = 1_000_000) -> None:
        self.tokenizer = tokenizer
        self.by_piece = splits_like_gpt2(tokenizer)
        self.specials = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        self.max_cached = max_cached
        self.cache: dict[str, int] = {}  # segment -> tokens
        self.pieces: dict[str, int] = {}  # GPT-2 piece -> tokens
        self.model = tokenizer.model

    def _encode(self, texts: list[str]) -> list[int]:
        # encode_batch_fast: the ids of encode_batch without computing offsets (~2x faster)
        return [
            len(e.ids) for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        ]

    def _segments(self, segments: list[str]) -> int:
        get = self.cache.__getitem__
        try:
            return sum(map(get, segments))
        except KeyError:
            new = [p for p in set(segments) if p not in self.cache]
            if len(self.cache) + len(new) > self.max_cached:
                self.cache.clear()
                new = list(set(segments))
            self.cache.update(zip(new, self._segment_counts(new), strict=True))
            return sum(map(get, segments))

    def _segment_counts(self, segments: list[str]) -> list[int]:
        """Token counts of segments: the GPT-2 pieces of each, counted through the BPE model
        alone (each piece's UTF-8 bytes as the byte-level alphabet's characters, what the
        pre-tokenizer does, then `model.tokenize`). Equal to encoding through the whole
        pipeline (no normaliser, and no post-processor adds tokens to a plain encode) at
        ~5x its speed (85k pieces: 0.16 s against 0.83 s for `encode_batch_fast`)."""
        tokenize, known = self.model.tokenize, self.pieces
        if len(known) > self.max_cached:
            known.clear()
        out = []
        for segment in segments:
            n = 0
            for p in GPT2_SPLIT.findall(segment):
                c = known.get(p)
                if c is None:
                    c = known[p] = len(
                        tokenize(p.encode("utf-8").decode("latin-1").translate(BYTE_CHARS))
                    )
                n += c
            out.append(n)
        return out

    def __call__(self, texts: Sequence[str]) -> list[int]:
        if not self.by_piece:
            return self._encode(list(texts))
        return [
            self._encode([t])[0]
            if any(s in t for s in self.specials)
            else self._segments(SEGMENT.findall(t))
            for t in texts
        ]


class TokenCount:
    """Step `tokens`: int column `tokens` (tokens per kept document, 0 for dropped rows);
    no reasons (never drops)."""

    name: ClassVar[str] = "tokens"

    def __init__(self, path: str | Path, text_column: str = "text") -> None:
        self.count = PretokenCounter(Tokenizer.from_file(str(path)))
        self.text_column = text_column

    def __call__(self, batch: Batch) -> Batch:
        keep = alive(batch)
        counts = iter(
            self.count([str(t) for t, k in zip(batch[self.text_column], keep, strict=True) if k])
        )
        return {**batch, TOKENS: np.asarray([next(counts) if k else 0 for k in keep], np.int64)}
