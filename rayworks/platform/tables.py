"""Results tables: every row to `<name>.jsonl`, the chosen columns to `<name>.md`.

A report names its columns once (`Column`: key, header, number format) and hands over
its rows; the markdown and the jsonl are written from the same rows, so they can never
disagree, and gaps (None, NaN, missing keys) show as "-".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def cell(x: Any, spec: str = ".4g") -> str:
    """`x` formatted with `spec` if it is a number, "-" if it is None or NaN, else str(x)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec) if isinstance(x, int | float) else str(x)


@dataclass(frozen=True)
class Column:
    """One markdown column: the row key, its header (default: the key) and number format."""

    key: str
    header: str = ""
    spec: str = ".4g"


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[Column | str]) -> str:
    """A markdown table of `columns` (a bare string is `Column(key)`) over `rows`."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    lines = [
        "| " + " | ".join(c.header or c.key for c in cols) + " |",
        "|" + "|".join("---" for _ in cols) + "|",
    ]
    lines += ["| " + " | ".join(cell(r.get(c.key), c.spec) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_table(
    folder: Path,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column | str],
    name: str = "table",
    title: str = "",
) -> Path:
    """Write `folder/<name>.jsonl` (every key of every row) and `folder/<name>.md`
    (`title`, then the table of `columns`); returns the markdown path."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
    path = folder / f"{name}.md"
    path.write_text((f"{title}\n\n" if title else "") + markdown(rows, columns), encoding="utf-8")
    return path
