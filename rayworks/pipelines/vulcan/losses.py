"""Step 5: Vulcan's post-training objective L = CE + L_collapse + L_rank (checked).

L_collapse = Σ_l (1/N_l) Σ_c Σ_{i∈c, i≠a_c} [λ1 (‖W1[i] - W1[a_c]‖₁ + |b1[i] - b1[a_c]|)
                                          + λ2 (‖W1[i] - W1[a_c]‖₂² + (b1[i] - b1[a_c])²)]
pulls every FFN neuron onto its cluster's anchor (the anchor's own term is 0; gradients
reach both ends of each difference, as the formula reads). N_l is the number of
non-singleton clusters of layer l (at least 1), as the official code normalises: a
singleton cluster contributes no term, so dividing by all K_l clusters (the paper's
formula read literally) would shrink the penalty of layers with many singletons.

L_rank = (1/(H L)) Σ_{l,h} [λ1 Σ_{i>rho_qk} sigma_i(Ŵ_Q) + λ2 Σ_{i>rho_qk} sigma_i²(Ŵ_Q)
                          + λ1 Σ_{i>rho_vo} sigma_i(Ŵ_V) + λ2 Σ_{i>rho_vo} sigma_i²(Ŵ_V)]
is the truncated nuclear norm (TNNR) of each head's Ŵ = [W | b]: once sigma_i = 0 beyond rho,
rank(Ŵ_Qᵀ Ŵ_K) ≤ rho and rank(Ŵ_Vᵀ W_Oʰᵀ) ≤ rho, so the SVD cut of `prune.py` is exact.

λ1, λ2 (one pair shared by both terms, as the formula writes them) start at 0 and are
raised by gradient ascent: AdamW with `maximize=True`, no weight decay, which is the
paper's AdamW with lr = -penalty_param. dL/dλ ≥ 0 always, so with Adam's normalised step
each λ grows by about `lambda_lr` per step: an increasing-penalty schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rayworks.models.vit import ViT
from rayworks.pipelines.vulcan.budget import Budget, head_factors
from rayworks.pipelines.vulcan.clustering import Clusters


def non_singleton_clusters(c: Clusters) -> int:
    """N_l: clusters with at least two members (at least 1, so an all-singleton layer is 0/1)."""
    members = torch.bincount(c.labels[c.labels >= 0], minlength=c.size)
    return max(1, int((members > 1).sum()))


def collapse_terms(model: ViT, clusters: list[Clusters]) -> tuple[torch.Tensor, torch.Tensor]:
    """(L1 part, squared-L2 part) of L_collapse before the multipliers."""
    l1 = l2 = torch.zeros(())
    for block, c in zip(model.blocks, clusters, strict=True):
        w = torch.cat([block.fc1.weight, block.fc1.bias[:, None]], 1)  # [e, d+1]
        diff = w - w[c.anchor_of()]
        n = non_singleton_clusters(c)
        l1 = l1 + diff.abs().sum() / n
        l2 = l2 + diff.square().sum() / n
    return l1, l2


def truncated_singular_values(hats: torch.Tensor, rank: int) -> torch.Tensor:
    """sigma_i for i > rank of every head's Ŵ [H, d_h, d+1] -> [H, d_h - rank]."""
    return torch.linalg.svdvals(hats)[:, rank:]


def rank_terms(model: ViT, budget: Budget) -> tuple[torch.Tensor, torch.Tensor]:
    """(L1 part, squared part) of L_rank before the multipliers, averaged over heads, layers."""
    l1 = l2 = torch.zeros(())
    heads = 0
    for layer in range(len(model.blocks)):
        f = head_factors(model, layer)
        for name, rank in (("q", budget.qk_dims[layer]), ("v", budget.vo_dims[layer])):
            tail = truncated_singular_values(f[name], rank)
            l1, l2 = l1 + tail.sum(), l2 + tail.square().sum()
        heads += f["q"].shape[0]
    return l1 / heads, l2 / heads


@dataclass
class Penalty:
    """Collapse + TNNR with ascending multipliers; `loss(model)` adds to the CE."""

    clusters: list[Clusters] | None  # None: no collapse loss (ablation)
    budget: Budget | None  # None: no TNNR (ablation)
    lambda_lr: float

    def __post_init__(self) -> None:
        self.lambdas = nn.Parameter(torch.zeros(2))  # (λ1, λ2)
        self.ascent = torch.optim.AdamW(
            [self.lambdas], lr=self.lambda_lr, weight_decay=0.0, maximize=True
        )
        self.last: dict[str, float] = {}

    def loss(self, model: ViT) -> torch.Tensor:
        l1 = l2 = torch.zeros(())
        if self.clusters is not None:
            c1, c2 = collapse_terms(model, self.clusters)
            l1, l2 = l1 + c1, l2 + c2
            self.last["collapse_l1"] = float(c1.detach())
        if self.budget is not None:
            r1, r2 = rank_terms(model, self.budget)
            l1, l2 = l1 + r1, l2 + r2
            self.last["rank_l1"] = float(r1.detach())
        return self.lambdas[0] * l1 + self.lambdas[1] * l2

    def ascend(self) -> None:
        """One gradient-ascent step on (λ1, λ2) from the gradient of the last backward."""
        if self.lambdas.grad is not None:
            self.ascent.step()
            self.ascent.zero_grad(set_to_none=True)
        self.last["lambda1"], self.last["lambda2"] = (float(x) for x in self.lambdas.detach())
