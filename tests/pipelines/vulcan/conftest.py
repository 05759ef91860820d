"""Tiny random ViTs and images shared by the Vulcan unit tests."""

from __future__ import annotations

import pytest
import torch

from rayworks.models.vit import ViT, ViTSpec


@pytest.fixture
def tiny_vit() -> ViT:
    torch.set_num_threads(1)  # the machine is shared; tiny tensors gain nothing from threads
    torch.manual_seed(0)
    model = ViT(ViTSpec(d_model=16, n_layer=2, n_head=2, ffn_dim=24))
    with torch.no_grad():  # non-trivial biases, so every bias path is exercised
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture
def images() -> torch.Tensor:
    return torch.rand(6, 1, 16, 16, generator=torch.Generator().manual_seed(1))
