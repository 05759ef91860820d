"""The corpus runner: the steps of `corpus/` wired into one resumable Ray Data pipeline.

    per unit of input files (`units.py`):
        read -> split rejects -> [normalize -> license gate -> language -> gopher,
        repetition, c4 (not code) | code quality (code only) -> ocr (not code) -> toxicity
        -> pii -> minhash signature] -> work/scored/<unit>, rejects/<unit>, marker
    over all units:
        exact dedup on `id` -> MinHash-LSH near-dup dedup (clustered over Ray) -> BPE
        tokenizer trained on the kept rows -> token counts -> output/ (by collection and
        language) + quarantine/ -> attrition.json, datasheet.md/.html

Every step follows `step.py`: it adds score columns and writes the first drop reason into
`drop_reason`; no step removes a row. So every row read ends in exactly one of three places,
and the runner checks it: `in == kept + dropped + rejected`, or the run fails.

Resume: the scoring (nearly all the work) is done per unit and marked complete only after
its parquet is renamed into place, so `--resume` skips finished units and redoes at most
the one a kill interrupted. The dedup, tokenizer and writes are global (a duplicate may sit
in any unit) and are redone from the units' parquet on every run; their outputs are
written to temporary folders and renamed, so a resumed run writes the same set of rows.

Execution: every step runs in one actor-pool stage of `cpus` actors (`StepChain`), the
tokenizer count in another; Ray Data's CPU budget is set to `cpus`. Exact dedup collects
`(id, source_path, line)` of live rows on the driver (a few dozen bytes per document) and
keeps, per id, the row of the smallest `(source_path, line)`, so the kept copy does not
depend on block order. Every reader gives each row a key of its own (jsonl: the line,
parquet: the row number in its file, text and code: one document per file), so of N
copies exactly one is kept. Only rows that share id *and* key cannot be told apart (an
input repeating a prebuilt row's `source_path` and `line`, as `sources.py` writes them);
they are all kept.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import os
import shutil
import sysconfig
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray
from ray.data._internal.execution.interfaces import ExecutionResources

from rayworks.errors import RayworksError
from rayworks.pipelines.corpus import readers, textview
from rayworks.pipelines.corpus.code_quality import CodeQuality, CodeQualityConfig
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.datasheet import write_datasheet
from rayworks.pipelines.corpus.language import LanguageId, LanguageIdConfig
from rayworks.pipelines.corpus.licenses import OPEN_STATUSES
from rayworks.pipelines.corpus.neardup import (
    SIGNATURE,
    MinHashSignature,
    NearDedup,
    NearDupConfig,
    line_key,
    near_duplicates,
)
from rayworks.pipelines.corpus.normalize import Normalize
from rayworks.pipelines.corpus.pii_step import PIIRedaction, redact_rejects
from rayworks.pipelines.corpus.quality import (
    C4Quality,
    C4QualityConfig,
    GopherQuality,
    GopherQualityConfig,
    GopherRepetition,
    GopherRepetitionConfig,
    OCRQuality,
    OCRQualityConfig,
)
from rayworks.pipelines.corpus.schema import PIPELINE_VERSION
from rayworks.pipelines.corpus.sources import SourceConfig, build_corpus
from rayworks.pipelines.corpus.step import DROP, Batch, alive, drop, size
from rayworks.pipelines.corpus.tokenizer import (
    TokenCount,
    TokenizerConfig,
    train_bpe,
    vocab_size,
)
from rayworks.pipelines.corpus.toxicity import Toxicity, ToxicityConfig
from rayworks.pipelines.corpus.units import (
    Unit,
    WorkDir,
    atomic_dir,
    commit_dir,
    plan_units,
)

if TYPE_CHECKING:  # not at run time: it imports torch, which Ray Data workers never need
    from rayworks.platform.context import RunContext

DEDUP_EXACT = "dedup:exact"
GROUP_KEYS = ("drop_reason", "collection", "lang", "license_status", "license")
STEP_ORDER = ("normalize", "license", "language", "gopher", "repetition", "c4", "code", "ocr",
              "toxicity", "pii", "minhash", "dedup")  # fmt: skip
"""Steps in run order: the attrition table lists drops by the step named before ':'."""

READERS: dict[str, Callable[..., ray.data.Dataset]] = {
    "jsonl": readers.read_jsonl,
    "parquet": readers.read_parquet_docs,
    "text": readers.read_text_folder,
    "code": readers.read_code_tree,
}
SUFFIXES = {"jsonl": [".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json", ".json.gz"],
            "parquet": [".parquet"],
            "text": [*readers.TEXT_EXTENSIONS, *(s + ".gz" for s in readers.TEXT_EXTENSIONS)],
            "code": list(readers.CODE_LANGUAGES)}  # fmt: skip


class LicenseGate:
    """Step `license`: rows whose license is not public-domain or permissive get
    `license:<status>` (e.g. `license:copyleft`, `license:unknown`) when `open_only`; the
    open output must never hold a document without evidence that it may be shared."""

    name: ClassVar[str] = "license"
    stateful: ClassVar[bool] = False

    def __init__(self, open_only: bool = True) -> None:
        self.open_only = open_only

    def __call__(self, batch: Batch) -> Batch:
        verdicts = [
            f"license:{status}" if self.open_only and status not in OPEN_STATUSES else ""
            for status in batch["license_status"]
        ]
        return drop(batch, verdicts)


class SkipCollections:
    """Run `step` only on rows outside the `skip` collections; skipped rows keep their
    verdict and text and get null scores.

    Gopher, repetition, C4 and OCR rules are prose rules: on source code they would drop
    nearly every file (no stop words, "{" everywhere), so code rows are judged by
    `CodeQuality` alone, which in turn judges only the code collection. Scoring code rows
    anyway cost more than half the pipeline's time (OCR's segment-wise language ID and
    the repetition n-grams on long source files) for scores nobody should filter on.
    A batch of skipped rows only still runs the step on its first row, whose results are
    discarded, so every block gets the same score columns (parquet needs one schema).
    """

    def __init__(self, step: Callable[[Batch], Batch], skip: tuple[str, ...] = ("code",)):
        self.step, self.skip = step, skip

    def __call__(self, batch: Batch) -> Batch:
        n = size(batch)
        skipped = np.asarray([str(c) in self.skip for c in batch["collection"]], dtype=bool)
        if n == 0 or not skipped.any():
            return self.step(batch)
        run = np.flatnonzero(~skipped)
        probe = run if len(run) else np.arange(1)
        sub = self.step({k: _column(v)[probe] for k, v in batch.items()})
        out = dict(batch)
        for col, values in sub.items():
            full = _column(batch[col]).copy() if col in batch else np.full(n, None, object)
            if col == DROP and col not in batch:
                full = np.full(n, "", dtype=object)
            if len(run):
                full[run] = _column(values)
            out[col] = full
        return out


def _column(values: Any) -> np.ndarray:
    """A batch column as an object array (row-indexable, any cell type)."""
    return np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values


def exact_keepers(ds: ray.data.Dataset) -> dict[str, tuple[str, int]]:
    """For every id held by more than one live row: the `(source_path, line)` to keep."""
    first: dict[str, tuple[str, int]] = {}
    copies: Counter[str] = Counter()

    def live_keys(t: pa.Table) -> pa.Table:
        return t.filter(pc.equal(t[DROP], "")).select(["id", "source_path", "line"])

    keys = ds.map_batches(live_keys, batch_format="pyarrow")
    for batch in keys.iter_batches(batch_format="pyarrow"):
        for row_id, path, line in zip(
            *(batch[c].to_pylist() for c in batch.column_names), strict=True
        ):
            key = (str(path), line_key(line))
            copies[row_id] += 1
            if row_id not in first or key < first[row_id]:
                first[row_id] = key
    return {i: first[i] for i, n in copies.items() if n > 1}


class ExactDedup:
    """Step `dedup`: a live row whose id has a keeper elsewhere gets `dedup:exact`."""

    name: ClassVar[str] = "dedup"
    stateful: ClassVar[bool] = False

    def __init__(self, keepers: dict[str, tuple[str, int]]) -> None:
        self.keepers = keepers

    def __call__(self, batch: Batch) -> Batch:
        rows = zip(batch["id"], batch["source_path"], batch["line"], strict=True)
        verdicts = [
            DEDUP_EXACT
            if keep and i in self.keepers and self.keepers[i] != (str(p), line_key(ln))
            else ""
            for (i, p, ln), keep in zip(rows, alive(batch), strict=True)
        ]
        return drop(batch, verdicts)


def _local_corpus(cfg: CorpusConfig, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
    """The local corpus (`sources.build_corpus`), built once per source settings into the
    cache (`runs/cache/corpus_input/<hash>`, one per bench) and shared by every run and
    bench arm that asks for the same sources, so arms read byte-identical files."""
    s = cfg.sources
    site = (sysconfig.get_paths()["purelib"],) if s.python else ()
    settings = s.model_dump(mode="json") | {"site_packages": list(site)}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    final = ctx.cache_root / "corpus_input" / key
    if not (final / "manifest.json").exists():
        tmp = final.with_name(f"{key}.tmp-{os.getpid()}")
        build_corpus(SourceConfig(
            out_dir=str(tmp), site_packages=site, debian_doc=s.debian_doc,
            max_packages=s.max_packages, max_docs=s.max_docs,
            max_docs_per_package=s.max_docs_per_package, max_bytes=s.max_bytes))  # fmt: skip
        try:
            tmp.rename(final)
        except OSError:  # another run built it meanwhile: theirs is identical
            shutil.rmtree(tmp, ignore_errors=True)
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


def build_steps(cfg: CorpusConfig) -> list[Callable[[Batch], Batch]]:
    """Every scoring step, in `STEP_ORDER`, configured from `cfg`."""
    every = cfg.score_dropped  # score rows already dropped too (analysis; `step.py`)
    lang_cfg = LanguageIdConfig(
        allowed=tuple(cfg.languages) if cfg.languages else None,
        min_confidence=cfg.language_min_confidence, max_chars=cfg.language_max_chars,
        score_dropped=every)  # fmt: skip
    steps: list[Callable[[Batch], Batch]] = [
        Normalize(), LicenseGate(cfg.open_only), LanguageId(lang_cfg),
        SkipCollections(GopherQuality(GopherQualityConfig(min_words=cfg.gopher_min_words,
                                                          score_dropped=every))),
    ]  # fmt: skip
    if cfg.repetition:
        steps.append(SkipCollections(GopherRepetition(GopherRepetitionConfig(score_dropped=every))))
    if cfg.c4:
        steps.append(SkipCollections(C4Quality(C4QualityConfig(score_dropped=every))))
    steps += [
        CodeQuality(CodeQualityConfig(score_dropped=every)),
        SkipCollections(OCRQuality(OCRQualityConfig(min_consistency=cfg.ocr_min_consistency,
                                                    score_dropped=every))),
        Toxicity(ToxicityConfig(max_score=cfg.toxicity_max_score, score_dropped=every)),
        PIIRedaction(),
    ]  # fmt: skip
    if cfg.near_dedup:
        steps.append(MinHashSignature(near_dup_config(cfg)))
    return steps


def near_dup_config(cfg: CorpusConfig) -> NearDupConfig:
    return NearDupConfig(ngram=cfg.minhash_ngram, bands=cfg.minhash_bands, rows=cfg.minhash_rows)


class StepChain:
    """All scoring steps of a batch in one Ray Data stage, run by an actor pool.

    Each actor builds the steps once (the language model, the compiled word lists and the
    PII patterns load in `__init__`). The stateless steps run inside the same actors
    rather than as separate task stages: a chain task -> actor -> task -> actor would move
    every batch through the object store once per stage, and with a CPU budget of one the
    task stages would wait on CPUs the actor pool holds. One stage of `cpus` actors keeps
    every reserved core busy, which is what the 1 -> 2 CPU scaling in the bench measures.
    Its input is always materialized and its output materialized before any other stage
    runs: a pool of `cpus` actors holds the whole CPU budget, so a task stage before or
    after it in the same execution would wait forever for a CPU.
    The chain gives each batch a shared text view (`textview.py`: words, lines, word ids
    and character counts of each row, built on first use and reused by every later step)
    and removes it before the batch leaves the actor.
    """

    def __init__(self, cfg: CorpusConfig) -> None:
        self.steps = build_steps(cfg)

    def __call__(self, batch: Batch) -> Batch:
        batch = textview.attach(batch)
        for step in self.steps:
            batch = step(batch)
        return textview.detach(batch)


def score(good: ray.data.Dataset, cfg: CorpusConfig) -> ray.data.Dataset:
    """Every step up to the MinHash signature on the reader's good rows (lazy)."""
    return good.map_batches(
        StepChain, fn_constructor_args=(cfg,), batch_size=cfg.batch_size, batch_format="numpy",
        num_cpus=1, compute=ray.data.ActorPoolStrategy(size=cfg.cpus))  # fmt: skip


