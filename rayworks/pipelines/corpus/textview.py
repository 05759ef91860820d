"""One shared, lazily computed view of each row's text: words, lines, word ids, n-gram ids,
character-class counts.

Before this, one 64 KB document was split into words five times and into lines four times
by the Gopher, repetition, C4, OCR, toxicity and code steps. A `TextView` splits once, on
first use, and every later step of the same batch reads the same lists and arrays:

- `words`: whitespace tokens (`str.split()`), the word definition of every step;
- `lines`: the stripped non-empty lines, `raw_lines`: `text.split("\\n")` as is;
- `vocab` / `word_ids`: the distinct words in order of first appearance and each word's
  index in it (an int64 array): exact word identities, no hash collisions;
- `ngram_ids(n)`: the same for word n-grams, built from the (n-1)-gram ids by
  factorizing pairs (`pandas.factorize`, a hash table: exact, first-appearance order);
- `chars`: counts of letters, digits, alphanumerics, whitespace, upper-case characters,
  punctuation, newlines and UTF-8 bytes, in one numpy pass over the code points (ASCII by
  a table, other characters by one `str` method call per distinct character), so the
  counts equal those of `str.isalpha` & co. exactly. `pyarrow.compute` is not used for
  them: its Unicode tables and whitespace set are not Python's, and these counts must
  match the per-character loops they replace.

How it travels: `StepChain` attaches an empty `VIEW` column to each batch (`attach`) and
removes it before the batch leaves the chain (`detach`). A step asks `views(batch, column,
rows)` for the rows it scores; a view is built on first request and stored in that
column, so later steps reuse it. A view remembers its text and is rebuilt when the row's
text is no longer the same object (normalize, C4's rewrite and PII redaction replace the
text), so a view never describes stale text. A batch without the column (a step called
on its own, as in the tests) gets fresh views that are simply not kept.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

VIEW = "_textview"
"""Batch column holding the rows' `TextView`s inside a `StepChain` (never written out)."""


@dataclass(frozen=True)
class CharCounts:
    """Characters of a text by class (each as the `str` method of the same name counts)."""

    length: int
    letters: int  # str.isalpha
    digits: int  # str.isdigit
    alnum: int  # str.isalnum
    whitespace: int  # str.isspace
    upper: int  # str.isupper
    punctuation: int  # Unicode category P*
    newlines: int  # "\n"
    utf8_bytes: int  # len(text.encode("utf-8", "surrogatepass"))


_CLASSES = ("letters", "digits", "alnum", "whitespace", "upper", "punctuation")


def _classes(ch: str) -> tuple[bool, ...]:
    return (
        ch.isalpha(),
        ch.isdigit(),
        ch.isalnum(),
        ch.isspace(),
        ch.isupper(),
        unicodedata.category(ch).startswith("P"),
    )


_ASCII = np.array([_classes(chr(c)) for c in range(128)], dtype=np.int64)  # (128, classes)


def char_counts(text: str) -> CharCounts:
    """`CharCounts` of `text`."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    ascii_mask = cps < 128
    counts = np.bincount(cps[ascii_mask], minlength=128) @ _ASCII
    other, k = np.unique(cps[~ascii_mask], return_counts=True)
    if len(other):
        counts = counts + k @ np.array([_classes(chr(c)) for c in other], dtype=np.int64)
    utf8 = len(cps) + int((cps >= 0x80).sum() + (cps >= 0x800).sum() + (cps >= 0x10000).sum())
    by_class = dict(zip(_CLASSES, map(int, counts), strict=True))
    return CharCounts(length=len(cps), newlines=text.count("\n"), utf8_bytes=utf8, **by_class)


class TextView:
    """The lazily computed splits and counts of one text (see the module docstring)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def words(self) -> list[str]:
        return self.text.split()

    @cached_property
    def raw_lines(self) -> list[str]:
        return self.text.split("\n")

    @cached_property
    def lines(self) -> list[str]:
        return [s for s in map(str.strip, self.raw_lines) if s]

    @cached_property
    def vocab(self) -> list[str]:
        """Distinct words, in order of first appearance."""
        return list(dict.fromkeys(self.words))

    @cached_property
    def word_ids(self) -> np.ndarray:
        """(len(words),) int64: each word's index in `vocab`."""
        index = {w: i for i, w in enumerate(self.vocab)}
        return np.fromiter(map(index.__getitem__, self.words), np.int64, len(self.words))

    @cached_property
    def word_counts(self) -> np.ndarray:
        """(len(vocab),) int64: occurrences of each distinct word."""
        return np.bincount(self.word_ids, minlength=len(self.vocab))

    @cached_property
    def word_lengths(self) -> np.ndarray:
        """(len(words),) int64: characters per word."""
        lengths = np.fromiter(map(len, self.vocab), np.int64, len(self.vocab))
        return lengths[self.word_ids]

    @cached_property
    def _ngrams(self) -> list[np.ndarray]:
        return [self.word_ids]

    def ngram_ids(self, n: int) -> np.ndarray:
        """(len(words) - n + 1,) int64: an id per word n-gram (position i: words i..i+n-1),
        equal ids for equal n-grams, numbered in order of first appearance."""
        grams = self._ngrams
        while len(grams) < n:
            prev, m = grams[-1], len(grams) + 1  # ids of (m-1)-grams -> m-grams
            if len(prev) <= 1:
                grams.append(np.empty(0, dtype=np.int64))
                continue
            pairs = prev[:-1] * (len(self.vocab) + 1) + self.word_ids[m - 1 :]
            grams.append(pd.factorize(pairs)[0].astype(np.int64, copy=False))
        return grams[n - 1]

    @cached_property
    def chars(self) -> CharCounts:
        return char_counts(self.text)


def attach(batch: dict[str, Any]) -> dict[str, Any]:
    """`batch` with an empty `VIEW` column (the views are built on first request)."""
    n = len(next(iter(batch.values()))) if batch else 0
    return {**batch, VIEW: np.full(n, None, dtype=object)}


def detach(batch: dict[str, Any]) -> dict[str, Any]:
    """`batch` without its `VIEW` column, as it leaves the chain."""
    return {k: v for k, v in batch.items() if k != VIEW}


def views(batch: dict[str, Any], column: str, rows: Sequence[int]) -> list[TextView]:
    """The views of `column`'s text at `rows`, cached in the batch's `VIEW` column when it
    has one (rebuilt where the row's text object changed since)."""
    texts, cache = batch[column], batch.get(VIEW)
    out = []
    for i in rows:
        text = texts[i] if isinstance(texts[i], str) else str(texts[i])
        view = cache[i] if cache is not None else None
        if view is None or view.text is not text:
            view = TextView(text)
            if cache is not None:
                cache[i] = view
        out.append(view)
    return out
