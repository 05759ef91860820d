"""Stack one attention layer's Q, K, V, Oᵀ weights of all heads into a 4th-order tensor.

Layout (reconstructed; the paper's exact layout is not public):

    W ∈ R^{d x d_h x 4 x H},   W[:, :, m, h] = W_m^h,   m ∈ (Q, K, V, Oᵀ)

where every slice is a d x d_h map in the "x · W" orientation of the residual stream:
q^h = x W_Q^h, k^h = x W_K^h, v^h = x W_V^h, and the output projection is
out = Σ_h o^h (W_Oᵀ^h)ᵀ. With HF's `nn.Linear` layout (weight is out x in):

    W_Q^h  = q_proj.weight[h·d_h:(h+1)·d_h, :]ᵀ      (same for K, V)
    W_Oᵀ^h = o_proj.weight[:, h·d_h:(h+1)·d_h]

Mode 1 (d) is shared by all four matrices and all heads, which is what lets x·U1 be
computed once per layer; mode 2 (d_h) is the per-head feature axis.
"""

from __future__ import annotations

import torch
from torch import Tensor

MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj")  # mode-3 order: Q, K, V, Oᵀ


def to_tensor(attn: torch.nn.Module) -> Tensor:
    """W (d, d_h, 4, H) of an HF Llama attention module (float64 copy)."""
    hd = attn.head_dim
    slices = []
    for name in MATRICES[:3]:
        w = getattr(attn, name).weight.detach().double()  # (H·d_h, d)
        slices.append(w.view(-1, hd, w.shape[1]).permute(2, 1, 0))  # (d, d_h, H)
    wo = attn.o_proj.weight.detach().double()  # (d, H·d_h)
    slices.append(wo.view(wo.shape[0], -1, hd).permute(0, 2, 1))  # (d, d_h, H)
    return torch.stack(slices, dim=2).contiguous()


def from_tensor(w: Tensor) -> dict[str, Tensor]:
    """The four `nn.Linear` weights (out x in) a tensor W (d, d_h, 4, H) stands for."""
    d, hd, _, h = w.shape
    out = {
        name: w[:, :, m, :].permute(2, 1, 0).reshape(h * hd, d)
        for m, name in enumerate(MATRICES[:3])
    }
    out["o_proj"] = w[:, :, 3, :].permute(0, 2, 1).reshape(d, h * hd)
    return out


def dense_params(attn: torch.nn.Module) -> int:
    """Parameters of the dense MHA projections (4 d² when H·d_h = d)."""
    return sum(getattr(attn, name).weight.numel() for name in MATRICES)
