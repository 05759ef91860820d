"""Units, markers and atomic folders: the bookkeeping behind `--resume`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayworks.errors import RayworksError
from rayworks.pipelines.corpus.units import WorkDir, atomic_dir, commit_dir, plan_units


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
    work = WorkDir(tmp_path / "work")
    assert work.adopt(units) == units
    work.finish(units[0], {"in": 3, "rejected": {}})
    leftover = atomic_dir(work.root / "scored" / units[1].name)  # a kill mid-write
    (leftover / "part.parquet").write_text("half")
    todo = WorkDir(tmp_path / "work").adopt(units)
    assert [u.name for u in todo] == ["unit-00001", "unit-00002"]
    assert not leftover.exists()
    assert work.counts() == [{"files": list(units[0].files), "in": 3, "rejected": {}}]


def test_resume_refuses_other_inputs(tmp_path: Path):
    work = WorkDir(tmp_path / "work")
    work.adopt(plan_units(_files(tmp_path, [10, 10]), unit_bytes=1))
    other = plan_units(_files(tmp_path / "..", [10]), unit_bytes=1)
    with pytest.raises(RayworksError, match="cannot resume: the input files differ"):
        work.adopt(other)


def test_commit_replaces_an_older_folder(tmp_path: Path):
    final = tmp_path / "output"
    final.mkdir()
    (final / "stale.parquet").write_text("old")
    tmp = atomic_dir(final)
    (tmp / "new.parquet").write_text("new")
    commit_dir(tmp, final)
    assert [p.name for p in final.iterdir()] == ["new.parquet"]
    assert not tmp.exists()
