"""The pass rule's parity on MCD above the decoder floor, the gain over the mean-prosody
arm, the over-seeds table and the mean-prosody arm's registration (`docs/mvc.md`)."""

from __future__ import annotations

import pytest

from rayworks.pipelines.mvc.pipeline import FLOORS
from rayworks.pipelines.mvc.report import floor_metrics, pass_rule, seed_rows
from rayworks.platform.registry import get_pipeline

LINEAR = {
    "mvc_time_slope": 1.0,
    "mvc_mem_slope": 1.0,
    "attn_time_slope": 2.0,
    "attn_mem_slope": 2.0,
}
BAND = (0.8, 1.25)


def test_parity_is_judged_above_the_decoder_floor() -> None:
    # total MCD within 1% (45.22 vs 45.69) but 16% apart above the floor 42.72
    mvc = {"mcd": 45.22, "log_f0_rmse": 0.177}
    attn = {"mcd": 45.69, "log_f0_rmse": 0.180}
    flat = {"mcd": 46.50, "log_f0_rmse": 0.30}
    out = pass_rule(mvc, attn, flat, 42.72, LINEAR, 0.05, BAND)
    assert abs(mvc["mcd"] / attn["mcd"] - 1) < 0.05  # the old rule would have passed
    assert out["above_floor_ratio"] == pytest.approx(2.50 / 2.97)
    assert out["pass_parity_mcd"] == 0.0 and out["pass_rule"] == 0.0
    assert out["pass_parity_f0"] == 1.0 and out["pass_beats_meanprosody"] == 1.0
    # 3% apart above the floor: parity holds, and so does the rule
    close = pass_rule({**mvc, "mcd": 42.72 + 2.97 * 1.03}, attn, flat, 42.72, LINEAR, 0.05, BAND)
    assert close["pass_parity_mcd"] == 1.0 and close["pass_rule"] == 1.0
    # no better than flat prosody: the rule fails even at parity
    worse = pass_rule(mvc, attn, {**flat, "mcd": 45.0}, 42.72, LINEAR, 0.05, BAND)
    assert worse["pass_beats_meanprosody"] == 0.0 and worse["pass_rule"] == 0.0
    assert pass_rule(mvc, attn, None, 42.72, LINEAR, 0.05, BAND) == {}


def test_floor_metrics_against_the_mean_prosody_arm() -> None:
    m = floor_metrics(45.22, 42.72, 46.50)
    assert m["mcd_above_floor"] == pytest.approx(2.50)
    assert m["gain_vs_meanprosody"] == pytest.approx((46.50 - 45.22) / (46.50 - 42.72))
    assert floor_metrics(46.50, 42.72, 46.50)["gain_vs_meanprosody"] == 0.0
    assert "gain_vs_meanprosody" not in floor_metrics(45.0, 42.72, None)


def test_seed_rows_pair_arms_by_seed() -> None:
    floor = 42.0
    runs = {  # arm -> seed -> summary; the ablation run has no mean-prosody arm of its own
        "mvc": {
            s: {"mcd": 44.0 + d, "mcd_decoder_floor": floor, "log_f0_rmse": 0.2}
            for s, d in enumerate((0.0, 0.2, 0.1))
        },
        "mvc_attn": {
            s: {"mcd": 44.5 + d, "mcd_decoder_floor": floor, "log_f0_rmse": 0.2}
            for s, d in enumerate((0.0, 0.1, 0.3))
        },
        "mvc_meanprosody": {
            s: {"mcd": 46.0, "mcd_decoder_floor": floor, "log_f0_rmse": 0.3} for s in range(3)
        },
        "mvc[nogate]": {
            s: {"mcd": 44.0 + d, "mcd_decoder_floor": floor, "log_f0_rmse": 0.2}
            for s, d in enumerate((0.5, 0.5, 0.5))
        },
    }
    rows = {r["row"]: r for r in seed_rows(runs, "mvc_meanprosody")}
    assert rows["mvc"]["mcd_above_floor"] == pytest.approx(2.1) and rows["mvc"]["n"] == 3
    assert rows["mvc"]["gain_vs_meanprosody"] == pytest.approx(1 - 2.1 / 4)
    diff = rows["mvc - mvc_attn"]
    assert diff["mcd_above_floor"] == pytest.approx(-0.5 + (0.0 + 0.1 - 0.2) / 3)
    assert diff["mcd_above_floor_lo"] < diff["mcd_above_floor"] < diff["mcd_above_floor_hi"]
    abl = rows["mvc[nogate] - mvc"]  # a constant paired difference has a zero-width interval
    assert abl["mcd_above_floor"] == pytest.approx(0.5 - 0.1)
    assert abl["gain_vs_meanprosody"] == pytest.approx(-(0.5 - 0.1) / 4)


def test_mean_prosody_arm_is_an_in_run_baseline() -> None:
    spec = get_pipeline("mvc")
    how = spec.in_run["mvc_meanprosody"]
    assert how.computed_by(spec.config()) and set(FLOORS) <= set(how.shared)
    assert spec.headline == ("mcd_above_floor", "min")
