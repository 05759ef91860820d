"""`rae` end to end through the CLI (smoke preset): pieces, summary, table, plots, grid."""

from __future__ import annotations

import json


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("rae")
    run, summary, rows = done.dir, done.summary, done.records
    pieces = [r["piece"] for r in rows if "piece" in r]
    assert sorted(pieces) == sorted(
        ["encoder", "convae", "classifier", "decoder", "dit", "dit", "width", "width"]
    )
    assert summary["alpha"] == 4.0 and summary["e2_gfd_noshift"] >= 0
    assert summary["gfd"] >= 0 and 0 <= summary["gacc"] <= 1 and summary["rfd"] >= 0
    assert summary["fd_reference_images"] == 359  # the held-out test images, not the 300 trained on
    assert summary["pass_rule"] in (0.0, 1.0)
    assert summary["e1_bound_d64"] == 0.0 and summary["e1_bound_d16"] > 0.5
    assert summary["flops_per_forward"] > summary["flops_plain_dit"] > 0
    curve = [r for r in rows if r.get("curve_point")]
    assert [r["step"] for r in curve] == [10, 20]
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {t.get("arm") for t in table} >= {"rae", "rae_noshift"}
    assert {t["width"] for t in table if "width" in t} == {16, 64}
    assert "| rae |" in (run / "artifacts/table.md").read_text()
    for name in ("samples", "loss_curves", "width_overfit"):
        assert (run / f"artifacts/{name}.png").stat().st_size > 1000
    cache = list((done.runs / "cache" / "rae").glob("*/tree.safetensors"))
    assert len(cache) == 6  # encoder, convae, classifier, decoder, 2 DiTs
