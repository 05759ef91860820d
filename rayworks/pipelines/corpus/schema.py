"""The provenance columns every corpus row carries, and the shape of a rejected input row.

Common Corpus's selling point is per-document traceability (the paper; the dataset card
of `PleIAs/common_corpus`): every document says where it came from and why its license is
open. Readers and sources build rows only through `make_row`, so the columns, their types
and the id rule live here once, and every later step can rely on them.

Row columns (`ROW_FIELDS`, Arrow types in `ROW_SCHEMA`):
- `id`: blake2b-128 of the id-normalised text (`minhash.content_id`), stable across runs
  and machines, so blocklists, takedowns and resume can key on it (dolma's rule).
- `text`: the document as read (normalisation is a later step, which keeps the id).
- `collection`: one of Common Corpus's six (`COLLECTIONS`).
- `source`, `source_path`, `line`: the dataset or package, the file, and the 1-based line
  (jsonl) or row number (parquet), or None (one document per file). With the path it makes
  a row's key unique, which exact and near dedup rely on to keep exactly one copy.
- `license` (SPDX id, `LicenseRef-Public-Domain` or None), `license_status`,
  `license_evidence` (the exact field or line), `license_source` (where it was read),
  `license_confidence`: a `licenses.LicenseEvidence`, flattened.
- `lang`: None here; the language step fills it.
- `code_language`: programming language of code documents (None for text).
- `meta`: JSON object text for source fields we keep but do not model (title, date, ...).
- `pipeline_version`: `PIPELINE_VERSION`, so mixed outputs can be told apart.

A reader emits rows of `READ_FIELDS`: the row columns plus `reject_reason` ("" for a good
row) and `reject_raw`. A rejected row keeps only `source_path`, `line`, `reject_reason`
and `reject_raw` (`REJECT_FIELDS` after renaming); see `readers.split_table`.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pyarrow as pa

from rayworks import __version__
from rayworks.pipelines.corpus.licenses import (
    LicenseEvidence,
    classify_expression,
    classify_name,
)
from rayworks.pipelines.corpus.minhash import content_id

SCHEMA_VERSION = 1
"""Bump when a column is added, removed or changes meaning."""
PIPELINE_VERSION = f"rayworks-{__version__}+schema{SCHEMA_VERSION}"

COLLECTIONS = ("government", "culture", "science", "code", "web", "semantic")
"""Common Corpus's six collections (paper version, `corpus.md` 1.2)."""

# Common Corpus's own spellings (dataset card, Nov 2024 and 2025) -> ours.
_COLLECTION_ALIASES = {
    "opengovernment": "government",
    "openculture": "culture",
    "openscience": "science",
    "opencode": "code",
    "opensource": "code",
    "openweb": "web",
    "opensemantic": "semantic",
}

ROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("text", pa.string()),
        ("collection", pa.string()),
        ("source", pa.string()),
        ("source_path", pa.string()),
        ("line", pa.int64()),
        ("license", pa.string()),
        ("license_status", pa.string()),
        ("license_evidence", pa.string()),
        ("license_source", pa.string()),
        ("license_confidence", pa.string()),
        ("lang", pa.string()),
        ("code_language", pa.string()),
        ("meta", pa.string()),
        ("pipeline_version", pa.string()),
    ]
)
ROW_FIELDS = tuple(ROW_SCHEMA.names)

READ_SCHEMA = ROW_SCHEMA.append(pa.field("reject_reason", pa.string())).append(
    pa.field("reject_raw", pa.string())
)
READ_FIELDS = tuple(READ_SCHEMA.names)
REJECT_FIELDS = ("source_path", "line", "reason", "raw")
"""A rejected input row: file, 1-based line or parquet row (None for whole files),
reason ("<kind>:<rule>", e.g. "json:invalid") and the raw input, truncated."""

NO_EVIDENCE = "no license evidence given"


def normalize_collection(value: str) -> str:
    """'OpenCulture', 'Open Culture', 'culture' -> 'culture'; ValueError names the value."""
    key = "".join(str(value).lower().split()).replace("_", "").replace("-", "")
    if key in COLLECTIONS:
        return key
    if key in _COLLECTION_ALIASES:
        return _COLLECTION_ALIASES[key]
    raise ValueError(f"collection {value!r} is not one of {', '.join(COLLECTIONS)}")


def id_text(text: str) -> str:
    """The text an id is computed from: NFC, whitespace runs collapsed, stripped.

    So that a re-encoded or re-wrapped copy of a document (CRLF vs LF, trailing blanks,
    composed vs decomposed accents) keeps its id and is an exact duplicate.
    """
    return " ".join(unicodedata.normalize("NFC", text).split())


def document_id(text: str) -> str:
    """Stable content-hash id of a document (see `id_text`)."""
    return content_id(id_text(text))


def evidence_from_field(value: str, source: str, where: str) -> LicenseEvidence:
    """A license name or SPDX expression declared in the data (a `license` column or a
    reader's config) -> evidence quoting it; unknown (never a guess) if it does not parse."""
    spdx, status = classify_name(value)
    if status == "unknown":
        try:
            spdx, status = classify_expression(value)
        except ValueError:
            spdx, status = None, "unknown"
    return LicenseEvidence(spdx, status, f"{where}: {value}", source)


def make_row(
    text: str,
    *,
    collection: str,
    source: str,
    source_path: str,
    evidence: LicenseEvidence | None,
    line: int | None = None,
    code_language: str | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One corpus row with every provenance column (see the module docstring).

    `evidence=None` gives license status "unknown": a document without evidence is never
    treated as open. Raises ValueError for a collection outside `COLLECTIONS` or a
    non-string text.
    """
    if not isinstance(text, str):
        raise ValueError(f"text of {source_path} must be a string, got {type(text).__name__}")
    ev = evidence or LicenseEvidence(None, "unknown", NO_EVIDENCE, source_path)
    return {
        "id": document_id(text),
        "text": text,
        "collection": normalize_collection(collection),
        "source": source,
        "source_path": source_path,
        "line": line,
        "license": ev.spdx,
        "license_status": ev.status,
        "license_evidence": ev.evidence,
        "license_source": ev.source,
        "license_confidence": ev.confidence,
        "lang": None,
        "code_language": code_language,
        "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False) if meta else None,
        "pipeline_version": PIPELINE_VERSION,
    }


def raw_text(raw: bytes | str, limit: int) -> str:
    """Raw input as text for a reject row: invalid UTF-8 bytes escaped (`\\xff`), cut to
    `limit` characters so one huge bad row cannot blow up the rejects dataset."""
    text = raw if isinstance(raw, str) else raw[: limit * 4].decode("utf-8", "backslashreplace")
    return text[:limit]


def reject_row(
    source_path: str, line: int | None, reason: str, raw: bytes | str, limit: int = 2000
) -> dict[str, Any]:
    """A rejected input in the reader's layout (`READ_FIELDS`; row columns left None)."""
    row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    row.update(
        source_path=source_path,
        line=line,
        reject_reason=reason,
        reject_raw=raw_text(raw, limit),
    )
    return row


def good_row(row: dict[str, Any]) -> dict[str, Any]:
    """A `make_row` row in the reader's layout (`reject_reason` "")."""
    return {**row, "reject_reason": "", "reject_raw": None}


def to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Reader rows -> an Arrow table with the fixed `READ_SCHEMA`, so every block has the
    same column types even when a block holds only rejects (all-null columns)."""
    return pa.Table.from_pylist(rows, schema=READ_SCHEMA)
