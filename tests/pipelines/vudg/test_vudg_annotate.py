"""Annotation simulation: stage accounting, exact limits, E3-het vs E3-self."""

from __future__ import annotations

import numpy as np

from rayworks.pipelines.vudg.annotate import (
    Item,
    annotate_clip,
    human_fix,
    is_correct,
    stage_report,
)
from rayworks.pipelines.vudg.scene import sample_scene

ANN = {"generator_error": 0.1, "synonym_rate": 0.05, "verifier_error": 0.1, "synonym_recall": 0.7}


def _simulate(ann: dict, n: int = 300, seed: int = 0) -> tuple[list[Item], list[Item]]:
    het, slf = [], []
    rng = np.random.default_rng(seed)
    for _ in range(n):
        sg_rng, ann_rng = rng.spawn(2)
        result = annotate_clip(sample_scene(sg_rng), ann, ann_rng)
        het += result.het
        slf += result.self
    return het, slf


def test_is_correct_against_hand_made_items() -> None:
    true = frozenset({"left", "grow"})
    assert is_correct(
        Item("action", ["left", "up", "down", "spin", "drop", "right"], 0, true), true
    )
    # the other true action among the distractors: two right answers
    assert not is_correct(
        Item("action", ["left", "grow", "down", "spin", "drop", "up"], 0, true), true
    )
    # a synonym of the answer as a distractor
    assert not is_correct(
        Item("action", ["left", "~left", "down", "spin", "drop", "up"], 0, true), true
    )
    assert not is_correct(
        Item("action", ["up", "right", "down", "spin", "drop", "shrink"], 0, true), true
    )


def test_stage_counts_reconcile_and_het_beats_self() -> None:
    het, slf = _simulate(ANN)
    for items in (het, slf):
        r = stage_report(items)
        assert r["items"] == 1200 == r["kept"] + r["fixed"] + r["deleted"]
        assert r["errors_E2"] == r["caught"] + r["missed"]
        assert (
            r["flagged"]
            == r["caught"] + r["false_flags"]
            == r["flagged_fixable"] + r["flagged_invalid"]
        )
        assert r["errors_final"] == r["missed"]  # humans fix or delete every flagged error
        assert r["fixed"] + r["deleted"] <= r["caught"]
        # recount the residual errors from the items themselves
        assert r["errors_final"] == sum(
            1 for it in items if it.status != "deleted" and not it.history["final"]
        )
    h, s = stage_report(het), stage_report(slf)
    assert h["errors_E1"] == s["errors_E1"] and h["errors_E2"] == s["errors_E2"]  # shared E1/E2
    assert 0.07 < h["errors_E1"] / 1200 < 0.13  # the injected 10% (binomial, ±3.5 sd)
    assert h["errors_final"] < s["errors_final"]


def test_exact_limits_perfect_verifiers() -> None:
    """No hallucination and no synonyms: no error anywhere. Perfect verifiers (error 0,
    recall 1): the independent one leaves no error, the self one catches none of E1's."""
    het, slf = _simulate({**ANN, "generator_error": 0.0, "synonym_rate": 0.0}, n=60)
    assert stage_report(het)["errors_E2"] == stage_report(slf)["errors_final"] == 0
    het, slf = _simulate({**ANN, "synonym_rate": 0.0, "verifier_error": 0.0}, n=200)
    h, s = stage_report(het), stage_report(slf)
    assert h["errors_E2"] > 0 and h["errors_final"] == 0 and h["false_flags"] == 0
    assert s["caught"] == 0 and s["errors_final"] == s["errors_E2"]


def test_human_fix_marks_a_true_option_or_deletes() -> None:
    true = frozenset({"red"})
    rng = np.random.default_rng(0)
    wrong = Item("attribute", ["blue", "red", "green", "cyan", "yellow", "magenta"], 0, true)
    fixed = human_fix(wrong, true, rng)
    assert fixed.status == "fixed" and fixed.answer_value == "red" and is_correct(fixed, true)
    missing = Item("attribute", ["blue", "~blue", "green", "cyan", "yellow", "magenta"], 0, true)
    assert human_fix(missing, true, rng).status == "deleted"
