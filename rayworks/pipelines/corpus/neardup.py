"""Near-duplicate dedup with MinHash-LSH: the signature step and the resolution.

Common Corpus does not say how it removed near-duplicates, so we follow datatrove's
`MinhashDedup*` stages (signature -> buckets -> cluster -> filter; datatrove's
`pipeline/dedup/minhash.py`) with its defaults: 5-word shingles, 14 bands x 8 rows, seed 1.
Two documents of Jaccard similarity s share a bucket in at least one band with probability
P(s) = 1 - (1 - s^8)^14, an S-curve around the threshold (1/14)^(1/8) ~ 0.72
(P(0.8) ~ 0.92). The math lives in `minhash.py`; the Ray stages in `dedup.py`:

1. `MinHashSignature` (step `minhash`): the signature of every live row as a column.
2. `dedup.find_links`: every bucket of >= 2 live rows becomes edges member -> the
   bucket's smallest row id (datatrove's bucket stage, a group-by on (band, hash range)).
3. `resolve` (here, on the driver, which holds only the edges): with `verify` (a
   false-positive check, our choice; NeMo Curator has one, off by default) an edge
   survives only if the signatures estimate the pair's Jaccard similarity at >= the
   threshold; union-find (`minhash.clusters`) then gives the clusters (datatrove's cluster
   stage, also a single task).
4. `dedup.apply_verdicts`: every live non-representative row gets `dedup:near` and
   `dedup_near_of` = its representative's id.

A row is its int64 `row_id` (`score_unit.py`): unique per row and ordered as the input is
read, so in each cluster the representative is the row read first (the smallest row id),
the rule of exact dedup, and the kept copy depends neither on block order nor on
partitioning.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from rayworks.pipelines.corpus.minhash import (
    MinHashConfig,
    clusters,
    estimate_jaccard,
    lsh_threshold,
    signatures,
)
from rayworks.pipelines.corpus.step import Batch, alive

SIGNATURE = "minhash"
NEAR_OF = "dedup_near_of"
DEDUP_NEAR = "dedup:near"

Edge = tuple[int, int]
"""(representative-side row id, other row id) of a candidate pair, the smaller id first."""


@dataclass(frozen=True)
class NearDupConfig:
    """Near-duplicate parameters (defaults: datatrove's `MinhashConfig`).

    ngram: words per shingle (datatrove: 5).
    bands, rows: LSH banding, bands x rows hashes per signature (datatrove: 14 x 8).
    seed: seed of the hash family; signatures only compare under the same seed.
    verify: drop candidate pairs whose signatures estimate a Jaccard similarity below the
        threshold, a false-positive check (reconstructed; datatrove has none). It makes the
        catch rate fall below P(s) near the threshold (a pair at s = 0.7 passes it about a
        third of the time), so P(s) itself (pass rule 3) is measured with verify off.
    """

    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    verify: bool = True

    def __post_init__(self) -> None:
        for name in ("ngram", "bands", "rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"NearDupConfig.{name} must be an int >= 1, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"NearDupConfig.seed must be an int >= 0, got {self.seed!r}")
        if not isinstance(self.verify, bool):
            raise ValueError(f"NearDupConfig.verify must be a bool, got {self.verify!r}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    @property
    def threshold(self) -> float:
        """(1/bands)^(1/rows): the S-curve's steepest point, also the `verify` cut."""
        return lsh_threshold(self.bands, self.rows)

    @property
    def minhash(self) -> MinHashConfig:
        return MinHashConfig(
            n_gram=self.ngram,
            num_perm=self.num_perm,
            bands=self.bands,
            rows=self.rows,
            seed=self.seed,
        )


@dataclass(frozen=True)
class NearDupResult:
    """What `resolve` found: `drop` maps every non-representative row id to its
    representative's document id; the rest are counts for the run's stats."""

    drop: dict[int, str]
    n_candidate_pairs: int  # distinct bucket edges (stars, not all pairs of a bucket)
    n_verified_pairs: int  # edges kept by `verify` (all of them without it)
    n_clusters: int  # clusters of >= 2 rows
    docs_in_clusters: int
    docs_removed: int
    cluster_sizes: dict[int, int]  # cluster size -> clusters of that size
    threshold: float
    bands: int
    rows: int

    def stats(self) -> dict[str, Any]:
        """Everything but `drop`, JSON-ready."""
        out = asdict(self)
        del out["drop"]
        out["cluster_sizes"] = {str(k): v for k, v in sorted(self.cluster_sizes.items())}
        return out


class MinHashSignature:
    """Step `minhash`: column `minhash`, each live row's signature (bands x rows uint64) as
    little-endian bytes; rows dropped earlier get b"". Bytes, not a list: Arrow `binary`
    survives numpy batches and parquet unchanged, whereas Ray turns a list column that
    passes through a numpy step into tensor types that differ by block (112 vs 0 long)."""

    name: ClassVar[str] = "minhash"

    def __init__(self, cfg: NearDupConfig | None = None) -> None:
        self.cfg = cfg or NearDupConfig()

    def __call__(self, batch: Batch) -> Batch:
        live = alive(batch)
        texts = [str(t or "") for t, keep in zip(batch["text"], live, strict=True) if keep]
        rows = iter(signatures(texts, self.cfg.minhash).astype("<u8", copy=False))
        column = [next(rows).tobytes() if keep else b"" for keep in live]
        return {**batch, SIGNATURE: np.asarray(column, dtype=object)}


def decode_signature(value: Any) -> np.ndarray:
    """A `minhash` cell as a uint64 array (empty for a dropped row)."""
    if value is None:
        return np.empty(0, dtype=np.uint64)
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(value, dtype="<u8").astype(np.uint64)
    return np.asarray(value, dtype=np.uint64)


def verify_edges(edges: set[Edge], sigs: Mapping[int, np.ndarray], threshold: float) -> set[Edge]:
    """Edges whose signatures estimate a Jaccard similarity >= threshold."""
    return {(a, b) for a, b in edges if estimate_jaccard(sigs[a], sigs[b]) >= threshold}


def cluster_edges(edges: set[Edge]) -> list[list[int]]:
    """Clusters (size >= 2) of the edge graph, each sorted by row id: the first member is
    the representative. Independent of the order the edges came in."""
    nodes = sorted({row for edge in edges for row in edge})
    return clusters(nodes, edges)


def resolve(
    candidates: set[Edge],
    sigs: Mapping[int, np.ndarray],
    ids: Mapping[int, str],
    cfg: NearDupConfig,
) -> NearDupResult:
    """Verify (if `cfg.verify`; `sigs` must then hold every endpoint) and cluster the
    candidate edges; `ids` maps each representative's row id to its document id."""
    kept = verify_edges(candidates, sigs, cfg.threshold) if cfg.verify else candidates
    groups = cluster_edges(kept)
    drop_map = {row: ids[group[0]] for group in groups for row in group[1:]}
    return NearDupResult(
        drop=drop_map,
        n_candidate_pairs=len(candidates),
        n_verified_pairs=len(kept),
        n_clusters=len(groups),
        docs_in_clusters=sum(map(len, groups)),
        docs_removed=len(drop_map),
        cluster_sizes=dict(Counter(map(len, groups))),
        threshold=cfg.threshold,
        bands=cfg.bands,
        rows=cfg.rows,
    )
