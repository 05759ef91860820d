"""The global phase of a corpus run: exact and near dedup, the tokenizer sample, verdicts.

The scoring stage (`score_unit.py`) leaves, per unit, its scored parquet and its *key
files*: every live row as one exact-dedup record (its id, hashed) and, with near dedup,
one record per LSH band (`key_records`), split by hash range into `keys-<r>.parquet`. That
is the map side of a hash shuffle done on files, as datatrove's MinHash stages do, so it
is written once with the unit and kept by `--resume`. What depends on the whole corpus
is then done in two executions of Ray tasks (`fanout.py`), and the driver holds only
what grows with the *duplicates* and the sample, never with the corpus:

1. `find_links`: one task per hash range reads that range's key files of every unit and
   groups them (the reduce side): for every id held by >= 2 rows, each later copy -> the
   first (exact dedup: datatrove's and NeMo Curator's "keep the first"); for every bucket
   of >= 2 rows, each member -> the bucket's smallest row id (a spanning star: union-find
   gets the same clusters). Only these int64 links reach the driver.
2. `fetch`: one task per unit reads `row_id`, `id`, `drop_reason`, the signature and the
   text, and returns the signatures of the rows on a near edge (for `verify`) and the
   texts of the kept rows whose id falls under the tokenizer sample's cutoff
   (`sample_cutoff`).

The driver verifies and clusters the edges (`neardup.resolve`), trains the tokenizer on
the sample, and the final pass (`finalize.py`, the third execution) applies the verdicts.

Exact copies share their text, so they share every bucket: a later copy's near edges are
dropped before clustering, which gives the clusters near dedup finds after exact dedup.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rayworks.pipelines.corpus.fanout import fan_units
from rayworks.pipelines.corpus.minhash import band_hashes, is_empty
from rayworks.pipelines.corpus.neardup import SIGNATURE, Edge, NearDupConfig, decode_signature
from rayworks.pipelines.corpus.step import DROP, ROW_ID

DEDUP_EXACT = "dedup:exact"
EXACT_BAND = -1
"""The `band` of exact-dedup records (near records have bands 0 .. bands-1)."""
EXACT, NEAR = 0, 1
ID_CUTOFF_MAX = "g"
"""Above every hex id: a cutoff that takes every kept row into the tokenizer sample."""

_RECORDS = pa.schema(
    [
        ("band", pa.int64()),
        ("hash", pa.uint64()),
        ("range", pa.int64()),
        (ROW_ID, pa.int64()),
        ("id", pa.string()),
    ]
)
_LINKS = pa.schema([(ROW_ID, pa.int64()), ("to", pa.int64()), ("kind", pa.int8())])


def id_hash(ids: Sequence[str]) -> np.ndarray:
    """uint64 of each id's first 16 hex digits (ids are blake2b hex: uniform)."""
    return np.fromiter((int(i[:16], 16) for i in ids), dtype=np.uint64, count=len(ids))


def _live(t: pa.Table) -> pa.Table:
    return t.filter(pc.equal(t[DROP], ""))


def decode_signatures(column: pa.ChunkedArray | pa.Array, num_perm: int) -> np.ndarray:
    """A binary signature column (little-endian uint64 each; b"" for unsigned rows) as an
    (n, num_perm) matrix; rows without a signature come out as all-EMPTY (`is_empty`)."""
    cells = column.to_pylist()
    out = np.full((len(cells), num_perm), np.iinfo(np.uint64).max, dtype=np.uint64)
    for i, cell in enumerate(cells):
        if cell:
            sig = np.frombuffer(cell, dtype="<u8")
            if len(sig) != num_perm:
                raise ValueError(f"a signature of length {len(sig)}, expected {num_perm}")
            out[i] = sig
    return out


def key_records(t: pa.Table, near: NearDupConfig | None, ranges: int) -> list[pa.Table]:
    """The key records of the live rows of a scored table, one table per hash range: an
    exact record per row and, with `near`, a record per LSH band of each signed row."""
    t = _live(t)
    rows = t[ROW_ID].to_numpy()
    ids = t["id"].to_pylist()
    hashes = id_hash(ids)
    parts = [
        pa.table(
            {
                "band": np.full(len(rows), EXACT_BAND, np.int64),
                "hash": hashes,
                "range": (hashes % np.uint64(ranges)).astype(np.int64),
                ROW_ID: rows,
                "id": pa.array(ids, pa.string()),
            },
            schema=_RECORDS,
        )
    ]
    if near is not None and len(rows):
        sigs = decode_signatures(t[SIGNATURE], near.num_perm)
        signed = ~is_empty(sigs)
        buckets = band_hashes(sigs[signed], near.bands, near.rows).ravel()
        parts.append(
            pa.table(
                {
                    "band": np.tile(np.arange(near.bands, dtype=np.int64), int(signed.sum())),
                    "hash": buckets,
                    "range": (buckets % np.uint64(ranges)).astype(np.int64),
                    ROW_ID: np.repeat(rows[signed], near.bands),
                    "id": pa.nulls(len(buckets), pa.string()),
                },
                schema=_RECORDS,
            )
        )
    records = pa.concat_tables(parts)
    return [records.filter(pc.equal(records["range"], r)) for r in range(ranges)]


