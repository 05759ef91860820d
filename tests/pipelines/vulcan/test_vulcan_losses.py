"""Collapse loss, truncated nuclear norm and the λ ascent."""

from __future__ import annotations

import copy

import pytest
import torch

from rayworks.pipelines.vulcan.budget import Budget
from rayworks.pipelines.vulcan.clustering import Clusters, cluster_neurons
from rayworks.pipelines.vulcan.losses import (
    Penalty,
    collapse_terms,
    non_singleton_clusters,
    rank_terms,
)


def test_collapse_loss_is_zero_exactly_when_neurons_sit_on_their_anchors(tiny_vit) -> None:
    acts = torch.rand(24, generator=torch.Generator().manual_seed(0))
    clusters = [cluster_neurons(b.fc1.weight, acts, 5, "most_active") for b in tiny_vit.blocks]
    l1, l2 = collapse_terms(tiny_vit, clusters)
    assert l1 > 0 and l2 > 0
    collapsed = copy.deepcopy(tiny_vit)
    with torch.no_grad():
        for block, c in zip(collapsed.blocks, clusters, strict=True):
            block.fc1.weight.copy_(block.fc1.weight[c.anchor_of()])
            block.fc1.bias.copy_(block.fc1.bias[c.anchor_of()])
    assert collapse_terms(collapsed, clusters) == (0.0, 0.0)
    with torch.no_grad():  # moving one bias alone is seen
        collapsed.blocks[1].fc1.bias[0] += 0.5
    l1, l2 = collapse_terms(collapsed, clusters)
    singleton = int((clusters[1].labels == clusters[1].labels[0]).sum()) == 1
    n = non_singleton_clusters(clusters[1])
    assert singleton or (
        l1.item() * n == pytest.approx(0.5) and l2.item() * n == pytest.approx(0.25)
    )


def _clusters(groups: list[list[int]], anchors: list[int], e: int) -> Clusters:
    labels = torch.full((e,), -1, dtype=torch.long)
    for c, members in enumerate(groups):
        labels[members] = c
    return Clusters(labels, torch.tensor(anchors))


def test_collapse_is_divided_by_the_non_singleton_clusters(tiny_vit) -> None:
    """Hand-computed: layer 0 has 1 non-singleton cluster of 23, layer 1 has 2 of 21."""
    e = tiny_vit.spec.ffn_dim  # 24
    c0 = _clusters([[0, 1]] + [[i] for i in range(2, 24)], [0, *list(range(2, 24))], e)
    c1 = _clusters(
        [[0, 1, 2], [3, 4]] + [[i] for i in range(5, 24)], [0, 4, *list(range(5, 24))], e
    )
    assert (c0.size, c1.size) == (23, 21)
    assert (non_singleton_clusters(c0), non_singleton_clusters(c1)) == (1, 2)
    model = copy.deepcopy(tiny_vit)
    with torch.no_grad():
        for block in model.blocks:
            block.fc1.weight.zero_()
            block.fc1.bias.zero_()
        model.blocks[0].fc1.weight[1, 0] = 2.0  # neuron 1 vs anchor 0: |2| + |1|, 4 + 1
        model.blocks[0].fc1.bias[1] = 1.0
        model.blocks[0].fc1.weight[5, 3] = 7.0  # a singleton: its own anchor, no term
        model.blocks[1].fc1.weight[2, 3] = -1.0  # neuron 2 vs anchor 0: 1, 1
        model.blocks[1].fc1.bias[3] = 0.5  # neuron 3 vs anchor 4: 0.5, 0.25
    l1, l2 = (float(t.detach()) for t in collapse_terms(model, [c0, c1]))
    # layer 0: (3, 5) / 1; layer 1: (1.5, 1.25) / 2   (dividing by K_l would give 0.2, 0.28)
    assert l1 == pytest.approx(3 / 1 + 1.5 / 2)
    assert l2 == pytest.approx(5 / 1 + 1.25 / 2)
    singletons = _clusters([[i] for i in range(24)], list(range(24)), e)
    assert non_singleton_clusters(singletons) == 1  # no term, no division by zero


def test_anchors_are_the_most_active_members(tiny_vit) -> None:
    acts = torch.rand(24, generator=torch.Generator().manual_seed(3))
    c = cluster_neurons(tiny_vit.blocks[0].fc1.weight, acts, 6, "most_active")
    assert c.size == 6 and set(c.labels.tolist()) == set(range(6))
    for k, anchor in enumerate(c.anchors.tolist()):
        members = torch.nonzero(c.labels == k).squeeze(1)
        assert anchor == int(members[acts[members].argmax()])
    r = cluster_neurons(tiny_vit.blocks[0].fc1.weight, acts, 6, "random", seed=1)
    assert all(r.labels[a] == k for k, a in enumerate(r.anchors.tolist()))


def test_tnnr_is_zero_at_full_rank_budget_and_positive_below(tiny_vit) -> None:
    full = rank_terms(tiny_vit, Budget((24, 24), (8, 8), (8, 8)))
    assert full == (0.0, 0.0)
    l1, l2 = rank_terms(tiny_vit, Budget((24, 24), (2, 2), (2, 2)))
    assert l1 > 0 and l2 > 0


def test_lambdas_ascend_and_penalty_pulls_weights(tiny_vit, images) -> None:
    acts = torch.rand(24, generator=torch.Generator().manual_seed(0))
    clusters = [cluster_neurons(b.fc1.weight, acts, 5, "most_active") for b in tiny_vit.blocks]
    penalty = Penalty(clusters, Budget((5, 5), (2, 2), (2, 2)), lambda_lr=0.1)
    opt = torch.optim.SGD(tiny_vit.parameters(), lr=0.01)
    before = collapse_terms(tiny_vit, clusters)[0].item()
    for _ in range(3):
        loss = tiny_vit(images).square().mean() + penalty.loss(tiny_vit)
        opt.zero_grad()
        loss.backward()
        opt.step()
        penalty.ascend()
    assert penalty.last["lambda1"] > 0.25 and penalty.last["lambda2"] > 0.25
    assert collapse_terms(tiny_vit, clusters)[0].item() < before
