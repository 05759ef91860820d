"""`gdr` end to end through the CLI (smoke preset): records, summary, table and plots."""

from __future__ import annotations

import json
import math


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("gdr")
    run, summary, rows = done.dir, done.summary, done.records
    arms = {r["arm"] for r in rows if "arm" in r}
    assert arms == {"lewis", "euclid", "ipm", "ipm_short", "firstorder"}
    assert len(rows) == 2 + 2 + 1 + 5 + 3 * 2 + 2 * 2 + 2  # grid pieces + extras
    assert all(r["final_gap"] > -1e-4 for r in rows if "final_gap" in r)
    assert summary["iters_to_1pct"] <= summary["iterations"] <= 20
    assert summary["pass_rule"] in (0.0, 1.0) and summary["opt"] < summary["F0"]
    assert summary["p2_worst"] >= summary["opt"] and not math.isnan(summary["ipm_final_gap"])
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {t["p"] for t in table if "p" in t} == {2.0, 4.0}
    assert "| lewis |" in (run / "artifacts/table.md").read_text()
    for name in ("gap_vs_iter", "gap_vs_time", "iters_vs_k"):
        assert (run / f"artifacts/{name}.png").stat().st_size > 1000
