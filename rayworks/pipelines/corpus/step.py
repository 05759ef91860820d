"""The one contract every curation step follows, and the helpers that score only live rows.

A step is a small class whose `__call__(batch) -> batch` takes a column batch (a dict of
equally long sequences, as Ray Data's `map_batches` hands it over) and returns it with:
- its score columns added (`<step>_<score>`), computed for the *live* rows, those no earlier
  step dropped (`drop_reason` == ""). Scores of live rows are always computed, so
  thresholds can be changed later without re-scoring (as dolma does). Rows already dropped
  are not scored (most long documents fall at the license gate; scoring them was most of
  the work): their cells hold a fill of the column's type, NaN in float columns and null
  (None) in every other column, so columns stay aligned and parquet keeps one type per
  column. A step's `score_dropped=True` setting scores every row, for analysis of what
  was dropped;
- its verdicts in the shared `drop_reason` column: "" keeps the row, otherwise
  "<step>:<rule>" (e.g. "gopher:mean_word_length"). The first reason wins: a step never
  overwrites the reason of a row an earlier step dropped.
Steps that transform text for the outputs rather than score it (normalize, PII redaction)
process every row: dropped rows go to the quarantine path and keep their provenance and
their first reason there.

The runner turns `drop_reason` into per-reason counters and writes dropped rows to the
quarantine path, so nothing is dropped silently. Steps that hold state (a model, a
tokenizer, word lists) load it in `__init__`, not per batch: the chain (`chain.py`) builds
the scoring steps once and calls them on batch after batch. Steps are pure Python: no Ray
import, so they are tested without a cluster. Steps that split text into words or lines
read the batch's shared text view (`textview.py`) instead of splitting again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

Batch = dict[str, Any]
DROP = "drop_reason"
ROW_ID = "row_id"
"""A row's int64 key in a run: unit index << 32 | its position in the unit (`score_unit.py`)."""


class Step(Protocol):
    name: ClassVar[str]

    def __call__(self, batch: Batch) -> Batch: ...


def size(batch: Batch) -> int:
    """Rows in `batch` (every column has the same length)."""
    return len(next(iter(batch.values()))) if batch else 0


def reasons(batch: Batch) -> list[str]:
    """The batch's `drop_reason` column as a list ("" everywhere if no step dropped yet)."""
    return list(batch[DROP]) if DROP in batch else [""] * size(batch)


def alive(batch: Batch) -> list[bool]:
    """Which rows no earlier step has dropped."""
    return [not r for r in reasons(batch)]


def scored_rows(batch: Batch, score_dropped: bool = False) -> np.ndarray:
    """Indices of the rows a step scores: the live ones, or all with `score_dropped`."""
    if score_dropped or DROP not in batch:
        return np.arange(size(batch))
    return np.flatnonzero([not r for r in batch[DROP]])


def spread(values: Any, rows: np.ndarray, n: int) -> np.ndarray:
    """A full column of `n` rows from the `values` of the scored `rows`: a float column
    keeps its dtype with NaN elsewhere; any other column becomes an object column with
    None elsewhere (Arrow reads it as a nullable column of the values' type)."""
    values = np.asarray(values)
    if len(rows) == n:
        return values
    full = np.full(n, np.nan, values.dtype) if values.dtype.kind == "f" else np.full(n, None)
    full[rows] = values
    return full


def drop(batch: Batch, verdicts: Sequence[str]) -> Batch:
    """Merge this step's verdicts ("" keep, else its reason) into `drop_reason`, keeping
    the first reason of every row."""
    if len(verdicts) != size(batch):
        raise ValueError(f"{len(verdicts)} verdicts for a batch of {size(batch)} rows")
    merged = [old or new for old, new in zip(reasons(batch), verdicts, strict=True)]
    return {**batch, DROP: np.asarray(merged, dtype=object)}


def drop_rows(batch: Batch, rows: np.ndarray, verdicts: Sequence[str]) -> Batch:
    """`drop` with verdicts given for the scored `rows` only (the others get "")."""
    full = [""] * size(batch)
    for i, verdict in zip(rows, verdicts, strict=True):
        full[i] = verdict
    return drop(batch, full)


def add_scores(
    batch: Batch,
    rows: np.ndarray,
    scores: Sequence[dict[str, Any]],
    keys: Sequence[str],
    prefix: str,
    dtype: Any = np.float64,
) -> Batch:
    """`batch` with a `prefix_<key>` column per key, from the score dicts of the scored
    `rows` (the others filled by `spread`). The keys are given, not read from the dicts,
    so a batch whose rows were all dropped still gets every column."""
    out = dict(batch)
    for key in keys:
        values = np.asarray([s[key] for s in scores], dtype=dtype)
        out[f"{prefix}_{key}"] = spread(values, rows, size(batch))
    return out


def judge(
    batch: Batch, rows: np.ndarray, scores: Sequence[Any], verdict: Callable[[Any], str]
) -> Batch:
    """`drop` with `verdict(score)` for the scored rows that are still live (a row scored
    under `score_dropped` keeps its first reason)."""
    current = reasons(batch)
    verdicts = ["" if current[i] else verdict(s) for i, s in zip(rows, scores, strict=True)]
    return drop_rows(batch, rows, verdicts)


def score_rows(
    batch: Batch,
    column: str,
    fn: Callable[[Any], dict[str, Any]],
    prefix: str,
    score_dropped: bool = False,
) -> Batch:
    """Add `prefix_<key>` columns from `fn(value)` for the scored rows of `column` (see
    `scored_rows`); the other rows get the fill of `spread`."""
    rows = scored_rows(batch, score_dropped)
    scores = [fn(batch[column][i]) for i in rows]
    out = dict(batch)
    for key in scores[0] if scores else []:
        values = np.asarray([s[key] for s in scores])
        out[f"{prefix}_{key}"] = spread(values, rows, size(batch))
    return out


def reason_counts(batch: Batch) -> Counter[str]:
    """Dropped rows per reason ("" = kept rows are not counted)."""
    return Counter(r for r in reasons(batch) if r)
