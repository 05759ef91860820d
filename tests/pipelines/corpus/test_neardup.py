"""Near-duplicate dedup: catch rates follow the LSH S-curve, the key files + range tasks of
`dedup.py` (over Ray) equal the single-process reference, and neither how rows are split
into units nor earlier drops change who is kept."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rayworks.pipelines.corpus.dedup import fetch, find_links, key_records, range_links
from rayworks.pipelines.corpus.minhash import (
    candidate_pairs,
    clusters,
    collision_probability,
    content_id,
    estimate_jaccard,
    exact_jaccard,
    shingles,
    signatures,
)
from rayworks.pipelines.corpus.neardup import (
    SIGNATURE,
    MinHashSignature,
    NearDupConfig,
    decode_signature,
    resolve,
)
from rayworks.pipelines.corpus.step import DROP, ROW_ID

CFG = NearDupConfig()
LEVELS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)
PAIRS_PER_LEVEL = 80
WORDS = 200


def _pair(rng: random.Random, fresh, s: float) -> tuple[str, str]:
    """Two texts of WORDS words sharing a prefix: J = (x-4) / (x + 2 (WORDS - x) - 4) ~ s."""
    x = round(((2 * WORDS - 4) * s + 4) / (1 + s))
    head = [next(fresh) for _ in range(x)]
    a = head + [next(fresh) for _ in range(WORDS - x)]
    b = head + [next(fresh) for _ in range(WORDS - x)]
    return " ".join(a), " ".join(b)


def _row(text: str, path: str, line: int, reason: str = "") -> dict:
    return {"id": content_id(text), "text": text, "source_path": path, "line": line, DROP: reason}


@pytest.fixture(scope="module")
def corpus() -> dict:
    """Pairs at each similarity level, one cluster of 4, a repeated id on two paths, an
    empty text, and dropped exact copies of live rows (which must stay out of everything)."""
    rng = random.Random(7)
    fresh = (f"{rng.getrandbits(40):x}" for _ in iter(int, 1))
    rows, pairs = [], []
    for s in LEVELS:
        for _ in range(PAIRS_PER_LEVEL):
            a, b = _pair(rng, fresh, s)
            ra, rb = (
                _row(t, f"shard{rng.randrange(5)}.jsonl", rng.randrange(1, 999)) for t in (a, b)
            )
            rows += [ra, rb]
            pairs.append((s, exact_jaccard(shingles(a), shingles(b)), ra, rb))
    base = [next(fresh) for _ in range(WORDS)]
    family = [" ".join([*base[:i], next(fresh), *base[i + 1 :]]) for i in (0, 199, 100, 50)]
    rows += [_row(t, "fam.jsonl", line) for t, line in zip(family, (9, 3, 7, 5), strict=True)]
    rows += [_row(rows[0]["text"], "z_copy.jsonl", 1), _row("", "empty.jsonl", 1)]
    dead = [_row(r["text"], "dead.jsonl", i, "gopher:x") for i, r in enumerate(rows[:20])]
    rows += dead
    for i, row in enumerate(rows):
        row[ROW_ID] = 1000 + 7 * i  # read order: the first copy has the smallest id
    return {"rows": rows, "pairs": pairs, "family": family, "dead": dead}


def _signed(rows: list[dict]) -> pa.Table:
    """The rows after the signature step, as a scored unit holds them."""
    batch = {k: np.asarray([r[k] for r in rows], dtype=object) for k in rows[0]}
    batch[ROW_ID] = np.asarray([r[ROW_ID] for r in rows], dtype=np.int64)
    out = MinHashSignature(CFG)(batch)
    return pa.table({k: pa.array(list(v)) for k, v in out.items()})


def _key_files(table: pa.Table, folder: Path, units: int, ranges: int) -> list[list[str]]:
    """`table` split into `units` unit files, each with its key files (`score_unit.py`);
    returns the key files of each hash range."""
    out: list[list[str]] = [[] for _ in range(ranges)]
    step = -(-table.num_rows // units)
    for u in range(units):
        for r, keys in enumerate(key_records(table.slice(u * step, step), CFG, ranges)):
            path = folder / f"u{u}-keys-{r}.parquet"
            pq.write_table(keys, path)
            out[r].append(str(path))
    return out


def _links(ranges: list[list[str]]):
    """`find_links` without Ray: every range's links, gathered as it gathers them."""
    exact, near = {}, set()
    for files in ranges:
        t = range_links(files)
        for row, to, kind in zip(*(t[c].to_pylist() for c in (ROW_ID, "to", "kind")), strict=True):
            if kind == 0:
                exact[row] = to
            else:
                near.add((to, row))
    return exact, {(a, b) for a, b in near if a not in exact and b not in exact}


