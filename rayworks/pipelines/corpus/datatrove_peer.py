"""`corpus_datatrove`: the DataTrove peer that `rayworks bench corpus` measures us against.

`rayworks bench corpus` reports the docs/s and MB/s of our corpus pipeline against DataTrove
(0.10.1) running the equivalent steps on the same input files and machine. This pipeline
runs, on the files `runner.resolve_inputs` gives (so bench arms read byte-identical jsonl(.gz)
shards), four `LocalPipelineExecutor` stages with `workers = cpus`:

1. `JsonlReader` -> text bytes (a stats-only step) -> language ->
   `GopherQualityFilter(min_doc_words=gopher_min_words)` -> `GopherRepetitionFilter` (when
   `repetition`; after quality, the order of our steps, so drops are attributed alike) ->
   `JsonlWriter` (survivors, uncompressed) -> `MinhashDedupSignature`; one task per input
   file (at most 4 per CPU, at least one per CPU), which is how DataTrove shards its input:
   by whole files, so fewer files than CPUs leaves CPUs idle (`files` is in the summary).
2. `MinhashDedupBuckets` (14 tasks, one per band, as DataTrove requires);
3. `MinhashDedupCluster` (one task);
4. the survivors of stage 1, rank by rank -> `MinhashDedupFilter` -> `JsonlWriter` (output/).

MinHash uses `MinhashConfig(n_grams=minhash_ngram, num_buckets=minhash_bands,
hashes_per_bucket=minhash_rows)`: 5-word shingles, 14 bands x 8 hashes by default, as ours.
It always runs (`near_dedup=false` is not honoured: the peer exists to time these stages).

Language: DataTrove's `LanguageFilter` downloads fastText lid.176 / GlotLID on first use and
fails offline, so the language step is a DataTrove `BaseFilter` around py3langid, the very
model and verdict rule (`languages`, `language_min_confidence`) of our `language` step; it
stores `language` and `language_score` in the document metadata, as `LanguageFilter` does.

Word tokenizer (`datatrove_tokenizer`): DataTrove splits words with spaCy's blank English
tokenizer (`spacy.blank("en")`, ~250 docs/s through the Gopher filters on our machines);
our Gopher steps split on whitespace (`str.split`) and our MinHash on `\\w+` runs. The
default `split` hands DataTrove a `str.split` word tokenizer (after its own text
normalisation for MinHash) so both sides tokenize alike; `spacy` runs DataTrove as shipped.
The summary's `word_tokenizer` says which one ran. spaCy changes verdicts, not only speed:
its punctuation tokens count as words, so most code and docs fail Gopher's alpha-words rule
(local corpus of 2,600 docs: 31 kept with spaCy, 1,170 with `split`).

The comparison favours the peer, deliberately: it does fewer steps than our pipeline (no
normalisation, license gate, C4 rules, code quality, OCR score, toxicity, PII redaction,
exact dedup or tokenizer training), it writes uncompressed jsonl rather than parquet, and
its Gopher filters drop code files early (ours only score code rows with the prose rules),
so less text reaches its MinHash. `docs_per_s` counts input records (`DOCS_COUNTED`: every
jsonl line, as our runner's `in` does, also those DataTrove's reader skips as not JSON or
without text) per wall-clock second of the four stages, worker start-up included (building
the local corpus and counting the lines are not timed). `in = kept + dropped + rejected`
as in ours, `rejected` being the lines DataTrove's reader skipped (`read` is what it read).
`mb_per_s` is input file bytes (as stored, gzip included) per second in MiB, the definition
of our runner's `mb_per_s`; `text_mb_per_s` counts the UTF-8 bytes of the text field.

DataTrove is imported only when the pipeline runs (it is in the `dev` extra); the step
classes that subclass its blocks are built on first access (module `__getattr__`), so this
module imports without it and worker processes unpickle them by name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.platform.registry import pipeline

if TYPE_CHECKING:  # not at run time: it imports torch
    from rayworks.platform.context import RunContext

INSTALL_HINT = "pip install -e '.[dev]'"
TOKENIZERS = {"split": "str.split (whitespace, as our Gopher steps)", "spacy": 'spacy.blank("en")'}
MIB = 2**20
STEP_CLASSES = ("SplitWordTokenizer", "PyLangIdFilter", "TextBytes", "RankFileReader")
"""DataTrove subclasses built lazily by `_define_steps` (see the module docstring)."""


class DatatroveConfig(CorpusConfig):
    """The corpus config plus the word tokenizer DataTrove's Gopher and MinHash steps use."""

    datatrove_tokenizer: Literal["split", "spacy"] = Field(
        "split",
        description="DataTrove word tokenizer: split (whitespace, like ours) or spacy (its own)",
    )