def _run_starts(keys: list[np.ndarray]) -> np.ndarray:
    """For arrays sorted together: True where a row starts a new run of equal keys."""
    n = len(keys[0])
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True
        for key in keys:
            start[1:] |= key[1:] != key[:-1]
    return start


def _links_of(keys: list[np.ndarray], rows: np.ndarray, kind: int) -> pa.Table:
    """Rows sorted by (keys, row id): every row but the first of its run of equal keys,
    linked to that first row."""
    start = _run_starts(keys)
    first = rows[np.flatnonzero(start)][np.cumsum(start) - 1]
    later = ~start
    return pa.table(
        {ROW_ID: rows[later], "to": first[later], "kind": np.full(int(later.sum()), kind, np.int8)},
        schema=_LINKS,
    )


def range_links(files: Sequence[str]) -> pa.Table:
    """The links of one hash range, from its key files (`find_links`)."""
    records = (
        pa.concat_tables([pq.read_table(f) for f in files]) if files else _RECORDS.empty_table()
    )
    exact = records.filter(pc.equal(records["band"], EXACT_BAND))
    exact = exact.sort_by([("id", "ascending"), (ROW_ID, "ascending")])
    near = records.filter(pc.not_equal(records["band"], EXACT_BAND))
    near = near.sort_by([("band", "ascending"), ("hash", "ascending"), (ROW_ID, "ascending")])
    ids = np.asarray(exact["id"].to_pylist(), dtype=object)
    return pa.concat_tables(
        [
            _links_of([ids], exact[ROW_ID].to_numpy(), EXACT),
            _links_of(
                [near["band"].to_numpy(), near["hash"].to_numpy()], near[ROW_ID].to_numpy(), NEAR
            ),
        ]
    )


@dataclass
class Links:
    """What `find_links` found: later copy -> first copy of every exact duplicate, and the
    candidate near edges (smaller row id first) between rows that are not later copies."""

    exact: dict[int, int] = field(default_factory=dict)
    edges: set[Edge] = field(default_factory=set)
    driver_bytes: int = 0


def find_links(ranges: Sequence[Sequence[str]], cpus: int) -> Links:
    """Execution 1 of the global phase: `ranges[r]` are the key files of hash range r
    (one task per range, `cpus` at a time)."""
    out = Links()
    near_pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for _, t in fan_units(range_links, [{"files": list(files)} for files in ranges], cpus):
        out.driver_bytes += t.nbytes
        kind = t["kind"].to_numpy()
        rows, to = t[ROW_ID].to_numpy(), t["to"].to_numpy()
        out.exact.update(zip(rows[kind == EXACT].tolist(), to[kind == EXACT].tolist(), strict=True))
        near_pairs.append((to[kind == NEAR], rows[kind == NEAR]))
    for a, b in near_pairs:
        out.edges.update(
            (x, y)
            for x, y in zip(a.tolist(), b.tolist(), strict=True)
            if x not in out.exact and y not in out.exact
        )
    return out


def sample_cutoff(k: int, candidates: int) -> str:
    """An id prefix under which about `k` plus a margin of the `candidates` rows fall (ids
    are uniform hashes): the tokenizer sample is then the `k` smallest ids under it, the
    same rows as the `k` smallest of all (`ID_CUTOFF_MAX` when all are wanted)."""
    want = k + 6 * math.sqrt(k) + 100  # six standard deviations over k
    if candidates <= want:
        return ID_CUTOFF_MAX
    return format(min(2**64 - 1, math.ceil(want / candidates * 2**64)), "016x")


def sample_prefix(
    ids: np.ndarray, chars: np.ndarray, free: np.ndarray, docs: int, max_chars: int | None
) -> np.ndarray:
    """Positions of a unit's sample candidates that can enter the tokenizer sample: in id
    order, up to the candidate at which the `free` ones (rows no near dedup can drop) reach
    `docs` documents or `max_chars` characters. The run's sample (the first survivors by id
    until either bound, `runner.global_phase`) then lies inside the units' prefixes: a
    unit's candidates past its prefix come after `docs` or `max_chars` of survivors."""
    order = np.argsort(ids, kind="stable")
    n_free = np.cumsum(free[order])
    c_free = np.cumsum(np.where(free[order], chars[order], 0))
    full = (n_free >= docs) | (c_free >= max_chars if max_chars is not None else False)
    stop = int(np.argmax(full)) + 1 if full.any() else len(order)
    return order[:stop]


