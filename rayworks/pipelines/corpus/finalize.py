"""The final pass of a corpus run (the third execution of the global phase, `dedup.py`).

One Ray task per unit (`cpus` at a time, `fanout.py`; the tokenizer loaded once per
worker): it reads the unit's scored parquet, applies the dedup verdicts (a later exact
copy gets `dedup:exact`, a near duplicate `dedup:near` and its representative's id in
`dedup_near_of`), counts the tokens
of the kept rows with the run's tokenizer, writes the kept rows to `output/` (partitioned
by collection and language, hive style) and the dropped rows to `quarantine/`, one file
per unit in each, and returns the unit's group statistics (docs, characters, tokens and
PII counts per reason, collection, language and license). So verdicts, token counts,
writes and statistics are one read of the corpus, and the driver only sums small tables.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rayworks.pipelines.corpus.dedup import DEDUP_EXACT
from rayworks.pipelines.corpus.fanout import fan_units
from rayworks.pipelines.corpus.guard import to_batch
from rayworks.pipelines.corpus.neardup import DEDUP_NEAR, NEAR_OF, SIGNATURE
from rayworks.pipelines.corpus.step import DROP, ROW_ID
from rayworks.pipelines.corpus.tokenizer import TOKENS, TokenCount

GROUP_KEYS = ("drop_reason", "collection", "lang", "license_status", "license")
PARTITIONS = ["collection", "lang"]


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `schema`, in its order and types (a column one
    unit never filled is all null there, and typed null in its file)."""
    columns = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def unified_schema(files: list[str]) -> pa.Schema:
    """One schema for every unit's scored file (null columns take the type others have)."""
    return pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")


def apply_verdicts(
    table: pa.Table, exact: np.ndarray, near_rows: np.ndarray, near_of: np.ndarray
) -> pa.Table:
    """Dedup verdicts on the live rows: `exact` and `near_rows` sorted row ids, `near_of`
    the representative id of each near row. The first reason of a row is kept."""
    rows = table[ROW_ID].to_numpy()
    reasons = table[DROP].to_numpy(zero_copy_only=False).astype(object)
    live = reasons == ""
    is_exact = live & np.isin(rows, exact)
    pos = np.searchsorted(near_rows, rows)
    pos = np.minimum(pos, max(len(near_rows) - 1, 0))
    is_near = live & ~is_exact & (near_rows[pos] == rows if len(near_rows) else False)
    reasons[is_exact] = DEDUP_EXACT
    reasons[is_near] = DEDUP_NEAR
    of = np.full(len(rows), "", dtype=object)
    of[is_near] = near_of[pos[is_near]]
    table = table.set_column(
        table.schema.get_field_index(DROP), DROP, pa.array(reasons, pa.string())
    )
    return table.append_column(NEAR_OF, pa.array(of, pa.string()))


def group_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Docs, characters, tokens and PII counts per `GROUP_KEYS` group."""
    pii = sorted(c for c in df.columns if c.startswith("pii_"))
    tokens = df.get(TOKENS, 0)
    df = df.assign(
        docs=1,
        chars=df["text"].astype(str).str.len(),
        tokens=tokens,
        lang=df["lang"].fillna("und"),
        license=df["license"].fillna("none"),
    )
    cols = ["docs", "chars", "tokens", *pii]
    return df.groupby(list(GROUP_KEYS), dropna=False)[cols].sum().reset_index()


def empty_stats() -> pd.DataFrame:
    return pd.DataFrame({k: pd.Series(dtype=object) for k in GROUP_KEYS}).assign(
        docs=pd.Series(dtype=int), chars=pd.Series(dtype=int), tokens=pd.Series(dtype=int)
    )


def merge_stats(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-unit group stats summed into one table (an empty one when nothing was read)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_stats()
    df = pd.concat(parts, ignore_index=True)
    return df.groupby(list(GROUP_KEYS), dropna=False).sum(numeric_only=True).reset_index()


def finalize_unit(
    unit: str,
    path: str,
    schema: pa.Schema,
    verdicts: tuple[np.ndarray, np.ndarray, np.ndarray],
    tokens: TokenCount | None,
    output: Path,
    quarantine: Path,
    batch_size: int,
) -> pd.DataFrame:
    """Verdicts, token counts and writes of one unit (see the module docstring)."""
    table = apply_verdicts(conform(pq.read_table(path), schema), *verdicts)
    table = table.drop_columns([c for c in (ROW_ID, SIGNATURE) if c in table.column_names])
    if tokens is not None:
        counts = [
            tokens(to_batch(table.select([DROP, "text"]).slice(i, batch_size)))[TOKENS]
            for i in range(0, table.num_rows, batch_size)
        ]
        column = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        table = table.append_column(TOKENS, pa.array(column, pa.int64()))
    kept = pc.equal(table[DROP], "")
    if (rows := table.filter(kept)).num_rows:
        pq.write_to_dataset(
            rows, str(output), partition_cols=PARTITIONS, basename_template=f"{unit}-{{i}}.parquet"
        )
    if (rows := table.filter(pc.invert(kept))).num_rows:
        pq.write_table(rows, quarantine / f"{unit}.parquet")
    wanted = [*GROUP_KEYS, "text", *([TOKENS] if tokens is not None else [])]
    wanted += [c for c in table.column_names if c.startswith("pii_")]
    return group_stats(table.select(wanted).to_pandas())


@functools.lru_cache(maxsize=4)
def _token_count(path: str) -> TokenCount:
    """The run's tokenizer, loaded once per worker process (tasks reuse workers). Its
    encoder's thread pool gets one thread: a task holds one CPU of the run's budget (with
    the default pool, `cpus=1` used every core of the machine)."""
    os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")
    return TokenCount(path)


def finalize_task(unit: str, path: str, tokenizer: str | None, **kwargs: Any) -> pd.DataFrame:
    """The final pass's task (`fanout.fan_units`): `finalize_unit` with this worker's
    token counter."""
    tokens = _token_count(tokenizer) if tokenizer else None
    return finalize_unit(unit, path, tokens=tokens, **kwargs)


def finalize_units(
    cpus: int,
    units: list[str],
    files: list[str],
    schema: pa.Schema,
    verdicts: tuple[np.ndarray, np.ndarray, np.ndarray],
    tokenizer: str | None,
    output: Path,
    quarantine: Path,
    batch_size: int,
) -> list[pd.DataFrame]:
    """The final pass: one task per unit (`finalize_unit`), `cpus` at a time, in the
    order given; returns the stats parts."""
    calls = [{"unit": u, "path": f} for u, f in zip(units, files, strict=True)]
    shared = {
        "tokenizer": tokenizer,
        "schema": schema,
        "verdicts": verdicts,
        "output": output,
        "quarantine": quarantine,
        "batch_size": batch_size,
    }
    return [part for _, part in fan_units(finalize_task, calls, cpus, shared)]
