"""Ray Data datasets over the corpus readers (`readers.py`), for users who want the rows as
a `ray.data.Dataset`: `read_jsonl`, `read_text_folder`, `read_code_tree`,
`read_parquet_docs` and `split_rejects`.

The pipeline itself does not use them: its tasks read their units with
`readers.unit_table`, which parses the same way in the calling process (`fanout.py` says
why the pipeline runs on plain Ray tasks). They live apart from `readers.py` so that the
pipeline's workers, which import the parsing, never import Ray Data (~0.4 s each).

Each dataset is ONE stream in the `schema.READ_FIELDS` layout: good rows with
`reject_reason == ""` and rejected rows with the reason and the raw input;
`split_rejects` projects it into (good, rejects). Why one stream rather than a (good,
rejects) pair: Ray Data is lazy, so two datasets derived from one read would execute the
read twice (or force a `materialize()` of the whole input).

Why bytes and per-row parsing: `read_json` fails the whole read on one malformed line, and
`read_text` decodes a whole file at once, so one invalid UTF-8 byte fails the file
(both seen with Ray 2.60). We read raw bytes and decode and parse each line ourselves.
We also turn off Ray's decompression-by-extension (it does gunzip `.gz` in 2.60): a
truncated `.gz` would then fail the read task; here it becomes a `gzip:invalid` reject.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from ray.data.datasource import FileBasedDatasource

from rayworks.pipelines.corpus.readers import (
    CODE_LANGUAGES,
    TEXT_EXTENSIONS,
    ReaderConfig,
    code_language_of,
    file_row,
    jsonl_rows,
    parquet_rows,
    resolve_inputs,
    split_table,
    to_table,
)


class _RawFiles(FileBasedDatasource):
    """One row per file: its undecoded, undecompressed bytes (`bytes`) and `path`."""

    def resolve_compression(self, path: str, open_args: dict[str, Any]) -> str | None:
        return None  # decompression is per file, in the UDF, so a bad .gz is a reject

    def _read_stream(self, f: pa.NativeFile, path: str) -> Iterator[pa.Table]:
        yield pa.table({"bytes": pa.array([f.readall()], type=pa.binary())})

    def _rows_per_file(self) -> int:
        return 1


def _read_raw(files: list[str]) -> ray.data.Dataset:
    return ray.data.read_datasource(_RawFiles(files, include_paths=True))


def _per_file(fn: Callable[[str, bytes], list[dict]]) -> Callable[[dict], pa.Table]:
    """A batch UDF applying `fn(path, data) -> rows` to every file of the batch."""

    def udf(batch: dict[str, np.ndarray]) -> pa.Table:
        rows: list[dict] = []
        for path, data in zip(batch["path"], batch["bytes"], strict=True):
            rows += fn(str(path), bytes(data))
        return to_table(rows)

    return udf


class _ParquetRows(FileBasedDatasource):
    """Reader rows of parquet files, one read task per file, streamed in blocks of
    `PARQUET_BLOCK_ROWS` rows (see `parquet_rows`).

    Ray's own `read_parquet` numbers no rows (its `row_hash` is a hash, not a position) and
    fails the whole read on one corrupt file; this reads each file in one task, so row
    numbers count from the file's first row whatever the block boundaries."""

    def __init__(self, files: list[str], cfg: ReaderConfig) -> None:
        super().__init__(files)
        self.cfg = cfg

    def _open_input_source(self, filesystem: Any, path: str, **open_args: Any) -> pa.NativeFile:
        return filesystem.open_input_file(path)  # parquet needs random access (its footer)

    def _read_stream(self, f: pa.NativeFile, path: str) -> Iterator[pa.Table]:
        yield from parquet_rows(f, path, self.cfg)


def read_parquet_docs(
    paths: str | Sequence[str], cfg: ReaderConfig = ReaderConfig()
) -> ray.data.Dataset:
    """Parquet files (Common Corpus ships 10,000 of them) -> rows in `READ_FIELDS`, `line`
    = the row's 1-based number in its file. Rows whose text column is missing or null are
    rejected `field:missing_text`; an unreadable file `parquet:invalid` (`parquet_rows`)."""
    files = resolve_inputs(paths, [".parquet"])
    return ray.data.read_datasource(_ParquetRows(files, cfg))


def read_jsonl(paths: str | Sequence[str], cfg: ReaderConfig = ReaderConfig()) -> ray.data.Dataset:
    """jsonl and jsonl.gz files (also .json/.ndjson lines) -> rows in `READ_FIELDS`."""
    files = resolve_inputs(
        paths, [".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json", ".json.gz"]
    )
    fn = _per_file(lambda p, d: jsonl_rows(p, d, cfg))
    return _read_raw(files).map_batches(fn, batch_size=1, batch_format="numpy")


def read_text_folder(
    paths: str | Sequence[str], cfg: ReaderConfig = ReaderConfig()
) -> ray.data.Dataset:
    """Plain-text and HTML files (and their .gz), one document per file."""
    suffixes = [*TEXT_EXTENSIONS, *(s + ".gz" for s in TEXT_EXTENSIONS)]
    files = resolve_inputs(paths, suffixes)
    fn = _per_file(lambda p, d: [file_row(p, d, cfg)])
    return _read_raw(files).map_batches(fn, batch_size=cfg.batch_files, batch_format="numpy")


def read_code_tree(
    paths: str | Sequence[str], cfg: ReaderConfig = ReaderConfig()
) -> ray.data.Dataset:
    """Source files of known languages (`CODE_LANGUAGES`), one document per file,
    collection "code", `code_language` from the extension."""
    files = resolve_inputs(paths, list(CODE_LANGUAGES))
    fn = _per_file(lambda p, d: [file_row(p, d, cfg, code_language_of(p))])
    return _read_raw(files).map_batches(fn, batch_size=cfg.batch_files, batch_format="numpy")


def split_rejects(ds: ray.data.Dataset) -> tuple[ray.data.Dataset, ray.data.Dataset]:
    """(good rows in `ROW_FIELDS`, rejects in `REJECT_FIELDS`), as `split_table` per block.
    Each is lazy and re-runs the read when executed: route rows in one pass where you can."""

    def good(t: pa.Table) -> pa.Table:
        return split_table(t)[0]

    def bad(t: pa.Table) -> pa.Table:
        return split_table(t)[1]

    return (
        ds.map_batches(good, batch_format="pyarrow"),
        ds.map_batches(bad, batch_format="pyarrow"),
    )
