"""py3langid's classifier, vectorized with numpy: many texts per call, same answers.

py3langid (`language.py`) scores a text by walking a byte automaton over its UTF-8 bytes in
a Python loop (`visit_counts`, ~0.8 µs per byte: ~51 ms for a 64 KB document), then sums
the log-probability rows of the features it visited. The OCR step asks it about ~1,000
short segments per document, one call each. Here the walk is done for all bytes of all
texts at once:

- The automaton is an Aho-Corasick machine over byte n-grams of at most `depth` bytes (6
  for the shipped model; computed from the tables at load time): the state after a byte is
  the longest suffix of the text read so far that is a node of its trie. That suffix is at
  most `depth` bytes long, so the state after byte i depends only on bytes i-depth+1..i and
  is found by starting at the root `depth` bytes back (or at the text's start). `depth`
  vectorized table look-ups over all positions replace the sequential loop.
- Feature counts per (text, feature) come from one `np.unique`; the naive-Bayes scores are
  `log1p(count) @ nb_ptc[feature] + nb_pc` as in py3langid, accumulated per text, then the
  same length-scaled softmax and alias folding (`_decide`).

The labels equal py3langid's and the confidences agree to float32 rounding (the sums run in
another order); `tests/pipelines/corpus/test_step_equivalence.py` checks both on the local
corpus. Simplification: texts are classified whole, as py3langid does; callers that want a
prefix cut the text first.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from py3langid.langid import LanguageIdentifier
from scipy.sparse import csr_array

UNDETERMINED = "und"
_ALNUM = re.compile(r"[^\W_]")  # exactly the characters for which str.isalnum() is true
_BLOCK = 1 << 16  # bytes walked together: the temporaries stay in cache


def _encode(text: str) -> bytes:
    """py3langid's input encoding (`LanguageIdentifier._encode`) of a str."""
    if text.isupper():
        text = text.lower()
    return unicodedata.normalize("NFC", text).encode("utf8", errors="surrogatepass")


def automaton_depth(nextmove: np.ndarray, rowbase: np.ndarray) -> int:
    """Longest path from the root to any state (breadth-first over all 256 bytes). States
    with the same moves share a row, so each level reads each of its distinct rows once and
    marks the states reached in a mask; a row read at an earlier level only leads to states
    seen already and is not read again (~20x faster than `np.unique` of every move)."""
    seen = np.zeros(len(rowbase), dtype=bool)
    seen[0] = True
    row_read = np.zeros(len(nextmove) >> 8, dtype=bool)
    frontier, depth = np.zeros(1, dtype=np.int64), 0
    while True:
        rows = np.unique(rowbase[frontier])
        rows = rows[~row_read[rows >> 8]]
        row_read[rows >> 8] = True
        reached = np.zeros(len(rowbase), dtype=bool)
        reached[nextmove[rows[:, None] + np.arange(256)]] = True
        nxt = np.flatnonzero(reached & ~seen)
        if not len(nxt):
            return depth
        seen[nxt] = True
        frontier, depth = nxt, depth + 1


TABLES = ("nextmove", "rowbase", "output", "next_row", "ptc", "pc")
"""The arrays of a `BatchLanguageId`, saved one `.npy` file each (`save`, `load`)."""
TABLES_FORMAT = 1
"""Version of the saved layout: a build cache keys its folder on it."""


