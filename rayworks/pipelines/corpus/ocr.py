"""OCR consistency: an OCRoscope-style language-consistency score (step `ocr`).

PleIAs' OCRoscope (used to curate Common Corpus; GitHub `Pleias/OCRoscope`) cuts a
document into 7-word segments, identifies the language of each, and scores the share of
segments in one of the document's languages: OCR noise ("Tlie c0uncil rnet") reads as no
language or a random one. We use py3langid (`language.py`) instead of cld2, vectorized:
every segment and window of every row of a batch is classified in one call
(`langid_batch.py`; the same labels and confidences as one py3langid call per segment).

Detector noise. A 7-word segment is ~40 bytes, and py3langid divides
its scores by sqrt(bytes) before the softmax, so on a segment its top label is usually
right but its probability is low. Our first rule added a floor (a segment agreed only if
its top language was a document language *with probability >= 0.5*); OCRoscope has no
such floor (a segment disagrees when its top language is not a document language). The
floor made the score measure the detector: on 150 clean English Debian documents of the
local corpus (whole-text language confidence > 0.9) it scored 0.10-0.92, median 0.54 (83
changelogs: median 0.30). With OCRoscope's rule (`min_segment_confidence` = 0.0, the
default now) the same documents score 0.30-1.00, median 0.85 (changelogs 0.75, other
documents 0.95: changelog lines of names, versions and dates stay ambiguous). OCR noise
still lowers the score: when each letter of the same documents (their first 20,000
characters) that has a typical OCR confusion (e->c, h->b, l->1, m->rn, ...) is replaced
with probability 0.10 / 0.25, the medians are 0.78 / 0.64, and the score fell for 89% /
100% of the documents (the old rule: 100% / 100%, by more, but from a noisy start).
Setting `min_segment_confidence` = 0.5 gives the old scores back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from rayworks.pipelines.corpus.language import batch_identifier
from rayworks.pipelines.corpus.step import Batch, add_scores, judge, scored_rows
from rayworks.pipelines.corpus.textview import TextView, views

INCONSISTENT = "ocr:inconsistent"
OCR_KEYS = ["segments", "numeric_ratio", "consistency"]


@dataclass(frozen=True)
class OCRQualityConfig:
    """OCRoscope-style consistency score (segment/window sizes are OCRoscope's).

    segment_words: 7 words per segment (OCRoscope); scripts without spaces (mean "word"
      longer than 15 characters) are cut into `segment_chars` = 20-character segments (ours).
    min_letter_ratio: 0.3; segments with at most this share of letters are counted as
      numeric (`ocr_numeric_ratio`) and not language-checked (OCRoscope).
    max_segments: 1000 segments, taken evenly spaced (OCRoscope samples 1000).
    window_words / min_window_share: 1000-word windows; document languages are those that
      win more than 20% of the windows (OCRoscope), plus the `lang` column's value if any.
    min_segment_confidence: 0.0 (OCRoscope: none); a segment agrees only if its top
      language is a document language with at least this py3langid probability (0.5 was
      our first rule; see the module docstring for why it is off).
    min_consistency: drop with `ocr:inconsistent` below this score (None: never).
    score_dropped: also score rows an earlier step dropped (`step.py`).
    """

    text_column: str = "text"
    lang_column: str = "lang"
    segment_words: int = 7
    segment_chars: int = 20
    min_letter_ratio: float = 0.3
    max_segments: int = 1000
    window_words: int = 1000
    min_window_share: float = 0.2
    min_segment_confidence: float = 0.0
    min_consistency: float | None = None
    score_dropped: bool = False


@dataclass
class _Plan:
    """One row's texts to classify: its checked segments and its windows."""

    segments: int
    numeric: int
    checked: list[str]
    windows: list[str]


def _plan(view: TextView, cfg: OCRQualityConfig) -> _Plan:
    """Cut `view`'s text into segments (sampled to `max_segments`), keep the ones with
    enough letters, and cut the windows that vote for the document languages."""
    words = view.words
    windows = [
        " ".join(words[i : i + cfg.window_words]) for i in range(0, len(words), cfg.window_words)
    ]
    if not words:
        return _Plan(0, 0, [], windows)
    if len(view.text) / len(words) > 15:  # no word spacing (CJK): character windows
        segments, letters, lengths = _char_segments("".join(words), cfg)
    else:
        segments, letters, lengths = _word_segments(view, cfg)
    checked = letters / np.maximum(1, lengths) > cfg.min_letter_ratio
    chosen = [segments[i] for i in np.flatnonzero(checked)]
    return _Plan(len(segments), len(segments) - len(chosen), chosen, windows)


def _char_segments(chars: str, cfg: OCRQualityConfig) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Sampled `segment_chars`-character segments, their letters and lengths."""
    k = cfg.segment_chars
    segments = [chars[i : i + k] for i in range(0, len(chars), k)]
    segments = [segments[i] for i in _sample(len(segments), cfg.max_segments)]
    letters = np.array([sum(map(str.isalpha, s)) for s in segments], dtype=np.int64)
    return segments, letters, np.fromiter(map(len, segments), np.int64, len(segments))


def _word_segments(view: TextView, cfg: OCRQualityConfig) -> tuple[_Lazy, np.ndarray, np.ndarray]:
    """Sampled `segment_words`-word segments (joined only when read), their letters and
    lengths, summed from per-word counts (each distinct word's letters counted once)."""
    words, k = view.words, cfg.segment_words
    starts = np.arange(0, len(words), k)
    picks = _sample(len(starts), cfg.max_segments)
    vocab_letters = np.fromiter(
        (sum(map(str.isalpha, w)) for w in view.vocab), np.int64, len(view.vocab)
    )
    letters = np.add.reduceat(vocab_letters[view.word_ids], starts)[picks]
    spaces = np.minimum(k, len(words) - starts) - 1  # a segment joins its words by " "
    lengths = (np.add.reduceat(view.word_lengths, starts) + spaces)[picks]
    return _Lazy(words, starts[picks], k), letters, lengths


class _Lazy:
    """Segment i = " ".join(words[starts[i] : starts[i] + k]), joined when read."""

    def __init__(self, words: list[str], starts: np.ndarray, k: int) -> None:
        self.words, self.starts, self.k = words, starts, k

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> str:
        start = int(self.starts[i])
        return " ".join(self.words[start : start + self.k])


def _sample(n: int, most: int) -> np.ndarray:
    """`most` evenly spaced indices of `n` (all when n <= most), as OCRoscope samples."""
    if n <= most:
        return np.arange(n)
    return np.linspace(0, n - 1, most).round().astype(np.int64)


def ocr_scores(
    plans: list[_Plan], doc_langs: list[str | None], cfg: OCRQualityConfig
) -> list[dict[str, float]]:
    """`segments`, `numeric_ratio` and `consistency` (share of checked segments in a
    document language; 1.0 when no segment can be checked) of each planned row, with one
    classifier call for all segments and windows of all rows."""
    identifier = batch_identifier()
    windows = iter(identifier.classify([w for p in plans for w in p.windows]))
    segments = iter(identifier.classify([s for p in plans for s in p.checked]))
    out = []
    for plan, doc_lang in zip(plans, doc_langs, strict=True):
        won = Counter(next(windows)[0] for _ in plan.windows)
        langs = {lang for lang, k in won.items() if k / len(plan.windows) > cfg.min_window_share}
        if doc_lang:
            langs.add(doc_lang)
        agree = 0
        for _ in plan.checked:
            lang, confidence = next(segments)
            agree += lang in langs and confidence >= cfg.min_segment_confidence
        out.append(
            {
                "segments": float(plan.segments),
                "numeric_ratio": plan.numeric / plan.segments if plan.segments else 0.0,
                "consistency": agree / len(plan.checked) if plan.checked else 1.0,
            }
        )
    return out


class OCRQuality:
    """Step `ocr` (stateful: holds the language model): columns `ocr_segments`,
    `ocr_numeric_ratio`, `ocr_consistency`; reason `ocr:inconsistent` when
    `min_consistency` is set and the consistency is below it."""

    name: ClassVar[str] = "ocr"

    def __init__(self, cfg: OCRQualityConfig | None = None) -> None:
        self.cfg = cfg or OCRQualityConfig()
        batch_identifier()  # here, in the worker, not on the first batch

    def verdict(self, s: dict[str, float]) -> str:
        limit = self.cfg.min_consistency
        return INCONSISTENT if limit is not None and s["consistency"] < limit else ""

    def __call__(self, batch: Batch) -> Batch:
        c = self.cfg
        rows = scored_rows(batch, c.score_dropped)
        langs = batch.get(c.lang_column)
        doc_langs = [str(langs[i]) if langs is not None and langs[i] else None for i in rows]
        plans = [_plan(v, c) for v in views(batch, c.text_column, rows)]
        scores = ocr_scores(plans, doc_langs, c)
        return judge(
            add_scores(batch, rows, scores, OCR_KEYS, self.name), rows, scores, self.verdict
        )
