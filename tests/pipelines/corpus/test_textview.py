"""The shared text view: exact counts and ids, one view per row per batch, never stale."""

from __future__ import annotations

import unicodedata
from collections import Counter

import numpy as np

from rayworks.pipelines.corpus import textview
from rayworks.pipelines.corpus.chain import StepChain
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.textview import VIEW, TextView, char_counts, views

TEXTS = [
    "The cat sat on the mat.\n\n  The cat sat on the mat.  \nA dog!",
    "x\u00b2 \u00bd \u216b \u0663 \U0001d518 \u01c5 ΣΑΣ café naïve 123 ___\tend\n",
    "日本語の文章です。\u3000テスト",
    "",
]


def test_char_counts_equal_str_methods() -> None:
    for text in TEXTS:
        c = char_counts(text)
        assert c.length == len(text) and c.utf8_bytes == len(text.encode("utf-8"))
        assert c.letters == sum(map(str.isalpha, text))
        assert c.digits == sum(map(str.isdigit, text))
        assert c.alnum == sum(map(str.isalnum, text))
        assert c.whitespace == sum(map(str.isspace, text))
        assert c.upper == sum(map(str.isupper, text))
        assert c.punctuation == sum(unicodedata.category(ch).startswith("P") for ch in text)
        assert c.newlines == text.count("\n")


def test_word_and_ngram_ids_identify_equal_tuples() -> None:
    view = TextView(" ".join(["a b c a b", "d a b c"] * 3))
    words = view.words
    assert view.vocab == list(dict.fromkeys(words))
    assert [view.vocab[i] for i in view.word_ids] == words
    assert list(view.word_counts) == [Counter(words)[w] for w in view.vocab]
    for n in range(1, 12):
        ids = view.ngram_ids(n)
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        assert len(ids) == len(grams)
        first = list(dict.fromkeys(grams))  # ids number n-grams by first appearance
        assert list(ids) == [first.index(g) for g in grams]
    assert view.lines == [line.strip() for line in view.text.split("\n") if line.strip()]


def test_views_are_cached_in_the_batch_and_rebuilt_when_text_changes() -> None:
    batch = textview.attach({"text": np.array(["one two", "three four"], dtype=object)})
    first = views(batch, "text", [0, 1])
    assert views(batch, "text", [1, 0]) == [first[1], first[0]]  # same objects: cached
    changed = {**batch, "text": np.array(["one two", "five"], dtype=object)}
    again = views(changed, "text", [0, 1])
    assert again[0] is first[0] and again[1] is not first[1] and again[1].words == ["five"]
    assert VIEW not in textview.detach(changed)
    alone = views({"text": ["one two"]}, "text", [0])  # no view column: fresh, not kept
    assert alone[0].words == ["one", "two"]


def test_step_chain_with_shared_views_equals_steps_run_alone() -> None:
    """Sharing views between steps changes nothing: the chain's output equals running each
    step on its own (fresh views), and no view leaves the chain."""
    chain = StepChain.from_config(CorpusConfig(near_dedup=False))
    n = 6
    prose = (
        "The council met on Tuesday evening to discuss the new budget for the public library. "
        "Members agreed that the reading rooms should stay open later in winter. The collection "
        "of local newspapers must be digitised before the end of the year. The mayor thanked "
        "the volunteers who have catalogued the old maps, letters and photographs. She asked "
        "the archive to publish a short guide with the results of their work. Visitors may "
        "bring their own laptops to the reading rooms."
    )
    batch = {
        "text": np.array(
            [prose, prose + "Lorem ipsum.", "def f():\n    return 1\n", prose, "", prose.upper()],
            dtype=object,
        ),
        "collection": np.array(["web", "web", "code", "web", "web", "web"], dtype=object),
        "license_status": np.array(
            ["public-domain"] * 3 + ["copyleft"] + ["public-domain"] * 2, dtype=object
        ),
        "lang": np.full(n, None, dtype=object),
    }
    out = chain(dict(batch))
    alone = dict(batch)
    for step in chain.steps:
        alone = step(alone)
    assert VIEW not in out and set(out) == set(alone)
    for key in out:
        assert list(map(str, out[key])) == list(map(str, alone[key])), key
    assert list(out["drop_reason"])[:4] == ["", "c4:lorem_ipsum", "", "license:copyleft"]
    assert out["lang"][0] == "en" and out["toxicity_hits"][0] == 0 and out["ocr_segments"][0] > 0
    assert str(out["gopher_words"][3]) == "nan"  # dropped at the gate: not scored
