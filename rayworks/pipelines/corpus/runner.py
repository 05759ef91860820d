"""The corpus runner: the steps of `corpus/` wired into one resumable Ray pipeline.

    scoring, ONE execution (`score_unit.py`): units of input -> `cpus` tasks at a time,
        each reading, scoring and writing a whole unit: read -> split rejects ->
        [normalize -> license gate -> language -> gopher, repetition, c4 (not code) | code
        quality (code only) -> ocr (not code) -> toxicity -> pii -> minhash signature]
        -> work/scored/<unit>, rejects/<unit> -> a manifest row -> the unit's marker
    global phase, three executions on narrow columns (`dedup.py`, `finalize.py`):
        exact + near dedup links (one hash shuffle) -> signatures of near edges and the
        tokenizer sample -> [driver: verify, union-find, train the BPE tokenizer] ->
        final pass: verdicts, token counts, output/ (by collection and language) +
        quarantine/ + group stats -> attrition.json, datasheet.md/.html

Every step follows `step.py`: it adds score columns and writes the first drop reason into
`drop_reason`; no step removes a row. So every row read ends in exactly one of three places,
and the runner checks it: `in == kept + dropped + rejected`, or the run fails.

Resume: the scoring (nearly all the work) is done per unit and marked complete when the
unit's manifest row reaches the driver, after its parquet was renamed into place, so
`--resume` skips finished units and redoes only those a kill interrupted. The global phase
is redone from the units' parquet on every run; its outputs are written to temporary
folders and renamed, so a resumed run writes the same set of rows.

Why this shape (it replaced ~15 executions, one per unit and step group, with actor pools
restarted per unit): each execution start costs; the scoring tasks read their own files,
so the corpus never crosses the object store; the four executions are plain Ray tasks on
the same reused workers (`fanout.py` says why not Ray Data, which ran them before), each
worker keeping its steps built between units. The global phase reads only `row_id`, `id`,
`drop_reason` and the signature (and the text of the tokenizer sample); the driver holds
what grows with the duplicates and the sample, not with the corpus (`driver_bytes` in the
summary).
"""

from __future__ import annotations

import json
import os
import sysconfig
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rayworks.core.build_cache import locked_build, settings_digest
from rayworks.core.errors import RayworksError
from rayworks.core.frozen_heap import frozen_heap
from rayworks.pipelines.corpus import readers
from rayworks.pipelines.corpus.chain import STEP_ORDER
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.datasheet import write_datasheet
from rayworks.pipelines.corpus.dedup import (
    fetch,
    find_links,
    sample_cutoff,
    sample_order,
    sample_texts,
)
from rayworks.pipelines.corpus.fanout import Timeline, WarmUp, fan_units
from rayworks.pipelines.corpus.finalize import (
    empty_stats,
    finalize_units,
    merge_stats,
    unified_schema,
)
from rayworks.pipelines.corpus.language import unpack_model
from rayworks.pipelines.corpus.neardup import resolve
from rayworks.pipelines.corpus.schema import PIPELINE_VERSION
from rayworks.pipelines.corpus.score_unit import score_unit_task
from rayworks.pipelines.corpus.sources import SourceConfig, build_corpus
from rayworks.pipelines.corpus.tokenizer import TokenizerConfig, train_bpe, vocab_size
from rayworks.pipelines.corpus.units import Unit, WorkDir, plan_units
from rayworks.platform.atomic import atomic_dir

if TYPE_CHECKING:  # not at run time: it imports torch, which the corpus workers never need
    from rayworks.platform.context import RunContext

GLOBAL_PHASE_MODULES = (find_links.__module__, finalize_units.__module__)
"""Where the global phase's task functions live: what a worker imports before its first."""

SUFFIXES = {
    "jsonl": [".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json", ".json.gz"],
    "parquet": [".parquet"],
    "text": [*readers.TEXT_EXTENSIONS, *(s + ".gz" for s in readers.TEXT_EXTENSIONS)],
    "code": list(readers.CODE_LANGUAGES),
}


