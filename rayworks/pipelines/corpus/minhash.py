"""Near-duplicate detection with MinHash-LSH on CPU (Broder 1997; Leskovec et al., MMDS ch. 3).

Common Corpus does not say how it deduplicated (neither the paper's abstract nor its
dataset card describes it), so we follow datatrove's `MinhashDedup*` blocks (5-word
shingles, 14 bands x 8 rows, seed 1: `MinhashConfig` in datatrove's
`pipeline/dedup/minhash.py`) with our own small implementation:

1. `shingles`: NFKC, casefold, words = `\\w+` runs (punctuation and whitespace runs drop out),
   then word n-grams (n=5). A text with fewer than n words is one shingle. Scripts written
   without spaces (Japanese, Chinese) become few, long "words"; character shingles for them
   are future work.
2. `signatures`: vectorised over a whole batch with numpy, so one core signs thousands of
   1-5 KB documents per second (reconstructed design, replacing a per-shingle blake2b and
   an exact mod 2^61 - 1 hash family that managed ~200/s). Each word hashes to 64 bits by
   a polynomial over its code points mod 2^64 and the splitmix64 finaliser; a shingle's key
   is the finalised polynomial of its n word hashes, cut to 32 bits. All of it is fixed
   arithmetic, never Python's salted `hash()`, so signatures agree across processes and
   runs. The `num_perm` hash functions are Dietzfelbinger's multiply-add-shift
   h_i(x) = ((a_i x + b_i) mod 2^64) >> 32 with (a_i, b_i) from
   `numpy.random.default_rng(seed)`, a strongly universal family for 32-bit keys. The
   signature keeps the minimum per hash; P[sig_a[i] == sig_b[i]] ~ J(a, b), so the fraction
   of equal entries estimates the Jaccard similarity with standard error
   sqrt(J(1-J)/num_perm) <= 1/(2 sqrt(num_perm)).
3. `band_hashes`: the signature is cut into `bands` bands of `rows` values; each band hashes
   to one 64-bit bucket id (`band_keys` spells them "<band>-<hex>"). Two texts become
   candidates when any band agrees, with probability
   `collision_probability(s) = 1 - (1 - s^rows)^bands`, an S-curve around
   `lsh_threshold = (1/bands)^(1/rows)` (0.72 for 14 x 8).
4. `candidate_pairs` / `clusters` / `representatives`: bucket members are joined, a
   union-find gives the duplicate clusters, and each cluster keeps one document chosen by a
   key, so reruns keep the same documents.

This module is the single-process math and reference; `neardup.py` and `dedup.py` run
the same steps over Ray (signatures in the scoring tasks, buckets per hash range in the
global phase's tasks, clusters on the driver).
It imports no Ray.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

import numpy as np

EMPTY = np.uint64(1 << 32)
"""Signature value of a text without words (above every hash value, which is < 2^32)."""

_U64 = np.uint64
_CHAR_BASE = _U64(0x100000001B3)  # odd multipliers of the polynomial hashes
_WORD_BASE = _U64(0x9E3779B97F4A7C15)
_BAND_BASE = _U64(0xC2B2AE3D27D4EB4F)
_WORD = re.compile(r"\w+")
_UNICODE = 0x110000
_CHUNK_CHARS = 1 << 18  # characters signed at once (measured: 2^17-2^19 are fastest)


@dataclass(frozen=True)
class MinHashConfig:
    """MinHash-LSH parameters (defaults: datatrove's `MinhashConfig`).

    n_gram: words per shingle (datatrove: 5).
    num_perm: hash functions per signature; must equal bands * rows (datatrove: 112).
    bands, rows: LSH banding, threshold ~ (1/bands)^(1/rows) (datatrove: 14 x 8, ~0.72).
    seed: seed of the hash family; signatures are only comparable under the same seed.
    """

    n_gram: int = 5
    num_perm: int = 112
    bands: int = 14
    rows: int = 8
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("n_gram", "num_perm", "bands", "rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"MinHashConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.bands * self.rows != self.num_perm:
            raise ValueError(
                f"MinHashConfig: bands x rows = {self.bands} x {self.rows} = "
                f"{self.bands * self.rows} must equal num_perm = {self.num_perm}"
            )


def _check_bands_rows(bands: int, rows: int) -> None:
    if bands < 1 or rows < 1:
        raise ValueError(f"bands and rows must be >= 1, got bands={bands}, rows={rows}")


def lsh_threshold(bands: int, rows: int) -> float:
    """Similarity where the S-curve rises steepest, approximately its 1/2 point: (1/b)^(1/r)."""
    _check_bands_rows(bands, rows)
    return (1.0 / bands) ** (1.0 / rows)


def collision_probability(s: float, bands: int, rows: int) -> float:
    """P(two texts of Jaccard similarity s share at least one band) = 1 - (1 - s^r)^b."""
    _check_bands_rows(bands, rows)
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"similarity s must be in [0, 1], got {s}")
    return 1.0 - (1.0 - s**rows) ** bands


def content_id(text: str) -> str:
    """Stable id of a text: blake2b-128 hex of its UTF-8 bytes (also the exact-dedup key)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def shingles(text: str, n: int = 5) -> set[str]:
    """Word n-grams of the normalised text (see the module docstring), as a set."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    if not words:
        return set()
    if len(words) < n:
        return {" ".join(words)}
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def exact_jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b|; two empty sets count as identical (1.0)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Fraction of equal signature entries, an unbiased estimate of the Jaccard similarity."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signature shapes differ: {sig_a.shape} vs {sig_b.shape}")
    return float(np.mean(sig_a == sig_b))


@lru_cache(maxsize=8)
def hash_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), each shape (num_perm,) uint64, uniform in [0, 2^64)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64)
    b = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64)
    a.flags.writeable = b.flags.writeable = False
    return a, b


@lru_cache(maxsize=1)
def _word_chars() -> np.ndarray:
    """Lookup table, shape (0x110000,) bool: is code point c matched by `\\w`? For `str`
    patterns the stdlib's `\\w` is `str.isalnum()` or `_` (sre's `SRE_UNI_IS_WORD`; the
    tests check every code point against `_WORD`), which maps over all code points in
    ~0.05 s where scanning them with `_WORD` took 0.15-0.35 s in every scoring process."""
    codes = np.arange(_UNICODE, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    table = np.fromiter(map(str.isalnum, codes), dtype=bool, count=_UNICODE)
    table[ord("_")] = True
    return table


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit affects every output bit."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def _segment_poly(values: np.ndarray, lengths: np.ndarray, base: np.uint64) -> np.ndarray:
    """sum_j v_j base^(L-1-j) mod 2^64 per segment; `values` (m,) uint64 is the concatenation
    of the segments, `lengths` (k,) their lengths (all >= 1). Returns (k,) uint64."""
    if len(lengths) == 0:
        return np.empty(0, dtype=np.uint64)
    offsets = np.cumsum(lengths) - lengths
    powers = np.full(int(lengths.max()), base, dtype=np.uint64)
    powers[0] = 1
    with np.errstate(over="ignore"):
        powers = np.cumprod(powers, dtype=np.uint64)
        exponent = np.repeat(offsets + lengths - 1, lengths) - np.arange(len(values))
        return np.add.reduceat(values * powers[exponent], offsets)


def _word_hashes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Hashes (w,) uint64 of the words of all `texts` in order, and the text index (w,) of
    each word; words as in `shingles`."""
    norm = [unicodedata.normalize("NFKC", t).casefold() for t in texts]
    joined = "\x00".join(norm)  # NUL is no word character: texts never share a word
    chars = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    is_word = _word_chars()[chars]
    edges = np.diff(is_word.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    in_word = chars[is_word].astype(np.uint64) + _U64(1)
    hashes = _mix64(_segment_poly(in_word, ends - starts, _CHAR_BASE))
    text_starts = np.cumsum([0] + [len(t) + 1 for t in norm[:-1]])
    return hashes, np.searchsorted(text_starts, starts, side="right") - 1


def _shingle_keys(words: np.ndarray, text_of: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """32-bit keys (s,) of all word n-grams, and their text index (s,) in ascending order.

    A text with 1..n-1 words gets one key from all its words, as in `shingles`."""
    n_windows = max(len(words) - n + 1, 0)
    acc = np.zeros(n_windows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):  # Horner: acc = sum_k w_(i+k) base^(n-1-k)
            acc = acc * _WORD_BASE + words[k : k + n_windows]
    inside = text_of[:n_windows] == text_of[n - 1 :][:n_windows]
    texts, counts = np.unique(text_of, return_counts=True)
    short = counts < n
    first = np.cumsum(counts) - counts
    short_words = np.concatenate(
        [words[f : f + c] for f, c in zip(first[short], counts[short], strict=True)] or [words[:0]]
    )
    keys = np.concatenate([acc[inside], _segment_poly(short_words, counts[short], _WORD_BASE)])
    owner = np.concatenate([text_of[:n_windows][inside], texts[short]])
    order = np.argsort(owner, kind="stable")
    return _mix64(keys[order]) >> _U64(32), owner[order]


def _minhash(keys: np.ndarray, owner: np.ndarray, n: int, num_perm: int, seed: int) -> np.ndarray:
    """Signatures (n, num_perm) uint64 of shingle keys (s,) grouped by ascending `owner`."""
    sigs = np.full((n, num_perm), EMPTY, dtype=np.uint64)
    if len(keys) == 0:
        return sigs
    a, b = hash_params(num_perm, seed)
    firsts = np.flatnonzero(np.diff(owner, prepend=-1))
    h = np.empty_like(keys)
    with np.errstate(over="ignore"):
        for i in range(num_perm):  # one 1-d pass per hash: no (s, num_perm) temporary
            np.multiply(keys, a[i], out=h)
            np.add(h, b[i], out=h)
            sigs[owner[firsts], i] = np.minimum.reduceat(h, firsts) >> _U64(32)
    return sigs


def shingle_hashes(shingle_set: Iterable[str]) -> np.ndarray:
    """32-bit keys of shingles (strings of words joined by spaces, as `shingles` makes them),
    sorted, shape (k,) uint64; a string without words has no key."""
    items = list(shingle_set)
    words, text_of = _word_hashes(items)
    _, counts = np.unique(text_of, return_counts=True)
    return np.sort(_mix64(_segment_poly(words, counts, _WORD_BASE)) >> _U64(32))


def signature_of_hashes(hashes: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """MinHash signature, shape (num_perm,) uint64, of shingle keys (k,); EMPTY if k == 0."""
    keys = np.asarray(hashes, dtype=np.uint64)
    return _minhash(keys, np.zeros(len(keys), dtype=np.int64), 1, num_perm, seed)[0]


def signatures(texts: Sequence[str], cfg: MinHashConfig) -> np.ndarray:
    """Signatures of a batch of texts, shape (len(texts), cfg.num_perm) uint64.

    Equals `signature_of_hashes(shingle_hashes(shingles(t)))` per text, computed for runs
    of texts of about `_CHUNK_CHARS` characters at once (so the working arrays stay in
    cache). A row of all `EMPTY` marks a text without words (no bucket).
    """
    out = np.empty((len(texts), cfg.num_perm), dtype=np.uint64)
    ends = np.cumsum([len(t) for t in texts]) // _CHUNK_CHARS
    cuts = [0, *(np.flatnonzero(np.diff(ends)) + 1).tolist(), len(texts)]
    for start, stop in pairwise(cuts):
        if start == stop:
            continue
        words, text_of = _word_hashes(texts[start:stop])
        keys, owner = _shingle_keys(words, text_of, cfg.n_gram)
        out[start:stop] = _minhash(keys, owner, stop - start, cfg.num_perm, cfg.seed)
    return out


def _check_sigs(sigs: np.ndarray, bands: int, rows: int) -> None:
    _check_bands_rows(bands, rows)
    if sigs.ndim != 2 or sigs.shape[1] != bands * rows:
        raise ValueError(f"signatures of shape {sigs.shape} do not split into {bands} x {rows}")


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Bucket id per row and band, shape (n, bands) uint64: the finalised polynomial of the
    band's `rows` values. sigs: (n, bands * rows) uint64. Rows of empty texts get ids too;
    `is_empty` tells them apart."""
    _check_sigs(sigs, bands, rows)
    cut = np.asarray(sigs, dtype=np.uint64).reshape(len(sigs), bands, rows)
    acc = np.zeros(cut.shape[:2], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for r in range(rows):
            acc = acc * _BAND_BASE + cut[:, :, r]
    return _mix64(acc)


def is_empty(sigs: np.ndarray) -> np.ndarray:
    """Which rows (n,) bool are signatures of texts without words."""
    return np.all(np.asarray(sigs) == EMPTY, axis=1)


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> list[list[str]]:
    """Bucket keys per row: `bands` strings "<band index>-<16 hex digits of its bucket id>".

    Rows of an empty text get no keys. The band index is part of the key, so one groupby
    over all keys never mixes bands.
    """
    ids = band_hashes(sigs, bands, rows)
    return [
        [] if empty else [f"{b}-{int(h):016x}" for b, h in enumerate(row)]
        for row, empty in zip(ids, is_empty(sigs), strict=True)
    ]


def candidate_pairs(sigs: np.ndarray, bands: int, rows: int) -> set[tuple[int, int]]:
    """Row index pairs (i < j) that share a band bucket.

    Each bucket contributes the edges (first member, other member), a spanning star rather
    than all k(k-1)/2 pairs: it yields the same `clusters` with O(k) edges per bucket.
    """
    buckets: dict[str, list[int]] = {}
    for i, row_keys in enumerate(band_keys(sigs, bands, rows)):
        for key in row_keys:
            buckets.setdefault(key, []).append(i)
    return {(members[0], j) for members in buckets.values() for j in members[1:]}


def clusters(ids: Sequence[Hashable], pairs: Iterable[tuple[Hashable, Hashable]]) -> list[list]:
    """Connected components of the duplicate graph (union-find), singletons included.

    Members keep the order of `ids`; clusters are ordered by their first member.
    """
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    if len(position) != len(ids):
        raise ValueError("clusters: ids contain duplicates")
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving
            i = parent[i]
        return i

    for x, y in pairs:
        if x not in position or y not in position:
            raise ValueError(f"clusters: pair ({x!r}, {y!r}) names an id not in ids")
        rx, ry = find(position[x]), find(position[y])
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    groups: dict[int, list] = {}
    for i, doc_id in enumerate(ids):
        groups.setdefault(find(i), []).append(doc_id)
    return list(groups.values())


def representatives(groups: Iterable[Sequence], key: Callable | None = None) -> list:
    """One member per cluster: the smallest by `key` (default: the id itself, e.g. a
    `content_id`), so the kept document does not depend on input order or partitioning."""
    return [min(group, key=key) if key else min(group) for group in groups]
