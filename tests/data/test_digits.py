"""Digits splits: fixed, stratified, disjoint; subsets relabel; augmentation shifts pixels."""

from __future__ import annotations

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.data.digits import DigitsConfig, augment, load_digits_splits


def test_splits_are_fixed_stratified_and_cover_every_image() -> None:
    a, b = load_digits_splits(), load_digits_splits()
    assert torch.equal(a.test.x, b.test.x) and torch.equal(a.train.y, b.train.y)
    assert len(a.train) + len(a.val) + len(a.test) == 1797
    assert a.train.x.shape[1:] == (1, 16, 16) and a.train.x.min() >= 0 and a.train.x.max() <= 1
    shares = torch.bincount(a.test.y, minlength=10) / torch.bincount(a.train.y, minlength=10)
    assert shares.min() > 0.25 and shares.max() < 0.45  # ~0.2 / 0.65 for every class
    other = load_digits_splits(DigitsConfig(split_seed=1))
    assert not torch.equal(a.test.y, other.test.y) or not torch.equal(a.test.x, other.test.x)


def test_subset_relabels_in_the_given_order() -> None:
    digits = load_digits_splits(DigitsConfig(upsample=1))
    sub = digits.subset([7, 3])
    assert set(sub.train.y.tolist()) == {0, 1} and sub.image_size == 8
    sevens = digits.train.x[digits.train.y == 7]
    assert torch.equal(sub.train.x[sub.train.y == 0], sevens)
    with pytest.raises(ValueError, match="distinct digits"):
        digits.subset([1, 1])


def test_augmentation_shifts_whole_original_pixels() -> None:
    cfg = DigitsConfig(noise_std=0, max_shift=1, upsample=2)
    x = torch.zeros(64, 1, 16, 16)
    x[:, :, 6:10, 6:10] = 1
    out = augment(x, cfg, torch.Generator().manual_seed(0))
    assert torch.equal(out.sum((1, 2, 3)), x.sum((1, 2, 3)))  # a shift loses no ink here
    rows = out[:, 0].sum(-1).nonzero()[:, 1].view(64, 4)[:, 0]
    assert set(rows.tolist()) == {4, 6, 8} and len(set(rows.tolist())) == 3


def test_bad_fractions_name_the_keys() -> None:
    with pytest.raises(ConfigError, match="val_fraction"):
        build_config(DigitsConfig, None, (), ["val_fraction=0.45", "test_fraction=0.4"])
