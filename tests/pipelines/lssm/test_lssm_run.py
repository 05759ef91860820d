"""`lssm` end to end through the CLI (smoke preset): records, summary, table and plots."""

from __future__ import annotations

import json


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("lssm")
    run, summary, rows = done.dir, done.summary, done.records
    assert sorted(r["step"] for r in rows) == [1, 2]
    for r in rows:
        for prefix in ("", "mle_"):  # EM stops at em_tol or at the cap (smoke: 20)
            assert 1 <= r[prefix + "em_iters"] <= 20
            assert r[prefix + "em_converged"] == 1.0 or r[prefix + "em_iters"] == 20
        assert r["threshold"] in (0.0, 0.1, 0.2, 0.3) and r["mle_threshold"] == 0.0
        assert 0 <= r["offdiag_energy"] <= 1 and r["success"] in (0.0, 1.0)
        assert 0 <= r["support_precision"] <= 1 and 0 <= r["support_recall"] <= 1
        assert 0 < r["oracle_test_mre"] < r["test_mre"] < 1 and r["val_mre"] > 0
    for key in (
        "success_rate",
        "exact_support_rate",
        "support_precision",
        "support_recall",
        "threshold",
        "em_converged",
        "test_mre",
        "mle_success_rate",
        "mle_test_mre_s0.1",
    ):
        assert key in summary
    assert summary["pass_rule"] in (0.0, 1.0)
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    trials = [
        json.loads(line) for line in (run / "artifacts/trials.jsonl").read_text().splitlines()
    ]
    for t in trials:  # the MAP row carries the whole sweep; the chosen entry has the lowest val
        if t["method"] == "map":
            assert [s["threshold"] for s in t["sweep"]] == [0.0, 0.1, 0.2, 0.3]
            best = min(t["sweep"], key=lambda s: (s["val_mre"], -s["threshold"]))
            assert best["threshold"] == t["threshold"]
            assert best["val_mre"] == t["val_mre"]
    assert {(t["method"], t["sigma"], t["trials"]) for t in table} == {
        ("map", 0.1, 2),
        ("mle", 0.1, 2),
    }
    assert "| map | 0.1 | 2 |" in (run / "artifacts/table.md").read_text()
    for plot in ("success_rate.png", "heatmaps_A.png"):
        assert (run / "artifacts" / plot).stat().st_size > 1000