def _require_datatrove() -> None:
    try:
        import datatrove  # noqa: F401
    except ImportError:
        raise RayworksError(
            f"the DataTrove peer needs datatrove 0.10.1 (with orjson and spacy): {INSTALL_HINT}"
        ) from None


def _define_steps() -> dict[str, type]:
    """Build the DataTrove subclasses and publish them as module attributes."""
    from datatrove.data import Document, DocumentsPipeline
    from datatrove.pipeline.base import PipelineStep
    from datatrove.pipeline.filters.base_filter import BaseFilter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.utils.word_tokenizers import WordTokenizer

    from rayworks.pipelines.corpus.language import (
        LanguageId,
        LanguageIdConfig,
        identify,
        use_unpacked,
    )

    class SplitWordTokenizer(WordTokenizer):
        """Words = `str.split()`, as our Gopher steps count them."""

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [line.strip() for line in text.splitlines() if line.strip()]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            spans, start = [], 0
            for line in text.splitlines(keepends=True):
                if line.strip():
                    spans.append((start, start + len(line.rstrip())))
                start += len(line)
            return spans

    class PyLangIdFilter(BaseFilter):
        """Our `language` step as a DataTrove filter: py3langid, same verdicts."""

        name = "🌐 py3langid"

        def __init__(
            self,
            allowed: tuple[str, ...] | None,
            min_confidence: float,
            tables: str | None = None,
        ) -> None:
            super().__init__()
            self.cfg = LanguageIdConfig(allowed=allowed, min_confidence=min_confidence)
            self.tables = tables  # the classifier's saved tables, mapped as our workers do
            self._step: LanguageId | None = None  # loaded in the worker, never pickled

        def filter(self, doc: Document) -> bool | tuple[bool, str]:
            if self._step is None:
                if self.tables:
                    use_unpacked(Path(self.tables))
                self._step = LanguageId(self.cfg)
            lang, confidence = identify(doc.text, self._step.identifier)
            doc.metadata["language"], doc.metadata["language_score"] = lang, confidence
            reason = self._step.verdict(lang, confidence)
            return (False, reason.split(":", 1)[1]) if reason else True

    class TextBytes(PipelineStep):
        """Counts the UTF-8 bytes of each document's text (stat `text_bytes`); keeps all."""

        name = "📏 text bytes"
        type = "📊 - STATS"

        def run(
            self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1
        ) -> DocumentsPipeline:
            for doc in data:
                self.stat_update("text_bytes", value=len(doc.text.encode("utf-8")))
                yield doc

    class RankFileReader(JsonlReader):
        """Reads only `<rank:05d>.jsonl`, the file stage 1's rank wrote (none: no docs), so
        MinHash stage 4 sees each rank's documents in the order their signatures have."""

        def run(
            self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1
        ) -> DocumentsPipeline:
            name = f"{rank:05d}.jsonl"
            for doc in self.read_files_shard([name] if self.data_folder.isfile(name) else []):
                self.update_doc_stats(doc)
                yield doc

    classes: dict[str, type] = {
        "SplitWordTokenizer": SplitWordTokenizer,
        "PyLangIdFilter": PyLangIdFilter,
        "TextBytes": TextBytes,
        "RankFileReader": RankFileReader,
    }
    for name, cls in classes.items():
        cls.__module__, cls.__qualname__ = __name__, name
    globals().update(classes)
    return classes


def __getattr__(name: str) -> Any:
    if name in STEP_CLASSES:
        _require_datatrove()
        return _define_steps()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _tokenizer(choice: str) -> Any:
    """DataTrove's `language` argument: a tokenizer instance, or "en" for its spaCy one."""
    return __getattr__("SplitWordTokenizer")() if choice == "split" else "en"


def _input_folder(paths: list[str], work: Path) -> tuple[str, str]:
    """(data folder, paths file): DataTrove reads files relative to one folder."""
    files = [os.path.abspath(p) for p in paths]
    root = os.path.commonpath([os.path.dirname(f) for f in files])
    listing = work / "inputs.txt"
    listing.write_text("".join(os.path.relpath(f, root) + "\n" for f in files))
    return root, str(listing)


