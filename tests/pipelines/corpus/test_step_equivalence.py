"""Equivalence of the rewritten corpus steps with their previous implementations.

The previous implementations are copied below, verbatim except for names, as references
(they live only here). Each test runs old and new on a fixed sample of the real local
corpus (`_corpus_sample.py`: ~80 Debian docs and Python sources) plus hand-made edge cases.
Differences, listed and justified:
- language: the same labels; confidences differ by float32 rounding only (the vectorized
  classifier sums the same terms in another order), asserted below 1e-3;
- OCR: with `min_segment_confidence=0.5` (the old rule) the same scores; the new default
  (0.0, OCRoscope's rule) changes them on purpose (`ocr.py` docstring, "Detector noise");
- every other score is equal to the last bit.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

import numpy as np
import pytest
from _corpus_sample import local_rows, local_texts

from rayworks.pipelines.corpus.code_quality import CodeQualityConfig, code_scores
from rayworks.pipelines.corpus.langid_batch import _BLOCK
from rayworks.pipelines.corpus.language import bundled_identifier, identify_many
from rayworks.pipelines.corpus.normalize import NormalizeConfig, normalize_text
from rayworks.pipelines.corpus.ocr import OCRQuality, OCRQualityConfig
from rayworks.pipelines.corpus.quality import (
    STOP_WORDS,
    C4QualityConfig,
    c4_clean,
    gopher_scores,
    repetition_scores,
)
from rayworks.pipelines.corpus.textview import TextView

EDGE = [
    "",
    "   ",
    "word",
    "a a a a a a a a a a a a a a a a a a a a a a a",
    "\ufeffGrüße\x00 aus\x85Köln\r\n\r\nZeile\x07  zwei\u2028\tdrei  \x9f\x7f",
    "- item one...\n* item two…\n• three\n\n\n#tag # ## ...",
    "日本語の文章です。" * 30,
    "x\u00b2 \u00bd \u216b \u0663 \U0001d518\U0001d52b \u01c5 ΣΑΣ café naïve 123 ___",
    " ".join(["the cat sat on the mat"] * 30),
]


def samples() -> list[str]:
    return local_texts() + EDGE


# ----------------------------------------------------------------- previous implementations
_OLD_LINE_ENDINGS = re.compile(r"\r\n|[\r\x85\u2028\u2029]")
_OLD_SPACE_RUN = re.compile(r"(?<=\S) {2,}")
_OLD_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)


def old_normalize_text(text: str, cfg: NormalizeConfig) -> str:
    text = unicodedata.normalize(cfg.form, text)
    text = _OLD_LINE_ENDINGS.sub("\n", text)
    text = "".join(
        ch
        for ch in text
        if ch in {"\n", "\t"} or (ch != "\ufeff" and unicodedata.category(ch) != "Cc")
    )
    if cfg.collapse_spaces:
        text = _OLD_SPACE_RUN.sub(" ", text)
    text = _OLD_TRAILING.sub("", text)
    return text.strip()


def old_gopher_scores(text: str, stop_words: tuple[str, ...] | None) -> dict[str, float]:
    """Gopher quality statistics of `text` (stop_words None: `stop_words` = -1, not scored)."""
    words = text.split()
    n = len(words) or 1
    lines = [line for line in text.split("\n") if line.strip()] or [""]
    stripped = [w.strip(".,;:!?\"'()[]{}«»“”") for w in words]
    lengths = [len(w) for w in stripped if w]
    lowered = {w.lower() for w in stripped}
    return {
        "words": float(len(words)),
        "mean_word_length": sum(lengths) / len(lengths) if lengths else 0.0,
        "hash_ratio": text.count("#") / n,
        "ellipsis_ratio": (text.count("...") + text.count("…")) / n,
        "bullet_lines": sum(line.lstrip().startswith(("•", "-", "*")) for line in lines)
        / len(lines),
        "ellipsis_lines": sum(line.rstrip().endswith(("...", "…")) for line in lines) / len(lines),
        "alpha_words": sum(any(c.isalpha() for c in w) for w in words) / n,
        "stop_words": -1.0 if stop_words is None else float(sum(w in lowered for w in stop_words)),
    }


def _old_dup_fractions(parts: list[str]) -> tuple[float, float]:
    """(share of parts that repeat an earlier one, share of characters in those repeats)."""
    if not parts:
        return 0.0, 0.0
    seen: set[str] = set()
    dup, dup_chars = 0, 0
    for part in parts:
        if part in seen:
            dup, dup_chars = dup + 1, dup_chars + len(part)
        seen.add(part)
    return dup / len(parts), dup_chars / max(1, sum(len(p) for p in parts))


def _old_top_ngram_frac(words: list[str], n: int, total: int) -> float:
    """Word characters in all occurrences of the most frequent n-gram (0 if none repeats)."""
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return 0.0
    gram, count = grams.most_common(1)[0]
    return sum(map(len, gram)) * count / total if count > 1 else 0.0


def _old_dup_ngram_frac(words: list[str], n: int, total: int) -> float:
    """Word characters covered by n-grams that repeat an earlier n-gram (each word counted
    once, however many repeated n-grams overlap it)."""
    seen: set[tuple[str, ...]] = set()
    covered = np.zeros(len(words), dtype=bool)
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in seen:
            covered[i : i + n] = True
        seen.add(gram)
    return sum(len(w) for w, c in zip(words, covered, strict=True) if c) / total


def old_repetition_scores(text: str, top_ns: list[int], dup_ns: list[int]) -> dict[str, float]:
    """Gopher repetition statistics of `text`."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    words = text.split()
    total = max(1, sum(map(len, words)))
    s: dict[str, float] = {}
    s["dup_line_frac"], s["dup_line_char_frac"] = _old_dup_fractions(lines)
    s["dup_para_frac"], s["dup_para_char_frac"] = _old_dup_fractions(paras)
    for n in top_ns:
        s[f"top_{n}gram_char_frac"] = _old_top_ngram_frac(words, n, total)
    for n in dup_ns:
        s[f"dup_{n}gram_char_frac"] = _old_dup_ngram_frac(words, n, total)
    return s


