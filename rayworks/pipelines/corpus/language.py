"""Language identification with `py3langid`, whose model ships inside the wheel.

Nothing may download at run time, which rules out fastText lid.176 / GlotLID (the
datatrove and NeMo Curator defaults); `py3langid` (a maintained fork of langid.py, ~97
languages, numpy only) has its model in `py3langid/data/model.npz.xz`
inside the installed package. We load it with `norm_probs=True`, so the confidence is a
softmax probability in [0, 1] (the fork scales the scores by 1/sqrt(bytes) before the
softmax to keep it calibrated across lengths) and thresholds mean the same for all texts.

Step `language` (it holds the identifier, loaded once when the step is built) adds the
columns `lang` (ISO 639-1 code; "und" for text without any feature, e.g. empty) and
`lang_confidence`, for every row. Very short texts (a title, a few words) are classified
too, but their label is unreliable: the confidence is then usually low, so filter on
`lang_confidence` rather than trusting `lang` alone. Verdicts, both off by default because
Common Corpus keeps every language and dolma-style scores are filtered later:
- `language:low_confidence` when `lang_confidence < min_confidence` (datatrove's
  `LanguageFilter` uses 0.65 with fastText; py3langid's probabilities are not the same scale);
- `language:not_allowed` when `allowed` is set and `lang` is not in it.
Low confidence is checked first: an unsure label should not be reported as a wrong language.

Speed: the step classifies all live rows of a batch in one vectorized call
(`langid_batch.BatchLanguageId`, the same labels as py3langid's own `classify` and the same
confidences to float32 rounding, ~2.4x faster on a 64 KB document); rows an earlier step
dropped are not classified (`lang` None, `lang_confidence` NaN) unless `score_dropped`.
`max_chars` classifies only a prefix of each text (off by default: whole texts are cheap
now; on the local corpus of 2,125 documents a 4,096-character prefix gave the whole-text
label on 99.5% of them, 99.1% of the 1,205 longer than the prefix; 1,024: 99.3% / 99.2%).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

import numpy as np
from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

from rayworks.core.build_cache import digest, locked_build
from rayworks.pipelines.corpus.langid_batch import TABLES_FORMAT, BatchLanguageId
from rayworks.pipelines.corpus.langid_batch import UNDETERMINED as UNDETERMINED
from rayworks.pipelines.corpus.step import Batch, judge, scored_rows, spread

LOW_CONFIDENCE = "language:low_confidence"
NOT_ALLOWED = "language:not_allowed"


_UNPACKED: list[Path] = []
"""The saved classifier tables this process maps instead of loading the model (`use_unpacked`)."""


def unpack_model(folder: Path) -> Path:
    """The vectorized classifier's tables of py3langid's bundled model
    (`BatchLanguageId.save`), built once into `folder` (a build cache: one folder per
    py3langid version, model size and table layout) under a lock; returns their folder.

    Why: loading the model costs ~0.9 s (LZMA) and then ~135 MB of fresh arrays per
    process, seconds on a machine whose fresh memory is slow (docs/corpus.md, "Speed");
    mapped (`use_unpacked`), the tables cost milliseconds and every process of the machine
    reads the same pages of the page cache."""
    bundled = MODEL_DIR / MODEL_FILE
    key = digest(f"{version('py3langid')}:{bundled.stat().st_size}:{TABLES_FORMAT}")
    target = Path(folder) / f"tables-{key}"

    def build() -> None:  # meta.json, written last, marks the folder complete
        BatchLanguageId.from_identifier(bundled_identifier()).save(target)

    return locked_build(target, target / "meta.json", build)


def use_unpacked(path: Path) -> None:
    """Map the tables in `path` (`unpack_model`) in this process from now on."""
    _UNPACKED[:] = [Path(path)]
    batch_identifier.cache_clear()


@lru_cache(maxsize=1)
def bundled_identifier() -> LanguageIdentifier:
    """The bundled py3langid model in normalized-probability mode, loaded once per process
    (read-only use only): the reference the vectorized classifier is built from and
    checked against."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@lru_cache(maxsize=2)
def batch_identifier(identifier: LanguageIdentifier | None = None) -> BatchLanguageId:
    """The vectorized classifier, built once per process: over `identifier`'s tables, or
    by default mapped from the tables `use_unpacked` named, else over the bundled model."""
    if identifier is None and _UNPACKED:
        return BatchLanguageId.load(_UNPACKED[0])
    return BatchLanguageId.from_identifier(identifier or bundled_identifier())


def identify(text: str, classifier: BatchLanguageId | None = None) -> tuple[str, float]:
    """(language, confidence in [0, 1]) of `text`; ("und", 0.0) when it has no letters or
    digits at all (the model would otherwise return a uniform, meaningless guess)."""
    return identify_many([text], classifier)[0]


def identify_many(
    texts: Sequence[str], classifier: BatchLanguageId | None = None
) -> list[tuple[str, float]]:
    """`identify` for many texts in one vectorized call (default: `batch_identifier()`)."""
    return (classifier or batch_identifier()).classify(texts)


@dataclass(frozen=True)
class LanguageIdConfig:
    """text_column: column to classify.
    allowed: ISO 639-1 codes to keep (None: keep every language, as Common Corpus does).
    min_confidence: drop rows whose confidence is below this (0.0: never).
    max_chars: classify only the first `max_chars` characters (None: the whole text).
    score_dropped: also classify rows an earlier step dropped (`step.py`).
    """

    text_column: str = "text"
    allowed: tuple[str, ...] | None = None
    min_confidence: float = 0.0
    max_chars: int | None = None
    score_dropped: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(
                f"LanguageIdConfig.min_confidence: {self.min_confidence} not in [0, 1]"
            )
        if self.max_chars is not None and self.max_chars < 1:
            raise ValueError(f"LanguageIdConfig.max_chars: {self.max_chars} < 1")
        if self.allowed is not None:
            unknown = set(self.allowed) - set(batch_identifier().labels)
            if unknown:
                raise ValueError(f"LanguageIdConfig.allowed: unknown to py3langid: {unknown}")


class LanguageId:
    """Step `language`: columns `lang`, `lang_confidence`; reasons `language:low_confidence`,
    `language:not_allowed`."""

    name: ClassVar[str] = "language"

    def __init__(self, cfg: LanguageIdConfig | None = None) -> None:
        self.cfg = cfg or LanguageIdConfig()
        self.identifier = batch_identifier()  # here, in the worker, not on the first batch

    def verdict(self, lang: str, confidence: float) -> str:
        if confidence < self.cfg.min_confidence:
            return LOW_CONFIDENCE
        if self.cfg.allowed is not None and lang not in self.cfg.allowed:
            return NOT_ALLOWED
        return ""

    def __call__(self, batch: Batch) -> Batch:
        c = self.cfg
        rows = scored_rows(batch, c.score_dropped)
        texts = [str(batch[c.text_column][i])[: c.max_chars] for i in rows]
        results = identify_many(texts, self.identifier)
        n = len(batch[c.text_column])
        out = {
            **batch,
            "lang": spread(np.asarray([lang for lang, _ in results], dtype=object), rows, n),
            "lang_confidence": spread(
                np.asarray([conf for _, conf in results], dtype=np.float64), rows, n
            ),
        }
        return judge(out, rows, results, lambda r: self.verdict(*r))
