"""Collapse loss, truncated nuclear norm and the λ ascent."""

from __future__ import annotations

import copy

import torch

from rayworks.pipelines.vulcan.budget import Budget
from rayworks.pipelines.vulcan.clustering import cluster_neurons
from rayworks.pipelines.vulcan.losses import Penalty, collapse_terms, rank_terms


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
    assert singleton or (l1 * clusters[1].size == 0.5 and l2 * clusters[1].size == 0.25)


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
