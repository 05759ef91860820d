"""scikit-learn's `load_digits` (1797 8x8 images, shipped with the package) as image tasks.

Fixed stratified train/val/test splits by seed; optional integer upsampling (nearest,
so an 8x8 digit becomes 16x16 at factor 2); class subsets with labels renumbered 0..k-1 in
the subset's order; and the augmentation the small ViTs train with: Gaussian pixel noise
(on the 0-16 scale of the data, before scaling to [0, 1]) and random shifts of up to
`max_shift` pixels (zero padded). Nothing here downloads anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import Field, model_validator

from rayworks.core.config import Config


class DigitsConfig(Config):
    """Splits, size and augmentation of the digits images."""

    upsample: int = Field(2, ge=1, le=8, description="nearest-neighbour upsampling factor")
    val_fraction: float = Field(0.15, gt=0, lt=0.5, description="share held out for validation")
    test_fraction: float = Field(0.2, gt=0, lt=0.5, description="share held out for testing")
    split_seed: int = Field(0, ge=0, description="seed of the fixed stratified split")
    noise_std: float = Field(3.0, ge=0, description="training pixel noise, 0-16 scale")
    max_shift: int = Field(1, ge=0, le=3, description="random shift in original pixels")
    eval_noise_std: float = Field(
        3.0,
        ge=0,
        description="fixed noise of val/test images (0-16 scale), so the task is not saturated",
    )

    @model_validator(mode="after")
    def _fractions(self) -> DigitsConfig:
        if self.val_fraction + self.test_fraction >= 0.8:
            raise ValueError(
                f"val_fraction + test_fraction = {self.val_fraction + self.test_fraction} "
                "leaves under 20% for training"
            )
        return self


@dataclass
class DigitSplit:
    """Images [N, 1, H, W] in [0, 1] (float32) and labels [N] (int64)."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, classes: Sequence[int]) -> DigitSplit:
        """Only `classes`, relabelled 0..len(classes)-1 in the order given."""
        order = list(classes)
        if len(set(order)) != len(order) or not all(0 <= c <= 9 for c in order):
            raise ValueError(f"classes must be distinct digits 0-9, got {order}")
        keep = torch.isin(self.y, torch.tensor(order))
        relabel = torch.full((10,), -1, dtype=torch.long)
        relabel[torch.tensor(order)] = torch.arange(len(order))
        return DigitSplit(self.x[keep], relabel[self.y[keep]])


@dataclass
class Digits:
    train: DigitSplit
    val: DigitSplit
    test: DigitSplit
    cfg: DigitsConfig

    def subset(self, classes: Sequence[int]) -> Digits:
        return Digits(*(s.subset(classes) for s in (self.train, self.val, self.test)), self.cfg)

    @property
    def image_size(self) -> int:
        return int(self.train.x.shape[-1])


def _split_indices(y: np.ndarray, cfg: DigitsConfig) -> tuple[np.ndarray, ...]:
    """Stratified: every class contributes the same shares to train, val and test."""
    rng = np.random.default_rng(cfg.split_seed)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = round(len(idx) * cfg.test_fraction)
        n_val = round(len(idx) * cfg.val_fraction)
        parts[2].extend(idx[:n_test])
        parts[1].extend(idx[n_test : n_test + n_val])
        parts[0].extend(idx[n_test + n_val :])
    return tuple(np.sort(np.array(p)) for p in parts)


def _to_images(images: np.ndarray, upsample: int) -> torch.Tensor:
    x = torch.from_numpy(images.astype(np.float32))[:, None]  # 0-16 scale
    return x.repeat_interleave(upsample, -1).repeat_interleave(upsample, -2)


def load_digits_splits(cfg: DigitsConfig | None = None) -> Digits:
    """The fixed splits of `cfg` (val/test carry their fixed noise, drawn from split_seed)."""
    from sklearn.datasets import load_digits

    cfg = cfg or DigitsConfig()
    raw = load_digits()
    x = _to_images(raw.images, cfg.upsample)
    y = torch.from_numpy(raw.target.astype(np.int64))
    train, val, test = (torch.from_numpy(i) for i in _split_indices(raw.target, cfg))
    gen = torch.Generator().manual_seed(cfg.split_seed + 1)

    def fixed_noise(idx: torch.Tensor) -> DigitSplit:
        noisy = x[idx] + cfg.eval_noise_std * torch.randn(x[idx].shape, generator=gen)
        return DigitSplit((noisy / 16).clamp(0, 1), y[idx])

    return Digits(DigitSplit(x[train] / 16, y[train]), fixed_noise(val), fixed_noise(test), cfg)


def augment(x: torch.Tensor, cfg: DigitsConfig, gen: torch.Generator) -> torch.Tensor:
    """Training augmentation of a batch in [0, 1]: noise, then a random shift per image."""
    if cfg.noise_std:
        x = (x + cfg.noise_std / 16 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    if cfg.max_shift:
        step = cfg.upsample
        shifts = torch.randint(-cfg.max_shift, cfg.max_shift + 1, (x.shape[0], 2), generator=gen)
        pad = cfg.max_shift * step
        padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
        size = x.shape[-1]
        rows = []
        for img, (dy, dx) in zip(padded, shifts.tolist(), strict=True):
            top, left = pad - dy * step, pad - dx * step
            rows.append(img[:, top : top + size, left : left + size])
        x = torch.stack(rows)
    return x
