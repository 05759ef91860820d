"""The corpus runner end to end on Ray Data, on eight crafted jsonl lines.

Every line is built to land in one known place (kept, quarantined with a known reason, or
rejected by the reader), so the counts, the reasons and the reconciliation are exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _corpus_prose import EMAIL, near_copy, prose

from rayworks.core.config import build_config
from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.runner import run_corpus
from rayworks.pipelines.corpus.schema import document_id
from rayworks.platform.context import RunContext


def write_input(path: Path) -> None:
    def line(text: str, license: str = "MIT") -> str:
        return json.dumps({"text": text, "collection": "web", "license": license})

    lines = [
        line(prose(0)),
        line(prose(1) + f"\nPlease write to {EMAIL} for the full report."),
        line(prose(2)),
        "{not json",  # reader reject json:invalid
        line(prose(0)),  # exact duplicate of line 1: dedup:exact
        line(prose(3), license="GPL-3.0-only"),  # license:copyleft
        line("Far too short to keep."),  # gopher:min_words
        line(prose(4)),
    ]
    path.write_text("\n".join(lines) + "\n")


def read_dir(folder: Path) -> list[dict]:
    return pq.read_table(folder).to_pylist() if any(folder.rglob("*.parquet")) else []


def test_run_corpus_routes_every_row_and_reconciles(ray_session, tmp_path: Path):
    src = tmp_path / "in.jsonl"
    write_input(src)
    cfg = build_config(
        CorpusConfig,
        "smoke",
        overrides=[f"inputs=[{src}]", "cpus=1", "batch_size=4"],
    )
    ctx = RunContext.create("corpus", cfg, runs_dir=tmp_path / "runs")
    summary = run_corpus(cfg, ctx)

    assert (summary["in"], summary["kept"], summary["dropped"], summary["rejected"]) == (8, 4, 3, 1)
    assert summary["kept_share"] == pytest.approx(0.5)
    assert summary["docs_per_s"] == pytest.approx(8 / summary["seconds"])  # every line read
    assert summary["near_dup_threshold"] == pytest.approx((1 / 14) ** (1 / 8))  # 14 x 8: 0.719
    art = ctx.artifacts_dir
    kept = read_dir(art / "output")
    assert len(kept) == 4 and {r["collection"] for r in kept} == {"web"}
    assert all(r["drop_reason"] == "" and r["lang"] == "en" for r in kept)
    assert {r["line"] for r in kept} == {1, 2, 3, 8}  # the first copy of the duplicate kept
    emails = [r for r in kept if r["pii_email"]]
    assert len(emails) == 1 and EMAIL not in emails[0]["text"]
    assert (art / "output" / "collection=web" / "lang=en").is_dir()

    quarantine = {r["line"]: r["drop_reason"] for r in read_dir(art / "quarantine")}
    assert quarantine == {5: "dedup:exact", 6: "license:copyleft", 7: "gopher:min_words"}
    rejects = read_dir(art / "rejects")
    assert [(r["line"], r["reason"]) for r in rejects] == [(4, "json:invalid")]

    attrition = json.loads((art / "attrition.json").read_text())
    assert attrition["in"] == attrition["kept"] + 3 + 1
    left = {row["step"]: row["left"] for row in attrition["steps"]}
    assert (left["reject"], left["license"], left["gopher"], left["dedup"]) == (7, 6, 5, 4)
    sheet = (art / "datasheet.md").read_text()
    assert "| email | 1 |" in sheet and "| permissive | 4 |" in sheet

    # every execution's tasks, in run order, inside the run's wall time
    phases = json.loads((art / "profile.json").read_text())["phases"]
    assert [p["phase"] for p in phases] == [
        "score_unit_task",
        "range_links",
        "fetch_unit",
        "finalize_task",
    ]
    assert [p["tasks"] for p in phases[::2]] == [1, 1]  # one unit
    assert 1 <= phases[1]["tasks"] <= cfg.dedup_hash_ranges  # the ranges holding keys
    ends = [0.0] + [p["end_s"] for p in phases]
    assert all(p["start_s"] >= end for p, end in zip(phases, ends, strict=False))
    assert ends[-1] <= summary["seconds"]
    # one task at a time (cpus=1), but the test Ray has two CPUs: any idle worker may run it
    assert all(0.0 <= p["idle_share"] < 1.0 and 1 <= p["workers"] <= p["tasks"] for p in phases)
    assert "| finalize_task | 1 | 1 |" in sheet


def test_a_worker_the_scoring_leaves_idle_imports_the_global_phase_meanwhile(
    ray_session, tmp_path: Path
):
    """One unit at cpus=2: the second CPU's worker imports the dedup and final-pass modules
    during the scoring (`fanout.WarmUp`), and it is done before the dedup links."""
    src = tmp_path / "in.jsonl"
    write_input(src)
    cfg = build_config(CorpusConfig, "smoke", overrides=[f"inputs=[{src}]", "cpus=2"])
    ctx = RunContext.create("corpus", cfg, runs_dir=tmp_path / "runs")
    assert run_corpus(cfg, ctx)["kept"] == 4
    phases = {
        p["phase"]: p
        for p in json.loads((ctx.artifacts_dir / "profile.json").read_text())["phases"]
    }
    warm, score, links = phases["import_modules"], phases["score_unit_task"], phases["range_links"]
    assert (warm["tasks"], score["tasks"]) == (1, 1)
    assert warm["start_s"] < score["end_s"] and warm["end_s"] <= links["start_s"]


def test_identical_parquet_rows_of_one_file_dedup_to_one(ray_session, tmp_path: Path):
    """Common Corpus ships parquet: two identical rows of one file must leave one copy (the
    first row), and a near copy in the same file must fall to near dedup. Before parquet
    rows were numbered, both identical rows had key (file, None) and were both kept."""
    import pyarrow as pa

    src = tmp_path / "cc.parquet"
    texts = [prose(0), prose(0), near_copy(prose(0)), prose(4)]
    pq.write_table(
        pa.table({"text": texts, "collection": ["OpenWeb"] * 4, "license": ["CC-BY-4.0"] * 4}), src
    )
    overrides = [f"inputs=[{src}]", "input_format=parquet", "cpus=1", "batch_size=4"]
    cfg = build_config(CorpusConfig, "smoke", overrides=overrides)
    ctx = RunContext.create("corpus", cfg, runs_dir=tmp_path / "runs")
    summary = run_corpus(cfg, ctx)

    assert (summary["in"], summary["kept"], summary["dropped"], summary["rejected"]) == (4, 2, 2, 0)
    art = ctx.artifacts_dir
    assert sorted(r["line"] for r in read_dir(art / "output")) == [1, 4]
    quarantine = {r["line"]: r["drop_reason"] for r in read_dir(art / "quarantine")}
    assert quarantine == {2: "dedup:exact", 3: "dedup:near"}
    assert summary["dropped_dedup_exact"] == summary["dropped_dedup_near"] == 1


class Killed(Exception):
    """Stands for a kill: raised between two writes of a run."""


def _ids(folder: Path) -> list[str]:
    return sorted(r["id"] for r in read_dir(folder))


def test_killed_run_resumes_to_the_same_output(ray_session, tmp_path: Path, monkeypatch):
    """A run killed after its first unit's marker resumes: the marked unit is not redone;
    the unit whose folders were renamed into place but not marked, and a half-written
    temporary folder, are cleared and redone; the output is what an uninterrupted run
    writes."""
    from rayworks.pipelines.corpus import runner
    from rayworks.pipelines.corpus.units import WorkDir

    srcs = []
    for i in range(2):
        path = tmp_path / f"in-{i}.jsonl"
        docs = [prose(10 * i + k) for k in range(3)] + ([prose(0)] if i == 1 else [])
        path.write_text(
            "".join(
                json.dumps({"text": t, "collection": "web", "license": "MIT"}) + "\n" for t in docs
            )
        )
        srcs.append(str(path))
    overrides = [f"inputs=[{','.join(srcs)}]", "cpus=1", "batch_size=4", "unit_bytes=1"]
    cfg = build_config(CorpusConfig, "smoke", overrides=overrides)
    real_finish, real_score = WorkDir.finish, runner.score_units
    marked: list[str] = []

    def killed_on_second_marker(self, unit, counts) -> None:
        if marked:  # the second unit's folders are in place, its marker never written
            raise Killed
        marked.append(unit.name)
        real_finish(self, unit, counts)

    monkeypatch.setattr(WorkDir, "finish", killed_on_second_marker)
    ctx = RunContext.create("corpus", cfg, runs_dir=tmp_path / "runs")
    with pytest.raises(Killed):
        run_corpus(cfg, ctx)
    work = ctx.artifacts_dir / "work"
    (killed,) = {"unit-00000", "unit-00001"} - set(marked)
    assert (work / "scored" / killed / "part.parquet").exists()
    assert not (work / "units" / f"{killed}.json").exists()
    half = work / "scored" / f".{killed}.tmp-dead"  # as `platform.atomic` names them
    half.mkdir()
    monkeypatch.setattr(WorkDir, "finish", real_finish)
    redone: list[list[str]] = []
    monkeypatch.setattr(
        runner,
        "score_units",
        lambda todo, *a: (redone.append([u.name for u in todo]), real_score(todo, *a)),
    )
    resumed = run_corpus(cfg, RunContext.open(ctx.run_dir))

    # what an uninterrupted run writes: every document once, the later copy of prose(0)
    # (in-1.jsonl, line 4) quarantined as an exact duplicate
    assert redone == [[killed]] and resumed["resumed_units"] == 1
    assert (resumed["in"], resumed["kept"], resumed["dropped"], resumed["rejected"]) == (7, 6, 1, 0)
    art = ctx.artifacts_dir
    expected = sorted({document_id(prose(s)) for s in (0, 1, 2, 10, 11, 12)})
    assert _ids(art / "output") == expected
    quarantined = read_dir(art / "quarantine")
    assert [(r["source_path"], r["line"], r["drop_reason"]) for r in quarantined] == [
        (srcs[1], 4, "dedup:exact")
    ]
    assert not half.exists() and not list(art.rglob(".*.tmp-*"))


def test_resume_under_other_settings_is_refused_before_any_unit_runs(tmp_path: Path, monkeypatch):
    """A finished unit's rows were scored under the run's settings: a resume may change
    what only sets the speed (cpus, batch_size), not a threshold or the pipeline version.
    Every run here is killed as its first unit starts, so no Ray work is done."""
    from rayworks.pipelines.corpus import config as corpus_config
    from rayworks.pipelines.corpus import runner

    src = tmp_path / "in.jsonl"
    write_input(src)
    started: list[str] = []

    def killed(todo, *args):
        started.append(todo[0].name)
        raise Killed

    def cfg(*extra: str) -> CorpusConfig:
        return build_config(CorpusConfig, "smoke", overrides=[f"inputs=[{src}]", *extra])

    monkeypatch.setattr(runner, "score_units", killed)
    ctx = RunContext.create("corpus", cfg(), runs_dir=tmp_path / "runs")
    with pytest.raises(Killed):
        run_corpus(cfg(), ctx)
    with pytest.raises(Killed):  # speed only: resumes
        run_corpus(cfg("cpus=1", "batch_size=8"), RunContext.open(ctx.run_dir))
    with pytest.raises(RayworksError, match=r"gopher_min_words: 50 -> 10; minhash_rows: 8 -> 4"):
        run_corpus(cfg("gopher_min_words=10", "minhash_rows=4"), RunContext.open(ctx.run_dir))
    monkeypatch.setattr(corpus_config, "PIPELINE_VERSION", "rayworks-9.9+schema9")
    with pytest.raises(RayworksError, match=r"pipeline_version: '.+' -> 'rayworks-9.9\+schema9'"):
        run_corpus(cfg(), RunContext.open(ctx.run_dir))
    assert started == ["unit-00000", "unit-00000"]


def test_wrong_input_path_fails_before_ray(tmp_path: Path):
    import ray

    was_up = ray.is_initialized()
    missing = tmp_path / "nope" / "*.jsonl"
    cfg = CorpusConfig(inputs=[str(missing)])
    ctx = RunContext.create("corpus", cfg, runs_dir=tmp_path / "runs")
    with pytest.raises(RayworksError, match=str(missing).replace("*", r"\*")):
        run_corpus(cfg, ctx)
    assert ray.is_initialized() == was_up
