"""Corpus readers: per-row rejects with reasons, counts that reconcile, fail-fast paths."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus import readers, readers_ray
from rayworks.pipelines.corpus.readers import ReaderConfig
from rayworks.pipelines.corpus.schema import (
    PIPELINE_VERSION,
    REJECT_FIELDS,
    ROW_FIELDS,
    document_id,
)

CFG = ReaderConfig(collection="web", license="CC-BY-4.0", max_bytes=200)
GOOD = {"text": "Bonjour le monde, ceci est un texte.", "title": "t1", "license": "CC0-1.0"}
JSONL_LINES = [
    json.dumps(GOOD).encode(),
    b'{"text": "unterminated',  # invalid JSON
    json.dumps({"title": "no text here"}).encode(),
    json.dumps({"text": "x" * 500}).encode(),  # oversize for max_bytes=200
    b'{"text": "caf\xe9 latin-1 byte"}',  # invalid UTF-8
]
EXPECTED_REASONS = Counter(
    {"json:invalid": 1, "field:missing_text": 1, "size:oversize": 1, "utf8:invalid": 1}
)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus_in")
    data = b"\n".join(JSONL_LINES) + b"\n"
    (root / "docs.jsonl").write_bytes(data)
    (root / "docs.jsonl.gz").write_bytes(gzip.compress(data))
    (root / "broken.jsonl.gz").write_bytes(gzip.compress(data)[:20])  # truncated download
    table = pa.table({"text": ["Ein deutscher Satz.", None], "source": ["cc", "cc"]})
    pq.write_table(table, root / "part.parquet")
    pages = root / "pages"
    pages.mkdir()
    (pages / "a.html").write_text(
        "<html><head><title>T</title><style>p{color:red}</style></head><body>"
        "<p>Visible &amp; kept.</p><script>var hidden = 1;</script><p>Second</p></body></html>"
    )
    (pages / "b.txt").write_bytes(b"plain \xff bad bytes")
    (pages / "c.txt").write_text("A plain text document.")
    code = root / "code" / "pkg"
    code.mkdir(parents=True)
    (code / "mod.py").write_text("def f():\n    return 1\n")
    (code / "lib.rs").write_text("fn main() {}\n")
    (code / "notes.bin").write_bytes(b"\x00\x01")
    return root


def _reasons(rows: list[dict]) -> Counter:
    return Counter(r["reject_reason"] for r in rows if r["reject_reason"])


def test_jsonl_rows_reject_each_bad_line_with_its_reason():
    rows = readers.jsonl_rows("/in/docs.jsonl", b"\n".join(JSONL_LINES) + b"\n", CFG)
    assert len(rows) == len(JSONL_LINES)  # lines in = good + rejected
    assert _reasons(rows) == EXPECTED_REASONS
    good = [r for r in rows if not r["reject_reason"]]
    assert len(good) == 1 and good[0]["text"] == GOOD["text"] and good[0]["line"] == 1
    assert good[0]["license"] == "CC0-1.0"  # the row's own license beats the config's
    assert good[0]["license_evidence"] == "row field license: CC0-1.0"
    assert json.loads(good[0]["meta"]) == {"title": "t1"}
    bad_utf8 = next(r for r in rows if r["reject_reason"] == "utf8:invalid")
    assert bad_utf8["line"] == 5 and "\\xe9" in bad_utf8["reject_raw"]


def test_parquet_rows_are_numbered_per_file_across_blocks(tmp_path: Path):
    """Identical rows of one parquet file get distinct `line`s (their dedup keys), counted
    from the file's first row whatever the block and row-group boundaries."""
    path = tmp_path / "cc.parquet"
    texts = ["Same words here.", "Same words here.", None, "Other words.", "Same words here."]
    pq.write_table(pa.table({"text": texts, "collection": ["OpenWeb"] * 5}), path, row_group_size=2)
    blocks = list(readers.parquet_rows(str(path), str(path), CFG, rows_per_block=2))
    assert [len(b) for b in blocks] == [2, 2, 1]
    rows = [r for b in blocks for r in b.to_pylist()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["reject_reason"] for r in rows] == ["", "", "field:missing_text", "", ""]
    same = [(r["source_path"], r["line"]) for r in rows if r["text"] == texts[0]]
    assert len({r["id"] for r in rows if r["text"] == texts[0]}) == 1
    assert same == [(str(path), 1), (str(path), 2), (str(path), 5)]  # one key per copy


def test_unreadable_parquet_is_one_reject(tmp_path: Path):
    path = tmp_path / "not.parquet"
    path.write_bytes(b"PAR1 but not really")
    (only,) = [r for b in readers.parquet_rows(str(path), str(path), CFG) for r in b.to_pylist()]
    assert (only["line"], only["reject_reason"]) == (1, readers.PARQUET_INVALID)
    assert "ArrowInvalid" in only["reject_raw"]


