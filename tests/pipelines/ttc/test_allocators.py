"""Allocator accounting and stop rules, on hand-made samplers with known answers."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from rayworks.core.errors import RayworksError
from rayworks.pipelines.ttc.allocators import (
    RULES,
    Allocation,
    AllocatorConfig,
    Draw,
    QueryState,
    allocate,
)


class Scripted:
    """Query i's j-th sample is `script[i][j]` (repeating its last entry); records calls."""

    def __init__(self, script: list[list[Draw]]) -> None:
        self.script, self.used = script, [0] * len(script)
        self.calls: list[list[tuple[int, int]]] = []

    def __call__(self, requests: list[tuple[int, int]]) -> list[list[Draw]]:
        self.calls.append(list(requests))
        out = []
        for i, k in requests:
            row = self.script[i]
            out.append([row[min(self.used[i] + j, len(row) - 1)] for j in range(k)])
            self.used[i] += k
        return out


RIGHT = Draw("7", 1.0, tokens=5, correct=True)
WRONG = Draw("3", 0.0, tokens=9, correct=False)


def script(first_right: list[int | None]) -> list[list[Draw]]:
    """Query i answers wrong until its `first_right[i]`-th sample (None: never right)."""
    return [[WRONG] * 40 if f is None else [WRONG] * (f - 1) + [RIGHT] for f in first_right]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("budget", [0, 3, 10, 37])
def test_never_exceeds_budget_and_first_samples_come_first(rule: str, budget: int) -> None:
    sampler = Scripted(script([1, 3, None, 6, None]))
    run = allocate(5, budget, AllocatorConfig(rule=rule, k=2), sampler)
    assert run.spent <= budget
    if budget >= 10:  # enough for K=2 each: every query got its first samples
        assert all(q.samples >= 2 for q in run.queries)
        first = sampler.calls[0]
        assert sorted(i for i, _ in first) == [0, 1, 2, 3, 4]
    if rule not in ("uniform", "etc") and budget == 37:
        assert run.spent == 37 or not run.active  # budget left only when every query stopped


def test_elimination_stops_solved_queries_and_moves_budget_to_the_rest() -> None:
    sampler = Scripted(script([1, 2, None]))
    run = allocate(3, 12, AllocatorConfig(rule="elimination"), sampler)
    assert [q.samples for q in run.queries] == [1, 2, 9]
    assert [q.done for q in run.queries] == [True, True, False]
    assert run.queries[0].reason == "solved"
    result = run.result(unsolvable=[False, False, True])
    assert result["coverage"] == pytest.approx(2 / 3) and result["spent"] == 12
    assert result["unsolvable_share"] == pytest.approx(9 / 12)
    uniform = allocate(3, 12, AllocatorConfig(rule="uniform"), Scripted(script([1, 2, None])))
    assert [q.samples for q in uniform.queries] == [4, 4, 4]  # Best-of-4, no early stop


def test_final_partial_round_serves_least_sampled_first() -> None:
    run = allocate(4, 6, AllocatorConfig(rule="elimination", k=1), Scripted(script([None] * 4)))
    assert sorted(q.samples for q in run.queries) == [1, 1, 2, 2]
    run = allocate(4, 3, AllocatorConfig(rule="elimination", k=2), Scripted(script([None] * 4)))
    assert [q.samples for q in run.queries] == [2, 1, 0, 0] and run.spent == 3


def test_etc_explores_then_commits_once_to_the_unsolved() -> None:
    sampler = Scripted(script([1, None, None]))
    run = allocate(3, 14, AllocatorConfig(rule="etc", etc_explore=2), sampler)
    assert [q.samples for q in run.queries] == [2, 6, 6]
    assert len(sampler.calls) == 2  # one explore round, one commit round


def test_priority_rules_rank_as_documented() -> None:
    run = Allocation(3, 100, AllocatorConfig(rule="entropy", lam=0.0))
    run.record(
        [(0, 4), (1, 4), (2, 4)],
        [
            [Draw(a, 0.0) for a in "aaaa"],
            [Draw(a, 0.0) for a in "abcd"],
            [Draw(a, 0.0) for a in "aabb"],
        ],
    )
    assert run.queries[0].entropy() == 0 and run.queries[1].entropy() == pytest.approx(1)
    order = sorted(run.queries, key=run.priority, reverse=True)
    assert [q.index for q in order] == [1, 2, 0]
    assert run.next_requests() == [(1, 1), (2, 1)]  # top half (ceil) of the active queries
    gap = Allocation(2, 100, AllocatorConfig(rule="gap", reward_threshold=0.9))
    gap.record([(0, 1), (1, 1)], [[Draw("x", 0.2)], [Draw("y", 0.8)]])
    assert gap.priority(gap.queries[1]) > gap.priority(gap.queries[0])
    ucb = Allocation(2, 100, AllocatorConfig(rule="ucb", lam=1.0))
    ucb.record([(0, 4), (1, 1)], [[Draw("x", 0.3)] * 4, [Draw("y", 0.3)]])
    assert ucb.priority(ucb.queries[1]) > ucb.priority(ucb.queries[0])  # fewer samples: bonus


