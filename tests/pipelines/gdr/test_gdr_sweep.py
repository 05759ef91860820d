"""The duplication / m sweeps carry the Euclidean arm beside Lewis, count both arms'
iterations by the same code as a direct trust-region run, reach radii past r = 1·f(x₀),
and their summaries (per run and over seeds) read the rows they are given."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayworks.core.config import build_config
from rayworks.pipelines.gdr.arms import DUP_ARMS, M_ARMS, sweep_calls, sweep_piece
from rayworks.pipelines.gdr.ball_oracle import (
    OracleOptions,
    ball_oracle,
    geometry,
    make_objective,
    trust_region,
)
from rayworks.pipelines.gdr.baselines import cvxpy_optimum
from rayworks.pipelines.gdr.config import GDRConfig
from rayworks.pipelines.gdr.problem import SyntheticSpec, duplicate, erm, synthetic
from rayworks.pipelines.gdr.report import head_to_head, sweep_summary
from rayworks.pipelines.gdr.seeds import fmt_ci, mean_ci95, tables
from rayworks.pipelines.gdr.smoothing import max_group_norm
from rayworks.pipelines.gdr.trace import Trace, summarize

TINY = {"m": 12, "d": 4, "n_per_group": 6, "n_adversarial": 2, "kappa_target": 1e3}


def _cfg(**overrides) -> GDRConfig:
    sets = [f"data.{k}={v}" for k, v in TINY.items()]
    sets += ["oracle.outer_iters=60", "oracle.eps_rels=[1e-3]", "oracle.radius_rels=[0.3, 1]"]
    sets += [f"{k}={v}" for k, v in overrides.items()]
    return build_config(GDRConfig, "smoke", (), sets)


@pytest.fixture(scope="module")
def base_opt() -> float:
    return cvxpy_optimum(synthetic(SyntheticSpec(**TINY), 0))[1]


def test_every_sweep_point_runs_both_ball_arms() -> None:
    cfg = _cfg(dup_ks="[1, 4]", m_sweep="[10, 40]")
    calls = sweep_calls(cfg, {"lewis": {"eps_rel": 1e-3, "radius_rel": 1.0}}, opt=1.0)
    assert [c.get("k") for c in calls if c["sweep"] == "dup"] == [1, 4]
    assert [c.get("m") for c in calls if c["sweep"] == "m"] == [10, 40]
    assert "euclid" in DUP_ARMS and "euclid" in M_ARMS
    for c in calls:
        arms = [s["arm"] for s in c["settings"]]
        assert arms.count("lewis") == arms.count("euclid") == 2  # full grid: 1 ε x 2 r
        # exactly one tuned row per arm; Euclid untuned here, so it takes Lewis's setting
        tuned = {s["arm"]: s["params"] for s in c["settings"] if s["tuned"]}
        assert tuned["euclid"] == tuned["lewis"] == {"eps_rel": 1e-3, "radius_rel": 1.0}
        assert len([s for s in c["settings"] if s["tuned"]]) == len(set(arms))
    narrow = sweep_calls(_cfg(sweep_full_grid="false"), {}, opt=1.0)
    assert all({s["arm"] for s in c["settings"]} >= {"lewis", "euclid"} for c in narrow)


@pytest.mark.parametrize("arm", ["lewis", "euclid"])
def test_sweep_rows_match_a_direct_trust_region_run(arm: str, base_opt: float) -> None:
    cfg = _cfg()
    settings = [
        {"arm": a, "params": {"eps_rel": 1e-3, "radius_rel": 0.3}, "tuned": True}
        for a in ("lewis", "euclid")
    ]
    rows = sweep_piece(cfg.model_dump(mode="json"), settings, "dup", opt=base_opt, k=4)
    [row] = [r for r in rows if r["arm"] == arm]
    data = duplicate(synthetic(SyntheticSpec(**TINY), 0), 4)
    folded = data.folded()
    trace = trust_region(
        folded,
        geometry(folded, arm),
        erm(data),
        OracleOptions(eps_rel=1e-3, radius_rel=0.3),
        60,
        Trace(),
    )
    ref = summarize(trace, base_opt, cfg.target)
    for key in ("iters_to_target", "solves_to_target", "iterations", "final_gap"):
        assert row[key] == pytest.approx(ref[key], rel=1e-12), key
    assert row["m"] == 4 * TINY["m"] and row["k"] == 4 and row["sweep"] == "dup"
    lewis, euclid = (next(r for r in rows if r["arm"] == a) for a in ("lewis", "euclid"))
    assert lewis["curve"] != euclid["curve"]  # two geometries, not one arm reported twice


def test_radius_grid_reaches_past_one_and_is_used() -> None:
    assert max(GDRConfig().oracle.radius_rels) > 1
    assert max(build_config(GDRConfig, "smoke", (), []).oracle.radius_rels) > 1
    data = synthetic(SyntheticSpec(**TINY), 3)
    folded, x0 = data.folded(), erm(data)
    f0 = max_group_norm(folded, x0)
    M = geometry(folded, "lewis")
    steps = {}
    for r in (0.1, 3.0):
        trace = trust_region(folded, M, x0, OracleOptions(eps_rel=1e-3, radius_rel=r), 1, Trace())
        e = trace.x_best - x0
        steps[r] = math.sqrt(e @ M @ e) / f0
        assert steps[r] <= r * (1 + 1e-9)
    assert steps[0.1] == pytest.approx(0.1, rel=1e-6)  # a small ball binds
    assert steps[3.0] > 1.0  # the first call moves further than any r ≤ 1·f(x₀) allows


def test_interior_call_out_of_newton_steps_does_not_stop_the_trust_region() -> None:
    data = synthetic(SyntheticSpec(**TINY), 3)
    folded, x0 = data.folded(), erm(data)
    M = geometry(folded, "lewis")
    opts = OracleOptions(eps_rel=1e-3, radius_rel=100.0, max_newton=2)
    obj = make_objective(folded, M, x0, opts)
    _, steps, nu, converged = ball_oracle(obj, x0, 100.0 * max_group_norm(folded, x0), opts)
    assert (steps, nu, converged) == (2, 0.0, False)  # inside the ball, not yet minimised
    trace = trust_region(folded, M, x0, opts, 60, Trace())
    assert len(trace.values) > 2
    assert trace.best == pytest.approx(cvxpy_optimum(data)[1], rel=1e-4)


def _row(arm, k, r, iters, solves, eps=1e-3, tuned=False, gap=1e-3):
    return {
        "arm": arm,
        "sweep": "dup",
        "k": k,
        "m": 10 * k,
        "tuned": tuned,
        "final_gap": gap,
        "params": {"eps_rel": eps, "radius_rel": r},
        "iters_to_target": iters,
        "solves_to_target": solves,
        "seconds_to_target": 0.1,
        "iterations": 9.0,
    }


def test_sweep_summary_and_head_to_head_read_the_rows() -> None:
    nan = math.nan
    rows = [
        _row("lewis", 4, 0.3, 7, 20),
        _row("lewis", 4, 1.0, 3, 30, tuned=True),
        _row("lewis", 4, 1.0, 2, 40, eps=1e-4),
        _row("euclid", 4, 0.3, nan, nan),
        _row("euclid", 4, 1.0, 5, 25, tuned=True),
        _row("euclid", 4, 1.0, 2, 35, eps=1e-4),
        _row("lewis", 16, 1.0, nan, nan, tuned=True),
        _row("euclid", 16, 1.0, nan, nan, tuned=True),
    ]
    out = sweep_summary(rows)
    assert out["dup_k4_lewis_iters_to_1pct"] == 3 and out["dup_k4_euclid_iters_to_1pct"] == 5
    assert out["dup_k4_lewis_retuned_iters_to_1pct"] == 2
    assert out["dup_k4_euclid_r0.3_iters_to_1pct"] != out["dup_k4_euclid_r0.3_iters_to_1pct"]
    assert out["dup_k4_lewis_r0.3_solves_to_1pct"] == 20 and "dup_k4_lewis_r1_iters_to_1pct" in out
    assert out["dup_k16_euclid_total_iters"] == 9
    # cells: (k4, r0.3) Lewis 7 vs never; (k4, r1, 1e-3) 3 vs 5; (k4, r1, 1e-4) 2 vs 2;
    # (k16) never vs never
    assert head_to_head(rows) == {
        "h2h_iters_lewis_wins": 2.0,
        "h2h_iters_euclid_wins": 0.0,
        "h2h_iters_ties": 2.0,
    }
    assert head_to_head(rows, "solves_to_target")["h2h_solves_euclid_wins"] == 2.0
    assert head_to_head([r for r in rows if r["arm"] == "lewis"])["h2h_iters_ties"] == 0.0


def test_mean_ci95_against_the_t_table() -> None:
    mean, lo, hi, n = mean_ci95([1.0, 2.0, 3.0, math.nan])
    half = 4.302653 / math.sqrt(3)  # t_{0.975, 2} · s / √n with s = 1
    assert (mean, n) == (2.0, 3) and lo == pytest.approx(2 - half, rel=1e-6)
    assert hi == pytest.approx(2 + half, rel=1e-6)
    assert mean_ci95([5.0]) == (5.0, 5.0, 5.0, 1)
    assert fmt_ci([math.nan, math.nan]) == "never (0/2)"
    assert fmt_ci([1.0, 1.0, math.nan]) == "1 [1, 1] (2/3)"


def test_seed_tables_keep_the_euclidean_arm() -> None:
    summaries = []
    for seed, lw in enumerate((3.0, 3.0, 4.0)):
        s = {"seed": seed, "final_gap": 1e-4, "euclid_final_gap": 1e-4}
        for k, eu in ((1, 3.0), (16, 10.0 + seed)):
            for arm, it in (("lewis", lw), ("euclid", eu)):
                for label in ("", "_r1"):
                    s[f"dup_k{k}_{arm}{label}_iters_to_1pct"] = it
                    s[f"dup_k{k}_{arm}{label}_solves_to_1pct"] = 10 * it
                s[f"dup_k{k}_{arm}_total_iters"] = it
        s["pass_rule"], s["pass_rule_euclid"] = 1.0, float(seed == 0)
        summaries.append(s)
    text = "\n".join(tables(summaries))
    assert "seeds passing: Lewis 3/3, Euclidean 1/3." in text
    assert "| dup_k16 | euclid | 11 [8.52, 13.5] (3/3) |" in text
    # paired Δ = Lewis - Euclid at k = 16: (3 - 10, 3 - 11, 4 - 12) = (-7, -8, -8)
    assert (
        "| dup_k16 | 1 | 3.33 [1.9, 4.77] (3/3) | 11 [8.52, 13.5] (3/3) | -7.67 [-9.1, -6.23]"
        in text
    )
    assert "| dup_k1 | euclid | 3 [3, 3] (3/3) | 30 [30, 30] (3/3) | - | - | - |" in text
    assert np.isclose(mean_ci95([-7.0, -8.0, -8.0])[0], -7.6666667)
