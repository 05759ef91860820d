"""Local text corpora: one document per text file, JSON lines with rejects, parquet, folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayworks.core.errors import RayworksError
from rayworks.data.text import load_texts


@pytest.fixture(autouse=True)
def private_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep `datasets`' builder cache under tmp_path instead of ~/.cache (HF_HUB_OFFLINE=1
    comes from tests/conftest.py)."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def reconciles(corpus) -> bool:
    return corpus.rows_in == len(corpus.texts) + len(corpus.rejects)


def test_text_and_markdown_files_are_one_document_each(tmp_path: Path) -> None:
    txt = write(tmp_path / "a.txt", "first line\nsecond line\n\nafter a blank line\n")
    md = write(tmp_path / "b.md", "# Title\n\nSome *markdown*.\n")
    corpus = load_texts([str(txt), str(md)])
    assert len(corpus.texts) == 2
    assert corpus.rows_in == 2
    assert corpus.rejects == []
    assert "first line\nsecond line\n\nafter a blank line" in corpus.texts[0]
    assert corpus.texts[1].startswith("# Title\n\nSome *markdown*.")


def test_jsonl_rejects_malformed_and_fieldless_lines_with_line_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path / "rows.jsonl",
        "\n".join(
            [
                json.dumps({"text": "alpha", "id": 1}),
                "{not json",
                json.dumps({"body": "no text field"}),
                "",  # blank lines are skipped, not rejected
                json.dumps({"text": "beta"}),
                json.dumps({"text": 42}),
                json.dumps(["a", "list"]),
            ]
        )
        + "\n",
    )
    corpus = load_texts([str(path)])
    assert corpus.texts == ["alpha", "beta"]
    assert corpus.rows_in == 6
    assert reconciles(corpus)
    by_line = {r["line"]: r for r in corpus.rejects}
    assert sorted(by_line, key=int) == ["2", "3", "6", "7"]
    assert by_line["2"]["reason"].startswith("invalid JSON")
    assert by_line["3"]["reason"] == "missing string field 'text'"
    assert by_line["6"]["reason"] == "missing string field 'text'"
    assert all(r["source"] == str(path) for r in corpus.rejects)


def test_jsonl_custom_text_field(tmp_path: Path) -> None:
    path = write(tmp_path / "rows.json", '{"content": "x"}\n{"text": "y"}\n')
    corpus = load_texts([str(path)], text_field="content")
    assert corpus.texts == ["x"]
    assert corpus.rejects[0]["reason"] == "missing string field 'content'"
    assert corpus.rejects[0]["line"] == "2"
    assert reconciles(corpus)


def test_parquet_file(tmp_path: Path) -> None:
    from datasets import Dataset

    path = tmp_path / "docs.parquet"
    Dataset.from_dict({"body": ["one", "two", "three"], "n": [1, 2, 3]}).to_parquet(str(path))
    corpus = load_texts([str(path)], text_field="body")
    assert corpus.texts == ["one", "two", "three"]
    assert corpus.rows_in == 3
    assert reconciles(corpus)


def test_parquet_missing_column_names_the_columns(tmp_path: Path) -> None:
    from datasets import Dataset

    path = tmp_path / "docs.parquet"
    Dataset.from_dict({"body": ["one"], "n": [1]}).to_parquet(str(path))
    with pytest.raises(RayworksError) as err:
        load_texts([str(path)])  # default text_field="text"
    message = str(err.value)
    assert str(path) in message
    assert "no column 'text'" in message
    assert "columns: body, n" in message
    assert "data.text_field" in message


def test_folder_source_reads_every_supported_file_recursively(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "a.txt", "doc a")
    write(root / "nested" / "b.txt", "doc b")
    write(root / "c.jsonl", '{"text": "doc c"}\n{"text": "doc d"}\n')
    write(root / "skip.csv", "text\nnot read\n")
    write(root / "README", "no suffix, not read")
    corpus = load_texts([str(root)])
    assert sorted(corpus.texts) == ["doc a", "doc b", "doc c", "doc d"]
    assert corpus.rows_in == 4
    assert reconciles(corpus)


def test_several_sources_accumulate(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "A")
    b = write(tmp_path / "b.jsonl", '{"text": "B"}\nbroken\n')
    corpus = load_texts([str(a), str(b)])
    assert corpus.texts == ["A", "B"]
    assert corpus.rows_in == 3
    assert len(corpus.rejects) == 1
    assert reconciles(corpus)


def test_rejects_in_a_folder_name_the_file_and_its_own_line(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "a.jsonl", '{"text": "one"}\n{"text": "two"}\n')
    second = write(root / "b.jsonl", '{"text": "three"}\n{broken\n')
    corpus = load_texts([str(root)])
    assert corpus.texts == ["one", "two", "three"]
    (reject,) = corpus.rejects
    assert reject["line"] == "2"
    assert reject["source"] == str(second)


def test_nonexistent_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.jsonl"
    with pytest.raises(RayworksError) as err:
        load_texts([str(missing)])
    assert str(missing) in str(err.value)
    assert "does not exist" in str(err.value)


def test_nonexistent_relative_path_is_a_rayworks_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RayworksError, match=r"corpus/train\.jsonl"):
        load_texts(["corpus/train.jsonl"])


def test_empty_folder_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write(empty / "data.csv", "a,b\n")  # an unsupported suffix does not count
    with pytest.raises(RayworksError) as err:
        load_texts([str(empty)])
    message = str(err.value)
    assert str(empty) in message
    assert "holds no readable file" in message
    assert ".jsonl" in message and ".parquet" in message