_OLD_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")


def old_c4_clean(text: str, cfg: C4QualityConfig) -> tuple[str, dict[str, float]]:
    """The kept lines of `text` joined by "\\n", and the C4 statistics."""
    kept, removed = [], Counter[str]()
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    for line in lines:
        low = line.lower()
        if not line.endswith(cfg.terminal_punctuation):
            removed["no_terminal_punct"] += 1
        elif len(line.split()) < cfg.min_words_per_line:
            removed["short"] += 1
        elif "javascript" in low:
            removed["javascript"] += 1
        elif any(p in low for p in cfg.policy_substrings):
            removed["policy"] += 1
        else:
            kept.append(line)
    clean = "\n".join(kept)
    low = text.lower()
    return clean, {
        "lines_kept_frac": len(kept) / len(lines) if lines else 0.0,
        "lines_no_terminal_punct": float(removed["no_terminal_punct"]),
        "lines_short": float(removed["short"]),
        "lines_javascript": float(removed["javascript"]),
        "lines_policy": float(removed["policy"]),
        "sentences": float(len(_OLD_SENTENCE_END.findall(clean))),
        "lorem_ipsum": float("lorem ipsum" in low),
        "curly_bracket": float("{" in text),
    }


def old_identify(text: str, identifier) -> tuple[str, float]:
    if not any(ch.isalnum() for ch in text):
        return "und", 0.0
    lang, confidence = identifier.classify(text)
    return str(lang), float(confidence)


def _old_segments(text: str, cfg: OCRQualityConfig) -> list[str]:
    words = text.split()
    if words and len(text) / len(words) > 15:  # no word spacing (CJK): character windows
        chars = "".join(words)
        return [chars[i : i + cfg.segment_chars] for i in range(0, len(chars), cfg.segment_chars)]
    n = cfg.segment_words
    return [" ".join(words[i : i + n]) for i in range(0, len(words), n)]


def old_ocr_scores(text: str, doc_lang: str | None, cfg: OCRQualityConfig) -> dict[str, float]:
    """`segments`, `numeric_ratio` and `consistency` (share of language-checked segments
    whose language is a document language; 1.0 when no segment can be checked)."""
    identifier = bundled_identifier()
    segments = _old_segments(text, cfg)
    if len(segments) > cfg.max_segments:
        picks = np.linspace(0, len(segments) - 1, cfg.max_segments).round().astype(int)
        segments = [segments[i] for i in picks]
    wordy = [
        s for s in segments if sum(c.isalpha() for c in s) / max(1, len(s)) > cfg.min_letter_ratio
    ]
    words = text.split()
    windows = [
        " ".join(words[i : i + cfg.window_words]) for i in range(0, len(words), cfg.window_words)
    ]
    votes = Counter(old_identify(w, identifier)[0] for w in windows)
    doc_langs = {lang for lang, k in votes.items() if k / len(windows) > cfg.min_window_share}
    if doc_lang:
        doc_langs.add(doc_lang)
    agree = 0
    for segment in wordy:
        lang, confidence = old_identify(segment, identifier)
        agree += lang in doc_langs and confidence >= cfg.min_segment_confidence
    return {
        "segments": float(len(segments)),
        "numeric_ratio": 1 - len(wordy) / len(segments) if segments else 0.0,
        "consistency": agree / len(wordy) if wordy else 1.0,
    }


