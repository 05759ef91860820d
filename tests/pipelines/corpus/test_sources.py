"""The real-corpus sources: this venv's packages and Debian docs, with license evidence."""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path

import pytest

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.licenses import OPEN_STATUSES
from rayworks.pipelines.corpus.readers import ReaderConfig, jsonl_rows
from rayworks.pipelines.corpus.schema import ROW_FIELDS, document_id
from rayworks.pipelines.corpus.sources import SourceConfig, build_corpus, debian_evidence

SITE = sysconfig.get_paths()["purelib"]
DEBIAN_DOC = Path("/usr/share/doc")
STATUSES = {*OPEN_STATUSES, "copyleft", "proprietary", "unknown"}


def _rows(out: Path) -> list[dict]:
    rows = []
    for shard in sorted(out.glob("part-*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    return rows


def test_python_packages_carry_evidence_and_stable_ids(tmp_path: Path):
    cfg = dict(
        site_packages=(SITE,),
        debian_doc=None,
        max_packages=6,
        max_docs=60,
        max_docs_per_package=15,
        rows_per_shard=25,
    )
    first = build_corpus(SourceConfig(out_dir=str(tmp_path / "a"), **cfg))
    second = build_corpus(SourceConfig(out_dir=str(tmp_path / "b"), **cfg))
    rows = _rows(tmp_path / "a")
    assert 0 < len(rows) == first.documents <= 60
    assert len(first.shards) == -(-len(rows) // 25)
    assert max(first.by_source.values()) <= 15  # the per-package cap holds
    for row in rows:
        assert set(row) == set(ROW_FIELDS)
        assert row["collection"] == "code" and row["code_language"] == "python"
        assert row["license_status"] in STATUSES and row["license_evidence"]
        assert row["license_source"].endswith(".dist-info/METADATA")
        assert Path(row["source_path"]).is_file() and row["id"] == document_id(row["text"])
    assert sum(first.by_license_status["python"].values()) == len(rows)
    # stable across builds: same ids, byte-identical shards
    assert [r["id"] for r in _rows(tmp_path / "b")] == [r["id"] for r in rows]
    for name in first.shards:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert second.documents == first.documents
    # the shards are valid reader input that keeps the provenance as written
    shard = tmp_path / "a" / first.shards[0]
    read = jsonl_rows(str(shard), shard.read_bytes(), ReaderConfig())
    assert [r["reject_reason"] for r in read] == [""] * len(read)
    for got, want in zip(read, rows, strict=False):
        assert {k: got[k] for k in ROW_FIELDS} == want
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["documents"] == len(rows) and manifest["by_origin"] == {"python": len(rows)}


def test_missing_source_folder_is_named(tmp_path: Path):
    with pytest.raises(RayworksError, match="no-such-site"):
        SourceConfig(out_dir=str(tmp_path), site_packages=(str(tmp_path / "no-such-site"),))


def test_debian_docs_keep_closed_licenses(tmp_path: Path):
    copyrights = sorted(DEBIAN_DOC.glob("*/copyright")) if DEBIAN_DOC.is_dir() else []
    if not copyrights:
        pytest.skip(f"{DEBIAN_DOC} has no <pkg>/copyright files (not a Debian-like system)")
    cfg = SourceConfig(
        out_dir=str(tmp_path),
        debian_doc=str(DEBIAN_DOC),
        max_packages=40,
        max_docs=200,
        max_docs_per_package=5,
    )
    manifest = build_corpus(cfg)
    rows = _rows(tmp_path)
    assert rows and len(rows) == manifest.documents
    assert {r["collection"] for r in rows} == {"web"}
    # every package's rows carry the evidence of its own copyright file
    for row in rows:
        pkg = DEBIAN_DOC / row["source"]
        assert Path(row["source_path"]).is_relative_to(pkg)
        evidence = debian_evidence(pkg)
        if evidence is not None:
            assert row["license_source"] == str(pkg / "copyright")
            assert row["license_status"] == evidence.status
    statuses = manifest.by_license_status["debian"]
    assert sum(statuses.values()) == len(rows)
    if any(s not in OPEN_STATUSES for s in statuses):  # written, not dropped
        assert any(r["license_status"] not in OPEN_STATUSES for r in rows)
