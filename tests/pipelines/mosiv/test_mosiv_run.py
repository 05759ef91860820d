"""`mosiv` end to end through the CLI (smoke preset): records, summary, table, plot, GIF."""

from __future__ import annotations

import json
import math


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("mosiv")
    run, summary, rows = done.dir, done.summary, done.records
    arms = {"objectwise", "scenewise", "prototype", "prototype_oracle"}
    assert {r["arm"] for r in rows} == arms and len(rows) == 4  # 4 arms x 1 scene
    assert all(r["piece_future_cd"] > 0 and 0 <= r["future_iou"] <= 1 for r in rows)
    assert summary["pass_rule"] in (0.0, 1.0)
    for arm in ("", "scenewise_", "prototype_", "prototype_oracle_"):
        assert math.isfinite(summary[f"{arm}future_cd"]) and summary[f"{arm}log_E_err"] >= 0
    table = [json.loads(x) for x in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {t["arm"] for t in table} == arms
    assert "| objectwise |" in (run / "artifacts/table.md").read_text()
    assert (run / "artifacts/cd_by_arm.png").stat().st_size > 1000
    assert (run / "artifacts/rollout.gif").read_bytes()[:6] == b"GIF89a"