def test_consistency_mode_needs_no_oracle_and_votes() -> None:
    rows = [[Draw("5")] * 10, [Draw(a) for a in "1234" * 10], [Draw(a) for a in "9989999999"]]
    cfg = AllocatorConfig(
        rule="elimination", stop="consistency", consistency_threshold=0.6, min_samples=3
    )
    run = allocate(3, 30, cfg, Scripted(rows))
    assert run.queries[0].samples == 3 and run.queries[0].reason == "consistent"
    assert run.queries[2].reason == "consistent" and run.queries[2].samples == 3  # 9,9,8: 2/3
    assert run.queries[1].samples == 30 - 3 - 3 and not run.queries[1].done
    assert [d.answer for d in run.answers()] == ["5", "1", "9"]
    with pytest.raises(ValidationError, match="consistency"):
        AllocatorConfig(rule="ucb", stop="consistency")


def test_bconf_stops_confident_queries() -> None:
    rows = [[Draw("5", 0.0)] * 10, [Draw(a, 0.0) for a in "1234123412"]]
    cfg = AllocatorConfig(rule="bconf", bconf_threshold=0.8, min_samples=3)
    run = allocate(2, 12, cfg, Scripted(rows))
    assert run.queries[0].reason == "confident" and run.queries[0].samples == 3
    assert run.queries[1].samples == 9


def test_token_budget_counts_tokens_and_never_overspends() -> None:
    cfg = AllocatorConfig(rule="elimination", unit="tokens", max_sample_tokens=10)
    run = allocate(3, 95, cfg, Scripted(script([None, None, None])))  # each sample 9 tokens
    assert run.spent <= 95 and run.spent == 9 * sum(q.samples for q in run.queries)
    # each round asks only for what fits at 10 tokens a sample, then re-plans on the real
    # 9: 3 samples (27 spent), 3 (54), 3 (81), then 14 left -> 1 more (90)
    assert sum(q.samples for q in run.queries) == 10 and run.rounds == 4
    bad = Allocation(1, 5, AllocatorConfig(unit="tokens", max_sample_tokens=2))
    with pytest.raises(RayworksError, match="max_sample_tokens"):
        bad.record(bad.next_requests(), [[Draw("x", tokens=50)]])


def test_caps_bound_each_query() -> None:
    run = allocate(2, 20, AllocatorConfig(), Scripted(script([None, None])), caps=[3, None])
    assert [q.samples for q in run.queries] == [3, 17]
    assert run.queries[0].reason == "capped"


def test_bad_inputs_are_named() -> None:
    with pytest.raises(RayworksError, match="n=0"):
        Allocation(0, 10, AllocatorConfig())
    with pytest.raises(RayworksError, match="budget"):
        Allocation(2, -1, AllocatorConfig())
    with pytest.raises(ValidationError, match="rule"):
        AllocatorConfig(rule="greedy")
    run = Allocation(2, 10, AllocatorConfig())
    with pytest.raises(RayworksError, match="draw lists"):
        run.record([(0, 1), (1, 1)], [[WRONG]])


def test_query_state_statistics() -> None:
    q = QueryState(0, draws=[Draw(None, 0.1), Draw("4", 0.7), Draw("4", 0.2), Draw("5", math.nan)])
    assert q.vote() == ("4", 0.5)  # a malformed answer counts but never wins
    assert q.best is not None and q.best.score == 0.7 and q.mean_score == pytest.approx(1.0 / 3)
    assert q.counts["<malformed>"] == 1 and 0 < q.entropy() < 1
    assert q.selected(by_score=False).answer == "4"


def test_tied_priorities_fall_back_to_round_robin() -> None:
    """GAP under an exact oracle: every unsolved query scores 0, so all tie; the rounds must
    rotate over them rather than keep sampling the same ones."""
    run = allocate(4, 20, AllocatorConfig(rule="gap"), Scripted(script([None] * 4)))
    assert [q.samples for q in run.queries] == [5, 5, 5, 5]
