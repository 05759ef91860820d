"""The corpus runner: the steps of `corpus/` wired into one Ray Data pipeline (issue 6).

    read -> split rejects -> normalize -> license gate -> language -> gopher, repetition,
    c4 (not code) | code quality (code only) -> ocr (not code) -> toxicity -> pii
    -> exact dedup on `id` -> write output / quarantine / rejects

Every step follows `step.py`: it adds score columns and writes the first drop reason into
`drop_reason`; no step removes a row. So every row read ends in exactly one of three places,
and the runner checks it: `in == kept + dropped + rejected`, or the run fails.

Execution: the read is materialized once (reader rows are routed into good rows and
rejects without reading twice), and so is the scored dataset (the dedup keys, the writers
and the counters all consume it; without `materialize` each would re-run every step).
Stateless steps run as Ray tasks, stateful ones (a model, compiled word lists) in actor
pools built once per actor. Exact dedup collects `(id, source_path, line)` of live rows on
the driver (a few dozen bytes per document) and keeps, per id, the row of the smallest
`(source_path, line)`, so the kept copy does not depend on block order. Rows with the same
id *and* the same key (parquet rows carry no line) cannot be told apart and are all kept.

Not done yet (issue 6): distributed near-duplicate dedup (`minhash.py` is not wired in),
tokenizer training, the HTML datasheet, the DataTrove bench and resume.
"""

from __future__ import annotations

import json
import math
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
import ray

from rayworks.errors import RayworksError
from rayworks.pipelines.corpus import readers
from rayworks.pipelines.corpus.code_quality import CodeQuality
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.language import LanguageId, LanguageIdConfig
from rayworks.pipelines.corpus.licenses import OPEN_STATUSES
from rayworks.pipelines.corpus.normalize import Normalize
from rayworks.pipelines.corpus.pii_step import PIIRedaction
from rayworks.pipelines.corpus.quality import (
    C4Quality,
    GopherQuality,
    GopherQualityConfig,
    GopherRepetition,
    OCRQuality,
    OCRQualityConfig,
)
from rayworks.pipelines.corpus.sources import SourceConfig, build_corpus
from rayworks.pipelines.corpus.step import DROP, Batch, alive, drop, reasons
from rayworks.pipelines.corpus.toxicity import Toxicity, ToxicityConfig

if TYPE_CHECKING:  # not at run time: it imports torch, which Ray Data workers never need
    from rayworks.platform.context import RunContext

DEDUP_EXACT = "dedup:exact"
GROUP_KEYS = ("drop_reason", "collection", "lang", "license_status")
STEP_ORDER = ("normalize", "license", "language", "gopher", "repetition", "c4", "code", "ocr",
              "toxicity", "pii", "dedup")  # fmt: skip
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
    """Run `step` but keep its verdicts and text rewrites off rows of `skip` collections.

    Gopher, repetition, C4 and OCR rules are prose rules: on source code they would drop
    nearly every file (no stop words, "{" everywhere), so code rows are only scored by them
    and judged by `CodeQuality`, which in turn judges only the code collection itself.
    """

    def __init__(self, step: Callable[[Batch], Batch], skip: tuple[str, ...] = ("code",)):
        self.step, self.skip = step, skip

    def __call__(self, batch: Batch) -> Batch:
        out = self.step(batch)
        skipped = [str(c) in self.skip for c in batch["collection"]]
        pairs = zip(skipped, reasons(batch), reasons(out), batch["text"], out["text"], strict=True)
        merged = [(old, t0) if s else (new, t1) for s, old, new, t0, t1 in pairs]
        out[DROP] = np.asarray([r for r, _ in merged], dtype=object)
        out["text"] = np.asarray([t for _, t in merged], dtype=object)
        return out


def _line_key(value: Any) -> int:
    """`line` as an int sort key (-1 for none; numpy batches may turn nulls into NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return -1
    return int(value)


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
            key = (str(path), _line_key(line))
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
            if keep and i in self.keepers and self.keepers[i] != (str(p), _line_key(ln))
            else ""
            for (i, p, ln), keep in zip(rows, alive(batch), strict=True)
        ]
        return drop(batch, verdicts)


def _inputs(cfg: CorpusConfig, ctx: RunContext) -> tuple[list[str], str, dict[str, Any]]:
    """(paths, format, build info): `cfg.inputs` checked on the driver before any Ray work,
    or the local corpus built into the run's artifacts."""
    if cfg.inputs:
        return readers.resolve_inputs(cfg.inputs, SUFFIXES[cfg.input_format]), cfg.input_format, {}
    s = cfg.sources
    site = (sysconfig.get_paths()["purelib"],) if s.python else ()
    manifest = build_corpus(SourceConfig(
        out_dir=str(ctx.artifacts_dir / "input"), site_packages=site, debian_doc=s.debian_doc,
        max_packages=s.max_packages, max_docs=s.max_docs,
        max_docs_per_package=s.max_docs_per_package, max_bytes=s.max_bytes))  # fmt: skip
    if not manifest.shards:
        raise RayworksError("the local corpus is empty: no Python package or Debian doc found.")
    shards = [str(ctx.artifacts_dir / "input" / name) for name in manifest.shards]
    return shards, "jsonl", {"build_s": manifest.seconds, "built_docs": manifest.documents}


