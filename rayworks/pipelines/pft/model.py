"""The source model F → B → C (our recipe: 3-layer CNN with BN, 64-d features and its
intermediate maps for the Gram loss; B = 64 → 32 + BN; C = weight-normalised linear, as in
SHOT and the official code), its CE training on the labelled source subjects, and the
safetensors cache that lets every arm of one bench reuse the very same source model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from rayworks.core.build_cache import locked_build, settings_digest


class FeatureExtractor(nn.Module):
    """F: three conv-BN-ReLU blocks (pool after the first two), global average pool.

    x [N, 1, H, W] -> f [N, C3]; with `maps=True` also the three block outputs
    [N, C_l, H_l, W_l] (the φ_l of the Gram loss)."""

    def __init__(self, channels: tuple[int, int, int] = (16, 32, 64)) -> None:
        super().__init__()
        widths = (1, *channels)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(widths[i], widths[i + 1], 3, padding=1),
                nn.BatchNorm2d(widths[i + 1]),
                nn.ReLU(),
                nn.MaxPool2d(2) if i < 2 else nn.Identity(),
            )
            for i in range(3)
        )
        self.dim = channels[-1]

    def forward(self, x: torch.Tensor, maps: bool = False) -> Any:
        out = []
        for block in self.blocks:
            x = block(x)
            out.append(x)
        f = x.mean(dim=(2, 3))
        return (f, out) if maps else f


class SourceModel(nn.Module):
    """F, B (Linear + BN1d) and C (weight-normalised Linear, no bias)."""

    def __init__(self, channels: tuple[int, int, int], bottleneck: int, n_classes: int) -> None:
        super().__init__()
        self.F = FeatureExtractor(channels)
        self.B = nn.Sequential(nn.Linear(channels[-1], bottleneck), nn.BatchNorm1d(bottleneck))
        self.C = weight_norm(nn.Linear(bottleneck, n_classes, bias=False))

    def head(self, f: torch.Tensor) -> torch.Tensor:
        """C(B(f)): features [N, D] -> logits [N, K]."""
        return self.C(self.B(f))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.F(x))


def build_model(source: dict[str, Any], n_classes: int) -> SourceModel:
    return SourceModel(tuple(source["channels"]), source["bottleneck"], n_classes)


def batches(n: int, size: int, gen: torch.Generator) -> list[torch.Tensor]:
    """One epoch of shuffled index batches."""
    return list(torch.randperm(n, generator=gen).split(size))


def train_source(
    x: np.ndarray, y: np.ndarray, source: dict[str, Any], n_classes: int, seed: int
) -> tuple[SourceModel, list[float]]:
    """Step 1: CE training of F, B, C on the labelled source frames; returns the model (eval
    mode) and the mean loss per epoch."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build_model(source, n_classes).train()
    opt = torch.optim.Adam(model.parameters(), lr=source["lr"])
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    losses = []
    for _ in range(source["epochs"]):
        total = 0.0
        for idx in batches(len(yt), source["batch_size"], gen):
            if len(idx) < 2:
                continue  # BN needs two samples
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(yt))
    return model.eval(), losses


def cached_source(
    cache_root: Path, key_blob: dict[str, Any], fit: Any, source: dict[str, Any], n_classes: int
) -> tuple[SourceModel, dict[str, Any]]:
    """The trained model for `key_blob` (what determines the weights): `fit()` -> (model,
    info) runs once under a file lock, then every caller loads the same safetensors."""
    folder = cache_root / "pft_source" / settings_digest(key_blob)
    weights, meta = folder / "model.safetensors", folder / "info.json"

    def build() -> None:
        model, info = fit()
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
        meta.write_text(json.dumps(info))

    locked_build(folder, meta, build)
    model = build_model(source, n_classes)
    model.load_state_dict(load_file(str(weights)))
    return model.eval(), json.loads(meta.read_text())
