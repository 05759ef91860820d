"""Common Corpus curation on Ray Data (issue 6): the parts built so far, bottom-up.

- `step`: the contract every step follows (score columns, first-reason-wins `drop_reason`).
- Steps (pure Python, no Ray; stateful ones are meant for actor pools):
  - `normalize`, `language` (py3langid, model inside the wheel);
  - `quality` (Gopher quality and repetition, C4, an OCRoscope-style consistency score);
  - `code_quality`, `toxicity` (word lists shipped in `wordlists/`), `pii_step` over `pii`.
- Leaf modules:
  - `minhash` (MinHash-LSH near-duplicate detection);
  - `licenses` (license evidence to SPDX id and open/closed status).
- Input and provenance:
  - `schema` (the provenance columns of every row);
  - `readers` (jsonl(.gz), parquet, text/HTML folders and code trees; per-row rejects);
  - `sources` (a real corpus from installed Python packages and Debian docs).

Not built yet: the runner (Ray Data wiring, quarantine, attrition counters, writers,
resume), distributed dedup, tokenization, the datasheet and the `corpus` pipeline
registration. Nothing is registered, so `rayworks list` does not show a corpus pipeline.
"""
