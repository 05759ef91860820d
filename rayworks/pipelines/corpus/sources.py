"""A real corpus nobody here wrote, built from this machine.

Two sources, both with per-document license evidence, both readable offline:
- Installed Python distributions: every `*.dist-info` in a site-packages folder gives its
  `METADATA` license (`licenses.from_metadata`) and its `.py` files listed in `RECORD`, one
  document each, collection "code", `source` = the distribution name.
- Debian documentation: `/usr/share/doc/<pkg>/` README*, changelog*, NEWS*, *.txt, *.md,
  *.html (and their `.gz`, decompressed), license from `<pkg>/copyright`
  (`licenses.from_debian_copyright`, which falls back to free-text keywords itself).

Collection rule for Debian docs (reconstructed): "web". Software manuals, READMEs and
changelogs are openly published prose about software; they are not cultural heritage
(Open Culture: public-domain books and newspapers), government, science or semantic data,
and they are not code, so the code heuristics must not score them. Common Corpus's Open
Web holds openly licensed text of this kind (Wikipedia, Stack Exchange).

This is a plain-Python builder, not a Ray pipeline: it writes the pipeline's *input* as
jsonl.gz shards (byte-identical across builds: sorted walk, gzip mtime 0) plus a
`manifest.json` of counts, in seconds with the caps. Documents with a license that is not
open are written too: the pipeline keeps them aside and counts them, the source never
drops them. Files that cannot be documents (invalid UTF-8, oversize, broken gzip) are
counted per reason in the manifest.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.licenses import (
    LicenseEvidence,
    from_debian_copyright,
    from_metadata,
)
from rayworks.pipelines.corpus.schema import make_row

DEBIAN_COLLECTION = "web"
DEBIAN_DOC_SUFFIXES = (".txt", ".md", ".html", ".htm")
DEBIAN_DOC_PREFIXES = ("readme", "changelog", "news")


@dataclass(frozen=True)
class SourceConfig:
    """What to build and how much.

    out_dir: folder for `part-NNNNN.jsonl.gz` shards and `manifest.json` (old shards of
        ours in it are replaced, nothing else is touched).
    site_packages: folders whose `*.dist-info` are read; empty = skip Python packages.
    debian_doc: Debian documentation root; None = skip Debian docs.
    max_packages: packages per source (Python distributions, Debian packages); None = all.
    max_docs: documents per source; None = all.
    max_docs_per_package: documents per package, so one big package cannot fill the cap.
    max_bytes: files larger than this (after decompression) are skipped, counted.
    rows_per_shard: documents per shard.
    """

    out_dir: str
    site_packages: tuple[str, ...] = ()
    debian_doc: str | None = "/usr/share/doc"
    max_packages: int | None = None
    max_docs: int | None = None
    max_docs_per_package: int | None = None
    max_bytes: int = 1_000_000
    rows_per_shard: int = 5000

    def __post_init__(self) -> None:
        for folder in (*self.site_packages, *([self.debian_doc] if self.debian_doc else [])):
            if not os.path.isdir(folder):
                raise RayworksError(f"corpus source folder {folder!r} does not exist.")
        if self.rows_per_shard <= 0 or self.max_bytes <= 0:
            raise RayworksError(f"rows_per_shard and max_bytes must be > 0, got {self}.")


@dataclass
class Manifest:
    """What a build wrote: counts per origin, license status, collection and source."""

    documents: int = 0
    shards: list[str] = field(default_factory=list)
    by_origin: Counter = field(default_factory=Counter)
    by_license_status: dict[str, Counter] = field(default_factory=dict)
    by_collection: Counter = field(default_factory=Counter)
    by_source: Counter = field(default_factory=Counter)
    packages: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        """Plain dicts (`asdict` would rebuild each Counter from its (key, value) pairs)."""
        out = {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}
        out["by_license_status"] = {k: dict(v) for k, v in self.by_license_status.items()}
        return out

    def count(self, origin: str, row: dict) -> None:
        self.documents += 1
        self.by_origin[origin] += 1
        self.by_license_status.setdefault(origin, Counter())[row["license_status"]] += 1
        self.by_collection[row["collection"]] += 1
        self.by_source[row["source"]] += 1


def _read_doc(path: Path, max_bytes: int) -> tuple[str | None, str]:
    """(text, "") or (None, skip reason) for one file, gunzipping `.gz`."""
    try:
        if path.stat().st_size > max_bytes:
            return None, "size:oversize"
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
                data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                return None, "size:oversize"
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "utf8:invalid"
    except (OSError, EOFError, zlib.error):
        return None, "file:unreadable"


def _capped(rows: Iterator[dict], cap: int | None) -> Iterator[dict]:
    for i, row in enumerate(rows):
        if cap is not None and i >= cap:
            return
        yield row


# --- Python distributions ----------------------------------------------------------------


def _record_py_files(dist_info: Path, site: Path) -> list[Path]:
    """`.py` files listed in RECORD that lie inside `site` (RECORD also lists scripts in
    `../../bin`, which belong to no import path and are skipped)."""
    record = dist_info / "RECORD"
    if not record.is_file():
        return []
    site_abs = site.resolve()
    files = []
    for entry in csv.reader(record.read_text(errors="replace").splitlines()):
        if entry and entry[0].endswith(".py"):
            path = (site / entry[0]).resolve()
            if path.is_relative_to(site_abs) and path.is_file():
                files.append(path)
    return sorted(set(files))


def python_rows(cfg: SourceConfig, manifest: Manifest) -> Iterator[dict]:
    """Rows for the `.py` files of every distribution in `cfg.site_packages`."""
    dists = sorted(p for site in cfg.site_packages for p in Path(site).glob("*.dist-info"))
    for dist in dists[: cfg.max_packages]:
        metadata = dist / "METADATA"
        if not metadata.is_file():
            manifest.skipped["python:no_metadata"] += 1
            continue
        text = metadata.read_text(errors="replace")
        headers = HeaderParser().parsestr(text)
        name = headers.get("Name") or dist.name.split("-")[0]
        evidence = from_metadata(text, source=str(metadata.resolve()))
        meta = {"distribution": name, "version": headers.get("Version")}
        manifest.packages["python"] += 1

        def docs(
            dist: Path = dist,
            evidence: LicenseEvidence = evidence,
            name: str = name,
            meta: dict = meta,
        ) -> Iterator[dict]:
            for path in _record_py_files(dist, dist.parent):
                doc, reason = _read_doc(path, cfg.max_bytes)
                if doc is None:
                    manifest.skipped[f"python:{reason}"] += 1
                    continue
                if not doc.strip():
                    manifest.skipped["python:empty"] += 1
                    continue
                yield make_row(
                    doc,
                    collection="code",
                    source=name,
                    source_path=str(path),
                    evidence=evidence,
                    code_language="python",
                    meta=meta,
                )

        yield from _capped(docs(), cfg.max_docs_per_package)


# --- Debian documentation ----------------------------------------------------------------


def _is_debian_doc(name: str) -> bool:
    base = name.lower().removesuffix(".gz")
    return base.startswith(DEBIAN_DOC_PREFIXES) or base.endswith(DEBIAN_DOC_SUFFIXES)


def debian_evidence(pkg_dir: Path) -> LicenseEvidence | None:
    """The package's license from `<pkg>/copyright`, or None where there is none."""
    copyright_file = pkg_dir / "copyright"
    if not copyright_file.is_file():
        return None
    text = copyright_file.read_text(errors="replace")
    return from_debian_copyright(text, source=str(copyright_file))


