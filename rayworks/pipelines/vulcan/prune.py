"""Step 6: prune a post-trained ViT to its budget, exactly when the collapse is perfect.

FFN merge (checked): new fc1 row k = the anchor's row (weight and bias); new fc2 column
k = Σ_{i ∈ cluster k} W2[:, i]; fc2 bias unchanged. When every member's fc1 row and bias
equal its anchor's, GELU(W1[i] x + b1[i]) is the same for the whole cluster, so the merge
reproduces the FFN exactly. Neurons in no cluster (label -1, direct pruning) are dropped.

Attention SVD cut (checked), per head with Ŵ = [W | b] ∈ R^{d_h x (d+1)}:
  QK: U Σ Vᵀ = svd(Ŵ_Qᵀ Ŵ_K); Ŵ_Q' = (U_rho Σ_rho^{1/2})ᵀ, Ŵ_K' = Σ_rho^{1/2} V_rhoᵀ, so
      x̂ Ŵ_Q'ᵀ Ŵ_K' x̂ᵀ is the best rank-rho approximation of the logits' bilinear form.
  VO: U Σ Vᵀ = svd(Ŵ_Vᵀ W_Oʰᵀ) ((d+1) x d); Ŵ_V' = (U_rho Σ_rho^{1/2})ᵀ, W_Oʰ' = V_rho Σ_rho^{1/2}.
The last column of each Ŵ' is the new bias. The paper multiplies Ŵ_Q' by √(rho/d_h) to undo
the softmax scale change rho^{-1/2}; our ViT always scales by the unpruned d_h^{-1/2}
(`rayworks.models.vit`), so no compensation is needed. Exact at rho ≥ the factors' rank.
SVDs run in float64.
"""

from __future__ import annotations

import torch
from torch import nn

from rayworks.models.vit import ViT
from rayworks.pipelines.vulcan.budget import Budget, head_factors, pruned_spec
from rayworks.pipelines.vulcan.clustering import Clusters


def merge_ffn(fc1: nn.Linear, fc2: nn.Linear, clusters: Clusters) -> dict[str, torch.Tensor]:
    """fc1/fc2 weights and biases of the merged FFN with `clusters.size` neurons."""
    k = clusters.size
    members = torch.zeros(k, fc1.out_features, dtype=fc2.weight.dtype)  # [K, e] one-hot
    inside = clusters.labels >= 0
    members[clusters.labels[inside], torch.nonzero(inside).squeeze(1)] = 1.0
    return {
        "fc1.weight": fc1.weight[clusters.anchors].clone(),
        "fc1.bias": fc1.bias[clusters.anchors].clone(),
        "fc2.weight": fc2.weight @ members.T,  # [d, e] @ [e, K]
        "fc2.bias": fc2.bias.clone(),
    }


def _split_hat(hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[H, rho, d+1] -> (weight [H rho, d], bias [H rho])."""
    flat = hat.reshape(-1, hat.shape[-1])
    return flat[:, :-1].contiguous(), flat[:, -1].contiguous()


def _low_rank(m: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """m ≈ A B with A = U_rho Σ^{1/2} [p, rho] and B = Σ^{1/2} V_rhoᵀ [rho, q] (float64 SVD)."""
    u, s, vh = torch.linalg.svd(m.double(), full_matrices=False)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, root[:, None] * vh[:rank]


def cut_attention(model: ViT, layer: int, qk_dim: int, vo_dim: int) -> dict[str, torch.Tensor]:
    """Q/K/V/O weights and biases of one attention layer cut to ranks qk_dim and vo_dim."""
    f = head_factors(model, layer)
    dtype = f["q"].dtype
    q_new, k_new, v_new, o_new = [], [], [], []
    for q, k, v, o in zip(f["q"], f["k"], f["v"], f["o"], strict=True):
        a, b = _low_rank(q.T @ k, qk_dim)  # [(d+1), rho], [rho, (d+1)]
        q_new.append(a.T)
        k_new.append(b)
        a, b = _low_rank(v.T @ o.T, vo_dim)  # [(d+1), rho], [rho, d]
        v_new.append(a.T)
        o_new.append(b.T)  # [d, rho]
    out = {}
    for name, hats in (("q", q_new), ("k", k_new), ("v", v_new)):
        w, bias = _split_hat(torch.stack(hats).to(dtype))
        out[f"attn.{name}.weight"], out[f"attn.{name}.bias"] = w, bias
    out["attn.o.weight"] = torch.cat(o_new, 1).to(dtype)  # [d, H rho], heads in order
    out["attn.o.bias"] = model.blocks[layer].attn.o.bias.clone()
    return out


@torch.no_grad()
def prune_vit(model: ViT, clusters: list[Clusters], budget: Budget) -> ViT:
    """A new, smaller ViT: FFNs merged by `clusters`, attention cut to `budget`'s ranks."""
    sizes = tuple(c.size for c in clusters)
    if sizes != budget.ffn_dims:
        raise ValueError(f"cluster counts {sizes} differ from the FFN budget {budget.ffn_dims}")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for layer, block_clusters in enumerate(clusters):
        block = model.blocks[layer]
        new = merge_ffn(block.fc1, block.fc2, block_clusters)
        new |= cut_attention(model, layer, budget.qk_dims[layer], budget.vo_dims[layer])
        state.update({f"blocks.{layer}.{k}": v for k, v in new.items()})
    pruned = ViT(pruned_spec(model.spec, budget))
    pruned.load_state_dict(state)
    return pruned.eval()