def _blocks(ds: ray.data.Dataset, cfg: CorpusConfig) -> ray.data.Dataset:
    """Split a materialized read into enough blocks to keep `cpus` actors busy (a jsonl
    shard is read as one block); no shuffle, so it only slices."""
    rows = ds.count()
    want = max(1, min(4 * cfg.cpus, math.ceil(rows / cfg.batch_size)))
    return ds.repartition(want, shuffle=False) if ds.num_blocks() < want else ds


def run_unit(unit: Unit, fmt: str, cfg: CorpusConfig, work: WorkDir, out: Path) -> None:
    """Read, score and write one unit: its scored rows to `work/scored/<unit>`, its reader
    rejects to `rejects/<unit>` (both renamed into place), then its marker."""
    reader_cfg = readers.ReaderConfig(text_field=cfg.text_field, collection=cfg.collection,
                                      license=cfg.license)  # fmt: skip
    read = _blocks(READERS[fmt](list(unit.files), reader_cfg).materialize(), cfg).materialize()
    good, rejects = readers.split_rejects(read)
    scored_dir, reject_dir = work.root / "scored" / unit.name, out / "rejects" / unit.name
    tmp_scored, tmp_rejects = atomic_dir(scored_dir), atomic_dir(reject_dir)
    score(good, cfg).materialize().write_parquet(str(tmp_scored))
    # rejects are few and small (raw input is truncated): one pass, written here, their raw
    # input PII-redacted like the corpus itself
    batches = rejects.iter_batches(batch_format="pyarrow", batch_size=None)
    parts = [redact_rejects(b) for b in batches if len(b)]
    if parts:
        pq.write_table(pa.concat_tables(parts), tmp_rejects / "rejects.parquet")
    rejected = Counter(r for b in parts for r in b["reason"].to_pylist())
    commit_dir(tmp_scored, scored_dir)
    commit_dir(tmp_rejects, reject_dir)
    work.finish(unit, {"in": read.count(), "rejected": dict(rejected)})


