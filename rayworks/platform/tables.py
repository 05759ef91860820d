"""Results tables: every row to `<name>.jsonl`, the chosen columns to `<name>.md`.

A report names its columns once (`Column`: key, header, number format) and hands over
its rows; the markdown and the jsonl are written from the same rows, so they can never
disagree, and gaps (None, NaN, missing keys) show as "-". A cell that joins several keys
(`P / R`, `iters (converged)`) is a column with `render`; a report with several tables in
one file passes the others as `more` (`Table`), and `jsonl` when its jsonl holds other
rows than its first table (e.g. every piece, where the markdown shows the tuned ones).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
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
    """One markdown column: the row key, its header (default: the key) and number format;
    `render(row)` instead gives a cell made of several keys; `right` aligns it right."""

    key: str
    header: str = ""
    spec: str = ".4g"
    render: Callable[[Mapping[str, Any]], str] | None = None
    right: bool = False

    def text(self, row: Mapping[str, Any]) -> str:
        return self.render(row) if self.render is not None else cell(row.get(self.key), self.spec)


@dataclass(frozen=True)
class Table:
    """A further table of a markdown file: its title line, rows and columns."""

    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[Column | str]
    title: str = ""


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column | str]) -> str:
    """A markdown table of `columns` (a bare string is `Column(key)`) over `rows`."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    lines = [
        "| " + " | ".join(c.header or c.key for c in cols) + " |",
        "|" + "|".join("---:" if c.right else "---" for c in cols) + "|",
    ]
    lines += ["| " + " | ".join(c.text(r) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_table(
    folder: Path,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column | str],
    name: str = "table",
    title: str = "",
    more: Sequence[Table] = (),
    jsonl: Sequence[Mapping[str, Any]] | None = None,
    footer: str = "",
) -> Path:
    """Write `folder/<name>.jsonl` (every key of every row of `jsonl`, default `rows`) and
    `folder/<name>.md` (`title`, the table of `columns`, then each of `more` after its own
    title, then `footer`); returns the markdown path."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as f:
        for row in rows if jsonl is None else jsonl:
            f.write(json.dumps(row, default=str) + "\n")
    parts = [Table(rows, columns, title), *more]
    text = "\n".join(
        (f"{t.title}\n\n" if t.title else "") + markdown(t.rows, t.columns) for t in parts
    )
    path = folder / f"{name}.md"
    path.write_text(text + (f"\n{footer}\n" if footer else ""), encoding="utf-8")
    return path
