"""Budget accounting: widths from the pruning rate, and the size of the model they build."""

from __future__ import annotations

import pytest
import torch

from rayworks.models.vit import ViT, n_params
from rayworks.pipelines.vulcan.budget import (
    Budget,
    effective_rank,
    ffn_widths,
    mha_ranks,
    plan_budget,
    prunable_ratio,
    pruned_spec,
    round_width,
    vit_params,
)


def test_param_count_of_the_pruned_spec_equals_the_budget(tiny_vit) -> None:
    budget = Budget((4, 10), (2, 6), (8, 4))
    spec = pruned_spec(tiny_vit.spec, budget)
    assert vit_params(spec) == n_params(ViT(spec))
    assert vit_params(tiny_vit.spec) == n_params(tiny_vit)
    assert vit_params(spec) < vit_params(tiny_vit.spec)
    assert prunable_ratio(tiny_vit.spec, tiny_vit.spec) == 1.0
    assert 0 < prunable_ratio(tiny_vit.spec, spec) < 1


def test_round_width() -> None:
    assert [round_width(w, 2, 16) for w in (0.4, 3.2, 7.9, 17)] == [2, 2, 6, 16]
    assert round_width(13, 8, 64) == 8 and round_width(17, 8, 64) == 16


def test_adaptive_ffn_widths_follow_the_global_quantile() -> None:
    hot = torch.cat([torch.zeros(40), torch.ones(24)])  # 24 of 64 neurons clearly active
    flat = torch.linspace(0, 1, 64)  # z-scores spread evenly
    widths = ffn_widths([hot, flat], rate=0.5, multiple=2, rule="adaptive")
    z = torch.cat([(a - a.mean()) / a.std() for a in (hot, flat)])
    thr = torch.quantile(z.double(), 0.5)
    expected = [int((zl > thr).sum()) // 2 * 2 for zl in z.split(64)]
    assert widths == expected and widths[0] == 24
    assert ffn_widths([hot, flat], 0.8, 2, "uniform") == [12, 12]
    assert all(w % 4 == 0 and w >= 4 for w in ffn_widths([hot, flat], 0.99, 4, "adaptive"))


def test_mha_ranks_prune_low_erank_layers_more() -> None:
    qk, vo = mha_ranks(
        [(4.0, 4.0), (12.0, 12.0)], head_dim=16, rate=0.5, multiple=2, rule="adaptive"
    )
    assert qk[0] < qk[1] and vo[0] < vo[1]
    # rate_l = r L / (e_l Σ 1/e): layer 0 -> 0.75, layer 1 -> 0.25
    assert (qk, vo) == ([4, 12], [4, 12])
    assert mha_ranks([(1.0, 1.0)] * 3, 16, 0.8, 2, "uniform") == ([2] * 3, [2] * 3)


def test_effective_rank_and_plan(tiny_vit) -> None:
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0)
    assert effective_rank(torch.outer(torch.ones(4), torch.arange(1.0, 5))) == pytest.approx(1.0)
    acts = [torch.rand(24, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    budget = plan_budget(tiny_vit, acts, 0.6, 2, "adaptive")
    assert all(2 <= w <= 24 and w % 2 == 0 for w in budget.ffn_dims)
    assert all(2 <= w <= 8 for w in budget.qk_dims + budget.vo_dims)