@pytest.mark.parametrize(
    "data",
    [b"", b"\n", b"{}", b"{}\n", b"{}\n\n{bad\n", b"\n".join(JSONL_LINES), b"a\r\nb\r\n"],
)
@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_records_counts_the_rows_the_reader_makes(tmp_path: Path, data: bytes, gz: bool):
    """`jsonl_records` (the DataTrove peer's docs/s count) = rows of our reader, so both
    sides of the throughput comparison divide the same number of documents."""
    path = tmp_path / ("in.jsonl.gz" if gz else "in.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    assert readers.jsonl_records(str(path)) == len(
        readers.jsonl_rows(str(path), path.read_bytes(), CFG)
    )


def test_jsonl_records_of_a_broken_gz_is_its_one_reject(tmp_path: Path):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(JSONL_LINES) * 50)[:30])
    rows = readers.jsonl_rows(str(path), path.read_bytes(), CFG)
    assert [r["reject_reason"] for r in rows] == ["gzip:invalid"]
    assert readers.jsonl_records(str(path)) == 1


def test_id_is_stable_under_whitespace_and_unicode_form():
    assert document_id("caf\u00e9  au\r\nlait ") == document_id("cafe\u0301 au\nlait")
    assert document_id("a b") != document_id("a c")


def test_html_to_text_drops_scripts_and_styles():
    text = readers.html_to_text(
        "<style>x{}</style><h1>Title</h1><p>One &amp; two</p><script>evil()</script><p>3</p>"
    )
    assert text == "Title\n\nOne & two\n\n3"


def test_no_match_fails_before_ray(tmp_path: Path):
    with pytest.raises(RayworksError, match=r"nothing-here/\*\.jsonl"):
        readers_ray.read_jsonl(str(tmp_path / "nothing-here" / "*.jsonl"))
    (tmp_path / "only.csv").write_text("a,b\n")
    with pytest.raises(RayworksError, match="only other files"):
        readers_ray.read_jsonl(str(tmp_path))
    with pytest.raises(ValueError, match="'novels'"):
        ReaderConfig(collection="novels")


def test_readers_on_ray(ray_session, corpus_dir: Path):
    ds = readers_ray.read_jsonl(
        [str(corpus_dir / "docs.jsonl"), str(corpus_dir / "*.jsonl.gz")], CFG
    )
    ds = ds.materialize()  # read once; the checks and the split below reuse the blocks
    rows = ds.take_all()
    by_file = Counter(Path(r["source_path"]).name for r in rows)
    assert by_file == {"docs.jsonl": 5, "docs.jsonl.gz": 5, "broken.jsonl.gz": 1}
    assert _reasons(rows) == EXPECTED_REASONS + EXPECTED_REASONS + Counter({"gzip:invalid": 1})
    good_ids = {r["id"] for r in rows if not r["reject_reason"]}
    assert good_ids == {document_id(GOOD["text"])}  # plain and .gz copy: same id

    good, rejects = readers_ray.split_rejects(ds)
    good_rows, reject_rows = good.take_all(), rejects.take_all()
    assert len(good_rows) + len(reject_rows) == len(rows)  # counts reconcile
    assert tuple(good_rows[0]) == ROW_FIELDS and tuple(reject_rows[0]) == REJECT_FIELDS
    assert good_rows[0]["pipeline_version"] == PIPELINE_VERSION

    pq_rows = readers_ray.read_parquet_docs(str(corpus_dir / "part.parquet"), CFG).take_all()
    assert sorted((r["line"], r["reject_reason"]) for r in pq_rows) == [
        (1, ""),
        (2, "field:missing_text"),
    ]
    kept = next(r for r in pq_rows if not r["reject_reason"])
    assert kept["source"] == "cc" and kept["license"] == "CC-BY-4.0"

    pages = readers_ray.read_text_folder(str(corpus_dir / "pages"), CFG).take_all()
    by_name = {Path(r["source_path"]).name: r for r in pages}
    assert (
        by_name["a.html"]["text"] == "Visible & kept.\n\nSecond"
    )  # <head> (title, style) is dropped
    assert by_name["b.txt"]["reject_reason"] == "utf8:invalid"
    assert "\\xff" in by_name["b.txt"]["reject_raw"]
    assert by_name["c.txt"]["collection"] == "web" and by_name["c.txt"]["source"] == "pages"

    code = readers_ray.read_code_tree(str(corpus_dir / "code"), ReaderConfig()).take_all()
    langs = {Path(r["source_path"]).name: r["code_language"] for r in code}
    assert langs == {"mod.py": "python", "lib.rs": "rust"}  # notes.bin is not code
    assert {r["collection"] for r in code} == {"code"}
    assert {r["license_status"] for r in code} == {"unknown"}  # no evidence, never open
