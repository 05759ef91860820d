"""Language identification with `py3langid`, whose model ships inside the wheel.

Nothing may download at run time (issue 6), which rules out fastText lid.176 / GlotLID (the
datatrove and NeMo Curator defaults); `py3langid` (a maintained fork of langid.py, ~97
languages, numpy only) has its model in `py3langid/data/model.npz.xz`
(`shared/methods/corpus.md` 4.1). We load it with `norm_probs=True`, so the confidence is a
softmax probability in [0, 1] (the fork scales the scores by 1/sqrt(bytes) before the
softmax to keep it calibrated across lengths) and thresholds mean the same for all texts.

Step `language` (stateful: it holds the identifier, so it runs in an actor pool) adds the
columns `lang` (ISO 639-1 code; "und" for text without any feature, e.g. empty) and
`lang_confidence`, for every row. Very short texts (a title, a few words) are classified
too, but their label is unreliable: the confidence is then usually low, so filter on
`lang_confidence` rather than trusting `lang` alone. Verdicts, both off by default because
Common Corpus keeps every language and dolma-style scores are filtered later:
- `language:low_confidence` when `lang_confidence < min_confidence` (datatrove's
  `LanguageFilter` uses 0.65 with fastText; py3langid's probabilities are not the same scale);
- `language:not_allowed` when `allowed` is set and `lang` is not in it.
Low confidence is checked first: an unsure label should not be reported as a wrong language.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from rayworks.pipelines.corpus.step import Batch, alive, drop

LOW_CONFIDENCE = "language:low_confidence"
NOT_ALLOWED = "language:not_allowed"
UNDETERMINED = "und"


@lru_cache(maxsize=1)
def load_identifier() -> LanguageIdentifier:
    """The bundled py3langid model in normalized-probability mode, loaded once per process
    (about a second) and shared by every step of that process (read-only use only)."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def identify(text: str, identifier: LanguageIdentifier | None = None) -> tuple[str, float]:
    """(language, confidence in [0, 1]) of `text`; ("und", 0.0) when it has no letters or
    digits at all (the model would otherwise return a uniform, meaningless guess)."""
    if not any(ch.isalnum() for ch in text):
        return UNDETERMINED, 0.0
    lang, confidence = (identifier or load_identifier()).classify(text)
    return str(lang), float(confidence)


@dataclass(frozen=True)
class LanguageIdConfig:
    """text_column: column to classify.
    allowed: ISO 639-1 codes to keep (None: keep every language, as Common Corpus does).
    min_confidence: drop rows whose confidence is below this (0.0: never).
    """

    text_column: str = "text"
    allowed: tuple[str, ...] | None = None
    min_confidence: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(
                f"LanguageIdConfig.min_confidence: {self.min_confidence} not in [0, 1]"
            )
        if self.allowed is not None:
            unknown = set(self.allowed) - set(load_identifier().labels)
            if unknown:
                raise ValueError(f"LanguageIdConfig.allowed: unknown to py3langid: {unknown}")


class LanguageId:
    """Step `language`: columns `lang`, `lang_confidence`; reasons `language:low_confidence`,
    `language:not_allowed`."""

    name: ClassVar[str] = "language"
    stateful: ClassVar[bool] = True

    def __init__(self, cfg: LanguageIdConfig | None = None) -> None:
        self.cfg = cfg or LanguageIdConfig()
        self.identifier = load_identifier()

    def verdict(self, lang: str, confidence: float) -> str:
        if confidence < self.cfg.min_confidence:
            return LOW_CONFIDENCE
        if self.cfg.allowed is not None and lang not in self.cfg.allowed:
            return NOT_ALLOWED
        return ""

    def __call__(self, batch: Batch) -> Batch:
        results = [identify(str(t), self.identifier) for t in batch[self.cfg.text_column]]
        out = {
            **batch,
            "lang": np.asarray([lang for lang, _ in results], dtype=object),
            "lang_confidence": np.asarray([c for _, c in results], dtype=np.float64),
        }
        verdicts = [
            self.verdict(lang, c) if keep else ""
            for (lang, c), keep in zip(results, alive(batch), strict=True)
        ]
        return drop(out, verdicts)
