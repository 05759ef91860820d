"""MinHash-LSH: exact modular arithmetic, estimates vs exact Jaccard, banding, clustering."""

import math
import random

import numpy as np
import pytest

from rayworks.pipelines.corpus.minhash import (
    EMPTY,
    MERSENNE_61,
    MinHashConfig,
    _mulmod61,
    band_keys,
    candidate_pairs,
    clusters,
    collision_probability,
    content_id,
    estimate_jaccard,
    exact_jaccard,
    lsh_threshold,
    representatives,
    shingle_hashes,
    shingles,
    signature_of_hashes,
    signatures,
)

CFG = MinHashConfig()
BASE = (
    "Die Verwaltung veröffentlicht jedes Jahr einen Bericht über die Arbeit der Behörden, "
    "die Ausgaben der Ministerien und die Pläne für das kommende Haushaltsjahr in allen Ländern. "
    "Le rapport annuel décrit aussi les dépenses publiques et les projets de loi en préparation."
)


def test_mulmod61_is_exact():
    rng = random.Random(0)
    a = [rng.randrange(MERSENNE_61) for _ in range(500)] + [MERSENNE_61 - 1]
    x = [rng.randrange(MERSENNE_61) for _ in range(500)] + [MERSENNE_61 - 1]
    got = _mulmod61(np.array(a, dtype=np.uint64), np.array(x, dtype=np.uint64))
    assert [int(g) for g in got] == [(u * v) % MERSENNE_61 for u, v in zip(a, x, strict=True)]


def test_shingles_normalise_case_punctuation_whitespace():
    assert shingles("The  QUICK brown, fox!\njumps over", n=5) == shingles(
        "the quick brown fox jumps over", n=5
    )
    assert shingles("the quick brown fox jumps over", n=5) == {
        "the quick brown fox jumps",
        "quick brown fox jumps over",
    }
    assert shingles("zwei Wörter", n=5) == {"zwei wörter"} and shingles("  ...  ", n=5) == set()


@pytest.mark.parametrize("overlap", [0, 20, 50, 80, 100])
def test_estimate_close_to_exact_jaccard(overlap):
    num_perm = 256
    a = {f"tok{i}" for i in range(100)}
    b = {f"tok{i}" for i in range(100 - overlap, 200 - overlap)}
    exact = exact_jaccard(a, b)
    sa = signature_of_hashes(shingle_hashes(a), num_perm, seed=1)
    sb = signature_of_hashes(shingle_hashes(b), num_perm, seed=1)
    assert abs(estimate_jaccard(sa, sb) - exact) < 3 / math.sqrt(num_perm)


def test_threshold_and_s_curve_match_datatrove_numbers():
    assert lsh_threshold(14, 8) == pytest.approx(0.7190, abs=1e-4)
    assert collision_probability(0.8, 14, 8) == pytest.approx(0.924, abs=1e-3)
    assert collision_probability(0.0, 14, 8) == 0.0 and collision_probability(1.0, 14, 8) == 1.0
    with pytest.raises(ValueError, match=r"1\.5"):
        collision_probability(1.5, 14, 8)
    with pytest.raises(ValueError, match="num_perm = 100"):
        MinHashConfig(num_perm=100)


def test_signatures_deterministic_shape_and_empty_rows():
    sigs = signatures([BASE, BASE.upper(), "!!!"], CFG)
    assert sigs.shape == (3, 112) and sigs.dtype == np.uint64
    assert np.array_equal(sigs[0], sigs[1])  # case-insensitive
    assert np.all(sigs[2] == EMPTY) and band_keys(sigs, 14, 8)[2] == []
    assert np.array_equal(sigs, signatures([BASE, BASE.upper(), "!!!"], CFG))
    assert not np.array_equal(sigs[0], signatures([BASE], MinHashConfig(seed=2))[0])


def test_candidates_catch_near_duplicate_not_unrelated():
    near = BASE.replace("jedes Jahr", "jedes Jahr wieder")  # one inserted word
    unrelated = "東京の天気は晴れ。 The committee met on Tuesday to discuss railway timetables and fares for next spring."
    texts = [BASE, unrelated, near]
    sigs = signatures(texts, CFG)
    j = exact_jaccard(shingles(BASE), shingles(near))
    assert j > lsh_threshold(14, 8)
    assert candidate_pairs(sigs, 14, 8) == {(0, 2)}
    keys = band_keys(sigs, 14, 8)
    assert all(k.startswith(f"{b}-") for b, k in enumerate(keys[0]))


def test_clusters_and_deterministic_representatives():
    ids = ["d", "b", "a", "c", "e"]
    groups = clusters(ids, [("d", "a"), ("a", "c")])
    assert groups == [["d", "a", "c"], ["b"], ["e"]]
    assert representatives(groups) == ["a", "b", "e"]
    shuffled = clusters(["c", "e", "a", "b", "d"], [("a", "c"), ("d", "a")])
    assert sorted(representatives(shuffled)) == ["a", "b", "e"]
    assert representatives([["x1", "x22"]], key=len) == ["x1"]
    with pytest.raises(ValueError, match="'z'"):
        clusters(ids, [("a", "z")])


def test_content_id_stable():
    assert content_id("abc") == content_id("abc") != content_id("abd") and len(content_id("")) == 32
