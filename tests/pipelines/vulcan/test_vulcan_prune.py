"""Exactness of the prune step: merged collapsed neurons and SVD-cut heads."""

from __future__ import annotations

import copy

import pytest
import torch

from rayworks.models.vit import ViT
from rayworks.pipelines.vulcan.baselines import direct_prune
from rayworks.pipelines.vulcan.budget import Budget, head_factors
from rayworks.pipelines.vulcan.clustering import Clusters, cluster_neurons, top_neurons
from rayworks.pipelines.vulcan.prune import cut_attention, prune_vit


def clusters_of(model: ViT, k: int) -> list[Clusters]:
    activity = torch.arange(model.spec.ffn_dim, dtype=torch.float32)
    return [cluster_neurons(b.fc1.weight, activity, k, "most_active") for b in model.blocks]


def collapse(model: ViT, clusters: list[Clusters]) -> ViT:
    """Copy of `model` whose every FFN neuron equals its cluster anchor (perfect collapse)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for block, c in zip(out.blocks, clusters, strict=True):
            block.fc1.weight.copy_(block.fc1.weight[c.anchor_of()])
            block.fc1.bias.copy_(block.fc1.bias[c.anchor_of()])
    return out


def full_rank(model: ViT, ffn: tuple[int, ...]) -> Budget:
    h = (model.spec.head_dim,) * model.spec.n_layer
    return Budget(ffn, h, h)


def test_merging_collapsed_neurons_reproduces_the_collapsed_network(tiny_vit, images) -> None:
    clusters = clusters_of(tiny_vit, k=6)
    collapsed = collapse(tiny_vit, clusters)
    merged = prune_vit(collapsed, clusters, full_rank(tiny_vit, (6, 6)))
    assert merged.spec.ffn_dims == [6, 6] and merged.blocks[0].fc1.out_features == 6
    torch.testing.assert_close(merged(images), collapsed(images), atol=1e-5, rtol=1e-5)
    # the same merge of the un-collapsed network is not exact: the test can fail
    approx = prune_vit(tiny_vit, clusters, full_rank(tiny_vit, (6, 6)))
    assert (approx(images) - tiny_vit(images)).abs().max() > 1e-3


def test_svd_cut_at_full_rank_keeps_the_outputs(tiny_vit, images) -> None:
    ffn = (tiny_vit.spec.ffn_dim,) * 2
    identity = [Clusters(torch.arange(ffn[0]), torch.arange(ffn[0])) for _ in range(2)]
    cut = prune_vit(tiny_vit, identity, full_rank(tiny_vit, ffn))
    torch.testing.assert_close(cut(images), tiny_vit(images), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(cut.blocks[0].attn.q.weight, tiny_vit.blocks[0].attn.q.weight)


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_svd_cut_is_exact_when_the_factors_have_that_rank(tiny_vit, images, rank) -> None:
    model = copy.deepcopy(tiny_vit)
    with torch.no_grad():  # give each head's [W_Q | b_Q] and [W_V | b_V] rank `rank`
        for block in model.blocks:
            for lin in (block.attn.q, block.attn.v):
                hats = torch.cat([lin.weight, lin.bias[:, None]], 1).reshape(2, 8, -1)
                u, s, vh = torch.linalg.svd(hats, full_matrices=False)
                s[:, rank:] = 0
                low = (u * s[:, None]) @ vh
                lin.weight.copy_(low.reshape(16, -1)[:, :-1])
                lin.bias.copy_(low.reshape(16, -1)[:, -1])
    ffn = (24, 24)
    identity = [Clusters(torch.arange(24), torch.arange(24)) for _ in range(2)]
    cut = prune_vit(model, identity, Budget(ffn, (rank, rank), (rank, rank)))
    assert cut.blocks[1].attn.q.out_features == 2 * rank
    torch.testing.assert_close(cut(images), model(images), atol=1e-5, rtol=1e-5)
    lossy = prune_vit(tiny_vit, identity, Budget(ffn, (rank, rank), (rank, rank)))
    assert (lossy(images) - tiny_vit(images)).abs().max() > 1e-4


def test_cut_attention_gives_the_best_rank_approximation(tiny_vit) -> None:
    new = cut_attention(tiny_vit, 0, 3, 3)
    f = head_factors(tiny_vit, 0)
    q = torch.cat([new["attn.q.weight"], new["attn.q.bias"][:, None]], 1).reshape(2, 3, -1)
    k = torch.cat([new["attn.k.weight"], new["attn.k.bias"][:, None]], 1).reshape(2, 3, -1)
    for h in range(2):
        target = (f["q"][h].T @ f["k"][h]).double()
        s = torch.linalg.svdvals(target)
        err = torch.linalg.matrix_norm(target - (q[h].T @ k[h]).double())
        assert err.item() == pytest.approx(s[3:].square().sum().sqrt().item(), rel=1e-4)


def test_direct_prune_keeps_the_most_active_neurons(tiny_vit) -> None:
    acts = [torch.randn(24, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    pruned = direct_prune(tiny_vit, acts, Budget((4, 6), (8, 8), (8, 8)))
    top = top_neurons(acts[1], 6).anchors
    assert set(top.tolist()) == set(torch.topk(acts[1], 6).indices.tolist())
    torch.testing.assert_close(pruned.blocks[1].fc1.weight, tiny_vit.blocks[1].fc1.weight[top])
    torch.testing.assert_close(pruned.blocks[1].fc2.weight, tiny_vit.blocks[1].fc2.weight[:, top])
    with pytest.raises(ValueError, match="cluster counts"):
        prune_vit(tiny_vit, clusters_of(tiny_vit, 5), Budget((4, 4), (8, 8), (8, 8)))
