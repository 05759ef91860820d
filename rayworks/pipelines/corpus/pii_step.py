"""PII redaction as a pipeline step, around `pii.redact` (validated emails, public IPs,
phone numbers, IBANs and card numbers; see `pii.py` for the rules and their sources).

Step `pii` (stateless: the patterns are module constants) rewrites the text column in
place with typed placeholders such as `<EMAIL>` and adds one count column per enabled type,
`pii_<type>` (e.g. `pii_email`, `pii_phone`), which the datasheet sums. It never drops a
row: a document with an email address is still a good document once redacted. Rows that an
earlier step dropped are redacted too, because they are written to the quarantine path and
must not leak PII there either. Phone numbers are looked for in the regions of the row's
`lang` (`pii.LANGUAGE_REGIONS`; all regions when the language is unknown).

The text is not the only column a row writes out: `license_evidence` is the exact line
that licenses the document (a DEP-5 `Copyright:` line names people and their addresses),
and `meta` is JSON text of free-form source fields (authors, descriptions). The step
redacts both (`PIIRedactionConfig.text_fields`, `json_fields`), and a row's counts include
what was found there. Rejected inputs keep their raw text (`schema.REJECT_FIELDS`, `raw`),
which never reaches this step: the runner redacts it with `redact_rejects`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from rayworks.pipelines.corpus.pii import PIIConfig, redact
from rayworks.pipelines.corpus.step import Batch


@dataclass(frozen=True)
class PIIRedactionConfig:
    """text_column: column redacted in place.
    text_fields: other text columns redacted in place when the batch has them (None cells
      are kept); their redactions count in the row's `pii_<type>`.
    json_fields: columns of JSON object text whose string values are redacted
      (`redact_meta`), when the batch has them.
    pii: which types to redact, placeholders and phone regions (`pii.PIIConfig`; default
      all of `pii.PII_TYPES`).
    """

    text_column: str = "text"
    text_fields: tuple[str, ...] = ("license_evidence",)
    json_fields: tuple[str, ...] = ("meta",)
    pii: PIIConfig = field(default_factory=PIIConfig)


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for kind, n in more.items():
        total[kind] += n


def redact_meta(
    meta: str | None, cfg: PIIConfig, lang: str | None = None
) -> tuple[str | None, dict[str, int]]:
    """Redact the string values of a row's `meta` (JSON object text, `schema.make_row`),
    keeping its structure and keys: titles, authors and descriptions carry addresses and
    phone numbers as often as the text does. Text that is not JSON is redacted as plain
    text. Unchanged input is returned as is (the same string), so rows without PII keep
    their exact bytes; changed JSON is written back as `make_row` writes it (sorted keys,
    UTF-8). Keys are kept (they name fields), and so are numbers: a phone number stored as a
    JSON number is missed (a simplification).
    """
    counts = dict.fromkeys(cfg.types, 0)
    if not meta:
        return meta, counts
    try:
        value = json.loads(meta)
    except ValueError:
        return redact(meta, cfg, lang)

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            out, found = redact(node, cfg, lang)
            _add(counts, found)
            return out
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    redacted = walk(value)
    if not any(counts.values()):
        return meta, counts
    return json.dumps(redacted, sort_keys=True, ensure_ascii=False), counts


def redact_texts(
    values: Sequence[str | None], cfg: PIIConfig | None = None
) -> tuple[list[str | None], dict[str, int]]:
    """Redact each text of `values` (None kept), language unknown (phones of every region
    of `cfg.regions`); returns the texts and the redactions per type, summed."""
    cfg = cfg or PIIConfig()
    total = dict.fromkeys(cfg.types, 0)
    out: list[str | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        text, counts = redact(value, cfg)
        _add(total, counts)
        out.append(text)
    return out, total


def redact_rejects(table: pa.Table, cfg: PIIConfig | None = None, column: str = "raw") -> pa.Table:
    """Rejected input rows (`schema.REJECT_FIELDS`) with PII in their raw input `column`
    redacted. A reject keeps up to `ReaderConfig.raw_chars` of the input line so a person
    can see why it failed: a malformed JSON line holds the same emails and phone numbers
    as a good one, and the rejects are written out beside the corpus. The type of the
    column is kept (string, nullable); other columns are untouched."""
    if column not in table.column_names or table.num_rows == 0:
        return table
    texts, _ = redact_texts(table[column].to_pylist(), cfg)
    index = table.column_names.index(column)
    redacted = pa.array(texts, type=table.schema.field(column).type)
    return table.set_column(index, table.schema.field(column), redacted)


class PIIRedaction:
    """Step `pii`: rewrites the text column and the `text_fields` / `json_fields` columns
    present; columns `pii_<type>` per enabled type; no reasons (never drops)."""

    name: ClassVar[str] = "pii"

    def __init__(self, cfg: PIIRedactionConfig | None = None) -> None:
        self.cfg = cfg or PIIRedactionConfig()

    def __call__(self, batch: Batch) -> Batch:
        cfg = self.cfg
        column = cfg.text_column
        n = len(batch[column])
        langs = [x if isinstance(x, str) else None for x in batch.get("lang", [None] * n)]
        counts = [dict.fromkeys(cfg.pii.types, 0) for _ in range(n)]
        out = dict(batch)
        columns = [(column, False), *((c, False) for c in cfg.text_fields)]
        columns += [(c, True) for c in cfg.json_fields]
        for name, is_json in columns:
            if name not in batch:
                continue
            values = []
            for i, value in enumerate(batch[name]):
                if not isinstance(value, str):
                    values.append(value)  # None (no evidence, no meta) stays None
                    continue
                fn = redact_meta if is_json else redact
                text, found = fn(value, cfg.pii, langs[i])
                _add(counts[i], found)
                values.append(text)
            out[name] = np.asarray(values, dtype=object)
        for kind in cfg.pii.types:
            out[f"pii_{kind}"] = np.asarray([c[kind] for c in counts], np.int64)
        return out
