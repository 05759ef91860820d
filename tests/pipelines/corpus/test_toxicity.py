"""Toxicity word lists: shipped languages, whole-word matching, per-language lists."""

import math
import re

import pytest

from rayworks.pipelines.corpus.step import DROP, drop
from rayworks.pipelines.corpus.toxicity import (
    WORDS,
    Toxicity,
    ToxicityConfig,
    available_languages,
    load_wordlist,
)


def test_shipped_languages_and_lists() -> None:
    assert set(available_languages()) >= {"en", "fr", "de", "es"}
    for lang in ("en", "fr", "de", "es"):
        words = load_wordlist(lang)
        assert 10 <= len(words) <= 100 and all(w == w.lower() and "#" not in w for w in words)


def test_hits_per_language_word_boundaries_and_case() -> None:
    texts = [
        "What the FUCK is this shit, he said.",  # 2 hits in 8 words
        "Quel connard, ce fils de pute !",
        "Das ist doch Scheiße, du Arschloch.",
        "¡Qué mierda, cabrón!",
        "Shitake mushrooms in Scunthorpe are a classic.",  # no whole-word hit
        "今日は良い天気です。",
    ]
    out = Toxicity()({"text": texts, "lang": ["en", "fr", "de", "es", "en", "ja"]})
    assert list(out["toxicity_hits"]) == [2, 2, 2, 2, 0, 0]
    assert out["toxicity_score"][0] == pytest.approx(2000 / 8)
    assert list(out[DROP]) == [""] * 6  # scores only by default


def test_language_chooses_list_with_fallback_to_all() -> None:
    text = "Quelle merde."
    step = Toxicity()
    assert step({"text": [text], "lang": ["de"]})["toxicity_hits"][0] == 0
    assert step({"text": [text], "lang": ["fr"]})["toxicity_hits"][0] == 1
    assert step({"text": [text], "lang": ["ja"]})["toxicity_hits"][0] == 1  # no ja list
    assert step({"text": [text]})["toxicity_hits"][0] == 1  # no lang column


def test_threshold_reason_and_first_reason_wins() -> None:
    texts = ["shit " + "word " * 99, "shit shit " + "word " * 98, "shit shit shit"]
    batch = drop({"text": texts, "lang": ["en"] * 3}, ["", "", "gopher:min_words"])
    out = Toxicity(ToxicityConfig(max_score=15.0))(batch)
    assert list(out["toxicity_score"][:2]) == [10.0, 20.0]
    # the row dropped earlier is not scored (NaN score, null hits) unless score_dropped
    assert math.isnan(out["toxicity_score"][2]) and out["toxicity_hits"][2] is None
    every = Toxicity(ToxicityConfig(max_score=15.0, score_dropped=True))(batch)
    assert list(every["toxicity_score"]) == [10.0, 20.0, 1000.0]
    assert list(every[DROP]) == ["", WORDS, "gopher:min_words"]
    assert list(out[DROP]) == ["", WORDS, "gopher:min_words"]
    assert WORDS == "toxicity:words"
    strict = Toxicity(ToxicityConfig(max_score=0.0))(batch)
    assert list(strict[DROP]) == [WORDS, WORDS, "gopher:min_words"]


def test_unknown_language_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="no word list"):
        Toxicity(ToxicityConfig(languages=("xx",)))


def test_dispatch_pattern_finds_what_the_plain_alternation_finds() -> None:
    """The fast pattern (`dispatch_pattern`) equals `plain_pattern` match for match, also
    where case-insensitive matching is subtle: dotted capital I, long s, Kelvin sign,
    sharp s, words glued to letters, digits, underscores and marks."""
    import random

    from rayworks.pipelines.corpus.toxicity import dispatch_pattern, plain_pattern

    lists = {lang: load_wordlist(lang) for lang in available_languages()}
    lists["*"] = [w for words in lists.values() for w in words]
    glue = [" ", "  ", "\n", "\t", "", "x", "é", "_", "1", "-", ".", "'", "\u0301", "日"]
    rng = random.Random(0)
    for words in lists.values():
        fast, plain = dispatch_pattern(words), plain_pattern(words)
        assert fast is not None
        spellings = []
        for word in words:
            spellings += [
                word,
                word.upper(),
                word.title(),
                word.replace(" ", " \n "),
                word.replace("s", "\u017f").replace("k", "\u212a").replace("i", "İ"),
                word.upper().replace("SS", "ẞ"),
                word[:-1],
                word + word[-1],
                rng.choice("abcdfmnpswxz") + word[1:],
            ]
        for _ in range(200):
            text = "".join(rng.choice(glue) + rng.choice(spellings) for _ in range(30))
            assert fast.findall(text) == plain.findall(text), text
        found = "".join(rng.choice(glue) + w for w in spellings for _ in range(1))
        assert len(plain.findall(found)) >= len(words)  # the texts do hold matches


def test_case_classes_are_what_each_letter_matches() -> None:
    import numpy as np

    from rayworks.pipelines.corpus.toxicity import _case_classes

    every = np.arange(0x110000, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    for letter, chars in _case_classes("aksiß").items():
        assert chars == "".join(re.findall(re.escape(letter), every, re.IGNORECASE))
    assert _case_classes("k")["k"] == "Kk\u212a"  # Kelvin sign
