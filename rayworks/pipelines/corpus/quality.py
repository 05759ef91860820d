"""Text-quality heuristics: Gopher quality and repetition, C4 line rules (OCR consistency:
`ocr.py`, re-exported here).

Three steps, each scoring the live rows (`step.py`) into `<step>_<score>` columns and
dropping only by the thresholds in its config (whose defaults are the papers' values,
quoted per field):

- `GopherQuality` (step `gopher`): the quality filter of Rae et al. 2021, "Scaling Language
  Models: Methods, Analysis & Insights from Training Gopher", appendix A.1.1.
- `GopherRepetition` (step `repetition`): the repetition filter of the same appendix
  (table A1: duplicate lines/paragraphs and n-gram character fractions).
- `C4Quality` (step `c4`): the line and page rules of Raffel et al. 2020 (T5), section 2.2,
  as implemented in TFDS `c4_utils` (policy-line removal comes from that implementation).

Words are whitespace tokens: exact for the European languages of Common Corpus, wrong for
scripts written without spaces (Japanese, Chinese), which the Gopher word rules reject; the
Gopher paper applied them to English only. All three read the batch's shared text view
(`textview.py`): one split into words and lines per row. Gopher's per-word rules run once
per distinct word, weighted by its count, and the repetition n-gram statistics come from
exact n-gram ids (numpy) rather than nine passes over tuples of words; the scores are the
same numbers (`tests/pipelines/corpus/test_step_equivalence.py`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rayworks.pipelines.corpus.ocr import OCRQuality as OCRQuality
from rayworks.pipelines.corpus.ocr import OCRQualityConfig as OCRQualityConfig
from rayworks.pipelines.corpus.step import Batch, add_scores, alive, judge, scored_rows
from rayworks.pipelines.corpus.textview import TextView, views

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


def _apply(
    batch: Batch,
    column: str,
    score_dropped: bool,
    score: Callable[[TextView, int], dict[str, float]],
    keys: list[str],
    verdict: Callable[[dict[str, float]], str],
    prefix: str,
) -> Batch:
    """Score the scored rows' views with `score(view, row)`, add the float columns `keys`,
    and drop by `verdict(scores)` on the rows still alive."""
    rows = scored_rows(batch, score_dropped)
    scores = [score(v, i) for v, i in zip(views(batch, column, rows), rows, strict=True)]
    return judge(add_scores(batch, rows, scores, keys, prefix), rows, scores, verdict)


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
    score_dropped: also score rows an earlier step dropped (`step.py`).
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
    score_dropped: bool = False


GOPHER_KEYS = [
    "words",
    "mean_word_length",
    "hash_ratio",
    "ellipsis_ratio",
    "bullet_lines",
    "ellipsis_lines",
    "alpha_words",
    "stop_words",
]
_PUNCT = ".,;:!?\"'()[]{}«»“”"


def gopher_scores(view: TextView, stop_words: tuple[str, ...] | None) -> dict[str, float]:
    """Gopher quality statistics of `view`'s text (stop_words None: `stop_words` = -1, not
    scored). Per-word rules are evaluated once per distinct word and weighted by counts."""
    text, counts = view.text, view.word_counts
    n = len(view.words) or 1
    stripped = [w.strip(_PUNCT) for w in view.vocab]
    lengths = np.fromiter(map(len, stripped), np.int64, len(stripped))
    nonempty = lengths > 0
    n_nonempty = int(counts[nonempty].sum())
    has_alpha = np.fromiter((any(map(str.isalpha, w)) for w in view.vocab), bool, len(counts))
    lowered = {w.lower() for w in stripped}
    lines = view.lines  # stripped: same first/last character as lstrip()/rstrip()
    n_lines = len(lines) or 1
    return {
        "words": float(len(view.words)),
        "mean_word_length": int((lengths * counts)[nonempty].sum()) / n_nonempty
        if n_nonempty
        else 0.0,
        "hash_ratio": text.count("#") / n,
        "ellipsis_ratio": (text.count("...") + text.count("…")) / n,
        "bullet_lines": sum(line.startswith(("•", "-", "*")) for line in lines) / n_lines,
        "ellipsis_lines": sum(line.endswith(("...", "…")) for line in lines) / n_lines,
        "alpha_words": int(counts[has_alpha].sum()) / n,
        "stop_words": -1.0 if stop_words is None else float(sum(w in lowered for w in stop_words)),
    }


class GopherQuality:
    """Step `gopher`: columns `gopher_<stat>` for the stats of `gopher_scores`; reasons
    `gopher:min_words`, `gopher:max_words`, `gopher:mean_word_length`, `gopher:hash_ratio`,
    `gopher:ellipsis_ratio`, `gopher:bullet_lines`, `gopher:ellipsis_lines`,
    `gopher:alpha_words`, `gopher:stop_words` (checked in that order)."""

    name: ClassVar[str] = "gopher"

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

        def score(view: TextView, row: int) -> dict[str, float]:
            return gopher_scores(view, c.stop_words.get(str(langs[row])))

        return _apply(
            batch, c.text_column, c.score_dropped, score, GOPHER_KEYS, self.verdict, self.name
        )


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
    score_dropped: also score rows an earlier step dropped (`step.py`).
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
    score_dropped: bool = False


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


def _top_ngram_frac(view: TextView, n: int, total: int) -> float:
    """Word characters in all occurrences of the most frequent n-gram (0 if none repeats);
    of equally frequent n-grams the first to appear, as `Counter.most_common`."""
    ids = view.ngram_ids(n)
    if not len(ids):
        return 0.0
    counts = np.bincount(ids)
    best = int(counts.argmax())  # ids number n-grams in order of first appearance
    if counts[best] <= 1:
        return 0.0
    start = int(np.argmax(ids == best))
    return int(view.word_lengths[start : start + n].sum()) * int(counts[best]) / total


def _dup_ngram_frac(view: TextView, n: int, total: int) -> float:
    """Word characters covered by n-grams that repeat an earlier n-gram (each word counted
    once, however many repeated n-grams overlap it)."""
    ids = view.ngram_ids(n)
    if not len(ids):
        return 0.0
    new = ids > np.maximum.accumulate(np.r_[-1, ids[:-1]])  # first appearance of its id
    starts = np.flatnonzero(~new)
    m = len(view.words)
    depth = np.bincount(starts, minlength=m + 1) - np.bincount(starts + n, minlength=m + 1)
    covered = np.cumsum(depth[:m]) > 0
    return int(view.word_lengths[covered].sum()) / total


def repetition_scores(view: TextView, top_ns: list[int], dup_ns: list[int]) -> dict[str, float]:
    """Gopher repetition statistics of `view`'s text."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", view.text) if p.strip()]
    total = max(1, int(view.word_lengths.sum()))
    s: dict[str, float] = {}
    s["dup_line_frac"], s["dup_line_char_frac"] = _dup_fractions(view.lines)
    s["dup_para_frac"], s["dup_para_char_frac"] = _dup_fractions(paras)
    for n in top_ns:
        s[f"top_{n}gram_char_frac"] = _top_ngram_frac(view, n, total)
    for n in dup_ns:
        s[f"dup_{n}gram_char_frac"] = _dup_ngram_frac(view, n, total)
    return s


