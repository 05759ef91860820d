"""LoRA baseline (Hu et al., 2022): y = x Wᵀ + b + (alpha / r) (x Aᵀ) Bᵀ with W, b frozen.

The recipe puts r = 4 adapters on fc1 / fc2 of every block and freezes the base; the new
classification head trains as well. A ~ N(0, 1/r) and B = 0, so training starts from
the pretrained function. alpha = 2r is our choice (reconstructed; the methods file names
none). Unmerged inference costs the base layer plus the adapter; merging (W + (alpha/r) B A)
brings it back to the base cost, a step WASI does not need.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rayworks.pipelines.wasi.wasi_linear import target_modules


class LoRALinear(nn.Module):
    """A frozen `nn.Linear` plus a trainable rank-r update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, gen: torch.Generator) -> None:
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features, generator=gen) / rank**0.5)
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.scale * (x @ self.lora_a.T) @ self.lora_b.T

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """The equivalent plain layer (W + (alpha/r) B A)."""
        out = nn.Linear(self.base.in_features, self.base.out_features)
        out.weight.copy_(self.base.weight + self.scale * self.lora_b @ self.lora_a)
        out.bias.copy_(self.base.bias)
        return out


def apply_lora(
    model: nn.Module, targets: Sequence[str], rank: int, alpha: float, seed: int
) -> list[nn.Parameter]:
    """Freeze `model`, add adapters to `targets`; return the trainable parameters (adapters
    and the head)."""
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    trainable: list[nn.Parameter] = []
    for parent, name in target_modules(model, targets):
        layer = LoRALinear(getattr(parent, name), rank, alpha, gen)
        setattr(parent, name, layer)
        trainable += [layer.lora_a, layer.lora_b]
    for p in model.head.parameters():
        p.requires_grad_(True)
        trainable.append(p)
    return trainable
