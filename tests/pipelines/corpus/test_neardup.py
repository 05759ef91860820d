"""Near-duplicate dedup over Ray Data: catch rates follow the LSH S-curve, the distributed
result equals the single-process reference, and neither block order nor earlier drops
change who is kept."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np
import pytest

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
    DEDUP_NEAR,
    NEAR_OF,
    SIGNATURE,
    MinHashSignature,
    NearDedup,
    NearDupConfig,
    candidate_edges,
    decode_signature,
    fetch_signatures,
    near_duplicates,
    resolve,
    row_keys,
)
from rayworks.pipelines.corpus.step import DROP

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
    return {"rows": rows + dead, "pairs": pairs, "family": family, "dead": dead}


def _signed(rows: list[dict], blocks: int):
    import ray

    ds = ray.data.from_items(rows, override_num_blocks=blocks)
    ds = ds.map_batches(MinHashSignature(CFG), batch_format="numpy")
    # a later numpy step, as in the runner: the signature column must pass through intact
    return ds.map_batches(NearDedup({}), batch_format="numpy")  # lazy: signed per read


@pytest.fixture(scope="module")
def runs(ray_session, corpus) -> dict:
    """The rows in 2 blocks: candidates from one groupby (4 hash ranges), resolved with and
    without verify; the rows shuffled into 3 blocks, through `near_duplicates` end to end
    with 1 hash range."""
    shuffled = list(corpus["rows"])
    random.Random(1).shuffle(shuffled)
    ds = _signed(corpus["rows"], 2)
    candidates = candidate_edges(ds, CFG)
    ends = {key for edge in candidates for key in edge}
    return {
        "raw": resolve(candidates, {}, NearDupConfig(verify=False)),
        "verified": resolve(candidates, fetch_signatures(ds, ends, CFG.num_perm), CFG),
        "shuffled": near_duplicates(_signed(shuffled, 3), NearDupConfig(hash_ranges=1)),
    }


def _key(row: dict) -> tuple[str, str, int]:
    return row["id"], row["source_path"], row["line"]


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
    live = sorted(
        (r for r in rows if not r[DROP] and r["text"]),
        key=lambda r: (r["source_path"], r["line"], r["id"]),
    )
    sigs = signatures([r["text"] for r in live], cfg.minhash)
    keys = [_key(r) for r in live]
    pairs = {
        (keys[i], keys[j])
        for i, j in candidate_pairs(sigs, cfg.bands, cfg.rows)
        if keys[i] != keys[j] and estimate_jaccard(sigs[i], sigs[j]) >= cfg.threshold
    }
    ends = {k for pair in pairs for k in pair}
    nodes = [k for k in keys if k in ends]
    return {k: g[0][0] for g in clusters(nodes, pairs) for k in g[1:]}


def test_distributed_equals_single_process_reference(runs, corpus):
    assert runs["verified"].drop == _reference(corpus["rows"], CFG)
    res = runs["verified"]
    assert res.docs_removed == len(res.drop) == res.docs_in_clusters - res.n_clusters
    assert sum(size * n for size, n in res.cluster_sizes.items()) == res.docs_in_clusters


def test_representative_ignores_row_order_and_blocks(runs, corpus):
    a, b = runs["verified"], runs["shuffled"]
    assert a.drop == b.drop and a.stats() == b.stats()
    fam = [k for k in a.drop if k[1] == "fam.jsonl"]
    rep = content_id(corpus["family"][1])  # fam.jsonl line 3: the smallest key
    assert len(fam) == 3 and {a.drop[k] for k in fam} == {rep}
    first = corpus["rows"][0]
    assert a.drop[(first["id"], "z_copy.jsonl", 1)] == first["id"]  # same id, later path
    assert a.cluster_sizes[4] == 1


def test_dropped_rows_are_never_clustered(runs, corpus):
    dead = {_key(r) for r in corpus["dead"]}
    for res in runs.values():
        assert not dead & set(res.drop)
        assert not any(k[1] in ("dead.jsonl", "empty.jsonl") for k in res.drop)


def test_signature_step_and_near_dedup_keep_first_reason():
    texts = ["one two three four five six", "one two three four five six", "x", ""]
    batch = {
        "id": np.array(["a", "b", "c", "d"], dtype=object),
        "text": np.array(texts, dtype=object),
        "source_path": np.array(["p"] * 4, dtype=object),
        "line": np.array([1, 2, float("nan"), 4]),
        DROP: np.array(["", "", "", "toxicity:words"], dtype=object),
    }
    signed = MinHashSignature(CFG)(batch)
    column = [decode_signature(c) for c in signed[SIGNATURE]]
    assert [len(c) for c in column] == [112, 112, 112, 0] and signed[SIGNATURE][3] == b""
    assert np.array_equal(column[0], signatures(texts[:1], CFG.minhash)[0])
    assert row_keys(batch)[2] == ("c", "p", -1)
    drop_map = {("b", "p", 2): "a", ("d", "p", 4): "a"}
    out = NearDedup(drop_map)(signed)
    assert list(out[DROP]) == ["", DEDUP_NEAR, "", "toxicity:words"]
    assert list(out[NEAR_OF]) == ["", "a", "", ""]
    assert list(out["text"]) == texts


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"bands": 0}, "bands"),
        ({"rows": 1.5}, "rows"),
        ({"ngram": True}, "ngram"),
        ({"hash_ranges": 0}, "hash_ranges"),
        ({"seed": -1}, "seed"),
        ({"verify": "yes"}, "verify"),
    ],
)
def test_config_validation_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=rf"NearDupConfig\.{name}\b"):
        NearDupConfig(**kwargs)
    assert NearDupConfig().threshold == pytest.approx(0.7190, abs=1e-4)
    assert NearDupConfig().minhash.num_perm == 112
