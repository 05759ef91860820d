"""`lr_at`: linear warmup to lr, then cosine decay to min_lr_ratio * lr at max_steps."""

from __future__ import annotations

import itertools
import math

import pytest

from rayworks.core.config import build_config
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.lm.train_loop import lr_at


def config(
    warmup: int = 10, max_steps: int = 110, lr: float = 1e-2, ratio: float = 0.1
) -> LMConfig:
    return build_config(
        LMConfig,
        overrides=[
            f"train.warmup_steps={warmup}",
            f"train.max_steps={max_steps}",
            f"train.lr={lr}",
            f"train.min_lr_ratio={ratio}",
        ],
    )


def test_warmup_is_linear_up_to_lr() -> None:
    cfg = config(warmup=10, lr=1e-2)
    values = [lr_at(step, cfg) for step in range(10)]
    assert values == pytest.approx([1e-2 * (s + 1) / 10 for s in range(10)])
    assert values[0] > 0  # the first step already learns
    assert values[-1] == pytest.approx(1e-2)  # reaches lr at the end of warmup
    increments = [b - a for a, b in itertools.pairwise(values)]
    assert increments == pytest.approx([1e-3] * 9)


def test_peak_is_lr_right_after_warmup() -> None:
    cfg = config(warmup=10, lr=1e-2)
    assert lr_at(10, cfg) == pytest.approx(1e-2)
    assert max(lr_at(s, cfg) for s in range(200)) == pytest.approx(1e-2)


def test_cosine_ends_at_the_floor() -> None:
    cfg = config(warmup=10, max_steps=110, lr=1e-2, ratio=0.1)
    assert lr_at(110, cfg) == pytest.approx(1e-3)
    assert lr_at(500, cfg) == pytest.approx(1e-3)  # clamped past max_steps
    # halfway through the decay: the mean of peak and floor
    assert lr_at(60, cfg) == pytest.approx((1e-2 + 1e-3) / 2)


def test_cosine_shape_matches_formula() -> None:
    cfg = config(warmup=0, max_steps=100, lr=2e-3, ratio=0.0)
    for step in (0, 10, 25, 50, 75, 99):
        expected = 2e-3 * 0.5 * (1 + math.cos(math.pi * step / 100))
        assert lr_at(step, cfg) == pytest.approx(expected)
    assert lr_at(100, cfg) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize(
    ("warmup", "max_steps", "ratio"), [(10, 110, 0.1), (0, 50, 0.0), (5, 30, 1.0), (50, 2000, 0.1)]
)
def test_monotone_non_increasing_after_warmup(warmup: int, max_steps: int, ratio: float) -> None:
    cfg = config(warmup=warmup, max_steps=max_steps, ratio=ratio)
    values = [lr_at(step, cfg) for step in range(warmup, max_steps + 20)]
    assert all(b <= a + 1e-15 for a, b in itertools.pairwise(values))
    assert min(values) == pytest.approx(cfg.train.lr * ratio)


def test_ratio_one_is_constant_after_warmup() -> None:
    cfg = config(warmup=5, max_steps=30, ratio=1.0)
    assert {round(lr_at(s, cfg), 12) for s in range(5, 40)} == {round(cfg.train.lr, 12)}


def test_smoke_preset_schedule() -> None:
    cfg = build_config(LMConfig, "smoke")
    assert lr_at(0, cfg) == pytest.approx(3e-3 / 5)
    assert lr_at(4, cfg) == pytest.approx(3e-3)
    assert lr_at(30, cfg) == pytest.approx(3e-4)