@pytest.fixture(scope="module")
def runs(ray_session, corpus, tmp_path_factory) -> dict:
    """The rows in 2 units: links from `find_links` over Ray (4 hash ranges), resolved
    with and without verify; the rows shuffled into 3 units and 1 hash range, through
    the pure range function."""
    folder = tmp_path_factory.mktemp("keys")
    table = _signed(corpus["rows"])
    shuffled = list(corpus["rows"])
    random.Random(1).shuffle(shuffled)
    links = find_links(_key_files(table, folder, 2, 4), 2)
    unit = folder / "unit.parquet"
    pq.write_table(table, unit)
    ends = {row for edge in links.edges for row in edge}
    got = fetch(2, [str(unit)], ends, set(links.exact), None, CFG)
    exact2, edges2 = _links(_key_files(_signed(shuffled), folder / "..", 3, 1))
    sigs2 = dict(
        zip(
            table[ROW_ID].to_pylist(),
            (decode_signature(c) for c in table[SIGNATURE].to_pylist()),
            strict=True,
        )
    )
    ids = dict(zip(table[ROW_ID].to_pylist(), table["id"].to_pylist(), strict=True))
    return {
        "links": links,
        "raw": resolve(links.edges, {}, got.ids, NearDupConfig(verify=False)),
        "verified": resolve(links.edges, got.signatures, got.ids, CFG),
        "shuffled": resolve(edges2, sigs2, ids, CFG),
        "shuffled_exact": exact2,
    }


def _key(row: dict) -> int:
    return row[ROW_ID]


def test_catch_rate_follows_the_s_curve(runs, corpus):
    caught: dict[float, list[bool]] = defaultdict(list)
    expected: dict[float, list[float]] = defaultdict(list)
    drop = runs["raw"].drop
    for level, s, ra, rb in corpus["pairs"]:
        assert abs(s - level) < 0.01
        hit = drop.get(_key(ra)) == rb["id"] or drop.get(_key(rb)) == ra["id"]
        caught[level].append(hit)
        expected[level].append(collision_probability(s, CFG.bands, CFG.rows))
    for level in LEVELS:
        n, rate, p = len(caught[level]), np.mean(caught[level]), np.mean(expected[level])
        assert abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / n) + 0.03, (level, rate, p)
    assert sum(caught[0.3]) <= 1 and np.mean(caught[0.95]) > 0.95
    raw = runs["raw"]
    assert raw.n_verified_pairs == raw.n_candidate_pairs and raw.threshold == CFG.threshold


def test_verify_keeps_only_pairs_above_the_threshold(runs, corpus):
    raw, ver = runs["raw"], runs["verified"]
    assert ver.n_verified_pairs < raw.n_candidate_pairs == ver.n_candidate_pairs
    assert set(ver.drop) < set(raw.drop)
    pairs = {
        level: [(ra, rb) for lv, _, ra, rb in corpus["pairs"] if lv == level] for level in LEVELS
    }
    texts = [r["text"] for r in corpus["rows"]]
    sigs = dict(zip(map(_key, corpus["rows"]), signatures(texts, CFG.minhash), strict=True))
    for ra, rb in pairs[0.5] + pairs[0.7] + pairs[0.95]:
        caught = _key(ra) in ver.drop or _key(rb) in ver.drop
        if caught:
            assert estimate_jaccard(sigs[_key(ra)], sigs[_key(rb)]) >= CFG.threshold
    assert not any(_key(a) in ver.drop or _key(b) in ver.drop for a, b in pairs[0.5])


