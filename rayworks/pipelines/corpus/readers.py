"""Corpus readers that never fail a unit for one bad row.

Formats: jsonl / jsonl.gz, parquet, plain-text and HTML folders (one document per file)
and source-code trees (one document per source file). `unit_table` reads one unit of
input (`units.Unit`) in the calling process into ONE table in the `schema.READ_FIELDS`
layout: good rows with `reject_reason == ""` and rejected rows with the reason and the
raw input; `split_table` projects it into (good, rejects), as the runner routes the
steps' `drop_reason` (`step.py`). `readers_ray.py` offers the same parsing as Ray Data
datasets.

Why bytes and per-row parsing: a JSON reader that parses a whole file fails it on one
malformed line, and decoding a whole file fails it on one invalid UTF-8 byte. We read
raw bytes and decode and parse each line ourselves, and decompress `.gz` ourselves, so a
truncated `.gz` becomes a `gzip:invalid` reject.

Paths are resolved on the driver before Ray is touched: a path or glob that matches no
file raises `RayworksError` naming it at once (NeMo Curator #1387: a wrong path made a Ray
Data pipeline spin forever).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus import storage
from rayworks.pipelines.corpus.licenses import OPEN_STATUSES, LicenseEvidence
from rayworks.pipelines.corpus.schema import (
    REJECT_FIELDS,
    ROW_FIELDS,
    evidence_from_field,
    good_row,
    make_row,
    normalize_collection,
    reject_row,
    to_table,
)

JSON_INVALID = "json:invalid"
JSON_NOT_OBJECT = "json:not_object"
JSON_BLANK = "json:blank_line"
UTF8_INVALID = "utf8:invalid"
GZIP_INVALID = "gzip:invalid"
MISSING_TEXT = "field:missing_text"
TEXT_NOT_STRING = "field:text_not_string"
MISSING_COLLECTION = "field:missing_collection"
INVALID_COLLECTION = "field:invalid_collection"
OVERSIZE = "size:oversize"
PARQUET_INVALID = "parquet:invalid"
PARQUET_BLOCK_ROWS = 1024
"""Rows per block of the parquet reader (Ray Data's default batch size): 1-20 MB of text at
1-20 KB per document."""

DOCS_COUNTED = "input records: jsonl lines (blank and malformed ones too), parquet rows, files"
"""What `docs_per_s` divides, on our side (rows read = kept + dropped + rejected) and on the
DataTrove peer's (`jsonl_records` of its input files), so the two rates compare."""

STATUSES = (*OPEN_STATUSES, "copyleft", "proprietary", "unknown")
TEXT_EXTENSIONS = (".txt", ".md", ".rst", ".html", ".htm")
CODE_LANGUAGES = {
    ".py": "python",
    ".pyi": "python",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".cxx": "cpp",
    ".rs": "rust",
    ".go": "go",
    ".java": "java",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".rb": "ruby",
    ".sh": "shell",
    ".bash": "shell",
    ".pl": "perl",
    ".pm": "perl",
    ".lua": "lua",
    ".r": "r",
    ".jl": "julia",
    ".scala": "scala",
    ".kt": "kotlin",
    ".swift": "swift",
    ".php": "php",
    ".cs": "csharp",
    ".sql": "sql",
    ".f90": "fortran",
    ".hs": "haskell",
    ".cmake": "cmake",
    ".pyx": "cython",
}
"""File extension (lower-case) -> language of the code collection."""


@dataclass(frozen=True)
class ReaderConfig:
    """What a reader fills in when the input does not say it itself.

    text_field: the column holding the document text (Common Corpus: "text").
    collection: default collection for rows without one; None = rows must carry it.
    source: default `source`; None = the input file's name.
    license: license name or SPDX expression declared for the whole input (e.g. by the
        dataset's card); None = rows without a `license` field get status "unknown".
    max_bytes: rows or files larger than this (UTF-8 bytes) are rejected `size:oversize`;
        Ray Data advises rows under 10 MB (`corpus.md` 3.3), documents are far smaller.
    raw_chars: how much of a rejected input is kept in `raw`.
    batch_files: files per `map_batches` call (jsonl: 1, so one big file is one task).
    """

    text_field: str = "text"
    collection: str | None = None
    source: str | None = None
    license: str | None = None
    max_bytes: int = 1_000_000
    raw_chars: int = 2000
    batch_files: int = 64

    def __post_init__(self) -> None:
        if self.collection is not None:
            normalize_collection(self.collection)  # ValueError names the bad value
        if self.max_bytes <= 0 or self.raw_chars <= 0 or self.batch_files <= 0:
            raise ValueError(f"max_bytes, raw_chars and batch_files must be > 0: {self}")


# --- resolving inputs on the driver ------------------------------------------------------


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def resolve_inputs(paths: str | Sequence[str], suffixes: Sequence[str] | None) -> list[str]:
    """Every file matching `paths` (files, folders walked recursively, globs) whose name
    ends with one of `suffixes` (case-insensitive; None = any), sorted for determinism.

    Raises RayworksError naming the first path that matches no such file.
    """
    wanted = tuple(s.lower() for s in suffixes) if suffixes else None
    found: list[str] = []
    for path in [paths] if isinstance(paths, str) else list(paths):
        if storage.is_uri(path):  # a bucket or any filesystem pyarrow opens (`storage.py`)
            hits = files = storage.expand(path)
        else:
            hits = sorted(glob.glob(path, recursive=True)) if _is_glob(path) else [path]
            files = []
            for hit in hits:
                if os.path.isdir(hit):
                    for root, dirs, names in os.walk(hit):
                        dirs.sort()
                        files += [os.path.join(root, n) for n in sorted(names)]
                elif os.path.isfile(hit):
                    files.append(hit)
            files = [os.path.abspath(f) for f in files]
        files = [f for f in files if wanted is None or f.lower().endswith(wanted)]
        if not files:
            kinds = f" ending in {', '.join(wanted)}" if wanted else ""
            raise RayworksError(
                f"corpus input {path!r} matches no file{kinds} "
                f"({'no such file or folder' if not hits else 'only other files'})."
            )
        found += files
    return list(dict.fromkeys(found))


# --- per-file parsing (pure: tested without Ray) -----------------------------------------


_LAST_GUNZIP: dict[tuple[str, int, bytes], bytes] = {}
"""The last .gz file `jsonl_rows` decompressed for a piece, by (path, size, trailer)."""


def _gunzip(path: str, data: bytes, keep: bool = False) -> bytes:
    """`data` decompressed when `path` ends in .gz. With `keep`, the result is kept until
    another file is decompressed: the pieces of one large file (`units.split_file`) that an
    actor scores one after the other then decompress it once, not once per piece (the
    gzip trailer, CRC and size, tells its contents apart from another file's)."""
    if not path.lower().endswith(".gz"):
        return data
    key = (path, len(data), data[-8:])
    if keep and key in _LAST_GUNZIP:
        return _LAST_GUNZIP[key]
    out = gzip.decompress(data)
    if keep:
        _LAST_GUNZIP.clear()
        _LAST_GUNZIP[key] = out
    return out


def _license_of(record: dict, path: str, cfg: ReaderConfig):
    """Row-level license first (Common Corpus rows carry one), then the reader's default."""
    if isinstance(record.get("license"), str) and record["license"].strip():
        return evidence_from_field(record["license"].strip(), path, "row field license")
    if cfg.license:
        return evidence_from_field(cfg.license, path, "reader config license")
    return None


def record_row(record: dict, path: str, line: int | None, cfg: ReaderConfig) -> dict:
    """A parsed record (jsonl object, parquet row) -> a good or rejected reader row."""
    raw = lambda: json.dumps(record, ensure_ascii=False, default=str)  # noqa: E731
    text = record.get(cfg.text_field)
    if text is None:
        return reject_row(path, line, MISSING_TEXT, raw(), cfg.raw_chars)
    if not isinstance(text, str):
        return reject_row(path, line, TEXT_NOT_STRING, raw(), cfg.raw_chars)
    if len(text.encode("utf-8", "surrogatepass")) > cfg.max_bytes:
        return reject_row(path, line, OVERSIZE, text, cfg.raw_chars)
    collection = record.get("collection") or cfg.collection
    if not collection:
        return reject_row(path, line, MISSING_COLLECTION, raw(), cfg.raw_chars)
    try:
        collection = normalize_collection(collection)
    except ValueError:
        return reject_row(path, line, INVALID_COLLECTION, raw(), cfg.raw_chars)
    source = str(record.get("source") or cfg.source or os.path.basename(path))
    if record.get("license_status") in STATUSES and record.get("license_evidence"):
        # a row already built by `make_row` (e.g. by `sources.build_corpus`): keep its
        # provenance (file, line, evidence) as written, not re-derived from less
        ev = LicenseEvidence(
            record.get("license"),
            record["license_status"],
            record["license_evidence"],
            record.get("license_source") or path,
            record.get("license_confidence") or "high",
        )
        meta = json.loads(record["meta"]) if isinstance(record.get("meta"), str) else None
        row = make_row(
            text,
            collection=collection,
            source=source,
            source_path=record.get("source_path") or path,
            evidence=ev,
            line=record.get("line") if record.get("source_path") else line,
            code_language=record.get("code_language"),
            meta=meta,
        )
        row["lang"] = record.get("lang")
        return good_row(row)
    known = {cfg.text_field, "collection", "source", "license"}
    extra = json.loads(json.dumps({k: v for k, v in record.items() if k not in known}, default=str))
    row = make_row(
        text,
        collection=collection,
        source=source,
        source_path=path,
        evidence=_license_of(record, path, cfg),
        line=line,
        meta=extra or None,
    )
    return good_row(row)


def _line_start(data: bytes, offset: int) -> int:
    """Where the first line starting at or after `offset` begins (len(data) if none)."""
    if offset <= 0:
        return 0
    found = data.find(b"\n", offset - 1)
    return len(data) if found < 0 else found + 1


def jsonl_rows(
    path: str, data: bytes, cfg: ReaderConfig, start: int = 0, stop: int = -1
) -> list[dict]:
    """Rows of one jsonl(.gz) file, one per line (a trailing newline adds no line):
    lines in = good + rejected, always. With `start`/`stop` (uncompressed byte offsets,
    `stop` -1 = the end) only the lines whose first byte lies in `[start, stop)`, numbered
    as in the whole file (`units.split_file`); an undecodable .gz is one reject, made by
    the piece that starts at 0."""
    try:
        data = _gunzip(path, data, keep=start > 0 or stop >= 0)
    except (OSError, EOFError, zlib.error) as err:
        return [reject_row(path, None, GZIP_INVALID, f"{type(err).__name__}: {err}")] * (start == 0)
    first = 1
    if start > 0 or stop >= 0:
        begin = _line_start(data, start)
        end = len(data) if stop < 0 else _line_start(data, stop)
        first += data.count(b"\n", 0, begin)
        data = data[begin:end]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    rows = []
    for number, raw in enumerate(lines, start=first):
        raw = raw.rstrip(b"\r")
        if len(raw) > cfg.max_bytes:
            rows.append(reject_row(path, number, OVERSIZE, raw, cfg.raw_chars))
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            rows.append(reject_row(path, number, UTF8_INVALID, raw, cfg.raw_chars))
            continue
        if not line.strip():
            rows.append(reject_row(path, number, JSON_BLANK, line, cfg.raw_chars))
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            rows.append(reject_row(path, number, JSON_INVALID, line, cfg.raw_chars))
            continue
        if not isinstance(record, dict):
            rows.append(reject_row(path, number, JSON_NOT_OBJECT, line, cfg.raw_chars))
            continue
        rows.append(record_row(record, path, number, cfg))
    return rows


def jsonl_records(path: str) -> int:
    """How many rows `jsonl_rows` makes of a jsonl(.gz) file, counted without parsing: its
    lines (a trailing newline adds none; blank and malformed lines count), or 1 for a .gz
    that does not decompress (its one `gzip:invalid` reject).

    This is the document count both sides of the DataTrove comparison divide by
    (`DOCS_COUNTED`): DataTrove's reader silently skips lines that are not JSON or carry
    no text, so its own document count is smaller than ours on the same files.
    """
    opener: Callable[..., Any] = gzip.open if path.lower().endswith(".gz") else open
    lines, last = 0, b"\n"
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(1 << 20):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except (OSError, EOFError, zlib.error):
        return 1
    return lines + (last != b"\n")


class _HTMLText(HTMLParser):
    """Visible text of an HTML page: script/style/template content removed, a newline at
    each block element so paragraphs stay apart for the line-based quality heuristics."""

    SKIP = {"script", "style", "noscript", "template", "head"}
    BLOCK = {
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "section",
        "article",
        "blockquote",
        "dt",
        "dd",
        "table",
        "ul",
        "ol",
        "title",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """HTML -> its visible text, blank runs collapsed to single blank lines."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def file_row(path: str, data: bytes, cfg: ReaderConfig, code_language: str | None = None) -> dict:
    """One document per file (text, HTML, source code), decompressing `.gz` first."""
    try:
        data = _gunzip(path, data)
    except (OSError, EOFError, zlib.error) as err:
        return reject_row(path, None, GZIP_INVALID, f"{type(err).__name__}: {err}")
    if len(data) > cfg.max_bytes:
        return reject_row(path, None, OVERSIZE, data, cfg.raw_chars)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return reject_row(path, None, UTF8_INVALID, data, cfg.raw_chars)
    name = path.lower().removesuffix(".gz")
    if name.endswith((".html", ".htm")):
        text = html_to_text(text)
    if not text.strip():
        return reject_row(path, None, MISSING_TEXT, data, cfg.raw_chars)
    collection = "code" if code_language else cfg.collection
    if not collection:
        return reject_row(path, None, MISSING_COLLECTION, "", cfg.raw_chars)
    ev = evidence_from_field(cfg.license, path, "reader config license") if cfg.license else None
    source = cfg.source or os.path.basename(os.path.dirname(path))
    return good_row(
        make_row(
            text,
            collection=collection,
            source=source,
            source_path=path,
            evidence=ev,
            code_language=code_language,
        )
    )


def code_language_of(path: str) -> str | None:
    """Programming language from the file extension (`CODE_LANGUAGES`), or None."""
    return CODE_LANGUAGES.get(os.path.splitext(path.lower())[1])


def parquet_rows(
    source: Any,
    path: str,
    cfg: ReaderConfig,
    rows_per_block: int = PARQUET_BLOCK_ROWS,
    row_groups: tuple[int, int] | None = None,
) -> Iterator[pa.Table]:
    """Reader tables of one parquet file (`source`: a path or a random-access file),
    `rows_per_block` rows each, every row numbered by its 1-based position in the file
    (`line`).

    The row number makes `(source_path, line)` unique per row, which both dedups rely on:
    without it two identical rows of one file shared their whole key, so exact dedup could
    not tell which to keep and kept both, and near dedup merged them into one node. A file
    that is not parquet, or breaks part-way, gives one `parquet:invalid` reject at the
    first row it could not read (the error as raw), so rows in = good + rejected.
    `row_groups` `(first, stop)` reads only those row groups, numbered as in the file.
    """
    number = 0
    try:
        pf = pq.ParquetFile(source)
        groups = None
        if row_groups is not None:  # a piece of the file (`units.split_file`)
            groups = list(range(*row_groups))
            number = sum(pf.metadata.row_group(i).num_rows for i in range(row_groups[0]))
        for batch in pf.iter_batches(batch_size=rows_per_block, row_groups=groups):
            records = batch.to_pylist()
            yield to_table(
                [record_row(r, path, number + i, cfg) for i, r in enumerate(records, start=1)]
            )
            number += len(records)
    except (OSError, pa.ArrowException) as err:
        yield to_table(
            [
                reject_row(
                    path, number + 1, PARQUET_INVALID, f"{type(err).__name__}: {err}", cfg.raw_chars
                )
            ]
        )


def unit_table(
    files: Sequence[str], fmt: str, cfg: ReaderConfig, start: int = 0, stop: int | None = None
) -> pa.Table:
    """Every row of one unit of input (`units.Unit`: whole files, or with `stop` a piece
    of one file) in the `READ_FIELDS` layout, read in the calling process: the scoring
    stage reads its own units, so the corpus never passes through the object store."""
    tables: list[pa.Table] = []
    for path in files:
        if fmt == "parquet":
            groups = None if stop is None else (start, stop)
            with storage.open_input(path) as f:
                tables += parquet_rows(f, path, cfg, row_groups=groups)
            continue
        with storage.open_input(path) as f:
            data = f.read()
        if fmt == "jsonl":
            rows = jsonl_rows(path, data, cfg, start, -1 if stop is None else stop)
        elif fmt == "code":
            rows = [file_row(path, data, cfg, code_language_of(path))]
        elif fmt == "text":
            rows = [file_row(path, data, cfg)]
        else:
            raise RayworksError(f"unknown input_format {fmt!r}: jsonl, parquet, text or code.")
        tables.append(to_table(rows))
    return pa.concat_tables(tables) if tables else to_table([])


def split_table(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A reader table -> (good rows in `ROW_FIELDS`, rejects in `REJECT_FIELDS`)."""
    ok = pc.equal(table["reject_reason"], "")
    good = table.filter(ok).select(list(ROW_FIELDS))
    bad = table.filter(pc.invert(ok))
    cols = [bad["source_path"], bad["line"], bad["reject_reason"], bad["reject_raw"]]
    return good, pa.table(dict(zip(REJECT_FIELDS, cols, strict=True)))


__all__ = ["ReaderConfig", "resolve_inputs", "split_table", "unit_table"]
