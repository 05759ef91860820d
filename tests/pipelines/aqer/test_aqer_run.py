"""`aqer` end to end through the CLI (smoke preset): records, summary, table and plots."""

from __future__ import annotations

import json

import pytest


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("aqer")
    run, summary, rows = done.dir, done.summary, done.records
    pieces = {(r["piece"], r.get("target"), r.get("g")) for r in rows}
    targets = ["digits/0", "tfim/h=1.0", "brickwork/0"]
    assert {(a, t, g) for a in ("aqer", "hec", "mps") for t in targets for g in (4, 8)} <= pieces
    assert {("step_one", t, None) for t in targets} <= pieces
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert len(table) == 3 * 3 * 2
    for r in table:
        assert 0 <= r["infidelity"] <= 1
        if r["arm"] == "aqer":
            assert (
                r["f1"] <= r["infidelity_step2"] <= r["f2"]
                and r["infidelity"] <= r["finetune_start"]
            )
    assert summary["bound_violations"] == 0 and summary["finetune_worse"] == 0
    aqer8 = [r["infidelity"] for r in table if r["arm"] == "aqer" and r["g"] == 8]
    assert summary["infidelity"] == pytest.approx(sum(aqer8) / 3)
    for arm in ("hec", "mps"):  # in-run arms: bench reads their headline from these keys
        assert summary[f"{arm}_infidelity"] == summary[f"{arm}_infidelity_g8"]
    assert "pass_rule" in summary and 0 <= summary["win_rate"] <= 1
    assert "| digits/0 | 8 | aqer |" in (run / "artifacts/table.md").read_text()
    for name in ("infidelity_vs_g.png", "bounds.png"):
        assert (run / "artifacts" / name).stat().st_size > 1000
