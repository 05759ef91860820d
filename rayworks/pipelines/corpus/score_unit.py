"""One unit of input read, scored and written by one task: the scoring stage of a corpus run.

`run_corpus` sends the units of the plan (`units.py`) out as ONE execution of Ray tasks,
`cpus` at a time (`fanout.py`), each `score_unit_task`: it reads its unit's files itself
(`readers.unit_table`), scores the rows in batches of `batch_size` (`chain.py`, under the
time budget of `guard.py`, with the steps its worker keeps built: `worker_chain`), writes
the unit's scored parquet and rejects (each renamed into place) with the unit's dedup key
files (`dedup.py`: the map side of the global phase's shuffle) and returns one manifest
row; the driver writes the unit's completion marker from that row as it arrives. So the
corpus itself never crosses the object store, no stage waits for another, the steps (and
their language model) are built once per worker, and `--resume` skips every unit with a
marker.

Every good row gets `row_id` = unit index << 32 | its position in the unit: an int64
that is unique in the run, the same on every run of the plan, and ordered as the input
is read (files by path, then line), which the global phase uses as the row's key and
its "first copy" order (`dedup.py`).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from rayworks.pipelines.corpus import readers
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.dedup import key_records
from rayworks.pipelines.corpus.guard import GuardedChain, LocalChain, Scored, StepsFactory
from rayworks.pipelines.corpus.pii_step import redact_rejects
from rayworks.pipelines.corpus.schema import raw_text
from rayworks.pipelines.corpus.step import DROP, ROW_ID
from rayworks.pipelines.corpus.units import Unit
from rayworks.pipelines.corpus.zygote import stop_zygotes, zygote_key
from rayworks.platform.atomic import atomic_dir

NODE_ID = "node_id"
"""The manifest key (and so the unit marker's) holding the node that scored the unit."""
ROW_BITS = 32
"""Rows per unit at most: 2**32 (a unit is a few MB of input)."""

_REJECT_SCHEMA = pa.schema(
    [
        ("source_path", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("raw", pa.string()),
    ]
)


def reader_config(cfg: CorpusConfig) -> readers.ReaderConfig:
    return readers.ReaderConfig(
        text_field=cfg.text_field, collection=cfg.collection, license=cfg.license
    )


def make_chain(cfg: CorpusConfig, langid_cache: str | None = None) -> GuardedChain | LocalChain:
    """The steps of `cfg`, in a child process under `batch_timeout_s` (null: in process);
    `langid_cache`: where the unpacked language model is kept (`chain.build_steps`)."""
    build = StepsFactory("rayworks.pipelines.corpus.chain:build_steps", cfg, langid_cache)
    if cfg.batch_timeout_s is None:
        return LocalChain(build)
    return GuardedChain(build, cfg.batch_timeout_s, share_key=chain_key(cfg, langid_cache))


def chain_key(cfg: CorpusConfig, langid_cache: str | None) -> str:
    """The steps' settings as a zygote key (`zygote.py`): workers with the same share one."""
    return zygote_key(cfg.model_dump(mode="json"), langid_cache)


def _timeout_rejects(good: pa.Table, timeouts: list[tuple[int, str]], limit: int) -> pa.Table:
    """Reject rows for the rows the budget gave up on: reason and the text as raw."""
    rows = [good.slice(i, 1).to_pylist()[0] for i, _ in timeouts]
    return pa.Table.from_pylist(
        [
            {
                "source_path": r["source_path"],
                "line": r["line"],
                "reason": reason,
                "raw": raw_text(r["text"] or "", limit),
            }
            for r, (_, reason) in zip(rows, timeouts, strict=True)
        ],
        schema=_REJECT_SCHEMA,
    )


def score_unit(
    unit: Unit,
    fmt: str,
    cfg: CorpusConfig,
    chain: GuardedChain | LocalChain,
    scored_root: Path,
    rejects_root: Path,
) -> dict[str, Any]:
    """Read, score and write one unit: its scored rows to `scored_root/<unit>`, its reader
    rejects and timeout rejects (PII-redacted) to `rejects_root/<unit>`, each renamed into
    place. Returns the manifest row the driver turns into the unit's marker."""
    clock = time.perf_counter
    start, restarts = clock(), chain.restarts
    reader_cfg = reader_config(cfg)
    table = readers.unit_table(unit.files, fmt, reader_cfg, unit.start, unit.stop)
    good, rejects = readers.split_table(table)
    ids = (np.int64(unit.index) << ROW_BITS) + np.arange(good.num_rows, dtype=np.int64)
    good = good.append_column(ROW_ID, pa.array(ids, type=pa.int64()))
    read_s = clock() - start

    parts: list[pa.Table] = []
    timeouts: list[tuple[int, str]] = []
    for offset in range(0, good.num_rows, cfg.batch_size):
        scored: Scored = chain(good.slice(offset, cfg.batch_size))
        if scored.table is not None:
            parts.append(scored.table)
        timeouts += [(offset + i, reason) for i, reason in scored.timeouts]
    score_s = clock() - start - read_s

    write_start = clock()
    rejects = rejects.cast(_REJECT_SCHEMA)
    if timeouts:
        rejects = pa.concat_tables(
            [rejects, _timeout_rejects(good, timeouts, reader_cfg.raw_chars)]
        )
    with atomic_dir(scored_root / unit.name) as tmp:
        if parts:
            scored_rows = pa.concat_tables(parts, promote_options="permissive")
            pq.write_table(scored_rows, tmp / "part.parquet")
            near = cfg.near_dup() if cfg.near_dedup else None
            for r, keys in enumerate(key_records(scored_rows, near, cfg.dedup_hash_ranges)):
                if keys.num_rows:
                    pq.write_table(keys, tmp / f"keys-{r:04d}.parquet")
    if rejects.num_rows:
        rejects = redact_rejects(rejects)
    with atomic_dir(rejects_root / unit.name) as tmp:
        if rejects.num_rows:
            pq.write_table(rejects, tmp / "rejects.parquet")
    live = sum(int(np.sum(p[DROP].to_numpy(zero_copy_only=False) == "")) for p in parts)
    seconds = {**chain.take_seconds(), "read": read_s, "write": clock() - write_start}
    return {
        "unit": unit.name,
        "in": table.num_rows,
        "scored": good.num_rows - len(timeouts),
        "live": live,
        "rejected": dict(Counter(rejects["reason"].to_pylist())),
        "seconds": seconds,
        "busy_s": clock() - start,
        "score_s": score_s,
        "restarts": chain.restarts - restarts,
    }


_WORKER_CHAIN: dict[str, GuardedChain | LocalChain] = {}


def worker_chain(cfg: CorpusConfig, langid_cache: str | None) -> GuardedChain | LocalChain:
    """The steps of `cfg`, built once per worker process and kept for the next unit of the
    same settings (tasks reuse Ray's workers; a worker of an earlier run with other
    settings stops that run's child, and a zygote it started, first; so a worker holds at
    most one of each)."""
    key = chain_key(cfg, langid_cache)
    chain = _WORKER_CHAIN.get(key)
    if chain is None:
        for old in _WORKER_CHAIN.values():
            old.close()
        _WORKER_CHAIN.clear()
        stop_zygotes(keep=key)
        chain = _WORKER_CHAIN[key] = make_chain(cfg, langid_cache)
    return chain


def score_unit_task(
    unit: Unit,
    cfg: CorpusConfig,
    fmt: str,
    scored_root: str,
    rejects_root: str,
    langid_cache: str | None = None,
) -> dict[str, Any]:
    """The scoring stage's task (`fanout.fan_units`): `score_unit` with this worker's steps;
    the manifest row carries the node that scored the unit (`cluster_check.py`)."""
    chain = worker_chain(cfg, langid_cache)
    manifest = score_unit(unit, fmt, cfg, chain, Path(scored_root), Path(rejects_root))
    return {**manifest, NODE_ID: ray.get_runtime_context().get_node_id()}
