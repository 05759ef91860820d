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

- The runner (first slice): `config` (`CorpusConfig`, preset `smoke`), `runner` (Ray Data
  wiring, license gate, exact dedup on `id`, output / quarantine / rejects parquet,
  reconciled counters, `attrition.json`, `datasheet.md`) and `pipeline`, which registers
  `rayworks run corpus`.

Not built yet: distributed near-duplicate dedup, tokenizer training, the HTML datasheet,
the DataTrove bench and resume.
"""

from rayworks.pipelines.corpus import datatrove_peer as datatrove_peer
from rayworks.pipelines.corpus import pipeline as pipeline