def _reference(rows: list[dict], cfg: NearDupConfig) -> dict:
    """Single process: `minhash.candidate_pairs` over rows in representative order, the
    same verification, `minhash.clusters`."""
    firsts: dict[str, dict] = {}
    for r in sorted((r for r in rows if not r[DROP] and r["text"]), key=_key):
        firsts.setdefault(r["id"], r)  # exact dedup first: a later copy is not clustered
    live = sorted(firsts.values(), key=_key)
    sigs = signatures([r["text"] for r in live], cfg.minhash)
    keys = [_key(r) for r in live]
    pairs = {
        (keys[i], keys[j])
        for i, j in candidate_pairs(sigs, cfg.bands, cfg.rows)
        if keys[i] != keys[j] and estimate_jaccard(sigs[i], sigs[j]) >= cfg.threshold
    }
    ends = {k for pair in pairs for k in pair}
    nodes = [k for k in keys if k in ends]
    idof = {_key(r): r["id"] for r in live}
    return {k: idof[g[0]] for g in clusters(nodes, pairs) for k in g[1:]}


def test_distributed_equals_single_process_reference(runs, corpus):
    assert runs["verified"].drop == _reference(corpus["rows"], CFG)
    res = runs["verified"]
    assert res.docs_removed == len(res.drop) == res.docs_in_clusters - res.n_clusters
    assert sum(size * n for size, n in res.cluster_sizes.items()) == res.docs_in_clusters


def test_representative_ignores_row_order_and_blocks(runs, corpus):
    a, b = runs["verified"], runs["shuffled"]
    assert a.drop == b.drop and a.stats() == b.stats()
    family = [r for r in corpus["rows"] if r["source_path"] == "fam.jsonl"]
    fam = [k for k in a.drop if k in {_key(r) for r in family}]
    rep = content_id(corpus["family"][0])  # the family's first row read: the smallest id
    assert len(fam) == 3 and {a.drop[k] for k in fam} == {rep}
    assert a.cluster_sizes[4] == 1


def test_exact_copies_link_to_the_first_and_stay_out_of_clusters(runs, corpus):
    first = corpus["rows"][0]
    copy = next(r for r in corpus["rows"] if r["source_path"] == "z_copy.jsonl")
    assert runs["links"].exact == {_key(copy): _key(first)} == runs["shuffled_exact"]
    assert all(_key(copy) not in edge for edge in runs["links"].edges)


def test_dropped_rows_are_never_clustered(runs, corpus):
    out = {_key(r) for r in corpus["rows"] if r["source_path"] in ("dead.jsonl", "empty.jsonl")}
    assert len(out) == 21
    for name in ("raw", "verified", "shuffled"):
        assert not out & set(runs[name].drop)
    links = runs["links"]
    assert not out & (
        {r for e in links.edges for r in e} | set(links.exact) | set(links.exact.values())
    )


def test_signature_step_skips_dropped_rows():
    texts = ["one two three four five six", "one two three four five six", "x", ""]
    batch = {
        "id": np.array(["a", "b", "c", "d"], dtype=object),
        "text": np.array(texts, dtype=object),
        DROP: np.array(["", "", "", "toxicity:words"], dtype=object),
    }
    signed = MinHashSignature(CFG)(batch)
    column = [decode_signature(c) for c in signed[SIGNATURE]]
    assert [len(c) for c in column] == [112, 112, 112, 0] and signed[SIGNATURE][3] == b""
    assert np.array_equal(column[0], signatures(texts[:1], CFG.minhash)[0])
    assert list(signed[DROP]) == ["", "", "", "toxicity:words"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"bands": 0}, "bands"),
        ({"rows": 1.5}, "rows"),
        ({"ngram": True}, "ngram"),
        ({"seed": -1}, "seed"),
        ({"verify": "yes"}, "verify"),
    ],
)
def test_config_validation_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=rf"NearDupConfig\.{name}\b"):
        NearDupConfig(**kwargs)
    assert NearDupConfig().threshold == pytest.approx(0.7190, abs=1e-4)
    assert NearDupConfig().minhash.num_perm == 112
