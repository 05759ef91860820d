"""Common Corpus curation on Ray; `docs/corpus.md` is the user's guide.

- `step`: the contract every step follows (score columns, first-reason-wins `drop_reason`).
- Steps (pure Python, no Ray; each worker builds them once, `score_unit.worker_chain`):
  - `normalize`, `language` (py3langid, model inside the wheel);
  - `quality` (Gopher quality and repetition, C4, an OCRoscope-style consistency score);
  - `code_quality`, `toxicity` (word lists shipped in `wordlists/`), `pii_step` over `pii`;
  - `neardup` (MinHash signatures, LSH buckets clustered over Ray, `dedup:near`) over the
    leaf math of `minhash`; `tokenizer` (local byte-level BPE, token counts).
- Input and provenance: `schema` (the provenance columns of every row), `licenses`
  (license evidence to SPDX id and open/closed status), `readers` (jsonl(.gz), parquet,
  text/HTML folders and code trees; per-row rejects), `sources` (a real corpus from
  installed Python packages and Debian docs).
- Running: `config` (`CorpusConfig`), `units` (resumable units of input files), `runner`
  (the wiring: scoring, dedup, the final pass, reconciled counters; its executions are
  Ray tasks, `fanout`), `datasheet` (md and
  html with plots), `pipeline` (`rayworks run|bench corpus`) and `datatrove_peer` (the
  baseline `corpus_datatrove`: DataTrove on the same files).
"""

from rayworks.pipelines.corpus import datatrove_peer as datatrove_peer
from rayworks.pipelines.corpus import pipeline as pipeline