def debian_rows(cfg: SourceConfig, manifest: Manifest) -> Iterator[dict]:
    """Rows for the documentation files of every package under `cfg.debian_doc`."""
    from rayworks.pipelines.corpus.readers import html_to_text

    assert cfg.debian_doc is not None
    pkgs = sorted(p for p in Path(cfg.debian_doc).iterdir() if p.is_dir())
    for pkg in pkgs[: cfg.max_packages]:
        evidence = debian_evidence(pkg)
        manifest.packages["debian"] += 1
        if evidence is None:
            manifest.skipped["debian:no_copyright_file"] += 1

        def docs(pkg: Path = pkg, evidence: LicenseEvidence | None = evidence) -> Iterator[dict]:
            for root, dirs, names in os.walk(pkg):
                dirs.sort()
                for name in sorted(n for n in names if _is_debian_doc(n)):
                    path = Path(root) / name
                    doc, reason = _read_doc(path, cfg.max_bytes)
                    if doc is None:
                        manifest.skipped[f"debian:{reason}"] += 1
                        continue
                    if name.lower().removesuffix(".gz").endswith((".html", ".htm")):
                        doc = html_to_text(doc)
                    if not doc.strip():
                        manifest.skipped["debian:empty"] += 1
                        continue
                    yield make_row(
                        doc,
                        collection=DEBIAN_COLLECTION,
                        source=pkg.name,
                        source_path=str(path),
                        evidence=evidence,
                        meta={"debian_package": pkg.name},
                    )

        yield from _capped(docs(), cfg.max_docs_per_package)


# --- writing -------------------------------------------------------------------------------


def _write_shard(path: Path, rows: list[dict]) -> None:
    """A jsonl.gz shard, byte-identical for identical rows (gzip mtime 0, no file name)."""
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n")


def build_corpus(cfg: SourceConfig) -> Manifest:
    """Write the sources' documents as jsonl.gz shards into `cfg.out_dir` and return (and
    write as `manifest.json`) the counts."""
    start = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("part-*.jsonl.gz"), out / "manifest.json"]:
        old.unlink(missing_ok=True)
    manifest = Manifest()
    origins: list[tuple[str, Iterator[dict]]] = []
    if cfg.site_packages:
        origins.append(("python", python_rows(cfg, manifest)))
    if cfg.debian_doc:
        origins.append(("debian", debian_rows(cfg, manifest)))
    buffer: list[dict] = []

    def flush() -> None:
        name = f"part-{len(manifest.shards):05d}.jsonl.gz"
        _write_shard(out / name, buffer)
        manifest.shards.append(name)
        buffer.clear()

    for origin, rows in origins:
        for row in _capped(rows, cfg.max_docs):
            manifest.count(origin, row)
            buffer.append(row)
            if len(buffer) >= cfg.rows_per_shard:
                flush()
    if buffer:
        flush()
    manifest.seconds = round(time.perf_counter() - start, 3)
    (out / "manifest.json").write_text(
        json.dumps({"config": asdict(cfg), **manifest.as_dict()}, indent=2, sort_keys=True)
    )
    return manifest
