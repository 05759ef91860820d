"""SpecPC: query weighting, layer / step aggregation, neighbour expansion and ordering."""

from __future__ import annotations

import pytest
import torch

from rayworks.pipelines.speckv.prompt_compression import (
    AttentionLog,
    SpecPCConfig,
    expand_neighbors,
    random_tokens,
    recency_tokens,
    select_tokens,
    token_scores,
)


def test_neighbour_expansion_is_nearest_first_and_deduplicated() -> None:
    assert expand_neighbors([5, 0, 9], 3, 10) == [5, 4, 6, 0, 1, 9, 8]
    assert expand_neighbors([5, 6], 5, 10) == [5, 4, 6, 3, 7, 8]
    assert expand_neighbors([2], 1, 10) == [2]


def test_select_tokens_orders_by_score_then_truncates_and_sorts() -> None:
    cfg = SpecPCConfig(window=2, kernel=1, neighbors=3)
    scores = torch.zeros(20)
    scores[10], scores[4] = 0.9, 0.5
    # top-k order 10, 4, ...; expanded 10, 9, 11, 4, 3, 5, ...; window 18, 19 first
    assert select_tokens(scores, 7, cfg).tolist() == [3, 4, 9, 10, 11, 18, 19]
    assert select_tokens(scores, 5, cfg).tolist() == [9, 10, 11, 18, 19]
    assert select_tokens(scores, 40, cfg).tolist() == list(range(20))


def test_select_tokens_pools_before_ranking() -> None:
    cfg = SpecPCConfig(window=1, kernel=5, neighbors=1)
    scores = torch.zeros(12)
    scores[3] = 1.0
    # pooling spreads key 3's score over 1..5; the top 4 are in that span
    assert set(select_tokens(scores, 5, cfg).tolist()) <= {1, 2, 3, 4, 5, 11}
    assert 11 in select_tokens(scores, 5, cfg).tolist()


def test_token_scores_weights_queries_and_skips_early_layers_and_late_steps() -> None:
    cfg = SpecPCConfig(start_layer=1, weighted_query=True)
    log = AttentionLog()
    pre0 = torch.zeros(1, 2, 3, 6)
    pre0[0, 0, 0, 0] = 1.0  # row 0 has weight 0
    pre0[0, 1, 2, 1] = 0.5  # the last row has weight 1
    pre0[0, 0, 1, 2] = 0.8  # the middle row has weight 0.5
    log(0, 0, torch.ones(1, 2, 3, 6))  # layer 0 < start_layer: ignored
    log(0, 1, pre0)
    step1 = torch.zeros(1, 2, 1, 7)  # one decode row; key 6 is a generated token
    step1[0, 1, 0, 4] = 0.3
    step1[0, 1, 0, 6] = 0.9
    log(1, 1, step1)
    step2 = torch.zeros(1, 2, 1, 8)
    step2[0, 0, 0, 5] = 0.7
    log(2, 1, step2)
    assert token_scores(log, 6, cfg, lookahead=0).tolist() == pytest.approx([0, 0.5, 0.4, 0, 0, 0])
    one = token_scores(log, 6, cfg, lookahead=1)
    assert one.tolist() == pytest.approx([0, 0.5, 0.4, 0, 0.3, 0])
    assert token_scores(log, 6, cfg, lookahead=2)[5] == pytest.approx(0.7)
    flat = cfg.model_copy(update={"weighted_query": False})
    assert token_scores(log, 6, flat, lookahead=0)[0] == pytest.approx(1.0)


def test_recency_and_random_baselines() -> None:
    assert recency_tokens(10, 4).tolist() == [6, 7, 8, 9]
    idx = random_tokens(30, 8, 3, torch.Generator().manual_seed(0))
    assert len(idx) == 8 and idx[-3:].tolist() == [27, 28, 29]
    assert idx.tolist() == sorted(set(idx.tolist()))