def _scored(work: WorkDir) -> ray.data.Dataset | None:
    files = sorted(str(p) for p in (work.root / "scored").rglob("*.parquet"))
    return ray.data.read_parquet(files) if files else None


def dedup(scored: ray.data.Dataset, cfg: CorpusConfig) -> tuple[ray.data.Dataset, dict]:
    """Exact dedup on `id`, then MinHash-LSH near-duplicate dedup (clustered over Ray) on
    the rows still alive; returns the relabelled dataset (lazy) and the dedup statistics."""
    keepers = exact_keepers(scored)
    ds = scored.map_batches(ExactDedup(keepers), batch_format="numpy")
    stats: dict[str, Any] = {"exact_duplicate_ids": len(keepers)}
    if cfg.near_dedup:
        ds = ds.materialize()
        found = near_duplicates(ds, near_dup_config(cfg))
        ds = ds.map_batches(NearDedup(found.drop), batch_format="numpy")
        stats["near"] = found.stats()
    return ds, stats


def train_tokenizer(ds: ray.data.Dataset, cfg: CorpusConfig, out: Path) -> Path | None:
    """A byte-level BPE trained on the kept documents: the `tokenizer_sample_docs` with the
    smallest ids, in id order, so the tokenizer does not depend on block order (one pass,
    a bounded heap instead of a Ray Data sort); None when nothing was kept."""
    kept = ds.map_batches(_where(True), batch_format="pyarrow").select_columns(["id", "text"])
    rows = (
        row
        for batch in kept.iter_batches(batch_format="pyarrow", batch_size=None)
        for row in zip(batch["id"].to_pylist(), batch["text"].to_pylist(), strict=True)
    )
    sample = heapq.nsmallest(cfg.tokenizer_sample_docs, rows, key=lambda row: row[0])
    if not sample:
        return None
    return train_bpe((text for _, text in sample), TokenizerConfig(
        vocab_size=cfg.tokenizer_vocab_size), out / "tokenizer.json")  # fmt: skip