class GopherRepetition:
    """Step `repetition`: columns `repetition_<stat>` (see `repetition_scores`); reasons
    `repetition:dup_line_frac`, `repetition:dup_para_frac`, `repetition:dup_line_char_frac`,
    `repetition:dup_para_char_frac`, `repetition:top_<n>gram_char_frac`,
    `repetition:dup_<n>gram_char_frac` (checked in that order)."""

    name: ClassVar[str] = "repetition"

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

        def score(view: TextView, row: int) -> dict[str, float]:
            return repetition_scores(view, top_ns, dup_ns)

        keys = [
            "dup_line_frac",
            "dup_line_char_frac",
            "dup_para_frac",
            "dup_para_char_frac",
            *(f"top_{n}gram_char_frac" for n in top_ns),
            *(f"dup_{n}gram_char_frac" for n in dup_ns),
        ]
        return _apply(batch, c.text_column, c.score_dropped, score, keys, self.verdict, self.name)


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
    score_dropped: also score rows an earlier step dropped (`step.py`; their text is
      never rewritten).
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
    score_dropped: bool = False


_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")


C4_KEYS = [
    "lines_kept_frac",
    "lines_no_terminal_punct",
    "lines_short",
    "lines_javascript",
    "lines_policy",
    "sentences",
    "lorem_ipsum",
    "curly_bracket",
]


def c4_clean(view: TextView, cfg: C4QualityConfig) -> tuple[str, dict[str, float]]:
    """The kept lines of `view`'s text joined by "\\n", and the C4 statistics."""
    kept, removed = [], Counter[str]()
    text, lines = view.text, view.lines
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
        c = self.cfg
        rows = scored_rows(batch, c.score_dropped)
        cleaned = [c4_clean(v, c) for v in views(batch, c.text_column, rows)]
        scores = [s for _, s in cleaned]
        out = judge(add_scores(batch, rows, scores, C4_KEYS, self.name), rows, scores, self.verdict)
        if c.rewrite:  # dropped rows keep their original text for the quarantine
            texts = np.array(batch[c.text_column], dtype=object)
            keep = alive(out)
            for i, (clean, _) in zip(rows, cleaned, strict=True):
                if keep[i] and clean != texts[i]:  # unchanged text keeps its cached view
                    texts[i] = clean
            out[c.text_column] = texts
        return out
