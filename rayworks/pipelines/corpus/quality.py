"""Text-quality heuristics: Gopher quality and repetition, C4 line rules, OCR consistency.

Four steps, each scoring every row into `<step>_<score>` columns and dropping only by the
thresholds in its config (whose defaults are the papers' values, quoted per field):

- `GopherQuality` (step `gopher`): the quality filter of Rae et al. 2021, "Scaling Language
  Models: Methods, Analysis & Insights from Training Gopher", appendix A.1.1.
- `GopherRepetition` (step `repetition`): the repetition filter of the same appendix
  (table A1: duplicate lines/paragraphs and n-gram character fractions).
- `C4Quality` (step `c4`): the line and page rules of Raffel et al. 2020 (T5), section 2.2,
  as implemented in TFDS `c4_utils` (policy-line removal comes from that implementation).
- `OCRQuality` (step `ocr`): a language-consistency score in the spirit of PleIAs' OCRoscope
  (used to curate Common Corpus; `shared/methods/corpus.md` 1.3), with py3langid instead of
  cld2 (cld2 is not installed here).

Words are whitespace tokens: exact for the European languages of Common Corpus, wrong for
scripts written without spaces (Japanese, Chinese), which the Gopher word rules reject; the
Gopher paper applied them to English only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rayworks.pipelines.corpus.language import identify, load_identifier
from rayworks.pipelines.corpus.step import Batch, alive, drop

GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
"""Rae et al. 2021 A.1.1: keep documents with at least two of these English words."""

STOP_WORDS = {
    "en": GOPHER_STOP_WORDS,
    # Ours (not in any paper): the same idea for other Common Corpus languages, eight
    # very frequent function words each, so French/German/Spanish are not all rejected.
    "fr": ("le", "la", "les", "de", "et", "des", "que", "est"),
    "de": ("der", "die", "das", "und", "ist", "zu", "den", "nicht"),
    "es": ("el", "la", "los", "de", "y", "que", "en", "es"),
}


def _stat_columns(rows: list[dict[str, float]], prefix: str) -> Batch:
    """Score dicts (same keys) to `prefix_<key>` float columns."""
    keys = list(rows[0]) if rows else []
    return {f"{prefix}_{k}": np.asarray([r[k] for r in rows], dtype=np.float64) for k in keys}


def _apply(batch: Batch, scores: list[dict[str, float]], verdict, prefix: str) -> Batch:
    """Add the score columns and drop by `verdict(score)` on rows still alive."""
    out = {**batch, **_stat_columns(scores, prefix)}
    verdicts = [verdict(s) if a else "" for s, a in zip(scores, alive(batch), strict=True)]
    return drop(out, verdicts)


# --------------------------------------------------------------------------- Gopher quality


@dataclass(frozen=True)
class GopherQualityConfig:
    """Thresholds of Rae et al. 2021 A.1.1 (all defaults are the paper's).

    min_words / max_words: 50 and 100,000 words.
    min_mean_word_length / max_mean_word_length: 3 and 10 characters.
    max_hash_ratio / max_ellipsis_ratio: 0.1 "#" or ellipses ("..." or "…") per word.
    max_bullet_lines: 0.9 of lines may start with a bullet (•, -, *).
    max_ellipsis_lines: 0.3 of lines may end with an ellipsis.
    min_alpha_words: 0.8 of words must contain an alphabetic character.
    min_stop_words: 2 stop words of the row's language (`stop_words`; English is the
      paper's, the others ours); rows of a language without a list skip this rule.
    lang_column / default_language: where the row's language comes from, and the language
      assumed when the batch has no such column.
    """

    text_column: str = "text"
    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_hash_ratio: float = 0.1
    max_ellipsis_ratio: float = 0.1
    max_bullet_lines: float = 0.9
    max_ellipsis_lines: float = 0.3
    min_alpha_words: float = 0.8
    min_stop_words: int = 2
    stop_words: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(STOP_WORDS))
    lang_column: str = "lang"
    default_language: str = "en"


def gopher_scores(text: str, stop_words: tuple[str, ...] | None) -> dict[str, float]:
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


class GopherQuality:
    """Step `gopher`: columns `gopher_<stat>` for the stats of `gopher_scores`; reasons
    `gopher:min_words`, `gopher:max_words`, `gopher:mean_word_length`, `gopher:hash_ratio`,
    `gopher:ellipsis_ratio`, `gopher:bullet_lines`, `gopher:ellipsis_lines`,
    `gopher:alpha_words`, `gopher:stop_words` (checked in that order)."""

    name: ClassVar[str] = "gopher"
    stateful: ClassVar[bool] = False

    def __init__(self, cfg: GopherQualityConfig | None = None) -> None:
        self.cfg = cfg or GopherQualityConfig()

    def verdict(self, s: dict[str, float]) -> str:
        c = self.cfg
        rules = [
            ("min_words", s["words"] < c.min_words),
            ("max_words", s["words"] > c.max_words),
            (
                "mean_word_length",
                not c.min_mean_word_length <= s["mean_word_length"] <= c.max_mean_word_length,
            ),
            ("hash_ratio", s["hash_ratio"] > c.max_hash_ratio),
            ("ellipsis_ratio", s["ellipsis_ratio"] > c.max_ellipsis_ratio),
            ("bullet_lines", s["bullet_lines"] > c.max_bullet_lines),
            ("ellipsis_lines", s["ellipsis_lines"] > c.max_ellipsis_lines),
            ("alpha_words", s["alpha_words"] < c.min_alpha_words),
            ("stop_words", 0 <= s["stop_words"] < c.min_stop_words),
        ]
        return next((f"gopher:{rule}" for rule, failed in rules if failed), "")

    def __call__(self, batch: Batch) -> Batch:
        c = self.cfg
        langs = batch.get(c.lang_column, [c.default_language] * len(batch[c.text_column]))
        scores = [
            gopher_scores(str(t), c.stop_words.get(str(lang)))
            for t, lang in zip(batch[c.text_column], langs, strict=True)
        ]
        return _apply(batch, scores, self.verdict, self.name)


# ------------------------------------------------------------------------ Gopher repetition


@dataclass(frozen=True)
class GopherRepetitionConfig:
    """Thresholds of Rae et al. 2021 table A1 (defaults are the paper's).

    max_dup_line_frac / max_dup_para_frac: 0.30 of lines / paragraphs may be repeats.
    max_dup_line_char_frac / max_dup_para_char_frac: 0.20 of characters may be in repeats.
    max_top_ngram_char_frac: for n = 2, 3, 4, the most frequent n-gram may cover at most
      0.20, 0.18, 0.16 of the word characters.
    max_dup_ngram_char_frac: for n = 5..10, repeated n-grams may cover at most
      0.15, 0.14, 0.13, 0.12, 0.11, 0.10 of the word characters.
    """

    text_column: str = "text"
    max_dup_line_frac: float = 0.30
    max_dup_para_frac: float = 0.30
    max_dup_line_char_frac: float = 0.20
    max_dup_para_char_frac: float = 0.20
    max_top_ngram_char_frac: dict[int, float] = field(
        default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16}
    )
    max_dup_ngram_char_frac: dict[int, float] = field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    )


def _dup_fractions(parts: list[str]) -> tuple[float, float]:
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


def _top_ngram_frac(words: list[str], n: int, total: int) -> float:
    """Word characters in all occurrences of the most frequent n-gram (0 if none repeats)."""
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return 0.0
    gram, count = grams.most_common(1)[0]
    return sum(map(len, gram)) * count / total if count > 1 else 0.0


def _dup_ngram_frac(words: list[str], n: int, total: int) -> float:
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


def repetition_scores(text: str, top_ns: list[int], dup_ns: list[int]) -> dict[str, float]:
    """Gopher repetition statistics of `text`."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    words = text.split()
    total = max(1, sum(map(len, words)))
    s: dict[str, float] = {}
    s["dup_line_frac"], s["dup_line_char_frac"] = _dup_fractions(lines)
    s["dup_para_frac"], s["dup_para_char_frac"] = _dup_fractions(paras)
    for n in top_ns:
        s[f"top_{n}gram_char_frac"] = _top_ngram_frac(words, n, total)
    for n in dup_ns:
        s[f"dup_{n}gram_char_frac"] = _dup_ngram_frac(words, n, total)
    return s


class GopherRepetition:
    """Step `repetition`: columns `repetition_<stat>` (see `repetition_scores`); reasons
    `repetition:dup_line_frac`, `repetition:dup_para_frac`, `repetition:dup_line_char_frac`,
    `repetition:dup_para_char_frac`, `repetition:top_<n>gram_char_frac`,
    `repetition:dup_<n>gram_char_frac` (checked in that order)."""

    name: ClassVar[str] = "repetition"
    stateful: ClassVar[bool] = False

    def __init__(self, cfg: GopherRepetitionConfig | None = None) -> None:
        self.cfg = cfg or GopherRepetitionConfig()
        c = self.cfg
        self.limits = {
            "dup_line_frac": c.max_dup_line_frac,
            "dup_para_frac": c.max_dup_para_frac,
            "dup_line_char_frac": c.max_dup_line_char_frac,
            "dup_para_char_frac": c.max_dup_para_char_frac,
            **{f"top_{n}gram_char_frac": v for n, v in c.max_top_ngram_char_frac.items()},
            **{f"dup_{n}gram_char_frac": v for n, v in c.max_dup_ngram_char_frac.items()},
        }

    def verdict(self, s: dict[str, float]) -> str:
        return next((f"repetition:{k}" for k, v in self.limits.items() if s[k] > v), "")

    def __call__(self, batch: Batch) -> Batch:
        c = self.cfg
        top_ns, dup_ns = list(c.max_top_ngram_char_frac), list(c.max_dup_ngram_char_frac)
        scores = [repetition_scores(str(t), top_ns, dup_ns) for t in batch[c.text_column]]
        return _apply(batch, scores, self.verdict, self.name)


# ------------------------------------------------------------------------------------ C4


@dataclass(frozen=True)
class C4QualityConfig:
    """Rules of Raffel et al. 2020 section 2.2 (defaults are the paper's / TFDS's).

    Line rules (a failing line is removed from the text when `rewrite` is true):
      terminal_punctuation: a line must end with one of these (".", "!", "?", '"').
      min_words_per_line: 3.
      drop "javascript" lines and, from TFDS `c4_utils`, cookie/terms/privacy policy lines.
    Page rules (reasons): `c4:lorem_ipsum` ("lorem ipsum" anywhere), `c4:curly_bracket`
      ("{" anywhere; code-like pages), `c4:min_sentences` (fewer than 5 sentences in the
      kept lines; sentences are split on ., ! and ? followed by space or end).
    Skipped on purpose: the "bad words" page rule (the `toxicity` step scores it), the
      three-sentence-span dedup (the dedup step), the langdetect English filter (the
      `language` step) and TFDS's citation "[1]" removal.
    """

    text_column: str = "text"
    terminal_punctuation: tuple[str, ...] = (".", "!", "?", '"')
    min_words_per_line: int = 3
    min_sentences: int = 5
    policy_substrings: tuple[str, ...] = (
        "terms of use",
        "privacy policy",
        "cookie policy",
        "uses cookies",
        "use of cookies",
        "use cookies",
    )
    drop_lorem_ipsum: bool = True
    drop_curly_bracket: bool = True
    rewrite: bool = True


_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")


def c4_clean(text: str, cfg: C4QualityConfig) -> tuple[str, dict[str, float]]:
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
        "sentences": float(len(_SENTENCE_END.findall(clean))),
        "lorem_ipsum": float("lorem ipsum" in low),
        "curly_bracket": float("{" in text),
    }


class C4Quality:
    """Step `c4`: columns `c4_<stat>` (see `c4_clean`); rewrites the text column to the kept
    lines when `rewrite`; reasons `c4:lorem_ipsum`, `c4:curly_bracket`, `c4:min_sentences`."""

    name: ClassVar[str] = "c4"
    stateful: ClassVar[bool] = False

    def __init__(self, cfg: C4QualityConfig | None = None) -> None:
        self.cfg = cfg or C4QualityConfig()

    def verdict(self, s: dict[str, float]) -> str:
        c = self.cfg
        if c.drop_lorem_ipsum and s["lorem_ipsum"]:
            return "c4:lorem_ipsum"
        if c.drop_curly_bracket and s["curly_bracket"]:
            return "c4:curly_bracket"
        return "c4:min_sentences" if s["sentences"] < c.min_sentences else ""

    def __call__(self, batch: Batch) -> Batch:
        column = self.cfg.text_column
        cleaned = [c4_clean(str(t), self.cfg) for t in batch[column]]
        out = _apply(batch, [s for _, s in cleaned], self.verdict, self.name)
        if self.cfg.rewrite:  # dropped rows keep their original text for the quarantine
            texts = [
                clean if keep else str(t)
                for (clean, _), t, keep in zip(cleaned, batch[column], alive(out), strict=True)
            ]
            out[column] = np.asarray(texts, dtype=object)
        return out


# ----------------------------------------------------------------------------------- OCR


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
    min_segment_confidence: 0.5 (ours): a segment agrees only if its top language is a
      document language with at least this py3langid probability.
    min_consistency: drop with `ocr:inconsistent` below this score (None: never).
    """

    text_column: str = "text"
    lang_column: str = "lang"
    segment_words: int = 7
    segment_chars: int = 20
    min_letter_ratio: float = 0.3
    max_segments: int = 1000
    window_words: int = 1000
    min_window_share: float = 0.2
    min_segment_confidence: float = 0.5
    min_consistency: float | None = None


def _segments(text: str, cfg: OCRQualityConfig) -> list[str]:
    words = text.split()
    if words and len(text) / len(words) > 15:  # no word spacing (CJK): character windows
        chars = "".join(words)
        return [chars[i : i + cfg.segment_chars] for i in range(0, len(chars), cfg.segment_chars)]
    n = cfg.segment_words
    return [" ".join(words[i : i + n]) for i in range(0, len(words), n)]


def ocr_scores(text: str, doc_lang: str | None, cfg: OCRQualityConfig) -> dict[str, float]:
    """`segments`, `numeric_ratio` and `consistency` (share of language-checked segments
    whose language is a document language; 1.0 when no segment can be checked)."""
    identifier = load_identifier()
    segments = _segments(text, cfg)
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
    votes = Counter(identify(w, identifier)[0] for w in windows)
    doc_langs = {lang for lang, k in votes.items() if k / len(windows) > cfg.min_window_share}
    if doc_lang:
        doc_langs.add(doc_lang)
    agree = 0
    for segment in wordy:
        lang, confidence = identify(segment, identifier)
        agree += lang in doc_langs and confidence >= cfg.min_segment_confidence
    return {
        "segments": float(len(segments)),
        "numeric_ratio": 1 - len(wordy) / len(segments) if segments else 0.0,
        "consistency": agree / len(wordy) if wordy else 1.0,
    }


class OCRQuality:
    """Step `ocr` (stateful: holds the py3langid model): columns `ocr_segments`,
    `ocr_numeric_ratio`, `ocr_consistency`; reason `ocr:inconsistent` when
    `min_consistency` is set and the consistency is below it."""

    name: ClassVar[str] = "ocr"
    stateful: ClassVar[bool] = True

    def __init__(self, cfg: OCRQualityConfig | None = None) -> None:
        self.cfg = cfg or OCRQualityConfig()
        self.identifier = load_identifier()  # loaded here, in the actor, not per batch

    def verdict(self, s: dict[str, float]) -> str:
        limit = self.cfg.min_consistency
        return "ocr:inconsistent" if limit is not None and s["consistency"] < limit else ""

    def __call__(self, batch: Batch) -> Batch:
        c = self.cfg
        texts = batch[c.text_column]
        langs = batch.get(c.lang_column, [None] * len(texts))
        scores = [
            ocr_scores(str(t), str(lang) if lang else None, c)
            for t, lang in zip(texts, langs, strict=True)
        ]
        return _apply(batch, scores, self.verdict, self.name)
