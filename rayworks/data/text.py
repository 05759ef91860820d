"""Local text corpora through HF `datasets`: .txt, .jsonl/.json, .parquet files or folders.

Text and parquet load with the `text` / `parquet` builders. JSON lines are read as text
lines and parsed one row at a time, so one malformed line is set aside with a reason
instead of failing the whole file (as `read_json` would). Counts reconcile:
`rows_in == len(texts) + len(rejects)`. A name that is not a local path is passed to
`datasets.load_dataset` as a Hub dataset id (needs network; offline it fails fast).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rayworks.core.errors import RayworksError

BUILDERS = {
    ".txt": "text",
    ".md": "text",
    ".py": "text",
    ".jsonl": "text",
    ".json": "text",
    ".parquet": "parquet",
}


@dataclass
class TextCorpus:
    texts: list[str] = field(default_factory=list)
    rejects: list[dict[str, str]] = field(default_factory=list)
    rows_in: int = 0


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in BUILDERS)


def _looks_like_hub_id(source: str) -> bool:
    """`owner/name` with no file suffix: a Hub dataset id rather than a mistyped local path."""
    parts = source.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not source.startswith(".")
        and Path(source).suffix not in BUILDERS
    )


def _load(builder: str, files: list[Path], sample_by: str = "document"):
    """One row per file for plain text (documents), one per line for JSON lines."""
    from datasets import load_dataset

    kwargs = {"sample_by": sample_by} if builder == "text" else {}
    return load_dataset(builder, data_files=[str(f) for f in files], split="train", **kwargs)


def load_texts(sources: list[str], text_field: str = "text") -> TextCorpus:
    """Read every source into one list of documents, keeping malformed rows aside."""
    corpus = TextCorpus()
    for source in sources:
        path = Path(source)
        if not path.exists():
            if _looks_like_hub_id(source):
                from datasets import load_dataset

                rows = load_dataset(source, split="train")
                corpus.rows_in += len(rows)
                corpus.texts.extend(str(t) for t in rows[text_field])
                continue
            raise RayworksError(f"data source {source!r} does not exist (no such file or folder).")
        files = _files(path)
        if not files:
            raise RayworksError(
                f"data source {source!r} holds no readable file "
                f"(expected one of: {', '.join(sorted(BUILDERS))})."
            )
        for suffix in sorted({f.suffix for f in files}):
            group = [f for f in files if f.suffix == suffix]
            if suffix in (".jsonl", ".json"):  # one file at a time: rejects name file and line
                for file in group:
                    _parse_json_lines(
                        _load("text", [file], "line")["text"], text_field, corpus, str(file)
                    )
                continue
            rows = _load(BUILDERS[suffix], group)
            if BUILDERS[suffix] == "parquet":
                if text_field not in rows.column_names:
                    raise RayworksError(
                        f"parquet source {source!r} has no column {text_field!r}; "
                        f"columns: {', '.join(rows.column_names)} (set data.text_field)."
                    )
                corpus.rows_in += len(rows)
                corpus.texts.extend(str(t) for t in rows[text_field])
            else:
                corpus.rows_in += len(rows)
                corpus.texts.extend(t for t in rows["text"])
    return corpus


def _parse_json_lines(lines: list[str], text_field: str, corpus: TextCorpus, source: str) -> None:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        corpus.rows_in += 1
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            corpus.rejects.append(
                {"source": source, "line": str(number), "reason": f"invalid JSON: {exc.msg}"}
            )
            continue
        value = row.get(text_field) if isinstance(row, dict) else None
        if not isinstance(value, str):
            corpus.rejects.append(
                {
                    "source": source,
                    "line": str(number),
                    "reason": f"missing string field {text_field!r}",
                }
            )
            continue
        corpus.texts.append(value)