def _count(stats: Any, key: str) -> int:
    """A DataTrove step's stat total (0 when it never fired)."""
    return int(stats.stats[key].total) if key in stats.stats else 0


def _reasons(stats: Any, step: str) -> dict[str, int]:
    """`dropped_<step>_<reason>` counts of one DataTrove filter."""
    out = {}
    for key in stats.stats:
        if key.startswith("dropped_"):
            reason = key.removeprefix("dropped_").removeprefix("gopher_")
            out[f"dropped_{step}_{reason}"] = _count(stats, key)
    return out


def filter_steps(
    cfg: DatatroveConfig, tokenizer: Any, langid_tables: str | None = None
) -> list[tuple[str, Any]]:
    """(our step name, DataTrove filter): language, Gopher quality, Gopher repetition;
    `langid_tables`: the language classifier's saved tables (`language.unpack_model`)."""
    from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter

    allowed = tuple(cfg.languages) if cfg.languages else None
    language = __getattr__("PyLangIdFilter")(allowed, cfg.language_min_confidence, langid_tables)
    steps = [
        ("language", language),
        ("gopher", GopherQualityFilter(min_doc_words=cfg.gopher_min_words, language=tokenizer)),
    ]
    if cfg.repetition:
        steps.append(("repetition", GopherRepetitionFilter(language=tokenizer)))
    return steps


