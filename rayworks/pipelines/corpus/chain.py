"""The chain of scoring steps: every step of `corpus/`, configured from one `CorpusConfig`,
run in order over a batch (pure Python, no Ray: `score_unit.py` runs it in the scoring
actors, under the time budget of `guard.py`).

Each step follows `step.py`. The chain gives each batch a shared text view (`textview.py`:
words, lines, word ids and character counts of each row, built on first use and reused
by every later step) and removes it before the batch leaves. It also times each step, so
a run can show where its time went (the datasheet's per-step profile).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rayworks.pipelines.corpus import textview
from rayworks.pipelines.corpus.code_quality import CodeQuality, CodeQualityConfig
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.language import (
    LanguageId,
    LanguageIdConfig,
    unpack_model,
    use_unpacked,
)
from rayworks.pipelines.corpus.licenses import OPEN_STATUSES
from rayworks.pipelines.corpus.neardup import MinHashSignature
from rayworks.pipelines.corpus.normalize import Normalize
from rayworks.pipelines.corpus.pii_step import PIIRedaction
from rayworks.pipelines.corpus.quality import (
    C4Quality,
    C4QualityConfig,
    GopherQuality,
    GopherQualityConfig,
    GopherRepetition,
    GopherRepetitionConfig,
    OCRQuality,
    OCRQualityConfig,
)
from rayworks.pipelines.corpus.step import DROP, Batch, drop, size
from rayworks.pipelines.corpus.toxicity import Toxicity, ToxicityConfig

STEP_ORDER = (
    "normalize",
    "license",
    "language",
    "gopher",
    "repetition",
    "c4",
    "code",
    "ocr",
    "toxicity",
    "pii",
    "minhash",
    "dedup",
)
"""Steps in run order: the attrition table lists drops by the step named before ':'."""


class LicenseGate:
    """Step `license`: rows whose license is not public-domain or permissive get
    `license:<status>` (e.g. `license:copyleft`, `license:unknown`) when `open_only`; the
    open output must never hold a document without evidence that it may be shared."""

    name: ClassVar[str] = "license"

    def __init__(self, open_only: bool = True) -> None:
        self.open_only = open_only

    def __call__(self, batch: Batch) -> Batch:
        verdicts = [
            f"license:{status}" if self.open_only and status not in OPEN_STATUSES else ""
            for status in batch["license_status"]
        ]
        return drop(batch, verdicts)


class SkipCollections:
    """Run `step` only on rows outside the `skip` collections; skipped rows keep their
    verdict and text and get null scores.

    Gopher, repetition, C4 and OCR rules are prose rules: on source code they would drop
    nearly every file (no stop words, "{" everywhere), so code rows are judged by
    `CodeQuality` alone, which in turn judges only the code collection. Scoring code rows
    anyway cost more than half the pipeline's time (OCR's segment-wise language ID and
    the repetition n-grams on long source files) for scores nobody should filter on.
    A batch of skipped rows only still runs the step on its first row, whose results are
    discarded, so every block gets the same score columns (parquet needs one schema).
    """

    def __init__(self, step: Callable[[Batch], Batch], skip: tuple[str, ...] = ("code",)):
        self.step, self.skip = step, skip

    def __call__(self, batch: Batch) -> Batch:
        n = size(batch)
        skipped = np.asarray([str(c) in self.skip for c in batch["collection"]], dtype=bool)
        if n == 0 or not skipped.any():
            return self.step(batch)
        run = np.flatnonzero(~skipped)
        probe = run if len(run) else np.arange(1)
        sub = self.step({k: _column(v)[probe] for k, v in batch.items()})
        out = dict(batch)
        for col, values in sub.items():
            full = _column(batch[col]).copy() if col in batch else np.full(n, None, object)
            if col == DROP and col not in batch:
                full = np.full(n, "", dtype=object)
            if len(run):
                full[run] = _column(values)
            out[col] = full
        return out


def step_name(step: Callable[[Batch], Batch]) -> str:
    """A step's `name` (a `SkipCollections` wrapper answers for the step it wraps)."""
    inner = getattr(step, "step", step)
    return str(getattr(inner, "name", type(inner).__name__))


def _column(values: Any) -> np.ndarray:
    """A batch column as an object array (row-indexable, any cell type)."""
    return np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values


def build_steps(
    cfg: CorpusConfig, langid_cache: str | None = None
) -> list[Callable[[Batch], Batch]]:
    """Every scoring step, in `STEP_ORDER`, configured from `cfg`; with `langid_cache` (a
    build-cache folder) the language model is loaded from its unpacked copy there."""
    if langid_cache is not None:
        with contextlib.suppress(OSError):  # a cache this node cannot write: the bundled file
            use_unpacked(unpack_model(Path(langid_cache)))
    every = cfg.score_dropped  # score rows already dropped too (analysis; `step.py`)
    lang_cfg = LanguageIdConfig(
        allowed=tuple(cfg.languages) if cfg.languages else None,
        min_confidence=cfg.language_min_confidence,
        max_chars=cfg.language_max_chars,
        score_dropped=every,
    )
    steps: list[Callable[[Batch], Batch]] = [
        Normalize(),
        LicenseGate(cfg.open_only),
        LanguageId(lang_cfg),
        SkipCollections(
            GopherQuality(GopherQualityConfig(min_words=cfg.gopher_min_words, score_dropped=every))
        ),
    ]
    if cfg.repetition:
        steps.append(SkipCollections(GopherRepetition(GopherRepetitionConfig(score_dropped=every))))
    if cfg.c4:
        steps.append(SkipCollections(C4Quality(C4QualityConfig(score_dropped=every))))
    steps += [
        CodeQuality(CodeQualityConfig(score_dropped=every)),
        SkipCollections(
            OCRQuality(
                OCRQualityConfig(min_consistency=cfg.ocr_min_consistency, score_dropped=every)
            )
        ),
        Toxicity(ToxicityConfig(max_score=cfg.toxicity_max_score, score_dropped=every)),
        PIIRedaction(),
    ]
    if cfg.near_dedup:
        steps.append(MinHashSignature(cfg.near_dup()))
    return steps


class StepChain:
    """Every scoring step of `build_steps(cfg)` over one batch, in order, each timed.

    `on_step(i)` (optional) is told the index of the step about to run, so a supervisor
    can name the step a stuck batch sits in (`guard.py`). `take_seconds()` returns the
    seconds spent per step since the last call.
    """

    def __init__(self, steps: Sequence[Callable[[Batch], Batch]]) -> None:
        self.steps = list(steps)
        self.names = [step_name(s) for s in self.steps]
        self._seconds: Counter[str] = Counter()

    @classmethod
    def from_config(cls, cfg: CorpusConfig) -> StepChain:
        return cls(build_steps(cfg))

    def __call__(self, batch: Batch, on_step: Callable[[int], None] | None = None) -> Batch:
        clock = time.perf_counter
        batch = textview.attach(batch)  # lazy: a view's cost lands on the step using it
        for i, (name, step) in enumerate(zip(self.names, self.steps, strict=True)):
            if on_step is not None:
                on_step(i)
            start = clock()
            batch = step(batch)
            self._seconds[name] += clock() - start
        return textview.detach(batch)

    def take_seconds(self) -> dict[str, float]:
        out, self._seconds = dict(self._seconds), Counter()
        return out
