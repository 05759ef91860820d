"""DPad keep profile p(i) = a phi(k i / (W - 1)) inside the window, and its samplers."""

from __future__ import annotations

import math

import pytest
import torch

from rayworks.pipelines.dpad.dropout import SuffixDropout, deterministic_keep, keep_profile


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_profile_closed_form_and_window() -> None:
    p = keep_profile(64, 3.0, 2.0)
    assert p.shape == (64,)
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    assert float(p[0]) == pytest.approx(2 * phi(0))  # p(0) = 0.798
    assert float(p[63]) == pytest.approx(2 * phi(3.0))  # window end at k sigma
    assert float(p[21]) == pytest.approx(2 * phi(3 * 21 / 63))
    assert torch.all(p[1:] < p[:-1])  # distance decay
    assert float(p.sum()) == pytest.approx(2 * 64 / (2 * 3), rel=0.05)  # ~ a W / (2k)
    assert keep_profile(0, 3.0, 2.0).numel() == 0
    with pytest.raises(ValueError, match=r"a=2\.6"):
        keep_profile(64, 3.0, 2.6)


def test_gaussian_keep_frequency_follows_profile_and_nothing_beyond_window() -> None:
    drop = SuffixDropout("gaussian", window=16, k=3.0, a=2.0)
    keep = drop.sample(20_000, 40, gen())
    assert keep.shape == (20_000, 40)
    assert not keep[:, 16:].any()
    freq = keep[:, :16].double().mean(0)
    assert torch.allclose(freq, keep_profile(16, 3.0, 2.0), atol=0.015)


def test_short_suffix_cuts_the_profile() -> None:
    drop = SuffixDropout("gaussian", window=64, k=3.0, a=2.0)
    assert drop.expected_kept(8) == pytest.approx(float(keep_profile(64, 3.0, 2.0)[:8].sum()))
    assert drop.sample(5, 8, gen()).shape == (5, 8)
    assert drop.sample(3, 0, gen()).shape == (3, 0)


def test_deterministic_rule_count_density_and_independence_of_the_draw() -> None:
    p = keep_profile(64, 3.0, 2.0)
    keep = deterministic_keep(p)
    assert int(keep.sum()) == round(float(p.sum()))
    assert bool(keep[0])
    assert int(keep[:21].sum()) > int(keep[21:42].sum()) > int(keep[42:].sum())
    drop = SuffixDropout("deterministic", window=64, k=3.0, a=2.0)
    a, b = drop.sample(3, 100, gen(1)), drop.sample(3, 100, gen(2))
    assert torch.equal(a, b) and torch.equal(a[0, :64], keep) and not a[:, 64:].any()


def test_uniform_keeps_the_gaussian_count_uniformly_in_the_window() -> None:
    drop = SuffixDropout("uniform", window=32, k=3.0, a=2.0)
    n = round(float(keep_profile(32, 3.0, 2.0).sum()))
    keep = drop.sample(8_000, 50, gen())
    assert torch.all(keep.sum(1) == n) and not keep[:, 32:].any()
    freq = keep[:, :32].double().mean(0)
    assert torch.allclose(freq, torch.full_like(freq, n / 32), atol=0.03)


def test_window_zero_and_full() -> None:
    assert not SuffixDropout("gaussian", window=0).sample(4, 30, gen()).any()
    assert SuffixDropout("full").sample(4, 30, gen()).all()
