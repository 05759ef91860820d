"""The truncation threshold is chosen on the validation segment, and only there."""

from __future__ import annotations

import numpy as np
import pytest

from rayworks.pipelines.lssm.kalman import filtered_state, simulate_free
from rayworks.pipelines.lssm.map_em import EMOptions, random_init
from rayworks.pipelines.lssm.selection import choose, sweep_threshold, validation_mre
from rayworks.pipelines.lssm.systems import make_dataset, make_system

GRID = [0.0, 0.2, 0.5]
OPTS = EMOptions(prior=True, max_iter=12)


@pytest.fixture(scope="module")
def setup():
    truth = make_system("s3", 0.3, seed=3)
    ds = make_dataset(truth, 180, 2 / 3, seed=3, val_fraction=0.25)
    init = random_init(truth.n, truth.n, truth.n, seed=3)
    return ds, init, sweep_threshold(init, ds, GRID, OPTS)


def test_split_sizes_and_order() -> None:
    truth = make_system("s1", 0.1, seed=0)
    ds = make_dataset(truth, 900, 2 / 3, seed=0, val_fraction=1 / 6)
    assert (len(ds.y_train), len(ds.y_val), len(ds.y_test)) == (500, 100, 300)
    whole = make_dataset(truth, 900, 2 / 3, seed=0)  # same draw, no validation segment
    np.testing.assert_array_equal(np.concatenate([ds.y_train, ds.y_val]), whole.y_train)
    np.testing.assert_array_equal(ds.y_test, whole.y_test)
    assert len(whole.y_val) == 0


def test_test_split_cannot_change_the_choice(setup) -> None:
    ds, init, base = setup
    rng = np.random.default_rng(0)
    garbage = ds.with_(
        y_test=100 * rng.standard_normal(ds.y_test.shape),
        u_test=rng.standard_normal(ds.u_test.shape),
    )
    other = sweep_threshold(init, garbage, GRID, OPTS)
    assert other.index == base.index and other.val_mre == base.val_mre
    for a, b in zip(base.fits, other.fits, strict=True):
        np.testing.assert_array_equal(a.model.A, b.model.A)


@pytest.mark.parametrize("target", [0, 1, 2])
def test_validation_split_decides_the_choice(setup, target: int) -> None:
    """Replace y_val by the noise-free continuation of candidate `target`: its one-step
    predictor is then exact on validation, so it must be chosen; the fits do not move."""
    ds, init, base = setup
    model = base.fits[target].model
    x_end = filtered_state(model, ds.u_train, ds.y_train)
    crafted = ds.with_(y_val=simulate_free(model, ds.u_val, x_end))
    assert validation_mre(model, crafted) < 1e-20
    other = sweep_threshold(init, crafted, GRID, OPTS)
    assert other.index == target and other.threshold == GRID[target]
    assert other.val_mre != base.val_mre
    for a, b in zip(base.fits, other.fits, strict=True):  # fitting never reads validation
        np.testing.assert_array_equal(a.model.A, b.model.A)


def test_choose_lowest_score_ties_to_the_sparser_threshold() -> None:
    assert choose([0.0, 0.1, 0.2], [0.3, 0.1, 0.2]) == 1
    assert choose([0.0, 0.1, 0.2], [0.3, 0.1, 0.1]) == 2
    assert choose([0.2, 0.0], [0.1, 0.1]) == 0


def test_no_validation_segment_is_an_error_only_when_there_is_a_choice() -> None:
    truth = make_system("s3", 0.3, seed=3)
    ds = make_dataset(truth, 120, 2 / 3, seed=3)
    init = random_init(truth.n, truth.n, truth.n, seed=3)
    single = sweep_threshold(init, ds, [0.2], EMOptions(max_iter=2))
    assert single.threshold == 0.2 and np.isnan(single.val_mre[0])
    with pytest.raises(ValueError, match="validation"):
        sweep_threshold(init, ds, [0.0, 0.2], EMOptions(max_iter=2))
