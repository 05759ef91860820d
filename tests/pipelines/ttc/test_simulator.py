"""The simulator, the theory check (Theorem 1's scales) and the real-sampler helpers."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.data.tasks.base import Example
from rayworks.pipelines.ttc.allocators import AllocatorConfig, Draw, allocate
from rayworks.pipelines.ttc.sampler import (
    PoolSampler,
    auroc,
    difficulty_profile,
    final_answer,
    looping,
    separation,
)
from rayworks.pipelines.ttc.simulator import (
    SimQuery,
    Simulator,
    SimulatorConfig,
    budget_to_cover,
    make_queries,
    run_rule,
    theory_budgets,
    theory_check,
)


def test_mixture_and_draw_statistics() -> None:
    cfg = SimulatorConfig(n_queries=100, easy_share=0.3, hard_share=0.5)
    queries = make_queries(cfg, np.random.default_rng(0))
    kinds = [q.kind for q in queries]
    assert (kinds.count("easy"), kinds.count("hard"), kinds.count("unsolvable")) == (30, 50, 20)
    assert all(0.3 <= q.delta <= 0.9 for q in queries if q.kind == "easy")
    sim = Simulator([SimQuery(0.3, "easy", 3), SimQuery(0.0, "unsolvable", 2)], cfg, seed=1)
    draws = sim([(0, 4000), (1, 500)])
    assert np.mean([d.correct for d in draws[0]]) == pytest.approx(0.3, abs=0.03)
    assert not any(d.correct for d in draws[1])
    assert {d.answer for d in draws[1]} == {"wrong0", "wrong1"}
    again = Simulator(sim.queries, cfg, seed=1)
    assert again([(1, 3), (0, 5)]) == [draws[1][:3], draws[0][:5]]  # order does not matter


def test_noisy_oracle_scores_around_correctness() -> None:
    cfg = SimulatorConfig(oracle="noisy", noise=0.2)
    [row] = Simulator([SimQuery(0.5, "easy", 3)], cfg, seed=0)([(0, 2000)])
    right = [d.score for d in row if d.correct]
    wrong = [d.score for d in row if not d.correct]
    assert 0.7 < np.mean(right) < 0.95 and 0.05 < np.mean(wrong) < 0.3
    assert all(0 <= d.score <= 1 for d in row)


def mean_coverage(queries, cfg, rule: str, budget: int) -> float:
    runs = [run_rule(queries, cfg, AllocatorConfig(rule=rule), budget, s) for s in range(5)]
    return float(np.mean([r["coverage"] for r in runs]))


def test_elimination_beats_uniform_at_equal_budget() -> None:
    cfg = SimulatorConfig(n_queries=60)
    queries = make_queries(cfg, np.random.default_rng(3))
    for per_query in (2, 4, 8):
        elim = mean_coverage(queries, cfg, "elimination", per_query * 60)
        unif = mean_coverage(queries, cfg, "uniform", per_query * 60)
        assert elim >= unif, (per_query, elim, unif)
    gap = mean_coverage(queries, cfg, "elimination", 480) - mean_coverage(
        queries, cfg, "uniform", 480
    )
    assert gap > 0.02  # a real gap, not a tie


def test_budget_to_cover_is_exact_for_elimination() -> None:
    """With K=1 elimination spends exactly sum_i T_i (T_i: first correct sample) to cover all."""
    cfg = SimulatorConfig()
    queries = [SimQuery(d, "graded", 1) for d in (0.2, 0.5, 1.0)]
    sim = Simulator(queries, cfg, seed=4)
    firsts = [next(j + 1 for j in range(10_000) if sim.draw(i).correct) for i in range(3)]
    assert budget_to_cover(queries, cfg, AllocatorConfig(), 1.0, seed=4) == sum(firsts)
    uniform = budget_to_cover(queries, cfg, AllocatorConfig(rule="uniform"), 1.0, seed=4)
    # round robin: query i's T-th sample is the ((T - 1) * 3 + i + 1)-th of the budget
    assert uniform == max((t - 1) * 3 + i + 1 for i, t in enumerate(firsts))


def test_theory_check_tracks_n_over_harmonic() -> None:
    rows = theory_check((8, 16, 32), seeds=5)
    assert theory_budgets([0.5, 1.0]) == {"elimination": 3.0, "uniform": 4.0, "ratio": 4 / 3}
    for row in rows:
        # elimination's mean budget is sum 1/Delta in expectation
        assert row["elimination"] == pytest.approx(row["sum_inv_delta"], rel=0.35)
        assert 0.5 < row["measured_ratio"] / row["theory_ratio"] < 2.5
    ratios = [r["measured_ratio"] for r in rows]
    assert ratios == sorted(ratios) and ratios[-1] > 2 * ratios[0]  # the gap grows with n


def test_pool_sampler_and_final_answer() -> None:
    draws = [[Draw(str(j)) for j in range(4)], [Draw("x")] * 4]
    run = allocate(2, 8, AllocatorConfig(rule="uniform"), PoolSampler(draws), caps=[4, 4])
    assert [d.answer for d in run.queries[0].draws] == ["0", "1", "2", "3"]
    with pytest.raises(Exception, match="pooled"):
        PoolSampler(draws)([(0, 5)])
    assert final_answer("<think>1+2=3</think>A: 3") == "3"
    assert final_answer("A: 1 then A:  42 ") == "42"
    assert final_answer("no answer") is None and final_answer("A: ") is None


def test_separation_auroc() -> None:
    assert auroc([2, 3], [1, 0]) == 1.0 and auroc([1], [1]) == 0.5 and auroc([0], [1]) == 0.0
    hard = [[Draw(a, correct=(a == "a" and j == 0)) for j, a in enumerate("abcdefgh")]] * 3
    none = [[Draw("z", correct=False)] * 8] * 3
    easy = [[Draw("a", correct=True)] * 8]
    out = separation(hard + none + easy, first=4, seed=0)
    assert out["entropy_auroc"] == 1.0 and out["bconf_auroc"] == 1.0
    assert (out["share_hard"], out["share_unsolvable"], out["share_easy"]) == (3 / 7, 3 / 7, 1 / 7)
    assert out["entropy_unsolvable"] == 0.0 and out["bconf_easy"] == 1.0


def test_looping_and_difficulty_profile() -> None:
    assert looping("<think>0+0=0 c0|0+0=0 c0|0+0=0 c0|")
    assert not looping("<think>7+6=13 c1|4+2+1=7 c0</think>A: 773")
    items = [Example(f"Q: {i}\n", "", "5", d) for i, d in enumerate([2, 2, 7])]
    right = Draw("5", 1.0, 3, True, "A: 5")
    stuck = Draw(None, 0.0, 30, False, "1|1|1|1|1|1|1|1|1|1|1|1|1|")
    draws = [[right, Draw("4", 0.0, 3, False, "A: 4")], [right, right], [stuck, stuck]]
    out = difficulty_profile(items, draws, first=2)
    assert (out["queries_d2"], out["queries_d7"]) == (2, 1)
    assert out["pass_d2"] == 0.75 and out["pass_d7"] == 0
    assert out["malformed_d2"] == 0 and out["malformed_d7"] == out["loop_d7"] == 1
    assert out["entropy_d2"] == pytest.approx(0.5) and out["entropy_d7"] == 0
