"""`attnrow` end to end through the CLI (smoke preset): records, summary, table, plots."""

from __future__ import annotations

import json
import math


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("attnrow")
    run, summary, records = done.dir, done.summary, done.records
    # spectra (b), LM s_λ, s_λ (b'), errors on (b) and (a), errors on (b'), sampling,
    # sublinear m (2 n), timing
    assert len(records) == 3 + 1 + 1 + 4 * 2 + 2 + 1 + 2 + 3
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    errors = {(r["input"], r["method"]) for r in table if r["table"] == "error"}
    assert errors == {
        (i, m)
        for i in ("synthetic", "lm")
        for m in ("analogue", "rls_nystrom", "uniform_nystrom", "performer")
    } | {("imbalanced", "rls_nystrom"), ("imbalanced", "uniform_nystrom")}
    imb = [r for r in table if r["table"] == "error" and r["input"] == "imbalanced"]
    assert all(r["minor_rows"] > 0 and 0 <= r["row_err_minor"] < 1 for r in imb)
    for key in (
        "imb_s_lambda",
        "rls_nystrom_imb_row_err",
        "uniform_nystrom_imb_row_err_minor",
        "imb_rls_over_uniform",
        "imb_rls_over_uniform_minor_x1",
        "rls_over_uniform",
    ):
        assert math.isfinite(summary[key]), key
    sub = [r for r in table if r["table"] == "sublinear"]
    assert sorted((r["n"], r["m"]) for r in sub) == [(256, 64), (1024, 128)]  # m ∝ √n
    assert all(r["row_err_lo"] <= r["row_err"] <= r["row_err_hi"] for r in sub)
    samp = [r for r in table if r["table"] == "sampling"]
    assert all(r["estimator"] == "shared" and r["other"] == "independent" for r in samp)
    err = [r for r in table if r["table"] == "error"]
    assert all(r["draws"] == 2 and len(r["row_err_draws"]) == 2 for r in err)
    for key in ("sublinear_err_b0.5", "other_estimator_row_err", "rls_over_uniform_lo"):
        assert math.isfinite(summary[key]), key
    timing = [r for r in table if r["table"] == "timing" and r["method"] != "exact"]
    assert all(r["calls_query"] == 1 for r in timing)
    assert all(r["calls_match"] == 1.0 for r in timing if "calls_match" in r)
    assert 0 < summary["row_err"] < 1 and summary["rls_nystrom_row_err"] < 0.01
    assert summary["s_lambda"] > 1 and "pass_rule" in summary and "sampling_slope" in summary
    assert "MODELLED" in (run / "artifacts/table.md").read_text()
    for name in (
        "error_vs_landmarks",
        "query_time_vs_n",
        "s_lambda_vs_scale",
        "error_vs_samples",
        "error_vs_n_sublinear_m",
    ):
        assert (run / f"artifacts/{name}.png").stat().st_size > 1000
