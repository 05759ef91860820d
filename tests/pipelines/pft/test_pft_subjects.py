"""The digit-subject renderer: deterministic per seed, disjoint pools, the resting bias as a
closed-form blend, and the per-subject scores against sklearn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, recall_score

from rayworks.pipelines.pft.config import DataConfig
from rayworks.pipelines.pft.evaluate import scores
from rayworks.pipelines.pft.subjects import (
    Style,
    base_images,
    held_out_subjects,
    render,
    source_frames,
    split_pools,
    target_subject,
)
from rayworks.platform.stats import mean_ci

DATA = DataConfig(
    n_source_subjects=2,
    n_target_subjects=2,
    source_frames_per_class=5,
    adapt_frames=6,
    test_frames_per_class=4,
).model_dump(mode="json")


def test_renderer_is_deterministic_per_seed() -> None:
    a, b = target_subject(DATA, 1, 3), target_subject(DATA, 1, 3)
    for part in ("adapt", "oracle", "test"):
        np.testing.assert_array_equal(getattr(a, part).x, getattr(b, part).x)
    src1, subj1 = source_frames(DATA)
    src2, _ = source_frames(DATA)
    np.testing.assert_array_equal(src1.x, src2.x)
    other = target_subject({**DATA, "world_seed": 1}, 1, 3)
    assert not np.allclose(a.test.x, other.test.x)
    assert not np.allclose(a.test.x, target_subject(DATA, 0, 3).test.x)  # subjects differ
    assert src1.x.shape == (2 * 2 * 5, 1, 16, 16) and set(subj1.tolist()) == {0, 1}
    assert a.adapt.y.tolist() == [0] * 6 and np.bincount(a.test.y).tolist() == [4, 4]
    assert a.test.x.min() >= 0 and a.test.x.max() <= 1


def test_pools_are_disjoint_and_cover_every_base_image() -> None:
    _, labels = base_images((1, 7), 16)
    pools = split_pools(labels, 0)
    joined = np.concatenate(list(pools.values()))
    assert len(joined) == len(set(joined.tolist())) == len(labels)
    for pool in pools.values():
        assert set(labels[pool].tolist()) == {0, 1}
    assert abs(len(pools["source"]) - len(labels) / 2) <= 2


def test_resting_bias_blends_only_neutral_frames_toward_the_template() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, (4, 16, 16)).astype(np.float32)
    labels = np.array([0, 1, 0, 1])
    template = rng.uniform(0, 1, (16, 16)).astype(np.float32)
    plain = Style(
        angle=0.0,
        shear=0.0,
        scale=1.0,
        stroke="none",
        gamma=1.0,
        texture=np.zeros((16, 16), np.float32),
        bias=0.25,
        template=template,
    )
    out = render(base, labels, plain, rng, shift=0, noise=0.0)[:, 0]
    np.testing.assert_allclose(out[0], 0.75 * base[0] + 0.25 * template, atol=1e-5)
    np.testing.assert_allclose(out[1], base[1], atol=1e-5)
    rotated = render(base, labels, Style(**{**plain.__dict__, "angle": 90.0}), rng, 0, 0.0)
    np.testing.assert_allclose(rotated[1, 0, 1:-1, 1:-1], np.rot90(base[1])[1:-1, 1:-1], atol=1e-5)


def test_scores_match_sklearn() -> None:
    rng = np.random.default_rng(1)
    y, pred = rng.integers(0, 3, 50), rng.integers(0, 3, 50)
    got = scores(y, pred, 3)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, pred))
    assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"))
    rec = recall_score(y, pred, average=None)
    assert got["expressive_recall"] == pytest.approx(rec[1:].mean())
    assert got["neutral_recall"] == pytest.approx(rec[0])
    assert scores(np.array([0, 0, 1, 1]), np.zeros(4, int), 2)["macro_f1"] == pytest.approx(1 / 3)
    mean, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert (mean, hi - mean) == pytest.approx((2.0, 4.303 / np.sqrt(3)), rel=1e-3)
    assert lo == pytest.approx(2 * mean - hi)


def test_validation_subjects_are_other_subjects_than_the_test_subjects() -> None:
    val = {**DATA, "split": "val", "n_val_subjects": 3}
    assert held_out_subjects(DATA) == 2 and held_out_subjects(val) == 3
    tests = [target_subject(DATA, t, 3).style for t in range(2)]
    for v in range(3):
        style = target_subject(val, v, 3).style
        assert all((style.angle, style.bias) != (t.angle, t.bias) for t in tests)
    # validation subject v is the subject right after the last test subject
    after = target_subject({**DATA, "n_target_subjects": 3}, 2, 3).style
    first_val = target_subject(val, 0, 3).style
    assert (first_val.angle, first_val.bias) == (after.angle, after.bias)