def score(good: ray.data.Dataset, cfg: CorpusConfig) -> ray.data.Dataset:
    """Every step up to PII on the reader's good rows (lazy)."""
    tasks = {"batch_size": cfg.batch_size, "batch_format": "numpy"}
    actors = {**tasks, "num_cpus": cfg.actor_cpus,
              "compute": ray.data.ActorPoolStrategy(size=cfg.actor_pool_size)}  # fmt: skip
    lang_cfg = LanguageIdConfig(
        allowed=tuple(cfg.languages) if cfg.languages else None,
        min_confidence=cfg.language_min_confidence,
    )
    ds = good.map_batches(Normalize(), **tasks)
    ds = ds.map_batches(LicenseGate(cfg.open_only), **tasks)
    ds = ds.map_batches(LanguageId, fn_constructor_args=(lang_cfg,), **actors)
    ds = ds.map_batches(SkipCollections(GopherQuality(
        GopherQualityConfig(min_words=cfg.gopher_min_words))), **tasks)  # fmt: skip
    if cfg.repetition:
        ds = ds.map_batches(SkipCollections(GopherRepetition()), **tasks)
    if cfg.c4:
        ds = ds.map_batches(SkipCollections(C4Quality()), **tasks)
    ds = ds.map_batches(CodeQuality(), **tasks)
    ocr_cfg = OCRQualityConfig(min_consistency=cfg.ocr_min_consistency)
    ds = ds.map_batches(_SkipCodeOCR, fn_constructor_args=(ocr_cfg,), **actors)
    tox_cfg = ToxicityConfig(max_score=cfg.toxicity_max_score)
    ds = ds.map_batches(Toxicity, fn_constructor_args=(tox_cfg,), **actors)
    return ds.map_batches(PIIRedaction(), **tasks)


class _SkipCodeOCR(SkipCollections):
    """`OCRQuality` for an actor pool (a class, built in the actor) that skips code rows."""

    def __init__(self, cfg: OCRQualityConfig) -> None:
        super().__init__(OCRQuality(cfg))


