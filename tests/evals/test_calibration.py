"""B-calibration: SmoothECE/ECE on hand-made cases, collapsing functions, the estimators, the
evaluation end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import relplot

from rayworks.core.errors import RayworksError
from rayworks.data.tasks import get_task
from rayworks.evals.calibration import CalibrationConfig, b_confidence, question_record, summarize
from rayworks.evals.calibration_math import (
    binned_ece,
    bootstrap_ci,
    collapse_exact,
    collapse_first_token,
    collapse_numeric,
    extract_answer,
    get_collapse,
    smooth_ece,
)

# --- calibration errors -----------------------------------------------------------------------


def test_perfectly_calibrated_is_near_zero() -> None:
    rng = np.random.default_rng(0)
    f = rng.uniform(0, 1, 4000)
    y = (rng.uniform(0, 1, 4000) < f).astype(float)  # Pr[y = 1 | f] = f
    assert smooth_ece(f, y) < 0.03
    assert binned_ece(f, y) < 0.04
    assert smooth_ece(f, f) == pytest.approx(0.0, abs=1e-6)  # expected outcome = conf: exact


def test_constant_overconfidence_has_the_known_error() -> None:
    """conf 0.9 on every question, 60% right: the residual is 0.3 everywhere."""
    f, y = np.full(100, 0.9), np.r_[np.ones(60), np.zeros(40)]
    assert binned_ece(f, y) == pytest.approx(0.3)
    assert smooth_ece(f, y) == pytest.approx(0.3, abs=2e-3)


def test_two_calibrated_groups_and_cancelling_errors() -> None:
    calibrated_f = np.r_[np.full(50, 0.2), np.full(50, 0.8)]
    calibrated_y = np.r_[np.ones(10), np.zeros(40), np.ones(40), np.zeros(10)]
    assert binned_ece(calibrated_f, calibrated_y) == pytest.approx(0.0, abs=1e-12)
    assert smooth_ece(calibrated_f, calibrated_y) == pytest.approx(0.0, abs=1e-3)
    # conf 0.3 and 0.7, both groups 50% right: binned ECE is exactly 0.2; SmoothECE
    # smooths the opposite residuals into each other, so it is positive but smaller
    f = np.r_[np.full(50, 0.3), np.full(50, 0.7)]
    y = np.tile(np.r_[np.ones(25), np.zeros(25)], 2)
    assert binned_ece(f, y) == pytest.approx(0.2)
    assert 0.02 < smooth_ece(f, y) < 0.2


def test_our_calls_match_relplot() -> None:
    rng = np.random.default_rng(1)
    f = rng.uniform(0, 0.999, 500)  # relplot bins conf = 1 apart; below 1 the conventions agree
    y = (rng.uniform(0, 1, 500) < f**2).astype(float)
    assert binned_ece(f, y, 10) == pytest.approx(relplot.metrics.binnedECE(f, y, 10))
    assert smooth_ece(f, y) == pytest.approx(relplot.smECE(f, y))
    # SmoothECE's bandwidth is its own fixed point: smECE_sigma* = sigma*
    value, sigma = relplot.smECE(f, y, return_width=True)
    assert relplot.smECE_sigma(f, y, sigma) == pytest.approx(value)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(RayworksError, match="confidence must be a finite number"):
        smooth_ece([1.2], [1.0])
    with pytest.raises(RayworksError, match="equal-length"):
        binned_ece([0.5, 0.5], [1.0])
    with pytest.raises(RayworksError, match="n_bins=0"):
        binned_ece([0.5], [1.0], n_bins=0)


def test_bootstrap_ci_covers_the_estimate() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(1.0, 1.0, 400)
    lo, hi = bootstrap_ci(np.mean, x, n_boot=300)
    assert lo < x.mean() < hi and hi - lo == pytest.approx(2 * 1.96 / 20, rel=0.3)


# --- collapsing functions ---------------------------------------------------------------------


def test_collapsing_functions() -> None:
    assert collapse_exact("  Red. ") == collapse_exact("red") == "red"
    assert collapse_exact("a red ball") != collapse_exact("red")
    assert collapse_exact("") is None and collapse_exact(None) is None
    assert collapse_numeric("1,000") == collapse_numeric("1000.0") == "1000"
    assert collapse_numeric("x = 0.50!") == "0.5" and collapse_numeric("-7 apples") == "-7"
    assert collapse_numeric("seven") is None
    assert collapse_first_token("A red ball") == "a" and collapse_first_token("  ") is None
    bag = get_task("bag_draw")
    assert get_collapse("task", bag)("a Red ball") == "red"
    user = get_collapse("rayworks.data.tasks.bag:answer_class")
    assert user("blue.") == "blue"


def test_collapse_errors_name_the_value() -> None:
    with pytest.raises(RayworksError, match="'colour'"):
        get_collapse("colour")
    with pytest.raises(RayworksError, match="cannot be imported"):
        get_collapse("no.such.module:fn")
    with pytest.raises(RayworksError, match="'arithmetic' has none"):
        get_collapse("task", get_task("arithmetic"))


def test_extract_answer() -> None:
    assert extract_answer("<think>r</think>A: red\nQ:") == "red"
    assert extract_answer("red", "A:") is None and extract_answer("red", "") == "red"


# --- B-confidence -----------------------------------------------------------------------------


def test_b_confidence_plugin() -> None:
    assert b_confidence(["red", "red", "blue", None]) == ("red", 0.5)
    assert b_confidence([None, None, "blue", None]) == ("blue", 0.25)  # None counts in M
    assert b_confidence([None, None]) == (None, 0.0)
    assert b_confidence(["7"] * 50, "heldout") == ("7", 1.0)
    with pytest.raises(RayworksError, match="estimator='mode'"):
        b_confidence(["a"], "mode")  # type: ignore[arg-type]
    with pytest.raises(RayworksError, match="at least 2"):
        b_confidence(["a"], "heldout")
    with pytest.raises(RayworksError, match="at least one"):
        b_confidence([])


def test_heldout_is_less_biased_on_a_hard_question() -> None:
    """Five equally likely classes (max p = 0.2), M = 50: the plug-in max frequency is
    inflated; the held-out frequency of the chosen class is unbiased for p(pred) = 0.2."""
    rng = np.random.default_rng(3)
    plugin, heldout = [], []
    for rep in range(1000):
        answers = [str(k) for k in rng.integers(0, 5, 50)]
        plugin.append(b_confidence(answers, "plugin")[1])
        heldout.append(b_confidence(answers, "heldout", seed=rep)[1])
    plugin_bias, heldout_bias = np.mean(plugin) - 0.2, np.mean(heldout) - 0.2
    assert plugin_bias > 0.05  # E[max of 5 frequencies] ~ 0.27
    assert abs(heldout_bias) < 0.01 and abs(heldout_bias) < plugin_bias / 5


def test_question_record_and_summary() -> None:
    task = get_task("bag_draw")
    ex = task.examples(1, "test", 0)[0]
    collapse = get_collapse("task", task)
    record = question_record(ex, [f"A: {ex.answer}"] * 3 + ["junk"], collapse, task=task)
    assert record["plugin_pred"] == ex.answer and record["plugin_conf"] == 0.75
    assert record["plugin_correct"] == 1.0 and record["invalid"] == 0.25
    assert record["plugin_pstar"] == task.distribution(ex)[ex.answer]
    right = {"plugin_conf": 0.8, "plugin_correct": 1.0}
    wrong = {"plugin_conf": 0.8, "plugin_correct": 0.0}
    out = summarize([right] * 6 + [wrong] * 4, "plugin")
    assert out["conf_minus_acc"] == pytest.approx(0.2) and out["ece"] == pytest.approx(0.2)
    assert "smece_pstar" not in out


# --- the evaluation, end to end -------------------------------------------------------------


def test_eval_calibration_cli_smoke(tiny_lm, tmp_path: Path) -> None:
    """`rayworks eval calibration` (the CLI's entry point, in process: a subprocess would pay
    the imports again) on a tiny untrained model: metrics, diagram, per-question records."""
    from rayworks.cli import main

    texts = [e.text for e in get_task("bag_draw").examples(40, "train", 0)]
    model = tiny_lm(texts, d_model=16, n_layer=1, n_head=2)
    out, png = tmp_path / "cal.json", tmp_path / "rel.png"
    args = [
        "eval",
        "calibration",
        "--checkpoint",
        str(model),
        "--set",
        "n_questions=6",
        "--set",
        "samples=4",
        "--set",
        "max_new_tokens=6",
        "--set",
        f"diagram={png}",
        "--set",
        f"records={tmp_path / 'records.jsonl'}",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    metrics = json.loads(out.read_text())
    assert metrics["n_questions"] == 6 and metrics["samples"] == 4
    for key in ("smece", "ece", "conf", "acc", "heldout/smece", "smece_pstar"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert png.stat().st_size > 1000
    rows = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(rows) == 6 and sum(json.loads(r)["classes"].get("red", 0) >= 0 for r in rows) == 6


def test_eval_config_errors_name_the_key(tiny_lm) -> None:
    from rayworks.core.errors import ConfigError
    from rayworks.evals.run import run_evaluation

    with pytest.raises(ConfigError, match="samples"):
        run_evaluation("calibration", "x", overrides=["samples=1"])
    model = tiny_lm(["Q: draw rgby\nA: red"], d_model=16, n_layer=1, n_head=2)
    with pytest.raises(RayworksError, match="collapse='numeric' gives no class"):
        run_evaluation("calibration", str(model), overrides=["collapse=numeric"])
    assert CalibrationConfig(checkpoint="x").samples == 50  # the paper's M
