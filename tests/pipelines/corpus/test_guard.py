"""The per-batch time budget (`guard.py`): a stuck row is rejected `timeout:<step>`, every
other row of its batch is scored, and the guarded chain scores exactly as the chain run
in process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rayworks.pipelines.corpus import readers
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.guard import GuardedChain, LocalChain, StepsFactory
from rayworks.pipelines.corpus.score_unit import reader_config, score_unit
from rayworks.pipelines.corpus.units import plan_units
from rayworks.pipelines.corpus.zygote import stop_zygotes, supported, zygote_key

MARKER = "STALL-ON-THIS-ROW"
PROSE = (
    "The council met on Tuesday evening to discuss the new budget for the public library. "
    "Members agreed that the reading rooms should stay open later in winter. The mayor "
    "thanked the volunteers who catalogued the old maps, letters and photographs. "
)


def _input(path: Path) -> str:
    docs = [f"{PROSE} Item {i}." for i in range(6)]
    docs[3] += f" {MARKER}"
    path.write_text(
        "".join(json.dumps({"text": t, "collection": "web", "license": "MIT"}) + "\n" for t in docs)
    )
    return str(path)


@pytest.fixture(params=["spawned", "forked"])
def share_key(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """Each test with spawned children, and with children forked from a zygote of its own
    (stopped after the test)."""
    if request.param == "spawned":
        yield None
        return
    if not supported():
        pytest.skip("no pidfd on this platform: children are always spawned")
    yield zygote_key("test_guard", request.node.name)
    stop_zygotes()


def _forked_as_asked(chain: GuardedChain, share_key: str | None) -> bool:
    return (chain.forked > 0) == (share_key is not None)


def test_a_stuck_row_is_rejected_with_its_step_and_the_rest_is_scored(
    tmp_path: Path, share_key: str | None
):
    cfg = CorpusConfig(inputs=[_input(tmp_path / "in.jsonl")], batch_size=8, batch_timeout_s=5)
    (unit,) = plan_units(list(cfg.inputs), cfg.unit_bytes, "jsonl")
    build = StepsFactory("rayworks.pipelines.corpus.guard:stalling_steps", cfg, MARKER, 120.0)
    chain = GuardedChain(build, budget_s=5, share_key=share_key)
    try:
        manifest = score_unit(unit, "jsonl", cfg, chain, tmp_path / "scored", tmp_path / "rej")
    finally:
        chain.close()
    # the batch ran over, was retried row by row in a fresh child; the stuck row ran over
    # again and its child was replaced once more
    assert manifest["rejected"] == {"timeout:sleep": 1} and manifest["restarts"] == 2
    assert _forked_as_asked(chain, share_key)
    assert (manifest["in"], manifest["scored"]) == (6, 5)
    scored = pq.read_table(tmp_path / "scored" / unit.name / "part.parquet")
    assert scored["line"].to_pylist() == [1, 2, 3, 5, 6]
    rejects = pq.read_table(tmp_path / "rej" / unit.name).to_pylist()
    assert [(r["line"], r["reason"]) for r in rejects] == [(4, "timeout:sleep")]
    assert MARKER in rejects[0]["raw"]


def test_a_row_that_kills_its_child_is_rejected_as_a_crash(tmp_path: Path, share_key: str | None):
    """A child that dies in a step (as one killed for memory would) is replaced; the row
    that kills it again is rejected `crash:<step>`, the rest of its batch is scored, and
    no child outlives `close`."""
    cfg = CorpusConfig(inputs=[_input(tmp_path / "in.jsonl")], batch_size=8, batch_timeout_s=60)
    (unit,) = plan_units(list(cfg.inputs), cfg.unit_bytes, "jsonl")
    build = StepsFactory("rayworks.pipelines.corpus.guard:crashing_steps", cfg, MARKER)
    chain = GuardedChain(build, budget_s=60, share_key=share_key)
    try:
        manifest = score_unit(unit, "jsonl", cfg, chain, tmp_path / "scored", tmp_path / "rej")
    finally:
        chain.close()
    assert chain._proc.poll() is not None
    assert manifest["rejected"] == {"crash:exit": 1} and manifest["restarts"] == 2
    assert _forked_as_asked(chain, share_key)
    assert (manifest["in"], manifest["scored"]) == (6, 5)
    rejects = pq.read_table(tmp_path / "rej" / unit.name).to_pylist()
    assert [(r["line"], r["reason"]) for r in rejects] == [(4, "crash:exit")]


def test_the_guarded_chain_scores_as_the_chain_in_process(tmp_path: Path, share_key: str | None):
    cfg = CorpusConfig(inputs=[_input(tmp_path / "in.jsonl")], near_dedup=True)
    good, _ = readers.split_table(readers.unit_table(cfg.inputs, "jsonl", reader_config(cfg)))
    build = StepsFactory("rayworks.pipelines.corpus.chain:build_steps", cfg)
    guarded = GuardedChain(build, budget_s=300, share_key=share_key)
    try:
        remote = guarded(good)
    finally:
        guarded.close()
    assert _forked_as_asked(guarded, share_key)
    local = LocalChain(build)(good)
    assert remote.timeouts == local.timeouts == []
    assert remote.table.schema == local.table.schema
    # NaN (the fill of unscored float cells) never equals itself: compare as pandas does
    assert remote.table.to_pandas().equals(local.table.to_pandas())
    assert remote.table.schema.field("line").type == good.schema.field("line").type