def write_outputs(final: ray.data.Dataset, out: Path) -> None:
    """Kept rows to `output/` (partitioned by collection and language) and dropped rows to
    `quarantine/`, each written to a temporary folder and renamed into place, so a run
    killed while writing leaves no half output and its resume writes the same set."""
    for name, kept in (("output", True), ("quarantine", False)):
        tmp = atomic_dir(out / name)
        rows = final.map_batches(_where(kept), batch_format="pyarrow")
        if kept:
            rows.write_parquet(str(tmp), partition_cols=["collection", "lang"])
        else:
            rows.write_parquet(str(tmp))
        commit_dir(tmp, out / name)


def run_corpus(cfg: CorpusConfig, ctx: RunContext) -> dict[str, Any]:
    """Curate the inputs unit by unit (resumable), then dedup, tokenize, write, account."""
    paths, fmt, built = resolve_inputs(cfg, ctx)  # raises on a wrong path before any Ray work
    start = time.perf_counter()
    ray.data.DataContext.get_current().execution_options.resource_limits = ExecutionResources(
        cpu=cfg.cpus
    )
    out = ctx.artifacts_dir
    work = WorkDir(out / "work", outputs=[out / "rejects"])
    units = plan_units(paths, cfg.unit_bytes)
    todo = work.adopt(units, cfg.resume_settings())  # a resume under other settings raises
    ctx.progress(len(units) + 1, "corpus")
    for unit in todo:
        run_unit(unit, fmt, cfg, work, out)
        ctx.log(int(unit.name.split("-")[1]) + 1, units_done=len(work.counts()))
    marks = work.counts()
    total = sum(m["in"] for m in marks)
    rejected = sum((Counter(m["rejected"]) for m in marks), Counter())

    scored = _scored(work)
    stats, dedup_stats, tokenizer = _empty_stats(), {"exact_duplicate_ids": 0}, None
    if scored is not None:
        ds, dedup_stats = dedup(scored, cfg)
        ds = (ds.drop_columns([SIGNATURE]) if cfg.near_dedup else ds).materialize()
        tokenizer = train_tokenizer(ds, cfg, out)
        if tokenizer is not None:  # the actor stage is the last op: see `StepChain`
            ds = ds.map_batches(
                TokenCount, fn_constructor_args=(str(tokenizer),), batch_size=cfg.batch_size,
                batch_format="numpy", num_cpus=1,
                compute=ray.data.ActorPoolStrategy(size=cfg.cpus))  # fmt: skip
        final = ds.materialize()
        write_outputs(final, out)
        parts = [b for b in final.map_batches(_group_stats, batch_format="pandas")
                 .iter_batches(batch_format="pandas", batch_size=None) if len(b)]  # fmt: skip
        stats = _group_stats_merge(parts)
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
    (out / "attrition.json").write_text(json.dumps(
        {"in": total, "kept": kept, "rejected": dict(rejected), "dropped": dict(dropped),
         "steps": attrition}, indent=2, sort_keys=True))  # fmt: skip
    in_bytes = sum(u.bytes for u in units)
    meta = {"pipeline_version": PIPELINE_VERSION, "open_only": cfg.open_only, "seconds": seconds,
            "inputs": cfg.inputs or built.get("input_dir", ""), "units": len(units),
            "resumed_units": len(units) - len(todo),
            "tokenizer_vocab_size": vocab_size(tokenizer) if tokenizer else 0}  # fmt: skip
    write_datasheet(out, stats, attrition, dedup_stats, meta)
    near = dedup_stats.get("near", {})
    summary = {
        "in": total, "kept": kept, "dropped": n_dropped, "rejected": n_rejected,
        "kept_share": kept / total if total else 0.0, "seconds": seconds,
        "docs_per_s": total / seconds if seconds > 0 else 0.0,
        "docs_counted": readers.DOCS_COUNTED,  # the DataTrove peer divides the same count
        "mb_per_s": in_bytes / 2**20 / seconds if seconds > 0 else 0.0,
        "kept_tokens": int(stats.loc[stats["drop_reason"] == "", "tokens"].sum()),
        "duplicate_ids": dedup_stats["exact_duplicate_ids"],
        "near_dup_clusters": near.get("n_clusters", 0),
        "near_dup_threshold": near_dup_config(cfg).threshold if cfg.near_dedup else 0.0,
        "units": len(units),
        "resumed_units": len(units) - len(todo), **built,
        **{f"dropped_{r.replace(':', '_')}": n for r, n in sorted(dropped.items())},
        **{f"rejected_{r.replace(':', '_')}": n for r, n in sorted(rejected.items())},
    }  # fmt: skip
    ctx.log(len(units) + 1, **{k: v for k, v in summary.items() if isinstance(v, int | float)})
    return summary


