"""Toxicity scores from offline word lists shipped in this package.

Common Corpus scores toxicity with Celadon (a 141M DeBERTa with five heads, model card
`PleIAs/celadon` on the Hugging Face Hub), which needs a download and `trust_remote_code`;
we know of no offline multilingual toxicity model (`detoxify` downloads its checkpoints
too). So, like C4's "bad words" page rule and dolma's `naughty_words_en.txt`, we count
matches of short word lists, but as a *score* (kept as columns and filtered in a later mix
step, as dolma keeps scores apart from the documents), not a boolean drop.

Word lists: `wordlists/<lang>.txt` next to this module, one entry per line (a word or a
short phrase; `#` starts a comment), written for rayworks and short on purpose: clearly
offensive obscenities and slurs only, no words with a common innocent meaning in another
covered language (e.g. no French "bite", no English "retard"). Languages covered: English
(en), French (fr), German (de), Spanish (es). Coverage of inflections is partial; this is a
coarse signal, not a classifier.

Matching is whole-word (Unicode `\\b` boundaries), case-insensitive. The list is chosen by
the row's `lang` column (from the `language` step); rows of a language without a list, or
batches without a `lang` column, are matched against all lists together.

Columns: `toxicity_hits` (matches), `toxicity_score` (matches per 1000 whitespace words,
counted by the batch's shared text view, `textview.py`), for the live rows (rows an
earlier step dropped get null / NaN unless `score_dropped`; see `step.py`).
Reason `toxicity:words` when `max_score` is set and the score exceeds it (off by default;
`max_score=0.0` reproduces C4's "drop any page with a listed word").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import ClassVar

import numpy as np

from rayworks.pipelines.corpus.step import Batch, add_scores, judge, scored_rows
from rayworks.pipelines.corpus.textview import TextView, views

WORDS = "toxicity:words"
ALL = "*"


def available_languages() -> tuple[str, ...]:
    """Languages with a shipped word list, sorted."""
    folder = resources.files("rayworks.pipelines.corpus") / "wordlists"
    return tuple(sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt")))


def load_wordlist(lang: str) -> list[str]:
    """Entries of `wordlists/<lang>.txt` (lower-cased, comments and blanks skipped)."""
    path = resources.files("rayworks.pipelines.corpus") / "wordlists" / f"{lang}.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.strip().lower() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def compile_wordlist(words: list[str]) -> re.Pattern[str]:
    """One alternation, longest entries first (so "fils de pute" wins over "pute"), with
    inner spaces matching any whitespace run; whole words, case-insensitive.

    Written so that `re` scans fast (`dispatch_pattern`) when it can be: the same
    matches as `plain_pattern`, which `re` tries at every position of the text (a pattern
    that starts with `\\b` has no first character to look for) with every entry at every
    word start, ~100 ns per character.
    """
    return dispatch_pattern(words) or plain_pattern(words)


def _ordered(words: list[str]) -> list[list[str]]:
    """The entries, longest first, as tokens."""
    return [w.split() for w in sorted(set(words), key=len, reverse=True)]


def plain_pattern(words: list[str]) -> re.Pattern[str]:
    """The word list as `\\b(?:entry|entry|...)\\b`, case-insensitive."""
    alternatives = [r"\s+".join(map(re.escape, tokens)) for tokens in _ordered(words)]
    return re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE)


def dispatch_pattern(words: list[str]) -> re.Pattern[str] | None:
    """`plain_pattern` as a class of every entry's first letter (all the characters that
    letter matches case-insensitively), then the word-start test (`(?<!\\w.)` after a word
    character is `\\b` before it), then the entries of that first letter only, in their
    order: `re` jumps from one character of the class to the next. None (use the plain
    pattern) when a first letter is not a word character or two letters' classes share a
    character (a character would then choose between entries of two letters, in another
    order than the plain alternation)."""
    groups: dict[str, list[str]] = {}
    for tokens in _ordered(words):
        rest = re.escape(tokens[0][1:]) + "".join(r"\s+" + re.escape(t) for t in tokens[1:])
        groups.setdefault(tokens[0][0], []).append(rest)
    classes = _case_classes(groups)
    union = "".join(classes.values())
    if len(set(union)) != len(union) or not all(re.fullmatch(r"\w", c) for c in union):
        return None

    def one_of(chars: str) -> str:
        return "[" + "".join(map(re.escape, chars)) + "]"

    branches = "|".join(
        f"(?<={one_of(classes[first])})(?i:{'|'.join(rests)})" for first, rests in groups.items()
    )
    return re.compile(rf"{one_of(union)}(?<!\w[\s\S])(?:{branches})\b")


_CASE_CLASSES: dict[str, str] = {}


def _case_classes(letters: Iterable[str]) -> dict[str, str]:
    """Every character that each letter matches under `re.IGNORECASE` ("k": "Kk" and the
    Kelvin sign), found by `re` itself on a string of all code points (one pass for the
    letters not seen before in this process)."""
    letters = list(letters)
    missing = sorted(set(letters) - _CASE_CLASSES.keys())
    if missing:
        every = np.arange(0x110000, dtype=np.uint32).tobytes()
        chars = every.decode("utf-32-le", "surrogatepass")
        found = re.findall("[" + "".join(map(re.escape, missing)) + "]", chars, re.IGNORECASE)
        for letter in missing:
            same = (c for c in found if re.fullmatch(re.escape(letter), c, re.IGNORECASE))
            _CASE_CLASSES[letter] = "".join(same)
    return {letter: _CASE_CLASSES[letter] for letter in letters}


@dataclass(frozen=True)
class ToxicityConfig:
    """text_column / lang_column: the text and its language (from the `language` step).
    languages: word lists to load (None: every shipped list, see `available_languages`).
    max_score: drop above this many hits per 1000 words (None: never; 0.0 is C4's rule).
    score_dropped: also score rows an earlier step dropped (`step.py`).
    """

    text_column: str = "text"
    lang_column: str = "lang"
    languages: tuple[str, ...] | None = None
    max_score: float | None = None
    score_dropped: bool = False


class Toxicity:
    """Step `toxicity` (stateful: compiled word lists): columns `toxicity_hits`,
    `toxicity_score`; reason `toxicity:words`."""

    name: ClassVar[str] = "toxicity"

    def __init__(self, cfg: ToxicityConfig | None = None) -> None:
        self.cfg = cfg or ToxicityConfig()
        shipped = available_languages()
        langs = self.cfg.languages or shipped
        missing = sorted(set(langs) - set(shipped))
        if missing:
            raise ValueError(f"ToxicityConfig.languages: no word list for {missing} ({shipped})")
        lists = {lang: load_wordlist(lang) for lang in langs}
        _case_classes({w[0] for words in lists.values() for w in words})  # one pass for all
        self.patterns = {lang: compile_wordlist(words) for lang, words in lists.items()}
        self.patterns[ALL] = compile_wordlist([w for words in lists.values() for w in words])

    def score(self, text: str | TextView, lang: str | None) -> tuple[int, float]:
        """(hits, hits per 1000 words) of a text with the list of `lang` (or all lists)."""
        view = text if isinstance(text, TextView) else TextView(text)
        pattern = self.patterns.get(lang or ALL, self.patterns[ALL])
        hits = len(pattern.findall(view.text))
        return hits, 1000.0 * hits / max(1, len(view.words))

    def __call__(self, batch: Batch) -> Batch:
        c = self.cfg
        rows = scored_rows(batch, c.score_dropped)
        langs = batch.get(c.lang_column)
        scores = [
            self.score(v, langs[i] if langs is not None else None)
            for v, i in zip(views(batch, c.text_column, rows), rows, strict=True)
        ]
        out = add_scores(
            batch, rows, [{"hits": h} for h, _ in scores], ["hits"], self.name, dtype=np.int64
        )
        out = add_scores(out, rows, [{"score": s} for _, s in scores], ["score"], self.name)
        limit = c.max_score
        return judge(
            out, rows, scores, lambda hs: WORDS if limit is not None and hs[1] > limit else ""
        )
