"""The exploration weight lam of the priority rules is chosen on validation queries only:
changing the test queries never changes it, changing the validation queries can."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayworks.core.config import build_config
from rayworks.data.tasks.base import Example
from rayworks.pipelines.ttc import pipeline as ttc_pipeline
from rayworks.pipelines.ttc.allocators import AllocatorConfig, Draw
from rayworks.pipelines.ttc.config import TTCConfig
from rayworks.pipelines.ttc.pipeline import choose_lam, replay, run_ttc
from rayworks.platform.context import RunContext


def pool(diverse_hard: bool) -> tuple[list[Example], list[list[Draw]]]:
    """4 hard queries, first right at their 6th sample, and 4 never right. `diverse_hard`:
    the hard ones answer diversely and the unsolvable ones repeat one answer (what the
    Entropy rule assumes); else the reverse."""

    def wrong(i: int, j: int, diverse: bool) -> Draw:
        answer = f"w{i}_{j}" if diverse else f"w{i}"
        return Draw(answer, 0.0, 1, False, f"A: {answer}")

    items, draws = [], []
    for i in range(8):
        hard = i % 2 == 0
        diverse = diverse_hard if hard else not diverse_hard
        row = [wrong(i, j, diverse) for j in range(16)]
        if hard:
            row[5] = Draw("right", 1.0, 1, True, "A: right")
        items.append(Example(f"Q: {i}\n", "A: right", "right", 1 + hard))
        draws.append(row)
    return items, draws


def chosen_lam(tmp_path: Path, monkeypatch, val: bool, test: bool) -> float:
    pools = {"val": pool(val), "test": pool(test)}
    monkeypatch.setattr(ttc_pipeline, "pool_draws", lambda cfg, ctx, split: pools[split])
    cfg = build_config(
        TTCConfig,
        None,
        (),
        ["level=sampler", "allocator.rule=entropy", "budgets=[5]", "budget=5", "lam_grid=[0,10]"],
    )
    summary = run_ttc(cfg, RunContext.create("ttc", cfg, runs_dir=tmp_path))
    # the run's choice is the selection on the validation pool alone
    alone, _ = choose_lam(replay(pools["val"][1]), cfg.allocator, [0.0, 10.0], 5 * 8)
    assert summary["lam"] == alone
    return summary["lam"]


def test_lam_is_chosen_on_validation_queries_only(tmp_path: Path, monkeypatch) -> None:
    informative = chosen_lam(tmp_path, monkeypatch, val=True, test=True)
    assert chosen_lam(tmp_path, monkeypatch, val=True, test=False) == informative
    misleading = chosen_lam(tmp_path, monkeypatch, val=False, test=True)
    assert chosen_lam(tmp_path, monkeypatch, val=False, test=False) == misleading
    # where entropy marks the solvable queries the pure entropy order (lam = 0) wins; where
    # it marks the unsolvable ones a large bonus (near round robin) spends less on them
    assert (informative, misleading) == (0.0, 10.0)


def test_choose_lam_reads_coverage_then_unsolvable_share() -> None:
    _, draws = pool(diverse_hard=True)
    lam, rows = choose_lam(replay(draws), AllocatorConfig(rule="entropy"), [10.0, 0.0], 40)
    by_lam = {r["lam"]: r for r in rows}
    assert by_lam[0.0]["coverage"] == 0.5 > by_lam[10.0]["coverage"] and lam == 0.0
    _, draws = pool(diverse_hard=False)
    lam, rows = choose_lam(replay(draws), AllocatorConfig(rule="entropy"), [0.0, 10.0], 40)
    by_lam = {r["lam"]: r for r in rows}
    assert by_lam[0.0]["coverage"] == by_lam[10.0]["coverage"] == 0  # a tie on coverage ...
    assert by_lam[10.0]["unsolvable_share"] < by_lam[0.0]["unsolvable_share"] and lam == 10.0
    with pytest.raises(KeyError):
        choose_lam(lambda alloc, total: {"coverage": 0.0}, AllocatorConfig(), [0.0], 8)
