"""Paired differences, their CIs and the pass rule's guard against a target that fails."""

from __future__ import annotations

import pytest

from rayworks.pipelines.speckv.config import SpecKVConfig
from rayworks.pipelines.speckv.evaluate import Outcome, PromptResult
from rayworks.pipelines.speckv.report import paired_summary, table_rows


def _result(full: bool, spec: bool, snap: bool, rec: tuple[float, float]) -> PromptResult:
    r = PromptResult("recall", 40, full, timings={"kv_bytes_full": 100.0, "prefill_seconds": 1.0})
    for c in (8, 16, 32, 64):
        r.outcomes[("speckv", c)] = Outcome(spec, rec[0], 10.0)
        r.outcomes[("snapkv", c)] = Outcome(snap, rec[1], 10.0)
        r.outcomes[("speckv_weak", c)] = Outcome(snap, rec[1], 10.0)
        r.outcomes[("oracle", c)] = Outcome(spec, rec[0], 10.0)
    return r


def test_pass_rule_needs_a_target_that_solves_something() -> None:
    cfg = SpecKVConfig()
    good = [_result(True, True, i % 2 == 0, (0.9, 0.5 + 0.01 * i)) for i in range(6)]
    out = paired_summary(good, cfg)
    assert out["acc_diff_c16"] == pytest.approx(0.5) and out["recall_diff_lo_c16"] > 0
    assert out["pass_rule"] == 1.0 and out["accuracy"] == 1.0
    vacuous = [_result(False, False, False, (0.9, 0.5 + 0.01 * i)) for i in range(6)]
    assert paired_summary(vacuous, cfg)["pass_rule"] == 0.0
    worse = [_result(True, False, True, (0.9, 0.5 + 0.01 * i)) for i in range(6)]
    assert paired_summary(worse, cfg)["pass_rule"] == 0.0
    rows = table_rows(good)
    assert rows[0]["row"] == "full" and rows[0]["accuracy"] == 1.0
    assert {(r["row"], r["budget"]) for r in rows[1:]} >= {("speckv", 8), ("snapkv", 64)}


def test_agreement_with_the_full_cache_is_reported_apart_from_accuracy() -> None:
    # a target that answers wrongly with its full cache: SpecKV keeps its (wrong) answer,
    # SnapKV changes it on every other prompt; accuracy cannot tell them apart, agreement can
    results = []
    for i in range(4):
        r = PromptResult("recall", 40, False, timings={"kv_bytes_full": 100.0})
        r.outcomes[("speckv", 16)] = Outcome(False, 0.9, 10.0, agrees=True)
        r.outcomes[("snapkv", 16)] = Outcome(False, 0.5, 10.0, agrees=i % 2 == 0)
        results.append(r)
    out = paired_summary(results, SpecKVConfig(budgets=[16], budget=16))
    assert out["acc_diff_c16"] == 0.0
    assert out["agree_speckv_c16"] == 1.0 and out["agree_snapkv_c16"] == 0.5
    assert out["agree_diff_c16"] == pytest.approx(0.5)
    rows = {r["row"]: r for r in table_rows(results)}
    assert rows["full"]["agree"] == 1.0 and rows["snapkv"]["agree"] == 0.5


def _ordered(n: int, above_oracle: int) -> list[PromptResult]:
    """n prompts where SpecKV beats SnapKV; SpecKV is right on `above_oracle` prompts where
    the oracle is wrong, and the oracle is right wherever SpecKV is otherwise."""
    results = []
    for i in range(n):
        r = _result(True, True, i % 2 == 0, (0.9, 0.5 + 0.001 * i))
        if i < above_oracle:
            for c in (8, 16, 32, 64):
                r.outcomes[("oracle", c)] = Outcome(False, 0.9, 10.0)
        results.append(r)
    return results


def test_speckv_above_the_oracle_fails_only_when_the_interval_says_so() -> None:
    """One prompt of 300 above the oracle is noise (the point comparison failed on it); a
    third of the prompts above it is a contradiction of SpecKV <= oracle."""
    cfg = SpecKVConfig()
    one = paired_summary(_ordered(300, 1), cfg)
    assert one["acc_speckv_c16"] > one["acc_oracle_c16"]  # the point comparison would fail
    assert one["speckv_minus_oracle_lo_c16"] <= 0 <= one["speckv_minus_oracle_hi_c16"]
    assert one["pass_rule"] == 1.0
    many = paired_summary(_ordered(300, 100), cfg)
    assert many["speckv_minus_oracle_lo_c16"] > 0
    assert many["pass_rule"] == 0.0