def _group_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Docs, characters and PII counts per (drop_reason, collection, lang, license_status)."""
    pii = sorted(c for c in df.columns if c.startswith("pii_"))
    df = df.assign(docs=1, chars=df["text"].astype(str).str.len(), lang=df["lang"].fillna("und"))
    return df.groupby(list(GROUP_KEYS), dropna=False)[["docs", "chars", *pii]].sum().reset_index()


def _where(kept: bool) -> Callable[[pa.Table], pa.Table]:
    def select(t: pa.Table) -> pa.Table:
        return t.filter(pc.equal(t[DROP], "") if kept else pc.not_equal(t[DROP], ""))

    return select


def run_corpus(cfg: CorpusConfig, ctx: RunContext) -> dict[str, Any]:
    """Run the whole first slice of the pipeline; return the summary (counts, rates)."""
    paths, fmt, built = _inputs(cfg, ctx)  # raises on a wrong path before any Ray work
    ctx.progress(4, "corpus")
    start = time.perf_counter()
    reader_cfg = readers.ReaderConfig(text_field=cfg.text_field, collection=cfg.collection,
                                      license=cfg.license)  # fmt: skip
    read = READERS[fmt](paths, reader_cfg).materialize()
    total = read.count()
    good, rejects = readers.split_rejects(read)
    ctx.log(1, read=total)

    scored = score(good, cfg).materialize()
    keepers = exact_keepers(scored)
    final = scored.map_batches(ExactDedup(keepers), batch_format="numpy").materialize()
    ctx.log(2, duplicate_ids=len(keepers))

    out = ctx.artifacts_dir
    for name in ("output", "quarantine", "rejects"):  # present even when nothing lands there
        (out / name).mkdir(parents=True, exist_ok=True)
    final.map_batches(_where(True), batch_format="pyarrow").write_parquet(
        str(out / "output"), partition_cols=["collection", "lang"])  # fmt: skip
    final.map_batches(_where(False), batch_format="pyarrow").write_parquet(str(out / "quarantine"))
    rejects = rejects.materialize()
    rejects.write_parquet(str(out / "rejects"))
    ctx.log(3, written=1)

    parts = [b for b in final.map_batches(_group_stats, batch_format="pandas")
             .iter_batches(batch_format="pandas", batch_size=None) if len(b)]  # fmt: skip
    stats = _group_stats_merge(parts)
    rejected = Counter(
        r for b in rejects.iter_batches(batch_format="pyarrow") for r in b["reason"].to_pylist()
    )
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
    write_datasheet(out / "datasheet.md", stats, attrition, cfg)
    summary = {
        "in": total, "kept": kept, "dropped": n_dropped, "rejected": n_rejected,
        "kept_share": kept / total if total else 0.0, "seconds": seconds,
        "docs_per_s": total / seconds if seconds > 0 else 0.0, "duplicate_ids": len(keepers),
        **built,
        **{f"dropped_{r.replace(':', '_')}": n for r, n in sorted(dropped.items())},
        **{f"rejected_{r.replace(':', '_')}": n for r, n in sorted(rejected.items())},
    }  # fmt: skip
    ctx.log(4, **{k: v for k, v in summary.items() if isinstance(v, int | float)})
    return summary


def _group_stats_merge(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-batch group stats summed into one table (an empty one with the key columns when
    nothing was read)."""
    if not parts:
        return pd.DataFrame({k: pd.Series(dtype=object) for k in GROUP_KEYS}).assign(
            docs=pd.Series(dtype=int), chars=pd.Series(dtype=int)
        )
    df = pd.concat(parts, ignore_index=True)
    return df.groupby(list(GROUP_KEYS), dropna=False).sum(numeric_only=True).reset_index()


def attrition_table(
    total: int, rejected: Counter[str], dropped: Counter[str]
) -> list[dict[str, Any]]:
    """Rows remaining after each stage: read, reader rejects, then each step of
    `STEP_ORDER` (first reason wins, so a row counts for the first step that dropped it)."""
    left = total - sum(rejected.values())
    rows = [{"step": "read", "removed": 0, "left": total},
            {"step": "reject", "removed": total - left, "left": left}]  # fmt: skip
    by_step: Counter[str] = Counter()
    for reason, n in dropped.items():
        by_step[reason.split(":", 1)[0]] += n
    for step in STEP_ORDER + tuple(sorted(set(by_step) - set(STEP_ORDER))):
        left -= by_step[step]
        rows.append({"step": step, "removed": by_step[step], "left": left})
    return rows


def _table(df: pd.DataFrame, by: str) -> list[str]:
    """Markdown rows of docs and characters per value of `by` (kept rows only)."""
    rows = ["| " + by + " | docs | characters |", "|---|---:|---:|"]
    for value, g in df.groupby(by, dropna=False):
        rows.append(f"| {value} | {int(g['docs'].sum())} | {int(g['chars'].sum())} |")
    return rows


def write_datasheet(
    path: Path, stats: pd.DataFrame, attrition: list[dict[str, Any]], cfg: CorpusConfig
) -> None:
    """A short markdown datasheet of the open output: what it holds (by collection,
    language, license status), how it was cut (attrition step by step) and the PII that
    was redacted (kept and quarantined rows alike)."""
    kept = stats[stats["drop_reason"] == ""]
    pii = {c.removeprefix("pii_"): int(stats[c].sum()) for c in stats if c.startswith("pii_")}
    lines = [
        "# Corpus datasheet", "",
        f"Open output only: {cfg.open_only}. Kept {int(kept['docs'].sum())} documents, "
        f"{int(kept['chars'].sum())} characters.", "",
    ]  # fmt: skip
    for by in ("collection", "lang", "license_status"):
        lines += [f"## Kept by {by}", "", *_table(kept, by), ""]
    lines += ["## Attrition", "", "| step | removed | left |", "|---|---:|---:|"]
    lines += [f"| {r['step']} | {r['removed']} | {r['left']} |" for r in attrition]
    lines += ["", "## PII redacted (all rows)", "", "| type | count |", "|---|---:|"]
    lines += [f"| {kind} | {n} |" for kind, n in sorted(pii.items())]
    lines += ["", "Not yet covered: near-duplicate dedup, tokenizer statistics.", ""]
    path.write_text("\n".join(lines))