def build_stages(
    cfg: DatatroveConfig, paths: list[str], out: Path, langid_tables: str | None = None
) -> tuple[list[Any], list[str], int]:
    """The four executors (not run), the step names of stage 1 and its number of tasks."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    work, logs = out / "work", out / "datatrove_logs"
    work.mkdir(parents=True, exist_ok=True)
    folder, listing = _input_folder(paths, work)
    tokenizer = _tokenizer(cfg.datatrove_tokenizer)  # one instance: Gopher filters share a cache
    mh = MinhashConfig(
        n_grams=cfg.minhash_ngram, num_buckets=cfg.minhash_bands, hashes_per_bucket=cfg.minhash_rows
    )
    filters = filter_steps(cfg, tokenizer, langid_tables)
    tasks = max(cfg.cpus, min(len(paths), 4 * cfg.cpus))

    def stage(name: str, steps: list[Any], n: int) -> Any:
        return LocalPipelineExecutor(
            steps,
            tasks=n,
            workers=min(cfg.cpus, n),
            logging_dir=str(logs / name),
            skip_completed=False,
        )

    first = [
        ("reader", JsonlReader(folder, paths_file=listing, text_key=cfg.text_field)),
        ("text_bytes", __getattr__("TextBytes")()),
        *filters,
        (
            "writer",
            JsonlWriter(str(work / "filtered"), output_filename="${rank}.jsonl", compression=None),
        ),
        (
            "signature",
            MinhashDedupSignature(str(work / "signatures"), config=mh, language=tokenizer),
        ),
    ]
    last = [
        __getattr__("RankFileReader")(str(work / "filtered"), compression=None),
        MinhashDedupFilter(str(work / "remove_ids")),
        JsonlWriter(str(out / "output"), output_filename="${rank}.jsonl", compression=None),
    ]
    stages = [
        stage("1_filter_signature", [step for _, step in first], tasks),
        stage(
            "2_buckets",
            [MinhashDedupBuckets(str(work / "signatures"), str(work / "buckets"), config=mh)],
            mh.num_buckets,
        ),
        stage(
            "3_cluster",
            [MinhashDedupCluster(str(work / "buckets"), str(work / "remove_ids"), config=mh)],
            1,
        ),
        stage("4_dedup_filter", last, tasks),
    ]
    return stages, [name for name, _ in first], tasks


def summarize(
    first: Any,
    last: Any,
    step_names: list[str],
    seconds: float,
    file_bytes: int,
    records: int,
) -> dict[str, Any]:
    """Counts and rates from stage 1's and stage 4's merged DataTrove stats.

    `records` is the input records of the files (`readers.jsonl_records`), the count our
    runner's `in` and `docs_per_s` use; `in` and `docs_per_s` here are that too, so the
    two rates divide the same documents. DataTrove's reader yields fewer (`read`): it
    skips lines that are not JSON or carry no text, counted here as `rejected`. Raises
    when `in != kept + dropped + rejected` or `read > in` (a step lost or duplicated
    documents)."""
    from rayworks.pipelines.corpus.readers import DOCS_COUNTED  # Ray Data: only when run

    by_step = dict(zip(step_names, first.stats, strict=True))
    read = _count(by_step["reader"], "documents")
    dropped: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for step in ("language", "repetition", "gopher"):
        if step in by_step:
            dropped[f"dropped_{step}"] = _count(by_step[step], "dropped")
            reasons |= _reasons(by_step[step], step)
    dedup = last.stats[1]
    dropped["dropped_minhash"] = _count(dedup, "dropped")
    kept = _count(last.stats[2], "total")
    rejected = records - read
    if read != kept + sum(dropped.values()) or rejected < 0:
        raise RayworksError(
            f"DataTrove counts do not reconcile: in={records} input records, its reader "
            f"read={read}, kept={kept} + dropped={sum(dropped.values())} ({dropped}); a "
            "stage lost or duplicated documents."
        )
    text_bytes = _count(by_step["text_bytes"], "text_bytes")

    def per_s(amount: float) -> float:
        return amount / seconds if seconds > 0 else 0.0

    return {
        "in": records,
        "read": read,
        "kept": kept,
        "dropped": sum(dropped.values()),
        "rejected": rejected,
        "kept_share": kept / records if records else 0.0,
        "seconds": seconds,
        "docs_per_s": per_s(records),
        "docs_counted": DOCS_COUNTED,
        "mb_per_s": per_s(file_bytes / MIB),
        "text_mb_per_s": per_s(text_bytes / MIB),
        "input_mb": file_bytes / MIB,
        "text_mb": text_bytes / MIB,
        **dropped,
        **reasons,
    }


def run_peer(
    cfg: DatatroveConfig,
    paths: list[str],
    out: Path,
    log: Callable[..., None] | None = None,
    langid_tables: str | None = None,
) -> dict[str, Any]:
    """Run the four DataTrove stages on `paths` (jsonl files) into `out`; the summary.
    `langid_tables`: the language classifier's saved tables, which its workers map as ours
    do (`language.unpack_model`; None: each worker loads the bundled model)."""
    _require_datatrove()
    from rayworks.pipelines.corpus import readers  # Ray Data: only when run

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # inherited by the workers: no downloads
    stages, names, tasks = build_stages(cfg, paths, out, langid_tables)
    stage_s, results = {}, []
    start = time.perf_counter()
    for i, executor in enumerate(stages, start=1):
        t0 = time.perf_counter()
        results.append(executor.run())
        stage_s[f"stage{i}_s"] = time.perf_counter() - t0
        if log:
            log(i, **{f"stage{i}_s": stage_s[f"stage{i}_s"]})
    seconds = time.perf_counter() - start
    file_bytes = sum(os.path.getsize(p) for p in paths)
    records = sum(readers.jsonl_records(p) for p in paths)  # not timed: ours counts as it reads
    summary = summarize(results[0], results[3], names, seconds, file_bytes, records)
    return {
        **summary,
        **stage_s,
        "files": len(paths),
        "tasks": tasks,
        "workers": cfg.cpus,
        "word_tokenizer": TOKENIZERS[cfg.datatrove_tokenizer],
    }


@pipeline("corpus_datatrove", config=DatatroveConfig, kind="job", headline=("docs_per_s", "max"))
def run(cfg: DatatroveConfig, ctx: RunContext) -> dict[str, Any]:
    """DataTrove 0.10.1 peer of `corpus`: py3langid, Gopher filters, MinHash; docs/s, MB/s."""
    _require_datatrove()
    from rayworks.pipelines.corpus.language import unpack_model
    from rayworks.pipelines.corpus.runner import resolve_inputs  # Ray Data: only when run

    paths, fmt, built = resolve_inputs(cfg, ctx)
    if fmt != "jsonl":
        raise RayworksError(
            f"the DataTrove peer reads jsonl(.gz) only (its JsonlReader); got input_format={fmt}."
        )
    ctx.progress(4, "corpus_datatrove")
    # the same language tables as our workers map, from the same build cache: the peer
    # pays no model load that ours does not (`chain.build_steps`)
    tables = unpack_model(ctx.cache_root / "py3langid")
    summary = run_peer(cfg, paths, ctx.artifacts_dir, log=ctx.log, langid_tables=str(tables))
    ctx.log(5, **{k: v for k, v in summary.items() if isinstance(v, int | float)})
    return {**summary, **built}