def fetch_unit(
    path: str,
    ends: np.ndarray,
    later: np.ndarray,
    cutoff: str | None,
    sigs: bool,
    docs: int = 2**62,
    max_chars: int | None = None,
) -> pa.Table:
    """(row id, id, signature, text) of one unit's live rows that are on a near edge
    (signature) or are sample candidates: not a later exact copy, id < cutoff, inside the
    unit's `sample_prefix` (text)."""
    columns = [ROW_ID, "id", DROP, "text", *([SIGNATURE] if sigs else [])]
    t = _live(pq.read_table(path, columns=columns))
    rows = t[ROW_ID].to_numpy()
    on_edge = np.isin(rows, ends)
    sample = np.zeros(len(rows), dtype=bool)
    if cutoff is not None:
        candidate = pc.less(t["id"], cutoff).to_numpy(zero_copy_only=False) & ~np.isin(rows, later)
        at = np.flatnonzero(candidate)
        ids = t["id"].take(pa.array(at)).to_numpy(zero_copy_only=False)
        chars = pc.utf8_length(t["text"].take(pa.array(at))).to_numpy(zero_copy_only=False)
        sample[at[sample_prefix(ids, chars, ~on_edge[at], docs, max_chars)]] = True
    keep = on_edge | sample
    t = t.filter(pa.array(keep))
    sig = t[SIGNATURE] if sigs else pa.nulls(t.num_rows, pa.binary())
    return pa.table(
        {
            ROW_ID: t[ROW_ID],
            "id": t["id"],
            SIGNATURE: pc.if_else(pa.array(on_edge[keep]), sig, pa.scalar(None, pa.binary())),
            "text": pc.if_else(pa.array(sample[keep]), t["text"], pa.scalar(None, pa.string())),
        }
    )


_SAMPLE = pa.schema([("id", pa.string()), (ROW_ID, pa.int64()), ("text", pa.string())])


@dataclass
class Fetched:
    signatures: dict[int, np.ndarray] = field(default_factory=dict)
    ids: dict[int, str] = field(default_factory=dict)
    sample: pa.Table = field(default_factory=_SAMPLE.empty_table)  # id, row id, text
    driver_bytes: int = 0


def fetch(
    cpus: int,
    files: list[str],
    ends: set[int],
    later: set[int],
    cutoff: str | None,
    near: NearDupConfig | None,
    docs: int = 2**62,
    max_chars: int | None = None,
) -> Fetched:
    """Execution 2 of the global phase (see the module docstring): the signatures of the
    rows on near edges, and each unit's `sample_prefix` of the tokenizer sample's
    candidates (at most `docs` documents and `max_chars` characters that cannot drop);
    one task per unit, `cpus` at a time. The candidates stay Arrow columns on the object
    store's pages (`sample_order`, `sample_texts`): the driver never holds them as Python
    strings all at once."""
    kwargs = {
        "ends": np.fromiter(ends, np.int64, len(ends)),
        "later": np.fromiter(later, np.int64, len(later)),
        "cutoff": cutoff,
        "sigs": near is not None,
        "docs": docs,
        "max_chars": max_chars,
    }
    out = Fetched()
    parts = []
    for _, t in fan_units(fetch_unit, [{"path": f} for f in files], cpus, kwargs):
        out.driver_bytes += t.nbytes
        edge = t.filter(t[SIGNATURE].is_valid())
        for row, doc_id, sig in zip(
            edge[ROW_ID].to_pylist(),
            edge["id"].to_pylist(),
            edge[SIGNATURE].to_pylist(),
            strict=True,
        ):
            out.signatures[row] = decode_signature(sig)
            out.ids[row] = doc_id
        parts.append(t.select(_SAMPLE.names))
    if parts:  # concatenating tables copies no data
        out.sample = pa.concat_tables(parts)
    return out


def sample_order(sample: pa.Table, dropped: Sequence[int], docs: int) -> np.ndarray:
    """Positions in `sample` (`Fetched.sample`) of the tokenizer sample, in order: the
    candidates (text not null) whose row is not in `dropped`, by id then text, the first
    `docs` of them. Sorting reads the ids (and a text only where ids tie), not the texts."""
    order = pc.sort_indices(sample, sort_keys=[("id", "ascending"), ("text", "ascending")])
    order = order.to_numpy()
    rows = sample[ROW_ID].to_numpy()
    has_text = sample["text"].is_valid().to_numpy(zero_copy_only=False)
    gone = np.isin(rows, np.asarray(dropped, dtype=np.int64))
    order = order[has_text[order] & ~gone[order]]
    return order[:docs]


def sample_texts(sample: pa.Table, order: np.ndarray) -> Iterator[str]:
    """The texts at `order` (`sample_order`), one Python string at a time."""
    texts = sample["text"]
    for i in order.tolist():
        yield texts[i].as_py()
