"""Compressed-domain attention: inference straight from the factors, no custom kernel.

`TuckerAttention` replaces an HF `LlamaAttention` by its (sparse or dense) Tucker form
W ≈ G x1 U1 x2 U2 (layout in `tensorize.py`):

    z   = x U1                          (B, T, R1), once per layer, shared by Q, K, V, heads
    c   = z [G_Q | G_K | G_V]           (B, T, 3, H, R2), one matmul for all heads
    q^h = c_Q^h U2ᵀ,  k^h = c_K^h U2ᵀ   (then RoPE, as in the dense model)
    o^h = softmax(q^h k^hᵀ / √d_h) c_V^h                  (values stay R2-dimensional)
    out = Σ_h o^h G_Oᵀ^h U1ᵀ

The V → O path drops U2 exactly: v^h W_Oᵀ^hᵀ = z G_V^h U2ᵀ U2 G_O^hᵀ U1ᵀ and U2ᵀU2 = I.
The sparse core is stored and multiplied as a dense matrix with zeros (plain matmuls): the
sparsity saves storage, not FLOPs, in this implementation (a simplification; the paper
reports throughput gains without custom kernels, on GPUs and at LLM scale).

`LowRankLinear` is the per-matrix SVD baseline's two-matmul projection.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rayworks.pipelines.lestd.baselines import LowRank
from rayworks.pipelines.lestd.hooi import Tucker


class TuckerAttention(nn.Module):
    """Causal self-attention computed in the Tucker domain (drop-in for `self_attn`)."""

    def __init__(self, t: Tucker, layer_idx: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        r1, r2, _, heads = t.core.shape
        self.layer_idx, self.heads, self.r2 = layer_idx, heads, r2
        self.head_dim = t.u2.shape[0]
        self.scaling = self.head_dim**-0.5
        self.u1 = nn.Parameter(t.u1.to(dtype), requires_grad=False)  # (d, R1)
        self.u2t = nn.Parameter(t.u2.T.contiguous().to(dtype), requires_grad=False)  # (R2, d_h)
        qkv = t.core[:, :, :3, :].permute(0, 2, 3, 1).reshape(r1, 3 * heads * r2)
        self.core_qkv = nn.Parameter(qkv.contiguous().to(dtype), requires_grad=False)
        out = t.core[:, :, 3, :].permute(2, 1, 0).reshape(heads * r2, r1)  # [h, j, i]
        self.core_o = nn.Parameter(out.contiguous().to(dtype), requires_grad=False)

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_mask: Tensor | None = None,
        cache: object | None = None,
        **kwargs: object,
    ) -> tuple[Tensor, None]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        if cache is not None:
            raise ValueError("TuckerAttention runs full-sequence forwards only (use_cache=False)")
        b, t, _ = hidden_states.shape
        z = hidden_states @ self.u1  # (B, T, R1)
        c = (z @ self.core_qkv).view(b, t, 3, self.heads, self.r2).transpose(1, 3)
        q = c[:, :, 0] @ self.u2t  # (B, H, T, d_h)
        k = c[:, :, 1] @ self.u2t
        v = c[:, :, 2]  # (B, H, T, R2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        causal = attention_mask is None and t > 1
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, is_causal=causal, scale=self.scaling
        )  # (B, H, T, R2)
        o = o.transpose(1, 2).reshape(b, t, self.heads * self.r2)
        return (o @ self.core_o) @ self.u1.T, None


class LowRankLinear(nn.Module):
    """y = (x bᵀ) aᵀ: a rank-r `nn.Linear` (no bias) in two matmuls."""

    def __init__(self, f: LowRank, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.b = nn.Parameter(f.b.to(dtype), requires_grad=False)  # (r, in)
        self.a = nn.Parameter(f.a.to(dtype), requires_grad=False)  # (out, r)

    def forward(self, x: Tensor) -> Tensor:
        return (x @ self.b.T) @ self.a.T
