"""The one contract every curation step follows (issue 6).

A step is a small class whose `__call__(batch) -> batch` takes a column batch (a dict of
equally long sequences, as Ray Data's `map_batches` hands it over) and returns it with:
- its score columns added (`<step>_<score>`; scores are always computed, so thresholds
  can be changed later without re-scoring, as dolma does), and/or
- its verdicts in the shared `drop_reason` column: "" keeps the row, otherwise
  "<step>:<rule>" (e.g. "gopher:mean_word_length"). The first reason wins: a step never
  overwrites the reason of a row an earlier step dropped, and it need not score it again.

The runner turns `drop_reason` into per-reason counters and writes dropped rows to the
quarantine path, so nothing is dropped silently. A step that holds state (a model, a
tokenizer, word lists) sets `stateful = True` and is run by an actor pool; the others run
as Ray tasks. Steps are pure Python: no Ray import, so they are tested without a cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

Batch = dict[str, Any]
DROP = "drop_reason"


class Step(Protocol):
    name: ClassVar[str]
    stateful: ClassVar[bool]

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


def drop(batch: Batch, verdicts: Sequence[str]) -> Batch:
    """Merge this step's verdicts ("" keep, else its reason) into `drop_reason`, keeping
    the first reason of every row."""
    if len(verdicts) != size(batch):
        raise ValueError(f"{len(verdicts)} verdicts for a batch of {size(batch)} rows")
    merged = [old or new for old, new in zip(reasons(batch), verdicts, strict=True)]
    return {**batch, DROP: np.asarray(merged, dtype=object)}


def score_rows(
    batch: Batch, column: str, fn: Callable[[Any], dict[str, Any]], prefix: str
) -> Batch:
    """Add `prefix_<key>` columns from `fn(value)` for every row of `column` (rows already
    dropped get the same keys, filled by `fn` too, so columns stay aligned)."""
    rows = [fn(value) for value in batch[column]]
    keys = list(rows[0]) if rows else []
    out = dict(batch)
    for key in keys:
        out[f"{prefix}_{key}"] = np.asarray([row[key] for row in rows], dtype=object)
    return out


def reason_counts(batch: Batch) -> Counter[str]:
    """Dropped rows per reason ("" = kept rows are not counted)."""
    return Counter(r for r in reasons(batch) if r)
