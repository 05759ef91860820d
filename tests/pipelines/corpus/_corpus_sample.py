"""A small fixed sample of the real local corpus (`sources.build_corpus`: Debian docs and
this venv's Python packages), normalized, for the equivalence tests of the corpus steps."""

from __future__ import annotations

import gzip
import json
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path

from rayworks.pipelines.corpus.normalize import NormalizeConfig, normalize_text
from rayworks.pipelines.corpus.sources import SourceConfig, build_corpus


@lru_cache(maxsize=1)
def local_rows() -> tuple[dict, ...]:
    """About 80 rows (Debian docs and Python sources up to 64 KB), text normalized; the
    same rows on every call of a test session."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in {
            "debian": dict(
                debian_doc="/usr/share/doc", max_packages=60, max_docs=60, max_docs_per_package=2
            ),
            "python": dict(
                site_packages=(sysconfig.get_paths()["purelib"],),
                debian_doc=None,
                max_packages=10,
                max_docs=20,
                max_docs_per_package=2,
            ),
        }.items():
            out = Path(tmp) / name
            build_corpus(SourceConfig(out_dir=str(out), max_bytes=64_000, **cfg))
            for shard in sorted(out.glob("part-*.jsonl.gz")):
                with gzip.open(shard, "rt", encoding="utf-8") as f:
                    rows += [json.loads(line) for line in f]
    for row in rows:
        row["text"] = normalize_text(row["text"], NormalizeConfig())
    return tuple(r for r in rows if r["text"])


def local_texts() -> list[str]:
    return [r["text"] for r in local_rows()]
