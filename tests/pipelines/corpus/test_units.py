"""Units, markers and atomic folders: the bookkeeping behind `--resume`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayworks.errors import RayworksError
from rayworks.pipelines.corpus.units import WorkDir, atomic_dir, commit_dir, plan_units

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
        commit_dir(atomic_dir(parent / units[0].name), parent / units[0].name)
    work.finish(units[0], {"in": 3, "rejected": {}})
    leftover = atomic_dir(work.root / "scored" / units[1].name)  # a kill mid-write
    (leftover / "part.parquet").write_text("half")
    # a kill after unit 2's folders were renamed into place but before its marker
    unmarked = [parent / units[2].name for parent in (work.root / "scored", rejects)]
    for folder in unmarked:
        commit_dir(atomic_dir(folder), folder)
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


def test_commit_replaces_an_older_folder(tmp_path: Path):
    final = tmp_path / "output"
    final.mkdir()
    (final / "stale.parquet").write_text("old")
    tmp = atomic_dir(final)
    (tmp / "new.parquet").write_text("new")
    commit_dir(tmp, final)
    assert [p.name for p in final.iterdir()] == ["new.parquet"]
    assert not tmp.exists()
