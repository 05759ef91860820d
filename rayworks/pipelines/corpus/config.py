"""Config of the `corpus` pipeline: inputs, the local corpus caps and the step thresholds.

The steps keep their own frozen dataclass configs with the papers' defaults (`quality.py`,
`language.py`, ...); this pydantic config exposes the few thresholds a run usually changes
and `chain.build_steps` maps them onto those dataclasses, so a bad value is a `ConfigError`
naming the key before any Ray work. A setting not exposed here has its default only in its
step's dataclass; the exposed ones repeat theirs here (e.g. `gopher_min_words`, `minhash_*`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.pipelines.corpus.neardup import NearDupConfig
from rayworks.pipelines.corpus.schema import PIPELINE_VERSION, normalize_collection


class LocalCorpusConfig(Config):
    """The real local corpus built when `inputs` is empty (`sources.build_corpus`):
    installed Python packages (collection code) and Debian docs (collection web)."""

    python: bool = Field(True, description="read the venv's installed Python distributions")
    debian_doc: str | None = Field(
        "/usr/share/doc", description="Debian documentation root; null skips Debian docs"
    )
    max_packages: int | None = Field(200, ge=1, description="packages per source")
    max_docs: int | None = Field(5000, ge=1, description="documents per source")
    max_docs_per_package: int | None = Field(25, ge=1, description="documents per package")
    max_bytes: int = Field(
        1_000_000, ge=1, description="larger files are skipped (counted in manifest.json)"
    )


class CorpusConfig(PipelineConfig):
    """Curate a corpus: read, normalize, license gate, language, quality, toxicity, PII,
    exact and near-duplicate dedup, tokenizer; write kept rows, quarantined rows and reader
    rejects as parquet, and a datasheet."""

    presets = {
        "smoke": {
            "sources": {
                "max_packages": 15,
                "max_docs": 100,
                "max_docs_per_package": 8,
                "max_bytes": 16_000,
            },
            "batch_size": 64,
            "tokenizer_vocab_size": 1000,
        },
    }

    inputs: list[str] = Field(
        default_factory=list,
        description="files, folders or globs to read; empty = build the local corpus first",
    )
    input_format: Literal["jsonl", "parquet", "text", "code"] = Field(
        "jsonl", description="reader of `inputs` (the local corpus is always jsonl)"
    )
    text_field: str = Field("text", description="column holding the document text")
    collection: str | None = Field(
        None, description="collection of rows that carry none (text inputs need one)"
    )
    license: str | None = Field(
        None, description="license declared for the whole input (rows' own field wins)"
    )
    sources: LocalCorpusConfig = Field(default_factory=LocalCorpusConfig)
    open_only: bool = Field(
        True, description="only public-domain / permissive rows reach the open output"
    )
    language_min_confidence: float = Field(
        0.0, ge=0, le=1, description="drop below this py3langid probability (0 = never)"
    )
    languages: list[str] | None = Field(None, description="ISO 639-1 codes kept; null = all")
    language_max_chars: int | None = Field(
        None, ge=1, description="classify only this many leading characters (null = all)"
    )
    score_dropped: bool = Field(
        False, description="also score rows an earlier step dropped (analysis; slower)"
    )
    gopher_min_words: int = Field(50, ge=0, description="Gopher min words (Rae et al.: 50)")
    repetition: bool = Field(True, description="apply the Gopher repetition filter")
    c4: bool = Field(True, description="apply the C4 line and page rules (Raffel et al.)")
    ocr_min_consistency: float | None = Field(
        None, ge=0, le=1, description="drop below this OCR consistency (null = score only)"
    )
    toxicity_max_score: float | None = Field(
        None, ge=0, description="drop above this many hits per 1000 words (null = score only)"
    )
    near_dedup: bool = Field(True, description="MinHash-LSH near-duplicate dedup")
    minhash_ngram: int = Field(5, ge=1, description="words per shingle (datatrove: 5)")
    minhash_bands: int = Field(14, ge=1, description="LSH bands (datatrove: 14)")
    minhash_rows: int = Field(8, ge=1, description="hashes per band (datatrove: 8)")
    tokenizer_vocab_size: int = Field(8192, ge=300, description="BPE vocabulary trained")
    tokenizer_sample_docs: int = Field(
        50_000, ge=1, description="kept documents the tokenizer is trained on (the first, by id)"
    )
    tokenizer_sample_chars: int | None = Field(
        8_000_000,
        ge=1,
        description="characters the tokenizer is trained on: the sample stops after the "
        "document that reaches it (null: no cap). 8M chars are within 1% of the held-out "
        "compression of 3x more on the bench corpus (docs/results.md) at a third of the time",
    )
    cpus: int = Field(2, ge=1, description="CPUs the run's Ray tasks may use (tasks in flight)")
    unit_bytes: int = Field(
        4 * 2**20,
        ge=1,
        description="input bytes per unit: the grain of scoring tasks and of --resume "
        "(small files grouped, large jsonl/parquet files cut)",
    )
    batch_size: int = Field(256, ge=1, description="rows per step call")
    batch_timeout_s: float | None = Field(
        600.0,
        gt=0,
        description="seconds a batch may take in the steps; over it, it is retried row by "
        "row and rows over it again are rejected timeout:<step> (null: no budget)",
    )
    dedup_hash_ranges: int = Field(
        8,
        ge=1,
        description="hash ranges of the dedup shuffle: its reduce tasks (raise it "
        "with the corpus: a task holds ~15 records per live row / ranges)",
    )

    RESUME_FREE: ClassVar[tuple[str, ...]] = (
        "inputs",
        "cpus",
        "batch_size",
        "batch_timeout_s",
        "tokenizer_vocab_size",
        "tokenizer_sample_docs",
        "tokenizer_sample_chars",
    )
    """Fields a `--resume` may change, because the rows a finished unit holds do not depend
    on them: `inputs` (the plan checks the files they resolve to), `cpus` and `batch_size`
    (speed only), `batch_timeout_s` (a run stuck on slow rows is resumed with another
    budget; only rows that ran over it differ) and `tokenizer_*` (the global phase, redone
    on every run). Every other field, a field added later included, must match the run's
    plan (`units.WorkDir.adopt`); `dedup_hash_ranges` too, as each unit's key files are
    split by it."""

    def near_dup(self) -> NearDupConfig:
        """The MinHash-LSH shape of `minhash_*` (`neardup.NearDupConfig`)."""
        return NearDupConfig(
            ngram=self.minhash_ngram, bands=self.minhash_bands, rows=self.minhash_rows
        )

    def ray_resources(self) -> dict[str, float]:
        """What a bench arm holds: all its CPUs, so throughput arms never share a core."""
        return {"CPU": float(self.cpus)}

    def resume_settings(self) -> dict[str, Any]:
        """The settings a unit's scored rows depend on, recorded in the run's plan and
        checked on `--resume`: every field but `RESUME_FREE`, and the pipeline version."""
        fields = self.model_dump(mode="json", exclude=set(self.RESUME_FREE))
        return {**fields, "pipeline_version": PIPELINE_VERSION}

    @field_validator("collection")
    @classmethod
    def _collection(cls, value: str | None) -> str | None:
        return None if value is None else normalize_collection(value)
