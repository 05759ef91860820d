"""`rayworks run corpus`: Common Corpus curation on Ray Data (issue 6, first slice).

Kind `job`: the function runs in the driver (`launch.run` calls it in-process), which is
where a Ray Data pipeline must be planned; its tasks and actor pools reserve their own
CPUs. As a `task` it would hold one CPU for the whole run while its own Ray Data work
competes for the rest (DESIGN.md: `job` is for Ray Data pipelines).
No baseline yet: the DataTrove comparison is a later bench.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.platform.registry import pipeline

if TYPE_CHECKING:  # not at run time: it imports torch, which Ray Data workers never need
    from rayworks.platform.context import RunContext


@pipeline("corpus", config=CorpusConfig, kind="job", headline=("kept_share", "max"))
def run(cfg: CorpusConfig, ctx: RunContext) -> dict[str, Any]:
    """Curate a corpus: license gate, quality, toxicity, PII, exact dedup; parquet out."""
    from rayworks.pipelines.corpus.runner import run_corpus  # Ray Data: only when run

    return run_corpus(cfg, ctx)
