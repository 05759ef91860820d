"""PII redaction as a pipeline step, around `pii.redact` (validated emails, public IPs,
phone numbers, IBANs and card numbers; see `pii.py` for the rules and their sources).

Step `pii` (stateless: the patterns are module constants) rewrites the text column in
place with typed placeholders such as `<EMAIL>` and adds one count column per enabled type,
`pii_<type>` (e.g. `pii_email`, `pii_phone`), which the datasheet sums. It never drops a
row: a document with an email address is still a good document once redacted. Rows that an
earlier step dropped are redacted too, because they are written to the quarantine path and
must not leak PII there either. Phone numbers are looked for in the regions of the row's
`lang` (`pii.LANGUAGE_REGIONS`; all regions when the language is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rayworks.pipelines.corpus.pii import PIIConfig, redact
from rayworks.pipelines.corpus.step import Batch


@dataclass(frozen=True)
class PIIRedactionConfig:
    """text_column: column redacted in place.
    pii: which types to redact, placeholders and phone regions (`pii.PIIConfig`; default
      all of `pii.PII_TYPES`).
    """

    text_column: str = "text"
    pii: PIIConfig = field(default_factory=PIIConfig)


class PIIRedaction:
    """Step `pii`: rewrites the text column; columns `pii_<type>` per enabled type; no
    reasons (never drops)."""

    name: ClassVar[str] = "pii"
    stateful: ClassVar[bool] = False

    def __init__(self, cfg: PIIRedactionConfig | None = None) -> None:
        self.cfg = cfg or PIIRedactionConfig()

    def __call__(self, batch: Batch) -> Batch:
        column = self.cfg.text_column
        langs = batch["lang"] if "lang" in batch else [None] * len(batch[column])
        results = [
            redact(str(t), self.cfg.pii, lang if isinstance(lang, str) else None)
            for t, lang in zip(batch[column], langs, strict=True)
        ]
        out = {**batch, column: np.asarray([text for text, _ in results], dtype=object)}
        for kind in self.cfg.pii.types:
            out[f"pii_{kind}"] = np.asarray([counts[kind] for _, counts in results], np.int64)
        return out
