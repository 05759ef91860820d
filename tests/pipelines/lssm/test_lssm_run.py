"""`lssm` end to end through the CLI (smoke preset): records, summary, table and plots."""

from __future__ import annotations

import json


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("lssm")
    run, summary, rows = done.dir, done.summary, done.records
    assert sorted(r["step"] for r in rows) == [1, 2]
    for r in rows:
        assert r["em_iters"] == 20 and r["mle_em_iters"] == 20
        assert 0 <= r["offdiag_energy"] <= 1 and r["success"] in (0.0, 1.0)
        assert 0 < r["oracle_test_mre"] < r["test_mre"] < 1
    for key in ("success_rate", "test_mre", "mle_success_rate", "mle_test_mre_s0.1"):
        assert key in summary
    assert summary["pass_rule"] in (0.0, 1.0)
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {(t["method"], t["sigma"], t["trials"]) for t in table} == {
        ("map", 0.1, 2),
        ("mle", 0.1, 2),
    }
    assert "| map | 0.1 | 2 |" in (run / "artifacts/table.md").read_text()
    for plot in ("success_rate.png", "heatmaps_A.png"):
        assert (run / "artifacts" / plot).stat().st_size > 1000
