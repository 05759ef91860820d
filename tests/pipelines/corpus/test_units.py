"""Units, markers and atomic folders: the bookkeeping behind `--resume`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.units import WorkDir, plan_units
from rayworks.platform.atomic import atomic_dir

SETTINGS = {"gopher_min_words": 50, "sources": {"max_docs": 5}, "pipeline_version": "v1"}


def _files(tmp_path: Path, sizes: list[int]) -> list[str]:
    paths = []
    for i, n in enumerate(sizes):
        path = tmp_path / f"in-{i}.jsonl"
        path.write_bytes(b"x" * n)
        paths.append(str(path))
    return paths


def test_units_group_sorted_files_until_the_byte_budget(tmp_path: Path):
    paths = _files(tmp_path, [40, 70, 10, 100, 5])
    units = plan_units(list(reversed(paths)), unit_bytes=100)
    assert [len(u.files) for u in units] == [2, 2, 1]  # 110, 110, then the 5-byte rest
    assert [u.bytes for u in units] == [110, 110, 5]
    assert [f for u in units for f in u.files] == sorted(paths)
    assert [u.name for u in units] == ["unit-00000", "unit-00001", "unit-00002"]
    with pytest.raises(RayworksError, match="unit_bytes"):
        plan_units(paths, 0)


def test_markers_skip_done_units_and_partial_writes_are_cleared(tmp_path: Path):
    units = plan_units(_files(tmp_path, [10, 10, 10]), unit_bytes=1)
    rejects = tmp_path / "rejects"
    work = WorkDir(tmp_path / "work", outputs=[rejects])
    assert work.adopt(units, SETTINGS) == units
    for parent in (work.root / "scored", rejects):  # unit 0 complete, then its marker
        with atomic_dir(parent / units[0].name):
            pass
    work.finish(units[0], {"in": 3, "rejected": {}})
    leftover = work.root / "scored" / f".{units[1].name}.tmp-0001"  # a kill mid-write
    leftover.mkdir()
    (leftover / "part.parquet").write_text("half")
    # a kill after unit 2's folders were renamed into place but before its marker
    unmarked = [parent / units[2].name for parent in (work.root / "scored", rejects)]
    for folder in unmarked:
        with atomic_dir(folder):
            pass
    (work.markers / f"{units[2].name}.json.part").write_text("{")

    todo = WorkDir(tmp_path / "work", outputs=[rejects]).adopt(units, SETTINGS)
    assert [u.name for u in todo] == ["unit-00001", "unit-00002"]
    assert not leftover.exists() and not any(f.exists() for f in unmarked)
    assert not list(work.markers.glob("*.part"))
    assert (work.root / "scored" / "unit-00000").is_dir() and (rejects / "unit-00000").is_dir()
    assert work.counts() == [{"files": list(units[0].files), "in": 3, "rejected": {}}]


def test_resume_refuses_other_inputs(tmp_path: Path):
    work = WorkDir(tmp_path / "work")
    work.adopt(plan_units(_files(tmp_path, [10, 10]), unit_bytes=1), SETTINGS)
    other = plan_units(_files(tmp_path / "..", [10]), unit_bytes=1)
    with pytest.raises(RayworksError, match="cannot resume: the input files differ"):
        work.adopt(other, SETTINGS)


def test_resume_refuses_other_settings_naming_each_key(tmp_path: Path):
    units = plan_units(_files(tmp_path, [10, 10]), unit_bytes=1)
    work = WorkDir(tmp_path / "work")
    work.adopt(units, SETTINGS)
    assert work.adopt(units, dict(SETTINGS)) == units  # same settings: resumes
    changed = {"gopher_min_words": 10, "sources": {"max_docs": 6}, "pipeline_version": "v2"}
    with pytest.raises(RayworksError, match="cannot resume: the settings differ") as err:
        work.adopt(units, changed)
    assert (
        "gopher_min_words: 50 -> 10; pipeline_version: 'v1' -> 'v2'; sources.max_docs: 5 -> 6"
        in str(err.value)
    )
    with pytest.raises(RayworksError, match=r"languages: '\(absent\)' -> \['en'\]"):
        work.adopt(units, {**SETTINGS, "languages": ["en"]})


def test_resume_refuses_a_plan_without_settings(tmp_path: Path):
    """A plan written before settings were recorded cannot vouch for how units were scored."""
    units = plan_units(_files(tmp_path, [10]), unit_bytes=1)
    work = WorkDir(tmp_path / "work")
    work.adopt(units, SETTINGS)
    plan = json.loads((work.root / "plan.json").read_text())
    del plan["settings"]
    (work.root / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(RayworksError, match="records no settings"):
        work.adopt(units, SETTINGS)


def _jsonl(path: Path, lines: int, gz: bool) -> str:
    body = "".join(f'{{"text": "line {i} {"x" * (i % 97)}"}}\n' for i in range(lines)).encode()
    path.write_bytes(gzip.compress(body, mtime=0) if gz else body)
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_a_large_jsonl_file_is_cut_into_pieces_that_read_every_line_once(
    tmp_path: Path, gz: bool, monkeypatch: pytest.MonkeyPatch
):
    """Pieces cut a file by the uncompressed offset of each line's first byte: read one by
    one they give every line exactly once, numbered as in the whole file."""
    from rayworks.pipelines.corpus import readers, units

    monkeypatch.setattr(units, "MIN_PIECE_BYTES", 1000)
    big = _jsonl(tmp_path / ("big.jsonl.gz" if gz else "big.jsonl"), 400, gz)
    small = _jsonl(tmp_path / "a-small.jsonl", 3, False)
    plan = plan_units([big, small], unit_bytes=5000, fmt="jsonl")
    pieces = [u for u in plan if u.stop is not None]
    assert plan[0].files == (small,) and plan[0].stop is None
    assert len(pieces) >= 4 and all(u.files == (big,) for u in pieces)
    assert pieces[0].start == 0 and pieces[-1].stop == -1
    assert [u.start for u in pieces[1:]] == [u.stop for u in pieces[:-1]]
    cfg = readers.ReaderConfig(collection="web")
    whole = readers.unit_table((big,), "jsonl", cfg)
    parts = [readers.unit_table(u.files, "jsonl", cfg, u.start, u.stop) for u in pieces]
    assert [p.num_rows > 0 for p in parts] == [True] * len(parts)
    lines = [n for p in parts for n in p["line"].to_pylist()]
    assert lines == whole["line"].to_pylist() == list(range(1, 401))
    texts = [t for p in parts for t in p["text"].to_pylist()]
    assert texts == whole["text"].to_pylist()
    if gz:  # the pieces decompressed the file once; new contents at the same path are read
        assert list(readers._LAST_GUNZIP) == [
            (big, Path(big).stat().st_size, Path(big).read_bytes()[-8:])
        ]
        _jsonl(Path(big), 401, gz)
        again = readers.unit_table((big,), "jsonl", cfg, pieces[-1].start, pieces[-1].stop)
        assert again["line"].to_pylist()[-1] == 401


def test_a_broken_gzip_cut_into_pieces_is_one_reject(tmp_path: Path, monkeypatch):
    from rayworks.pipelines.corpus import readers, units

    monkeypatch.setattr(units, "MIN_PIECE_BYTES", 1000)
    path = tmp_path / "broken.jsonl.gz"
    data = gzip.compress(b'{"text": "a"}\n' * 5000, mtime=0)
    path.write_bytes(data[: len(data) // 2] + data[-8:])  # the trailer survives: it is cut
    pieces = units.split_file(
        str(path), units.input_bytes(str(path), len(data), "jsonl"), "jsonl", unit_bytes=10_000
    )
    cfg = readers.ReaderConfig(collection="web")
    rows = [readers.unit_table((str(path),), "jsonl", cfg, a, b) for a, b, _ in pieces]
    assert len(pieces) > 1
    assert [r for t in rows for r in t["reject_reason"].to_pylist()] == ["gzip:invalid"]


def test_a_parquet_file_is_cut_by_row_groups(tmp_path: Path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rayworks.pipelines.corpus import readers, units

    path = tmp_path / "cc.parquet"
    texts = [f"document {i} " + "y" * 300 for i in range(100)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=10)
    monkeypatch.setattr(units, "MIN_PIECE_BYTES", 1)
    plan = plan_units([str(path)], unit_bytes=6000, fmt="parquet")
    assert len(plan) > 1 and plan[0].start == 0 and plan[-1].stop == 10
    cfg = readers.ReaderConfig(collection="web")
    parts = [readers.unit_table(u.files, "parquet", cfg, u.start, u.stop) for u in plan]
    assert [n for p in parts for n in p["line"].to_pylist()] == list(range(1, 101))
    assert [t for p in parts for t in p["text"].to_pylist()] == texts
