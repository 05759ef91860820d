"""`vudg` end to end through the CLI (smoke preset): records, summary, tables, plots."""

from __future__ import annotations

import json
import math

from rayworks.evals.run import run_evaluation


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("vudg")
    run, summary, rows = done.dir, done.summary, done.records
    labels = {r["run"] for r in rows if "run" in r}
    assert labels == {"lodo-night", "all", "single-cartoon"}
    for key in ("lodo_accuracy", "all_accuracy", "single_accuracy", "accuracy", "acc_temporal"):
        assert 0 <= summary[key] <= 1, key
    assert summary["accuracy"] == summary["lodo_accuracy"] == summary["acc_night"]
    assert summary["pass_rule"] in (0.0, 1.0) and summary["pass_rule"] == (
        summary["pass_ordering"] * summary["pass_annotation"]
    )
    assert (
        summary["e3_het_items"]
        == summary["e3_het_kept"] + summary["e3_het_fixed"] + (summary["e3_het_deleted"])
    )
    data = json.loads((run / "artifacts/dataset.json").read_text())
    # the run's own predictions re-score to the same number through `rayworks eval vudg`
    again = run_evaluation(
        "vudg",
        predictions=str(run / "artifacts/predictions_lodo-night.jsonl"),
        overrides=[f"dataset={data['dataset_dir']}", "domains=[night]"],
    )
    assert (
        math.isclose(again["accuracy"], summary["lodo_accuracy"]) and again["lines_rejected"] == 0
    )
    table = (run / "artifacts/table.md").read_text()
    assert "| lodo |" in table and "residual label errors" in table
    cells = [json.loads(x) for x in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert sum(c.get("questions", 0) for c in cells if c.get("run") == "all") == again["questions"]
    for name in ("accuracy_by_domain", "accuracy_by_type", "annotation_errors"):
        assert (run / f"artifacts/{name}.png").stat().st_size > 1000
