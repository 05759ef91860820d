"""MinHash-LSH: batch signatures vs the per-text path, estimates vs exact Jaccard, banding,
clustering."""

import math
import random
import re
import unicodedata

import numpy as np
import pytest

from rayworks.pipelines.corpus import minhash
from rayworks.pipelines.corpus.minhash import (
    EMPTY,
    MinHashConfig,
    _word_hashes,
    band_hashes,
    band_keys,
    candidate_pairs,
    clusters,
    collision_probability,
    content_id,
    estimate_jaccard,
    exact_jaccard,
    is_empty,
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


def test_batch_signatures_equal_per_text_path(monkeypatch):
    texts = [
        BASE,
        "zwei Wörter",
        "",
        " ... ",
        "a b c d e",
        "a b c d e f",
        "x_1 ² ½ ﬁne",
        "東京の天気 ok",
    ]
    sigs = signatures(texts, CFG)
    for text, sig in zip(texts, sigs, strict=True):
        one = signature_of_hashes(shingle_hashes(shingles(text, CFG.n_gram)), 112, CFG.seed)
        assert np.array_equal(sig, one), text
    assert signatures([], CFG).shape == (0, 112)
    monkeypatch.setattr(minhash, "_CHUNK_CHARS", 40)  # texts signed in several runs
    assert np.array_equal(signatures(texts, CFG), sigs)


def test_word_split_matches_the_regex():
    rng = random.Random(0)
    pool = "aZ_9 ,.-\t\nßéİ\u0131ΣςЖ日本語٣²½ﬁ\u200b\u00a0🙂\U0001d518\x00\udcff"
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 60))) for _ in range(200)]
    hashes, text_of = _word_hashes(texts)
    words = [
        w for t in texts for w in re.findall(r"\w+", unicodedata.normalize("NFKC", t).casefold())
    ]
    assert len(hashes) == len(words) == len(text_of)
    by_word: dict[str, int] = {}
    for word, h in zip(words, hashes, strict=True):
        assert by_word.setdefault(word, int(h)) == int(h)
    assert len(set(by_word.values())) == len(by_word)  # no collisions among these words


def test_word_table_is_the_regex_on_every_code_point():
    everything = "".join(map(chr, range(0x110000)))
    want = np.zeros(0x110000, dtype=bool)
    for m in re.finditer(r"\w+", everything):
        want[m.start() : m.end()] = True
    assert np.array_equal(minhash._word_chars(), want)


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
    assert list(is_empty(sigs)) == [False, False, True] and sigs[:2].max() < EMPTY
    assert band_hashes(sigs, 14, 8).shape == (3, 14)
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
