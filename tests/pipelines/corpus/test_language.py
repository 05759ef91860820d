"""LanguageId on hand-made en/fr/de/es/ja text: labels, confidence, reasons."""

import math

import pytest

from rayworks.pipelines.corpus.language import (
    LOW_CONFIDENCE,
    NOT_ALLOWED,
    LanguageId,
    LanguageIdConfig,
    identify,
)
from rayworks.pipelines.corpus.step import DROP, drop

TEXTS = {
    "en": "The library will stay open late on Thursdays during the winter months.",
    "fr": "La bibliothèque restera ouverte tard le jeudi pendant les mois d'hiver.",
    "de": "Die Bibliothek bleibt in den Wintermonaten donnerstags länger geöffnet.",
    "es": "La biblioteca permanecerá abierta hasta tarde los jueves durante el invierno.",
    "ja": "図書館は冬の間、木曜日の夜遅くまで開いています。",
}


def test_labels_and_confidence_in_unit_interval() -> None:
    out = LanguageId()({"text": list(TEXTS.values())})
    assert list(out["lang"]) == list(TEXTS)
    assert all(0.9 < c <= 1.0 for c in out["lang_confidence"])
    assert list(out[DROP]) == [""] * 5


def test_short_and_empty_text_still_labelled() -> None:
    lang, confidence = identify("ok")
    assert isinstance(lang, str) and lang and 0.0 <= confidence < 0.5  # unreliable, low
    assert identify("  ... ") == ("und", 0.0)


def test_allowed_and_min_confidence_reasons() -> None:
    texts = [TEXTS["fr"], TEXTS["ja"], "ok", TEXTS["de"]]
    batch = drop({"text": texts}, ["", "", "", "earlier:rule"])
    step = LanguageId(LanguageIdConfig(allowed=("fr", "en"), min_confidence=0.5))
    out = step(batch)
    assert list(out[DROP]) == ["", NOT_ALLOWED, LOW_CONFIDENCE, "earlier:rule"]
    assert (NOT_ALLOWED, LOW_CONFIDENCE) == ("language:not_allowed", "language:low_confidence")
    # a row an earlier step dropped is not classified (null label, NaN confidence)...
    assert out["lang"][3] is None and math.isnan(out["lang_confidence"][3])
    # ...unless score_dropped asks for every row; its first reason stays
    every = LanguageId(LanguageIdConfig(allowed=("fr", "en"), score_dropped=True))(batch)
    assert every["lang"][3] == "de" and list(every[DROP])[3] == "earlier:rule"
    # moving the thresholds changes the verdicts
    loose = LanguageId(LanguageIdConfig(allowed=("fr", "ja")))(batch)
    assert list(loose[DROP]) == ["", "", NOT_ALLOWED, "earlier:rule"]


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="min_confidence"):
        LanguageIdConfig(min_confidence=1.5)
    with pytest.raises(ValueError, match="unknown to py3langid"):
        LanguageIdConfig(allowed=("english",))


def test_vectorized_walk_emits_the_features_of_the_byte_loop() -> None:
    """`BatchLanguageId.features` over several texts at once (walk blocks crossed, texts
    shorter than the automaton's depth) equals py3langid's own byte-by-byte walk."""
    import numpy as np

    from rayworks.pipelines.corpus.langid_batch import _BLOCK, _encode
    from rayworks.pipelines.corpus.language import batch_identifier, bundled_identifier

    identifier = bundled_identifier()
    texts = ["", "a", "ab", *TEXTS.values(), "Grüße aus Köln. " * 900, "xyz" * 40000, "fin"]
    encoded = [_encode(t) for t in texts]
    lengths = np.array([len(e) for e in encoded])
    assert lengths.sum() > 2 * _BLOCK
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    offset = np.arange(len(data)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    expected = []
    for text in encoded:
        state = 0
        for byte in text:
            state = identifier.tk_nextmove[identifier._rowbase[state] + byte]
            expected.append(identifier.tk_output[state])
    assert batch_identifier().features(data, offset).tolist() == expected


def test_scores_do_not_depend_on_how_texts_are_grouped() -> None:
    """One text alone (its features counted by `np.bincount`) or with others (`np.unique`
    of all their features) gets the same probabilities to the last bit."""
    import numpy as np

    from rayworks.pipelines.corpus.language import batch_identifier

    classifier = batch_identifier()
    texts = list(TEXTS.values())
    together = classifier.scores(texts)
    for i, text in enumerate(texts):
        assert np.array_equal(classifier.scores([text])[0], together[i])


def test_unpacked_tables_classify_as_the_bundled_model(tmp_path) -> None:
    """The classifier's tables saved into a build cache (`unpack_model`, built once, then
    reused) and memory-mapped (`use_unpacked`) classify as the bundled model does, to the
    last bit of the confidence, and map read-only: one copy per machine."""
    import numpy as np

    from rayworks.pipelines.corpus import language
    from rayworks.pipelines.corpus.langid_batch import TABLES

    texts = [*TEXTS.values(), "def f(x):\n    return x  # code", "¿Qué tal? 東京 Москва"]
    bundled = LanguageId()({"text": texts})
    first = language.unpack_model(tmp_path)
    stamp = (first / "meta.json").stat().st_mtime_ns
    assert language.unpack_model(tmp_path) == first
    assert (first / "meta.json").stat().st_mtime_ns == stamp
    try:
        language.use_unpacked(first)
        unpacked = LanguageId()({"text": texts})
        mapped = language.batch_identifier()
    finally:
        language._UNPACKED.clear()
        language.batch_identifier.cache_clear()
    assert list(unpacked["lang"]) == list(bundled["lang"])
    assert list(unpacked["lang_confidence"]) == list(bundled["lang_confidence"])
    built = language.batch_identifier()
    assert mapped is not built and (mapped.classes, mapped.depth) == (built.classes, built.depth)
    assert mapped.aliases == built.aliases
    for name in TABLES:
        table = getattr(mapped, name)
        assert isinstance(table.base, np.memmap) and not table.flags.writeable, name
        assert np.array_equal(table, getattr(built, name)), name
