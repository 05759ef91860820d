"""`rayworks run corpus`: Common Corpus curation on Ray.

Kind `job`: the function runs in the driver (`launch.run` calls it in-process), which
submits the run's tasks; they reserve their own CPUs, at most `cpus` at a time
(`CorpusConfig.ray_resources` makes a bench run its arms one after another, so a
throughput arm never shares a core with another arm).

`rayworks bench corpus`: docs/s against DataTrove running the equivalent steps on the same
files (`corpus_datatrove`), and the ablation `cpus1` (one CPU) for the 1 -> 2 CPU scaling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.platform.registry import pipeline

if TYPE_CHECKING:  # not at run time: it imports torch, which Ray Data workers never need
    from rayworks.platform.context import RunContext


@pipeline(
    "corpus",
    config=CorpusConfig,
    kind="job",
    baseline="corpus_datatrove",
    headline=("docs_per_s", "max"),
    report=("mb_per_s", "kept_share"),
    ablations={"cpus1": ("cpus=1",)},
)
def run(cfg: CorpusConfig, ctx: RunContext) -> dict[str, Any]:
    """Curate a corpus: license gate, quality, toxicity, PII, exact and near dedup,
    tokenizer; parquet out, datasheet, reconciled counts; resumable by units."""
    from rayworks.pipelines.corpus.runner import run_corpus  # Ray: only when run

    return run_corpus(cfg, ctx)
