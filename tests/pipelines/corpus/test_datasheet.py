"""The datasheet from hand-made group stats: numbers, plots, escaping, reconciliation."""

import base64
import re
from pathlib import Path

import pandas as pd
import pytest

from rayworks.pipelines.corpus.datasheet import write_datasheet

COLUMNS = [
    "drop_reason",
    "collection",
    "lang",
    "license_status",
    "license",
    "docs",
    "chars",
    "tokens",
    "pii_email",
    "pii_phone",
]
HOSTILE = "<script>alert('x')</script>|$x^2$"
ROWS = [
    ("", "web", "en", "permissive", "MIT", 80, 160_000, 40_000, 3, 1),
    ("", "web", "fr", "public_domain", "CC0-1.0", 10, 20_000, 6_000, 0, 2),
    ("", "code", "en", "permissive", "Apache-2.0", 5, 9_000, 3_000, 1, 0),
    ("", "books", HOSTILE, "permissive", HOSTILE, 2, 100, 30, 0, 0),
    ("gopher:min_words", "web", "en", "permissive", "MIT", 7, 700, 0, 1, 0),
    ("dedup:near", "web", "en", "permissive", "MIT", 4, 8_000, 0, 0, 0),
    ("license:copyleft", "web", "de", "copyleft", "GPL-3.0-only", 3, 3_000, 0, 0, 0),
]
ATTRITION = [
    {"step": "read", "removed": 0, "left": 116},
    {"step": "reject", "removed": 5, "left": 111, "reasons": {"json:invalid": 4, "text:empty": 1}},
    {"step": "license", "removed": 3, "left": 108},
    {"step": "gopher", "removed": 7, "left": 101},
    {"step": "dedup", "removed": 4, "left": 97},
]
DEDUP = {
    "exact_duplicate_ids": 2,
    "near": {
        "threshold": 0.8,
        "bands": 16,
        "rows": 8,
        "n_candidate_pairs": 12,
        "n_verified_pairs": 9,
        "n_clusters": 3,
        "docs_in_clusters": 7,
        "docs_removed": 4,
        "cluster_sizes": {"2": 2, "3": 1},
    },
}
META = {
    "version": "0.1.0",
    "open_only": True,
    "input": "local corpus",
    "seconds": 12.34,
    "config": {"gopher_min_words": 50},
    "tokenizer_vocab_size": 8192,
}


@pytest.fixture(scope="module")
def sheet(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    out = tmp_path_factory.mktemp("sheet")
    md, page = write_datasheet(out, pd.DataFrame(ROWS, columns=COLUMNS), ATTRITION, DEDUP, META)
    assert (md, page) == (out / "datasheet.md", out / "datasheet.html")
    return md.read_text(), page.read_text()


def test_markdown_numbers(sheet: tuple[str, str]) -> None:
    md, _ = sheet
    assert "Kept 97 documents, 189,100 characters, 49,030 tokens" in md
    assert "in = kept + dropped + rejected: 116 = 97 + 14 + 5 (reconciled)" in md
    assert "| web | 90 | 92.8% | 180,000 | 46,000 | 3.91 |" in md  # by collection
    assert "| fr | 10 | 10.3% | 20,000 | 6,000 | 3.33 |" in md  # by language
    assert "| permissive | 87 | 89.7% |" in md  # license status
    assert "| CC0-1.0 | 10 |" in md and "GPL-3.0-only" not in md.split("## Kept")[1]  # SPDX, kept
    assert "| gopher | 108 | 7 | 101 | 6.0% |" in md  # attrition: in, removed, left
    assert "| rejected | reject | json:invalid | 4 | 3.4% |" in md
    assert "| dropped | dedup | dedup:near | 4 | 3.4% |" in md
    assert "| near: verified pairs | 9 |" in md and "| 2 | 2 | 4 |" in md  # cluster sizes
    assert "| email | 5 | 4 | 1 |" in md and "| phone | 3 | 3 | 0 |" in md  # PII kept / dropped
    assert "| seconds | 12.3 |" in md and '| config | {"gopher_min_words": 50} |' in md


def test_html_has_plots_numbers_and_escapes(sheet: tuple[str, str]) -> None:
    _, page = sheet
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == 6  # attrition, collection, language, license, clusters, PII
    assert all(base64.b64decode(u).startswith(b"\x89PNG") for u in uris)
    assert "<td>180,000</td>" in page and "<td>json:invalid</td>" in page
    assert "116 = 97 + 14 + 5 (reconciled)" in page
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)" in page
    assert "http" not in re.sub(r"data:image/png;base64,[^\"]+", "", page)  # no external asset


def test_markdown_escapes_table_breakers(sheet: tuple[str, str]) -> None:
    md, _ = sheet
    assert "<script>" not in md and "&lt;script&gt;alert('x')&lt;/script&gt;\\|$x^2$ | 2 |" in md


def test_without_tokens_license_or_dedup(tmp_path: Path) -> None:
    stats = pd.DataFrame(ROWS, columns=COLUMNS).drop(columns=["tokens", "license"])
    attrition = [
        {"step": "read", "removed": 0, "left": 120},
        {"step": "reject", "removed": 5, "left": 115},
    ]
    md_path, _ = write_datasheet(tmp_path, stats, attrition, {}, {})
    md = md_path.read_text()
    assert "No tokenizer ran" in md and "chars/token" not in md and "SPDX" not in md
    assert "No dedup statistics were recorded." not in md  # dedup:near drops are still shown
    assert "| removed as dedup:near | 4 |" in md
    assert "| rejected | reject | (reasons not recorded) | 5 |" in md
    assert "WARNING: in = kept + dropped + rejected: 120 = 97 + 14 + 5 (DOES NOT RECONCILE" in md


def test_nothing_read(tmp_path: Path) -> None:
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS[:4]}).assign(
        docs=pd.Series(dtype=int), chars=pd.Series(dtype=int)
    )
    attrition = [
        {"step": "read", "removed": 0, "left": 0},
        {"step": "reject", "removed": 0, "left": 0},
    ]
    md_path, html_path = write_datasheet(tmp_path, empty, attrition, {}, {})
    assert "in = kept + dropped + rejected: 0 = 0 + 0 + 0 (reconciled)" in md_path.read_text()
    assert "No dedup statistics were recorded." in md_path.read_text()
    assert html_path.read_text().count("data:image/png") == 1  # the attrition plot only
