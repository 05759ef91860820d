"""Near-duplicate detection with MinHash-LSH on CPU (Broder 1997; Leskovec et al., MMDS ch. 3).

Common Corpus does not say how it deduplicated (`shared/methods/corpus.md` 1.5), so we
follow datatrove's `MinhashDedup*` blocks (5-word shingles, 14 bands x 8 rows, seed 1;
section 2.4 there) with our own small implementation:

1. `shingles`: NFKC, casefold, words = `\\w+` runs (punctuation and whitespace runs drop out),
   then word n-grams (n=5). A text with fewer than n words is one shingle. Scripts written
   without spaces (Japanese, Chinese) become few, long "words"; character shingles for them
   are future work.
2. `signatures`: each shingle is hashed to 64 bits with `blake2b` (never Python's salted
   `hash()`, so signatures agree across processes and runs), reduced mod p = 2^61 - 1, and
   permuted by `num_perm` Carter-Wegman universal hashes h_i(x) = (a_i x + b_i) mod p whose
   (a_i, b_i) come from `numpy.random.default_rng(seed)`. The signature keeps the minimum
   per hash; P[sig_a[i] == sig_b[i]] = J(a, b), so the fraction of equal entries estimates
   the Jaccard similarity with standard error sqrt(J(1-J)/num_perm) <= 1/(2 sqrt(num_perm)).
   The products are computed exactly in uint64 by splitting operands into 32-bit halves
   (`_mulmod61`), unlike datasketch/datatrove which let (a x + b) overflow.
3. `band_keys`: the signature is cut into `bands` bands of `rows` values; each band hashes to
   one bucket key string "<band>-<blake2b-128 hex>". Two texts become candidates when any
   band agrees, with probability `collision_probability(s) = 1 - (1 - s^rows)^bands`, an
   S-curve around `lsh_threshold = (1/bands)^(1/rows)` (0.72 for 14 x 8).
4. `candidate_pairs` / `clusters` / `representatives`: bucket members are joined, a
   union-find gives the duplicate clusters, and each cluster keeps one document chosen by a
   key (the smallest content hash, `content_id`), so reruns keep the same documents.

Distributed use (the issue 6 runner): `signatures` is a pure function of a batch of texts,
so it runs inside Ray Data `map_batches`; `band_keys` of each row are exploded to
(bucket_key, doc_id) rows and grouped by bucket key with a Ray Data groupby, which can be
done band by band to bound memory (datatrove's bucket stage); the resulting edges are small
and go to `clusters` in one task (datatrove's cluster stage) before a filter keeps the
`representatives`. This module imports no Ray.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MERSENNE_61 = (1 << 61) - 1
EMPTY = np.uint64(MERSENNE_61)
"""Signature value of a text without words (above every hash value, which is < 2^61 - 1)."""

_P = np.uint64(MERSENNE_61)
_LOW32 = np.uint64(0xFFFFFFFF)
_CHUNK = 2048  # shingles per block: bounds the (chunk, num_perm) temporary to ~2 MB
_WORD = re.compile(r"\w+")


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
    """(a, b), each shape (num_perm,) uint64: a in [1, p), b in [0, p), p = 2^61 - 1."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, MERSENNE_61, size=num_perm, dtype=np.uint64)
    b = rng.integers(0, MERSENNE_61, size=num_perm, dtype=np.uint64)
    a.flags.writeable = b.flags.writeable = False
    return a, b


def _fold61(v: np.ndarray) -> np.ndarray:
    """v mod p for uint64 v, using 2^61 = 1 (mod p)."""
    v = (v & _P) + (v >> np.uint64(61))
    return np.where(v >= _P, v - _P, v)


def _mulmod61(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(a * x) mod p exactly for uint64 a, x < p (broadcast), without 128-bit integers.

    With a = a1 2^32 + a0 and x = x1 2^32 + x0: a x = a1x1 2^64 + (a1x0 + a0x1) 2^32 + a0x0,
    and 2^64 = 8, 2^61 = 1 (mod p). Every partial product fits in 64 bits.
    """
    a0, a1 = a & _LOW32, a >> np.uint64(32)
    x0, x1 = x & _LOW32, x >> np.uint64(32)
    mid = a1 * x0 + a0 * x1  # < 2^62
    lo = a0 * x0  # < 2^64
    total = (
        (a1 * x1) * np.uint64(8)
        + (mid >> np.uint64(29))
        + ((mid & np.uint64((1 << 29) - 1)) << np.uint64(32))
        + (lo & _P)
        + (lo >> np.uint64(61))
    )  # < 2^63
    return _fold61(total)


def shingle_hashes(shingle_set: Iterable[str]) -> np.ndarray:
    """64-bit blake2b of each shingle reduced mod p, sorted, shape (k,) uint64."""
    values = [
        int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")
        for s in shingle_set
    ]
    return np.sort(_fold61(np.array(values, dtype=np.uint64)))


def signature_of_hashes(hashes: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """MinHash signature, shape (num_perm,) uint64, of shingle hashes (k,); EMPTY if k == 0."""
    a, b = hash_params(num_perm, seed)
    sig = np.full(num_perm, EMPTY, dtype=np.uint64)
    for start in range(0, len(hashes), _CHUNK):
        x = hashes[start : start + _CHUNK, None]  # (chunk, 1)
        h = _mulmod61(a[None, :], x) + b[None, :]  # (chunk, num_perm), < 2p
        h = np.where(h >= _P, h - _P, h)
        sig = np.minimum(sig, h.min(axis=0))
    return sig


def signatures(texts: Sequence[str], cfg: MinHashConfig) -> np.ndarray:
    """Signatures of a batch of texts, shape (len(texts), cfg.num_perm) uint64.

    A row of all `EMPTY` marks a text without words; `band_keys` gives it no bucket.
    """
    out = np.empty((len(texts), cfg.num_perm), dtype=np.uint64)
    for i, text in enumerate(texts):
        out[i] = signature_of_hashes(
            shingle_hashes(shingles(text, cfg.n_gram)), cfg.num_perm, cfg.seed
        )
    return out


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> list[list[str]]:
    """Bucket keys per row: `bands` strings "<band index>-<blake2b-128 of the band's bytes>".

    sigs: (n, bands * rows) uint64. Rows of an empty text get no keys. The band index is part
    of the key, so one groupby over all keys never mixes bands.
    """
    _check_bands_rows(bands, rows)
    if sigs.ndim != 2 or sigs.shape[1] != bands * rows:
        raise ValueError(f"signatures of shape {sigs.shape} do not split into {bands} x {rows}")
    keys = []
    for sig in sigs.astype("<u8", copy=False):
        if np.all(sig == EMPTY):
            keys.append([])
            continue
        keys.append(
            [
                f"{b}-"
                + hashlib.blake2b(
                    sig[b * rows : (b + 1) * rows].tobytes(), digest_size=16
                ).hexdigest()
                for b in range(bands)
            ]
        )
    return keys


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