class BatchLanguageId:
    """Classify many texts per call with the tables of a py3langid `LanguageIdentifier`
    loaded with `norm_probs=True` (`from_identifier`), or with those tables as saved by
    `save` (`load`: memory-mapped, so every process of a machine reads one copy)."""

    def __init__(
        self,
        tables: dict[str, np.ndarray],
        classes: list[str],
        aliases: list[tuple[int, int]],
        depth: int,
    ) -> None:
        missing = set(TABLES) - set(tables)
        if missing:
            raise ValueError(f"BatchLanguageId: tables missing: {sorted(missing)}")
        self.nextmove, self.rowbase, self.output = (tables[k] for k in TABLES[:3])
        self.next_row, self.ptc, self.pc = (tables[k] for k in TABLES[3:])
        self.classes = list(classes)
        self.labels = self.classes
        self.aliases = [(int(i), int(j)) for i, j in aliases]
        self.depth = int(depth)

    @classmethod
    def from_identifier(cls, identifier: LanguageIdentifier) -> BatchLanguageId:
        """The tables of a loaded py3langid model (~135 MB of arrays: seconds on a machine
        whose fresh memory is slow; `load` maps a saved copy instead)."""
        # int32 tables: half the cache misses of int64 in the random look-ups
        nextmove = np.asarray(identifier.tk_nextmove, dtype=np.int32)
        rowbase = np.asarray(identifier.tk_row, dtype=np.int32) << 8
        tables = {
            "nextmove": nextmove,
            "rowbase": rowbase,
            "output": np.asarray(identifier.tk_output, dtype=np.int32),
            # the row of the state each move leads to (39 MB): the walk then reads one
            # table per byte and step instead of two
            "next_row": rowbase[nextmove],
            # float32 copy (57 MB): numpy has no fast float16 matmul, which cost py3langid
            # as much time as its byte loop on long texts
            "ptc": np.asarray(identifier.nb_ptc, dtype=np.float32),  # (features, classes)
            "pc": np.asarray(identifier.nb_pc, dtype=np.float32),
        }
        return cls(
            tables,
            list(identifier.nb_classes),
            list(identifier._alias_pairs),
            automaton_depth(nextmove, rowbase),
        )

    def save(self, folder: Path) -> None:
        """Every table as `<name>.npy` and the rest as `meta.json` in `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            np.save(folder / f"{name}.npy", getattr(self, name), allow_pickle=False)
        meta = {"classes": self.classes, "aliases": self.aliases, "depth": self.depth}
        (folder / "meta.json").write_text(json.dumps(meta))

    @classmethod
    def load(cls, folder: Path) -> BatchLanguageId:
        """The classifier `save` wrote to `folder`, its tables memory-mapped read-only:
        no copy, and the pages are the page cache's, shared by every process that maps
        them (`language.unpack_model`)."""
        meta = json.loads((folder / "meta.json").read_text())
        tables = {
            name: np.asarray(np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False))
            for name in TABLES
        }
        return cls(tables, meta["classes"], meta["aliases"], meta["depth"])

    def features(self, data: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """Feature index (or -1) emitted after each byte of `data`, where `offset[i]` is
        byte i's position in its own text (each text's walk starts at the root). Done in
        blocks of `_BLOCK` bytes (plus `depth - 1` bytes of context) so the temporaries
        stay in cache."""
        out = np.empty(len(data), dtype=np.int32)
        for lo in range(0, len(data), _BLOCK):
            ctx = min(lo, self.depth - 1)
            state = self._walk(data[lo - ctx : lo + _BLOCK], offset[lo - ctx : lo + _BLOCK])
            out[lo : lo + _BLOCK] = self.output[state[ctx:]]
        return out

    def _walk(self, data: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """State after each byte, from the root `depth` bytes back (or at its text's start);
        exact from byte `depth - 1` of `data` on. The walk keeps each position's row (the
        state's row base); a position whose byte `back` places earlier is in another text
        stays at the root's row, so only the first `depth - 1` bytes of each text need it."""
        data = data.astype(np.int32)
        root = self.rowbase[0]
        row = np.full(len(data), root, dtype=np.int32)
        near = np.flatnonzero(offset < self.depth - 1)  # bytes near their text's start
        for back in range(self.depth - 1, 0, -1):  # the byte `back` places earlier...
            row[back:] = self.next_row[row[back:] + data[:-back]]
            row[near[(offset[near] < back) & (near >= back)]] = root  # ...unless in another text
        return self.nextmove[row + data]  # then the byte itself

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), classes) probabilities, as py3langid's `_decide` with norm_probs."""
        encoded = [_encode(t) for t in texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        raw = np.zeros((len(encoded), len(self.classes)), dtype=np.float32)
        ends, lo = np.cumsum(lengths), 0
        while lo < len(encoded):  # groups of at most `_BLOCK` bytes (or one longer text)
            budget = ends[lo] - lengths[lo] + _BLOCK
            hi = max(lo + 1, int(np.searchsorted(ends, budget, side="right")))
            self._raw_scores(encoded[lo:hi], lengths[lo:hi], raw[lo:hi])
            lo = hi
        raw *= (1.0 / np.sqrt(np.maximum(lengths, 1))).astype(np.float32)[:, None]
        np.exp(raw - raw.max(axis=1, keepdims=True), out=raw)
        raw /= raw.sum(axis=1, keepdims=True)
        for i, j in self.aliases:
            raw[:, i] += raw[:, j]
            raw[:, j] = 0.0
        return raw

    def _raw_scores(self, encoded: list[bytes], lengths: np.ndarray, raw: np.ndarray) -> None:
        """Naive-Bayes log scores of `encoded` into `raw` (0.0 for a text without
        features, as py3langid under norm_probs)."""
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        row = np.repeat(np.arange(len(encoded)), lengths)
        offset = np.arange(len(data)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        feature = self.features(data, offset)
        hit = feature >= 0
        n_features = self.ptc.shape[0]
        if len(encoded) == 1:  # one (long) text: the same counts by feature, without a sort
            per_feature = np.bincount(feature[hit], minlength=n_features)
            feats = np.flatnonzero(per_feature)
            rows, counts = np.zeros_like(feats), per_feature[feats]
        else:
            keys, counts = np.unique(row[hit] * n_features + feature[hit], return_counts=True)
            rows, feats = keys // n_features, keys % n_features
        weights = csr_array(
            (np.log1p(counts.astype(np.float32)), (rows, feats)),
            shape=(len(encoded), n_features),
        )
        has = np.unique(rows)
        raw[has] = (weights @ self.ptc)[has] + self.pc

    def classify(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """(language, confidence) per text, as `language.identify`: ("und", 0.0) for a text
        without any letter or digit."""
        out: list[tuple[str, float]] = [(UNDETERMINED, 0.0)] * len(texts)
        todo = [i for i, t in enumerate(texts) if _ALNUM.search(t)]
        if todo:
            probs = self.scores([texts[i] for i in todo])
            best = probs.argmax(axis=1)
            for i, b, p in zip(todo, best, probs[np.arange(len(todo)), best], strict=True):
                out[i] = (self.classes[b], float(p))
        return out