def old_code_scores(text: str, cfg: CodeQualityConfig) -> dict[str, float]:
    """File statistics of one source file (line lengths in characters, without "\\n")."""
    lines = text.split("\n")
    lengths = [len(line) for line in lines]
    header = "\n".join(lines[: cfg.header_lines]).lower()
    return {
        "bytes": float(len(text.encode("utf-8"))),
        "max_line_length": float(max(lengths)),
        "mean_line_length": sum(lengths) / len(lengths),
        "alphanum_fraction": sum(c.isalnum() for c in text) / max(1, len(text)),
        "newline_ratio": text.count("\n") / max(1, len(text)),
        "generated": float(any(m in header for m in cfg.generated_markers)),
    }


# ------------------------------------------------------------------------------------ tests
def test_normalize_same_text() -> None:
    raw = [r["raw"] for r in _raw_rows()] + EDGE
    for form in ("NFC", "NFKC"):
        cfg = NormalizeConfig(form=form)
        assert [normalize_text(t, cfg) for t in raw] == [old_normalize_text(t, cfg) for t in raw]
    cfg = NormalizeConfig(collapse_spaces=False)
    assert [normalize_text(t, cfg) for t in EDGE] == [old_normalize_text(t, cfg) for t in EDGE]


def _raw_rows() -> list[dict]:
    """The sample with its texts before normalization (controls, CRLF, BOMs kept)."""
    return [{"raw": r["text"] + "\r\n\x0c\ufeff  end\x00 "} for r in local_rows()]


def test_language_same_labels_and_confidences() -> None:
    texts = samples()
    identifier = bundled_identifier()
    old = [old_identify(t, identifier) for t in texts]
    new = identify_many(texts)
    assert [lang for lang, _ in new] == [lang for lang, _ in old]
    assert max(abs(a - b) for (_, a), (_, b) in zip(new, old, strict=True)) < 1e-3


@pytest.mark.parametrize("lang", ["en", "fr", "ja"])
def test_gopher_same_scores(lang: str) -> None:
    stop = STOP_WORDS.get(lang)
    for text in samples():
        assert gopher_scores(TextView(text), stop) == old_gopher_scores(text, stop), text[:80]


def test_repetition_same_scores() -> None:
    top_ns, dup_ns = [2, 3, 4], [5, 6, 7, 8, 9, 10]
    for text in samples():
        new = repetition_scores(TextView(text), top_ns, dup_ns)
        assert new == old_repetition_scores(text, top_ns, dup_ns), text[:80]


def test_c4_same_text_and_scores() -> None:
    cfg = C4QualityConfig()
    for text in samples():
        assert c4_clean(TextView(text), cfg) == old_c4_clean(text, cfg), text[:80]


def test_code_same_scores() -> None:
    cfg = CodeQualityConfig()
    for text in samples():
        assert code_scores(TextView(text), cfg) == old_code_scores(text, cfg), text[:80]


def test_ocr_same_scores_under_the_old_rule() -> None:
    """The old rule (`min_segment_confidence=0.5`) gives the old scores; a sample of 25
    prose documents cut to 8,000 characters keeps py3langid's per-segment calls short."""
    rows = [r for r in local_rows() if r["collection"] != "code"][:25]
    texts = [r["text"][:8000] for r in rows] + EDGE
    langs = ["en"] * len(rows) + [None] * len(EDGE)
    cfg = OCRQualityConfig(min_segment_confidence=0.5)
    out = OCRQuality(cfg)({"text": texts, "lang": langs})
    for i, (text, lang) in enumerate(zip(texts, langs, strict=True)):
        old = old_ocr_scores(text, lang, cfg)
        new = {k: out[f"ocr_{k}"][i] for k in old}
        assert new == pytest.approx(old, abs=1e-12), text[:80]


def test_language_same_on_texts_longer_than_a_walk_block() -> None:
    """Texts over `_BLOCK` bytes are walked in blocks with `depth - 1` bytes of context."""
    joined = "\n".join(local_texts())
    texts = [joined[:150_000], joined[-(_BLOCK + 7) :], ("é" * 7 + " ") * 9000]
    assert all(len(t.encode()) > _BLOCK for t in texts)
    identifier = bundled_identifier()
    old = [old_identify(t, identifier) for t in texts]
    new = identify_many(texts)
    assert [lang for lang, _ in new] == [lang for lang, _ in old]
    assert max(abs(a - b) for (_, a), (_, b) in zip(new, old, strict=True)) < 1e-3
