"""Step 3: cluster each FFN's neurons and pick one anchor per cluster.

KMeans (scikit-learn, random_state 0, as in the official code) with K_l clusters on the
rows of W1_l (fc1 input weights). Anchor a_c = the member with the largest mean S-train
activation (`most_active`, the paper) or a seeded random member (`random`, ablation).
Anchors stay fixed for the whole post-training: the official code writes re-computed
anchors to a field the loss never reads, so its anchors never change; we do the same on
purpose (reconstructed choice, named in the docs).

`top_neurons` is the direct-pruning selection (the K_l most active neurons), written as
singleton clusters so one merge routine prunes both ways.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans


@dataclass(frozen=True)
class Clusters:
    """Neuron clusters of one FFN: `labels[i]` = cluster of neuron i, `anchors[c]` = anchor."""

    labels: torch.Tensor  # [e] int64, values in 0..K-1
    anchors: torch.Tensor  # [K] int64 neuron indices

    @property
    def size(self) -> int:
        return int(self.anchors.numel())

    def anchor_of(self) -> torch.Tensor:
        """[e] the anchor neuron of every neuron's cluster."""
        return self.anchors[self.labels]


def _order_by_anchor(labels: np.ndarray, anchors: list[int]) -> Clusters:
    order = np.argsort(anchors)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return Clusters(
        torch.as_tensor(rank[labels], dtype=torch.long),
        torch.as_tensor(np.asarray(anchors)[order], dtype=torch.long),
    )


def cluster_neurons(
    fc1_weight: torch.Tensor, activity: torch.Tensor, k: int, anchor_rule: str, seed: int = 0
) -> Clusters:
    """KMeans of the rows of `fc1_weight` [e, d] into `k` clusters with anchors."""
    rows = fc1_weight.detach().double().numpy()
    labels = KMeans(n_clusters=k, random_state=0, n_init=1).fit(rows).labels_
    rng = np.random.default_rng(seed)
    anchors = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if anchor_rule == "random":
            anchors.append(int(rng.choice(members)))
        else:
            anchors.append(int(members[np.argmax(activity[members].numpy())]))
    return _order_by_anchor(labels, anchors)


def top_neurons(activity: torch.Tensor, k: int) -> Clusters:
    """The `k` most active neurons, each its own cluster; the rest belong to none (-1)."""
    keep = torch.sort(torch.topk(activity, k).indices).values
    labels = torch.full((activity.numel(),), -1, dtype=torch.long)
    labels[keep] = torch.arange(k)
    return Clusters(labels, keep)
