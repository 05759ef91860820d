"""`gdr` end to end through the CLI (smoke preset): records, summary, table and plots."""

from __future__ import annotations

import json
import math


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("gdr")
    run, summary, rows = done.dir, done.summary, done.records
    arms = {r["arm"] for r in rows if "arm" in r}
    assert arms == {"lewis", "euclid", "ipm", "ipm_short", "firstorder"}
    # grid pieces (lewis 3 r, euclid 3 r, ipm 1, firstorder 5) + duplication k ∈ {1, 4}
    # (lewis 3, euclid 3, ipm, ipm_short) + m ∈ {10, 40} (lewis 3, euclid 3, ipm) + 2 p
    assert len(rows) == 3 + 3 + 1 + 5 + 2 * 8 + 2 * 7 + 2
    for k, m in ((1, 20), (4, 80), (1, 10), (1, 40)):
        at = [r for r in rows if r.get("k") == k and r.get("m") == m]
        assert {"lewis", "euclid", "ipm"} <= {r["arm"] for r in at}, (k, m)
        assert sorted(r["param_radius_rel"] for r in at if r["arm"] == "euclid")[-1] > 1
    for tag in ("dup_k1", "dup_k4", "m10", "m40"):
        assert summary[f"{tag}_euclid_iters_to_1pct"] >= 1, tag
        assert summary[f"{tag}_euclid_solves_to_1pct"] >= summary[f"{tag}_euclid_iters_to_1pct"]
    assert summary["pass_rule_euclid"] in (0.0, 1.0)
    assert sum(summary[f"h2h_iters_{w}"] for w in ("lewis_wins", "euclid_wins", "ties")) == 12
    assert all(r["final_gap"] > -1e-4 for r in rows if "final_gap" in r)
    assert summary["iters_to_1pct"] <= summary["iterations"] <= 20
    assert summary["pass_rule"] in (0.0, 1.0) and summary["opt"] < summary["F0"]
    assert summary["p2_worst"] >= summary["opt"] and not math.isnan(summary["ipm_final_gap"])
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {t["p"] for t in table if "p" in t} == {2.0, 4.0}
    assert "| lewis |" in (run / "artifacts/table.md").read_text()
    for name in ("gap_vs_iter", "gap_vs_time", "iters_vs_k"):
        assert (run / f"artifacts/{name}.png").stat().st_size > 1000