def _local_corpus(cfg: CorpusConfig, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
    """The local corpus (`sources.build_corpus`), built once per source settings into the
    cache (`runs/cache/corpus_input/<hash>`, one per bench) and shared by every run and
    bench arm that asks for the same sources, so arms read byte-identical files."""
    s = cfg.sources
    site = (sysconfig.get_paths()["purelib"],) if s.python else ()
    settings = s.model_dump(mode="json") | {"site_packages": list(site)}
    key = settings_digest(settings)
    final = ctx.cache_root / "corpus_input" / key

    def build() -> None:  # under the cache's lock: concurrent runs wait, then reuse
        tmp = final.with_name(f"{key}.tmp-{os.getpid()}")
        build_corpus(
            SourceConfig(
                out_dir=str(tmp),
                site_packages=site,
                debian_doc=s.debian_doc,
                max_packages=s.max_packages,
                max_docs=s.max_docs,
                max_docs_per_package=s.max_docs_per_package,
                max_bytes=s.max_bytes,
            )
        )
        tmp.rename(final)

    locked_build(final, final / "manifest.json", build)
    manifest = json.loads((final / "manifest.json").read_text())
    if not manifest["shards"]:
        raise RayworksError("the local corpus is empty: no Python package or Debian doc found.")
    shards = [str(final / name) for name in manifest["shards"]]
    return shards, {"built_docs": manifest["documents"], "input_dir": str(final)}


def resolve_inputs(cfg: CorpusConfig, ctx: RunContext) -> tuple[list[str], str, dict[str, Any]]:
    """(paths, format, build info): `cfg.inputs` checked on the driver before any Ray work,
    or the local corpus from the cache. The DataTrove peer reads the same files."""
    if cfg.inputs:
        return readers.resolve_inputs(cfg.inputs, SUFFIXES[cfg.input_format]), cfg.input_format, {}
    shards, built = _local_corpus(cfg, ctx)
    return shards, "jsonl", built


def score_units(
    todo: list[Unit],
    fmt: str,
    cfg: CorpusConfig,
    work: WorkDir,
    out: Path,
    ctx: RunContext,
    total: int,
) -> None:
    """The scoring stage: every unit of `todo` as one task (`score_unit_task`), `cpus` at a
    time; each manifest becomes the unit's marker as it arrives. Units go out largest
    first, so the last to finish is a small one (longest-processing-time order)."""
    order = sorted(todo, key=lambda u: (-u.bytes, u.name))
    done = total - len(todo)
    shared = {
        "cfg": cfg,
        "fmt": fmt,
        "scored_root": str(work.root / "scored"),
        "rejects_root": str(out / "rejects"),
        "langid_cache": str(ctx.cache_root / "py3langid"),
    }
    calls = [{"unit": u} for u in order]
    # workers the scoring leaves idle but the global phase will use import its modules now
    used_next = min(cfg.cpus, max(cfg.dedup_hash_ranges, total))
    warm = WarmUp(used_next - min(cfg.cpus, len(order)), GLOBAL_PHASE_MODULES)
    for index, manifest in fan_units(score_unit_task, calls, cfg.cpus, shared, warm.start):
        work.finish(order[index], manifest)
        done += 1  # counted here: re-reading every marker per unit would be quadratic
        ctx.log(done, units_done=done)
    warm.wait()


def _profile(
    marks: list[dict[str, Any]], global_s: dict[str, float], phases: list[dict[str, Any]]
) -> dict[str, Any]:
    """Seconds per scoring step (summed over the tasks: CPU time of the units) and per global
    execution (wall time), and per 1,000 documents read; `phases`: the executions' tasks
    over time (`fanout.Timeline.phases`)."""
    docs = sum(m["in"] for m in marks)
    steps: Counter[str] = Counter()
    for m in marks:
        steps.update(m.get("seconds", {}))
    order = ["read", "textview", *STEP_ORDER, "write"]
    rows = [
        {"stage": "score", "step": k, "seconds": steps[k]}
        for k in sorted(steps, key=lambda k: (order.index(k) if k in order else 99, k))
    ]
    rows += [{"stage": "global", "step": k, "seconds": v} for k, v in global_s.items()]
    for r in rows:
        r["per_1000_docs"] = 1000 * r["seconds"] / docs if docs else 0.0
    return {"docs": docs, "rows": rows, "phases": phases}


def global_phase(
    cfg: CorpusConfig, units: list[tuple[str, Path]], out: Path, live: int
) -> tuple[Any, dict[str, Any], Path | None, dict[str, Any]]:
    """Dedup, tokenizer and the final pass over the units' scored folders (`dedup.py`);
    returns (group stats, dedup stats, tokenizer path, timings and driver bytes)."""
    clock = time.perf_counter
    near = cfg.near_dup() if cfg.near_dedup else None
    files = [str(folder / "part.parquet") for _, folder in units]
    t = clock()
    ranges = [
        [str(f) for _, folder in units if (f := folder / f"keys-{r:04d}.parquet").exists()]
        for r in range(cfg.dedup_hash_ranges)
    ]
    links = find_links([r for r in ranges if r], cfg.cpus)
    timing = {"dedup links": clock() - t}

    t = clock()
    ends = {row for edge in links.edges for row in edge}
    candidates = live - len(links.exact) - len(ends)
    cutoff = sample_cutoff(cfg.tokenizer_sample_docs, candidates)
    fetched = fetch(
        cfg.cpus,
        files,
        ends,
        set(links.exact),
        cutoff,
        near,
        cfg.tokenizer_sample_docs,
        cfg.tokenizer_sample_chars,
    )
    timing["signatures + sample"] = clock() - t

    t = clock()
    dedup_stats: dict[str, Any] = {"exact_duplicate_ids": len(set(links.exact.values()))}
    near_drop: dict[int, str] = {}
    if near is not None:
        found = resolve(links.edges, fetched.signatures, fetched.ids, near)
        near_drop = found.drop
        dedup_stats["near"] = found.stats()
    order = sample_order(fetched.sample, sorted(near_drop), cfg.tokenizer_sample_docs)
    tokenizer = None
    if len(order):
        tok_cfg = TokenizerConfig(
            vocab_size=cfg.tokenizer_vocab_size, max_chars=cfg.tokenizer_sample_chars
        )
        texts = sample_texts(fetched.sample, order)
        tokenizer = train_bpe(texts, tok_cfg, out / "tokenizer.json", threads=cfg.cpus)
    timing["cluster + tokenizer"] = clock() - t

    t = clock()
    near_rows = np.asarray(sorted(near_drop), dtype=np.int64)
    verdicts = (
        np.asarray(sorted(links.exact), dtype=np.int64),
        near_rows,
        np.asarray([near_drop[r] for r in near_rows.tolist()], dtype=object),
    )
    # largest unit first (longest-processing-time order), so the pass does not end on one
    # big unit while the other CPUs idle; output names carry the unit, so order is free
    order = sorted(range(len(units)), key=lambda i: (-os.path.getsize(files[i]), i))
    with atomic_dir(out / "output") as output, atomic_dir(out / "quarantine") as quarantine:
        parts = finalize_units(
            cfg.cpus,
            [units[i][0] for i in order],
            [files[i] for i in order],
            unified_schema(files),
            verdicts,
            str(tokenizer) if tokenizer else None,
            output,
            quarantine,
            cfg.batch_size,
        )
    stats = merge_stats(parts)
    timing["final pass"] = clock() - t
    driver = {
        "links": links.driver_bytes,
        "fetch": fetched.driver_bytes,
        "stats": int(sum(p.memory_usage(deep=True).sum() for p in parts)),
    }
    return stats, dedup_stats, tokenizer, {"seconds": timing, "driver_bytes": driver}


def run_corpus(cfg: CorpusConfig, ctx: RunContext) -> dict[str, Any]:
    """Curate the inputs unit by unit (resumable), then dedup, tokenize, write, account;
    the driver's objects from before the run are left out of the collector's full passes
    meanwhile (`core/frozen_heap.py`: one pass cost 0.14 s between scoring and dedup)."""
    with frozen_heap():
        return _curate(cfg, ctx)


def _curate(cfg: CorpusConfig, ctx: RunContext) -> dict[str, Any]:
    paths, fmt, built = resolve_inputs(cfg, ctx)  # raises on a wrong path before any Ray work
    # the language classifier's tables, built once per machine into the build cache (like
    # the local corpus above), so no run's clock holds their build; the scoring children
    # map them (`chain.build_steps`), as the DataTrove peer does
    unpack_model(ctx.cache_root / "py3langid")
    start, origin, timeline = time.perf_counter(), time.time(), Timeline()
    out = ctx.artifacts_dir
    work = WorkDir(out / "work", outputs=[out / "rejects"])
    units = plan_units(paths, cfg.unit_bytes, fmt)
    todo = work.adopt(units, cfg.resume_settings())  # a resume under other settings raises
    ctx.progress(len(units) + 1, "corpus")
    with timeline.record():
        score_units(todo, fmt, cfg, work, out, ctx, len(units))
    scoring_s = time.perf_counter() - start
    marks = work.counts()
    total = sum(m["in"] for m in marks)
    rejected = sum((Counter(m["rejected"]) for m in marks), Counter())

    scored = [(u.name, work.root / "scored" / u.name) for u in units]
    scored = [(name, folder) for name, folder in scored if (folder / "part.parquet").exists()]
    stats, dedup_stats, tokenizer = empty_stats(), {"exact_duplicate_ids": 0}, None
    phase: dict[str, Any] = {"seconds": {}, "driver_bytes": {}}
    if scored:
        live = sum(m.get("live", 0) for m in marks)
        with timeline.record():
            stats, dedup_stats, tokenizer, phase = global_phase(cfg, scored, out, live)
    else:
        for name in ("output", "quarantine"):
            (out / name).mkdir(parents=True, exist_ok=True)
    (out / "rejects").mkdir(parents=True, exist_ok=True)

    dropped = Counter(
        {str(r): int(n) for r, n in stats.groupby("drop_reason")["docs"].sum().items() if r}
    )
    kept = int(stats.loc[stats["drop_reason"] == "", "docs"].sum())
    n_rejected, n_dropped = sum(rejected.values()), sum(dropped.values())
    if total != kept + n_dropped + n_rejected:
        raise RayworksError(
            f"corpus counts do not reconcile: in={total} but kept={kept} + dropped={n_dropped} "
            f"+ rejected={n_rejected} = {kept + n_dropped + n_rejected}; a step lost or "
            "duplicated rows."
        )
    seconds = time.perf_counter() - start
    attrition = attrition_table(total, rejected, dropped)
    (out / "attrition.json").write_text(
        json.dumps(
            {
                "in": total,
                "kept": kept,
                "rejected": dict(rejected),
                "dropped": dict(dropped),
                "steps": attrition,
            },
            indent=2,
            sort_keys=True,
        )
    )
    profile = _profile(
        marks,
        {"scoring (wall)": scoring_s, **phase["seconds"]},
        timeline.phases(origin, cfg.cpus),
    )
    driver_bytes = sum(phase["driver_bytes"].values())
    in_bytes = sum(u.bytes for u in units)
    meta = {
        "pipeline_version": PIPELINE_VERSION,
        "open_only": cfg.open_only,
        "seconds": seconds,
        "inputs": cfg.inputs or built.get("input_dir", ""),
        "units": len(units),
        "resumed_units": len(units) - len(todo),
        "tokenizer_vocab_size": vocab_size(tokenizer) if tokenizer else 0,
        "driver_bytes_per_row": driver_bytes / total if total else 0.0,
    }
    write_datasheet(out, stats, attrition, dedup_stats, meta, profile)
    (out / "profile.json").write_text(json.dumps(profile, indent=2))
    near = dedup_stats.get("near", {})
    summary = {
        "in": total,
        "kept": kept,
        "dropped": n_dropped,
        "rejected": n_rejected,
        "kept_share": kept / total if total else 0.0,
        "seconds": seconds,
        "docs_per_s": total / seconds if seconds > 0 else 0.0,
        "docs_counted": readers.DOCS_COUNTED,  # the DataTrove peer divides the same count
        "mb_per_s": in_bytes / 2**20 / seconds if seconds > 0 else 0.0,
        "kept_tokens": int(stats.loc[stats["drop_reason"] == "", "tokens"].sum()),
        "duplicate_ids": dedup_stats["exact_duplicate_ids"],
        "near_dup_clusters": near.get("n_clusters", 0),
        "near_dup_threshold": cfg.near_dup().threshold if cfg.near_dedup else 0.0,
        "units": len(units),
        "scoring_seconds": scoring_s,
        "driver_bytes": driver_bytes,
        "driver_bytes_per_row": meta["driver_bytes_per_row"],
        "child_restarts": sum(m.get("restarts", 0) for m in marks),
        "resumed_units": len(units) - len(todo),
        **built,
        **{f"dropped_{r.replace(':', '_')}": n for r, n in sorted(dropped.items())},
        **{f"rejected_{r.replace(':', '_')}": n for r, n in sorted(rejected.items())},
    }
    ctx.log(len(units) + 1, **{k: v for k, v in summary.items() if isinstance(v, int | float)})
    return summary


def attrition_table(
    total: int, rejected: Counter[str], dropped: Counter[str]
) -> list[dict[str, Any]]:
    """Rows remaining after each stage: read, reader rejects, then each step of
    `STEP_ORDER` (first reason wins, so a row counts for the first step that dropped it)."""
    left = total - sum(rejected.values())
    rows = [
        {"step": "read", "removed": 0, "left": total},
        {"step": "reject", "removed": total - left, "left": left, "reasons": dict(rejected)},
    ]
    by_step: Counter[str] = Counter()
    for reason, n in dropped.items():
        by_step[reason.split(":", 1)[0]] += n
    for step in STEP_ORDER + tuple(sorted(set(by_step) - set(STEP_ORDER))):
        left -= by_step[step]
        rows.append({"step": step, "removed": by_step[step], "left": left})
    return rows
