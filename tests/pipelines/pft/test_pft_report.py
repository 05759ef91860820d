"""The report: aggregates and summary keys, the tables and the per-subject plot (also when
every seed gives the same value, where min-max error bars round below zero)."""

from __future__ import annotations

import json

import pytest

from rayworks.pipelines.pft.report import aggregate, summary_of, write_plot, write_table
from rayworks.platform.context import RunContext


def _rows() -> list[dict]:
    rows = []
    for arm, acc in (("pft", 0.7), ("source", 0.1 + 0.2)):  # 0.30000000000000004
        for t in range(2):
            for r in range(3):
                rows.append(
                    {
                        "arm": arm,
                        "subject": t,
                        "replicate": r,
                        "accuracy": acc + 0.1 * t,
                        "macro_f1": acc,
                        "expressive_recall": 0.5,
                        "neutral_recall": 1.0,
                        "predicted_neutral": 0.5,
                        "adapt_predicted_neutral": 1.0,
                        "adapt_seconds": 0.1,
                        "adapted_params": 3,
                    }
                )
    return rows


def test_report_tables_summary_and_plot(tmp_path) -> None:
    rows = _rows()
    agg = aggregate(rows, ["pft", "source"])
    assert agg["pft"]["accuracy"][0] == pytest.approx(0.75)
    lo, hi = agg["pft"]["accuracy"][1:]
    assert lo < 0.75 < hi
    summary = summary_of(agg, "pft")
    assert summary["target_accuracy"] == pytest.approx(0.75)
    assert summary["source_target_accuracy"] == pytest.approx(0.35)
    assert summary["source_macro_f1_lo"] == pytest.approx(0.3)  # zero-width interval
    ctx = RunContext(pipeline="pft", run_dir=tmp_path)
    ctx.artifacts_dir.mkdir(parents=True)
    write_table(ctx, rows, agg, 6)
    lines = [json.loads(x) for x in (ctx.artifacts_dir / "table.jsonl").read_text().splitlines()]
    assert sum(x["table"] == "subject" for x in lines) == 12
    assert [x["arm"] for x in lines if x["table"] == "arm_mean"] == ["pft", "source"]
    assert "| source | 0.300 | 0.400 |" in (ctx.artifacts_dir / "table.md").read_text()
    path = write_plot(ctx.artifacts_dir, rows, ["pft", "source"])
    assert path.stat().st_size > 1000
