"""Bits/char per row and its bootstrap intervals, against hand computations and scipy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
import torch

from rayworks.pipelines.lestd.config import LeSTDConfig
from rayworks.pipelines.lestd.evaluate import (
    bits_per_char,
    bootstrap_bpc,
    percentile_interval,
    resampled_bpc,
    row_nll,
)
from rayworks.pipelines.lestd.lm import monitor_slice
from rayworks.pipelines.lestd.pipeline import check_rows


def test_row_nll_matches_the_pooled_loss_and_a_hand_log_softmax(tiny_llama) -> None:
    ids = torch.randint(0, 40, (5, 12), generator=torch.Generator().manual_seed(1))
    nll, counts = row_nll(tiny_llama, ids, batch_size=2)
    assert counts.tolist() == [11.0] * 5
    pooled = nll.sum() / (counts.sum() * math.log(2))
    assert pooled == pytest.approx(bits_per_char(tiny_llama, ids, batch_size=3), rel=1e-6)
    with torch.no_grad():
        logp = torch.log_softmax(tiny_llama(input_ids=ids[3:4]).logits[0].double(), -1)
    hand = -sum(float(logp[t, ids[3, t + 1]]) for t in range(11))
    assert nll[3] == pytest.approx(hand, rel=1e-5)


def test_three_rows_give_the_extreme_rows_as_the_95_interval() -> None:
    # Rows of bits/char ratios 1, 1.5, 3 (nats per char) with unequal lengths. Of the 27
    # equally likely resamples, "row 0 three times" is the unique minimum (mass 1/27 > 2.5%)
    # and "row 2 three times" the unique maximum, so the exact 95% percentile interval is
    # (1, 3) / ln 2. Resampling nll and counts independently would give 10/20 = 0.5 instead.
    nll, counts = np.array([10.0, 30.0, 12.0]), np.array([10.0, 20.0, 4.0])
    lo, hi = bootstrap_bpc(nll, counts, resamples=4000, level=0.95, seed=0)
    assert lo == pytest.approx(1 / math.log(2), abs=1e-12)
    assert hi == pytest.approx(3 / math.log(2), abs=1e-12)


def test_resamples_follow_the_exact_bootstrap_distribution() -> None:
    # n = 4: enumerate all 256 resamples; the Monte Carlo mean and spread of the resampled
    # statistic must match the exact bootstrap distribution's.
    nll, counts = np.array([5.0, 9.0, 2.0, 14.0]), np.array([4.0, 6.0, 3.0, 8.0])
    exact = np.array(
        [nll[list(i)].sum() / counts[list(i)].sum() for i in itertools.product(range(4), repeat=4)]
    ) / math.log(2)
    stats = resampled_bpc(nll, counts, resamples=20000, seed=3)
    assert stats.mean() == pytest.approx(exact.mean(), abs=3 * exact.std() / math.sqrt(20000))
    assert stats.std() == pytest.approx(exact.std(), rel=0.03)
    assert np.array_equal(stats, resampled_bpc(nll, counts, resamples=20000, seed=3))


def test_interval_agrees_with_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(7)
    counts = rng.integers(50, 128, size=30).astype(float)
    nll = counts * rng.gamma(4.0, 0.5, size=30)

    def ratio(a: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
        return a.sum(axis=axis) / (c.sum(axis=axis) * math.log(2))

    ref = scipy.stats.bootstrap(
        (nll, counts),
        ratio,
        paired=True,
        vectorized=True,
        n_resamples=20000,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(11),
    ).confidence_interval
    lo, hi = bootstrap_bpc(nll, counts, resamples=20000, level=0.95, seed=5)
    width = ref.high - ref.low
    assert lo == pytest.approx(ref.low, abs=0.05 * width)
    assert hi == pytest.approx(ref.high, abs=0.05 * width)


def test_paired_difference_of_identical_scores_is_exactly_zero() -> None:
    nll, counts = np.array([3.0, 8.0, 1.0, 6.0]), np.array([4.0, 4.0, 4.0, 4.0])
    a = resampled_bpc(nll, counts, 500, seed=2)
    b = resampled_bpc(nll + 4.0, counts, 500, seed=2)  # one nat more per row, same rows
    assert percentile_interval(a - a, 0.95) == (0.0, 0.0)
    assert percentile_interval(b - a, 0.95) == pytest.approx((1 / math.log(2),) * 2)


def test_bootstrap_rejects_mismatched_rows() -> None:
    with pytest.raises(ValueError, match="equal, non-empty rows"):
        resampled_bpc(np.array([1.0, 2.0]), np.array([1.0]), 100, seed=0)


def test_test_rows_and_lm_validation_rows_are_disjoint() -> None:
    cfg = LeSTDConfig()
    assert monitor_slice(516, cfg.lm.monitor_rows) == slice(388, 516)
    assert monitor_slice(516, cfg.lm.monitor_rows).start >= cfg.eval.val_rows
    check_rows(cfg, 516)
    with pytest.raises(ValueError, match=r"eval\.val_rows=256 \+ lm\.monitor_rows=128"):
        check_rows(cfg, 300)


def test_lm_seed_pins_the_cached_lm_across_run_seeds(tmp_path) -> None:
    from rayworks.pipelines.lestd.config import StdlibLMConfig
    from rayworks.pipelines.lestd.lm import lm_folder

    free = StdlibLMConfig()
    pinned = StdlibLMConfig(seed=0)
    run0, _ = lm_folder(free, 0, tmp_path)
    assert lm_folder(pinned, 5, tmp_path)[0] == run0  # run seed 5, LM of seed 0
    assert lm_folder(free, 5, tmp_path)[0] != run0
    assert lm_folder(pinned, 5, tmp_path)[1].seed == 0
    # the monitoring knobs do not move the cache (other pipelines read it by this name)
    assert lm_folder(StdlibLMConfig(monitor_rows=7, monitor_every=3), 0, tmp_path)[0] == run0
