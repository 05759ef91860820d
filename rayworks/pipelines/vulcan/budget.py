"""From the pruning rate r to the pruned architecture (step 2 and 4 of the algorithm).

FFN widths (checked): z-score every layer's mean activations a_l, take the global
r-quantile over all layers as the threshold; layer l keeps K_l = #neurons above it. The
`uniform` rule (ablation) keeps ⌊e (1 - r)⌋ neurons in every layer.

MHA ranks (checked): per head, Ŵ = [W | b] ∈ R^{d_h x (d+1)}; per layer qk_e = Σ_h
erank(Ŵ_Qᵀ Ŵ_K), vo_e = Σ_h erank(Ŵ_Vᵀ W_Oʰᵀ), e_l = qk_e + vo_e. Layer rate
rate_l = r L / (e_l Σ_l' 1/e_l'), split into qk_rate = rate_l · 2 vo_e / e_l and
vo_rate = rate_l · 2 qk_e / e_l; widths ⌊d_h (1 - rate)⌋. The `uniform` rule uses r for
both. All widths are rounded down to a multiple m (minimum m; recipe m = 2, paper 8).

`vit_params` is the closed-form parameter count of a spec; the tests check it against the
instantiated model, so the reported size of a budget is the size of the model built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayworks.models.vit import ViT, ViTSpec


@dataclass(frozen=True)
class Budget:
    """Per-layer widths of the pruned model."""

    ffn_dims: tuple[int, ...]
    qk_dims: tuple[int, ...]
    vo_dims: tuple[int, ...]


def round_width(width: float, multiple: int, full: int) -> int:
    """⌊width⌋ rounded down to a multiple of `multiple`, at least `multiple`, at most `full`."""
    return min(full, max(multiple, int(width) // multiple * multiple))


def ffn_widths(acts: list[torch.Tensor], rate: float, multiple: int, rule: str) -> list[int]:
    """K_l per layer from the mean activations a_l (`adaptive`) or uniformly."""
    if rule == "uniform":
        return [round_width(a.numel() * (1 - rate), multiple, a.numel()) for a in acts]
    z = [(a - a.mean()) / a.std().clamp_min(1e-12) for a in acts]
    threshold = torch.quantile(torch.cat(z).double(), rate)
    return [round_width(int((zl.double() > threshold).sum()), multiple, zl.numel()) for zl in z]


def effective_rank(matrix: torch.Tensor) -> float:
    """erank(M) = exp(H(sigma / Σsigma)), the entropy of the normalised singular values."""
    s = torch.linalg.svdvals(matrix.double())
    p = s / s.sum().clamp_min(1e-300)
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def head_factors(model: ViT, layer: int) -> dict[str, torch.Tensor]:
    """Per-head Ŵ_Q, Ŵ_K, Ŵ_V [H, d_h, d+1] (bias appended) and W_O per head [H, d, d_h]."""
    attn = model.blocks[layer].attn
    h = attn.n_head

    def hat(linear: torch.nn.Linear, width: int) -> torch.Tensor:
        w = torch.cat([linear.weight, linear.bias[:, None]], 1)
        return w.reshape(h, width, -1)

    o = attn.o.weight.reshape(attn.o.out_features, h, attn.vo).permute(1, 0, 2)
    return {"q": hat(attn.q, attn.qk), "k": hat(attn.k, attn.qk), "v": hat(attn.v, attn.vo), "o": o}


@torch.no_grad()
def layer_eranks(model: ViT) -> list[tuple[float, float]]:
    """(qk_e, vo_e) per layer: sums over heads of erank(Ŵ_Qᵀ Ŵ_K) and erank(Ŵ_Vᵀ W_Oʰᵀ)."""
    out = []
    for layer in range(len(model.blocks)):
        f = head_factors(model, layer)
        qk = sum(effective_rank(q.T @ k) for q, k in zip(f["q"], f["k"], strict=True))
        vo = sum(effective_rank(v.T @ o.T) for v, o in zip(f["v"], f["o"], strict=True))
        out.append((qk, vo))
    return out


def mha_ranks(
    eranks: list[tuple[float, float]], head_dim: int, rate: float, multiple: int, rule: str
) -> tuple[list[int], list[int]]:
    """(qk_dims, vo_dims) per layer from the layers' effective ranks (or uniformly)."""
    if rule == "uniform":
        width = round_width(head_dim * (1 - rate), multiple, head_dim)
        return [width] * len(eranks), [width] * len(eranks)
    e = [qk + vo for qk, vo in eranks]
    inv = sum(1 / x for x in e)
    qk_dims, vo_dims = [], []
    for (qk, vo), el in zip(eranks, e, strict=True):
        layer_rate = rate * len(e) / (el * inv)
        qk_rate, vo_rate = layer_rate * 2 * vo / el, layer_rate * 2 * qk / el
        qk_dims.append(round_width(head_dim * max(0.0, 1 - qk_rate), multiple, head_dim))
        vo_dims.append(round_width(head_dim * max(0.0, 1 - vo_rate), multiple, head_dim))
    return qk_dims, vo_dims


def plan_budget(
    model: ViT, acts: list[torch.Tensor], rate: float, multiple: int, rule: str
) -> Budget:
    """The pruned widths of `model` at pruning rate `rate`."""
    qk, vo = mha_ranks(layer_eranks(model), model.spec.head_dim, rate, multiple, rule)
    return Budget(tuple(ffn_widths(acts, rate, multiple, rule)), tuple(qk), tuple(vo))


def pruned_spec(spec: ViTSpec, budget: Budget) -> ViTSpec:
    return spec.model_copy(
        update={
            "ffn_dims": list(budget.ffn_dims),
            "qk_dims": list(budget.qk_dims),
            "vo_dims": list(budget.vo_dims),
        }
    )


def block_params(spec: ViTSpec, layer: int) -> int:
    """Parameters of the MHA and FFN of one block (the prunable part)."""
    ffn, qk, vo = spec.layer_dims(layer)
    d, h = spec.d_model, spec.n_head
    mha = 2 * (d * h * qk + h * qk) + (d * h * vo + h * vo) + (h * vo * d + d)
    return mha + (d * ffn + ffn) + (ffn * d + d)


def vit_params(spec: ViTSpec) -> int:
    """Closed-form parameter count of `ViT(spec)`."""
    d = spec.d_model
    fixed = spec.channels * spec.patch_size**2 * d + d  # patch embedding
    fixed += d + (spec.n_patches + 1) * d  # class token, positions
    fixed += spec.n_layer * 4 * d + 2 * d  # LayerNorms
    fixed += d * spec.n_classes + spec.n_classes  # head
    return fixed + sum(block_params(spec, layer) for layer in range(spec.n_layer))


def prunable_ratio(base: ViTSpec, pruned: ViTSpec) -> float:
    """FFN + MHA parameters of `pruned` over those of `base`."""
    total = sum(block_params(base, i) for i in range(base.n_layer))
    return sum(block_params(pruned, i) for i in range(pruned.n_layer)) / total
