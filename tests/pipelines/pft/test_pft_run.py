"""`pft` end to end through the CLI (smoke preset): records, summary, table and plot."""

from __future__ import annotations

import json

ARMS = {"pft", "source", "adabn", "tent", "shot", "neutral_ce", "oracle"}


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("pft")
    run, summary, records = done.dir, done.summary, done.records
    assert sorted(r["subject"] for r in records) == [0, 1, 2, 3]  # 1 seed x 4 subjects
    assert summary["source_train_accuracy"] > 0.8
    for arm in ARMS - {"pft"}:
        for key in ("target_accuracy", "macro_f1", "expressive_recall"):
            assert 0 <= summary[f"{arm}_{key}"] <= 1
        assert summary[f"{arm}_target_accuracy_lo"] <= summary[f"{arm}_target_accuracy"]
    assert 0 <= summary["target_accuracy"] <= 1 and summary["pass_rule"] in (0.0, 1.0)
    assert summary["source_adapted_params"] == 0 < summary["tent_adapted_params"]
    rows = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    per_subject = [r for r in rows if r["table"] == "subject"]
    assert len(per_subject) == 4 * len(ARMS) and {r["arm"] for r in per_subject} == ARMS
    means = {r["arm"]: r for r in rows if r["table"] == "arm_mean"}
    assert means["pft"]["accuracy"] == summary["target_accuracy"]
    table = (run / "artifacts/table.md").read_text()
    assert "| pft |" in table and "Per-subject accuracy" in table
    assert (run / "artifacts/per_subject.png").stat().st_size > 1000
    cached = list((done.runs / "cache").glob("pft_*/*/*.safetensors"))
    assert {p.parent.parent.name for p in cached} == {"pft_source", "pft_translator"}
