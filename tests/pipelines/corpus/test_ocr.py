"""OCR consistency on clean English: the score must measure the text,
not py3langid's uncertainty on 7-word segments."""

from __future__ import annotations

import random

import numpy as np
from _corpus_sample import local_rows

from rayworks.pipelines.corpus.language import identify_many
from rayworks.pipelines.corpus.ocr import OCRQuality, OCRQualityConfig

CHANGELOG = """\
bash (5.2.15-2) unstable; urgency=medium

  * Fix the build with the new version of the bison parser generator, which changed
    the way that the grammar file declares its token types.
  * Update the Danish and the Swedish translations from the translation project.
  * Remove the obsolete patch for the documentation, which has been applied upstream.

 -- Matthias Klose <doko@debian.org>  Sun, 26 Feb 2023 12:18:34 +0100

bash (5.2.15-1) unstable; urgency=medium

  * New upstream patch level, which fixes a crash when the shell expands a long list
    of words in a loop, and a memory leak in the history library.
  * Build the static version of the shell with the same options as the dynamic one.
"""
CONFUSIONS = {"e": "c", "h": "b", "l": "1", "o": "0", "m": "rn", "n": "ii", "i": "l", "t": "f"}


def ocr_noise(text: str, rate: float, seed: int = 0) -> str:
    """`text` with each letter that has a typical OCR confusion replaced with prob. `rate`."""
    rng = random.Random(seed)
    return "".join(CONFUSIONS[c] if c in CONFUSIONS and rng.random() < rate else c for c in text)


def consistency(texts: list[str], **cfg) -> np.ndarray:
    out = OCRQuality(OCRQualityConfig(**cfg))({"text": texts, "lang": ["en"] * len(texts)})
    return np.asarray(out["ocr_consistency"], dtype=float)


def test_clean_changelog_scores_high_and_noise_lowers_it() -> None:
    clean, some, much = consistency([CHANGELOG, *(ocr_noise(CHANGELOG, r) for r in (0.25, 0.5))])
    assert clean >= 0.8 and some < clean and much < clean - 0.2
    # the old rule (a 0.5 probability floor per segment) scored this clean text lower
    assert consistency([CHANGELOG], min_segment_confidence=0.5)[0] < clean - 0.1


def test_clean_english_local_documents_score_high() -> None:
    """Clean English Debian documents of the local corpus (whole-text language confidence
    above 0.9): the median is high, and OCR noise lowers nearly every document's score."""
    rows = [r for r in local_rows() if r["collection"] != "code"]
    langs = identify_many([r["text"] for r in rows])
    texts = [
        r["text"][:20_000]
        for r, (lang, c) in zip(rows, langs, strict=True)
        if lang == "en" and c > 0.9 and len(r["text"].split()) >= 50
    ]
    assert len(texts) >= 20
    clean = consistency(texts)
    old = consistency(texts, min_segment_confidence=0.5)
    noisy = consistency([ocr_noise(t, 0.25) for t in texts])
    assert np.median(clean) >= 0.8 and np.median(old) < np.median(clean) - 0.15
    assert (noisy < clean).mean() >= 0.9