def _where(kept: bool) -> Callable[[pa.Table], pa.Table]:
    def select(t: pa.Table) -> pa.Table:
        return t.filter(pc.equal(t[DROP], "") if kept else pc.not_equal(t[DROP], ""))

    return select


def _group_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Docs, characters, tokens and PII counts per `GROUP_KEYS` group."""
    pii = sorted(c for c in df.columns if c.startswith("pii_"))
    tokens = df.get("tokens", 0)
    df = df.assign(docs=1, chars=df["text"].astype(str).str.len(), tokens=tokens,
                   lang=df["lang"].fillna("und"), license=df["license"].fillna("none"))  # fmt: skip
    cols = ["docs", "chars", "tokens", *pii]
    return df.groupby(list(GROUP_KEYS), dropna=False)[cols].sum().reset_index()


def _empty_stats() -> pd.DataFrame:
    return pd.DataFrame({k: pd.Series(dtype=object) for k in GROUP_KEYS}).assign(
        docs=pd.Series(dtype=int), chars=pd.Series(dtype=int), tokens=pd.Series(dtype=int)
    )


def _group_stats_merge(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-batch group stats summed into one table (an empty one with the key columns when
    nothing was read)."""
    if not parts:
        return _empty_stats()
    df = pd.concat(parts, ignore_index=True)
    return df.groupby(list(GROUP_KEYS), dropna=False).sum(numeric_only=True).reset_index()


def attrition_table(
    total: int, rejected: Counter[str], dropped: Counter[str]
) -> list[dict[str, Any]]:
    """Rows remaining after each stage: read, reader rejects, then each step of
    `STEP_ORDER` (first reason wins, so a row counts for the first step that dropped it)."""
    left = total - sum(rejected.values())
    rows = [{"step": "read", "removed": 0, "left": total},
            {"step": "reject", "removed": total - left, "left": left,
             "reasons": dict(rejected)}]  # fmt: skip
    by_step: Counter[str] = Counter()
    for reason, n in dropped.items():
        by_step[reason.split(":", 1)[0]] += n
    for step in STEP_ORDER + tuple(sorted(set(by_step) - set(STEP_ORDER))):
        left -= by_step[step]
        rows.append({"step": step, "removed": by_step[step], "left": left})
    return rows
